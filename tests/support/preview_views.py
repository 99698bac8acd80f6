"""What ``plan`` and ``status`` read, built from plain data for their unit tests (no API
server): opted-in pods on a proxy version, a Deployment's pods through its ReplicaSet, and the
ClusterView of a cluster with Linkerd edge-19.12.1's ConfigMap and such Deployments; the rollout
defaults and the three emojivoto Deployments the plan tests roll."""

from __future__ import annotations

from linkerd_config.kube.resource import Json
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.status.view import ClusterView
from tests.support.samples import install_configmap

OLD, NEW = "edge-19.12.1", "edge-19.12.3"


def pod(ns: str, name: str, version: str = OLD, rs: str | None = None, **annotations: str) -> Json:
    meta: Json = {
        "name": name,
        "namespace": ns,
        "labels": {mesh.RECONCILE_LABEL: mesh.RECONCILE_AUTO},
        "annotations": {mesh.PROXY_VERSION_ANNOTATION: version, **annotations},
    }
    if rs:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": rs, "controller": True}]
    return {"metadata": meta, "status": {"phase": "Running"}}


def deployment_of(
    ns: str, name: str, pods: int, version: str = OLD, **annotations: str
) -> tuple[list[Json], Json]:
    """``pods`` pods of Deployment ``name`` (through ReplicaSet ``name-rs``)."""
    return (
        [pod(ns, f"{name}-{i}", version, f"{name}-rs", **annotations) for i in range(pods)],
        {
            "metadata": {
                "name": f"{name}-rs",
                "namespace": ns,
                "ownerReferences": [{"kind": "Deployment", "name": name, "controller": True}],
            }
        },
    )


def view(
    *,
    configmap: Json | None = None,
    configs: list[Json] | None = None,
    deployments: dict[tuple[str, str], tuple[int, str]] | None = None,
    namespaces: dict[str, Json] | None = None,
    records: dict[str, Json] | None = None,
    extra_pods: list[Json] | None = None,
) -> ClusterView:
    pods: list[Json] = list(extra_pods or [])
    replicasets: dict[str, Json] = {}
    for (ns, name), (count, version) in (deployments or {}).items():
        found, rs = deployment_of(ns, name, count, version)
        pods.extend(found)
        replicasets[f"{ns}/{name}-rs"] = rs
    cm = install_configmap() if configmap is None else configmap
    return ClusterView(
        configs=configs or [],
        configmaps={f"linkerd/{cm['metadata']['name']}": cm} if cm else {},
        pods=pods,
        namespaces=namespaces or {},
        replicasets=replicasets,
        workloads={"Deployment": records or {}},
        config_namespace="linkerd",
    )


DEFAULTS = RolloutOptions(max_restarts_per_pass=2, restart_interval=5.0)
APPS = {("emojivoto", n): (2, OLD) for n in ("web", "emoji", "voting")}
