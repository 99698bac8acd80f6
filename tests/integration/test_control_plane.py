"""The local control plane is a real Kubernetes: CRDs, RBAC, workloads that really roll."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from devcluster import cluster, service
from devcluster.cluster import KWOK_NODE, LocalControlPlane
from linkerd_config.kube.client import ApiError, KubeClient, token_access
from linkerd_config.kube.resource import CRDS, DEPLOYMENTS, PODS, REPLICASETS, ApiResource
from tests.support.waiting import eventually

WIDGETS = ApiResource("test.example.com", "v1", "widgets", "Widget")

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.example.com"},
    "spec": {
        "group": "test.example.com",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"size": {"type": "integer", "minimum": 1}},
                            }
                        },
                    }
                },
            }
        ],
    },
}


async def make_namespace(kube: KubeClient, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    await kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": name}})
    return name


async def test_crd_becomes_established_and_serves_custom_objects(kube: KubeClient) -> None:
    await kube.request("POST", CRDS.path(), body=WIDGET_CRD)

    async def established() -> bool:
        crd = await kube.request("GET", CRDS.path(name="widgets.test.example.com"))
        conditions = crd.get("status", {}).get("conditions", [])
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    await eventually(established, timeout=30, what="CRD Established")
    ns = await make_namespace(kube, "crd")

    listed = await kube.request("GET", WIDGETS.path(ns))
    rv = listed["metadata"]["resourceVersion"]
    watch_params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": 30}
    async with kube.stream(
        WIDGETS.path(ns), params=watch_params, total_timeout=40, read_timeout=40
    ) as body:
        created = await kube.request(
            "POST",
            WIDGETS.path(ns),
            body={
                "apiVersion": "test.example.com/v1",
                "kind": "Widget",
                "metadata": {"name": "w1"},
                "spec": {"size": 3},
            },
        )
        line = await asyncio.wait_for(body.readline(), 20)
    event = orjson.loads(line)
    assert event["type"] == "ADDED"
    assert event["object"]["metadata"]["uid"] == created["metadata"]["uid"]

    got = await kube.request("GET", WIDGETS.path(ns, "w1"))
    assert got["spec"] == {"size": 3}
    items = (await kube.request("GET", WIDGETS.path(ns)))["items"]
    assert [i["metadata"]["name"] for i in items] == ["w1"]

    # The schema is enforced by the real API server.
    with pytest.raises(ApiError) as invalid:
        await kube.request(
            "POST",
            WIDGETS.path(ns),
            body={"apiVersion": "test.example.com/v1", "kind": "Widget",
                  "metadata": {"name": "w2"}, "spec": {"size": 0}},
        )  # fmt: skip
    assert invalid.value.status == 422
    assert "spec.size" in invalid.value.message


async def test_rbac_is_enforced_for_service_account_tokens(
    kube: KubeClient, control_plane: LocalControlPlane
) -> None:
    ns = await make_namespace(kube, "rbac")
    await kube.request(
        "POST", f"/api/v1/namespaces/{ns}/serviceaccounts", body={"metadata": {"name": "reader"}}
    )
    token_request = await kube.request(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/reader/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
              "spec": {"expirationSeconds": 600}},
    )  # fmt: skip
    token = token_request["status"]["token"]
    access = token_access(control_plane.server, control_plane.ca_pem, token)
    async with KubeClient(access) as as_reader:
        with pytest.raises(ApiError) as denied:
            await as_reader.request("GET", PODS.path(ns))
        assert denied.value.status == 403
        assert f"system:serviceaccount:{ns}:reader" in denied.value.message

        await kube.request(
            "POST",
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
            body={"metadata": {"name": "pod-reader"},
                  "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]},
        )  # fmt: skip
        await kube.request(
            "POST",
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
            body={
                "metadata": {"name": "reader-reads-pods"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                            "name": "pod-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
            },
        )  # fmt: skip

        async def allowed() -> dict[str, Any]:
            return await as_reader.request("GET", PODS.path(ns))

        listed = await eventually(allowed, timeout=30, what="RBAC binding takes effect")
        assert listed["kind"] == "PodList"
        # The binding grants list, not delete.
        with pytest.raises(ApiError) as still_denied:
            await as_reader.request("DELETE", PODS.path(ns, "anything"))
        assert still_denied.value.status == 403


async def test_deployment_rolls_out_to_running_pods_on_a_kwok_node(kube: KubeClient) -> None:
    ns = await make_namespace(kube, "workload")
    labels = {"app": "web"}
    await kube.request(
        "POST",
        DEPLOYMENTS.path(ns),
        body={
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "web", "image": "example/web:1"}]},
                },
            },
        },
    )

    async def replicaset() -> dict[str, Any] | None:
        items = (await kube.request("GET", REPLICASETS.path(ns)))["items"]
        return items[0] if items else None

    rs = await eventually(replicaset, timeout=60, what="ReplicaSet created by KCM")
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"

    async def running_pods() -> list[dict[str, Any]] | None:
        pods = (await kube.request("GET", PODS.path(ns)))["items"]
        running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
        return running if len(running) == 3 else None

    pods = await eventually(running_pods, timeout=90, what="3 Running pods")
    for pod in pods:
        assert pod["spec"]["nodeName"] == KWOK_NODE
        assert pod["metadata"]["ownerReferences"][0]["uid"] == rs["metadata"]["uid"]

    async def deployment_available() -> bool:
        dep = await kube.request("GET", DEPLOYMENTS.path(ns, "web"))
        return bool(dep.get("status", {}).get("availableReplicas") == 3)

    await eventually(deployment_available, timeout=60, what="Deployment available")


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); treat it as gone only if /proc says so.
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "State:\tZ" not in status.read_text()


def test_dev_cluster_up_and_down_leave_nothing_behind(tmp_path: Path) -> None:
    state = service.up(tmp_path / "state", workloads=True)
    pids = [*state["pids"].values(), state["supervisor_pid"]]
    assert set(state["pids"]) == {
        "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok",
    }  # fmt: skip
    assert all(_process_exists(p) for p in pids)
    workdir = Path(state["workdir"])
    assert workdir.is_dir()
    status = service.status(tmp_path / "state")
    assert status is not None
    assert all(status["components_alive"].values())

    assert service.down(tmp_path / "state") is True
    assert [p for p in pids if _process_exists(p)] == []
    assert not workdir.exists()
    assert service.status(tmp_path / "state") is None


def test_a_kwok_that_does_not_make_its_node_ready_is_restarted_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The start-up's one retry: the first kwok is seen as never making its node Ready (as
    happened once in CI, under load); it is restarted, and the second one does."""
    monkeypatch.setattr(cluster, "KWOK_FIRST_WAIT", 2.0)
    said: list[str] = []

    class FirstKwokStuck(cluster.LocalControlPlane):
        first: object = None

        def _node_ready(self) -> bool:
            kwok = self._procs.get("kwok")
            if self.first is None:
                self.first = kwok
            return kwok is not self.first and super()._node_ready()

    plane = FirstKwokStuck(cluster.ControlPlaneOptions(workloads=True), progress=said.append)
    with plane:
        assert plane._node_ready()
        assert plane.pids()["kwok"] != getattr(plane.first, "pid", None)
    assert any("restarting kwok" in line for line in said), said
