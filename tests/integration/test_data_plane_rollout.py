"""The controller rolls Linkerd's real data plane under live traffic, and not one request fails.

edge-26.8.3's own control plane (identity, destination, policy, the injector) runs meshed on
the real node with a trust anchor of the test's own; three opted-in server Deployments (two
replicas each, a PodDisruptionBudget each, a drain on SIGTERM) are meshed by the real injector,
and a client (not opted in: it is the witness, and its count must survive the rollout) sends
requests to all three the whole time, counting each success and failure with its time.

The LinkerdConfig moves the proxy to another version (the same binary under a second tag, so
that what changes is what the controller manages: the injector's config, the pods it makes).
The controller writes ``linkerd-config``, the real injector reads it from its mounted volume,
and the controller restarts the three owners in paced, health-gated passes. Judged on what
happened in the cluster: every server pod replaced, each new pod carrying the new proxy,
ready, and serving the client over mutual TLS with the client's identity; the client's
failure count is exactly 0. Then, on the same mesh:

* a proxy that cannot start (an image the node does not have) stops at the canary: its new
  pod never becomes ready, ``onFailure: Rollback`` puts the last completed configuration
  back, the other workloads are never restarted, and no request fails;
* the injector scaled to nothing right after the first restart of a rollout, then back: the
  restart's next pod comes without the proxy, the rollout halts, and the halt's going back
  waits for the injector (it creates pods); once the injector injects again every server pod
  is meshed, and resumed, the rollout completes with no request failed;
* the trust anchor swapped by hand, bypassing the controller (the trust roots and the issuer
  replaced, the control plane and the servers restarted): requests fail. The test can see
  the outage the trust-anchor guard exists to prevent.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from devcluster import linkerd_control_plane as l5d
from devcluster import linkerd_images
from devcluster.cluster import ControlPlaneOptions, LocalControlPlane
from linkerd_config.kube.client import MERGE_PATCH, KubeClient
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.linkerd.mesh import PROXY_VERSION_ANNOTATION
from linkerd_config.linkerd.rollout.record import RESUME_ANNOTATION
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import mesh_traffic as mesh
from tests.support import scenario
from tests.support.anchors import identity_pki
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.real_node, pytest.mark.timeout(900)]
Json = dict[str, Any]

NAMESPACE = "shop"
SERVERS = 3
NAME = "mesh"
INSTALLED = mesh.INSTALLED
ROLLED = mesh.ROLLED
AGAIN = "edge-26.8.5"
"""A third tag of the same proxy, for the rollout the injector's outage interrupts."""
MISSING = "edge-26.8.9"
"""A version whose proxy image the node does not have (pulls are never made)."""
ENOUGH = 100
"""Requests the client must have sent before the rollout starts, and after it ends."""


class Mesh:
    def __init__(self, cp: LocalControlPlane, kube: KubeClient, servers: list[str]) -> None:
        self.cp, self.kube, self.servers = cp, kube, servers

    def counts(self) -> mesh.Counts:
        return mesh.client_counts(self.cp, NAMESPACE)

    async def traffic_beyond(self, total: int) -> mesh.Counts:
        return await mesh.traffic_beyond(self.cp, NAMESPACE, total)


@pytest.fixture(scope="module")
async def world() -> AsyncIterator[Mesh]:
    with LocalControlPlane(ControlPlaneOptions(real_node=True)) as cp:
        servers = await asyncio.to_thread(mesh.start_rollout_mesh, cp, NAMESPACE, SERVERS)
        access = await load_access(str(cp.kubeconfig))
        async with KubeClient(access, user_agent="data-plane-rollout-tests") as kube:
            await scenario.install_crd(kube)
            world = Mesh(cp, kube, servers)
            await world.traffic_beyond(ENOUGH)
            yield world


async def test_a_proxy_upgrade_rolled_across_three_workloads_loses_no_request(
    world: Mesh,
) -> None:
    cp = world.cp
    before = {
        name: {p["metadata"]["uid"] for p in mesh.pods(cp, NAMESPACE, name)}
        for name in world.servers
    }
    assert all(len(uids) == 2 for uids in before.values())
    assert {
        p["metadata"]["annotations"].get(PROXY_VERSION_ANNOTATION)
        for name in world.servers
        for p in mesh.pods(cp, NAMESPACE, name)
    } == {INSTALLED}
    started = world.counts()
    began = time.monotonic()
    async with scenario.controller(
        cp, "data-plane-rollout", restart_interval=1.0, injector_wait=120
    ):
        await scenario.apply_linkerdconfig(world.kube, NAME, {"proxy": {"proxyVersion": ROLLED}})
        await eventually(
            lambda: scenario.ready(world.kube, NAME), timeout=300, what="the rollout done"
        )
    rolled_in = time.monotonic() - began
    after = await world.traffic_beyond(world.counts().total + ENOUGH)

    await mesh.serving_on_mtls(cp, NAMESPACE, world.servers, ROLLED)
    for name in world.servers:
        assert not uids(cp, name) & before[name], f"{name} not restarted"

    during = after.total - started.total
    print(
        f"rolled {SERVERS} workloads in {rolled_in:.1f} s; the client sent {during} requests "
        f"meanwhile ({after.total} in all), {after.failed} failed"
    )
    assert during > 0
    assert after.failures == (), [
        f"{f.time.astimezone(datetime.UTC):%H:%M:%S.%f} {f.target}: {f.error}"
        for f in after.failures
    ]
    assert after.failed == 0


def kubectl(cp: LocalControlPlane, *args: str, timeout: float = 180.0) -> str:
    return l5d.run([*l5d.kubectl(cp), *args], timeout=timeout)


def uids(cp: LocalControlPlane, name: str) -> set[str]:
    return {p["metadata"]["uid"] for p in mesh.pods(cp, NAMESPACE, name)}


def failures_since(counts: mesh.Counts, since: datetime.datetime) -> list[str]:
    return [
        f"{f.time:%H:%M:%S.%f} {f.target}: {f.error}" for f in counts.failures if f.time >= since
    ]


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


async def up_to_date(kube: KubeClient, reason: str) -> dict[str, object] | None:
    cond = await scenario.condition(kube, NAME, "DataPlaneUpToDate")
    current = cond.get("observedGeneration") == cond.get("generation")
    return cond if current and cond.get("reason") == reason else None


async def test_a_proxy_that_cannot_start_stops_at_the_canary_and_rolls_back(world: Mesh) -> None:
    """The proxy asked for is an image the node does not have (``imagePullPolicy: Never``):
    the canary's new pod never becomes ready. At ``progressDeadline`` the rollout fails and
    ``onFailure: Rollback`` puts the last completed configuration back: the canary's workload
    is back on its old pods, the others were never restarted, and no request failed."""
    cp = world.cp
    since = now()
    kept = {name: uids(cp, name) for name in world.servers}
    canary = {"count": 1, "selector": f"app={world.servers[0]}", "stableFor": "10s"}
    rollout = {"canary": canary, "onFailure": "Rollback", "progressDeadline": "30s"}
    spec = {"proxy": {"proxyVersion": MISSING}, "rollout": rollout}
    async with scenario.controller(
        cp, "data-plane-rollout", restart_interval=1.0, injector_wait=120
    ):
        await scenario.apply_linkerdconfig(world.kube, NAME, spec)

        async def stuck() -> list[Json] | None:
            pods = mesh.pods(cp, NAMESPACE, world.servers[0])
            waiting = [
                p
                for p in pods
                if any(
                    (s.get("state") or {}).get("waiting", {}).get("reason") == "ErrImageNeverPull"
                    for s in p["status"].get("initContainerStatuses", [])
                    + p["status"].get("containerStatuses", [])
                )
            ]
            return waiting or None

        await eventually(stuck, timeout=120, what="the canary's new pod stuck on its proxy")
        await eventually(
            lambda: up_to_date(world.kube, "RolledBack"), timeout=180, what="rolled back"
        )

        await mesh.serving_on_mtls(cp, NAMESPACE, world.servers, ROLLED)
    for name in world.servers[1:]:
        assert uids(cp, name) == kept[name], f"{name} was restarted"
    counts = await world.traffic_beyond(world.counts().total + ENOUGH)
    assert failures_since(counts, since) == []


async def test_the_injector_stopped_mid_rollout_leaves_no_workload_out_of_the_mesh(
    world: Mesh,
) -> None:
    """Issue 60, item 4.5. One restart a pass; the proxy injector's Deployment scaled to
    nothing once the first server has a new pod, so the rest of its restart is made while
    nothing injects (the webhook fails open, as Linkerd installs it). Before the fix the
    halt's undo ran during the outage and the previous ReplicaSet made every pod of the
    workload again without the proxy, and a halted rollout restarts nothing: they stayed out
    of the mesh. Judged on the pods: every server pod meshed again once the injector is back,
    then (resumed) on the new proxy over mTLS, and no request failed."""
    cp = world.cp
    since = now()
    proxy = linkerd_images.PROXY_IMAGE
    cp.node.ctr("images", "tag", f"{proxy}:{INSTALLED}", f"{proxy}:{AGAIN}")
    before = {name: uids(cp, name) for name in world.servers}
    injector = "deployment/linkerd-proxy-injector"
    spec = {"proxy": {"proxyVersion": AGAIN}, "rollout": {"maxRestartsPerPass": 1}}
    async with scenario.controller(
        cp, "data-plane-rollout", restart_interval=1.0, injector_wait=120
    ):
        await scenario.apply_linkerdconfig(world.kube, NAME, spec)

        async def first_restarted() -> list[str] | None:
            return [n for n in world.servers if uids(cp, n) - before[n]] or None

        (first, *_) = await eventually(first_restarted, timeout=120, what="a first restart")
        kubectl(cp, "-n", l5d.NAMESPACE, "scale", injector, "--replicas=0")

        async def injector_gone() -> bool:
            selector = "linkerd.io/control-plane-component%3Dproxy-injector"
            path = f"/api/v1/namespaces/{l5d.NAMESPACE}/pods?labelSelector={selector}"
            return not cp.api_request("GET", path).get("items")

        await eventually(injector_gone, timeout=120, what="the injector's pods gone")
        await asyncio.sleep(15)  # the outage: the restart under way makes its pods meanwhile
        unmeshed = [
            p["metadata"]["name"]
            for name in world.servers
            for p in mesh.pods(cp, NAMESPACE, name)
            if mesh.proxy_container(p) is None
        ]
        print(f"after {first}'s restart began, the outage left out of the mesh: {unmeshed}")
        assert unmeshed, "no pod was made during the outage: the seam was not exercised"
        kubectl(cp, "-n", l5d.NAMESPACE, "scale", injector, "--replicas=1")
        kubectl(cp, "-n", l5d.NAMESPACE, "rollout", "status", injector, "--timeout=180s")

        async def all_meshed() -> bool:
            out = {
                p["metadata"]["name"]
                for name in world.servers
                for p in mesh.pods(cp, NAMESPACE, name)
                if mesh.proxy_container(p) is None
            }
            assert not out, f"out of the mesh: {sorted(out)}"
            return True

        await eventually(all_meshed, timeout=180, what="every server pod meshed again")
        cond = await scenario.condition(world.kube, NAME, "DataPlaneUpToDate")
        print(f"once meshed again: {cond.get('reason')}: {cond.get('message')}")
        if cond.get("reason") == "RolloutHalted":
            await world.kube.request(
                "PATCH",
                LINKERD_CONFIGS.path(name=NAME),
                body={"metadata": {"annotations": {RESUME_ANNOTATION: "injector back"}}},
                content_type=MERGE_PATCH,
            )
        await eventually(
            lambda: scenario.ready(world.kube, NAME), timeout=300, what="the rollout done"
        )

    await mesh.serving_on_mtls(cp, NAMESPACE, world.servers, AGAIN)
    counts = await world.traffic_beyond(world.counts().total + ENOUGH)
    assert failures_since(counts, since) == []


async def test_the_anchor_swapped_by_hand_breaks_the_mesh(world: Mesh) -> None:
    """What the guard prevents, done by hand with the controller stopped: the trust roots
    replaced by a new anchor B alone, the issuer re-issued from B, the control plane and the
    servers restarted (as ``kubectl rollout restart`` does). The client, still on the old
    anchor, cannot trust the new servers: its requests fail. This proves the test sees the
    outage the guard exists to prevent (linkerd2 #4287). It runs last: the mesh stays split."""
    cp = world.cp
    fresh = identity_pki(mesh.TRUST_DOMAIN)
    since = now()
    roots = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "linkerd-identity-trust-roots", "namespace": l5d.NAMESPACE},
        "data": {"ca-bundle.crt": fresh.trust_anchors},
    }
    issuer = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "linkerd-identity-issuer", "namespace": l5d.NAMESPACE},
        "stringData": {"crt.pem": fresh.issuer_certificate, "key.pem": fresh.issuer_key},
    }
    l5d.apply(cp, json.dumps({"apiVersion": "v1", "kind": "List", "items": [roots, issuer]}))
    kubectl(cp, "-n", l5d.NAMESPACE, "rollout", "restart", "deployment")
    for deployment in l5d.DEPLOYMENTS:
        kubectl(
            cp,
            "-n",
            l5d.NAMESPACE,
            "rollout",
            "status",
            f"deployment/{deployment}",
            "--timeout=180s",
        )
    for name in world.servers:
        kubectl(cp, "-n", NAMESPACE, "rollout", "restart", f"deployment/{name}")

    async def failing() -> list[str] | None:
        counts = await asyncio.to_thread(world.counts)
        return failures_since(counts, since) or None

    failed = await eventually(failing, timeout=180, what="the client's requests failing")
    print(f"by hand: {len(failed)} failed request(s) seen, the first: {failed[0]}")
    assert len(failed) > 0
