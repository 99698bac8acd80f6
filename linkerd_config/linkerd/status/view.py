"""What the controller's caches hold, as plain data: the one input of ``plan``, ``status``
and the trust-anchor guard's view of the mesh. Pure: the caches (``caches``) fill
it; nothing here reads a watch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from linkerd_config.kube.resource import Json, Keyed
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.mesh import Workload

if TYPE_CHECKING:
    from linkerd_config.linkerd.configmap.desired import Desired


@dataclass(frozen=True)
class ClusterView:
    """What the controller's caches hold, as plain data."""

    configs: Sequence[Json]
    configmaps: Mapping[str, Json]
    """``namespace/name`` -> ConfigMap, in the namespace the controller manages."""
    pods: Sequence[Json]
    """Opted-in, Running pods, as the controller caches them (metadata only), each with its
    name and namespace (``mesh.cached_pods``)."""
    namespaces: Mapping[str, Json]
    replicasets: Mapping[str, Json]
    """``namespace/name`` -> ReplicaSet (its controller reference)."""
    workloads: Mapping[str, Mapping[str, Json]]
    """Kind -> ``namespace/name`` -> Deployment, StatefulSet or DaemonSet (its record)."""
    config_namespace: str
    """The namespace whose ConfigMaps the controller manages."""
    meshed: Sequence[Keyed] = ()
    """Every meshed pod (opted in or not): ``namespace/name`` and its record, its trust-root
    hash and creation minute (``guard.meshed_pod_projection``), the trust-anchor guard's
    view."""
    issuer_updated: float | None = None
    """When Linkerd's identity last took up a new issuer, as its Events say (None: none
    seen)."""

    def replicaset(self, namespace: str, name: str) -> Json | None:
        return self.replicasets.get(f"{namespace}/{name}")

    def record(self, workload: Workload) -> Json | None:
        return (self.workloads.get(workload.kind) or {}).get(
            f"{workload.namespace}/{workload.name}"
        )

    def namespace(self, name: str) -> Json | None:
        return self.namespaces.get(name)

    def standing(self, desired: Desired) -> mesh.Standing:
        return mesh.standing(self.pods, self.namespaces, desired.proxy, self.replicaset)

    def rollout_plan(self, desired: Desired) -> mesh.RolloutPlan:
        return mesh.plan_rollout(self.pods, self.namespaces, desired.proxy, self.replicaset)
