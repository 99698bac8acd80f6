"""Pods that never become Ready (issue 23): a rollout's health gate waits for them, its
``progressDeadline`` fails them, and the rollout halts until it is resumed.

kwok plays the Stage objects in the API server (``devcluster/kwok_stages.py``); a Stage of
the test's (``tests/support/unready_stage.py``) keeps every new pod whose
``linkerd.io/proxy-version`` annotation (set by Linkerd's injector on each pod it injects, in
edge-19.12.3 and edge-26.8.3 alike: ``pkg/inject/inject.go``, ``injectObjectMeta``) names the
new proxy Running but not Ready. With Linkerd's real injector and one restart per pass:

* within the deadline the pass waits: status names the restarted workload and what it waits
  for, and no second workload is restarted;
* after it the rollout halts: status, Events and the halt metric name the workload, "not
  complete 20s after its restart", and the audit log shows no other restart;
* the halt stops what the restart started: the workload goes back to its previous
  ReplicaSet's template (``HaltedRevisionUndone``), its stuck pod goes, its old pod stays
  Ready; the halt holds until the resume annotation, then (the Stage deleted) the workload is
  restarted again, the rest rolls, and the rollout completes.

The same test on each config format (legacy ``global``/``proxy`` with edge-19.12.3's injector,
Helm ``values`` with edge-26.8.3's), each on a control plane of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from devcluster.cluster import ControlPlaneOptions, LocalControlPlane
from devcluster.linkerd_install import render_install
from linkerd_config.app import App
from linkerd_config.kube.client import MERGE_PATCH, KubeClient
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.resource import DEPLOYMENTS, EVENTS, PODS, Json
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.rollout.record import RESUME_ANNOTATION
from linkerd_config.linkerd.spec.crd import HALT_FIELD
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import scenario
from tests.support.audit import audit_entries, audited_resource, received_at, successful_writes
from tests.support.samples import sample
from tests.support.unready_stage import is_ready, kept_unready, pods_never_ready
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

NS = "unready"
APPS = ("a", "b")
NAME = "unready-pods"
STAGE = "new-proxy-never-ready"
DEADLINE = "20s"
CONTROLLER_AGENT = "linkerd-config/"
TEST_AGENT = "unready-pods-tests"
PROXY_VERSION_ANNOTATION = "linkerd.io/proxy-version"
"""What Linkerd's injector stamps on each pod it injects (``k8s.ProxyVersionAnnotation``)."""


@dataclass(frozen=True)
class Release:
    """A Linkerd release whose real injector serves, and the proxy the rollout moves to."""

    tag: str
    new_proxy: str

    @property
    def legacy(self) -> bool:
        return self.tag == "edge-19.12.3"

    def spec(self) -> Json:
        """The LinkerdConfig spec moving the proxy to ``new_proxy``, one restart per pass."""
        if self.legacy:
            spec: Json = sample("edge_19.12.3.yaml")["spec"]
            spec["proxy"]["proxyVersion"] = self.new_proxy
        else:
            spec = {"proxy": {"proxyVersion": self.new_proxy}}
        spec["rollout"] = {"maxRestartsPerPass": 1, "progressDeadline": DEADLINE}
        return spec


RELEASES = (
    Release("edge-19.12.3", "edge-19.12.3"),  # edge-19.12.1's pods moved to edge-19.12.3
    Release("edge-26.8.3", "edge-26.8.4"),
)


@pytest.fixture(scope="module", params=RELEASES, ids=[r.tag for r in RELEASES])
def release(request: pytest.FixtureRequest) -> Release:
    found: Release = request.param
    return found


@pytest.fixture(scope="module")
def cp(release: Release) -> Iterator[LocalControlPlane]:
    with LocalControlPlane(ControlPlaneOptions(workloads=True)) as plane:
        yield plane


@contextlib.asynccontextmanager
async def linkerd(cp: LocalControlPlane, kube: KubeClient, release: Release) -> AsyncIterator[None]:
    """Linkerd's configuration as its install wrote it, and its real injector serving."""
    if release.legacy:
        await scenario.install_linkerd_edge_19_12_1(kube)
        async with scenario.linkerd_injector(cp, release.tag):
            yield
        return
    install = await asyncio.to_thread(render_install, release.tag)
    await scenario.install_linkerd(kube, install)
    template = install.injector_webhook
    async with scenario.linkerd_injector(cp, release.tag, webhook_template=template):
        yield


@pytest.fixture(scope="module")
async def kube(cp: LocalControlPlane, release: Release) -> AsyncIterator[KubeClient]:
    """The release installed, its injector serving, an opted-in Deployment of one pod for
    each of ``APPS`` in a meshed namespace."""
    access = await load_access(str(cp.kubeconfig))
    async with KubeClient(access, user_agent=TEST_AGENT) as client:
        await scenario.install_crd(client)
        async with linkerd(cp, client, release):
            await scenario.meshed_namespace(client, NS, APPS, replicas=1)
            yield client


def controller(cp: LocalControlPlane) -> contextlib.AbstractAsyncContextManager[App]:
    return scenario.controller(cp, "unready-pods")


async def apply(kube: KubeClient, spec: Json) -> None:
    await scenario.apply_linkerdconfig(kube, NAME, spec)


async def condition(kube: KubeClient, type_: str) -> Json:
    return await scenario.condition(kube, NAME, type_)


async def with_reason(kube: KubeClient, reason: str) -> Json | None:
    up = await condition(kube, "DataPlaneUpToDate")
    return up if up.get("reason") == reason else None


def restarted(cp: LocalControlPlane) -> list[str]:
    """The Deployments the controller restarted, in the order the API server received it."""
    writes = successful_writes(cp, "patch", "deployments", NS, CONTROLLER_AGENT)
    return [e["objectRef"]["name"] for e in writes]


async def restart_records(kube: KubeClient) -> dict[str, str | None]:
    """Each Deployment's record of the configuration it was restarted for (None: never)."""
    records = {}
    for name in APPS:
        dep = await kube.request("GET", DEPLOYMENTS.path(NS, name))
        annotations = dep["spec"]["template"]["metadata"].get("annotations") or {}
        records[name] = annotations.get(mesh.RESTARTED_FOR_ANNOTATION)
    return records


async def pods_of(kube: KubeClient, app: str) -> list[Json]:
    selector = {"labelSelector": f"app={app}"}
    found: list[Json] = (await kube.request("GET", PODS.path(NS), params=selector))["items"]
    return [p for p in found if not p["metadata"].get("deletionTimestamp")]


def uids(pods: list[Json]) -> set[str]:
    return {p["metadata"]["uid"] for p in pods}


def on_proxy(pods: list[Json], version: str) -> list[Json]:
    """Those of ``pods`` Linkerd's injector gave proxy ``version``."""
    return [
        p
        for p in pods
        if (p["metadata"].get("annotations") or {}).get(PROXY_VERSION_ANNOTATION) == version
    ]


async def events(kube: KubeClient, namespace: str, reason: str, involved: str) -> list[Json]:
    items = (await kube.request("GET", EVENTS.path(namespace)))["items"]
    return [e for e in items if e["reason"] == reason and e["involvedObject"]["name"] == involved]


def halted_gauge(app: App) -> float | None:
    return app.registry.get_sample_value("linkerd_config_rollout_halted", {"linkerdconfig": NAME})


async def test_pods_that_never_become_ready_halt_the_rollout_at_its_deadline_until_resumed(
    cp: LocalControlPlane, kube: KubeClient, release: Release
) -> None:
    new = release.new_proxy
    assert on_proxy([p for a in APPS for p in await pods_of(kube, a)], new) == []
    async with controller(cp) as app:
        async with pods_never_ready(kube, STAGE, {PROXY_VERSION_ANNOTATION: new}, namespace=NS):
            await apply(kube, release.spec())
            first = await within_the_deadline_the_pass_waits(cp, kube, new)
            await after_the_deadline_the_rollout_halts(cp, kube, app, first)
        # The Stage is deleted (the next pods on the new proxy become Ready).
        await undone_the_halt_holds(cp, kube, first, new)
        await resumed_the_rollout_completes(cp, kube, app, first, new)


async def within_the_deadline_the_pass_waits(
    cp: LocalControlPlane, kube: KubeClient, new: str
) -> str:
    """The first pass restarted one workload; the next waits for it. Returns its name."""

    async def waits() -> Json | None:
        cond = await with_reason(kube, "RollingOut")
        return cond if cond and "the next pass waits for them" in cond["message"] else None

    cond = await eventually(waits, timeout=120, what="the pass waiting on its restart")
    (first,) = restarted(cp)
    assert f"deployment/{NS}/{first}: " in cond["message"]
    assert f"not healthy on proxy {new} yet" in cond["message"]

    # What it waits for, as `kubectl rollout status` says it: the new pod runs but is not
    # Ready, so the Deployment keeps its old one.
    waiting_for = f"deployment/{NS}/{first}: 1 old replica(s) pending termination"

    async def says_why() -> Json | None:
        cond = await with_reason(kube, "RollingOut")
        return cond if cond and waiting_for in cond["message"] else None

    await eventually(says_why, timeout=60, what=f"status saying {waiting_for!r}")

    async def stuck_pods() -> list[Json] | None:
        stuck = on_proxy(await pods_of(kube, first), new)
        return stuck if stuck and all(kept_unready(p) for p in stuck) else None

    stuck = await eventually(stuck_pods, timeout=60, what=f"{first}'s new pod running")
    old = [p for p in await pods_of(kube, first) if p["metadata"]["uid"] not in uids(stuck)]
    assert old and all(is_ready(p) for p in old)

    # Still within the deadline (not halted), and no second workload restarted.
    assert (await condition(kube, "DataPlaneUpToDate"))["reason"] == "RollingOut"
    assert restarted(cp) == [first]
    records = await restart_records(kube)
    assert [a for a, record in records.items() if record is not None] == [first]
    return first


async def after_the_deadline_the_rollout_halts(
    cp: LocalControlPlane, kube: KubeClient, app: App, first: str
) -> None:
    async def halted() -> Json | None:
        return await with_reason(kube, "RolloutHalted")

    cond = await eventually(halted, timeout=120, what="the rollout halted")
    failed = f"deployment/{NS}/{first}: not complete {DEADLINE} after its restart"
    assert failed in cond["message"]
    ready = await condition(kube, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "RolloutHalted")
    obj = await kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
    assert [f.split(":", 1)[0] for f in obj["status"][HALT_FIELD]["failed"]] == [
        f"deployment/{NS}/{first}"
    ]

    async def warned(namespace: str, involved: str, reason: str = "RolloutHalted") -> list[Json]:
        async def found() -> list[Json]:
            return await events(kube, namespace, reason, involved)

        return await eventually(found, timeout=30, what=f"a {reason} Event on {involved}")

    (on_config,) = await warned("default", NAME)
    assert on_config["type"] == "Warning" and failed in on_config["message"]
    (on_workload,) = await warned(NS, first)
    assert on_workload["type"] == "Warning"
    assert on_workload["involvedObject"]["kind"] == "Deployment"
    assert f"not complete {DEADLINE} after its restart" in on_workload["message"]
    assert halted_gauge(app) == 1.0

    # The halt stops what the restart started: the workload back on its previous
    # ReplicaSet's template, so the revision that never came back makes no more pods.
    (undone,) = await warned(NS, first, "HaltedRevisionUndone")
    assert undone["type"] == "Warning"
    # One restart in all, the one that never came back, and its undo (nothing records it).
    assert restarted(cp) == [first, first]
    assert await restart_records(kube) == dict.fromkeys(APPS)


async def undone_the_halt_holds(
    cp: LocalControlPlane, kube: KubeClient, first: str, new: str
) -> None:
    """The undone workload settles on its previous ReplicaSet: one pod, Ready, not on the new
    proxy (the stuck one gone); the halt holds, nothing more restarted."""

    async def settled_back() -> bool:
        dep = await kube.request("GET", DEPLOYMENTS.path(NS, first))
        status = dep.get("status") or {}
        done = status.get("observedGeneration") == dep["metadata"]["generation"] and (
            status.get("replicas") == status.get("updatedReplicas") == 1
        )
        pods = await pods_of(kube, first)
        return done and len(pods) == 1 and on_proxy(pods, new) == [] and is_ready(pods[0])

    await eventually(settled_back, timeout=120, what=f"{first} back, Ready, stuck pod gone")
    assert await with_reason(kube, "RolloutHalted") is not None
    assert restarted(cp) == [first, first]


def resume_requests(cp: LocalControlPlane) -> list[Json]:
    return [
        e
        for e in audit_entries(cp)
        if e.get("verb") == "patch"
        and audited_resource(e) == "linkerdconfigs"
        and (e.get("objectRef") or {}).get("name") == NAME
        and str(e.get("userAgent", "")).startswith(TEST_AGENT)
        and (e.get("responseStatus") or {}).get("code", 500) < 300
    ]


async def resumed_the_rollout_completes(
    cp: LocalControlPlane, kube: KubeClient, app: App, first: str, new: str
) -> None:
    before = len(resume_requests(cp))
    await kube.request(
        "PATCH",
        LINKERD_CONFIGS.path(name=NAME),
        body={"metadata": {"annotations": {RESUME_ANNOTATION: "1"}}},
        content_type=MERGE_PATCH,
    )

    async def complete() -> Json | None:
        ready = await condition(kube, "Ready")
        return ready if ready.get("status") == "True" else None

    await eventually(complete, timeout=180, what="the resumed rollout complete")
    up = await condition(kube, "DataPlaneUpToDate")
    assert (up["status"], up["reason"]) == ("True", "UpToDate")
    obj = await kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
    assert HALT_FIELD not in obj["status"]
    assert halted_gauge(app) == 0.0

    # Before the resume: the first's restart and its undo; after it, each restarted once
    # (the first again, its record undone), in the audit log's order.
    order = restarted(cp)
    assert order[:2] == [first, first] and sorted(order[2:]) == sorted(APPS)
    resumed_at = received_at(resume_requests(cp)[before])
    writes = successful_writes(cp, "patch", "deployments", NS, CONTROLLER_AGENT)
    assert [received_at(e) > resumed_at for e in writes] == [False, False] + [True] * len(APPS)
    records = await restart_records(kube)
    assert None not in records.values() and len(set(records.values())) == 1

    pods = await scenario.wait_settled(kube, NS, expected=len(APPS))
    assert on_proxy(pods, new) == pods
    assert all(is_ready(p) for p in pods)
