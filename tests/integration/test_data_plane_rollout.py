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
* a trust anchor rotated as Linkerd's guide does it, through the controller: [A] to [A, B]
  (the servers rolled by the controller, the control plane and the client by hand), the
  issuer re-issued from B, then [B]; the guard holds the drop of A until no proxy can still
  present a certificate chained to it (the issuer's update plus the certificates' lifetime,
  a minute here), then [B] is written and rolled, and no request fails;
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
import hashlib
import json
import time
import urllib.error
from collections.abc import AsyncIterator
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from devcluster import linkerd_control_plane as l5d
from devcluster import linkerd_images
from devcluster.cluster import ControlPlaneOptions, LocalControlPlane
from linkerd_config.kube.client import MERGE_PATCH, KubeClient
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.linkerd.mesh import PROXY_VERSION_ANNOTATION, TRUST_ROOT_ANNOTATION
from linkerd_config.linkerd.rollout.record import RESUME_ANNOTATION
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from linkerd_config.linkerd.trust.guard import HELD_REASON
from tests.support import mesh_traffic as mesh
from tests.support import scenario
from tests.support.anchors import bundle, identity_pki
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


TRUST_ROOTS = f"/api/v1/namespaces/{l5d.NAMESPACE}/configmaps/linkerd-identity-trust-roots"
ANCHORS_ENV = "LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS"
ISSUER_EVENTS = ("IssuerUpdated", "IssuerUpdateSkipped", "IssuerValidationFailed")
LIFETIME = datetime.timedelta(seconds=int(l5d.ISSUANCE_LIFETIME.removesuffix("s")))
"""How long identity's certificates last (the install's ``identity.issuer.issuanceLifetime``)."""


def trust_roots(cp: LocalControlPlane) -> str:
    """The bundle the injector gives new pods (and identity reads when it starts)."""
    return str(cp.api_request("GET", TRUST_ROOTS)["data"]["ca-bundle.crt"])


def fingerprints(pem: str) -> list[str]:
    """The SHA-256 of each certificate's DER in the PEM text, in order."""
    return [
        cert.fingerprint(hashes.SHA256()).hex()
        for cert in x509.load_pem_x509_certificates(pem.encode())
    ]


def meshed_pods(cp: LocalControlPlane) -> list[Json]:
    """Every pod Linkerd's injector meshed (the control plane's, the servers', the client's)."""
    path = "/api/v1/pods?labelSelector=linkerd.io%2Fcontrol-plane-ns"
    return list(cp.api_request("GET", path).get("items", []))


def restart_control_plane(cp: LocalControlPlane, bundle_text: str) -> None:
    """What the guide's ``linkerd upgrade --identity-trust-anchors-file=<bundle>`` and
    ``kubectl -n linkerd rollout restart deploy`` do to Linkerd's Deployments, the controller
    having written the ConfigMaps: their pods are not injected, and ``linkerd install`` renders
    their ``linkerd.io/trust-root-sha256`` from the values (a restart alone leaves it naming
    the install's bundle), while their proxies (and identity) read the bundle from the trust
    roots ConfigMap when they start. So the pod templates' annotation is set to the bundle's
    hash, as the re-render would, which restarts them; each rolled out."""
    stamp = {TRUST_ROOT_ANNOTATION: hashlib.sha256(bundle_text.encode()).hexdigest()}
    patch = json.dumps({"spec": {"template": {"metadata": {"annotations": stamp}}}})
    for deployment in l5d.DEPLOYMENTS:
        kubectl(cp, "-n", l5d.NAMESPACE, "patch", f"deployment/{deployment}", "-p", patch)
    for deployment in l5d.DEPLOYMENTS:
        l5d.rollout_status(cp, l5d.NAMESPACE, deployment, 180)
    # Rolled out is not serving yet: a pod made before the injector's webhook answers again
    # comes without the proxy (the webhook fails open).
    l5d.wait_until_injecting(cp, time.monotonic() + 120)


def trusts_the_trust_roots(pod: Json) -> bool:
    """The pod's proxy takes its anchors from the trust roots ConfigMap as it starts."""
    proxy = mesh.proxy_container(pod) or {}
    (env,) = [e for e in proxy.get("env", []) if e["name"] == ANCHORS_ENV]
    ref = (env.get("valueFrom") or {}).get("configMapKeyRef") or {}
    return ref.get("name") == "linkerd-identity-trust-roots" and ref.get("key") == "ca-bundle.crt"


def restart_client(cp: LocalControlPlane) -> mesh.Counts:
    """``kubectl rollout restart`` of the client, which is not opted in (a new pod first, then
    the old one stopped), and the old pod's counts as last read: every 0.1 s until it stops
    answering and is gone. The requests its process made after the last read (at one every
    50 ms, two at most) are the only ones not seen."""
    (old,) = mesh.pods(cp, NAMESPACE, "client")
    last = mesh.counts_of(old)
    path = f"/api/v1/namespaces/{NAMESPACE}/pods/{old['metadata']['name']}"
    kubectl(cp, "-n", NAMESPACE, "rollout", "restart", "deployment/client")
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            seen = mesh.counts_of(old, timeout=1.0)
        except (OSError, ValueError):
            try:
                cp.api_request("GET", path)
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    break
                raise
        else:
            if seen.first == last.first:  # the same process (not an address reused)
                last = seen
        time.sleep(0.1)
    else:
        raise AssertionError("the old client pod did not go within 180 s")
    mesh.rollout_status(cp, NAMESPACE, "client")
    (new,) = mesh.pods(cp, NAMESPACE, "client")
    assert mesh.proxy_container(new) is not None, "the client came back without the proxy"
    return last


def replace_issuer(cp: LocalControlPlane, certificate: str, key: str) -> None:
    issuer = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "linkerd-identity-issuer", "namespace": l5d.NAMESPACE},
        "stringData": {"crt.pem": certificate, "key.pem": key},
    }
    l5d.apply(cp, json.dumps(issuer))


def event_time(event: Json) -> datetime.datetime:
    text = event.get("lastTimestamp") or event.get("eventTime") or event["firstTimestamp"]
    return datetime.datetime.fromisoformat(text)


async def issuer_updated(cp: LocalControlPlane, since: datetime.datetime) -> Json | None:
    """Identity's Event about reloading its issuer from the mounted Secret, since ``since``
    (a refusal of the new issuer is an error)."""
    listed = cp.api_request("GET", f"/api/v1/namespaces/{l5d.NAMESPACE}/events")
    for event in listed.get("items", []):
        about = event.get("involvedObject") or {}
        if (
            event.get("reason") in ISSUER_EVENTS
            and about.get("kind") == "Deployment"
            and about.get("name") == "linkerd-identity"
            and event_time(event) >= since.replace(microsecond=0)
        ):
            assert event["reason"] == "IssuerUpdated", f"{event['reason']}: {event['message']}"
            assert event["type"] == "Normal", event
            return dict(event)
    return None


def proxy_errors(pod: Json) -> list[str]:
    """The proxy's own error counters that are not zero (what it says went wrong)."""
    try:
        metrics = mesh.proxy_metrics(pod)
    except OSError as exc:
        return [f"metrics unreadable: {exc}"]
    lines = []
    for line in metrics.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if not line.startswith("#") and "error" in name and not line.endswith(" 0"):
            lines.append(line)
    return lines


async def test_a_trust_anchor_rotated_as_the_guide_says_loses_no_request(world: Mesh) -> None:
    """Issue 60, item 4.2. A rotation of the trust anchor as Linkerd's guide does it, with the
    controller writing the bundles and the guard on: [A] (the install's) to [A, B], written
    and the opted-in servers rolled onto it by the controller, the control plane (its pods'
    trust-root hash re-rendered, as the guide's ``linkerd upgrade`` does) and the client (not
    opted in) restarted by hand; the issuer re-issued from B (identity reloads it:
    ``IssuerUpdated``); then [B] alone. Proxies that started before the issuer's update still
    present certificates chained to A until they renew, so the guard holds the drop of A
    (``TrustAnchorRemovalHeld``) until the update plus the certificates' lifetime has passed,
    then writes [B] and rolls the servers onto it. Judged on the cluster: A stays in the trust
    roots while held and leaves no sooner than that; after, the roots hold B alone, every
    server pod carries the hash of [B] and serves the client over mTLS, and the client, whose
    counts are kept across its restart, counts not one failed request the whole time."""
    cp = world.cp
    since = now()
    began = time.monotonic()
    started = world.counts()
    anchor_a = trust_roots(cp).strip() + "\n"
    (a_fp,) = fingerprints(anchor_a)
    fresh = identity_pki(mesh.TRUST_DOMAIN)
    (b_fp,) = fingerprints(fresh.trust_anchors)

    def spec(anchors: str) -> Json:
        return {
            "global": {"identityContext": {"trustAnchorsPEM": anchors}},
            "proxy": {"proxyVersion": ROLLED},
        }

    async with scenario.controller(
        cp, "data-plane-rollout", restart_interval=1.0, injector_wait=120
    ):
        # 1. [A, B]: written, the servers rolled; then the control plane and the client.
        await scenario.apply_linkerdconfig(
            world.kube, NAME, spec(bundle(anchor_a, fresh.trust_anchors))
        )
        await eventually(
            lambda: scenario.ready(world.kube, NAME), timeout=300, what="[A, B] rolled out"
        )
        both = trust_roots(cp)
        assert fingerprints(both) == [a_fp, b_fp], both
        written_both = now().replace(microsecond=0)
        stale = {
            p["metadata"]["name"]: p["metadata"]["annotations"].get(TRUST_ROOT_ANNOTATION)
            for p in meshed_pods(cp)
            if p["metadata"]["namespace"] == l5d.NAMESPACE
        }
        print(f"the control plane's pods before the re-render: {stale}")
        await asyncio.to_thread(restart_control_plane, cp, both)
        before_restart = await asyncio.to_thread(restart_client, cp)
        live = [p for p in meshed_pods(cp) if not p["metadata"].get("deletionTimestamp")]
        on_both = {
            p["metadata"]["name"]: p["metadata"]["annotations"].get(TRUST_ROOT_ANNOTATION)
            for p in live
        }
        assert set(on_both.values()) == {hashlib.sha256(both.encode()).hexdigest()}, on_both
        for pod in live:
            if pod["metadata"]["namespace"] == l5d.NAMESPACE:
                started_at = datetime.datetime.fromisoformat(pod["metadata"]["creationTimestamp"])
                assert started_at >= written_both - datetime.timedelta(seconds=1), pod["metadata"]
                assert trusts_the_trust_roots(pod), pod["metadata"]["name"]
        step1 = time.monotonic() - began
        print(f"[A, B] everywhere ({len(on_both)} meshed pods) after {step1:.1f} s")

        # 2. The issuer re-issued from B; identity reloads it.
        replaced = now()
        await asyncio.to_thread(replace_issuer, cp, fresh.issuer_certificate, fresh.issuer_key)
        event = await eventually(
            lambda: issuer_updated(cp, replaced), timeout=90, what="identity's IssuerUpdated"
        )
        updated = event_time(event)
        print(f"issuer replaced at {replaced:%H:%M:%S}, IssuerUpdated at {updated:%H:%M:%S}")

        # 3. [B] alone: held while a proxy may present a certificate chained to A.
        applied = await scenario.apply_linkerdconfig(
            world.kube, NAME, spec(bundle(fresh.trust_anchors))
        )
        generation = applied["metadata"]["generation"]
        asked = now()

        async def held() -> Json | None:
            cond = await scenario.condition(world.kube, NAME, "ConfigMapSynced")
            mine = cond.get("observedGeneration") == generation
            return cond if mine and cond.get("reason") == HELD_REASON else None

        hold: Json | None = None
        data_plane_held: Json | None = None
        held_from: datetime.datetime | None = None
        held_until: datetime.datetime | None = None
        written: datetime.datetime | None = None
        dropped_while_held: list[str] = []
        deadline = time.monotonic() + 240
        while await scenario.ready(world.kube, NAME) is None:
            assert time.monotonic() < deadline, "[B] not rolled out within 240 s"
            first = await held()
            roots = await asyncio.to_thread(trust_roots, cp)
            at = now()
            if first is not None and await held() is not None:  # held before and after
                if a_fp not in fingerprints(roots):
                    # The controller writes the ConfigMap before status: the moment the hold
                    # lifts, status still says held. Held still two seconds on is no lag.
                    await asyncio.sleep(2)
                    if await held() is not None:
                        dropped_while_held.append(f"{at:%H:%M:%S}: {roots}")
                else:
                    hold, held_from, held_until = first, held_from or at, at
            # Ready says the hold; DataPlaneUpToDate the rollout of the bundle held on to
            # (every pod on [A, B] already: up to date, the hold named beside it).
            dp = await scenario.condition(world.kube, NAME, "Ready")
            if dp.get("observedGeneration") == generation and dp.get("reason") == HELD_REASON:
                data_plane_held = data_plane_held or dp
            if written is None and a_fp not in fingerprints(roots):
                written = at
            await asyncio.sleep(1)
        rolled = now()
        if written is None:
            written = rolled
        roots = trust_roots(cp)
        after_rotation = await world.traffic_beyond(world.counts().total + ENOUGH)

    took = time.monotonic() - began
    old, new = before_restart, after_rotation
    failed = failures_since(old, since) + failures_since(new, since)
    sent = (old.total - started.total) + new.total
    print(
        f"[B] asked at {asked:%H:%M:%S}, written by {written:%H:%M:%S}: "
        f"{(written - updated).total_seconds():.0f} s after the issuer's update "
        f"(the certificates last {LIFETIME.total_seconds():.0f} s); rolled out (Ready) at "
        f"{rolled:%H:%M:%S}"
    )
    if hold is not None and held_from is not None and held_until is not None:
        print(
            f"held {(held_until - held_from).total_seconds():.0f} s "
            f"({held_from:%H:%M:%S} to {held_until:%H:%M:%S}): {hold.get('message')}"
        )
        print(f"Ready meanwhile: {(data_plane_held or {}).get('message')}")
    else:
        print("[B] was never held")
    print(
        f"the rotation took {took:.1f} s; the client sent {sent} requests over it "
        f"({old.total - started.total} before its restart, {new.total} after), "
        f"{(old.failed - started.failed) + new.failed} failed"
    )
    expected = hashlib.sha256(roots.encode()).hexdigest()
    stamped = {
        p["metadata"]["name"]: p["metadata"]["annotations"].get(TRUST_ROOT_ANNOTATION)
        for name in world.servers
        for p in mesh.pods(cp, NAMESPACE, name)
    }
    print(
        f"after: the trust roots hold {len(fingerprints(roots))} anchor(s), B alone: "
        f"{fingerprints(roots) == [b_fp]}; server pods on that bundle's hash: "
        f"{sum(h == expected for h in stamped.values())} of {len(stamped)}"
    )
    if failed:
        print("failures (first 20):\n  " + "\n  ".join(failed[:20]))
    # What the proxies say went wrong (a handshake refused is retried elsewhere, say).
    for app in (*world.servers, "client"):
        for pod in mesh.pods(cp, NAMESPACE, app):
            errors = proxy_errors(pod)[:15]
            print(f"{pod['metadata']['name']}'s proxy's errors: " + "\n  ".join(["", *errors]))

    assert hold is not None, f"the drop of A was not held: [B] written by {written:%H:%M:%S}"
    assert "issuer" in str(hold.get("message")).lower(), hold
    assert data_plane_held is not None, "Ready never said the hold"
    assert dropped_while_held == [], dropped_while_held
    assert written >= updated + LIFETIME, (
        f"A left at {written:%H:%M:%S}, before {updated + LIFETIME:%H:%M:%S} (the issuer's "
        "update plus the certificates' lifetime): a proxy could still rely on it"
    )
    assert fingerprints(roots) == [b_fp], roots
    assert set(stamped.values()) == {expected}, stamped
    await mesh.serving_on_mtls(cp, NAMESPACE, world.servers, ROLLED)
    assert failed == [], failed
    assert (old.failed - started.failed) + new.failed == 0


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
