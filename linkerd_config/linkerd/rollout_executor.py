"""Rolling the data plane onto a configuration: the rollout's side effects, one pass a call.

The decisions are ``rollout``'s (pure); this executes them through the typed writer and reads
only caches: which pods are stale (pods, namespaces, ReplicaSets), what each owner records of
its last restart (workload caches: the count and the pacing), and whether the proxy injector
already injects the desired proxy (a dry-run create), falling back to a wait when it cannot
be asked. A dry-run that comes back without a proxy, or is refused in the workload's own
namespace, is an answer, not a failure to ask: nothing restarts on it, however long.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from linkerd_config.kube import revisions
from linkerd_config.kube.client import ApiError
from linkerd_config.kube.concurrently import all_of
from linkerd_config.kube.events import EventRecorder
from linkerd_config.kube.metrics import ComponentMetrics
from linkerd_config.kube.resource import (
    DAEMONSETS,
    DEPLOYMENTS,
    PODS,
    REPLICASETS,
    STATEFULSETS,
    ApiResource,
    Json,
)
from linkerd_config.kube.store import Store
from linkerd_config.kube.writer import Writer
from linkerd_config.linkerd import canary, rollback, rollout, workload_health
from linkerd_config.linkerd import rollout_machine as machine
from linkerd_config.linkerd.halt_record import Halt
from linkerd_config.linkerd.reconcile import Desired
from linkerd_config.linkerd.rollout_machine import RolloutOutcome
from linkerd_config.linkerd.rollout_phase import Phase
from linkerd_config.linkerd.rollout_policy import RolloutOptions, RolloutPolicy

log = structlog.get_logger(__name__)

WORKLOAD_RESOURCES: dict[str, ApiResource] = {
    "Deployment": DEPLOYMENTS,
    "StatefulSet": STATEFULSETS,
    "DaemonSet": DAEMONSETS,
}


class RolloutMetrics(ComponentMetrics):
    """The data plane's rollout as this replica performed it (ours: controller-runtime has no
    such family), by the kind of owner restarted; ``Pod`` is a bare pod evicted."""

    KINDS = (*WORKLOAD_RESOURCES, "Pod")

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        self.restarts = Counter(
            "linkerd_config_workload_restarts_total",
            "Workloads restarted (bare pods evicted) onto a new Linkerd configuration, by kind",
            ["kind"],
            registry=registry,
        )
        self.restart_failures = Counter(
            "linkerd_config_workload_restart_failures_total",
            "Restarts (evictions) the API server refused, retried on a later pass, by kind",
            ["kind"],
            registry=registry,
        )
        self.halts = Counter(
            "linkerd_config_rollouts_halted_total",
            "Rollouts halted because a restarted workload failed or missed its deadline",
            registry=registry,
        )
        self.halted = Gauge(
            "linkerd_config_rollout_halted",
            "1 while a LinkerdConfig's rollout is halted (as this replica last saw it)",
            ["linkerdconfig"],
            registry=registry,
        )
        self.rollbacks = Counter(
            "linkerd_config_rollbacks_total",
            "Rollouts that failed and were rolled back to the last completed configuration",
            registry=registry,
        )
        self.rolled_back = Gauge(
            "linkerd_config_rollout_rolled_back",
            "1 while a LinkerdConfig's failed rollout is rolling or rolled back (as this "
            "replica last saw it)",
            ["linkerdconfig"],
            registry=registry,
        )
        for kind in self.KINDS:  # every series from the first scrape
            self.restarts.labels(kind)
            self.restart_failures.labels(kind)


PROBE_SPACING = 2.0
"""Seconds between two questions to the injector about one configuration while it still
injects the old proxy (every pod event wakes a reconcile; the answer changes only when the
injector has re-read its files)."""

RESTART_CONCURRENCY = 10
"""Restarts of one pass in flight at once: a batch of 50 takes about five request times, not
fifty, so a pass lasts what ``restart_interval`` says and little more."""


INJECTOR_NOT_INJECTING = "InjectorNotInjecting"
NEW_PODS_REFUSED = "NewPodsRefused"


def _gone_back_to(effective: Desired | None, halt: Halt) -> Desired | None:
    """What a rollback in force returns to: ``effective``, unless that is the failed attempt
    itself (the configuration asked for, or the one rolled out when it failed), which is
    what the controller writes when it cannot go back."""
    if effective is None or effective.config_hash in (halt.config_hash, halt.rolled):
        return None
    return effective


@dataclass
class _ConfigProgress:
    """What this process knows of one configuration's rollout."""

    written_at: float | None = None
    """Monotonic time we first wrote (or found) it: the injector's fallback wait starts."""
    injector_confirmed: bool = False
    """The last question found the injector injecting it (or the fallback wait passed). Good
    for that pass only: every pass that restarts asks again, since an injector that goes
    down mid-way would bring the rest of the rollout out of the mesh (the Mesh rule)."""
    probed_at: float = float("-inf")
    """Monotonic time of the last question to the injector ..."""
    waiting_why: str = ""
    """... and what its answer said while it still injected the old proxy."""
    pass_finished: float | None = None
    """Wall time this process's last pass finished sending its restarts."""
    probe_failure: str = ""
    """Why the injector could not be asked, or why its answer holds the restarts, last time
    (each said once in a Warning, not once per question)."""
    halt: Halt | None = None
    """The halt this process decided, until its status write is read back (reconciles in
    between must neither report it again nor restart anything)."""
    halt_read: object = None
    """The LinkerdConfig's resourceVersion ``halt`` was decided on: once the cache holds any
    other, status is the record (our write read back, or a later one: another leader's, while
    this process did not lead)."""
    canary_passed: canary.CanaryRecord | None = None
    """The canary's record once this process saw it pass (spec.rollout.canary): until status
    says so, the rest's restarts must not look like a larger canary."""
    canary_written: canary.CanaryRecord | None = None
    """The canary's record this process last decided to write (its clock, ``healthySince``),
    until status holds it: a pass on the cache from before that write must read the clock it
    started, not start it again (two clocks milliseconds apart: a later one overwrote the
    first, and the canary's stable time restarted)."""
    canary_written_read: object = None
    """The LinkerdConfig's resourceVersion ``canary_written`` was decided on (as for a halt)."""
    said_once: set[str] = field(default_factory=set)
    """The reasons of the Events said once for this configuration (the Warning that a
    rollback's own workloads missed their deadline)."""
    restores_tried: dict[str, float] = field(default_factory=dict)
    """Monotonic time this process last tried to bring each workload back from this failed
    configuration (a rollback): tried again no sooner than ``machine.HEALTH_RECHECK`` later, however
    many events wake the reconcile meanwhile (a refusal is not sent, said and counted on
    each of them)."""


class RolloutExecutor:
    """One pass of a LinkerdConfig's rollout per ``roll``; safe to call at any rate."""

    def __init__(
        self,
        writer: Writer,
        recorder: EventRecorder,
        options: RolloutOptions,
        *,
        pods: Store,
        namespaces: Store,
        replicasets: Store,
        workloads: Mapping[str, Store],
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.writer = writer
        self.recorder = recorder
        self.options = options
        self.pods = pods
        self.namespaces = namespaces
        self.replicasets = replicasets
        self.workloads = workloads
        self.wall = wall
        self.monotonic = monotonic
        self.metrics = RolloutMetrics.of(registry)
        self._progress: dict[str, _ConfigProgress] = {}
        # Invariant: one record per configuration hash this process has written, found or
        # rolled out (few: one per LinkerdConfig change).
        self._evicted: dict[tuple[str, str], tuple[int, float]] = {}
        # Invariant: (LinkerdConfig, hash) -> (bare pods evicted for it, by this process plus
        # what status reported when we took over; wall time of our last eviction).
        self._plans: tuple[tuple[object, ...], rollout.RolloutPlan] | None = None
        self._records: tuple[tuple[object, ...], list[float]] | None = None
        # Invariant: each is (the caches' revisions and the input it was derived from, what
        # was derived). A reconcile that changes no cache (a reverted edit, a status write)
        # reuses them: deciding over 50,000 pods costs once per change, not per reconcile.

    def forget(self, name: str) -> None:
        """LinkerdConfig ``name`` is gone: its gauges go with it (a halted one's 1 would keep
        the alert on it firing), and so do its eviction counts (one made again under that
        name starts from its own status)."""
        self.metrics.halted.remove(name)
        self.metrics.rolled_back.remove(name)
        for key in [key for key in self._evicted if key[0] == name]:
            del self._evicted[key]

    def new_term(self) -> None:
        """This process leads again after another may have: status is the record, and what
        this process remembers of its last term (evictions counted, a canary seen passing,
        a halt not read back, the injector's answers) may be older than another leader's
        writes since. It starts as a leader just started would."""
        self._progress.clear()
        self._evicted.clear()

    def _of(self, config_hash: str) -> _ConfigProgress:
        return self._progress.setdefault(config_hash, _ConfigProgress())

    def found(self, config_hash: str, *, written: bool = False) -> None:
        """The configuration is in the ConfigMap now: the injector's fallback wait starts;
        again when ``written`` (the ConfigMap moved to it from another configuration: back
        after a rollback, or the spec back to it), as the injector must read it again."""
        progress = self._of(config_hash)
        if progress.written_at is None or written:
            progress.written_at = self.monotonic()

    def _plan(self, desired: Desired) -> rollout.RolloutPlan:
        """The stale workloads, decided again only when a cache it reads changed."""

        def replicaset(ns: str, name: str) -> Json | None:
            return self.replicasets.get(f"{ns}/{name}")

        proxy = self.options.restricted(desired).proxy
        plan_key = (
            self.pods.revision,
            self.namespaces.revision,
            self.replicasets.revision,
            proxy,
        )
        if self._plans is None or self._plans[0] != plan_key:
            namespaces = {n["metadata"]["name"]: n for n in self.namespaces.list()}
            plan = rollout.plan_rollout(
                rollout.cached_pods(self.pods.items()), namespaces, proxy, replicaset
            )
            self._plans = (plan_key, plan)
        return self._plans[1]

    def stale(self, desired: Desired) -> int:
        """How many opted-in workloads do not run ``desired``, as the caches show them."""
        return len(self._plan(desired).workloads)

    def _recorded(self, config_hash: str) -> list[float]:
        """When each owner restarted for ``config_hash`` was, read again only on a change."""
        records_key = (*(s.revision for s in self.workloads.values()), config_hash)
        if self._records is None or self._records[0] != records_key:
            times = rollout.restart_times(self._workload_objects(), config_hash)
            self._records = (records_key, times)
        return self._records[1]

    def halt_state(self, config: Json, config_hash: str) -> workload_health.HaltState:
        """The halt (or rollback) in force for ``config_hash``: status's, or the one this
        process decided and has not read back from status yet."""
        halt = workload_health.halt_state(config, config_hash)
        progress = self._of(config_hash)
        decided = progress.halt
        if decided is None:
            return halt
        if halt.halted is not None:
            if decided.same(halt.halted) and decided.rank > halt.halted.rank:
                return replace(halt, halted=decided)  # a later phase of ours, not read yet
            # Read back, or another halt since (another leader's): status is the record now.
            progress.halt = None
            return halt
        if (config.get("metadata") or {}).get("resourceVersion") != progress.halt_read:
            progress.halt = None  # status moved on without it (another leader's writes)
            return halt
        if halt.halted is None:
            mine = workload_health.halt_state(
                {**config, "status": {workload_health.HALT_FIELD: decided.to_json()}}, config_hash
            )
            if mine.halted is None:  # resumed, or a new attempt, since: forget it
                self._of(config_hash).halt = None
                return halt
            return mine
        return halt

    def _decided(self, config: Json, config_hash: str, record: Halt) -> None:
        """Remember a halt (or rollback) record decided on ``config`` until status holds it."""
        progress = self._of(config_hash)
        progress.halt = record
        progress.halt_read = (config.get("metadata") or {}).get("resourceVersion")

    async def roll(
        self,
        config: Json,
        desired: Desired,
        effective: Desired | None = None,
        anchors: machine.AnchorHold | None = None,
        *,
        asked: str | None = None,
    ) -> RolloutOutcome:
        """One pass; its outcome carries the status of the rollout's halt (kept, set, or
        cleared by a resume or a new attempt) whatever the pass found. ``effective``: what
        the ConfigMap holds instead of ``desired`` while a rollback is in force (None, or
        ``desired`` itself: it cannot go back); ``anchors``: the trust-anchor guard's hold,
        when it holds a removal; ``asked``: the hash of the configuration the spec asks for,
        when ``desired`` is the bundle the guard holds on to instead. The halt (or rollback)
        is the attempt's, kept under ``asked`` (by default ``desired``'s hash) whichever of
        the two is rolled out: a hold lifting ends no halt."""
        attempt = asked or desired.config_hash
        halt = self.halt_state(config, attempt)
        outcome = await self._roll(config, desired, halt, effective, anchors, attempt)
        self._gauges(str(config["metadata"]["name"]), outcome.reason)
        return replace(outcome, status={**halt.status, **outcome.status})

    async def _roll(
        self,
        config: Json,
        desired: Desired,
        halt: workload_health.HaltState,
        effective: Desired | None,
        anchors: machine.AnchorHold | None,
        attempt: str,
    ) -> RolloutOutcome:
        """Observe, decide (``rollout_machine.step``), act."""
        policy = RolloutPolicy.of(config, self.options)
        asked_for = desired
        if halt.halted is not None and halt.halted.rollback is not None:
            gone_to = _gone_back_to(effective, halt.halted)
            observed = await self._going_back(config, desired, gone_to, halt.halted)
            asked_for = gone_to or desired
        else:
            observed = await self._observed(config, desired, halt)
        observed = replace(observed, anchors=anchors, asked_hash=attempt)
        decided = machine.step(observed, halt, policy)
        if (ask := decided.ask) is not None:
            progress = self._of(asked_for.config_hash)
            answer = await self._ask_injector(config, asked_for, list(ask.workloads), progress)
            observed = replace(observed, injector=answer)
            decided = machine.step(observed, halt, policy)
        self._act(config, desired.config_hash, decided.actions)
        gate = asyncio.Semaphore(RESTART_CONCURRENCY)
        if (restart := decided.restart) is not None:
            config_hash, version = desired.config_hash, desired.proxy.version

            async def one(workload: rollout.Workload) -> machine.RestartResult:
                async with gate:
                    return await self._restart_reported(config, workload, config_hash, version)

            done = await all_of(*(one(w) for w in restart.workloads))
            # A record's time is stamped before its PATCH is sent; the batch's last PATCH
            # lands a little later. The interval runs from when the pass finished.
            self._of(config_hash).pass_finished = self.wall()
            self._report_pass(config, version, done)
            evicted, _ = self._evictions(config, config_hash)
            decided = machine.after_restarts(observed, policy, decided, done, evicted)
        back = observed.going_back
        if (restore := decided.restore) is not None and back is not None:
            failed_hash, onto = observed.config_hash, asked_for
            tried, now = self._of(failed_hash).restores_tried, self.monotonic()
            tried.update((str(w), now) for w in restore.workloads)
            to_hash = restore.to_hash

            async def bring(workload: rollout.Workload) -> bool:
                async with gate:
                    return await self._restore_reported(
                        config, workload, failed_hash, onto, to_hash
                    )

            brought = await all_of(*(bring(w) for w in restore.workloads))
            decided = machine.after_restores(decided, back, sum(brought))
        return decided.outcome

    async def _observed(
        self, config: Json, desired: Desired, halt: workload_health.HaltState
    ) -> machine.Observed:
        """What a pass of ``desired``'s rollout reads: the caches, and the ReplicaSets of a
        Deployment that shows ``ReplicaFailure`` (live)."""
        config_hash = desired.config_hash
        plan = self._plan(desired)
        evicted, evicted_at = self._evictions(config, config_hash)
        restarted = {}
        if halt.halted is None:
            restarted = await self._of_this_revision(self._restarted(config_hash, plan))

        def preflight() -> tuple[list[rollout.Workload], list[tuple[str, str]]]:
            pending = rollout.pending(plan.workloads, self._record, config_hash)
            return self._preflight(pending, rollback.settled(config))

        return machine.Observed(
            config, config_hash, desired.proxy.version, self.wall(), plan, restarted,
            tuple(self._recorded(config_hash)), evicted, evicted_at,
            self._of(config_hash).pass_finished, preflight, self._labels,
            self._canary_record(config, config_hash),
        )  # fmt: skip

    async def _going_back(
        self, config: Json, failed: Desired, effective: Desired | None, halt: Halt
    ) -> machine.Observed:
        """What a pass of a rollback reads (``rollout_machine.going_back``). The ConfigMap
        already holds ``effective`` (the last completed configuration: the controller wrote
        it); None when it cannot go back. The workloads to bring back are those restarted
        for the configuration rolled out when it failed (``Halt.rolled``: the bundle the
        trust-anchor guard held on to, or ``failed`` itself)."""
        failed_hash = halt.rolled
        plan = self._plan(effective or failed)
        pending = [w for _, w in self._restarted(failed_hash, plan).values()]
        tried = self._of(failed_hash).restores_tried
        to_hash, to_version = rollback.returned_to(halt, failed, effective)
        back = machine.going_back(halt, pending, to_hash, to_version, tried, self.monotonic())
        if machine.gated(back, failed_hash, halt):
            standing = await self._brought_back(list(back.workloads), plan, halt.started_at)
            back = replace(back, brought_back=tuple(standing))
        return machine.rolling_back(
            config, halt, failed.proxy.version, self.wall(), plan, self._labels, back
        )

    def _act(self, config: Json, config_hash: str, actions: Iterable[machine.Action]) -> None:
        """What a pass decided, done: Events, a halt (or the start or end of a rollback)
        counted, logged and remembered until status holds it, the canary's record remembered.
        Restarts, restores and questions to the injector are the pass's own (``_roll``)."""
        name = str(config["metadata"]["name"])
        progress = self._of(config_hash)
        for action in actions:
            match action:
                case machine.Emit(type_, reason, message, involved, once):
                    if once:
                        if reason in progress.said_once:
                            continue
                        progress.said_once.add(reason)
                    target = config if involved is None else self._involved(involved)
                    if target is not None:
                        self.recorder.record(target, type_, reason, message)
                case machine.Halted(record, failed, back_to):
                    self.metrics.halts.inc()
                    if back_to is not None:
                        self.metrics.rollbacks.inc()
                        # The injector must be seen injecting the old proxy again.
                        self._progress.pop(back_to, None)
                    outcome = "halted" if back_to is None else "failed"
                    then = "" if back_to is None else f"; rolling back to configuration {back_to}"
                    log.warning(f"rollout {outcome}", linkerdconfig=name, failed=failed,
                                then=then)  # fmt: skip
                    self._decided(config, record.config_hash, record)
                case machine.RolledBack(record, to_hash):
                    log.warning("rollout rolled back", linkerdconfig=name, to=to_hash)
                    self._decided(config, record.config_hash, record)
                case machine.CanaryKept(record, passed_now):
                    stored = canary.stored(config, config_hash)
                    if record != stored:
                        progress.canary_written = record
                        progress.canary_written_read = config["metadata"].get("resourceVersion")
                    if passed_now and progress.canary_passed is None:
                        progress.canary_passed = record
                        log.info("canary passed", linkerdconfig=name, hash=config_hash)
                case _:
                    pass

    def _gauges(self, name: str, phase: Phase) -> None:
        """The halted and rolled-back gauges, as this pass left the rollout."""
        self.metrics.halted.labels(name).set(1 if phase == Phase.HALTED else 0)
        rolled_back = phase in (Phase.ROLLING_BACK, Phase.ROLLED_BACK, Phase.ROLLBACK_STUCK)
        self.metrics.rolled_back.labels(name).set(1 if rolled_back else 0)

    async def _restore_reported(
        self,
        config: Json,
        workload: rollout.Workload,
        failed_hash: str,
        effective: Desired,
        to_hash: str = "",
    ) -> bool:
        """``_restore``, counted, logged and recorded as an Event on the workload; a refusal
        is reported with the API server's reason and retried on the next reconcile."""
        involved = self._involved(workload)
        name = config["metadata"]["name"]
        try:
            how = await self._restore(config, workload, failed_hash, effective.config_hash, to_hash)
        except ApiError as exc:
            reason = f"{exc.status} {exc.reason or 'Error'}: {exc.message}"
            log.warning("rollback of a workload failed; will retry", workload=str(workload),
                        error=reason)  # fmt: skip
            self.metrics.restart_failures.labels(workload.kind).inc()
            if involved is not None:
                self.recorder.record(
                    involved,
                    "Warning",
                    "RollbackFailed",
                    f"bringing it back to proxy {effective.proxy.version} (LinkerdConfig "
                    f"{name}) was refused: {reason}",
                )
            return False
        if how and involved is not None:
            self.metrics.restarts.labels(workload.kind).inc()
            self.recorder.record(
                involved,
                "Normal",
                "WorkloadRolledBack",
                f"brought back to proxy {effective.proxy.version} (LinkerdConfig {name}, "
                f"configuration {effective.config_hash}): {how}",
            )
        return bool(how)

    async def _restore(
        self,
        config: Json,
        workload: rollout.Workload,
        failed_hash: str,
        old_hash: str,
        to_hash: str = "",
    ) -> str:
        """Bring one workload back from ``failed_hash``: a Deployment to its previous
        ReplicaSet's pod template (``kubectl rollout undo``) when only our restart changed it
        since and that ReplicaSet is not another configuration's (``rollback.restores_to``:
        ``old_hash`` is rendered, ``to_hash`` recorded), anything else restarted onto
        ``old_hash``. How it was done, or "" when it
        needed nothing (already back, gone, or changed since: the next reconcile looks
        again)."""
        if workload.kind == "Deployment":
            live = await self.writer.get(DEPLOYMENTS, workload.namespace, workload.name)
            if live is None or not rollout.already_restarted(live, failed_hash):
                return ""
            siblings = await self.writer.list(REPLICASETS, workload.namespace)
            template = rollback.previous_template(live, siblings, failed_hash)
            # Edited since our restart: restarted instead, so the edit stands. Another
            # configuration's: restarted instead, so its proxy does not come back.
            if (
                template is not None
                and rollback.only_restarted_since(live, template)
                and rollback.restores_to(template, (old_hash, to_hash))
            ):
                try:
                    await self.writer.merge_patch(
                        DEPLOYMENTS,
                        workload.namespace,
                        workload.name,
                        revisions.undo_patch(live, template),
                    )
                except ApiError as exc:
                    if exc.not_found or exc.conflict:
                        return ""
                    raise
                log.info("workload rolled back", workload=str(workload), to="previous template")
                return "its previous ReplicaSet's pod template restored"
        if await self._restart(config, workload, old_hash):
            return "restarted"
        return ""

    async def _ask_injector(
        self,
        config: Json,
        desired: Desired,
        todo: list[rollout.Workload],
        progress: _ConfigProgress,
    ) -> machine.InjectorAnswer:
        """Whether the injector injects the desired proxy now, and what status says of it
        (when it does not: how soon to ask again). Told "not yet" moments ago (other events
        woke this reconcile), it is not asked again yet; a "yes" is never reused: every pass
        that restarts asks first."""
        since = self.monotonic() - progress.probed_at
        if since < PROBE_SPACING and not progress.injector_confirmed:
            return machine.InjectorAnswer(
                False, progress.waiting_why, retry_after=PROBE_SPACING - since
            )
        progress.probed_at = self.monotonic()
        answer = await self._injector_ready(desired, todo)
        progress.waiting_why, progress.injector_confirmed = answer.why, answer.injects
        said = answer.cause or (answer.held and answer.why)
        if said and said != progress.probe_failure:
            if answer.held:
                reason, message = answer.held, answer.why
            else:
                reason, message = (
                    "InjectorUnconfirmed",
                    f"cannot ask Linkerd's proxy injector which proxy it injects now: "
                    f"{answer.cause}; restarting after {self.options.injector_wait:.0f}s "
                    "without its answer",
                )
            self.recorder.record(config, "Warning", reason, message)
        progress.probe_failure = said
        return answer

    def _restarted(
        self, config_hash: str, plan: rollout.RolloutPlan
    ) -> dict[str, tuple[workload_health.Restarted, rollout.Workload]]:
        """The owners restarted for ``config_hash``, by name: how each stands now, and which
        it is (for its Events)."""
        records = {kind: store.snapshot() for kind, store in self.workloads.items()}
        return workload_health.restarted(records, config_hash, plan.reasons, self.wall())

    async def _brought_back(
        self, workloads: list[rollout.Workload], plan: rollout.RolloutPlan, started: float | None
    ) -> list[workload_health.Restarted]:
        """How each workload a rollback brings back stands (its deadline from the rollback's
        start)."""
        at = started or self.wall()
        back = workload_health.brought_back(workloads, self._record, plan.reasons, at)
        return [standing for standing, _ in (await self._of_this_revision(back)).values()]

    async def _of_this_revision(
        self, restarted: dict[str, tuple[workload_health.Restarted, rollout.Workload]]
    ) -> dict[str, tuple[workload_health.Restarted, rollout.Workload]]:
        """``restarted`` with each Deployment's ``ReplicaFailure`` checked against the
        revision the restart made (``workload_health.revision_refusal``): the halt takes
        evidence only from this attempt. The ReplicaSets are read live, a namespace at a time,
        and only when a Deployment shows the condition (no cache keeps their status)."""
        listed: dict[str, list[Json]] = {}
        checked = dict(restarted)
        for name, (standing, workload) in restarted.items():
            if not standing.verdict.replica_failure:
                continue
            if workload.namespace not in listed:
                listed[workload.namespace] = await self.writer.list(REPLICASETS, workload.namespace)
            obj = self._record(workload) or {}
            refusal = workload_health.revision_refusal(obj, listed[workload.namespace])
            verdict = workload_health.of_this_revision(standing.verdict, refusal)
            checked[name] = (replace(standing, verdict=verdict), workload)
        return checked

    def _labels(self, workload: rollout.Workload) -> canary.Labels | None:
        """A workload's labels and its namespace's, as the caches hold them."""
        return canary.labels_of(self._record(workload), self.namespaces.get(workload.namespace))

    def _canary_record(self, config: Json, config_hash: str) -> canary.CanaryRecord | None:
        """The canary's record: status's, else the one this process wrote and has not read
        back yet (a pass on the cache from before that write must read the clock it started),
        or the passed one it remembers (the rest's restarts are no larger canary)."""
        progress = self._of(config_hash)
        stored = canary.stored(config, config_hash)
        version = (config.get("metadata") or {}).get("resourceVersion")
        if progress.canary_written is not None and progress.canary_written_read == version:
            stored = progress.canary_written  # our write, not read back yet
        return canary.newest(stored, progress.canary_passed)

    def _preflight(
        self, workloads: list[rollout.Workload], settled: str | None
    ) -> tuple[list[rollout.Workload], list[tuple[str, str]]]:
        """Of the workloads to restart, those that may be, and the others with why not:
        paused or already unhealthy, their trouble is not ours."""
        ready, skipped = workload_health.preflight_split(
            workloads, lambda w: w.kind, self._record, settled
        )
        return ready, [(str(w), why) for w, why in skipped]

    def _report_pass(
        self, config: Json, version: str, results: Iterable[machine.RestartResult]
    ) -> None:
        """One Event on the LinkerdConfig per pass (each workload has its own): a rollout of
        hundreds of workloads stays readable, and within the recorder's budget."""
        restarted = [str(r.workload) for r in results if r.done]
        if restarted:
            self.recorder.record(
                config,
                "Normal",
                "WorkloadsRestarted",
                f"restarted {len(restarted)} workload(s) for proxy {version}: "
                + machine.listed(restarted),
            )
        refused = [f"{r.workload}: {r.refused}" for r in results if r.refused]
        if refused:
            self.recorder.record(
                config,
                "Warning",
                "RestartFailed",
                f"{len(refused)} restart(s) refused, retried next pass: " + machine.listed(refused),
            )

    def _workload_objects(self) -> list[Json]:
        return [obj for store in self.workloads.values() for obj in store.list()]

    def _record(self, workload: rollout.Workload) -> Json | None:
        """An owner as its cache holds it (its restart record); None for a bare pod."""
        store = self.workloads.get(workload.kind)
        return None if store is None else store.get(f"{workload.namespace}/{workload.name}")

    def _evictions(self, config: Json, config_hash: str) -> tuple[int, float | None]:
        key = (config["metadata"]["name"], config_hash)
        if key not in self._evicted:
            reported = machine.evictions_reported(config.get("status") or {}, config_hash)
            self._evicted[key] = (reported, 0.0)
        count, at = self._evicted[key]
        return count, (at or None)

    async def _restart_reported(
        self, config: Json, workload: rollout.Workload, config_hash: str, version: str
    ) -> machine.RestartResult:
        """``_restart``, counted, logged and recorded as an Event on the workload; a refusal
        is reported with the API server's reason and retried on a later pass."""
        involved = self._involved(workload)
        name = config["metadata"]["name"]
        try:
            restarted = await self._restart(config, workload, config_hash)
        except ApiError as exc:
            reason = f"{exc.status} {exc.reason or 'Error'}: {exc.message}"
            log.warning("restart failed; will retry", workload=str(workload), error=reason)
            self.metrics.restart_failures.labels(workload.kind).inc()
            if involved is not None:
                self.recorder.record(
                    involved,
                    "Warning",
                    "RestartFailed",
                    f"restart for proxy {version} (LinkerdConfig {name}) refused: {reason}",
                )
            return machine.RestartResult(workload, refused=reason)
        if restarted:
            self.metrics.restarts.labels(workload.kind).inc()
            if involved is not None:
                verb = "evicted" if workload.kind == "Pod" else "restarted"
                self.recorder.record(
                    involved,
                    "Normal",
                    "WorkloadRestarted",
                    f"{verb} for proxy {version} (LinkerdConfig {name}, configuration "
                    f"{config_hash})",
                )
        return machine.RestartResult(workload, done=restarted)

    def _involved(self, workload: rollout.Workload) -> Json | None:
        """The workload as an Event's involved object, from the cache (a workload's record
        keeps its uid; a bare pod's, its name and namespace only)."""
        if workload.kind == "Pod":
            cached = self.pods.get(f"{workload.namespace}/{workload.name}")
            api_version = PODS.api_version
        else:
            cached = self._record(workload)
            api_version = WORKLOAD_RESOURCES[workload.kind].api_version
        if cached is None:
            return None
        return {"kind": workload.kind, "apiVersion": api_version, "metadata": cached["metadata"]}

    async def _restart(self, config: Json, workload: rollout.Workload, config_hash: str) -> bool:
        """Restart once per configuration; False when it already was, is gone, or changed
        since we looked (the next pass looks again)."""
        if workload.kind == "Pod":
            try:
                await self.writer.evict(workload.namespace, workload.name)
            except ApiError as exc:
                if exc.not_found:
                    return False
                raise
            key = (config["metadata"]["name"], config_hash)
            count, _ = self._evicted.get(key, (0, 0.0))
            self._evicted[key] = (count + 1, self.wall())
            return True
        cached = self.workloads[workload.kind].get(f"{workload.namespace}/{workload.name}")
        if cached is None or rollout.already_restarted(cached, config_hash):
            return False
        resource = WORKLOAD_RESOURCES[workload.kind]
        try:
            await self.writer.merge_patch(
                resource,
                workload.namespace,
                workload.name,
                rollout.restart_patch(
                    config_hash, cached["metadata"]["resourceVersion"], self.wall()
                ),
            )
        except ApiError as exc:
            if exc.not_found or exc.conflict:
                return False
            raise
        log.info("workload restarted", workload=str(workload), hash=config_hash)
        return True

    async def _injector_ready(
        self, desired: Desired, workloads: Iterable[rollout.Workload]
    ) -> machine.InjectorAnswer:
        """Does the injector now inject the desired proxy? Ask it with a dry-run create of a
        pod from a stale workload's template.

        Three answers hold the restarts without end (the Mesh rule: a restart never takes a
        workload out of the mesh, in a rollback included): the injector injects another proxy
        (not yet), the dry-run pod came back without a proxy (the injector is down, or not
        injecting there: the new pods would be unmeshed), or admission refused the dry-run in
        the workload's own namespace (its new pods would be refused too). Only when the
        injector cannot be asked at all (no template could be read, the controller may not
        create pods there, the probe namespace refuses) does the fallback wait apply, and the
        cause is said."""
        cause = "no stale workload's pod template could be read"
        for workload in workloads:
            pod = await self._candidate_pod(workload)
            if pod is None:
                continue
            where = self.options.probe_namespace or workload.namespace
            if where != workload.namespace:
                pod = rollout.moved_pod(pod, where)
            try:
                created = await self.writer.dry_run_create(PODS, where, pod)
            except ApiError as exc:
                refusal = f"{exc.status} {exc.reason or 'Error'}: {exc.message}"
                if where == workload.namespace and not exc.unauthorized:
                    return machine.InjectorAnswer(
                        False,
                        f"a dry-run create of {workload}'s pod was refused ({refusal}): its "
                        "new pods would be refused too, so nothing is restarted until one is "
                        "admitted",
                        held=NEW_PODS_REFUSED,
                    )
                cause = f"the dry-run create of a pod in namespace {where} was refused: {refusal}"
                log.info("dry-run create refused; cannot confirm injector", error=cause)
                break
            injected = rollout.pod_projection(created)
            if rollout.proxy_version(injected) is None:
                return machine.InjectorAnswer(
                    False,
                    f"Linkerd's proxy injector did not inject a dry-run pod of {workload} "
                    f"(in namespace {where}): it is down or not injecting there, and a restart "
                    "now would take the workload out of the mesh, so nothing is restarted "
                    "until it injects again",
                    held=INJECTOR_NOT_INJECTING,
                )
            namespace = self.namespaces.get(workload.namespace)
            mismatch = desired.proxy.mismatch(injected, namespace)
            if mismatch is None:
                return machine.InjectorAnswer(True, "")
            return machine.InjectorAnswer(
                False, f"the proxy injector does not inject it yet: {mismatch}"
            )
        written_at = self._of(desired.config_hash).written_at
        waited = 0.0 if written_at is None else self.monotonic() - written_at
        if waited >= self.options.injector_wait:
            return machine.InjectorAnswer(
                True,
                f"could not confirm the injector's version by dry-run ({cause}); restarted "
                f"after waiting {self.options.injector_wait:.0f}s",
                cause,
            )
        return machine.InjectorAnswer(
            False,
            f"cannot confirm the injector's version by dry-run ({cause}); waiting "
            f"{self.options.injector_wait - waited:.0f}s more before restarting",
            cause,
        )

    async def _candidate_pod(self, workload: rollout.Workload) -> Json | None:
        """A stale workload's pod as its owner would create it now (None if it is gone)."""
        resource = PODS if workload.kind == "Pod" else WORKLOAD_RESOURCES[workload.kind]
        source = await self.writer.get(resource, workload.namespace, workload.name)
        return None if source is None else rollout.candidate_pod(workload, source)
