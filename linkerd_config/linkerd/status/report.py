"""What the controller says of a LinkerdConfig where users look: its status conditions (each
outcome of a reconcile its set of them), the Event that goes with a change, and the patch of
its status subresource, skipped when nothing in it would change."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import structlog

from linkerd_config.kube.client import ApiError
from linkerd_config.kube.conditions import Progress, set_condition, with_progress
from linkerd_config.kube.controller import Result
from linkerd_config.kube.events import EventRecorder
from linkerd_config.kube.resource import Json, Keyed
from linkerd_config.kube.writer import Writer
from linkerd_config.linkerd.admission.validation import TRUST_ANCHOR
from linkerd_config.linkerd.configmap import decision
from linkerd_config.linkerd.configmap.desired import Desired, progress_only
from linkerd_config.linkerd.rollout.actions import RolloutOutcome
from linkerd_config.linkerd.rollout.record import fields
from linkerd_config.linkerd.spec.conversion import said_to_writer
from linkerd_config.linkerd.spec.crd import (
    CONFIGMAP_SYNCED,
    CONFLICT,
    DATA_PLANE_UP_TO_DATE,
    LINKERD_CONFIGS,
    READY,
    target_of,
)
from linkerd_config.linkerd.status import readiness
from linkerd_config.linkerd.trust.guard import (
    HELD_REASON,
    BundleError,
    Guard,
    MeshUnseen,
    evaluate,
)

log = structlog.get_logger(__name__)

MESH_UNSEEN_RETRY_SECONDS = 1.0
"""How soon a bundle change waiting for the meshed pods' cache (``MeshUnseen``) is tried again."""

_CONSEQUENCES = {
    decision.NAMESPACE_NOT_MANAGED: "; nothing written",
    decision.CONFLICT: "; this one changes nothing",
    decision.INSTALLED_CONFIG_UNREADABLE: ("; nothing is written until the ConfigMap is corrected"),
}
"""What the controller adds to a refusal's fact (``configmap.decision``)."""


def as_kstatus_reads(config: Json, status: Json, stand: Progress | None = None) -> Json:
    """``status`` with its conditions as kstatus reads them: ``Reconciling`` or ``Stalled``
    from where the LinkerdConfig stands (``readiness.progress``, or ``stand``), ``Ready``
    Unknown while reconciling. A status without conditions is left as it is: its
    ``observedGeneration`` moves only with conditions said for that generation (kstatus would
    otherwise read the last generation's Ready as this one's)."""
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return status
    generation = int(config["metadata"].get("generation", 0))
    stored = list((config.get("status") or {}).get("conditions") or [])
    found = with_progress(
        conditions, stand or readiness.progress(conditions), READY, generation, stored
    )
    return {**status, "conditions": found}


class StatusOutcomes:
    """A reconcile's outcomes said in a LinkerdConfig's status and Events."""

    def __init__(
        self,
        writer: Writer,
        recorder: EventRecorder,
        meshed: Callable[[], Iterable[Keyed]],
        monotonic: Callable[[], float],
        issuer_updated: Callable[[], float | None] = lambda: None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.writer = writer
        self.recorder = recorder
        self.meshed = meshed
        """The meshed pods as cached, by key (the trust-anchor guard's view); MeshUnseen
        while the cache has not filled."""
        self.monotonic = monotonic
        self.issuer_updated = issuer_updated
        """When Linkerd's identity last took up a new issuer, as its cached Events say."""
        self.wall = wall
        self.written: dict[str, float] = {}
        # Invariant: LinkerdConfig name -> monotonic time this process last wrote its status.
        self.anchor_held: set[str] = set()
        # Invariant: LinkerdConfigs whose last reconcile held a trust-anchor removal.

    async def applied(
        self,
        config: Json,
        conditions: list[Json],
        generation: int,
        desired: Desired,
        outcome: RolloutOutcome,
        restart_interval: float,
        held: Guard | None = None,
    ) -> Result:
        """The ConfigMaps hold ``desired``; the rollout's pass went as ``outcome`` says. A
        change of counts alone waits for ``restart_interval`` after the last status write.
        ``held``: a trust-anchor removal held, ``desired`` being the bundle it holds on to
        (the spec is not written yet: ``ConfigMapSynced=False``, reason
        ``TrustAnchorRemovalHeld``; the rollout's own progress towards it stays in
        ``DataPlaneUpToDate``, so the hold's cause is seen going away)."""
        target = desired.target
        conditions = set_condition(
            conditions, CONFLICT, False, "NoConflict", f"manages ConfigMap {target}", generation
        )
        synced = (True, "Synced", f"ConfigMap {target} matches (hash {desired.config_hash})")
        if held is not None:
            synced = (False, HELD_REASON, held.decision.message())
        conditions = set_condition(conditions, CONFIGMAP_SYNCED, *synced, generation)
        conditions = set_condition(
            conditions,
            DATA_PLANE_UP_TO_DATE,
            outcome.up_to_date,
            outcome.reason,
            outcome.message,
            generation,
        )
        ready = outcome.up_to_date and held is None
        not_ready = (outcome.reason, outcome.message) if held is None else synced[1:]
        conditions = set_condition(
            conditions,
            READY,
            ready,
            "Ready" if ready else not_ready[0],
            "configuration applied and data plane up to date" if ready else not_ready[1],
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
            **fields(evicted=outcome.evicted),
            **outcome.status,
            **({} if held is None else held.status_changes(config.get("status") or {})),
        }
        status_now = as_kstatus_reads(config, status_now)
        name = config["metadata"]["name"]
        since = self.monotonic() - self.written.get(name, float("-inf"))
        wait = restart_interval - since
        if wait > 0 and progress_only(config.get("status") or {}, status_now):
            # The counts catch up at the next pass (or when a condition changes).
            return Result(requeue_after=min(wait, _sooner(outcome.requeue_after, held) or wait))
        await self.update(config, status_now)
        return Result(requeue_after=_sooner(outcome.requeue_after, held))

    async def refused(
        self,
        config: Json,
        conditions: list[Json],
        generation: int,
        refused: decision.Refused,
    ) -> Result:
        """Nothing is written: said in status, in the controller's words (``plan`` says what
        would be)."""
        message = refused.message + _CONSEQUENCES.get(refused.reason, "")
        if refused.reason == decision.CONFLICT:
            return await self.conflict(config, conditions, generation, refused.owner, message)
        # A spec validation refuses is InvalidConfig in status, as one that does not render.
        invalid = refused.reason == decision.INVALID
        reason = decision.INVALID_CONFIG if invalid else refused.reason
        return await self.invalid(config, conditions, generation, message, reason)

    async def invalid(
        self,
        config: Json,
        conditions: list[Json],
        generation: int,
        message: str,
        reason: str = "InvalidConfig",
    ) -> Result:
        message = said_to_writer(message, config)
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
        await self.update(config, {"observedGeneration": generation, "conditions": conditions})
        return Result()

    async def write_failed(
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
            conditions, CONFIGMAP_SYNCED, False, readiness.WRITE_FAILED, message, generation
        )
        conditions = set_condition(
            conditions, READY, False, readiness.WRITE_FAILED, message, generation
        )
        # Retried with backoff either way; a refusal only a person can lift (RBAC, a policy,
        # validation: a 4xx other than a conflict, a timeout or throttling) is said Stalled.
        transient = exc.status >= 500 or exc.status in (408, 409, 429)
        stand = Progress.RECONCILING if transient else Progress.STALLED
        await self.update(
            config, {"observedGeneration": generation, "conditions": conditions}, stand
        )
        return Result(requeue=True)

    async def dependency_lost(
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
            f"helm upgrade) or state {said_to_writer(TRUST_ANCHOR, config)}; nothing "
            "restarted meanwhile"
        )
        previous = next((c for c in conditions if c["type"] == CONFIGMAP_SYNCED), {})
        if previous.get("message") != message:
            self.recorder.record(config, "Warning", readiness.CONFIGMAP_MISSING, message)
            log.error(
                "configmap missing",
                linkerdconfig=config["metadata"]["name"],
                configmaps=lost,
            )
        conditions = set_condition(
            conditions, CONFIGMAP_SYNCED, False, readiness.CONFIGMAP_MISSING, message, generation
        )
        conditions = set_condition(
            conditions, READY, False, readiness.CONFIGMAP_MISSING, message, generation
        )
        await self.update(config, {"observedGeneration": generation, "conditions": conditions})
        return Result()

    async def trust_anchor_guard(
        self, config: Json, desired: Desired, current: dict[str, dict[str, str]]
    ) -> Guard | Result:
        """The trust-anchor guard (``trust.guard``) on writing ``desired``: its answer,
        or the reconcile's end when nothing may be written. A removal every stamped meshed
        pod survives is said in an Event and its record kept in status. A held removal is
        said once in a Warning; with a bundle to hold on to (``Guard.holding``) the caller
        writes and rolls that out and reports the hold with the rest (``applied``); without
        one the hold is reported here and nothing is written. An unreadable bundle is an
        error naming the ConfigMap and key."""
        name = config["metadata"]["name"]
        stored: Json = config.get("status") or {}
        conditions: list[Json] = list(stored.get("conditions") or [])
        generation = int(config["metadata"].get("generation", 0))
        try:
            guard = evaluate(
                desired, current, stored, self.meshed, self.issuer_updated(), self.wall()
            )
        except MeshUnseen as exc:
            # The cache ready does not wait for: a changed bundle waits for it, unwritten.
            log.info("trust bundle change waits for the meshed pods", linkerdconfig=name,
                     why=str(exc))  # fmt: skip
            return Result(requeue_after=MESH_UNSEEN_RETRY_SECONDS)
        except BundleError as exc:
            self.anchor_held.discard(name)
            message = f"{exc}; nothing is written until it is corrected"
            return await self.invalid(
                config, conditions, generation, message, "InstalledConfigUnreadable"
            )
        decision = guard.decision
        if not decision.held:
            self.anchor_held.discard(name)
            if decision.dropped:
                reason, kind = "TrustAnchorRemoved", "Normal"
                if decision.swap:  # no meshed pod on the old anchors, or none seen
                    reason = "TrustAnchorsReplaced"
                    kind = "Warning" if decision.unseen else "Normal"
                if not decision.guarded:
                    reason, kind = "TrustAnchorRemovalUnguarded", "Warning"
                self.recorder.record(config, kind, reason, decision.message())
            changes = guard.status_changes(stored)
            if changes:
                await self.patch_status_quietly(config, changes)
            return guard
        self.anchor_held.add(name)
        message = decision.message()
        previous = next((c for c in conditions if c["type"] == CONFIGMAP_SYNCED), {})
        if previous.get("reason") != HELD_REASON:
            self.recorder.record(config, "Warning", HELD_REASON, message)
            log.warning(
                "trust anchor removal held",
                linkerdconfig=name,
                dropped=[str(a) for a in decision.dropped],
                holding_pods=decision.hold.count if decision.hold else 0,
                holding_bundle=guard.holding is not None,
            )
        if guard.holding is not None:
            return guard
        return await self.held_without_bundle(config, guard)

    async def held_without_bundle(
        self, config: Json, guard: Guard, why: str = "", *, theirs: bool = False
    ) -> Result:
        """A held removal with no bundle to hold on to written (``why``; by default: none
        keeps every anchor in use): said in status, nothing written. ``theirs``: the removal
        is someone else's, in a bundle the spec leaves to the cluster."""
        stored: Json = config.get("status") or {}
        conditions: list[Json] = list(stored.get("conditions") or [])
        generation = int(config["metadata"].get("generation", 0))
        said = guard.decision.message(holding=False, theirs=theirs)
        if not guard.decision.guarded:  # a swap no pod says anything of: said what to apply
            message = f"{said}; {why}" if why else said
        else:
            message = f"{said}; {why or 'no bundle holding every anchor in use is known'}"
        conditions = set_condition(
            conditions, CONFIGMAP_SYNCED, False, HELD_REASON, message, generation
        )
        conditions = set_condition(conditions, READY, False, HELD_REASON, message, generation)
        patch = {"observedGeneration": generation, "conditions": conditions}
        # Nothing is written, so nothing is rolled: only a person (or the holders' own
        # restarts) lifts it, whatever DataPlaneUpToDate still says of an earlier pass.
        written = await self.patch_status_quietly(
            config, {**patch, **guard.status_changes(stored)}, Progress.STALLED
        )
        return Result(requeue=not written, requeue_after=guard.recheck_after)

    async def patch_status_quietly(
        self, config: Json, status: Json, stand: Progress | None = None
    ) -> bool:
        """``update`` for the guard's fields, a refusal logged (False: retry) rather than
        reported as a refused ConfigMap write, which it is not."""
        try:
            await self.update(config, status, stand)
        except ApiError as exc:
            log.error(
                "status write refused",
                linkerdconfig=config["metadata"]["name"],
                status=exc.status,
                problem=exc.message,
            )
            return False
        return True

    async def conflict(
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
        await self.update(config, {"observedGeneration": generation, "conditions": conditions})
        return Result()

    async def update(self, config: Json, status: Json, stand: Progress | None = None) -> None:
        """Patch ``status`` into the LinkerdConfig's status, unless it holds it already; its
        conditions as kstatus reads them (``as_kstatus_reads``; ``stand``: where it stands,
        when its conditions alone do not say)."""
        status = as_kstatus_reads(config, status, stand)
        current = config.get("status") or {}
        if all(current.get(k) == v for k, v in status.items()):
            return
        # On this object as the reconcile read it: a reconcile of one deleted meanwhile must
        # not write its status onto one made again under its name (a halt without the
        # completed configuration it returns to: the rollback dropped, the failed
        # configuration written; CI, issue 58's re-made LinkerdConfig test). The uid alone
        # does not do it: a custom resource's status subresource keeps the stored metadata
        # whatever a patch says (the CRD status strategy), so only the resourceVersion is
        # checked there. A write decided on a cache that has moved on is refused (409), and
        # the reconcile runs again on the newer object.
        metadata = config["metadata"]
        await self.writer.patch_status(
            LINKERD_CONFIGS, None, metadata["name"], status, uid=metadata.get("uid"),
            resource_version=metadata.get("resourceVersion"),
        )  # fmt: skip
        self.written[config["metadata"]["name"]] = self.monotonic()


def _sooner(requeue_after: float | None, held: Guard | None) -> float | None:
    """The reconcile's next look: the rollout's, or sooner when a held removal stops waiting
    for an issuer's update by itself (``Guard.recheck_after``)."""
    recheck = None if held is None else held.recheck_after
    found = [t for t in (requeue_after, recheck) if t is not None]
    return min(found) if found else None
