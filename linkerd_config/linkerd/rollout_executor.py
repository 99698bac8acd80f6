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

from linkerd_config.kube.client import ApiError
from linkerd_config.kube.events import EventRecorder
from linkerd_config.kube.labels import EVERYTHING, LabelSelector
from linkerd_config.kube.metrics import ComponentMetrics
from linkerd_config.kube.resource import (
    DAEMONSETS,
    DEPLOYMENTS,
    PODS,
    REPLICASETS,
    STATEFULSETS,
    ApiResource,
    Json,
    rfc3339,
)
from linkerd_config.kube.store import Store
from linkerd_config.kube.writer import Writer
from linkerd_config.linkerd import canary, rollback, rollout, workload_health
from linkerd_config.linkerd.linkerdconfig_resource import RolloutSpec
from linkerd_config.linkerd.reconcile import Desired

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

UP_TO_DATE = "UpToDate"
HALTED = "RolloutHalted"
ROLLING_BACK = rollback.ROLLING_BACK
ROLLED_BACK = rollback.ROLLED_BACK
ROLLBACK_STUCK = "RollbackNotHealthy"
"""The reason while a rollback's workloads are past their deadline on the old configuration."""
HEALTH_RECHECK = 5.0
"""While restarted workloads come back, look again at least this often (their informers
wake the reconcile on every change; this bounds the wait for a deadline to pass)."""

RESTART_CONCURRENCY = 10
"""Restarts of one pass in flight at once: a batch of 50 takes about five request times, not
fifty, so a pass lasts what ``restart_interval`` says and little more."""


@dataclass(frozen=True)
class _Restart:
    """One workload's restart in a pass: done, or refused (with the API server's reason)."""

    done: bool = False
    refused: str = ""


@dataclass(frozen=True)
class _InjectorAnswer:
    """What a question to the injector found: whether it injects the configuration, what
    status says, and, when it was not asked, why (the fallback wait applies), or, when it
    answered that restarts must wait without end, the Warning's reason for that."""

    injects: bool
    why: str
    cause: str = ""
    held: str = ""


INJECTOR_NOT_INJECTING = "InjectorNotInjecting"
NEW_PODS_REFUSED = "NewPodsRefused"

RESUME_HINT = (
    "Fix the workloads, then change the LinkerdConfig's spec (a new attempt) or annotate it "
    f"{workload_health.RESUME_ANNOTATION}=<anything new> (resume, the failed ones forgiven)"
)


def _waiting_message(waiting: tuple[tuple[str, str], ...], version: str) -> str:
    shown = [f"{w}: {why}" for w, why in waiting]
    return (
        f"{len(waiting)} restarted workload(s) not healthy on proxy {version} yet, the next "
        f"pass waits for them: {_listed(shown, 5)}"
    )


def _skipped_message(skipped: list[tuple[str, str]]) -> str:
    if not skipped:
        return ""
    shown = [f"{w}: {why}" for w, why in skipped]
    return f"Skipped, not restarted: {_listed(shown, 5)}."


def _failures(failed: Iterable[object]) -> str:
    """Failed workloads and why, as messages list them: a few, each cut short, the rest
    counted (a condition's message is at most 32768 characters, and a pass may fail
    thousands of workloads at once, each with the API server's reason)."""
    items = [workload_health.cut(str(f), 1024) for f in failed]
    shown = "; ".join(items[:5])
    return shown if len(items) <= 5 else f"{shown}; and {len(items) - 5} more"


def _listed(items: list[str], limit: int = 10) -> str:
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown} and {len(items) - limit} more"


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
    halt: Json | None = None
    """The halt this process decided, until its status write is read back (reconciles in
    between must neither report it again nor restart anything)."""
    halt_read: object = None
    """The LinkerdConfig's resourceVersion ``halt`` was decided on: once the cache holds any
    other, status is the record (our write read back, or a later one: another leader's, while
    this process did not lead)."""
    canary_passed: Json | None = None
    """The canary's record once this process saw it pass (spec.rollout.canary): until status
    says so, the rest's restarts must not look like a larger canary."""
    canary_written: Json | None = None
    """The canary's record this process last decided to write (its clock, ``healthySince``),
    until status holds it: a pass on the cache from before that write must read the clock it
    started, not start it again (two clocks milliseconds apart: a later one overwrote the
    first, and the canary's stable time restarted)."""
    canary_written_read: object = None
    """The LinkerdConfig's resourceVersion ``canary_written`` was decided on (as for a halt)."""
    rollback_stuck_said: bool = False
    """The Warning that the rollback's own workloads missed their deadline was recorded."""
    restores_tried: dict[str, float] = field(default_factory=dict)
    """Monotonic time this process last tried to bring each workload back from this failed
    configuration (a rollback): tried again no sooner than ``HEALTH_RECHECK`` later, however
    many events wake the reconcile meanwhile (a refusal is not sent, said and counted on
    each of them)."""


@dataclass(frozen=True)
class RolloutOptions:
    max_restarts_per_pass: int = 10
    """At most this many workloads restarted per pass, so a cluster is not restarted at once."""
    restart_interval: float = 5.0
    """Seconds between passes while workloads are outdated."""
    injector_wait: float = 60.0
    """When the injector's version cannot be confirmed by dry-run, wait this long after
    writing the config before restarting (the original project's fixed sleep, as a fallback)."""
    probe_namespace: str = ""
    """Where the dry-run pods that ask the injector are created (a namespace annotated for
    injection, where the controller may create pods); empty: each workload's own."""
    restart_namespaces: LabelSelector = EVERYTHING
    """Restart only in the namespaces this selects (``--restart-namespace-selector``)."""


@dataclass(frozen=True)
class RolloutOutcome:
    """What one pass found and did, for the status conditions and the requeue."""

    outdated: int
    restarted_total: int
    evicted: int
    reason: str
    message: str
    requeue_after: float | None = None
    status: Json = field(default_factory=dict)
    """Status fields of the rollout's own state (its halt), to write with the rest."""

    @property
    def up_to_date(self) -> bool:
        return self.reason == UP_TO_DATE


def evictions_reported(status: Json, config_hash: str) -> int:
    """The bare pods a LinkerdConfig's status already reports evicted for ``config_hash``.

    An evicted bare pod leaves no record on any workload, so a new leader continues from this
    count; a count for an older configuration does not carry over to a new one.
    """
    if status.get("configHash") != config_hash:
        return 0
    count = status.get("evictedPods")
    return count if isinstance(count, int) and count >= 0 else 0


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
        the alert on it firing)."""
        self.metrics.halted.remove(name)
        self.metrics.rolled_back.remove(name)

    def _of(self, config_hash: str) -> _ConfigProgress:
        return self._progress.setdefault(config_hash, _ConfigProgress())

    def found(self, config_hash: str) -> None:
        """The configuration is in the ConfigMap now: the injector's fallback wait starts."""
        progress = self._of(config_hash)
        if progress.written_at is None:
            progress.written_at = self.monotonic()

    def _plan(self, desired: Desired) -> rollout.RolloutPlan:
        """The stale workloads, decided again only when a cache it reads changed."""

        def replicaset(ns: str, name: str) -> Json | None:
            return self.replicasets.get(f"{ns}/{name}")

        proxy = desired.proxy.restarting_in(self.options.restart_namespaces)
        plan_key = (
            self.pods.revision,
            self.namespaces.revision,
            self.replicasets.revision,
            proxy,
        )
        if self._plans is None or self._plans[0] != plan_key:
            namespaces = {n["metadata"]["name"]: n for n in self.namespaces.list()}
            plan = rollout.plan_rollout(self.pods.list(), namespaces, proxy, replicaset)
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
            if rollback.same_halt(decided, halt.halted) and rollback.phase_rank(
                decided
            ) > rollback.phase_rank(halt.halted):
                return replace(halt, halted=decided)  # a later phase of ours, not read yet
            # Read back, or another halt since (another leader's): status is the record now.
            progress.halt = None
            return halt
        if (config.get("metadata") or {}).get("resourceVersion") != progress.halt_read:
            progress.halt = None  # status moved on without it (another leader's writes)
            return halt
        if halt.halted is None:
            mine = workload_health.halt_state(
                {**config, "status": {workload_health.HALT_FIELD: decided}}, config_hash
            )
            if mine.halted is None:  # resumed, or a new attempt, since: forget it
                self._of(config_hash).halt = None
                return halt
            return mine
        return halt

    def _decided(self, config: Json, config_hash: str, record: Json) -> None:
        """Remember a halt (or rollback) record decided on ``config`` until status holds it."""
        progress = self._of(config_hash)
        progress.halt = record
        progress.halt_read = (config.get("metadata") or {}).get("resourceVersion")

    async def roll(
        self, config: Json, desired: Desired, effective: Desired | None = None
    ) -> RolloutOutcome:
        """One pass; its outcome carries the status of the rollout's halt (kept, set, or
        cleared by a resume or a new attempt) whatever the pass found. ``effective``: what
        the ConfigMap holds instead of ``desired`` while a rollback is in force."""
        halt = self.halt_state(config, desired.config_hash)
        outcome = await self._roll(config, desired, halt, effective or desired)
        return replace(outcome, status={**halt.status, **outcome.status})

    async def _roll(
        self,
        config: Json,
        desired: Desired,
        halt: workload_health.HaltState,
        effective: Desired,
    ) -> RolloutOutcome:
        config_hash, version = desired.config_hash, desired.proxy.version
        if rollback.section(halt.halted) is not None and halt.halted is not None:
            return await self._roll_back(config, desired, effective, halt.halted)
        plan = self._plan(desired)
        recorded = self._recorded(config_hash)
        evicted, evicted_at = self._evictions(config, config_hash)
        spec = RolloutSpec.of(config)
        batch = spec.batch_size(self.options.max_restarts_per_pass)
        interval = spec.interval(self.options.restart_interval)
        counts = (len(plan.workloads), len(recorded) + evicted, evicted)
        name = str(config["metadata"]["name"])
        self.metrics.rolled_back.labels(name).set(0)
        if halt.halted is not None:
            self.metrics.halted.labels(name).set(1)
            failed = _failures(halt.halted.get("failed") or ())
            return RolloutOutcome(
                *counts, HALTED, f"rollout of proxy {version} halted: {failed}. {RESUME_HINT}",
                status={workload_health.HALT_FIELD: halt.halted},
            )  # fmt: skip
        self.metrics.halted.labels(name).set(0)
        restarted = await self._of_this_revision(self._restarted(config_hash, plan))
        checked = workload_health.gate(
            (standing for standing, _ in restarted.values()),
            self.wall(),
            spec.progress_deadline,
            halt.forgiven,
        )
        if checked.failed:
            owners = [(restarted[w][1], why) for w, why in checked.failed]
            back_to, why_not = rollback.target(config, config_hash) if spec.rollback else (None, "")
            going_back = (back_to, [w for _, w in restarted.values()], why_not)
            return self._halt(
                config, config_hash, version, checked.failed, owners, counts,
                going_back=going_back if spec.rollback else None,
            )  # fmt: skip
        if not plan.workloads and checked.open:
            completed = rollback.completed_record(config, config_hash, rfc3339(self.wall()))
            return RolloutOutcome(
                *counts, UP_TO_DATE, f"every opted-in pod runs proxy {version}",
                status={} if completed is None else {rollback.LAST_COMPLETED_FIELD: completed},
            )  # fmt: skip
        if checked.waiting:  # a canary not healthy: its clock starts again
            return self._with_canary(
                self._canary(config, config_hash, spec, restarted, halt.forgiven, None)[1],
                RolloutOutcome(
                    *counts, "RollingOut", _waiting_message(checked.waiting, version),
                    requeue_after=min(HEALTH_RECHECK, interval or HEALTH_RECHECK),
                ),
            )  # fmt: skip
        if spec.paused:
            return RolloutOutcome(
                len(plan.workloads), len(recorded) + evicted, evicted, "Paused",
                f"rollout paused: {len(plan.workloads)} workload(s) ({plan.stale_pods} pod(s)) "
                f"would be restarted for proxy {version}; set spec.rollout.paused to false "
                "to resume",
            )  # fmt: skip
        ready, skipped = self._preflight(
            rollout.pending(plan.workloads, self._record, config_hash), rollback.settled(config)
        )
        # spec.rollout.canary: until it passes, only the canary is restarted (canary.decide).
        todo, first = self._canary(config, config_hash, spec, restarted, halt.forgiven, ready)
        progress = self._of(config_hash)
        finished = progress.pass_finished
        pace = rollout.pace(
            max(
                [
                    *recorded,
                    *([evicted_at] if evicted_at else []),
                    *([finished] if finished else []),
                ],
                default=None,
            ),
            self.wall(),
            batch,
            interval,
        )
        if not todo or not pace.allowed:
            return self._with_canary(first, self._rolling(
                plan, len(recorded) + evicted, evicted, version, pace.wait or interval,
                _skipped_message(skipped),
                status=self._completed_but_skipped(config, config_hash, ready, skipped),
            ))  # fmt: skip
        asked = await self._ask_injector(config, desired, todo, progress)
        if isinstance(asked, float):
            why = progress.waiting_why
            return RolloutOutcome(*counts, "WaitingForInjector", why, requeue_after=asked)
        why = asked
        gate = asyncio.Semaphore(RESTART_CONCURRENCY)
        batch_now = todo[: pace.allowed]

        async def restart(workload: rollout.Workload) -> _Restart:
            async with gate:
                return await self._restart_reported(config, workload, config_hash, version)

        done = await asyncio.gather(*(restart(w) for w in batch_now))
        # A record's time is stamped before its PATCH is sent; the batch's last PATCH lands
        # a little later. The interval runs from when the pass finished.
        progress.pass_finished = self.wall()
        self._report_pass(config, version, batch_now, done)
        owners_restarted = sum(
            1 for r, w in zip(done, batch_now, strict=True) if r.done and w.kind != "Pod"
        )
        refused = [f"{w}: {r.refused}" for r, w in zip(done, batch_now, strict=True) if r.refused]
        if refused:
            why = (
                f"{len(refused)} restart(s) refused, retried next pass: {'; '.join(refused)}. {why}"
            )
        evicted, _ = self._evictions(config, config_hash)
        total = len(recorded) + owners_restarted + evicted
        why = f"{why} {_skipped_message(skipped)}".strip()
        return self._with_canary(first, self._rolling(plan, total, evicted, version, interval, why))

    async def _roll_back(
        self, config: Json, failed: Desired, effective: Desired, halt: Json
    ) -> RolloutOutcome:
        """One step of a rollback. The ConfigMap already holds ``effective`` (the last
        completed configuration: the controller wrote it); once the injector injects its
        proxy again, bring the workloads the failed rollout restarted back onto it, then wait
        for them to be healthy, health-gated and with the same deadline as a rollout."""
        name = str(config["metadata"]["name"])
        section = rollback.section(halt) or {}
        self.metrics.halted.labels(name).set(0)
        self.metrics.rolled_back.labels(name).set(1)
        failed_list = _failures(halt.get("failed") or ())
        head = f"rollout of proxy {failed.proxy.version} failed ({failed_list})"
        plan = self._plan(effective)
        counts = (len(plan.workloads), 0, 0)
        kept = {workload_health.HALT_FIELD: halt}
        if effective.config_hash == failed.config_hash:
            self.metrics.rolled_back.labels(name).set(0)
            self.metrics.halted.labels(name).set(1)
            return RolloutOutcome(
                *counts, HALTED, f"{head}; cannot roll back to configuration "
                f"{section.get('toHash')}: status no longer records it as the last completed "
                "(lastCompleted), or its spec no longer validates or renders onto the Linkerd "
                f"installed now (the controller's log says which), so the rollout is halted "
                f"instead. {RESUME_HINT}",
                status=kept,
            )  # fmt: skip
        back_to = f"configuration {effective.config_hash} (proxy {effective.proxy.version})"
        if section.get("phase") == ROLLED_BACK:
            return RolloutOutcome(
                *counts, ROLLED_BACK, f"{head}; rolled back to {back_to}. {RESUME_HINT}",
                status=kept,
            )  # fmt: skip
        listed = [w for w in map(rollback.parse_workload, section.get("workloads") or ()) if w]
        # Every owner still recording the failed configuration goes back, listed or not (the
        # list is bounded; the records are the truth); the listed ones are health-gated.
        pending = sorted(w for _, w in self._restarted(failed.config_hash, plan).values())
        workloads = sorted({*listed, *pending})
        if pending:
            progress = self._of(effective.config_hash)
            asked = await self._ask_injector(config, effective, pending, progress)
            if isinstance(asked, float):
                return RolloutOutcome(
                    *counts, ROLLING_BACK, f"{head}; rolling back to {back_to}: "
                    f"{progress.waiting_why}", requeue_after=asked, status=kept,
                )  # fmt: skip
            tried, now = self._of(failed.config_hash).restores_tried, self.monotonic()
            due = [w for w in pending if now - tried.get(str(w), float("-inf")) >= HEALTH_RECHECK]
            if not due:
                return RolloutOutcome(
                    *counts, ROLLING_BACK, f"{head}; rolling back to {back_to}: "
                    f"{len(pending)} workload(s) not back onto it yet, tried again shortly",
                    requeue_after=min(tried[str(w)] for w in pending) + HEALTH_RECHECK - now,
                    status=kept,
                )  # fmt: skip
            tried.update((str(w), now) for w in due)
            limit = asyncio.Semaphore(RESTART_CONCURRENCY)

            async def restore(workload: rollout.Workload) -> bool:
                async with limit:
                    return await self._restore_reported(
                        config, workload, failed, effective, str(section.get("toHash") or "")
                    )

            done = await asyncio.gather(*(restore(w) for w in due))
            return RolloutOutcome(
                *counts, ROLLING_BACK, f"{head}; rolling back to {back_to}: brought "
                f"{sum(done)} of {len(pending)} workload(s) back onto it",
                requeue_after=HEALTH_RECHECK, status=kept,
            )  # fmt: skip
        standing = await self._brought_back(workloads, plan, rollback.started_at(halt))
        deadline = RolloutSpec.of(config).progress_deadline
        checked = workload_health.gate(standing, self.wall(), deadline)
        if checked.failed:
            # Past the deadline on the old configuration too: the rollback stays in force
            # (it may still come back), said once as a Warning and in the reason.
            stuck = [f"{w}: {why}" for w, why in checked.failed]
            progress = self._of(failed.config_hash)
            if not progress.rollback_stuck_said:
                progress.rollback_stuck_said = True
                self.recorder.record(
                    config, "Warning", ROLLBACK_STUCK,
                    f"rolling back to {back_to} is not healthy either: {_listed(stuck, 5)}",
                )  # fmt: skip
            return RolloutOutcome(
                *counts, ROLLBACK_STUCK, f"{head}; rolling back to {back_to}, which is not "
                f"healthy either: {_listed(stuck, 5)}",
                requeue_after=HEALTH_RECHECK, status=kept,
            )  # fmt: skip
        if checked.waiting:
            behind = [f"{w}: {why}" for w, why in checked.waiting]
            return RolloutOutcome(
                *counts, ROLLING_BACK, f"{head}; rolling back to {back_to}: "
                f"{len(behind)} workload(s) not healthy on it yet: {_listed(behind, 5)}",
                requeue_after=HEALTH_RECHECK, status=kept,
            )  # fmt: skip
        record = rollback.finished(halt)
        self._decided(config, failed.config_hash, record)
        log.warning("rollout rolled back", linkerdconfig=name, to=effective.config_hash)
        self.recorder.record(
            config,
            "Warning",
            ROLLED_BACK,
            f"{head}; rolled back to {back_to}: {len(workloads)} workload(s) back on it and "
            "healthy",
        )
        return RolloutOutcome(
            *counts, ROLLED_BACK, f"{head}; rolled back to {back_to}. {RESUME_HINT}",
            status={workload_health.HALT_FIELD: record},
        )  # fmt: skip

    async def _restore_reported(
        self,
        config: Json,
        workload: rollout.Workload,
        failed: Desired,
        effective: Desired,
        to_hash: str = "",
    ) -> bool:
        """``_restore``, counted, logged and recorded as an Event on the workload; a refusal
        is reported with the API server's reason and retried on the next reconcile."""
        involved = self._involved(workload)
        name = config["metadata"]["name"]
        try:
            how = await self._restore(
                config, workload, failed.config_hash, effective.config_hash, to_hash
            )
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
                        rollback.restore_patch(live, template),
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
    ) -> str | float:
        """Whether the injector injects the desired proxy now: what status says of it when it
        does (or when waiting longer is pointless), else the seconds to wait before asking
        again (``progress.waiting_why`` says why)."""
        since = self.monotonic() - progress.probed_at
        if since < PROBE_SPACING and not progress.injector_confirmed:
            # Told "not yet" moments ago (other events woke this reconcile): not again yet.
            # A "yes" is never reused: every pass that restarts asks first.
            return PROBE_SPACING - since
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
        return answer.why if answer.injects else 2.0

    def _restarted(
        self, config_hash: str, plan: rollout.RolloutPlan
    ) -> dict[str, tuple[workload_health.Restarted, rollout.Workload]]:
        """The owners restarted for ``config_hash``, by name: how each stands now, and which
        it is (for its Events)."""
        found: dict[str, tuple[workload_health.Restarted, rollout.Workload]] = {}
        for kind, store in self.workloads.items():
            for obj in store.list():
                if not rollout.already_restarted(obj, config_hash):
                    continue
                meta = obj["metadata"]
                workload = rollout.Workload(kind, meta["namespace"], meta["name"])
                at = rollout.restart_time(obj)
                verdict = workload_health.restart_verdict(
                    kind, obj, plan.reasons.get(workload) or {}
                )
                # A record without a readable time starts its deadline now.
                name = str(workload)
                standing = workload_health.Restarted(name, at or self.wall(), verdict)
                found[name] = (standing, workload)
        return found

    async def _brought_back(
        self, workloads: list[rollout.Workload], plan: rollout.RolloutPlan, started: float | None
    ) -> list[workload_health.Restarted]:
        """How each workload a rollback brings back stands (its deadline from the rollback's
        start)."""
        at = started or self.wall()
        back: dict[str, tuple[workload_health.Restarted, rollout.Workload]] = {}
        for w in workloads:
            obj = self._record(w)
            if obj is not None:
                verdict = workload_health.restart_verdict(w.kind, obj, plan.reasons.get(w) or {})
                back[str(w)] = (workload_health.Restarted(str(w), at, verdict), w)
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

    def _canary(
        self,
        config: Json,
        config_hash: str,
        spec: RolloutSpec,
        restarted: Mapping[str, tuple[workload_health.Restarted, rollout.Workload]],
        forgiven: frozenset[str],
        todo: list[rollout.Workload] | None,
    ) -> tuple[list[rollout.Workload], canary.Canary]:
        """The canary's part in this pass (``canary.decide`` over the caches): which of
        ``todo`` it lets the pass restart, and what it says. Its passing is said once, as an
        Event on the LinkerdConfig."""

        def labels(workload: rollout.Workload) -> canary.Labels | None:
            obj = self._record(workload)
            if obj is None:
                return None
            namespace = self.namespaces.get(workload.namespace) or {}
            return (
                (obj.get("metadata") or {}).get("labels") or {},
                (namespace.get("metadata") or {}).get("labels") or {},
            )

        progress = self._of(config_hash)
        version = (config.get("metadata") or {}).get("resourceVersion")
        stored = canary.stored(config, config_hash)
        if progress.canary_written is not None and progress.canary_written_read == version:
            stored = progress.canary_written  # our write, not read back yet
        record = canary.newest(stored, progress.canary_passed)
        standing = [s for s, _ in restarted.values()]
        found = canary.decide(
            spec.canary, config, config_hash, record, standing, forgiven, todo, labels, self.wall()
        )
        decided = found.status.get(canary.FIELD)
        if isinstance(decided, dict) and decided != stored:
            progress.canary_written, progress.canary_written_read = decided, version
        if found.passed_now and progress.canary_passed is None:
            progress.canary_passed = found.status[canary.FIELD]
            log.info("canary passed", linkerdconfig=config["metadata"]["name"], hash=config_hash)
            self.recorder.record(config, "Normal", "CanaryPassed", found.message)
        return list(found.restart), found

    def _with_canary(self, first: canary.Canary, outcome: RolloutOutcome) -> RolloutOutcome:
        """``outcome`` with the canary's part: what it says and keeps in status; while the
        rest wait for it, its reason, and a look again when it may have passed."""
        said = replace(
            outcome, message=outcome.message + first.note, status={**outcome.status, **first.status}
        )
        if not first.holds:
            return said
        unmatched = first.phase == canary.UNMATCHED
        return replace(
            said,
            reason=canary.UNMATCHED_REASON if unmatched else canary.HOLDING,
            requeue_after=min(
                outcome.requeue_after or HEALTH_RECHECK,
                first.requeue_after or HEALTH_RECHECK,
                HEALTH_RECHECK,
            ),
        )

    def _preflight(
        self, workloads: list[rollout.Workload], settled: str | None
    ) -> tuple[list[rollout.Workload], list[tuple[str, str]]]:
        """Of the workloads to restart, those that may be, and the others with why not:
        paused or already unhealthy, their trouble is not ours."""
        ready, skipped = workload_health.preflight_split(
            workloads, lambda w: w.kind, self._record, settled
        )
        return ready, [(str(w), why) for w, why in skipped]

    def _halt(
        self,
        config: Json,
        config_hash: str,
        version: str,
        failed: tuple[tuple[str, str], ...],
        workloads: list[tuple[rollout.Workload, str]],
        counts: tuple[int, int, int],
        going_back: tuple[Json | None, list[rollout.Workload], str] | None = None,
    ) -> RolloutOutcome:
        """Stop the rollout: recorded in status (any leader reads it back), one Warning on
        the LinkerdConfig and one on each failed workload, counted. With ``going_back`` (the
        configuration to return to, if any, the owners restarted for this one, and why it
        cannot go back if it cannot), the record starts a rollback instead."""
        name = str(config["metadata"]["name"])
        record = workload_health.halt_record(config, config_hash, failed, rfc3339(self.wall()))
        listed = _failures(f"{w}: {why}" for w, why in failed)
        reason, outcome, after = HALTED, "halted", ""
        back_to, restarted, why_not = going_back or (None, [], "")
        if back_to is not None:
            record = rollback.start(record, back_to, restarted)
            reason, outcome = ROLLING_BACK, "failed"
            after = f"; rolling back to configuration {back_to['configHash']}"
            self.metrics.rollbacks.inc()
            self.metrics.rolled_back.labels(name).set(1)
            # The injector must be seen injecting the old proxy again, not remembered to.
            self._progress.pop(str(back_to["configHash"]), None)
        else:
            if going_back is not None:
                after = f" (onFailure: Rollback, but {why_not}: halted instead)"
            self.metrics.halted.labels(name).set(1)
        log.warning(f"rollout {outcome}", linkerdconfig=name, failed=listed, then=after)
        self.metrics.halts.inc()
        self._decided(config, config_hash, record)
        self.recorder.record(
            config, "Warning", reason, f"rollout of proxy {version} {outcome}: {listed}{after}"
        )
        for workload, why in workloads:
            involved = self._involved(workload)
            if involved is not None:
                self.recorder.record(
                    involved,
                    "Warning",
                    reason,
                    f"did not come back healthy on proxy {version} (LinkerdConfig {name}): "
                    f"{why}; the rollout is {'halted' if reason == HALTED else 'rolled back'}",
                )
        return RolloutOutcome(
            *counts, reason, f"rollout of proxy {version} {outcome}: {listed}{after}. "
            f"{RESUME_HINT}", requeue_after=None if reason == HALTED else 0.5,
            status={workload_health.HALT_FIELD: record},
        )  # fmt: skip

    def _report_pass(
        self,
        config: Json,
        version: str,
        workloads: list[rollout.Workload],
        results: list[_Restart],
    ) -> None:
        """One Event on the LinkerdConfig per pass (each workload has its own): a rollout of
        hundreds of workloads stays readable, and within the recorder's budget."""
        restarted = [str(w) for w, r in zip(workloads, results, strict=True) if r.done]
        if restarted:
            self.recorder.record(
                config,
                "Normal",
                "WorkloadsRestarted",
                f"restarted {len(restarted)} workload(s) for proxy {version}: "
                + _listed(restarted),
            )
        refused = [
            f"{w}: {r.refused}" for w, r in zip(workloads, results, strict=True) if r.refused
        ]
        if refused:
            self.recorder.record(
                config,
                "Warning",
                "RestartFailed",
                f"{len(refused)} restart(s) refused, retried next pass: " + _listed(refused),
            )

    def _rolling(
        self,
        plan: rollout.RolloutPlan,
        total: int,
        evicted: int,
        version: str,
        wait: float,
        why: str,
        status: Json | None = None,
    ) -> RolloutOutcome:
        message = (
            f"{len(plan.workloads)} workload(s) ({plan.stale_pods} pod(s)) not yet on proxy "
            f"{version}; restarted {total} for this configuration. {why}"
        ).strip()
        return RolloutOutcome(
            len(plan.workloads),
            total,
            evicted,
            "RollingOut",
            message,
            requeue_after=wait if wait > 0 else self.options.restart_interval,
            status=status or {},
        )

    def _completed_but_skipped(
        self,
        config: Json,
        config_hash: str,
        ready: list[rollout.Workload],
        skipped: list[tuple[str, str]],
    ) -> Json:
        """``status.lastCompleted`` when everything this rollout could restart is done and
        healthy (the gate is open), only skipped workloads left: they do not count against
        the configuration, so it is what a later rollback may return to."""
        if ready or not skipped:
            return {}
        completed = rollback.completed_record(config, config_hash, rfc3339(self.wall()))
        return {} if completed is None else {rollback.LAST_COMPLETED_FIELD: completed}

    def _workload_objects(self) -> list[Json]:
        return [obj for store in self.workloads.values() for obj in store.list()]

    def _record(self, workload: rollout.Workload) -> Json | None:
        """An owner as its cache holds it (its restart record); None for a bare pod."""
        store = self.workloads.get(workload.kind)
        return None if store is None else store.get(f"{workload.namespace}/{workload.name}")

    def _evictions(self, config: Json, config_hash: str) -> tuple[int, float | None]:
        key = (config["metadata"]["name"], config_hash)
        if key not in self._evicted:
            self._evicted[key] = (evictions_reported(config.get("status") or {}, config_hash), 0.0)
        count, at = self._evicted[key]
        return count, (at or None)

    async def _restart_reported(
        self, config: Json, workload: rollout.Workload, config_hash: str, version: str
    ) -> _Restart:
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
            return _Restart(refused=reason)
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
        return _Restart(done=restarted)

    def _involved(self, workload: rollout.Workload) -> Json | None:
        """The workload as an Event's involved object (from the cache: its uid)."""
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
    ) -> _InjectorAnswer:
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
                    return _InjectorAnswer(
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
                return _InjectorAnswer(
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
                return _InjectorAnswer(True, "")
            return _InjectorAnswer(False, f"the proxy injector does not inject it yet: {mismatch}")
        written_at = self._of(desired.config_hash).written_at
        waited = 0.0 if written_at is None else self.monotonic() - written_at
        if waited >= self.options.injector_wait:
            return _InjectorAnswer(
                True,
                f"could not confirm the injector's version by dry-run ({cause}); restarted "
                f"after waiting {self.options.injector_wait:.0f}s",
                cause,
            )
        return _InjectorAnswer(
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
