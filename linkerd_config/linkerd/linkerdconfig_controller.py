"""The LinkerdConfig controller: its informers and handlers, and the reconcile.

One reconcile of a LinkerdConfig, in order: validate it; resolve ownership of its target
(conflicts change nothing); render the desired managed keys; keep the copy of what we do not
manage; server-side apply ours when the ConfigMap drifted (or restore it whole when gone); then
one pass of the rollout (``rollout_executor``); finally report status. Every step reads the
informers' caches and is safe to repeat.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog
from prometheus_client import CollectorRegistry, Counter

from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.controller import Controller, ControllerOptions, Result
from linkerd_config.kube.events import EventRecorder
from linkerd_config.kube.informer import Informer, keep_fields
from linkerd_config.kube.metrics import ComponentMetrics
from linkerd_config.kube.resource import (
    CONFIGMAPS,
    NAMESPACES,
    PODS,
    REPLICASETS,
    Json,
)
from linkerd_config.kube.writer import Writer
from linkerd_config.linkerd import reconcile_decision, rollback, rollout
from linkerd_config.linkerd.formats.base import FormatError
from linkerd_config.linkerd.formats.versions import VersionError
from linkerd_config.linkerd.linkerdconfig_resource import (
    CONFIGMAP_SYNCED,
    CONFLICT,
    DATA_PLANE_UP_TO_DATE,
    HASH_ANNOTATION,
    LINKERD_CONFIGS,
    READY,
    Target,
)
from linkerd_config.linkerd.preview import ClusterView
from linkerd_config.linkerd.reconcile import (
    Desired,
    apply_body,
    companion_body,
    desired_config,
    drifted,
    foreign_in_copy,
    from_preserved,
    preserved_copy,
    preserved_name,
    progress_only,
    restored,
    set_condition,
    target_of,
    unmanaged_part,
    unrestorable,
)
from linkerd_config.linkerd.rollout_executor import (
    WORKLOAD_RESOURCES,
    RolloutExecutor,
    RolloutOptions,
)
from linkerd_config.linkerd.trust_anchor_guard import (
    HELD_REASON,
    LIVE_FIELD_SELECTOR,
    BundleError,
    evaluate,
    meshed_pod_projection,
    meshed_selector,
)
from linkerd_config.linkerd.validation import validate

log = structlog.get_logger(__name__)

_CONSEQUENCES = {
    reconcile_decision.NAMESPACE_NOT_MANAGED: "; nothing written",
    reconcile_decision.CONFLICT: "; this one changes nothing",
    reconcile_decision.INSTALLED_CONFIG_UNREADABLE: (
        "; nothing is written until the ConfigMap is corrected"
    ),
}
"""What the controller adds to a refusal's fact (``reconcile_decision``)."""

FIELD_MANAGER = "linkerd-config"
RESTORE_FIELD_MANAGER = "linkerd-config-restore"


class ConfigMapMetrics(ComponentMetrics):
    """What the controller does to the ConfigMaps it manages (ours: controller-runtime has no
    such family). A LinkerdConfig's series exists from its first write, so the first revert
    counts as an increase."""

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        self.reverts = Counter(
            "linkerd_config_configmap_reverts_total",
            "Manual edits of the managed keys put back, by the LinkerdConfig that manages them",
            ["linkerdconfig"],
            registry=registry,
        )


class LinkerdCaches:
    """The informers a LinkerdConfig's reconcile reads, as the controller runs them. The
    ``plan`` and ``status`` commands fill the same ones once (``list_once``) and decide over
    ``view()``: exactly what the controller would see."""

    def __init__(self, client: KubeClient, config_namespace: str) -> None:
        self.config_namespace = config_namespace
        self.configs = Informer(
            client,
            LINKERD_CONFIGS,
            name="linkerdconfigs",
            not_served_hint="install the LinkerdConfig CRD: kubectl apply -k manifests/crd "
            "(or make install, or the Helm chart)",
        )
        self.configmaps = Informer(
            client, CONFIGMAPS, namespace=config_namespace, name="configmaps"
        )
        self.pods = Informer(
            client,
            PODS,
            label_selector=rollout.CANDIDATE_LABEL_SELECTOR,
            field_selector=rollout.RUNNING_FIELD_SELECTOR,
            metadata_only=True,
            transform=rollout.running_pod_metadata,
            name="pods",
        )
        # Every meshed pod, opted in or not, reduced to its trust-root hash: the trust-anchor
        # guard's view of which bundle each runs (a few hundred bytes a pod).
        self.meshed_pods = Informer(
            client,
            PODS,
            label_selector=meshed_selector(config_namespace),
            field_selector=LIVE_FIELD_SELECTOR,
            metadata_only=True,
            transform=meshed_pod_projection,
            name="meshed-pods",
        )
        self.namespaces = Informer(client, NAMESPACES, metadata_only=True, name="namespaces")
        self.replicasets = Informer(
            client,
            REPLICASETS,
            metadata_only=True,
            transform=rollout.replicaset_projection,
            name="replicasets",
        )
        # Restartable owners, reduced to their restart record: which configuration their pod
        # template was last restarted for, and when. Counting and pacing read these caches.
        self.workloads = {
            kind: Informer(
                client,
                resource,
                transform=keep_fields(*rollout.WORKLOAD_FIELDS),
                name=resource.plural,
            )
            for kind, resource in WORKLOAD_RESOURCES.items()
        }

    @property
    def informers(self) -> list[Informer]:
        return [
            self.configs,
            self.configmaps,
            self.pods,
            self.meshed_pods,
            self.namespaces,
            self.replicasets,
            *self.workloads.values(),
        ]

    async def list_once(self) -> None:
        """Fill every cache from one LIST each, concurrently; no watch stays open."""
        await asyncio.gather(*(informer.list_once() for informer in self.informers))

    def view(self) -> ClusterView:
        """The caches' contents as plain data, for ``preview``'s pure decisions."""
        return ClusterView(
            configs=self.configs.store.list(),
            configmaps=self.configmaps.store.snapshot(),
            pods=self.pods.store.list(),
            namespaces={n["metadata"]["name"]: n for n in self.namespaces.store.list()},
            replicasets=self.replicasets.store.snapshot(),
            workloads={kind: i.store.snapshot() for kind, i in self.workloads.items()},
            config_namespace=self.config_namespace,
            meshed=self.meshed_pods.store.list(),
        )


class LinkerdConfigController:
    """Informers, handlers and the reconciler for LinkerdConfig objects."""

    def __init__(
        self,
        client: KubeClient,
        recorder: EventRecorder,
        *,
        config_namespace: str = "linkerd",
        options: RolloutOptions | None = None,
        workers: int = 2,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.monotonic = monotonic
        self._status_written: dict[str, float] = {}
        # Invariant: LinkerdConfig name -> monotonic time this process last wrote its status.
        self.writer = Writer(client, FIELD_MANAGER)
        self.recorder = recorder
        self.config_namespace = config_namespace
        self.options = options or RolloutOptions()
        self.caches = LinkerdCaches(client, config_namespace)
        self.configs = self.caches.configs
        self.configmaps = self.caches.configmaps
        self.pods = self.caches.pods
        self.meshed_pods = self.caches.meshed_pods
        self._anchor_held: set[str] = set()
        # Invariant: LinkerdConfigs whose last reconcile held a trust-anchor removal.
        self.namespaces = self.caches.namespaces
        self.replicasets = self.caches.replicasets
        self.workloads = self.caches.workloads
        self.controller = Controller(
            "linkerdconfig",
            self,
            options=ControllerOptions(workers=workers),
            registry=client.registry,
        )
        self.rollout = RolloutExecutor(
            self.writer,
            recorder,
            self.options,
            pods=self.pods.store,
            namespaces=self.namespaces.store,
            replicasets=self.replicasets.store,
            workloads={kind: informer.store for kind, informer in self.workloads.items()},
            registry=client.registry,
        )
        self.metrics = ConfigMapMetrics.of(client.registry)
        self._wire_handlers()

    @property
    def informers(self) -> list[Informer]:
        return self.caches.informers

    def config_names(self) -> list[str]:
        return sorted(self.configs.store.keys())

    def _wire_handlers(self) -> None:
        def by_name(obj: Json) -> None:
            self.controller.enqueue(obj["metadata"]["name"])

        self.configs.add_handler(by_name, lambda _o, n: by_name(n), by_name)

        def owners_of_configmap(obj: Json) -> None:
            # Every ConfigMap of the target's namespace counts, not only the target: the
            # trust roots (written, or depended on), the preserved copies. Linkerd keeps a
            # handful there, so a spare reconcile costs little, and a missed one a lot.
            namespace = obj["metadata"]["namespace"]
            for name in self.config_names():
                cfg = self.configs.store.get(name)
                if cfg is not None and _targets(cfg, namespace):
                    self.controller.enqueue(name)

        self.configmaps.add_handler(
            owners_of_configmap, lambda _o, n: owners_of_configmap(n), owners_of_configmap
        )

        def everyone(_obj: Json) -> None:
            self.controller.enqueue_all(self.config_names())

        # Restarted workloads' status is the rollout's health gate: their changes wake it too.
        for informer in (self.pods, self.namespaces, *self.workloads.values()):
            informer.add_handler(everyone, lambda _o, n: everyone(n), everyone)

        def anchor_held(_obj: Json) -> None:
            # Only a held removal waits on meshed pods (one restarted lets it proceed).
            self.controller.enqueue_all(sorted(self._anchor_held))

        self.meshed_pods.add_handler(anchor_held, lambda _o, n: anchor_held(n), anchor_held)

    # -- the reconcile --------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result:
        config = self.configs.store.get(key)
        if config is None or config["metadata"].get("deletionTimestamp"):
            # Deleting a LinkerdConfig never deletes the ConfigMap: the mesh outlives us.
            log.info("linkerdconfig gone; configmap left as it is", linkerdconfig=key)
            self.rollout.forget(key)
            return Result()
        status: Json = dict(config.get("status") or {})
        conditions: list[Json] = list(status.get("conditions") or [])
        generation = int(config["metadata"].get("generation", 0))
        # Off the event loop, over copies of the caches: reading the installed data and
        # rendering onto it cost up to formats.bounded's limits, which anyone who may edit the
        # ConfigMap can reach. Validation runs again here because the webhook may be off or
        # may have been bypassed, and a value Linkerd cannot use must never be written.
        decided = await asyncio.to_thread(
            reconcile_decision.decide,
            config,
            validate(config),
            self.configs.store.list(),
            self.configmaps.store.snapshot(),
            self.config_namespace,
        )
        if isinstance(decided, reconcile_decision.Refused):
            return await self._refused(config, conditions, generation, decided)
        target, configmaps, current = decided.target, decided.configmaps, decided.current
        configmap = configmaps.get(target.name)
        asked = decided.desired
        desired = await self._to_write(config, asked, current)

        try:
            for name in (target.name, *sorted(desired.depends_on)):
                if name in configmaps:
                    await self._preserve(config, name, configmaps[name], desired)
            # The trust-anchor guard: a removal some meshed pod still needs is not written.
            if (held := await self._trust_anchor_hold(config, desired, current)) is not None:
                return held
            stale = drifted(configmaps, desired)
            if target.name in stale:
                await self._write(config, configmap, desired)
            lost = unrestorable(configmaps, desired)
            for name in stale:
                if name != target.name and name not in lost:
                    await self._write_companion(config, configmaps.get(name), desired, name)
        except ApiError as exc:
            return await self._write_failed(config, conditions, generation, desired, exc)
        if lost:
            return await self._dependency_lost(config, conditions, generation, desired, lost)
        self.rollout.found(desired.config_hash)

        conditions = set_condition(
            conditions, CONFLICT, False, "NoConflict", f"manages ConfigMap {target}", generation
        )
        conditions = set_condition(
            conditions,
            CONFIGMAP_SYNCED,
            True,
            "Synced",
            f"ConfigMap {target} matches (hash {desired.config_hash})",
            generation,
        )
        outcome = await self.rollout.roll(config, asked, desired)
        conditions = set_condition(
            conditions,
            DATA_PLANE_UP_TO_DATE,
            outcome.up_to_date,
            outcome.reason,
            outcome.message,
            generation,
        )
        ready = outcome.up_to_date
        conditions = set_condition(
            conditions,
            READY,
            ready,
            "Ready" if ready else outcome.reason,
            "configuration applied and data plane up to date" if ready else outcome.message,
            generation,
        )
        status_now = {
            "observedGeneration": generation,
            "conditions": conditions,
            "configMap": str(target),
            "configHash": desired.config_hash,
            "trustAnchorSource": desired.trust_anchor_source,
            "linkerdVersion": desired.linkerd_version,
            "configFormat": desired.config_format,
            "outdatedWorkloads": outcome.outdated,
            "restartedWorkloads": outcome.restarted_total,
            "evictedPods": outcome.evicted,
            **outcome.status,
        }
        name = config["metadata"]["name"]
        since = self.monotonic() - self._status_written.get(name, float("-inf"))
        wait = self.options.restart_interval - since
        if wait > 0 and progress_only(config.get("status") or {}, status_now):
            # The counts catch up at the next pass (or when a condition changes).
            return Result(requeue_after=min(wait, outcome.requeue_after or wait))
        await self._update_status(config, status_now)
        return Result(requeue_after=outcome.requeue_after)

    # -- steps ----------------------------------------------------------------------------

    async def _refused(
        self,
        config: Json,
        conditions: list[Json],
        generation: int,
        refused: reconcile_decision.Refused,
    ) -> Result:
        """Nothing is written: said in status, in the controller's words (``plan`` says what
        would be)."""
        message = refused.message + _CONSEQUENCES.get(refused.reason, "")
        if refused.reason == reconcile_decision.CONFLICT:
            return await self._conflict(config, conditions, generation, refused.owner, message)
        # A spec validation refuses is InvalidConfig in status, as one that does not render.
        invalid = refused.reason == reconcile_decision.INVALID
        reason = reconcile_decision.INVALID_CONFIG if invalid else refused.reason
        return await self._invalid(config, conditions, generation, message, reason)

    async def _to_write(
        self, config: Json, asked: Desired, current: dict[str, dict[str, str]]
    ) -> Desired:
        """What the ConfigMap must hold: what the spec asks for (``asked``), except while a
        failed rollout is rolled back: then the last completed configuration (the spec stays
        as the user wrote it; a new generation or a resume is a new attempt)."""
        halt = self.rollout.halt_state(config, asked.config_hash)
        going_back = rollback.config_to_render(config, halt.halted)
        if going_back is None:
            return asked
        try:
            return await asyncio.to_thread(desired_config, going_back, current)
        except (FormatError, VersionError) as exc:
            # What is installed now cannot take it (Linkerd upgraded to the values format
            # since, say). The spec is not invalid for that: the rollout halts instead.
            log.warning(
                "cannot roll back: the last completed configuration does not render onto "
                "what is installed; halted instead",
                linkerdconfig=config["metadata"]["name"],
                problem=str(exc),
            )
            return asked

    async def _preserve(self, config: Json, name: str, configmap: Json, desired: Desired) -> None:
        """Keep the copy of what we did not write in ConfigMap ``name`` (the target, or one it
        depends on) up to date (rarely a write)."""
        where = Target(desired.target.namespace, name)
        ours = desired.ours_in(name)
        rewritten = desired.preserve_keys if name == desired.target.name else frozenset()
        # A key we rewrite in place is kept as it will be once written, so our own write
        # does not make the copy stale (one preserve per change, not two).
        kept = {k: v for k, v in ours.items() if k in rewritten}
        after = {**configmap, "data": {**(configmap.get("data") or {}), **kept}}
        part = unmanaged_part(after, set(ours) - rewritten)
        key = f"{where.namespace}/{preserved_name(name)}"
        existing = self.configmaps.store.get(key)
        wanted = preserved_copy(where, part, config["metadata"]["name"])
        foreign = None if existing is None else foreign_in_copy(existing, wanted)
        if from_preserved(existing) == part and foreign is None:
            return
        await self.writer.apply(CONFIGMAPS, wanted)
        if foreign is not None:
            # Planted by someone else: it must not come back with a restore.
            await self.writer.merge_patch(
                CONFIGMAPS, where.namespace, preserved_name(name), foreign
            )
            log.warning(
                "foreign content removed from a preserved copy",
                configmap=f"{where.namespace}/{preserved_name(name)}",
            )
        log.info("unmanaged configmap content preserved", configmap=str(where))

    async def _write_companion(
        self, config: Json, current: Json | None, desired: Desired, name: str
    ) -> None:
        """Our keys in a companion ConfigMap (the trust roots); the rest of it is not ours.
        A deleted one is first restored whole from its copy, as the target is."""
        owner = config["metadata"]["name"]
        restored_fields = await self._restore(desired, owner, name) if current is None else []
        if desired.companions.get(name):
            await self.writer.apply(CONFIGMAPS, companion_body(desired, name, owner))
        target = f"{desired.target.namespace}/{name}"
        keys = ", ".join(sorted(desired.companions.get(name, {})))
        reason, message = (
            ("ConfigMapCreated", f"created ConfigMap {target}")
            if current is None
            else ("ConfigMapUpdated", f"wrote {keys} of ConfigMap {target}")
        )
        if restored_fields:
            message += f", restoring what it held besides ours ({', '.join(restored_fields)})"
        log.info("configmap written", linkerdconfig=owner, configmap=target, reason=reason)
        self.recorder.record(config, "Normal", reason, message)

    async def _restore(self, desired: Desired, owner_name: str, name: str = "") -> list[str]:
        """Recreate a deleted ConfigMap (the target, or ``name``) whole, under a field manager
        of its own: the apply that follows takes over our keys, and never owns (so never
        removes) the others."""
        name = name or desired.target.name
        key = f"{desired.target.namespace}/{preserved_name(name)}"
        part = from_preserved(self.configmaps.store.get(key))
        if part is None:
            return []
        try:
            await self.writer.create(
                CONFIGMAPS,
                restored(desired, part, owner_name, name),
                field_manager=RESTORE_FIELD_MANAGER,
            )
        except ApiError as exc:
            if not exc.conflict:  # recreated meanwhile by someone else: theirs stands
                # A create's path names no object: say which one it was, for status.
                where = f"{exc.path.split('?', 1)[0].rstrip('/')}/{name}"
                raise ApiError(exc.status, exc.method, where, exc.body, exc.retry_after) from exc
            return []
        return (
            sorted(part.data)
            + sorted(part.binary_data)
            + sorted(part.labels)
            + sorted(part.annotations)
        )

    async def _write(self, config: Json, current: Json | None, desired: Desired) -> None:
        target = desired.target
        owner_name = config["metadata"]["name"]
        restored_fields = await self._restore(desired, owner_name) if current is None else []
        await self.writer.apply(CONFIGMAPS, apply_body(desired, config["metadata"]["name"]))
        self.metrics.reverts.labels(owner_name)  # from the first write: a later revert counts
        annotations = ((current or {}).get("metadata") or {}).get("annotations") or {}
        if current is None:
            reason, message = "ConfigMapCreated", f"created ConfigMap {target}"
            if restored_fields:
                message += f", restoring what it held besides ours ({', '.join(restored_fields)})"
        elif annotations.get(HASH_ANNOTATION) == desired.config_hash:
            reason = "ConfigMapReverted"
            changed = sorted(
                k for k, v in desired.data.items() if (current.get("data") or {}).get(k) != v
            )
            message = f"reverted a manual edit of ConfigMap {target} (keys {', '.join(changed)})"
            self.metrics.reverts.labels(owner_name).inc()
        else:
            reason, message = (
                "ConfigMapUpdated",
                f"wrote ConfigMap {target} (hash {desired.config_hash})",
            )
        log.info(
            "configmap written",
            linkerdconfig=config["metadata"]["name"],
            configmap=str(target),
            reason=reason,
            hash=desired.config_hash,
        )
        self.recorder.record(config, "Normal", reason, message)

    async def _invalid(
        self,
        config: Json,
        conditions: list[Json],
        generation: int,
        message: str,
        reason: str = "InvalidConfig",
    ) -> Result:
        previous = next((c for c in conditions if c["type"] == CONFIGMAP_SYNCED), {})
        if previous.get("message") != message:
            self.recorder.record(config, "Warning", reason, message)
            log.warning(
                "linkerdconfig not applied",
                linkerdconfig=config["metadata"]["name"],
                reason=reason,
                problem=message,
            )
        conditions = set_condition(conditions, CONFIGMAP_SYNCED, False, reason, message, generation)
        conditions = set_condition(conditions, READY, False, reason, message, generation)
        await self._update_status(
            config, {"observedGeneration": generation, "conditions": conditions}
        )
        return Result()

    async def _write_failed(
        self,
        config: Json,
        conditions: list[Json],
        generation: int,
        desired: Desired,
        exc: ApiError,
    ) -> Result:
        """The API server refused our write: say so where users look, then retry with backoff."""
        # Which one: the target, the trust roots, or a preserved copy (a create's path names
        # none: the restore of one of them).
        _, _, named = exc.path.split("?", 1)[0].partition("/configmaps/")
        where = f"{desired.target.namespace}/{named}" if named else str(desired.target)
        message = (
            f"writing ConfigMap {where} failed: {exc.status} {exc.reason or 'Error'}: {exc.message}"
        )
        self.recorder.record(config, "Warning", "ConfigMapWriteFailed", message)
        log.error(
            "configmap write refused",
            linkerdconfig=config["metadata"]["name"],
            configmap=str(desired.target),
            status=exc.status,
            reason=exc.reason,
            problem=exc.message,
        )
        conditions = set_condition(
            conditions, CONFIGMAP_SYNCED, False, "WriteFailed", message, generation
        )
        conditions = set_condition(conditions, READY, False, "WriteFailed", message, generation)
        await self._update_status(
            config, {"observedGeneration": generation, "conditions": conditions}
        )
        return Result(requeue=True)

    async def _dependency_lost(
        self,
        config: Json,
        conditions: list[Json],
        generation: int,
        desired: Desired,
        lost: list[str],
    ) -> Result:
        """A ConfigMap Linkerd's injector needs is gone and nothing says what it held: say so
        where users look and restart nothing (no pod could be injected)."""
        names = ", ".join(f"{desired.target.namespace}/{n}" for n in lost)
        message = (
            f"ConfigMap {names}, which Linkerd {desired.linkerd_version}'s proxy injector "
            "reads, is missing and no readable copy of it was kept (its -preserved copy is "
            "absent, or not as this controller wrote it): restore it (linkerd upgrade, or "
            "helm upgrade) or state spec.global.identityContext.trustAnchorsPEM; nothing "
            "restarted meanwhile"
        )
        previous = next((c for c in conditions if c["type"] == CONFIGMAP_SYNCED), {})
        if previous.get("message") != message:
            self.recorder.record(config, "Warning", "ConfigMapMissing", message)
            log.error(
                "configmap missing",
                linkerdconfig=config["metadata"]["name"],
                configmaps=lost,
            )
        conditions = set_condition(
            conditions, CONFIGMAP_SYNCED, False, "ConfigMapMissing", message, generation
        )
        conditions = set_condition(
            conditions, READY, False, "ConfigMapMissing", message, generation
        )
        await self._update_status(
            config, {"observedGeneration": generation, "conditions": conditions}
        )
        return Result()

    async def _trust_anchor_hold(
        self, config: Json, desired: Desired, current: dict[str, dict[str, str]]
    ) -> Result | None:
        """The trust-anchor guard (``trust_anchor_guard``): None when ``desired`` may be
        written (a removal every stamped meshed pod survives is said in an Event); else the
        hold, said in status (``ConfigMapSynced=False TrustAnchorRemovalHeld``, the pods that
        hold it) and nothing written. Its record of known bundles lives in status."""
        name = config["metadata"]["name"]
        stored: Json = config.get("status") or {}
        conditions: list[Json] = list(stored.get("conditions") or [])
        generation = int(config["metadata"].get("generation", 0))
        try:
            guard = evaluate(desired, current, stored, self.meshed_pods.store.list)
        except BundleError as exc:
            self._anchor_held.discard(name)
            message = f"{exc}; nothing is written until it is corrected"
            return await self._invalid(
                config, conditions, generation, message, "InstalledConfigUnreadable"
            )
        decision = guard.decision
        changes = guard.status_changes(stored)
        if not decision.held:
            self._anchor_held.discard(name)
            if decision.dropped:
                reason, kind = "TrustAnchorRemoved", "Normal"
                if decision.swap:
                    reason, kind = "TrustAnchorsReplaced", "Warning"
                if not decision.guarded:
                    reason, kind = "TrustAnchorRemovalUnguarded", "Warning"
                self.recorder.record(config, kind, reason, decision.message())
            if changes:
                await self._patch_status_quietly(config, changes)
            return None
        self._anchor_held.add(name)
        message = decision.message()
        previous = next((c for c in conditions if c["type"] == CONFIGMAP_SYNCED), {})
        if previous.get("reason") != HELD_REASON:
            self.recorder.record(config, "Warning", HELD_REASON, message)
            log.warning(
                "trust anchor removal held",
                linkerdconfig=name,
                dropped=[str(a) for a in decision.dropped],
                holding_pods=decision.hold.count if decision.hold else 0,
            )
        conditions = set_condition(
            conditions, CONFIGMAP_SYNCED, False, HELD_REASON, message, generation
        )
        conditions = set_condition(conditions, READY, False, HELD_REASON, message, generation)
        patch = {"observedGeneration": generation, "conditions": conditions, **changes}
        written = await self._patch_status_quietly(config, patch)
        return Result(requeue=not written)

    async def _patch_status_quietly(self, config: Json, status: Json) -> bool:
        """``_update_status`` for the guard's fields, a refusal logged (False: retry) rather
        than reported as a refused ConfigMap write, which it is not."""
        try:
            await self._update_status(config, status)
        except ApiError as exc:
            log.error(
                "status write refused",
                linkerdconfig=config["metadata"]["name"],
                status=exc.status,
                problem=exc.message,
            )
            return False
        return True

    async def _conflict(
        self, config: Json, conditions: list[Json], generation: int, owner: str, message: str
    ) -> Result:
        target = target_of(config)
        previous = next((c for c in conditions if c["type"] == CONFLICT), {})
        if previous.get("status") != "True":
            self.recorder.record(config, "Warning", "Conflict", message)
            log.warning(
                "linkerdconfig conflict",
                linkerdconfig=config["metadata"]["name"],
                owner=owner,
                configmap=str(target),
            )
        conditions = set_condition(
            conditions, CONFLICT, True, "ConfigMapOwnedByOther", message, generation
        )
        conditions = set_condition(conditions, READY, False, "Conflict", message, generation)
        await self._update_status(
            config, {"observedGeneration": generation, "conditions": conditions}
        )
        return Result()

    async def _update_status(self, config: Json, status: Json) -> None:
        current = config.get("status") or {}
        if all(current.get(k) == v for k, v in status.items()):
            return
        await self.writer.patch_status(LINKERD_CONFIGS, None, config["metadata"]["name"], status)
        self._status_written[config["metadata"]["name"]] = self.monotonic()


def _targets(config: Json, namespace: str) -> bool:
    """Whether ``config`` writes in ``namespace``."""
    return target_of(config).namespace == namespace
