"""Real meshed traffic on the real node, for the data-plane tests: Linkerd's control plane,
servers and a counting client injected by Linkerd's injector, and what their proxies say.

    plane = start_linkerd(cp)                    # identity, destination, policy, injector
    create_namespace(cp, "app")                  # meshed, on the real node
    servers = deploy_servers(cp, "app", count=2) # each: 2 replicas, a Service, a PDB
    deploy_client(cp, "app", servers)            # GETs each server's /hello in turn
    counts = client_counts(cp, "app")            # total, succeeded, failed, failures
    assert mtls_problems(pod, identity("app", "client"), "inbound") == []  # on mTLS

    servers = start_rollout_mesh(cp, "shop", 3)  # all of the above, servers opted in, and
                                                 # the proxy also tagged ROLLED
    await serving_on_mtls(cp, "shop", servers, ROLLED)  # every pod on ROLLED, on mTLS

A server Deployment rolls without dropping a request: ``maxUnavailable: 0``, a readiness
probe, a PodDisruptionBudget of ``minAvailable: 1``, and on SIGTERM its app answers /ready
503 and keeps serving for ``DRAIN`` before a graceful shutdown, while its endpoint leaves the
clients' load balancers (Linkerd's proxy then stops within its ``shutdownGracePeriod``).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import re
import urllib.request
from dataclasses import dataclass
from typing import Any

from devcluster import linkerd_control_plane as l5d
from devcluster.cluster import LocalControlPlane
from devcluster.linkerd_control_plane import LinkerdControlPlane
from devcluster.linkerd_images import PROXY_IMAGE, TAG, TESTAPP_IMAGE
from linkerd_config.linkerd.mesh import PROXY_VERSION_ANNOTATION
from tests.support.anchors import identity_pki
from tests.support.waiting import eventually

Json = dict[str, Any]
SERVER_PORT = 8080
CLIENT_PORT = 9090
ADMIN_PORT = 4191
DRAIN = "5s"
TRUST_DOMAIN = "cluster.local"
OPT_IN = {"config.linkerd.io/reconcile": "auto"}
"""The label that opts a workload's pods into the controller's rollouts."""
INSTALLED = TAG
"""The proxy version ``linkerd install`` gives every pod."""
ROLLED = "edge-26.8.4"
"""A version to roll to: the same proxy image under a second tag (``start_rollout_mesh``
adds it), so that what changes is what the controller manages: the injector's config, the
pods it makes."""


def start_linkerd(cp: LocalControlPlane) -> LinkerdControlPlane:
    """Linkerd's control plane on ``cp``'s real node, with a trust anchor of the test's own
    (``plane.credentials``), up once it meshes pods."""
    return l5d.install(cp, identity_pki(TRUST_DOMAIN))


def create_namespace(cp: LocalControlPlane, name: str) -> None:
    l5d.create(cp, "/api/v1/namespaces", l5d.meshed_namespace(name))


def identity(namespace: str, service_account: str) -> str:
    """The TLS identity Linkerd gives a pod of this ServiceAccount."""
    return f"{service_account}.{namespace}.serviceaccount.identity.linkerd.{TRUST_DOMAIN}"


def _app(
    namespace: str, name: str, replicas: int, container: Json, pod: Json, **spec: Any
) -> list[Json]:
    """ServiceAccount and Deployment of the test app as ``name``: ``container`` (the
    image, pulled never), the pod template's ``pod`` metadata, and more Deployment ``spec``."""
    labels = {"app": name}
    meta = {"name": name, "namespace": namespace}
    app = {"name": "app", "image": TESTAPP_IMAGE, "imagePullPolicy": "Never", **container}
    template = {"serviceAccountName": name, "containers": [app]}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {**meta, "labels": labels},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {**pod, "labels": {**labels, **pod.get("labels", {})}},
                    "spec": {**template, **spec.pop("pod_spec", {})},
                },
                **spec,
            },
        },
    ]


def server_objects(
    namespace: str, name: str, replicas: int = 2, opted_in: bool = False
) -> list[Json]:
    """ServiceAccount, Deployment, Service and PodDisruptionBudget of one server."""
    labels = {"app": name}
    container = {
        "args": ["server", f"-listen=:{SERVER_PORT}", f"-drain={DRAIN}"],
        "ports": [{"name": "http", "containerPort": SERVER_PORT}],
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": SERVER_PORT},
            "periodSeconds": 1,
            "failureThreshold": 1,
        },
    }
    meta = {"name": name, "namespace": namespace}
    return [
        *_app(
            namespace, name, replicas, container,
            {"labels": OPT_IN if opted_in else {}},
            strategy={"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            pod_spec={"terminationGracePeriodSeconds": 30},
        ),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta,
            "spec": {"selector": labels, "ports": [{"name": "http", "port": SERVER_PORT}]},
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": meta,
            "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
        },
    ]  # fmt: skip


def client_objects(namespace: str, servers: list[str], name: str = "client") -> list[Json]:
    """ServiceAccount and Deployment (one replica) of a client of ``servers`` (by Service
    name); its /counts port skips the proxy, so reading it is no traffic of the mesh's."""
    targets = [
        f"-target=http://{s}.{namespace}.svc.cluster.local:{SERVER_PORT}/hello" for s in servers
    ]
    skip = {"config.linkerd.io/skip-inbound-ports": str(CLIENT_PORT)}
    container = {"args": ["client", f"-listen=:{CLIENT_PORT}", *targets]}
    return _app(namespace, name, 1, container, {"annotations": skip})


def deploy_servers(
    cp: LocalControlPlane,
    namespace: str,
    count: int = 1,
    replicas: int = 2,
    opted_in: bool = False,
) -> list[str]:
    """``count`` servers (``server-0``, ...), each rolled out (every replica Ready)."""
    names = [f"server-{i}" for i in range(count)]
    objects = [o for n in names for o in server_objects(namespace, n, replicas, opted_in)]
    l5d.apply(cp, json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    for name in names:
        rollout_status(cp, namespace, name)
    return names


def deploy_client(
    cp: LocalControlPlane, namespace: str, servers: list[str], name: str = "client"
) -> None:
    objects = client_objects(namespace, servers, name)
    l5d.apply(cp, json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    rollout_status(cp, namespace, name)


def rollout_status(
    cp: LocalControlPlane, namespace: str, deployment: str, timeout: int = 120
) -> None:
    """Until every replica of the Deployment is updated and available."""
    l5d.rollout_status(cp, namespace, deployment, timeout)


def pods(cp: LocalControlPlane, namespace: str, app: str) -> list[Json]:
    """The app's pods that are not being deleted, oldest first."""
    listed = cp.api_request("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=app%3D{app}")
    items = [p for p in listed.get("items", []) if not p["metadata"].get("deletionTimestamp")]
    return sorted(items, key=lambda p: p["metadata"]["creationTimestamp"])


def _get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        body: bytes = resp.read()
        return body


def get_text(url: str) -> str:
    """A GET from the host (pods' addresses are reachable from it), as text."""
    return _get(url).decode()


@dataclass(frozen=True)
class Failure:
    time: datetime.datetime
    target: str
    error: str


@dataclass(frozen=True)
class Counts:
    """What the client counted since it started."""

    total: int
    succeeded: int
    failed: int
    failures: tuple[Failure, ...]
    """The first 1000, each with its time."""
    first: datetime.datetime | None
    last: datetime.datetime | None


def client_counts(cp: LocalControlPlane, namespace: str, client: str = "client") -> Counts:
    """The counts of the client's (one) pod, read from its /counts (from the host)."""
    (pod,) = pods(cp, namespace, client)
    return counts_of(pod)


def counts_of(pod: Json, timeout: float = 5.0) -> Counts:
    """The counts of this client pod (one of several while it restarts, say)."""
    raw = json.loads(_get(f"http://{pod['status']['podIP']}:{CLIENT_PORT}/counts", timeout))

    def when(text: str | None) -> datetime.datetime | None:
        return datetime.datetime.fromisoformat(text) if text else None

    return Counts(
        total=raw["total"],
        succeeded=raw["succeeded"],
        failed=raw["failed"],
        failures=tuple(
            Failure(datetime.datetime.fromisoformat(f["time"]), f["target"], f["error"])
            for f in raw["failures"]
        ),
        first=when(raw["first"]),
        last=when(raw["last"]),
    )


def proxy_metrics(pod: Json) -> str:
    """The pod's proxy's own Prometheus metrics (its admin port, from the host)."""
    return get_text(f"http://{pod['status']['podIP']}:{ADMIN_PORT}/metrics")


_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)\{(?P<labels>.*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(metrics: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of metric ``name`` as (labels, value)."""
    found = []
    for line in metrics.splitlines():
        match = _SAMPLE.match(line)
        if match and match["name"] == name:
            found.append((dict(_LABEL.findall(match["labels"])), float(match["value"])))
    return found


def proxy_container(pod: Json) -> Json | None:
    spec = pod.get("spec") or {}
    for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        if container.get("name") == l5d.PROXY_CONTAINER:
            return dict(container)
    return None


def mtls_problems(pod: Json, peer: str, direction: str) -> list[str]:
    """Why ``pod`` is not meshed with its traffic on mTLS (empty: it is): it carries
    Linkerd's proxy, the proxy is ready, and its own metrics count HTTP requests in
    ``direction`` (``inbound``: from ``peer``'s identity, as ``client_id``; ``outbound``: to
    ``peer``'s, as ``server_id``) with ``tls="true"``, and none of that peer's without."""
    problems = []
    if proxy_container(pod) is None:
        problems.append("no linkerd-proxy container: not meshed")
    statuses = (pod.get("status") or {}).get("initContainerStatuses", []) + (
        (pod.get("status") or {}).get("containerStatuses", [])
    )
    if not any(s["name"] == l5d.PROXY_CONTAINER and s.get("ready") for s in statuses):
        problems.append("its proxy is not ready")
    if problems:
        return problems
    key = "client_id" if direction == "inbound" else "server_id"
    counted = [
        (labels, value)
        for labels, value in samples(proxy_metrics(pod), "request_total")
        if labels.get("direction") == direction and labels.get(key) == peer
    ]
    if not any(labels.get("tls") == "true" and value > 0 for labels, value in counted):
        problems.append(f'no {direction} request_total with tls="true" and {key}={peer}')
    plain = [labels for labels, value in counted if labels.get("tls") != "true" and value > 0]
    if plain:
        problems.append(f"{direction} requests with {key}={peer} not on mTLS: {plain}")
    return problems


def value(metrics: str, name: str) -> float:
    """An unlabelled metric's value (a proxy's ``process_resident_memory_bytes``, say)."""
    for line in metrics.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == name:
            return float(parts[1])
    raise KeyError(f"no metric {name}")


def start_rollout_mesh(
    cp: LocalControlPlane, namespace: str, count: int, client: str = "client"
) -> list[str]:
    """The world of a data-plane rollout on ``cp``'s real node: Linkerd's control plane, its
    proxy image also tagged ``ROLLED``, the meshed ``namespace`` with ``count`` opted-in
    servers (2 replicas each) and the client sending to them all, every one rolled out."""
    start_linkerd(cp)
    cp.node.ctr("images", "tag", f"{PROXY_IMAGE}:{INSTALLED}", f"{PROXY_IMAGE}:{ROLLED}")
    create_namespace(cp, namespace)
    servers = deploy_servers(cp, namespace, count, 2, True)
    deploy_client(cp, namespace, servers, client)
    return servers


async def traffic_beyond(
    cp: LocalControlPlane, namespace: str, total: int, client: str = "client"
) -> Counts:
    """Until the client has sent ``total`` requests: its counts then."""

    async def more() -> Counts | None:
        counts = await asyncio.to_thread(client_counts, cp, namespace, client)
        return counts if counts.total >= total else None

    found: Counts = await eventually(more, timeout=60, what=f"{total} requests sent")
    return found


async def serving_on_mtls(
    cp: LocalControlPlane, namespace: str, names: list[str], version: str, client: str = "client"
) -> None:
    """Until every pod of ``names`` (2 each) runs proxy ``version`` and has served the client
    over mutual TLS with the client's identity (a pod just made ready may not have yet)."""
    client_id = identity(namespace, client)

    async def serving() -> bool:
        problems = {}
        for name in names:
            found = pods(cp, namespace, name)
            if len(found) != 2:
                problems[name] = [f"{len(found)} pods"]
            for pod in found:
                said = await asyncio.to_thread(mtls_problems, pod, client_id, "inbound")
                running = pod["metadata"]["annotations"].get(PROXY_VERSION_ANNOTATION)
                if running != version:
                    said.append(f"proxy {running}, not {version}")
                if said:
                    problems[pod["metadata"]["name"]] = said
        if problems:
            raise AssertionError(problems)
        return True

    await eventually(serving, timeout=60, what=f"every server pod on {version} and mTLS")
