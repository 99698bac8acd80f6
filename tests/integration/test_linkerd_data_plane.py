"""Linkerd's real data plane on the real node: edge-26.8.3's control plane (identity,
destination with the policy controller, the injector), itself meshed, installed by its own
CLI; a server of two replicas and a client, both injected by the real injector; the proxies'
own metrics show their traffic on mutual TLS with each peer's identity, Linkerd's CLI agrees,
and the client, having sent requests the whole time, counts none failed."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from devcluster import linkerd_control_plane as l5d
from devcluster.cluster import ControlPlaneOptions, LocalControlPlane
from devcluster.linkerd_control_plane import LinkerdControlPlane
from tests.support import mesh_traffic as mesh

pytestmark = [pytest.mark.integration, pytest.mark.real_node]

NAMESPACE = "mesh-app"
ENOUGH = 200
"""Requests the client must have sent (about 10 s of traffic) before the checks."""


@pytest.fixture(scope="module")
def meshed() -> Iterator[tuple[LocalControlPlane, LinkerdControlPlane, list[str]]]:
    with LocalControlPlane(ControlPlaneOptions(real_node=True)) as cp:
        plane = mesh.start_linkerd(cp)
        mesh.create_namespace(cp, NAMESPACE)
        servers = mesh.deploy_servers(cp, NAMESPACE, count=1, replicas=2)
        mesh.deploy_client(cp, NAMESPACE, servers)
        deadline = time.monotonic() + 60
        while mesh.client_counts(cp, NAMESPACE).total < ENOUGH:
            assert time.monotonic() < deadline, "the client does not send"
            time.sleep(0.5)
        yield cp, plane, servers


def test_the_control_plane_runs_meshed_as_pods(
    meshed: tuple[LocalControlPlane, LinkerdControlPlane, list[str]],
) -> None:
    cp, plane, _ = meshed
    listed = cp.api_request("GET", f"/api/v1/namespaces/{l5d.NAMESPACE}/pods")["items"]
    by_component = {
        p["metadata"]["labels"].get("linkerd.io/control-plane-component"): p for p in listed
    }
    assert set(by_component) >= {"identity", "destination", "proxy-injector"}
    for component in ("identity", "destination", "proxy-injector"):
        pod = by_component[component]
        assert pod["spec"]["nodeName"] == "real-node-0"
        assert mesh.proxy_container(pod) is not None, f"{component} is not meshed"
        statuses = pod["status"].get("initContainerStatuses", []) + pod["status"].get(
            "containerStatuses", []
        )
        assert all(s["ready"] for s in statuses if s["name"] != "linkerd-init"), statuses
    containers = {c["name"] for c in by_component["destination"]["spec"]["containers"]}
    assert {"destination", "sp-validator", "policy"} <= containers
    # Every proxy got its certificate from the identity controller, under the test's anchor.
    roots = cp.api_request(
        "GET", f"/api/v1/namespaces/{l5d.NAMESPACE}/configmaps/linkerd-identity-trust-roots"
    )
    assert roots["data"]["ca-bundle.crt"].strip() == plane.credentials.trust_anchors.strip()
    meshed_pods = [
        p
        for ns in (l5d.NAMESPACE, NAMESPACE)
        for p in cp.api_request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
    ]
    assert len(meshed_pods) == 6
    for pod in meshed_pods:
        refreshed = mesh.samples(mesh.proxy_metrics(pod), "control_identity_cert_refreshes_total")
        counts = {labels["result"]: value for labels, value in refreshed}
        assert counts["ok"] >= 1 and counts["error"] == 0, (pod["metadata"]["name"], counts)
    identity_ip = by_component["identity"]["status"]["podIP"]
    certified = [
        value
        for labels, value in mesh.samples(
            mesh.get_text(f"http://{identity_ip}:9990/metrics"), "grpc_server_handled_total"
        )
        if labels.get("grpc_method") == "Certify" and labels.get("grpc_code") == "OK"
    ]
    assert certified and certified[0] >= len(meshed_pods)


def test_the_traffic_is_mutual_tls_with_each_peers_identity(
    meshed: tuple[LocalControlPlane, LinkerdControlPlane, list[str]],
) -> None:
    cp, plane, servers = meshed
    client_id = mesh.identity(NAMESPACE, "client")
    server_pods = mesh.pods(cp, NAMESPACE, servers[0])
    assert len(server_pods) == 2
    for pod in server_pods:
        assert mesh.mtls_problems(pod, client_id, "inbound") == [], pod["metadata"]["name"]
    (client_pod,) = mesh.pods(cp, NAMESPACE, "client")
    server_id = mesh.identity(NAMESPACE, servers[0])
    assert mesh.mtls_problems(client_pod, server_id, "outbound") == []

    # Linkerd's own CLI reads the same counters from the proxy (through the API server).
    name = server_pods[0]["metadata"]["name"]
    shown = plane.linkerd("diagnostics", "proxy-metrics", "-n", NAMESPACE, f"po/{name}")
    agreed = [
        labels
        for labels, value in mesh.samples(shown, "request_total")
        if labels.get("direction") == "inbound"
        and labels.get("client_id") == client_id
        and labels.get("tls") == "true"
        and value > 0
    ]
    assert agreed, "linkerd diagnostics proxy-metrics shows no mTLS request from the client"

    for pod in [
        *cp.api_request("GET", f"/api/v1/namespaces/{l5d.NAMESPACE}/pods")["items"],
        *server_pods,
        client_pod,
    ]:
        metrics = mesh.proxy_metrics(pod)
        rss = mesh.value(metrics, "process_resident_memory_bytes")
        cpu = mesh.value(metrics, "process_cpu_seconds_total")
        print(f"{pod['metadata']['name']}: proxy RSS {rss / 2**20:.1f} MiB, CPU {cpu:.2f} s")


def test_the_client_lost_no_request(
    meshed: tuple[LocalControlPlane, LinkerdControlPlane, list[str]],
) -> None:
    cp, _, _ = meshed
    counts = mesh.client_counts(cp, NAMESPACE)
    print(f"client: {counts.total} requests, {counts.failed} failed")
    assert counts.total >= ENOUGH
    assert counts.failures == ()
    assert counts.failed == 0
    assert counts.succeeded == counts.total
