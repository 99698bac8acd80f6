"""The controller's writes of ConfigMaps: the copy of what it does not manage kept aside
(``-preserved``), a deleted ConfigMap restored whole from it, and its own keys applied to the
target and its companions, each said in an Event. Every write goes through ``kube/writer.py``
under the controller's field manager (a restore under one of its own)."""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from prometheus_client import CollectorRegistry, Counter

from linkerd_config.kube.client import ApiError
from linkerd_config.kube.events import EventRecorder
from linkerd_config.kube.metrics import ComponentMetrics
from linkerd_config.kube.resource import CONFIGMAPS, Json, resource_version
from linkerd_config.kube.store import Store
from linkerd_config.kube.writer import Writer
from linkerd_config.linkerd.configmap.desired import (
    Desired,
    apply_body,
    companion_body,
    foreign_in_copy,
    from_preserved,
    held_config_hash,
    missing_keys,
    preserved_copy,
    preserved_name,
    restored,
    unmanaged_part,
)
from linkerd_config.linkerd.spec.crd import Target

log = structlog.get_logger(__name__)

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


@dataclass
class ConfigMapWrites:
    """Writes to the ConfigMaps of the namespace ``configmaps`` caches (the informer's store:
    what is there, the preserved copies among it)."""

    writer: Writer
    recorder: EventRecorder
    configmaps: Store
    metrics: ConfigMapMetrics

    async def preserve(self, config: Json, name: str, configmap: Json, desired: Desired) -> None:
        """Keep the copy of what we did not write in ConfigMap ``name`` (the target, or one it
        depends on) up to date (rarely a write)."""
        where = Target(desired.target.namespace, name)
        ours = desired.ours_in(name)
        rewritten = desired.preserve_keys if name == desired.target.name else frozenset(ours)
        # A key we rewrite in place is kept as it will be once written, so our own write
        # does not make the copy stale (one preserve per change, not two). A companion's keys
        # (the trust bundle) are kept so too: what the injector handed out before a deletion
        # or someone else's edit is what the trust-anchor guard must still see.
        kept = {k: v for k, v in ours.items() if k in rewritten}
        after = {**configmap, "data": {**(configmap.get("data") or {}), **kept}}
        part = unmanaged_part(after, set(ours) - rewritten)
        key = f"{where.namespace}/{preserved_name(name)}"
        existing = self.configmaps.get(key)
        wanted = preserved_copy(where, part, config["metadata"]["name"])
        if from_preserved(existing) == part and (
            existing is None or foreign_in_copy(existing, wanted) is None
        ):
            return
        # What is left beyond our copy once applied is someone else's: what we wrote before
        # and not now goes with the apply (server-side apply drops a field its manager no
        # longer sends), and is not foreign. Conditional on the copy as cached: one that
        # moved since (our last write, not yet seen) is refused (409), and the reconcile
        # runs again on what is there, never writing an older view over a newer copy.
        applied = await self.writer.apply(CONFIGMAPS, wanted, on=existing)
        foreign = foreign_in_copy(applied, wanted)
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

    async def write_companion(
        self, config: Json, current: Json | None, desired: Desired, name: str
    ) -> None:
        """Our keys in a companion ConfigMap (the trust roots); the rest of it is not ours.
        A deleted one is first restored whole from its copy, as the target is."""
        owner = config["metadata"]["name"]
        on = current
        if current is None:
            restored_fields, on = await self.restore(desired, owner, name)
        else:
            restored_fields, on = await self.restore_keys(desired, name, current)
        if desired.companions.get(name):
            await self.writer.apply(CONFIGMAPS, companion_body(desired, name, owner), on=on)
        target = f"{desired.target.namespace}/{name}"
        keys = ", ".join(sorted(desired.companions.get(name, {})))
        if current is None:
            reason, message = "ConfigMapCreated", f"created ConfigMap {target}"
        elif keys:
            reason, message = "ConfigMapUpdated", f"wrote {keys} of ConfigMap {target}"
        else:
            reason, message = "ConfigMapUpdated", f"put back what ConfigMap {target} lost"
        if restored_fields:
            message += f", restoring what it held besides ours ({', '.join(restored_fields)})"
        log.info("configmap written", linkerdconfig=owner, configmap=target, reason=reason)
        self.recorder.record(config, "Normal", reason, message)

    async def restore_keys(
        self, desired: Desired, name: str, current: Json
    ) -> tuple[list[str], Json]:
        """Put back, from its copy, the keys dependency ``name`` cannot do without and someone
        deleted (those we do not write ourselves), under the restore's field manager and on
        the cached version (not over a change since); the names of those put back, and the
        ConfigMap as it is now (``current``, or what the restore left)."""
        ours = desired.companions.get(name, {})
        needed = missing_keys({name: current}, desired, name)
        part = from_preserved(
            self.configmaps.get(f"{desired.target.namespace}/{preserved_name(name)}")
        )
        keys = {k: part.data[k] for k in needed if k not in ours and part and k in part.data}
        version = resource_version(current)
        if not keys:
            return [], current
        patch: Json = {"data": keys}
        if version is not None:
            patch["metadata"] = {"resourceVersion": version}
        patched = await self.writer.merge_patch(
            CONFIGMAPS, desired.target.namespace, name, patch, field_manager=RESTORE_FIELD_MANAGER
        )
        return sorted(keys), patched

    async def restore(
        self, desired: Desired, owner_name: str, name: str = ""
    ) -> tuple[list[str], Json | None]:
        """Recreate a deleted ConfigMap (the target, or ``name``) whole, under a field manager
        of its own: the apply that follows takes over our keys, and never owns (so never
        removes) the others. What was restored, and the ConfigMap as created: the apply is
        made on it, so a change since (someone else's) is not written over."""
        name = name or desired.target.name
        key = f"{desired.target.namespace}/{preserved_name(name)}"
        part = from_preserved(self.configmaps.get(key))
        if part is None:
            return [], None
        try:
            created = await self.writer.create(
                CONFIGMAPS,
                restored(desired, part, owner_name, name),
                field_manager=RESTORE_FIELD_MANAGER,
            )
        except ApiError as exc:
            # A create's path names no object: say which one it was, for status. A conflict:
            # made again meanwhile by someone else (a reinstall): theirs stands, and nothing of
            # ours is written over it on the view from before it (the reconcile runs again on
            # what is there now: issue 61, finding 2, its new values lost to our copy's).
            where = f"{exc.path.split('?', 1)[0].rstrip('/')}/{name}"
            raise ApiError(exc.status, exc.method, where, exc.body, exc.retry_after) from exc
        fields = [*sorted(part.data), *sorted(part.binary_data), *sorted(part.labels)]
        return [*fields, *sorted(part.annotations)], created

    async def write(self, config: Json, current: Json | None, desired: Desired) -> None:
        target = desired.target
        owner_name = config["metadata"]["name"]
        restored_fields: list[str] = []
        on = current
        if current is None:
            restored_fields, on = await self.restore(desired, owner_name)
        # On the cached object it was rendered onto: values is Helm's text and ours at once.
        await self.writer.apply(CONFIGMAPS, apply_body(desired, owner_name), on=on)
        self.metrics.reverts.labels(owner_name)  # from the first write: a later revert counts
        if current is None:
            reason, message = "ConfigMapCreated", f"created ConfigMap {target}"
            if restored_fields:
                message += f", restoring what it held besides ours ({', '.join(restored_fields)})"
        elif held_config_hash(current) == desired.config_hash:
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
