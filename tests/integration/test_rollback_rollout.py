"""``onFailure: Rollback`` with Linkerd's real injectors, in both formats (edge-19.12.3 writes
the legacy ``global``/``proxy``; edge-26.8.3 the Helm ``values``), on a control plane of
each run's own, and across a leader killed mid-rollback.

A ValidatingAdmissionPolicy refuses pods carrying the new proxy in namespace ``fragile``. With
one restart per pass the rollout fails at ``fragile/a``; the ConfigMap goes back to the last
completed configuration, ``fragile/a`` goes back to its previous ReplicaSet (its old pods,
admitted before, never left) and is Available on the old proxy, and nothing else is touched.

The leader (a process of its own) is SIGKILLed while the rollback waits for the injector to
inject the old proxy again (a second policy refuses the probe's pods, so it cannot move on);
the next leader finishes it without restarting anything twice. Once rolled back, a third
leader leaves everything as it is: the spec stays as written, and nothing re-rolls it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator

import pytest

from devcluster.cluster import LocalControlPlane
from linkerd_config.app import App
from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.resource import CONFIGMAPS, DEPLOYMENTS, EVENTS, NAMESPACES, Json
from linkerd_config.linkerd import rollout
from linkerd_config.linkerd.linkerdconfig_resource import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import commands, formats, scenario
from tests.support.audit import received_at, successful_writes
from tests.support.formats import Format
from tests.support.run_process import RunProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

NAME = "rollback"
FRAGILE, STEADY, PROBE = "fragile", "steady", "probe"
AGENT = "linkerd-config/"
ROLLOUT = {"onFailure": "Rollback", "maxRestartsPerPass": 1, "progressDeadline": "2m"}
LEADER_FLAGS = (
    "--leader-elect-lease-duration", "4s",
    "--leader-elect-renew-deadline", "3s",
    "--leader-elect-retry-period", "1s",
    "--restart-interval", "0.5s",
    "--injector-wait", "600s",
    "--probe-namespace", PROBE,
)  # fmt: skip


@contextlib.asynccontextmanager
async def linkerd(cp: LocalControlPlane, kube: KubeClient, fmt: Format) -> AsyncIterator[None]:
    """The format's Linkerd installed, its real injector serving, and the workloads: two
    opted-in Deployments in ``fragile``, one in ``steady``, and a meshed namespace for the
    controller's injector probes."""
    async with formats.installed(cp, kube, fmt):
        await scenario.meshed_namespace(kube, FRAGILE, ["a", "b"], replicas=1)
        await scenario.meshed_namespace(kube, STEADY, ["c"], replicas=1)
        meshed = {"metadata": {"name": PROBE, "annotations": {"linkerd.io/inject": "enabled"}}}
        await scenario.create(kube, NAMESPACES.path(), meshed)
        await scenario.wait_admits_pods(kube, PROBE, injected=True)
        yield


async def apply(kube: KubeClient, spec: Json) -> None:
    await scenario.apply_linkerdconfig(kube, NAME, spec)


async def up_to_date(kube: KubeClient, reason: str, text: str = "") -> Json | None:
    cond = await scenario.condition(kube, NAME, "DataPlaneUpToDate")
    return cond if cond.get("reason") == reason and text in cond.get("message", "") else None


async def configmap(kube: KubeClient) -> Json:
    found: Json = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
    return found


def leader_process(cp: LocalControlPlane, identity: str) -> RunProcess:
    argv = [
        sys.executable, "-m", "linkerd_config", "run",
        "--kubeconfig", str(cp.kubeconfig),
        "--health-probe-bind-address", "127.0.0.1:0",
        "--metrics-bind-address", "127.0.0.1:0",
        "--enable-webhooks", "false",
        "--serve-conversion", "false",  # the tests' CRD converts through conversion_server
        "--log-format", "json",
        "--identity", identity,
        *LEADER_FLAGS,
    ]  # fmt: skip
    return RunProcess(argv, {"PATH": "/usr/bin:/bin"})


def leader_in_process(
    cp: LocalControlPlane, identity: str
) -> contextlib.AbstractAsyncContextManager[App]:
    return scenario.controller(cp, identity, *LEADER_FLAGS)


def patched_since(cp: LocalControlPlane, since: float) -> list[str]:
    """The controller's successful Deployment patches since ``since``, oldest first."""
    return [
        f"{ns}/{e['objectRef']['name']}"
        for ns in (FRAGILE, STEADY)
        for e in successful_writes(cp, "patch", "deployments", ns, AGENT)
        if received_at(e) >= since
    ]


async def events(kube: KubeClient, namespace: str, reason: str) -> list[Json]:
    items = (await kube.request("GET", EVENTS.path(namespace)))["items"]
    return [e for e in items if e["reason"] == reason]


@pytest.mark.parametrize("fmt", formats.FORMATS, ids=formats.IDS)
async def test_a_refused_proxy_is_rolled_back_across_a_killed_leader(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, fmt: Format
) -> None:
    cp, kube = own_control_plane, own_kube
    async with linkerd(cp, kube, fmt):
        first = leader_process(cp, "first")
        try:
            await apply(kube, fmt.spec(fmt.good, ROLLOUT))

            async def completed() -> Json | None:
                lc = await kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
                status = lc.get("status") or {}
                last = status.get("lastCompleted") or {}
                done = await up_to_date(kube, "UpToDate")
                return status if done and last.get("configHash") == status["configHash"] else None

            good = await eventually(completed, timeout=180, what=f"{fmt.good} rolled out")
            good_hash = good["configHash"]

            # The new proxy is refused in fragile; the injector probe (in namespace probe)
            # cannot confirm the old proxy once the rollback needs it.
            async with (
                scenario.proxy_refused(kube, FRAGILE, fmt.broken),
                scenario.proxy_refused(kube, PROBE, fmt.good),
            ):
                applied = time.time()
                await apply(kube, fmt.spec(fmt.broken, ROLLOUT))
                waiting = await eventually(
                    lambda: up_to_date(kube, "RollingBack", "cannot confirm"),
                    timeout=120,
                    what="the rollback waiting for the injector",
                )
                assert f"rolling back to configuration {good_hash}" in waiting["message"]
                assert "deployment/fragile/a: new pods refused:" in waiting["message"]
                assert scenario.refusal(fmt.broken) in waiting["message"]
                # Back to the last completed configuration already; the spec as written.
                assert fmt.written(await configmap(kube)) == fmt.good
                assert patched_since(cp, applied) == ["fragile/a"]
                first.proc.kill()  # SIGKILL: no Lease released, no status written
                first.proc.wait(timeout=30)
        finally:
            if first.proc.poll() is None:
                first.stop()

        async with leader_in_process(cp, "second") as second:
            done = await eventually(
                lambda: up_to_date(kube, "RolledBack"), timeout=120, what="rolled back"
            )
            assert (
                f"rolled back to configuration {good_hash} (proxy {fmt.good})" in (done["message"])
            )
            labels = {"linkerdconfig": NAME}
            metric = second.registry.get_sample_value
            assert metric("linkerd_config_rollout_rolled_back", labels) == 1.0
        # One restart, one restore, by two leaders; nothing else touched.
        assert patched_since(cp, applied) == ["fragile/a", "fragile/a"]

        lc = await kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
        assert lc["spec"]["proxy"]["proxyVersion"] == fmt.broken
        assert lc["status"]["configHash"] == good_hash
        assert lc["status"]["rolloutHalt"]["rollback"]["phase"] == "RolledBack"
        dep = await kube.request("GET", DEPLOYMENTS.path(FRAGILE, "a"))
        template = dep["spec"]["template"]["metadata"].get("annotations") or {}
        assert template.get(rollout.RESTARTED_FOR_ANNOTATION) == good_hash
        conditions = {c["type"]: c for c in dep["status"].get("conditions") or ()}
        assert conditions["Available"]["status"] == "True"
        assert "ReplicaFailure" not in conditions
        pods = await scenario.wait_settled(kube, FRAGILE, expected=2)
        assert set(scenario.proxy_versions(pods).values()) == {fmt.good}
        rolled = await events(kube, FRAGILE, "WorkloadRolledBack")
        assert [e["involvedObject"]["name"] for e in rolled] == ["a"]
        said = [e["reason"] for e in await events(kube, "default", "RollingBack")]
        said += [e["reason"] for e in await events(kube, "default", "RolledBack")]
        assert said == ["RollingBack", "RolledBack"]
        code, report = await commands.status_json(cp.kubeconfig)
        assert code == 2
        (mine,) = [r for r in report if r["linkerdConfig"] == NAME]
        assert [h.split(":", 1)[0] for h in mine["halted"]] == ["deployment/fragile/a"]
        # Measured against what it returned to: nothing drifted, nothing stale.
        assert mine["rolledBack"] == f"rolled back to configuration {good_hash} (proxy {fmt.good})"
        assert (mine["drifted"], mine["stale"]) == ([], [])

        # A later leader leaves a rolled-back configuration as it is (no re-rollout).
        before = time.time()
        async with leader_in_process(cp, "third"):
            await eventually(
                lambda: up_to_date(kube, "RolledBack"), timeout=60, what="still rolled back"
            )
            await asyncio.sleep(3.0)  # several restart intervals
        assert patched_since(cp, before) == []
        assert fmt.written(await configmap(kube)) == fmt.good

        # A plain halt survives a killed leader too: a new attempt (a new generation) with
        # onFailure: Halt fails at fragile/a again; its leader is SIGKILLed; the next one
        # holds the halt and restarts nothing.
        async with scenario.proxy_refused(kube, FRAGILE, fmt.broken):
            fourth = leader_process(cp, "fourth")
            try:
                again = time.time()
                await apply(kube, fmt.spec(fmt.broken, {**ROLLOUT, "onFailure": "Halt"}))
                await eventually(
                    lambda: up_to_date(kube, "RolloutHalted"), timeout=120, what="halted"
                )
                fourth.proc.kill()
                fourth.proc.wait(timeout=30)
            finally:
                if fourth.proc.poll() is None:
                    fourth.stop()
            async with leader_in_process(cp, "fifth") as fifth:

                async def leading() -> bool:
                    status = fifth.registry.get_sample_value(
                        "leader_election_master_status", {"name": "linkerd-config-leader"}
                    )
                    return status == 1.0

                await eventually(leading, timeout=60, what="the next leader elected")
                await asyncio.sleep(3.0)  # several restart intervals as the leader
                assert await up_to_date(kube, "RolloutHalted") is not None
        assert patched_since(cp, again) == ["fragile/a"]
