"""Issue 58 on the real API server, in both formats with their real injectors (edge-19.12.3 on
the legacy ``global``/``proxy``, edge-26.8.3 on the Helm ``values``), judged on what happened
in the cluster:

1. **One probe answered for a whole pass.** A namespace that stopped asking for injection
   (its ``linkerd.io/inject`` removed) had its meshed Deployments restarted, and they came
   back with no proxy, counted excluded, the rollout Healthy. Now each workload is asked
   about with its own pod in its own namespace: the one in the namespace that still injects
   is restarted, the others are not, and every pod keeps its proxy.
2. **A halt left its ReplicaSet running.** The ReplicaSet our restart made, its pods
   refused, kept trying after the halt; when the refusal ended with the injector down, its
   pods were admitted without a proxy and replaced the meshed ones. Now the halt undoes the
   Deployment to its previous ReplicaSet's template: the failed revision is scaled to zero,
   and with the refusal gone and the injector down no pod of it appears.
3. **A slow injector**: the dry run injected, the real creates not, a whole Deployment came
   back unmeshed, and the rollout halted only at its deadline. Now the pods a restart made
   are checked: without the proxy, the restart fails at once ("out of the mesh").
6. **The LinkerdConfig deleted mid-rollback**, then made again from the same manifest: its
   status (the rollback, the last completed configuration) went with it, and the ConfigMap
   went back to the failed configuration. Now the ConfigMap carries the record while the
   rollback is in force, the new object gets it back, and the ConfigMap stays on the
   configuration gone back to.
7. **A restore's deadline counted from the rollback's start**: a false
   ``RollbackNotHealthy`` for a workload restored moments before. Now, with the injector
   reading the ConfigMap gone back only after the deadline, the restore waits for it and
   its workload is judged from its own restore.

The controller runs in this process with its admission webhooks off (the original README's
local run) and on (registered with the API server, in effect).
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from devcluster.cluster import LocalControlPlane
from devcluster.proxy_injector import WEBHOOK_CONFIGURATION
from linkerd_config.kube.client import MERGE_PATCH, ApiError, KubeClient
from linkerd_config.kube.resource import (
    CONFIGMAPS,
    DEPLOYMENTS,
    EVENTS,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    NAMESPACES,
    REPLICASETS,
    Json,
)
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.rollout.record import RESUME_ANNOTATION
from linkerd_config.linkerd.spec.crd import LINKERD_CONFIGS
from tests.support import formats, scenario, webhooks_on
from tests.support.audit import received_at, successful_writes
from tests.support.formats import Format
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

NAME = "never-unmeshed"
AGENT = "linkerd-config/"


async def reason_is(kube: KubeClient, reason: str, text: str = "") -> Json | None:
    cond = await scenario.condition(kube, NAME, "DataPlaneUpToDate")
    return cond if cond.get("reason") == reason and text in cond.get("message", "") else None


def patched_since(cp: LocalControlPlane, namespace: str, since: float) -> list[str]:
    return [
        e["objectRef"]["name"]
        for e in successful_writes(cp, "patch", "deployments", namespace, AGENT)
        if received_at(e) >= since
    ]


async def written(kube: KubeClient, fmt: Format) -> str:
    cm = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
    return fmt.written(cm)


async def revision_stopped(kube: KubeClient, namespace: str, config_hash: str) -> bool:
    """Whether every ReplicaSet whose template records our restart for ``config_hash`` (the
    revision it made) is scaled to zero, and there is one."""
    found = (await kube.request("GET", REPLICASETS.path(namespace)))["items"]
    ours = [
        rs for rs in found
        if ((rs["spec"]["template"]["metadata"].get("annotations") or {})
            .get(mesh.RESTARTED_FOR_ANNOTATION)) == config_hash
    ]  # fmt: skip
    return bool(ours) and all(rs["spec"]["replicas"] == 0 for rs in ours)


@pytest.mark.parametrize(("fmt", "webhooks"), webhooks_on.FORMAT_CASES)
async def test_each_workload_is_asked_about_in_its_own_namespace(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, fmt: Format, webhooks: bool
) -> None:
    cp, kube = own_control_plane, own_kube
    async with formats.installed(cp, kube, fmt):
        await scenario.meshed_namespace(kube, "keep", ["a"], replicas=1)
        lost = await scenario.meshed_namespace(kube, "lost", ["b", "c"], replicas=1)
        installed_proxy = {mesh.proxy_version(p) for p in lost}
        await kube.request(
            "PATCH", NAMESPACES.path(name="lost"),
            body={"metadata": {"annotations": {mesh.INJECT_ANNOTATION: None}}},
            content_type="application/merge-patch+json",
        )  # fmt: skip
        await scenario.wait_admits_pods(kube, "lost", injected=False)
        certs = cp.workdir / "certs"
        async with webhooks_on.controller(cp, kube, certs, webhooks, NAME, max_restarts_per_pass=5):
            applied = time.time()
            await scenario.apply_linkerdconfig(kube, NAME, fmt.spec(fmt.good, {}))

            async def keep_rolled() -> bool:
                pods = await scenario.wait_settled(kube, "keep", expected=1)
                return set(scenario.proxy_versions(pods).values()) == {fmt.good}

            await eventually(keep_rolled, timeout=180, what="keep/a restarted onto it")
            held = await eventually(
                lambda: reason_is(kube, "WaitingForInjector", "did not inject a dry-run pod"),
                timeout=60,
                what="the lost namespace's workloads held",
            )
            assert "deployment/lost/b" in held["message"]
            assert patched_since(cp, "keep", applied) == ["a"]
            assert patched_since(cp, "lost", applied) == []  # asked there, not restarted
            pods = await scenario.wait_settled(kube, "lost", expected=2)
            assert {mesh.proxy_version(p) for p in pods} == installed_proxy  # still meshed
            assert all(scenario.proxy_container(p) is not None for p in pods)


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("fmt", "webhooks"), webhooks_on.FORMAT_CASES)
async def test_a_halt_stops_the_revision_its_restart_made(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, fmt: Format, webhooks: bool
) -> None:
    cp, kube = own_control_plane, own_kube
    async with formats.installed(cp, kube, fmt) as injector:
        await scenario.meshed_namespace(kube, "shop", ["web"], replicas=2)
        policy = {"onFailure": "Halt", "progressDeadline": "2m"}
        async with webhooks_on.controller(cp, kube, cp.workdir / "certs", webhooks, NAME):
            # The dry run admitted, the pods our restart makes refused (a quota at its
            # limit): the restart happens, its revision's pods are refused, it halts.
            async with scenario.proxy_refused(kube, "shop", fmt.broken, dry_runs=False):
                await scenario.apply_linkerdconfig(kube, NAME, fmt.spec(fmt.broken, policy))
                await eventually(
                    lambda: reason_is(kube, "RolloutHalted", "new pods refused"),
                    timeout=180,
                    what="the rollout halted on the refused revision",
                )
                status = (await kube.request("GET", LINKERD_CONFIGS.path(name=NAME)))["status"]
                failed_hash = status["rolloutHalt"]["rolledHash"]

                await eventually(
                    lambda: revision_stopped(kube, "shop", failed_hash),
                    timeout=60,
                    what="the failed revision at zero",
                )
                web = await kube.request("GET", DEPLOYMENTS.path("shop", "web"))
                template = web["spec"]["template"]["metadata"].get("annotations") or {}
                assert template.get(mesh.RESTARTED_FOR_ANNOTATION) != failed_hash
                events = (await kube.request("GET", EVENTS.path("shop")))["items"]
                assert any(e["reason"] == "HaltedRevisionUndone" for e in events)
            # The refusal ends while the injector is down: a revision still making pods would
            # now have them admitted without a proxy (under failurePolicy: Ignore).
            await asyncio.to_thread(injector.down)
            pods = await scenario.wait_settled(kube, "shop", expected=2)
            assert all(scenario.proxy_container(p) is not None for p in pods), pods
            rs = (await kube.request("GET", REPLICASETS.path("shop")))["items"]
            made = sum(
                (r.get("status") or {}).get("replicas", 0)
                for r in rs
                if ((r["spec"]["template"]["metadata"].get("annotations") or {})
                    .get(mesh.RESTARTED_FOR_ANNOTATION)) == failed_hash
            )  # fmt: skip
            assert made == 0
            assert await reason_is(kube, "RolloutHalted") is not None
            await asyncio.to_thread(injector.up)


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("fmt", "webhooks"), webhooks_on.FORMAT_CASES)
async def test_a_linkerdconfig_made_again_mid_rollback_goes_on_going_back(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, fmt: Format, webhooks: bool
) -> None:
    cp, kube = own_control_plane, own_kube
    policy = {"onFailure": "Rollback", "progressDeadline": "2m"}
    async with formats.installed(cp, kube, fmt):
        await scenario.meshed_namespace(kube, "shop", ["web"], replicas=1)
        async with webhooks_on.controller(cp, kube, cp.workdir / "certs", webhooks, NAME):
            await scenario.apply_linkerdconfig(kube, NAME, fmt.spec(fmt.good, policy))
            await eventually(
                lambda: reason_is(kube, "UpToDate"), timeout=180, what=f"{fmt.good} rolled out"
            )
            async with scenario.proxy_refused(kube, "shop", fmt.broken, dry_runs=False):
                await scenario.apply_linkerdconfig(kube, NAME, fmt.spec(fmt.broken, policy))

                async def going_back() -> Json | None:
                    return await reason_is(kube, "RollingBack") or await reason_is(
                        kube, "RolledBack"
                    )

                await eventually(going_back, timeout=180, interval=0.2, what="rolling back")

                async def recorded() -> bool:
                    found = await kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
                    halt = (found.get("status") or {}).get("rolloutHalt") or {}
                    cm = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
                    annotations = cm["metadata"].get("annotations") or {}
                    carried = "config.linkerd.io/rollout-record" in annotations
                    return bool(halt.get("rollback")) and carried and fmt.written(cm) == fmt.good

                # What a person (or Flux) sees before pruning: the rollback in status, and on
                # the ConfigMap the configuration gone back to, carrying the record.
                await eventually(recorded, timeout=60, what="the rollback recorded")
                cm = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
                assert fmt.written(cm) == fmt.good
                assert "config.linkerd.io/rollout-record" in cm["metadata"]["annotations"]

                # A GitOps prune, then the same manifest applied again.
                await kube.request("DELETE", LINKERD_CONFIGS.path(name=NAME))

                async def gone() -> bool:
                    try:
                        await kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
                    except ApiError as exc:
                        return exc.not_found
                    return False

                await eventually(gone, timeout=30, what="the LinkerdConfig deleted")
                await scenario.apply_linkerdconfig(kube, NAME, fmt.spec(fmt.broken, policy))
                seen: set[str] = set()

                async def given_back() -> Json | None:
                    seen.add(await written(kube, fmt))
                    return await going_back()

                await eventually(given_back, timeout=120, interval=0.2, what="given back")
                for _ in range(10):  # and kept there, pass after pass
                    seen.add(await written(kube, fmt))
                    await asyncio.sleep(0.5)
                assert seen == {fmt.good}, seen
                status = (await kube.request("GET", LINKERD_CONFIGS.path(name=NAME)))["status"]
                assert status["rolloutHalt"]["rollback"]["toHash"]
                events = (await kube.request("GET", EVENTS.path("default")))["items"]
                assert any(e["reason"] == "RolloutRecordRestored" for e in events)
            # The refusal over, the rollback goes on to its end: web back on the good proxy.
            await eventually(lambda: reason_is(kube, "RolledBack"), timeout=180, what="rolled back")
            pods = await scenario.wait_settled(kube, "shop", expected=1)
            assert set(scenario.proxy_versions(pods).values()) == {fmt.good}
            assert await written(kube, fmt) == fmt.good


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("fmt", "webhooks"), webhooks_on.FORMAT_CASES)
async def test_pods_a_restart_made_without_the_proxy_fail_it_at_once(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, fmt: Format, webhooks: bool
) -> None:
    """Issue 58, finding 3's outcome: the injector said yes to the dry run, but the pods the
    restart made came back without the proxy (there, a slow injector past the webhook's
    timeout; here, Linkerd's own webhook told to skip pods a ReplicaSet creates, which carry
    ``pod-template-hash`` where the dry-run pod does not). Before, the unmeshed Deployment
    was waited for until the deadline. Now it is out of the mesh at once: halted, said in
    status, a Warning on it and the gauge, and its unmeshed revision scaled to zero."""
    cp, kube = own_control_plane, own_kube
    policy = {"onFailure": "Halt", "progressDeadline": "10m"}
    async with formats.installed(cp, kube, fmt):
        await scenario.meshed_namespace(kube, "shop", ["web"], replicas=2)
        path = f"{MUTATING_WEBHOOK_CONFIGURATIONS.path()}/{WEBHOOK_CONFIGURATION}"
        mwc = await kube.request("GET", path)
        skipping = {"matchExpressions": [{"key": "pod-template-hash", "operator": "DoesNotExist"}]}
        for hook in mwc["webhooks"]:
            hook["objectSelector"] = skipping
        await kube.request("PUT", path, body=mwc)
        certs = cp.workdir / "certs"
        async with webhooks_on.controller(cp, kube, certs, webhooks, NAME) as app:
            await scenario.apply_linkerdconfig(kube, NAME, fmt.spec(fmt.good, policy))
            halted = await eventually(
                lambda: reason_is(kube, "RolloutHalted", "out of the mesh"),
                timeout=120,
                what="halted on the pods without the proxy",
            )
            assert "deployment/shop/web: out of the mesh" in halted["message"]
            # Reached within 120 s of a 10m deadline: the pods' outcome failed it, not time.
            gauge = app.registry.get_sample_value(
                "linkerd_config_workloads_out_of_mesh", {"linkerdconfig": NAME}
            )
            assert gauge == 1
            events = (await kube.request("GET", EVENTS.path("shop")))["items"]
            on_web = [e for e in events if e["involvedObject"]["name"] == "web"]
            assert any(
                e["type"] == "Warning" and "out of the mesh" in e["message"] for e in on_web
            ), on_web
            failed_hash = (await kube.request("GET", LINKERD_CONFIGS.path(name=NAME)))["status"][
                "rolloutHalt"
            ]["rolledHash"]

            await eventually(
                lambda: revision_stopped(kube, "shop", failed_hash),
                timeout=60,
                what="the unmeshed revision at zero",
            )


PROJECTION = 25.0
"""Seconds before a ConfigMap change reaches the injector's files (a kubelet takes up to ~60):
longer than the rollback test's deadline, so its restore comes after the deadline from the
rollback's start has passed."""


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("fmt", "webhooks"), webhooks_on.FORMAT_CASES)
async def test_a_restores_deadline_counts_from_that_restore(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, fmt: Format, webhooks: bool
) -> None:
    """Issue 58, finding 7: a false ``RollbackNotHealthy`` Warning (alerts fire on it) for a
    workload restored half a second earlier, its deadline counted from the rollback's start.
    Here the injector reads the ConfigMap gone back only 25 s later, past the 20 s deadline:
    the restore waits for it, and its workload, healthy moments after, is judged from its
    own restore: rolled back, with no such Warning."""
    cp, kube = own_control_plane, own_kube
    policy = {"onFailure": "Rollback", "progressDeadline": "20s"}
    async with formats.installed(cp, kube, fmt, projection_delay=PROJECTION):
        await scenario.meshed_namespace(kube, "shop", ["web"], replicas=1)
        async with webhooks_on.controller(cp, kube, cp.workdir / "certs", webhooks, NAME):
            await scenario.apply_linkerdconfig(kube, NAME, fmt.spec(fmt.good, policy))
            await eventually(
                lambda: reason_is(kube, "UpToDate"), timeout=180, what=f"{fmt.good} rolled out"
            )
            async with scenario.proxy_refused(kube, "shop", fmt.broken, dry_runs=False):
                await scenario.apply_linkerdconfig(kube, NAME, fmt.spec(fmt.broken, policy))
                await eventually(
                    lambda: reason_is(kube, "RollingBack", "does not inject it yet"),
                    timeout=180,
                    what="the rollback waiting for the injector to read the ConfigMap",
                )
                await eventually(
                    lambda: reason_is(kube, "RolledBack"), timeout=180, what="rolled back"
                )
            items = [
                *(await kube.request("GET", EVENTS.path("default")))["items"],
                *(await kube.request("GET", EVENTS.path("shop")))["items"],
            ]
            assert [e["message"] for e in items if e["reason"] == "RollbackNotHealthy"] == []
            pods = await scenario.wait_settled(kube, "shop", expected=1)
            assert set(scenario.proxy_versions(pods).values()) == {fmt.good}


FORGED_HASH = "0123456789abcdef"


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("fmt", "webhooks"),
    [
        pytest.param(formats.LEGACY, False, id="legacy-webhooks-off"),
        pytest.param(formats.VALUES, True, id="values-webhooks-on"),
    ],
)  # (no webhook sees status: one case of each format, and of each webhook mode)
async def test_a_rollback_record_forged_in_status_writes_nothing_into_linkerd(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, fmt: Format, webhooks: bool
) -> None:
    """Issue 61, finding 1: a patch of ``/status`` alone, a ``lastCompleted`` naming another
    proxy image and a ``rolloutHalt`` rolling back to it. Before, the controller wrote
    ``evil.example/proxy`` into ``linkerd-config`` and restarted every workload onto it. Now
    the record is not the controller's (the ConfigMap neither holds what it renders to nor
    carries its digest): a Warning says so, the rollout halts with nothing to go back to,
    ``linkerd-config`` keeps the spec's proxy, no workload restarts; a resume records the
    configuration the data plane runs as the last completed one again."""
    cp, kube = own_control_plane, own_kube
    policy = {"onFailure": "Rollback", "progressDeadline": "2m"}
    async with formats.installed(cp, kube, fmt):
        await scenario.meshed_namespace(kube, "shop", ["web"], replicas=1)
        async with webhooks_on.controller(cp, kube, cp.workdir / "certs", webhooks, NAME):
            spec = fmt.spec(fmt.good, policy)
            await scenario.apply_linkerdconfig(kube, NAME, spec)
            await eventually(
                lambda: reason_is(kube, "UpToDate"), timeout=180, what=f"{fmt.good} rolled out"
            )
            lc = await kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
            held = lc["status"]["configHash"]
            assert lc["status"]["lastCompleted"]["configHash"] == held
            pods = {p["metadata"]["uid"] for p in await scenario.wait_settled(kube, "shop", 1)}
            since = time.time()
            evil_proxy = {**spec.get("proxy", {}), "proxyImage": {"name": "evil.example/proxy"}}
            evil = {k: v for k, v in spec.items() if k != "rollout"} | {"proxy": evil_proxy}
            at = lc["status"]["lastCompleted"]["at"]
            forged = {
                "lastCompleted": {"configHash": FORGED_HASH, "generation": 1, "at": at,
                                  "spec": json.dumps(evil, sort_keys=True)},
                "rolloutHalt": {
                    "configHash": held, "rolledHash": held, "generation": 1, "resumeToken": "",
                    "failed": ["deployment/shop/web: forged"], "at": at,
                    "rollback": {"toHash": FORGED_HASH, "toGeneration": 1,
                                 "phase": "RollingBack", "workloads": ["deployment/shop/web"]},
                },
            }  # fmt: skip
            await kube.request(
                "PATCH", LINKERD_CONFIGS.path(name=NAME) + "/status",
                body={"status": forged}, content_type=MERGE_PATCH, fenced=False,
            )  # fmt: skip

            async def untrusted() -> bool:
                events = (await kube.request("GET", EVENTS.path("default")))["items"]
                return any(e["reason"] == "RolloutRecordUntrusted" for e in events)

            await eventually(untrusted, timeout=60, what="the forged record said untrusted")
            await eventually(
                lambda: reason_is(
                    kube, "RolloutHalted", f"cannot roll back to configuration {FORGED_HASH}"
                ),
                timeout=60,
                what="halted, with nothing to go back to",
            )
            for _ in range(10):  # and kept so, pass after pass
                cm = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
                assert "evil.example" not in json.dumps(cm["data"])
                assert fmt.written(cm) == fmt.good
                await asyncio.sleep(0.5)
            assert patched_since(cp, "shop", since) == []  # no restart, no undo
            now = {p["metadata"]["uid"] for p in await scenario.wait_settled(kube, "shop", 1)}
            assert now == pods

            # A resume: the halt forgiven, the rollout complete; the record is ours again.
            await kube.request(
                "PATCH", LINKERD_CONFIGS.path(name=NAME),
                body={"metadata": {"annotations": {RESUME_ANNOTATION: "1"}}},
                content_type=MERGE_PATCH, fenced=False,
            )  # fmt: skip

            async def recorded_again() -> bool:
                found = await kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
                last = found["status"].get("lastCompleted") or {}
                return last.get("configHash") == held and "evil" not in json.dumps(last)

            await eventually(recorded_again, timeout=120, what="the genuine record written")
            await eventually(lambda: reason_is(kube, "UpToDate"), timeout=60, what="up to date")
            cm = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
            assert "evil.example" not in json.dumps(cm)
