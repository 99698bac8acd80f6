"""The LinkerdConfig controller: the reconcile, and what it is composed of.

One reconcile of a LinkerdConfig, in order: decide (``configmap.decision``: valid, its
target's namespace managed, its target owned, the desired managed keys rendered); keep the copy
of what we do not manage; server-side apply ours when the ConfigMap drifted (or restore it
whole when gone) (``configmap.writes``); then one pass of the rollout (``rollout.executor``);
finally report status (``status.report``). Every step reads the informers' caches
(``caches``) and is safe to repeat.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import orjson
import structlog

from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.controller import Controller, ControllerOptions, Result
from linkerd_config.kube.events import EventRecorder
from linkerd_config.kube.informer import Informer
from linkerd_config.kube.resource import Json, Keyed
from linkerd_config.kube.writer import Writer
from linkerd_config.linkerd.admission.validation import Judgements
from linkerd_config.linkerd.caches import LinkerdCaches
from linkerd_config.linkerd.configmap import decision
from linkerd_config.linkerd.configmap.desired import (
    Desired,
    adopted_snapshot,
    completed_digest,
    desired_config,
    drifted,
    held_config_hash,
    in_namespace,
    missing,
    now_rfc3339,
    restored_config,
    unrestorable,
)
from linkerd_config.linkerd.configmap.writes import (
    FIELD_MANAGER,
    ConfigMapMetrics,
    ConfigMapWrites,
)
from linkerd_config.linkerd.formats import FormatError, VersionError
from linkerd_config.linkerd.rollout import observe, rollback
from linkerd_config.linkerd.rollout.actions import RolloutOutcome
from linkerd_config.linkerd.rollout.executor import RolloutExecutor
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.rollout.record import Completed, Halt, Record, digest, fields, vouched
from linkerd_config.linkerd.spec.crd import LINKERD_CONFIGS, target_of
from linkerd_config.linkerd.status.report import StatusOutcomes
from linkerd_config.linkerd.trust.guard import Guard, MeshUnseen, holding_config

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Chosen:
    """What one reconcile writes and rolls out, each configuration named once."""

    rolled_config: Json
    """The LinkerdConfig whose pods roll: as stored, or with the bundle held on to."""
    asked: Desired
    """What the spec asks for: the attempt, its halt (or rollback) kept under its hash."""
    back: Desired | None
    """While a rollback is in force, the configuration it returns to (None: none, or it
    cannot go back)."""
    written: Desired
    """What the ConfigMaps get: ``back``, the bundle held on to, or ``asked``."""
    rolled: Desired
    """What the pods are rolled onto: ``asked``, or the bundle held on to (a rollback's
    restores are its own: ``back``)."""
    held: Guard | None = None
    """The trust-anchor guard's hold, when a bundle is held on to instead of ``asked``."""


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
        self.writer = Writer(client, FIELD_MANAGER)
        self.recorder = recorder
        self.config_namespace = config_namespace
        self.options = options or RolloutOptions()
        self.caches = LinkerdCaches(client, config_namespace)
        self.configs = self.caches.configs
        self.configmaps = self.caches.configmaps
        self.pods = self.caches.pods
        self.meshed_pods = self.caches.meshed_pods
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
        self.judgements = Judgements()
        self._held: dict[str, tuple[object, bool]] = {}
        self._untrusted: dict[str, tuple[object, str]] = {}
        # Invariant: by LinkerdConfig, whether the managed ConfigMap held its last completed
        # configuration (``_holds``), for the record and ConfigMap hash it was judged on; and
        # the record last said untrusted (uid, digest), said once.
        self.metrics = ConfigMapMetrics.of(client.registry)
        self.writes = ConfigMapWrites(self.writer, recorder, self.configmaps.store, self.metrics)
        self.outcomes = StatusOutcomes(
            self.writer, recorder, self._meshed, monotonic, self.caches.issuer_updated
        )
        self.caches.wake(
            self.controller.enqueue,
            lambda: self.outcomes.anchor_held,
            self.writer.unless_echo,
        )

    @property
    def informers(self) -> list[Informer]:
        return self.caches.informers

    @property
    def informers_on_demand(self) -> list[Informer]:
        """Those started only when first wanted: only a changed trust bundle reads the meshed
        pods, and it waits for them (``_meshed``). Until one does, every meshed pod of a
        large mesh (a second LIST and watch of pods, and a key each in memory) costs nothing
        and holds back nothing."""
        return [self.meshed_pods]

    def _meshed(self) -> list[Keyed]:
        if not self.meshed_pods.has_synced:
            self.meshed_pods.want()
            raise MeshUnseen(f"the cache of meshed pods ({self.meshed_pods.name}) has not filled")
        return self.meshed_pods.store.items()

    def config_names(self) -> list[str]:
        return self.caches.config_names()

    def new_term(self) -> None:
        """Leading again: the rollout's memory of the last term gives way to status."""
        self.rollout.new_term()

    async def reconcile(self, key: str) -> Result:
        """Decide, choose what to write and roll, adopt, write, roll, report."""
        config = self.configs.store.get(key)
        if config is None or config["metadata"].get("deletionTimestamp"):
            # Deleting a LinkerdConfig never deletes the ConfigMap: the mesh outlives us.
            log.info("linkerdconfig gone; configmap left as it is", linkerdconfig=key)
            self.rollout.forget(key)
            self.judgements.forget(key)
            self._held.pop(key, None)
            self._untrusted.pop(key, None)
            return Result()
        conditions: list[Json] = list((config.get("status") or {}).get("conditions") or [])
        generation = int(config["metadata"].get("generation", 0))
        decided = await self._decide(config)
        if isinstance(decided, decision.Refused):
            return await self.outcomes.refused(config, conditions, generation, decided)
        managed = decided.configmaps.get(decided.target.name)
        config, vouches = await self._vouched(config, managed, decided.current)
        carried = rollback.carried_back(managed, config, decided.desired.config_hash)
        if carried is not None:
            return await self._given_back(config, carried)
        chosen = await self._choose(config, decided)
        if isinstance(chosen, Result):
            return chosen
        written = chosen.written
        if not await self._adopt(config, decided.configmaps, decided.current, written):
            return Result(requeue=True)
        vouches = self.rollout.vouched(config) or vouches  # an adoption recorded just now
        halt = self.rollout.halt_state(config, chosen.asked.config_hash).halted
        written = replace(written, carried=rollback.carried(config, halt), vouches=vouches)
        held_before = held_config_hash(decided.configmaps.get(decided.target.name))
        try:
            lost = await self._write(config, decided.configmaps, written)
        except ApiError as exc:
            if exc.conflict:
                # A precondition (or a restore racing another's create): the ConfigMap moved
                # on since the cache showed it. Its watch event wakes the next reconcile,
                # which renders onto what is there now; nothing was written over.
                log.info("configmap changed since cached; reconciling again",
                         linkerdconfig=key, path=exc.path)  # fmt: skip
                return Result(requeue=True)
            return await self.outcomes.write_failed(config, conditions, generation, written, exc)
        if lost:
            return await self.outcomes.dependency_lost(
                config, conditions, generation, written, lost
            )
        # Moved to it from another configuration, by us or by another leader before us: the
        # injector's fallback wait starts again. A cache that has not yet shown our own write
        # starts it again too, which only holds restarts longer (the safe side).
        self.rollout.found(written.config_hash, written=held_before != written.config_hash)
        outcome = await self._roll(chosen)
        reported = await self.outcomes.applied(
            config, conditions, generation, written, outcome, self.options.restart_interval,
            chosen.held,
        )  # fmt: skip
        if isinstance(done := outcome.parts.get("completed"), Completed):
            # Recorded (its status write landed; one refused raised): ours until the
            # ConfigMap carries its digest. A record decided and refused is never vouched for.
            self.rollout.vouch(config, done)
        return reported

    async def _vouched(
        self, config: Json, managed: Json | None, current: dict[str, dict[str, str]]
    ) -> tuple[Json, str]:
        """``config`` with only a ``lastCompleted`` the controller wrote (``record.vouched``),
        and what the ConfigMap written now vouches for (``Desired.vouches``). Ours: the
        managed ConfigMap carries its digest or holds its configuration
        (``rollback.holds``), or this process recorded it. Another (a status patch, a backup
        of another's) is read as none, with a Warning: no rollback returns to it, and the
        next completion records one over it (issue 61, finding 1)."""
        found = Record.of(config).completed
        carried = completed_digest(managed) or ""
        mine = "" if found is None else digest(found)
        trusted = found is not None and (
            rollback.vouched_for(found, managed, self.rollout.vouched(config))
            or await self._holds(config, found, held_config_hash(managed), current)
        )
        kept, dropped = vouched(config, trusted)
        name = str(config["metadata"]["name"])
        said = (config["metadata"].get("uid"), mine)
        if dropped is not None and self._untrusted.get(name) != said:  # said once a record
            self._untrusted[name] = said
            message = (
                f"status.lastCompleted (configuration {dropped or 'unreadable'}) is not one "
                f"this controller recorded: ConfigMap {target_of(config)} neither holds it nor "
                "vouches for it. It is ignored: no rollback returns to it"
            )
            log.warning("rollout record untrusted", linkerdconfig=name, configuration=dropped)
            self.recorder.record(config, "Warning", "RolloutRecordUntrusted", message)
        return kept, mine if trusted else carried

    async def _holds(
        self,
        config: Json,
        found: Completed,
        held: str | None,
        current: dict[str, dict[str, str]],
    ) -> bool:
        """``rollback.holds``, once per record and ConfigMap: it renders the record again (a
        thread's work for a large one), and a completed rollout reconciles often."""
        metadata = config["metadata"]
        key = (metadata.get("uid"), digest(found), held)
        known = self._held.get(str(metadata["name"]))
        if known is not None and known[0] == key:
            return known[1]
        holds = await asyncio.to_thread(rollback.holds, config, found, held, current)
        self._held[str(metadata["name"])] = (key, holds)
        return holds

    async def _decide(self, config: Json) -> decision.Decided | decision.Refused:
        """``configmap.decision.decide`` over copies of the caches: reading the installed
        data and rendering onto it cost up to formats.bounded's limits, which anyone who may
        edit the ConfigMap can reach, and validating a spec up to its own (a hundred
        anchors). Validation runs again here because the webhook may be off or may have been
        bypassed, and a value Linkerd cannot use must never be written."""
        configs, snapshot = self.configs.store.list(), self.configmaps.store.snapshot()

        def decide() -> decision.Decided | decision.Refused:
            return decision.decide(
                config, self.judgements.validate(config), configs, snapshot, self.config_namespace
            )

        # A few KB of data and of spec (a legacy installation's 1.5 and 1.5) decide in well
        # under a millisecond: on the loop, sparing a thread's round trip, a tenth of a
        # revert's CPU. More of either (Linkerd's own 8 KB of values: 8 ms; a spec's values
        # rendering to 250 KB: 80 ms), up to the bounds, in a thread.
        small = (
            _data_bytes(snapshot, self.config_namespace) <= INLINE_DECIDE_BYTES
            and _spec_bytes(config) <= INLINE_DECIDE_BYTES
        )
        return decide() if small else await asyncio.to_thread(decide)

    async def _choose(self, config: Json, decided: decision.Decided) -> Chosen | Result:
        """What this reconcile writes and rolls out (``Chosen``): what the spec asks for, or
        the configuration a rollback in force returns to, or the bundle the trust-anchor
        guard holds on to; the reconcile's end when the guard lets nothing be written."""
        asked, current = decided.desired, decided.current
        back = await self._rendered_target(config, asked, current)
        written = asked if back is None else back
        # The trust-anchor guard: a removal some meshed pod still needs is not written; the
        # bundle that keeps both anchors is written and rolled out instead, so the pods that
        # hold the removal come onto it (or, with no such bundle, nothing is written).
        guard = await self.outcomes.trust_anchor_guard(config, written, current)
        if isinstance(guard, Result):
            return guard
        if guard.held and not written.anchors_stated:
            # Someone else's rotation of a bundle the spec leaves to the cluster: not ours to
            # write, nor to hold on to (written, it would be ours, and their removal forgotten
            # once the hold lifts). Nothing restarts onto it while a pod needs what it drops.
            why = "the spec states no trust anchor: the bundle is the cluster's, not ours to write"
            return await self.outcomes.held_without_bundle(config, guard, why, theirs=True)
        if guard.held and (guard.holding is None or back is not None):
            why = "" if guard.holding is None else "a rollback is in force"
            return await self.outcomes.held_without_bundle(config, guard, why)
        if guard.holding is None or back is not None:
            return Chosen(config, asked, back, written, asked)
        rolled_config = holding_config(config, guard.holding)
        try:
            holding = await asyncio.to_thread(desired_config, rolled_config, current)
        except (FormatError, VersionError) as exc:
            log.warning(
                "the bundle held on to does not render; nothing written while held",
                linkerdconfig=config["metadata"]["name"],
                problem=str(exc),
            )
            why = f"the bundle held on to does not render ({exc})"
            return await self.outcomes.held_without_bundle(config, guard, why)
        return Chosen(rolled_config, asked, back, holding, holding, guard)

    async def _roll(self, chosen: Chosen) -> RolloutOutcome:
        """One pass of the rollout of what was written, its attempt the one asked for, with
        where a failure would go back to: the recorded spec judged as a spec is (cheap: only
        a rollout after a completed one has a spec to judge, and it is a few KB)."""
        anchors = None
        if chosen.held is not None:
            anchors = observe.AnchorHold(chosen.held.decision.message(), chosen.rolled.config_hash)
        asked = chosen.asked.config_hash
        back_to = rollback.target(chosen.rolled_config, chosen.rolled.config_hash, asked)
        return await self.rollout.roll(
            chosen.rolled_config, chosen.rolled, chosen.back, anchors, asked=asked,
            back_to=back_to,
        )  # fmt: skip

    async def _write(
        self, config: Json, configmaps: dict[str, Json], desired: Desired
    ) -> list[str]:
        """The copies kept, then whatever drifted written: the target and its companions (a
        deleted one restored from its copy). The dependencies that can be neither restored
        nor written (``unrestorable``), nothing of theirs written."""
        target = desired.target.name
        # A dependency that lost a key it cannot do without is not copied: its copy is what
        # puts the key back.
        gone = missing(configmaps, desired)
        for name in (target, *sorted(desired.depends_on)):
            if name in configmaps and name not in gone:
                await self.writes.preserve(config, name, configmaps[name], desired)
        stale = drifted(configmaps, desired)
        if target in stale:
            await self.writes.write(config, configmaps.get(target), desired)
        lost = unrestorable(configmaps, desired)
        for name in stale:
            if name != target and name not in lost:
                await self.writes.write_companion(config, configmaps.get(name), desired, name)
        return lost

    async def _given_back(self, config: Json, carried: tuple[Halt, Completed]) -> Result:
        """A LinkerdConfig made again mid-rollback (a GitOps prune, a replace) asking for the
        configuration that failed: its status gets back the halt and the last completed
        configuration the managed ConfigMap carries (``rollback.carried_back``) before
        anything is written, so the rollback goes on instead of rolling the failed
        configuration out again. On the status this was decided from."""
        name = config["metadata"]["name"]
        try:
            await self.writer.patch_status(
                LINKERD_CONFIGS, None, name, fields(halt=carried[0], completed=carried[1]),
                resource_version=config["metadata"].get("resourceVersion"),
            )  # fmt: skip
        except ApiError as exc:
            log.info("rollout record not given back yet", linkerdconfig=name,
                     status=exc.status, problem=exc.message)  # fmt: skip
            return Result(requeue=True)
        halt, completed = carried
        self.rollout.vouch(config, completed)  # the ConfigMap carried it: ours
        back_to = None if halt.rollback is None else halt.rollback.to_hash
        message = (
            f"made again mid-rollback: the rollout record its ConfigMap carries is given back "
            f"(the rollback of configuration {halt.config_hash} to {back_to} goes on)"
        )
        log.warning("rollout record given back", linkerdconfig=name, back_to=back_to)
        self.recorder.record(config, "Warning", "RolloutRecordRestored", message)
        return Result(requeue=True)

    async def _adopt(
        self,
        config: Json,
        configmaps: dict[str, Json],
        current: dict[str, dict[str, str]],
        desired: Desired,
    ) -> bool:
        """Before its first write replaces an installation, a LinkerdConfig records it as its
        last completed configuration when every opted-in pod runs it (``rollback.adoption``):
        ``onFailure: Rollback`` can then return to it (issue 37, finding 6). Recorded first,
        so a leader lost between the two writes never leaves the installation unrecorded.
        False when the record could not be written (nothing is written then; retried)."""
        target = desired.target.name
        if not rollback.adopting(config) or target not in drifted(configmaps, desired):
            return True
        if target not in configmaps:
            return True  # nothing installed to adopt (a preserved copy is not what pods run)
        name = config["metadata"]["name"]
        try:
            snapshot = await asyncio.to_thread(adopted_snapshot, config, current)
            installed = await asyncio.to_thread(restored_config, config, snapshot, current)
        except (FormatError, VersionError) as exc:
            log.info("installed configuration not recorded", linkerdconfig=name, why=str(exc))
            return True
        record, why = rollback.adoption(
            config, installed.config_hash, snapshot, self.rollout.stale(installed), now_rfc3339()
        )
        if record is None:
            if why:
                log.info("installed configuration not recorded", linkerdconfig=name, why=why)
            return True
        try:
            # On the status this was decided from: a later one (our own first write read
            # back late) must not be adopted over.
            await self.writer.patch_status(
                LINKERD_CONFIGS,
                None,
                name,
                fields(completed=record),
                resource_version=config["metadata"].get("resourceVersion"),
            )
        except ApiError as exc:
            log.info("installed configuration not recorded yet", linkerdconfig=name,
                     status=exc.status, problem=exc.message)  # fmt: skip
            return False
        self.rollout.vouch(config, record)
        message = (
            f"recorded the installed configuration {installed.config_hash} (proxy "
            f"{installed.proxy.version}), which every opted-in pod runs, as the last completed: "
            "onFailure: Rollback returns to it"
        )
        log.info("installed configuration recorded", linkerdconfig=name, hash=installed.config_hash)
        self.recorder.record(config, "Normal", "Adopted", message)
        return True

    async def _rendered_target(
        self, config: Json, asked: Desired, current: dict[str, dict[str, str]]
    ) -> Desired | None:
        """What the ConfigMap must hold instead of what the spec asks for (``asked``) while a
        failed rollout of it is rolled back: the last completed configuration (the spec stays
        as the user wrote it; a new configuration or a resume is a new attempt, an edit of
        spec.rollout alone is none). None when no
        rollback is in force, or it cannot go back (then the spec's is written, halted)."""
        halt = self.rollout.halt_state(config, asked.config_hash)
        if rollback.rollback_of(halt.halted) is None:
            return None  # nothing to render, and no thread's round trip for it
        try:
            rendered = await asyncio.to_thread(
                rollback.rendered_target, config, halt.halted, current
            )
        except (FormatError, VersionError) as exc:
            # What is installed now cannot take it (Linkerd upgraded to the values format
            # since, say). The spec is not invalid for that: the rollout halts instead.
            log.warning(
                "cannot roll back: the last completed configuration does not render onto "
                "what is installed; halted instead",
                linkerdconfig=config["metadata"]["name"],
                problem=str(exc),
            )
            return None
        return rendered


INLINE_DECIDE_BYTES = 4096
"""The most ConfigMap data, and the most spec, a reconcile decides on over the event loop (as
aiohttp compresses a body of up to ``max_sync_chunk_size`` inline and a larger one in the
executor)."""


def _data_bytes(configmaps: dict[str, Json], namespace: str) -> int:
    """The UTF-8 bytes of the data of the cached ConfigMaps in ``namespace`` (the target's,
    its preserved copy, the trust roots, and any others there): what a decision may read."""
    return sum(
        len(value.encode("utf-8", "surrogatepass"))
        for configmap in in_namespace(configmaps.items(), namespace).values()
        for value in (configmap.get("data") or {}).values()
        if isinstance(value, str)
    )


def _spec_bytes(config: Json) -> int:
    """The JSON bytes of what a decision reads of the LinkerdConfig itself: its spec and its
    annotations (a v1alpha1 object's values travel in one)."""
    metadata = config.get("metadata") or {}
    try:
        return len(orjson.dumps([config.get("spec"), metadata.get("annotations")]))
    except orjson.JSONEncodeError:  # not JSON the API server would send: not small either
        return INLINE_DECIDE_BYTES + 1
