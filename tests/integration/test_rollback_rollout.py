"""``onFailure: Rollback`` with Linkerd's real injectors, in both formats (edge-19.12.3 writes
the legacy ``global``/``proxy``; edge-26.8.3 the Helm ``values``), on a control plane of
each run's own, and across a leader killed mid-rollback.

A ValidatingAdmissionPolicy refuses pods carrying the new proxy in namespace ``fragile`` (real
creates only: the controller's dry-run question is admitted, so the restart happens and the
pods it makes are refused). With one restart per pass the rollout fails at ``fragile/a``;
the ConfigMap goes back to the last completed configuration, ``fragile/a`` goes back to its
previous ReplicaSet (its old pods, admitted before, never left) and is Available on the old
proxy, and nothing else is touched.

The leader (a process of its own) is SIGKILLed while the rollback waits to bring
``fragile/a`` back (a second policy refuses, in ``fragile``, pods with the old proxy, dry runs
included: the rollback's own question, asked in ``fragile/a``'s namespace, is refused, so it
cannot move on); once that policy is gone, the next leader finishes it without restarting
anything twice. Once rolled back, a third leader leaves everything as it is: the spec stays
as written, and nothing re-rolls it. Then a plain halt (a new configuration, another refused
proxy, ``onFailure: Halt``) undoes the restart it failed on and survives a killed leader.
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
from linkerd_config.kube.client import MERGE_PATCH, KubeClient
from linkerd_config.kube.resource import CONFIGMAPS, DEPLOYMENTS, EVENTS, Json
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import commands, formats, scenario, webhooks_on
from tests.support.audit import received_at, successful_writes
from tests.support.formats import Format
from tests.support.run_process import RunProcess
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

NAME = "rollback"
FRAGILE, STEADY = "fragile", "steady"
AGENT = "linkerd-config/"
ROLLOUT = {"onFailure": "Rollback", "maxRestartsPerPass": 1, "progressDeadline": "2m"}
LEADER_FLAGS = (
    "--leader-elect-lease-duration", "4s",
    "--leader-elect-renew-deadline", "3s",
    "--leader-elect-retry-period", "1s",
    "--restart-interval", "0.5s",
    "--injector-wait", "600s",
)  # fmt: skip


@contextlib.asynccontextmanager
async def linkerd(cp: LocalControlPlane, kube: KubeClient, fmt: Format) -> AsyncIterator[None]:
    """The format's Linkerd installed, its real injector serving, and the workloads: two
    opted-in Deployments in ``fragile``, one in ``steady``."""
    async with formats.installed(cp, kube, fmt):
        await scenario.meshed_namespace(kube, FRAGILE, ["a", "b"], replicas=1)
        await scenario.meshed_namespace(kube, STEADY, ["c"], replicas=1)
        yield


async def apply(kube: KubeClient, spec: Json) -> None:
    await scenario.apply_linkerdconfig(kube, NAME, spec)


async def up_to_date(kube: KubeClient, reason: str, text: str = "") -> Json | None:
    cond = await scenario.condition(kube, NAME, "DataPlaneUpToDate")
    return cond if cond.get("reason") == reason and text in cond.get("message", "") else None


async def configmap(kube: KubeClient) -> Json:
    found: Json = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
    return found


def leader_process(cp: LocalControlPlane, identity: str, *extra: str) -> RunProcess:
    """The controller as a process of its own, with a deployment's flags (``extra`` last: a
    later flag wins)."""
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
        *extra,
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


async def rolled_out(kube: KubeClient, fmt: Format) -> str:
    """``fmt.good`` applied and its rollout completed: its configuration hash."""
    await apply(kube, fmt.spec(fmt.good, ROLLOUT))

    async def completed() -> Json | None:
        lc = await kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
        status = lc.get("status") or {}
        last = status.get("lastCompleted") or {}
        done = await up_to_date(kube, "UpToDate")
        return status if done and last.get("configHash") == status["configHash"] else None

    good = await eventually(completed, timeout=180, what=f"{fmt.good} rolled out")
    return str(good["configHash"])


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
            good_hash = await rolled_out(kube, fmt)

            # The new proxy's real pods are refused in fragile (its dry runs admitted: the
            # restart happens, and the pods it makes are refused); the old proxy's pods are
            # refused there too, dry runs included, so the rollback's question about
            # fragile/a is refused and it cannot bring it back.
            async with (
                scenario.proxy_refused(kube, FRAGILE, fmt.broken, dry_runs=False),
                scenario.proxy_refused(kube, FRAGILE, fmt.good),
            ):
                applied = time.time()
                await apply(kube, fmt.spec(fmt.broken, ROLLOUT))
                refused = "a dry-run create of deployment/fragile/a's pod was refused"
                waiting = await eventually(
                    lambda: up_to_date(kube, "RollingBack", refused),
                    timeout=120,
                    what="the rollback waiting, its question refused",
                )
                assert scenario.refusal(fmt.good) in waiting["message"]
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
        assert template.get(mesh.RESTARTED_FOR_ANNOTATION) == good_hash
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

        # A plain halt survives a killed leader too. A new attempt needs a new configuration
        # (an edit of spec.rollout alone, onFailure included, is the same attempt, which
        # stays rolled back): proxy `retried`, refused in fragile too, with onFailure: Halt.
        # It fails at fragile/a (restarted, its new pods refused) and the halt undoes that
        # restart; its leader is SIGKILLed; the next one holds the halt and restarts nothing.
        head, _, last = fmt.broken.rpartition(".")
        retried = f"{head}.{int(last) + 1}"  # the release after the broken one
        async with scenario.proxy_refused(kube, FRAGILE, retried, dry_runs=False):
            fourth = leader_process(cp, "fourth")
            try:
                again = time.time()
                await apply(kube, fmt.spec(retried, {**ROLLOUT, "onFailure": "Halt"}))
                halted = await eventually(
                    lambda: up_to_date(kube, "RolloutHalted"), timeout=120, what="halted"
                )
                assert f"rollout of proxy {retried} halted: " in halted["message"]
                assert "deployment/fragile/a: new pods refused:" in halted["message"]
                fourth.proc.kill()
                fourth.proc.wait(timeout=30)
            finally:
                if fourth.proc.poll() is None:
                    fourth.stop()
            retried_hash = (await kube.request("GET", LINKERD_CONFIGS.path(name=NAME)))["status"][
                "rolloutHalt"
            ]["configHash"]
            assert retried_hash != good_hash
            async with leader_in_process(cp, "fifth") as fifth:

                async def leading() -> bool:
                    status = fifth.registry.get_sample_value(
                        "leader_election_master_status", {"name": "linkerd-config-leader"}
                    )
                    return status == 1.0

                await eventually(leading, timeout=60, what="the next leader elected")

                async def undone() -> list[Json] | None:  # by whichever leader came to it
                    found = [
                        e
                        for e in await events(kube, FRAGILE, "HaltedRevisionUndone")
                        if retried_hash in e["message"]
                    ]
                    return found or None

                (undo,) = await eventually(undone, timeout=60, what="fragile/a's restart undone")
                assert undo["involvedObject"]["name"] == "a"
                await asyncio.sleep(3.0)  # several restart intervals as the leader
                assert await up_to_date(kube, "RolloutHalted") is not None
        dep = await kube.request("GET", DEPLOYMENTS.path(FRAGILE, "a"))
        template = dep["spec"]["template"]["metadata"].get("annotations") or {}
        assert template.get(mesh.RESTARTED_FOR_ANNOTATION) == good_hash  # as rolled back
        assert fmt.written(await configmap(kube)) == retried  # halted, not rolled back
        assert patched_since(cp, again) == ["fragile/a", "fragile/a"]  # the restart, its undo


@pytest.mark.parametrize(("fmt", "webhooks"), webhooks_on.FORMAT_CASES)
async def test_an_edit_of_spec_rollout_mid_rollback_leaves_it_in_force(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, fmt: Format, webhooks: bool
) -> None:
    """Issue 58, finding 4: ``paused: true`` set while a failed rollout was rolled back bumped
    the generation, read as a new attempt: 0.6 s later the ConfigMap held the failed proxy
    again, ``rolloutHalt`` was null, the reason ``RollingOut``, and a pod scaled up meanwhile
    got the failed proxy. The configuration hash covers no ``spec.rollout``: pausing, a new
    deadline and unpausing leave the rollback in force, the ConfigMap on the last completed
    configuration (a new pod gets its proxy), and the rollback finishes once the injector is
    seen injecting it. With the webhooks on, each edit passes our defaulting and validation
    (served by that leader) on its way in."""
    cp, kube = own_control_plane, own_kube
    async with linkerd(cp, kube, fmt):
        flags, ca_pem, port = webhooks_on.serving(cp.workdir / "certs")
        # Its flags as a deployment passes them; the webhooks' only with them on.
        leader = leader_process(cp, "only", *(flags if webhooks else ()))
        try:
            async with (
                webhooks_on.in_effect(kube, ca_pem, port) if webhooks else contextlib.nullcontext()
            ):
                applied, record = await edited_mid_rollback(kube, fmt)
        finally:
            if leader.proc.poll() is None:
                leader.stop()
        lc = await kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
        assert lc["status"]["rolloutHalt"]["at"] == record["at"]  # the one rollback, finished
        assert fmt.written(await configmap(kube)) == fmt.good
        # One restart, one restore: nothing restarted onto the failed proxy after the edits.
        assert patched_since(cp, applied) == ["fragile/a", "fragile/a"]
        pods = await scenario.wait_settled(kube, FRAGILE, expected=2)
        assert set(scenario.proxy_versions(pods).values()) == {fmt.good}


async def edited_mid_rollback(kube: KubeClient, fmt: Format) -> tuple[float, Json]:
    """``fmt.good`` rolled out, ``fmt.broken`` applied and its pods refused in ``fragile``:
    while the rollback waits (the old proxy refused there too, its question included), its
    ``spec.rollout`` is edited (paused, a new deadline), steady/c is scaled up; then the old
    proxy is admitted again, it is unpaused, and it is rolled back. When the broken one was
    applied, and the rollback's record."""
    good_hash = await rolled_out(kube, fmt)
    async with scenario.proxy_refused(kube, FRAGILE, fmt.broken, dry_runs=False):
        # The rollback waits: its question about fragile/a, asked in fragile, is refused.
        async with scenario.proxy_refused(kube, FRAGILE, fmt.good):
            applied = time.time()
            await apply(kube, fmt.spec(fmt.broken, ROLLOUT))
            refused = "a dry-run create of deployment/fragile/a's pod was refused"
            waiting = await eventually(
                lambda: up_to_date(kube, "RollingBack", refused),
                timeout=120,
                what="the rollback waiting, its question refused",
            )
            assert f"rolling back to configuration {good_hash}" in waiting["message"]
            lc = await kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
            record: Json = lc["status"]["rolloutHalt"]
            for edit in ({"paused": True}, {"paused": True, "progressDeadline": "3m"}):
                spec = fmt.spec(fmt.broken, {**ROLLOUT, **edit})
                edited = await scenario.apply_linkerdconfig(kube, NAME, spec)
                await still_rolling_back(kube, fmt, edited["metadata"]["generation"], record)

            # A pod made meanwhile (steady/c scaled up) gets the configuration gone back to,
            # once the injector serves it (it reads the ConfigMap's files a moment later).
            async def injects_it() -> bool:
                pod = await scenario.dry_run_pod(kube, STEADY, {})
                return mesh.proxy_version(pod) == fmt.good

            await eventually(injects_it, timeout=60, what=f"the injector on {fmt.good}")
            await kube.request(
                "PATCH", DEPLOYMENTS.path(STEADY, "c"), body={"spec": {"replicas": 2}},
                content_type=MERGE_PATCH,
            )  # fmt: skip
            pods = await scenario.wait_settled(kube, STEADY, expected=2)
            assert set(scenario.proxy_versions(pods).values()) == {fmt.good}
            await still_rolling_back(kube, fmt, edited["metadata"]["generation"], record)
        await apply(kube, fmt.spec(fmt.broken, ROLLOUT))  # unpaused
        await eventually(lambda: up_to_date(kube, "RolledBack"), timeout=120, what="rolled back")
    return applied, record


async def still_rolling_back(kube: KubeClient, fmt: Format, generation: int, record: Json) -> None:
    """Once the controller has seen ``generation``, for 3 s: the rollback ``record`` still in
    force (``RollingBack``), the ConfigMap still on ``fmt.good``."""

    async def seen() -> bool:
        cond = await scenario.condition(kube, NAME, "DataPlaneUpToDate")
        return cond.get("observedGeneration") == generation

    await eventually(seen, timeout=60, what=f"generation {generation} seen")
    until = time.monotonic() + 3.0
    while time.monotonic() < until:
        lc = await kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
        assert lc["status"].get("rolloutHalt") == record, lc["status"]
        cond = await scenario.condition(kube, NAME, "DataPlaneUpToDate")
        assert cond["reason"] == "RollingBack", cond
        assert fmt.written(await configmap(kube)) == fmt.good
        await asyncio.sleep(0.2)
