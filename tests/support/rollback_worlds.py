"""The rollout executor's world for ``onFailure: Rollback`` (``rollout_worlds.World``, whose
writer also answers the live Deployment and its ReplicaSets, each keeping its pod template):
the configuration a rollback returns to (its hash and desired state), the status of pods the
admission refused, a LinkerdConfig that rolls back, and a first pass that fails."""

from __future__ import annotations

import builtins
from typing import Any

from linkerd_config.kube import revisions
from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.configmap.desired import Desired
from linkerd_config.linkerd.mesh import DesiredProxy
from linkerd_config.linkerd.rollout import rollback
from linkerd_config.linkerd.spec.crd import LAST_COMPLETED_FIELD, Target
from tests.support.controller_fakes import replica_failures
from tests.support.merge_patch import apply_merge_patch
from tests.support.rollout_worlds import (
    DESIRED,
    HEALTHY_STATUS,
    NOT_AVAILABLE,
    OLD,
    World,
    roll,
)

OLD_HASH = "h0"
OLD_DESIRED = Desired(Target("linkerd", "linkerd-config"), {}, OLD_HASH, "Spec", DesiredProxy(OLD))
REFUSED: Json = {
    **NOT_AVAILABLE,
    "conditions": [
        {
            "type": "ReplicaFailure",
            "status": "True",
            "reason": "FailedCreate",
            "message": 'pods "app-00-x" is forbidden: no new proxy here',
        }
    ],
}


def rollback_config(last_completed: bool = True) -> Json:
    status: Json = {}
    if last_completed:
        completed = rollback.completed_record(
            {
                "metadata": {"generation": 1},
                "spec": {"proxy": {"proxyVersion": OLD, "proxyInitImageVersion": "v1.2.0"}},
            },
            OLD_HASH,
            "2026-11-24T00:00:00Z",
        )
        assert completed is not None
        status[LAST_COMPLETED_FIELD] = completed.to_json()
    return {
        "metadata": {"name": "cfg", "generation": 2},
        "spec": {
            "rollout": {"onFailure": "Rollback", "progressDeadline": "30s", "maxRestartsPerPass": 1}
        },
        "status": status,
    }


class RollbackWorld(World):
    """``World``, whose writer also answers the live Deployment and its ReplicaSets as the
    API server would after the informers' view (each ReplicaSet keeps its pod template)."""

    def __init__(self, n: int) -> None:
        super().__init__(n, restart_interval=1.0)
        self.live_replicasets: dict[str, list[Json]] = {}
        self.writer.list = self.list  # type: ignore[method-assign, assignment]
        self.writer.get = self.get  # type: ignore[method-assign]
        for obj in self.deployments.list():
            meta = obj["metadata"]
            meta["uid"] = f"uid-{meta['name']}"
            self.live_replicasets[meta["name"]] = [self.replicaset(obj, "1")]

    @staticmethod
    def replicaset(deployment: Json, revision: str) -> Json:
        meta = deployment["metadata"]
        return {
            "metadata": {
                "name": f"{meta['name']}-{revision}",
                "annotations": {revisions.REVISION_ANNOTATION: revision},
                "ownerReferences": [{"kind": "Deployment", "uid": meta["uid"], "controller": True}],
            },
            "spec": {"template": deployment["spec"]["template"]},
            "status": {"conditions": replica_failures(deployment)},
        }

    async def get(self, _resource: Any, namespace: str, name: str) -> Json | None:
        return self.deployments.get(f"{namespace}/{name}")

    async def list(self, _resource: Any, _namespace: str) -> list[Json]:
        return [r for rs in self.live_replicasets.values() for r in rs]

    def restarted(self, status: Json) -> None:
        """Our restart patches land (merged as the API server merges them): a new
        ReplicaSet per restarted Deployment, whose pods ``status`` describes."""
        for key, patch in self.writer.patches:
            obj = self.deployments.get(key)
            assert obj is not None
            spec = apply_merge_patch(obj["spec"], patch["spec"])
            self.deployments.put({**obj, "spec": spec, "status": status})
            updated = self.deployments.get(key)
            assert updated is not None
            self.live_replicasets[obj["metadata"]["name"]].append(self.replicaset(updated, "2"))
        self.writer.patches.clear()

    async def bring_back(self, config: Json) -> Any:
        """The ConfigMap holds the old configuration and the injector serves it now: the next
        reconcile restores what the failed rollout restarted."""
        self.executor.found(OLD_HASH)
        self.writer.injects = OLD
        self.clock.now += 5.0
        return await roll(self.executor, config, DESIRED, OLD_DESIRED)

    def restored(self) -> builtins.list[str]:
        """Our restore patches land: each template back (an undo's time on the Deployment's
        own metadata), its old pods healthy."""
        names = []
        for key, patch in self.writer.patches:
            obj = self.deployments.get(key)
            assert obj is not None
            template = apply_merge_patch(obj["spec"]["template"], patch["spec"]["template"])
            stamp = {k: v for k, v in patch["metadata"].items() if k != "resourceVersion"}
            self.deployments.put({**obj, "metadata": apply_merge_patch(obj["metadata"], stamp),
                                  "spec": {**obj["spec"], "template": template},
                                  "status": HEALTHY_STATUS})  # fmt: skip
            names.append(key)
        self.writer.patches.clear()
        return names


async def failed_first_pass(world: RollbackWorld, config: Json) -> Any:
    await roll(world.executor, config, DESIRED, DESIRED)
    world.restarted(REFUSED)
    world.clock.now += 1.0
    return await roll(world.executor, config, DESIRED, DESIRED)
