"""A rollout executor's world for its unit tests: ``n`` opted-in Deployments of one pod each
on the old proxy, in real caches (Stores); a writer that records what it is asked (restart
patches, evictions, injector dry-runs) and answers ReplicaSets from the cached Deployments; an
event recorder that lists; a settable clock. Also the configuration the passes roll to, the
Deployment statuses a test sets, and the status a pass leaves on its LinkerdConfig."""

from __future__ import annotations

from typing import Any

from linkerd_config.kube.resource import Json
from linkerd_config.kube.store import Store
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.configmap.desired import Desired
from linkerd_config.linkerd.mesh import DesiredProxy
from linkerd_config.linkerd.rollout import rollback
from linkerd_config.linkerd.rollout.actions import RolloutOutcome
from linkerd_config.linkerd.rollout.executor import RolloutExecutor
from linkerd_config.linkerd.rollout.observe import AnchorHold
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.spec.crd import Target
from tests.support.clock import FakeClock
from tests.support.controller_fakes import FakeRecorder, FakeWriter

NEW, OLD, HASH = "edge-19.12.3", "edge-19.12.1", "h1"
CONFIG: Json = {"metadata": {"name": "cfg"}, "status": {}}
DESIRED = Desired(Target("linkerd", "linkerd-config"), {}, HASH, "Spec", DesiredProxy(NEW))


HEALTHY_STATUS: Json = {
    "observedGeneration": 1,
    "replicas": 1,
    "updatedReplicas": 1,
    "availableReplicas": 1,
}
NOT_AVAILABLE: Json = {**HEALTHY_STATUS, "availableReplicas": 0}


class World:
    """``n`` opted-in Deployments of one pod each, all on the old proxy."""

    def __init__(self, n: int, injects: str | None = NEW, **options: Any) -> None:
        self.clock = FakeClock(1_700_000_000.0)
        self.writer = FakeWriter(injects)
        self.recorder = FakeRecorder()
        self.pods, self.replicasets = Store(), Store()
        self.deployments = self.writer.cache
        namespaces = Store()
        for namespace in ("ns", "ns2"):
            namespaces.put({"metadata": {"name": namespace}})
        for i in range(n):
            self.add(f"app-{i:02d}")
        self.executor = RolloutExecutor(
            self.writer,  # type: ignore[arg-type]
            self.recorder,  # type: ignore[arg-type]
            RolloutOptions(**options),
            pods=self.pods,
            namespaces=namespaces,
            replicasets=self.replicasets,
            workloads={
                "Deployment": self.deployments,
                "StatefulSet": Store(),
                "DaemonSet": Store(),
            },
            wall=self.clock,
            monotonic=self.clock,
        )

    def add(self, name: str, namespace: str = "ns", app: str = "") -> None:
        """An opted-in Deployment ``namespace/name``, its pods labelled ``app`` (default: its
        name)."""
        template = {"metadata": {"labels": {"app": app or name}}, "spec": {"containers": []}}
        deployment = {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": f"uid-{name}",
                "resourceVersion": "1",
                "generation": 1,
            },
            "spec": {"replicas": 1, "template": template},
            "status": HEALTHY_STATUS,
        }
        self.deployments.put(deployment)
        self.writer.deployments[f"{namespace}/{name}"] = deployment
        owner = {"kind": "Deployment", "name": name, "controller": True}
        self.replicasets.put(
            {"metadata": {"name": f"{name}-rs", "namespace": namespace, "ownerReferences": [owner]}}
        )
        self.pods.put(
            {
                "metadata": {
                    "name": f"{name}-pod",
                    "namespace": namespace,
                    "labels": {mesh.RECONCILE_LABEL: mesh.RECONCILE_AUTO},
                    "annotations": {mesh.PROXY_VERSION_ANNOTATION: OLD},
                    "ownerReferences": [
                        {"kind": "ReplicaSet", "name": f"{name}-rs", "controller": True}
                    ],
                },
                "status": {"phase": "Running"},
            }
        )

    def record_restarts(self, status: Json | None = None, proxy: str | None = NEW) -> None:
        """What the informers show after our patches: each workload's restart record, and
        (by default) its rollout complete, its pod back on the new proxy (None: back without
        any proxy, the injector having missed it)."""
        for key, patch in self.writer.patches:
            obj = self.deployments.get(key)
            assert obj is not None
            spec = {**obj["spec"], "template": patch["spec"]["template"]}
            self.deployments.put({**obj, "spec": spec, "status": status or HEALTHY_STATUS})
            pod = self.pods.get(f"{key}-pod")
            if pod is not None:
                annotations = {**pod["metadata"]["annotations"]}
                annotations.pop(mesh.PROXY_VERSION_ANNOTATION, None)
                if proxy is not None:
                    annotations[mesh.PROXY_VERSION_ANNOTATION] = proxy
                self.pods.put({**pod, "metadata": {**pod["metadata"], "annotations": annotations}})
        self.writer.patches.clear()

    async def roll(self) -> Any:
        outcome = await roll(self.executor, CONFIG, DESIRED)
        self.record_restarts()
        return outcome


async def roll(
    executor: RolloutExecutor,
    config: Json,
    desired: Desired,
    effective: Desired | None = None,
    anchors: AnchorHold | None = None,
    *,
    asked: str | None = None,
) -> RolloutOutcome:
    """``executor.roll`` as the controller calls it: with where a failure would roll back to,
    read by the reconcile (``rollback.target``)."""
    back_to = rollback.target(config, desired.config_hash, asked or desired.config_hash)
    return await executor.roll(config, desired, effective, anchors, asked=asked, back_to=back_to)


def with_status(config: Json, outcome: Any) -> Json:
    """The LinkerdConfig as the controller leaves it: the outcome's status fields written."""
    status = {**config.get("status", {}), **outcome.status}
    return {**config, "status": {k: v for k, v in status.items() if v is not None}}
