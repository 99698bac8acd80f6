"""A rollout executor's world for its unit tests: ``n`` opted-in Deployments of one pod each
on the old proxy, in real caches (Stores); a writer that records what it is asked (restart
patches, evictions, injector dry-runs) and answers ReplicaSets from the cached Deployments; an
event recorder that lists; a settable clock. Also the configuration the passes roll to, the
Deployment statuses a test sets, and the status a pass leaves on its LinkerdConfig."""

from __future__ import annotations

from typing import Any

from linkerd_config.kube import revisions
from linkerd_config.kube.client import ApiError
from linkerd_config.kube.resource import Json
from linkerd_config.kube.store import Store
from linkerd_config.linkerd import rollout
from linkerd_config.linkerd.linkerdconfig_resource import Target
from linkerd_config.linkerd.reconcile import Desired
from linkerd_config.linkerd.rollout import DesiredProxy
from linkerd_config.linkerd.rollout_executor import RolloutExecutor
from linkerd_config.linkerd.rollout_policy import RolloutOptions
from tests.support.clock import FakeClock

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


def replica_failures(deployment: Json) -> list[Json]:
    """The ReplicaFailure a Deployment's status shows, as its newest ReplicaSet would carry it."""
    conditions = (deployment.get("status") or {}).get("conditions") or []
    return [c for c in conditions if c.get("type") == "ReplicaFailure"]


class FakeWriter:
    def __init__(self, injects: str | None = NEW) -> None:
        self.cache = Store()
        """The Deployments as the informer holds them: ``list`` answers their ReplicaSets."""
        self.earlier_revision_failed: set[str] = set()
        """Deployments whose ReplicaFailure is an earlier ReplicaSet's, not the newest's."""
        self.injects = injects
        self.patched: list[str] = []
        self.patches: list[tuple[str, Json]] = []
        self.evicted: list[str] = []
        self.conflicts: set[str] = set()
        self.forbidden: set[str] = set()
        self.deployments: dict[str, Json] = {}
        self.asked: list[tuple[str, Json]] = []

    async def get(self, _resource: Any, namespace: str, name: str) -> Json | None:
        return self.deployments.get(f"{namespace}/{name}")

    async def dry_run_create(self, _resource: Any, namespace: str, pod: Json) -> Json:
        self.asked.append((namespace, pod))
        annotations = dict(pod["metadata"]["annotations"])
        if self.injects is not None:
            annotations[rollout.PROXY_VERSION_ANNOTATION] = self.injects
        return {**pod, "metadata": {**pod["metadata"], "annotations": annotations}}

    async def merge_patch(self, _resource: Any, namespace: str, name: str, patch: Json) -> Json:
        if name in self.conflicts:
            raise ApiError(409, "PATCH", name, {"reason": "Conflict"}, None)
        if name in self.forbidden:
            raise ApiError(403, "PATCH", name, {"reason": "Forbidden"}, None)
        self.patched.append(f"{namespace}/{name}")
        self.patches.append((f"{namespace}/{name}", patch))
        return patch

    async def evict(self, namespace: str, name: str) -> None:
        self.evicted.append(f"{namespace}/{name}")

    async def list(self, _resource: Any, namespace: str) -> list[Json]:
        """Each cached Deployment's ReplicaSets: its newest revision carries the ReplicaFailure
        its status shows, unless ``earlier_revision_failed`` puts it on an older one."""
        found = []
        for obj in self.cache.list():
            meta = obj["metadata"]
            if meta["namespace"] != namespace:
                continue
            failures = replica_failures(obj)
            earlier = meta["name"] in self.earlier_revision_failed
            for revision, conditions in (("1", failures if earlier else []),
                                         ("2", [] if earlier else failures)):  # fmt: skip
                owner = {"kind": "Deployment", "uid": meta.get("uid"), "controller": True}
                found.append(
                    {
                        "metadata": {
                            "name": f"{meta['name']}-{revision}",
                            "annotations": {revisions.REVISION_ANNOTATION: revision},
                            "ownerReferences": [owner],
                        },
                        "status": {"conditions": conditions},
                    }
                )
        return found


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.full: list[tuple[str, str, str, str, str]] = []
        """(kind, name, type, reason, message) of each."""

    def record(self, involved: Any, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason))
        kind = involved.get("kind", "LinkerdConfig")
        self.full.append((kind, involved["metadata"]["name"], type_, reason, message))


class World:
    """``n`` opted-in Deployments of one pod each, all on the old proxy."""

    def __init__(self, n: int, injects: str | None = NEW, **options: Any) -> None:
        self.clock = FakeClock(1_700_000_000.0)
        self.writer = FakeWriter(injects)
        self.recorder = FakeRecorder()
        self.pods, self.replicasets = Store(), Store()
        self.deployments = self.writer.cache
        namespaces = Store()
        namespaces.put({"metadata": {"name": "ns"}})
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

    def add(self, name: str) -> None:
        template = {"metadata": {"labels": {"app": name}}, "spec": {"containers": []}}
        deployment = {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "uid": f"uid-{name}",
                "resourceVersion": "1",
                "generation": 1,
            },
            "spec": {"replicas": 1, "template": template},
            "status": HEALTHY_STATUS,
        }
        self.deployments.put(deployment)
        self.writer.deployments[f"ns/{name}"] = deployment
        owner = {"kind": "Deployment", "name": name, "controller": True}
        self.replicasets.put(
            {"metadata": {"name": f"{name}-rs", "namespace": "ns", "ownerReferences": [owner]}}
        )
        self.pods.put(
            {
                "metadata": {
                    "name": f"{name}-pod",
                    "namespace": "ns",
                    "labels": {rollout.RECONCILE_LABEL: rollout.RECONCILE_AUTO},
                    "annotations": {rollout.PROXY_VERSION_ANNOTATION: OLD},
                    "ownerReferences": [
                        {"kind": "ReplicaSet", "name": f"{name}-rs", "controller": True}
                    ],
                },
                "status": {"phase": "Running"},
            }
        )

    def record_restarts(self, status: Json | None = None, proxy: str = NEW) -> None:
        """What the informers show after our patches: each workload's restart record, and
        (by default) its rollout complete, its pod back on the new proxy."""
        for key, patch in self.writer.patches:
            obj = self.deployments.get(key)
            assert obj is not None
            spec = {**obj["spec"], "template": patch["spec"]["template"]}
            self.deployments.put({**obj, "spec": spec, "status": status or HEALTHY_STATUS})
            pod = self.pods.get(f"{key}-pod")
            if pod is not None:
                annotations = {**pod["metadata"]["annotations"]}
                annotations[rollout.PROXY_VERSION_ANNOTATION] = proxy
                self.pods.put({**pod, "metadata": {**pod["metadata"], "annotations": annotations}})
        self.writer.patches.clear()

    async def roll(self) -> Any:
        outcome = await self.executor.roll(CONFIG, DESIRED)
        self.record_restarts()
        return outcome


def with_status(config: Json, outcome: Any) -> Json:
    """The LinkerdConfig as the controller leaves it: the outcome's status fields written."""
    status = {**config.get("status", {}), **outcome.status}
    return {**config, "status": {k: v for k, v in status.items() if v is not None}}
