"""Today's Linkerd (edge-26.8.3, the Helm ``values`` format) under what once went wrong on it,
with its real injector and its own ``linkerd install`` ConfigMaps, on a control plane of this
module's own:

* ``spec.rollout`` pauses and paces a rollout (it was refused as a Helm value);
* each restart is an Event on its workload, and each pass one on the LinkerdConfig;
* a refused injector question (asked in the workload's own namespace) says why (the API
  server's reason) in status and an Event, restarts nothing there, and is no progress: at
  ``progressDeadline`` the rollout halts;
* a deleted ``linkerd-identity-trust-roots`` comes back whole, the install's labels and
  annotations included, or, with no copy of it kept, ``Ready=False`` names it and nothing
  restarts;
* a proxy whose pods a policy refuses halts the rollout at the first workload that cannot
  come back, undoes that workload's restart, names it everywhere, and resumes on the
  documented annotation.

The tests run in order on one cluster; each moves the proxy to a version of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import yaml

from devcluster.cluster import ControlPlaneOptions, LocalControlPlane
from devcluster.linkerd_install import LinkerdInstall, render_install
from linkerd_config.app import App
from linkerd_config.kube.client import MERGE_PATCH, ApiError, KubeClient
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.resource import CONFIGMAPS, DEPLOYMENTS, EVENTS, Json
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.rollout.record import RESUME_ANNOTATION
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import commands, scenario
from tests.support.audit import received_at, successful_writes
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

NS = "shop"
APPS = ("web", "api")
NAME = "modern"
AGENT = "linkerd-config/"
ROOTS = "linkerd-identity-trust-roots"
QUOTA_NS, QUOTA_APP = "quota", "q"
QUOTA = "exceeded quota"
"""What the API server says of a pod a ResourceQuota refuses."""
DEADLINE = "30s"
"""The progressDeadline of the refused rollout."""
FALLBACK = 8.0
"""The fallback wait (``--injector-wait``): a refused question is not ended by it."""


@pytest.fixture(scope="module")
def cp() -> Iterator[LocalControlPlane]:
    with LocalControlPlane(ControlPlaneOptions(workloads=True)) as plane:
        yield plane


@pytest.fixture(scope="module")
async def world(cp: LocalControlPlane) -> AsyncIterator[tuple[KubeClient, LinkerdInstall]]:
    """edge-26.8.3 installed by its own CLI's rendering, its injector serving, two opted-in
    Deployments in a meshed namespace."""
    install = await asyncio.to_thread(render_install, "edge-26.8.3")
    access = await load_access(str(cp.kubeconfig))
    async with KubeClient(access, user_agent="modern-rollout-tests") as kube:
        await scenario.install_crd(kube)
        await scenario.install_linkerd(kube, install)
        template = install.injector_webhook
        async with scenario.linkerd_injector(cp, "edge-26.8.3", webhook_template=template):
            await scenario.meshed_namespace(kube, NS, APPS, replicas=1)
            yield kube, install


def controller(
    cp: LocalControlPlane, **options: Any
) -> contextlib.AbstractAsyncContextManager[App]:
    return scenario.controller(cp, "modern-rollout", **options)


async def apply(kube: KubeClient, spec: Json) -> None:
    await scenario.apply_linkerdconfig(kube, NAME, spec)


async def condition(kube: KubeClient, type_: str) -> Json:
    return await scenario.condition(kube, NAME, type_)


async def ready(kube: KubeClient) -> Json | None:
    cond = await condition(kube, "Ready")
    current = cond.get("status") == "True" and cond.get("observedGeneration") == cond["generation"]
    return cond if current else None


async def values(kube: KubeClient) -> Json:
    cm = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
    loaded: Json = yaml.safe_load(cm["data"]["values"])
    return loaded


def restarts(cp: LocalControlPlane) -> list[Json]:
    return successful_writes(cp, "patch", "deployments", NS, AGENT)


def quota_restarts(cp: LocalControlPlane, since: float) -> list[str]:
    return [
        e["objectRef"]["name"]
        for e in successful_writes(cp, "patch", "deployments", QUOTA_NS, AGENT)
        if received_at(e) >= since
    ]


async def events(kube: KubeClient, namespace: str, reason: str) -> list[Json]:
    items = (await kube.request("GET", EVENTS.path(namespace)))["items"]
    return [e for e in items if e["reason"] == reason]


# -- 1. spec.rollout pauses and paces a modern rollout; Events where users look ----------------


async def test_spec_rollout_pauses_and_paces_a_values_rollout_with_events_on_each_workload(
    cp: LocalControlPlane, world: tuple[KubeClient, LinkerdInstall]
) -> None:
    kube, _ = world
    async with controller(cp, restart_interval=0.5, injector_wait=600):
        await apply(kube, {"proxy": {"proxyVersion": "edge-26.8.4"}, "rollout": {"paused": True}})

        async def written() -> bool:
            return bool((await values(kube))["proxy"]["image"]["version"] == "edge-26.8.4")

        await eventually(written, timeout=60, what="values written while paused")

        async def paused() -> Json | None:
            up = await condition(kube, "DataPlaneUpToDate")
            return up if up.get("reason") == "Paused" else None

        held = await eventually(paused, timeout=60, what="status says Paused")
        assert f"{len(APPS)} workload(s)" in held["message"]
        await asyncio.sleep(3.0)  # several intervals: still nothing restarted
        assert restarts(cp) == []

        pacing = {"paused": False, "maxRestartsPerPass": 1, "restartInterval": "3s"}
        await apply(kube, {"proxy": {"proxyVersion": "edge-26.8.4"}, "rollout": pacing})
        await eventually(lambda: ready(kube), timeout=120, what="rolled out")
        patched = restarts(cp)
        assert sorted(e["objectRef"]["name"] for e in patched) == sorted(APPS)
        gap = received_at(patched[1]) - received_at(patched[0])
        assert gap >= 2.9, f"passes {gap:.2f}s apart, the spec says 3s"

        on_workloads = await events(kube, NS, "WorkloadRestarted")
        assert sorted(e["involvedObject"]["name"] for e in on_workloads) == sorted(APPS)
        assert {e["involvedObject"]["kind"] for e in on_workloads} == {"Deployment"}
        assert all("edge-26.8.4" in e["message"] for e in on_workloads)
        passes = [
            e
            for e in await events(kube, "default", "WorkloadsRestarted")
            if e["involvedObject"]["name"] == NAME
        ]
        assert len(passes) == len(APPS)  # one pass each: one restart per pass


# -- 2. a refused injector question says why, and is no progress ----------------------------


async def test_a_refused_injector_probe_names_the_api_servers_reason(
    cp: LocalControlPlane, world: tuple[KubeClient, LinkerdInstall]
) -> None:
    """A ResourceQuota of no pods in a workload's own namespace: the injector is asked there
    (a dry-run create of that workload's pod), and the API server refuses it. Its new pods
    would be refused too, so it is not restarted, however long the fallback wait; shop's
    workloads, asked in shop, are. Refused is no progress: at ``progressDeadline`` the
    rollout halts, and status, the Events and ``status.rolloutHalt`` name the API server's
    reason. The quota gone and the rollout resumed, it completes."""
    kube, _ = world
    await scenario.meshed_namespace(kube, QUOTA_NS, [QUOTA_APP], replicas=1)
    quota = {"metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}}
    quotas = f"/api/v1/namespaces/{QUOTA_NS}/resourcequotas"
    await scenario.create(kube, quotas, quota)

    async def enforced() -> bool:  # admission charges pods once the quota has a status
        found = await kube.request("GET", f"{quotas}/no-pods")
        return bool((found.get("status") or {}).get("hard"))

    await eventually(enforced, timeout=30, what="the quota enforced")
    workload = f"deployment/{QUOTA_NS}/{QUOTA_APP}"
    spec = {"proxy": {"proxyVersion": "edge-26.8.5"}, "rollout": {"progressDeadline": DEADLINE}}
    async with controller(cp, restart_interval=0.5, injector_wait=FALLBACK):
        applied = time.time()
        await apply(kube, spec)

        async def waiting() -> Json | None:
            up = await condition(kube, "DataPlaneUpToDate")
            said = up.get("message", "")
            return up if up.get("reason") == "WaitingForInjector" and QUOTA in said else None

        cond = await eventually(waiting, timeout=60, what="status names the refusal")
        assert (
            f"a dry-run create of {workload}'s pod was refused (403 Forbidden: "
            in (cond["message"])
        )
        assert "refused new pods are no progress: the rollout fails in " in cond["message"]
        assert f"(progressDeadline {DEADLINE})" in cond["message"]

        async def warned() -> list[Json] | None:
            found = [
                e
                for e in await events(kube, "default", "NewPodsRefused")
                if e["involvedObject"]["name"] == NAME
            ]
            return found or None

        (event,) = await eventually(warned, timeout=30, what="a Warning Event with the reason")
        assert event["type"] == "Warning" and QUOTA in event["message"]
        assert workload in event["message"]

        async def halted() -> Json | None:
            up = await condition(kube, "DataPlaneUpToDate")
            return up if up.get("reason") == "RolloutHalted" else None

        cond = await eventually(halted, timeout=120, what="halted at progressDeadline")
        failed = f"{workload}: new pods refused for {DEADLINE} (no progress): 403 Forbidden: "
        assert failed in cond["message"] and QUOTA in cond["message"]
        lc = await kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
        (record,) = lc["status"]["rolloutHalt"]["failed"]
        assert record.startswith(failed) and QUOTA in record
        on_workload = await events(kube, QUOTA_NS, "RolloutHalted")
        assert [e["involvedObject"]["name"] for e in on_workload] == [QUOTA_APP]
        assert "its new pods were refused" in on_workload[0]["message"]
        assert QUOTA in on_workload[0]["message"]
        # Never restarted into the refusal (well past the fallback wait); shop's, asked in
        # their own namespace, were.
        assert quota_restarts(cp, applied) == []
        shop = [e["objectRef"]["name"] for e in restarts(cp) if received_at(e) >= applied]
        assert sorted(shop) == sorted(APPS)

    # The quota gone, resumed by the documented annotation: the workload rolls too.
    await kube.request("DELETE", f"{quotas}/no-pods")

    async def admitted() -> bool:
        try:
            await scenario.dry_run_pod(kube, QUOTA_NS, {})
        except ApiError:
            return False
        return True

    await eventually(admitted, timeout=30, what="the quota gone")
    async with controller(cp, restart_interval=0.5, injector_wait=FALLBACK):
        await kube.request(
            "PATCH",
            LINKERD_CONFIGS.path(name=NAME),
            body={"metadata": {"annotations": {RESUME_ANNOTATION: "quota"}}},
            content_type=MERGE_PATCH,
        )
        await eventually(lambda: ready(kube), timeout=120, what="rolled out once resumed")
    assert quota_restarts(cp, applied) == [QUOTA_APP]


# -- 3. deleted trust roots ------------------------------------------------------------------


async def delete_configmaps(kube: KubeClient, *names: str) -> None:
    for name in names:
        with contextlib.suppress(ApiError):
            await kube.request("DELETE", CONFIGMAPS.path("linkerd", name))


async def test_deleted_trust_roots_come_back_whole_or_are_named(
    cp: LocalControlPlane, world: tuple[KubeClient, LinkerdInstall]
) -> None:
    kube, install = world
    original = install.get("ConfigMap", ROOTS)
    async with controller(cp, restart_interval=0.5, injector_wait=600):
        await apply(kube, {"proxy": {"proxyVersion": "edge-26.8.6"}})
        await eventually(lambda: ready(kube), timeout=120, what="rolled out")

        async def copied() -> bool:
            with contextlib.suppress(ApiError):
                await kube.request("GET", CONFIGMAPS.path("linkerd", f"{ROOTS}-preserved"))
                return True
            return False

        await eventually(copied, timeout=30, what="the trust roots kept aside")

    # With the controller stopped, both ConfigMaps Linkerd's injector reads are deleted.
    await delete_configmaps(kube, "linkerd-config", ROOTS)
    async with controller(cp, restart_interval=0.5, injector_wait=600):

        async def restored() -> Json | None:
            with contextlib.suppress(ApiError):
                found: Json = await kube.request("GET", CONFIGMAPS.path("linkerd", ROOTS))
                return found
            return None

        roots = await eventually(restored, timeout=60, what="the trust roots restored")
        assert roots["data"] == original["data"]
        for field in ("labels", "annotations"):
            assert roots["metadata"].get(field) == original["metadata"][field], field
        await eventually(lambda: ready(kube), timeout=60, what="Ready again")
        assert (await values(kube))["proxy"]["image"]["version"] == "edge-26.8.6"

    # And with no copy of them either: named, and nothing restarted.
    await delete_configmaps(kube, ROOTS, f"{ROOTS}-preserved")
    before = len(restarts(cp))
    async with controller(cp, restart_interval=0.5, injector_wait=600):
        await apply(kube, {"proxy": {"proxyVersion": "edge-26.8.7"}})

        async def named() -> Json | None:
            cond = await condition(kube, "Ready")
            return cond if cond.get("reason") == "ConfigMapMissing" else None

        cond = await eventually(named, timeout=60, what="Ready=False naming the trust roots")
        assert cond["status"] == "False" and f"linkerd/{ROOTS}" in cond["message"]
        code, report = await commands.status_json(cp.kubeconfig)
        assert code == 2
        (mine,) = [r for r in report if r["linkerdConfig"] == NAME]
        assert mine["missing"] == [ROOTS]
        await asyncio.sleep(2.0)
        assert len(restarts(cp)) == before  # no pod could be injected: none restarted

        # `linkerd upgrade` (here: the install's own object) puts it back; all proceeds.
        await scenario.create(kube, CONFIGMAPS.path("linkerd"), original)
        await eventually(lambda: ready(kube), timeout=120, what="Ready once it is back")
        assert len(restarts(cp)) > before


# -- 4. a rollout that stops itself: new pods refused, halted, then resumed ------------------

FRAGILE = "fragile"
BROKEN = "edge-26.8.8"
REFUSAL = scenario.refusal(BROKEN)


def proxy_refused(kube: KubeClient) -> contextlib.AbstractAsyncContextManager[None]:
    """Real creates of BROKEN's pods refused in fragile, its dry runs admitted: the question
    asked in fragile says yes, the restart happens, and the pods it makes are refused."""
    return scenario.proxy_refused(kube, FRAGILE, BROKEN, dry_runs=False)


async def test_refused_new_pods_halt_the_rollout_until_it_is_resumed(
    cp: LocalControlPlane, world: tuple[KubeClient, LinkerdInstall]
) -> None:
    kube, _ = world
    await scenario.meshed_namespace(kube, FRAGILE, ["a", "b"], replicas=1)
    # The question, asked in fragile, is admitted (a dry run): the refusal is the pods'.
    options = {"restart_interval": 0.5, "injector_wait": 600}
    async with proxy_refused(kube), controller(cp, **options) as app:
        applied = time.time()
        spec = {"proxy": {"proxyVersion": BROKEN}, "rollout": {"maxRestartsPerPass": 1}}
        await apply(kube, spec)

        async def halted() -> Json | None:
            up = await condition(kube, "DataPlaneUpToDate")
            return up if up.get("reason") == "RolloutHalted" else None

        cond = await eventually(halted, timeout=120, what="the rollout halted")
        assert "deployment/fragile/a: new pods refused:" in cond["message"]
        assert REFUSAL in cond["message"]
        ready_now = await condition(kube, "Ready")
        assert (ready_now["status"], ready_now["reason"]) == ("False", "RolloutHalted")

        # The halt stops what the restart started: fragile/a back on its previous
        # ReplicaSet's template, so the refused revision makes no more pods.
        async def undone() -> list[Json] | None:
            return await events(kube, FRAGILE, "HaltedRevisionUndone") or None

        (undo,) = await eventually(undone, timeout=30, what="the halted revision undone")
        assert undo["involvedObject"]["name"] == "a" and undo["type"] == "Warning"
        dep = await kube.request("GET", DEPLOYMENTS.path(FRAGILE, "a"))
        template = dep["spec"]["template"]["metadata"].get("annotations") or {}
        assert mesh.RESTARTED_FOR_ANNOTATION not in template
        await asyncio.sleep(3.0)  # several intervals: nothing more restarted
        patched = [
            f"{e['objectRef']['namespace']}/{e['objectRef']['name']}"
            for ns in (FRAGILE, NS)
            for e in successful_writes(cp, "patch", "deployments", ns, AGENT)
            if received_at(e) >= applied
        ]
        assert patched == ["fragile/a", "fragile/a"]  # its restart, and that undo
        on_config = [
            e
            for e in await events(kube, "default", "RolloutHalted")
            if e["involvedObject"]["name"] == NAME and f"proxy {BROKEN} " in e["message"]
        ]  # this attempt's (test 2's halt, of another proxy, is on the same LinkerdConfig)
        assert len(on_config) == 1 and on_config[0]["type"] == "Warning"
        on_workload = await events(kube, FRAGILE, "RolloutHalted")
        assert [e["involvedObject"]["name"] for e in on_workload] == ["a"]
        assert REFUSAL in on_workload[0]["message"]
        assert app.registry.get_sample_value("linkerd_config_rollouts_halted_total") == 1.0
        code, report = await commands.status_json(cp.kubeconfig)
        assert code == 2
        (mine,) = [r for r in report if r["linkerdConfig"] == NAME]
        assert [h.split(":", 1)[0] for h in mine["halted"]] == ["deployment/fragile/a"]

    # The cause gone, resumed by the documented annotation: the rest rolls on.
    async def lifted() -> bool:
        annotations = {"linkerd.io/inject": "disabled", "linkerd.io/proxy-version": BROKEN}
        try:
            await scenario.dry_run_pod(kube, FRAGILE, annotations, dry_run=False)
        except ApiError:
            return False
        return True

    await eventually(lifted, timeout=30, what="the policy lifted")
    async with controller(cp, **options):
        await kube.request(
            "PATCH",
            LINKERD_CONFIGS.path(name=NAME),
            body={"metadata": {"annotations": {RESUME_ANNOTATION: "1"}}},
            content_type=MERGE_PATCH,
        )
        await eventually(lambda: ready(kube), timeout=180, what="rolled out once resumed")
    after = {
        e["objectRef"]["name"]
        for e in successful_writes(cp, "patch", "deployments", FRAGILE, AGENT)
    }
    assert after == {"a", "b"}
