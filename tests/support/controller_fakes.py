"""The fakes of the controller's unit tests, each defined once: a writer that records what it
is asked (or refuses), answers the injector's dry runs and lists a Deployment's ReplicaSets;
an event recorder that lists; and a controller wired to them over caches filled by hand (no
API server). ``rollout_worlds`` builds the rollout's worlds on the same two."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

from linkerd_config.kube import revisions
from linkerd_config.kube.client import ApiError
from linkerd_config.kube.informer import Informer
from linkerd_config.kube.resource import Json, resource_version
from linkerd_config.kube.store import Store
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.reconciler import LinkerdConfigController


def replica_failures(deployment: Json) -> list[Json]:
    """The ReplicaFailure a Deployment's status shows, as its newest ReplicaSet would carry it."""
    conditions = (deployment.get("status") or {}).get("conditions") or []
    return [c for c in conditions if c.get("type") == "ReplicaFailure"]


class FakeWriter:
    """``kube.writer.Writer`` as the controller and its rollout use it, recording each call.
    ``injects``: the proxy version Linkerd's injector gives a dry-run pod (None: none)."""

    def __init__(self, injects: str | None = None) -> None:
        self.applied: list[Json] = []
        self.created: list[Json] = []
        self.statuses: list[Json] = []
        self.patched: list[str] = []
        """Each merge patch's object, ``namespace/name`` (a cluster-scoped one's name)."""
        self.patches: list[tuple[str, Json]] = []
        """Each merge patch, by that name, in the order of ``patched``."""
        self.conflicts: set[str] = set()
        self.forbidden: set[str] = set()
        """Names whose merge patch answers 409, or 403."""
        self.refuse: ApiError | None = None
        self.refuse_create: ApiError | None = None
        self.refuse_status: ApiError | None = None
        self.preconditions: list[str | None] = []
        self.apply_preconditions: list[str | None] = []
        """The resourceVersion of each apply's precondition (``on``), in the order of
        ``applied``."""
        self.apply_uids: list[str | None] = []
        """The uid of each apply's precondition, in the order of ``applied``."""
        self.calls: list[str] = []
        """The order of the writes: ``status``, or the ConfigMap written (``apply:NAME``)."""
        self.server: Store | None = None
        """Where the objects are as the API server has them, if the test keeps them (the
        controller's cache of ConfigMaps): an apply then answers as server-side apply does."""
        self.cache = Store()
        """The Deployments as the informer holds them: ``list`` answers their ReplicaSets."""
        self.earlier_revision_failed: set[str] = set()
        """Deployments whose ReplicaFailure is an earlier ReplicaSet's, not the newest's."""
        self.injects = injects
        self.evicted: list[str] = []
        self.deployments: dict[str, Json] = {}
        self.asked: list[tuple[str, Json]] = []
        self.injects_in: dict[str, str | None] = {}
        """Namespaces where the injector injects another proxy, or none (None)."""

    async def apply(self, _resource: Any, obj: Json, *, on: Json | None = None) -> Json:
        if self.refuse is not None and obj["metadata"]["name"] == "linkerd-config":
            raise self.refuse
        self.applied.append(obj)
        self.apply_preconditions.append(resource_version(on))
        self.apply_uids.append(((on or {}).get("metadata") or {}).get("uid"))
        self.calls.append(f"apply:{obj['metadata']['name']}")
        return self._applied(obj)

    def _applied(self, obj: Json) -> Json:
        """The object as server-side apply leaves it: what was sent, and what another field
        manager owns there, kept (in ``server``'s copy, the keys and metadata entries no
        apply of ours ever sent to that object); what we sent before and not now is gone."""
        meta = obj["metadata"]
        existing = (
            None
            if self.server is None
            else self.server.get(
                f"{meta.get('namespace')}/{meta['name']}" if meta.get("namespace") else meta["name"]
            )
        )
        if existing is None:
            return obj
        ours = [a for a in self.applied if a["metadata"]["name"] == meta["name"]]
        answer = copy.deepcopy(obj)
        for path in (
            ("data",),
            ("binaryData",),
            ("metadata", "labels"),
            ("metadata", "annotations"),
        ):
            sent = {k for a in ours for k in _at(a, path)}
            others = {k: v for k, v in _at(existing, path).items() if k not in sent}
            if others:
                target = answer
                for part in path:
                    target = target.setdefault(part, {})
                target.update(others)
        return answer

    async def create(self, _resource: Any, obj: Json, *, field_manager: str) -> Json:
        if self.refuse_create is not None:
            raise self.refuse_create
        self.created.append(obj)
        # As the API server answers: the object with its new resourceVersion.
        return {**obj, "metadata": {**obj["metadata"], "resourceVersion": f"c{len(self.created)}"}}

    async def merge_patch(
        self,
        _resource: Any,
        namespace: str | None,
        name: str,
        patch: Json,
        *,
        field_manager: str | None = None,
    ) -> Json:
        if name in self.conflicts:
            raise ApiError(409, "PATCH", name, {"reason": "Conflict"}, None)
        if name in self.forbidden:
            raise ApiError(403, "PATCH", name, {"reason": "Forbidden"}, None)
        key = f"{namespace}/{name}" if namespace else name
        self.patched.append(key)
        self.patches.append((key, patch))
        return patch

    async def get(self, _resource: Any, namespace: str, name: str) -> Json | None:
        return self.deployments.get(f"{namespace}/{name}")

    async def dry_run_create(self, _resource: Any, namespace: str, pod: Json) -> Json:
        self.asked.append((namespace, pod))
        annotations = dict(pod["metadata"]["annotations"])
        injects = self.injects_in.get(namespace, self.injects)
        if injects is not None:
            annotations[mesh.PROXY_VERSION_ANNOTATION] = injects
        return {**pod, "metadata": {**pod["metadata"], "annotations": annotations}}

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

    async def patch_status(
        self, _resource: Any, _ns: Any, _name: str, status: Json, **precondition: Any
    ) -> Json:
        if self.refuse_status is not None:
            raise self.refuse_status
        self.statuses.append(status)
        self.preconditions.append(precondition.get("resource_version"))
        self.calls.append("status")
        return status


class FakeRecorder:
    """``kube.events.EventRecorder``, listing what it is asked to record."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.messages: list[str] = []
        """Each event's message, in the order of ``events``."""
        self.full: list[tuple[str, str, str, str, str]] = []
        """(kind, name, type, reason, message) of each."""

    def record(self, involved: Any, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason))
        self.messages.append(message)
        kind = involved.get("kind", "LinkerdConfig")
        self.full.append((kind, involved["metadata"]["name"], type_, reason, message))


def filled(*informers: Informer, yet: bool = True) -> None:
    """Informers whose caches count as filled (``has_synced``) with whatever a test puts in
    their stores, as after their first list; ``yet=False``: as before it."""
    for informer in informers:
        if yet:
            informer._synced.set()
        else:
            informer._synced.clear()


def controller(
    *configs: Json, configmap: Json | None = None
) -> tuple[Any, FakeWriter, FakeRecorder]:
    recorder = FakeRecorder()
    # The controller's only use of a client before it runs: where its informers report metrics.
    no_client = SimpleNamespace(registry=None)
    ctl = LinkerdConfigController(no_client, recorder)  # type: ignore[arg-type]
    filled(*ctl.informers)
    writer = FakeWriter()
    writer.server = ctl.configmaps.store
    for part in (ctl, ctl.rollout, ctl.writes, ctl.outcomes):
        part.writer = writer  # type: ignore[assignment]
    for config in configs:
        ctl.configs.store.put(config)
    if configmap is not None:
        ctl.configmaps.store.put(configmap)
    return ctl, writer, recorder


def conditions(status: Json) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


_OWNED_BY_KEY = (("data",), ("binaryData",), ("metadata", "labels"), ("metadata", "annotations"))
"""Where a ConfigMap's fields are owned key by key."""


def _at(obj: Json, path: tuple[str, ...]) -> dict[str, Any]:
    found: Any = obj
    for part in path:
        found = (found or {}).get(part)
    return dict(found or {})
