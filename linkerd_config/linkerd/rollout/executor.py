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
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace

import orjson
import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from linkerd_config.kube import revisions, rollout_status
from linkerd_config.kube.client import ApiError
from linkerd_config.kube.concurrently import all_of
from linkerd_config.kube.events import EventRecorder
from linkerd_config.kube.expectations import Expectations
from linkerd_config.kube.metrics import ComponentMetrics
from linkerd_config.kube.resource import (
    DEPLOYMENTS,
    PODS,
    REPLICASETS,
    WORKLOAD_RESOURCES,
    Json,
)
from linkerd_config.kube.store import Store
from linkerd_config.kube.writer import Writer
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.configmap.desired import Desired
from linkerd_config.linkerd.rollout import actions, canary, health, machine, observe, rollback
from linkerd_config.linkerd.rollout.actions import RolloutOutcome
from linkerd_config.linkerd.rollout.phase import Phase
from linkerd_config.linkerd.rollout.policy import RolloutOptions, RolloutPolicy
from linkerd_config.linkerd.rollout.record import (
    CanaryRecord,
    Completed,
    Halt,
    Record,
    digest,
    fields,
)

log = structlog.get_logger(__name__)


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
        self.out_of_mesh = Gauge(
            "linkerd_config_workloads_out_of_mesh",
            "Workloads restarted for a LinkerdConfig's configuration whose new pods run without "
            "Linkerd's proxy (as this replica last saw them): the restart took them out of the "
            "mesh, and the rollout fails on them",
            ["linkerdconfig"],
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


def _question(namespace: str, pod: Json) -> str:
    """What decides the injector's (and admission's) answer for a workload's pod: the pod
    itself but its name, in its namespace. Two workloads' pods that agree in these are one
    object to every webhook and policy (the namespace's labels and annotations, the
    webhooks' namespace and object selectors, a policy's expressions), so one question
    answers for both; any other pair is asked apart."""
    metadata = {k: v for k, v in (pod.get("metadata") or {}).items() if k not in NAMES}
    return orjson.dumps(
        [namespace, metadata, pod.get("spec") or {}], option=orjson.OPT_SORT_KEYS
    ).decode()


NAMES = frozenset({"name", "generateName", "namespace"})


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
    probed_at: float = float("-inf")
    """Monotonic time of the last question to the injector ..."""
    last_answer: observe.InjectorAnswer | None = None
    """... and its answer, reused while it held the restarts (within ``PROBE_SPACING``)."""
    refused_since: dict[str, float] = field(default_factory=dict)
    """By workload: the wall time since which every answer about it has refused its new
    pods (absent: the last one about it did not). Refused for ``progressDeadline``, the
    attempt fails. A new leader starts these clocks again (a later failure, never an
    earlier one)."""
    pass_finished: float | None = None
    """Wall time this process's last pass finished sending its restarts."""
    probe_failure: str = ""
    """Why the injector could not be asked, or why its answer holds the restarts, last time
    (each said once in a Warning, not once per question)."""
    said_once: set[str] = field(default_factory=set)
    """The reasons of the Events said once for this configuration (the Warning that a
    rollback's own workloads missed their deadline)."""
    restores_tried: dict[str, float] = field(default_factory=dict)
    """Monotonic time this process last tried to bring each workload back from this failed
    configuration (a rollback): tried again no sooner than ``observe.HEALTH_RECHECK`` later, however
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
        # What this process wrote to a LinkerdConfig's status and has not read back, by
        # (name, uid, configuration): the halt (or rollback) it decided (reconciles in between
        # must neither report it again nor restart anything); the canary's record it last
        # decided to write (its clock, ``healthySince``: a pass on the cache from before that
        # write must read the clock it started, not start it again), while the object it was
        # decided on is still the one cached; and the canary's record once it passed (the
        # rest's restarts must not look like a larger canary).
        self._halts: Expectations[Halt] = Expectations(clock=monotonic)
        self._canaries: Expectations[CanaryRecord] = Expectations(clock=monotonic)
        self._passed: Expectations[CanaryRecord] = Expectations(clock=monotonic)
        # By (name, uid): the digest of the completed configuration this process recorded
        # (``vouch``), until the ConfigMap carries it (the next write puts it there).
        self._vouched: Expectations[str] = Expectations(clock=monotonic)
        # Invariant: one record per configuration hash this process has written, found or
        # rolled out (few: one per LinkerdConfig change).
        self._evicted: dict[tuple[str, str], tuple[int, float]] = {}
        # Invariant: (LinkerdConfig, hash) -> (bare pods evicted for it, by this process plus
        # what status reported when we took over; wall time of our last eviction).
        self._plans: tuple[tuple[object, ...], mesh.RolloutPlan] | None = None
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
        self.metrics.out_of_mesh.remove(name)
        for key in [key for key in self._evicted if key[0] == name]:
            del self._evicted[key]
        self._forget_expected(lambda key: isinstance(key, tuple) and key[0] == name)

    def new_term(self) -> None:
        """This process leads again after another may have: status is the record, and what
        this process remembers of its last term (evictions counted, a canary seen passing,
        a halt not read back, the injector's answers) may be older than another leader's
        writes since. It starts as a leader just started would."""
        self._progress.clear()
        self._evicted.clear()
        self._forget_expected()

    def _forget_expected(self, owner: Callable[[Hashable], bool] | None = None) -> None:
        for expected in (self._halts, self._canaries, self._passed, self._vouched):
            expected.forget(owner)

    def vouch(self, config: Json, completed: Completed) -> None:
        """This process records ``completed`` in ``config``'s status (a pass completed, an
        installation adopted): it is this LinkerdConfig's own, read back as such
        (``vouched``) until the managed ConfigMap carries its digest."""
        self._vouched.expect(self._key(config, "")[:2], digest(completed))

    def vouched(self, config: Json) -> str | None:
        """The digest of the completed configuration this process recorded for ``config``
        and the ConfigMap may not carry yet (``vouch``)."""
        return self._vouched.get(self._key(config, "")[:2])

    @staticmethod
    def _key(config: Json, config_hash: str) -> tuple[str, str, str]:
        """Whose expectation: one LinkerdConfig (one made again under its name is another),
        one configuration."""
        metadata = config.get("metadata") or {}
        return (str(metadata.get("name")), str(metadata.get("uid", "")), config_hash)

    def _of(self, config_hash: str) -> _ConfigProgress:
        return self._progress.setdefault(config_hash, _ConfigProgress())

    def found(self, config_hash: str, *, written: bool = False) -> None:
        """The configuration is in the ConfigMap now: the injector's fallback wait starts;
        again when ``written`` (the ConfigMap moved to it from another configuration: back
        after a rollback, or the spec back to it), as the injector must read it again."""
        progress = self._of(config_hash)
        if progress.written_at is None or written:
            progress.written_at = self.monotonic()

    def _plan(self, desired: Desired) -> mesh.RolloutPlan:
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
            plan = mesh.plan_rollout(
                mesh.cached_pods(self.pods.items()), namespaces, proxy, replicaset
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
            times = mesh.restart_times(self._workload_objects(), config_hash)
            self._records = (records_key, times)
        return self._records[1]

    def halt_state(self, config: Json, config_hash: str) -> health.HaltState:
        """The halt (or rollback) in force for ``config_hash``: status's, or the one this
        process decided and has not read back from status yet."""
        halt = health.halt_state(config, config_hash)
        key = self._key(config, config_hash)
        decided = self._halts.get(key)
        if decided is None:
            return halt
        if halt.halted is not None:
            if decided.same(halt.halted) and decided.rank > halt.halted.rank:
                return replace(halt, halted=decided)  # a later phase of ours, not read yet
            # Read back, or another halt since (another leader's): status is the record now.
            self._halts.seen(key)
            return halt
        # Status does not show it yet. A cache that moved on since is no proof that status
        # lost it: our own earlier write (conditions only) may arrive before the halt's, and
        # read as "no halt" the pass would restart, or write the failed configuration back
        # over a rollback's (issue 58: RollingOut for one pass after RolloutHalted; the
        # ConfigMap on the failed proxy for a moment). Kept until status holds it, the
        # attempt is resumed or changed, completed since (another leader's), or this process
        # leads anew (``new_term``).
        done_at, halted_at = rollback.completed_at(config, config_hash), decided.started_at
        if done_at is not None and halted_at is not None and done_at > halted_at:
            self._halts.seen(key)  # completed since: status moved on past it
            return halt
        mine = health.halt_state({**config, "status": fields(halt=decided)}, config_hash)
        if mine.halted is None:  # resumed, or a new attempt, since: forget it
            self._halts.seen(key)
            return halt
        return mine

    async def roll(
        self,
        config: Json,
        desired: Desired,
        effective: Desired | None = None,
        anchors: observe.AnchorHold | None = None,
        *,
        asked: str | None = None,
        back_to: tuple[Completed | None, str],
    ) -> RolloutOutcome:
        """One pass; its outcome carries the status of the rollout's halt (kept, set, or
        cleared by a resume or a new attempt) whatever the pass found. ``effective``: what
        the ConfigMap holds instead of ``desired`` while a rollback is in force (None, or
        ``desired`` itself: it cannot go back); ``anchors``: the trust-anchor guard's hold,
        when it holds a removal; ``asked``: the hash of the configuration the spec asks for,
        when ``desired`` is the bundle the guard holds on to instead; ``back_to``: where a
        failure of this attempt would roll back to, or why it could not (``rollback.target``,
        read by the reconcile: it judges the recorded spec, the rollout only decides). The
        halt (or rollback) is the attempt's, kept under ``asked`` (by default ``desired``'s
        hash) whichever of the two is rolled out: a hold lifting ends no halt."""
        attempt = asked or desired.config_hash
        halt = self.halt_state(config, attempt)
        outcome = await self._roll(config, desired, halt, effective, anchors, attempt, back_to)
        self._gauges(str(config["metadata"]["name"]), outcome.reason)
        return replace(outcome, parts={**halt.parts, **outcome.parts})

    async def _roll(
        self,
        config: Json,
        desired: Desired,
        halt: health.HaltState,
        effective: Desired | None,
        anchors: observe.AnchorHold | None,
        attempt: str,
        back_to: tuple[Completed | None, str],
    ) -> RolloutOutcome:
        """Observe, decide (``machine.step``), act."""
        policy = RolloutPolicy.of(config, self.options)
        asked_for = desired
        if halt.halted is not None and halt.halted.rollback is not None:
            gone_to = _gone_back_to(effective, halt.halted)
            observed = await self._rollback_observed(config, desired, gone_to, halt.halted)
            asked_for = gone_to or desired
        else:
            observed = await self._observed(config, desired, halt, back_to)
        observed = replace(observed, anchors=anchors, asked_hash=attempt)
        decided = machine.step(observed, halt, policy)
        if (ask := decided.ask) is not None:
            progress = self._of(asked_for.config_hash)
            answer = await self._ask_injector(config, asked_for, list(ask.workloads), progress)
            refused_since = dict(progress.refused_since)
            observed = replace(observed, injector=answer, refused_since=refused_since)
            decided = machine.step(observed, halt, policy)
        self._act(config, desired.config_hash, decided.actions)
        gate = asyncio.Semaphore(RESTART_CONCURRENCY)
        for undo in (a for a in decided.actions if isinstance(a, actions.Undo)):
            await self._undo_halted(config, undo)
        if (restart := decided.restart) is not None:
            config_hash, version = desired.config_hash, desired.proxy.version
            again = observed.completed_at

            async def one(workload: mesh.Workload) -> actions.RestartResult:
                async with gate:
                    return await self._restart_reported(
                        config, workload, config_hash, version, again
                    )

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

            async def bring(workload: mesh.Workload) -> bool:
                async with gate:
                    return await self._restore_reported(
                        config, workload, failed_hash, onto, to_hash
                    )

            brought = await all_of(*(bring(w) for w in restore.workloads))
            decided = machine.after_restores(decided, back, sum(brought))
        return decided.outcome

    async def _observed(
        self,
        config: Json,
        desired: Desired,
        halt: health.HaltState,
        back_to: tuple[Completed | None, str],
    ) -> observe.Observed:
        """What a pass of ``desired``'s rollout reads: the caches, and the ReplicaSets of a
        Deployment that shows ``ReplicaFailure`` (live); ``back_to``, the reconcile's."""
        config_hash = desired.config_hash
        plan = self._plan(desired)
        evicted, evicted_at = self._evictions(config, config_hash)
        restarted = {}
        if halt.halted is None:
            restarted = await self._of_this_revision(
                self._restarted(config_hash, plan), plan.unmeshed
            )
            out = sum(s.verdict.why.startswith(health.OUT_OF_MESH) for s, _ in restarted.values())
            self.metrics.out_of_mesh.labels(config["metadata"]["name"]).set(out)

        seen = observe.observed(
            self, config, config_hash, desired.proxy.version, self.wall(), plan,
            restarted=restarted, restart_times=self._recorded(config_hash), evicted=evicted,
            last_eviction=evicted_at, pass_finished=self._of(config_hash).pass_finished,
            canary_record=self._canary_record(config, config_hash), back_to=back_to,
        )  # fmt: skip
        if halt.halted is None:
            return seen
        revisions = await self._halted_revisions(halt.halted, plan)
        return replace(seen, halted_revisions=revisions)

    async def _halted_revisions(
        self, halted: Halt, plan: mesh.RolloutPlan
    ) -> dict[mesh.Workload, bool]:
        """``Observed.halted_revisions``: of the halt's failed Deployments, and of those with
        pods without the proxy (``plan.unmeshed``: one restarted in the halting pass may lose
        its proxy only after the halt), those the cache shows still recording our restart for
        the configuration rolled out, each with whether going back creates pods. Their
        ReplicaSets are read live, a namespace at a time (no cache keeps them); none is read
        once every one is back (the steady state of a halt)."""
        found: dict[mesh.Workload, bool] = {}
        listed: dict[str, list[Json]] = {}
        unmeshed = (w for w in plan.unmeshed if w.kind == "Deployment")
        for workload in dict.fromkeys((*machine.undo_targets(halted), *unmeshed)):
            cached = self.record(workload)
            if cached is None or not mesh.already_restarted(cached, halted.rolled):
                continue
            if workload.namespace not in listed:
                listed[workload.namespace] = await self.writer.list(REPLICASETS, workload.namespace)
            siblings = listed[workload.namespace]
            found[workload] = rollback.undo_makes_pods(cached, siblings, halted.rolled)
        return found

    async def _rollback_observed(
        self, config: Json, failed: Desired, effective: Desired | None, halt: Halt
    ) -> observe.Observed:
        """What a pass of a rollback reads (``observe.rollback_pass``). The ConfigMap
        already holds ``effective`` (the last completed configuration: the controller wrote
        it); None when it cannot go back. The workloads to bring back are those restarted
        for the configuration rolled out when it failed (``Halt.rolled``: the bundle the
        trust-anchor guard held on to, or ``failed`` itself)."""
        failed_hash = halt.rolled
        plan = self._plan(effective or failed)
        pending = [w for _, w in self._restarted(failed_hash, plan).values()]
        tried = self._of(failed_hash).restores_tried
        to_hash, to_version = rollback.returned_to(halt, failed, effective)
        back = observe.rollback_pass(halt, pending, to_hash, to_version, tried, self.monotonic())
        if observe.gated(back, failed_hash, halt):
            standing = await self._brought_back(list(back.workloads), plan, halt.started_at)
            back = replace(back, brought_back=tuple(standing))
        return observe.rollback_observed(
            config, halt, failed.proxy.version, self.wall(), plan, back
        )

    def _act(self, config: Json, config_hash: str, decided: Iterable[actions.Action]) -> None:
        """What a pass decided, done: Events, a halt (or the start or end of a rollback)
        counted, logged and remembered until status holds it, the canary's record remembered.
        Restarts, restores and questions to the injector are the pass's own (``_roll``)."""
        name = str(config["metadata"]["name"])
        progress = self._of(config_hash)
        for action in decided:
            match action:
                case actions.Emit(type_, reason, message, involved, once):
                    if once:
                        if reason in progress.said_once:
                            continue
                        progress.said_once.add(reason)
                    target = config if involved is None else self._involved(involved)
                    if target is not None:
                        self.recorder.record(target, type_, reason, message)
                case actions.Halted(record, failed, back_to):
                    self.metrics.halts.inc()
                    if back_to is not None:
                        self.metrics.rollbacks.inc()
                        # The injector must be seen injecting the old proxy again.
                        self._progress.pop(back_to, None)
                        self._forget_expected(self._key(config, back_to).__eq__)
                    outcome = "halted" if back_to is None else "failed"
                    then = "" if back_to is None else f"; rolling back to configuration {back_to}"
                    log.warning(f"rollout {outcome}", linkerdconfig=name, failed=failed,
                                then=then)  # fmt: skip
                    self._halts.expect(self._key(config, record.config_hash), record)
                case actions.RolledBack(record, to_hash):
                    log.warning("rollout rolled back", linkerdconfig=name, to=to_hash)
                    self._halts.expect(self._key(config, record.config_hash), record)
                case actions.CanaryKept(record, passed_now):
                    key = self._key(config, config_hash)
                    if record != Record.of(config).canary_of(config_hash):
                        version = config["metadata"].get("resourceVersion")
                        self._canaries.expect(key, record, version)
                    if passed_now and self._passed.get(key) is None:
                        self._passed.expect(key, record)
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
        workload: mesh.Workload,
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

    async def _undo_halted(self, config: Json, undo: actions.Undo) -> None:
        """``Undo``: each Deployment the cache shows still recording our restart for the
        halted configuration goes back to its previous ReplicaSet's template; a refusal is
        said and tried again on the next pass."""
        name = config["metadata"]["name"]
        for workload in undo.workloads:
            cached = self.record(workload)
            if cached is None or not mesh.already_restarted(cached, undo.config_hash):
                continue
            involved = self._involved(workload)
            try:
                live = await self.writer.get(DEPLOYMENTS, workload.namespace, workload.name)
                if live is None or not mesh.already_restarted(live, undo.config_hash):
                    continue
                how = await self._undo(workload, live, undo.config_hash)
            except ApiError as exc:
                reason = f"{exc.status} {exc.reason or 'Error'}: {exc.message}"
                log.warning("undo of a halted revision failed; will retry",
                            workload=str(workload), error=reason)  # fmt: skip
                continue
            if how and involved is not None:
                self.recorder.record(
                    involved,
                    "Warning",
                    "HaltedRevisionUndone",
                    f"the revision its restart for configuration {undo.config_hash} made "
                    f"(LinkerdConfig {name}, halted) makes no more pods: {how}",
                )

    async def _undo(
        self,
        workload: mesh.Workload,
        live: Json,
        failed_hash: str,
        to_hashes: tuple[str, ...] = (),
    ) -> str:
        """A Deployment (``live``, as just read) restarted for ``failed_hash`` back to its
        previous ReplicaSet's pod template (``kubectl rollout undo``) when only our restart
        changed it since and (with ``to_hashes``) that template is one of theirs or no
        restart's (``rollback.restores_to``); how it was done, or "" when it was not (changed
        since, nothing to go back to)."""
        siblings = await self.writer.list(REPLICASETS, workload.namespace)
        template = rollback.previous_template(live, siblings, failed_hash)
        # Edited since our restart: left, so the edit stands. Another configuration's (a
        # rollback's target given): left, so its proxy does not come back.
        if (
            template is None
            or not rollback.only_restarted_since(live, template)
            or (to_hashes and not rollback.restores_to(template, to_hashes))
        ):
            return ""
        try:
            await self.writer.merge_patch(
                DEPLOYMENTS,
                workload.namespace,
                workload.name,
                mesh.restore_patch(live, template, self.wall()),
            )
        except ApiError as exc:
            if exc.not_found or exc.conflict:
                return ""
            raise
        log.info("workload rolled back", workload=str(workload), to="previous template")
        return "its previous ReplicaSet's pod template restored"

    async def _restore(
        self,
        config: Json,
        workload: mesh.Workload,
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
            if live is None or not mesh.already_restarted(live, failed_hash):
                return ""
            # Edited since our restart, or its previous template another configuration's:
            # restarted instead, so the edit stands and that proxy does not come back.
            how = await self._undo(workload, live, failed_hash, (old_hash, to_hash))
            if how:
                return how
        if await self._restart(config, workload, old_hash):
            return "restarted"
        return ""

    async def _ask_injector(
        self,
        config: Json,
        desired: Desired,
        todo: list[mesh.Workload],
        progress: _ConfigProgress,
    ) -> observe.InjectorAnswer:
        """Whether the injector injects the desired proxy now into each of ``todo``, and what
        status says of it (when it does not: how soon to ask again). Told "not yet" moments
        ago (other events woke this reconcile), it is not asked again yet; a "yes" is never
        reused: every pass that restarts asks first."""
        since = self.monotonic() - progress.probed_at
        last = progress.last_answer
        if since < PROBE_SPACING and last is not None and not last.injects:
            return replace(last, retry_after=PROBE_SPACING - since)
        progress.probed_at = self.monotonic()
        answer = await self._injector_ready(desired, todo)
        progress.last_answer = answer
        refused = {str(w) for w, _ in answer.refused}
        for workload in todo:  # its clock runs while every answer about it refuses
            if str(workload) in refused:
                progress.refused_since.setdefault(str(workload), self.wall())
            else:
                progress.refused_since.pop(str(workload), None)
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
        self, config_hash: str, plan: mesh.RolloutPlan
    ) -> dict[str, tuple[health.Restarted, mesh.Workload]]:
        """The owners restarted for ``config_hash``, by name: how each stands now, and which
        it is (for its Events)."""
        records = {kind: store.snapshot() for kind, store in self.workloads.items()}
        return health.restarted(records, config_hash, plan.reasons, self.wall(), plan.unmeshed)

    async def _brought_back(
        self, workloads: list[mesh.Workload], plan: mesh.RolloutPlan, started: float | None
    ) -> list[health.Restarted]:
        """How each workload a rollback brings back stands (each one's deadline from its own
        restore, as the workload records it: ``health.brought_back``)."""
        at = started or self.wall()
        back = health.brought_back(workloads, self.record, plan.reasons, at)
        return [standing for standing, _ in (await self._of_this_revision(back)).values()]

    async def _of_this_revision(
        self,
        restarted: dict[str, tuple[health.Restarted, mesh.Workload]],
        unmeshed: Mapping[mesh.Workload, Mapping[str, int]] | None = None,
    ) -> dict[str, tuple[health.Restarted, mesh.Workload]]:
        """``restarted`` with each Deployment's ``ReplicaFailure`` checked against the
        revision the restart made (``rollout_status.of_newest_revision``), and its pods without
        a proxy against that revision's ReplicaSet (``health.out_of_mesh``, while its
        rollout is under way): the halt takes evidence only from this attempt. The
        ReplicaSets are read live, a namespace at a time, and only when a Deployment shows the
        condition or has pods without a proxy (no cache keeps their status or revision)."""
        listed: dict[str, list[Json]] = {}
        checked = dict(restarted)
        for name, (standing, workload) in restarted.items():
            without = (unmeshed or {}).get(workload) or {}
            check_mesh = workload.kind == "Deployment" and bool(without)
            if not standing.verdict.replica_failure and not (
                check_mesh and not standing.verdict.failed
            ):
                continue
            if workload.namespace not in listed:
                listed[workload.namespace] = await self.writer.list(REPLICASETS, workload.namespace)
            obj = self.record(workload) or {}
            verdict = standing.verdict
            if verdict.replica_failure:
                verdict = rollout_status.of_newest_revision(
                    verdict, obj, listed[workload.namespace]
                )
            if check_mesh:
                newest = revisions.newest(obj, listed[workload.namespace])
                newest_name = None if newest is None else newest["metadata"].get("name")
                verdict = health.out_of_mesh(workload.kind, obj, verdict, without, newest_name)
            checked[name] = (replace(standing, verdict=verdict), workload)
        return checked

    def namespace(self, name: str) -> Json | None:
        """Namespace ``name``, as cached (``observe.Caches``)."""
        return self.namespaces.get(name)

    def _canary_record(self, config: Json, config_hash: str) -> CanaryRecord | None:
        """The canary's record: status's, else the one this process wrote and has not read
        back yet (a pass on the cache from before that write must read the clock it started),
        or the passed one it remembers (the rest's restarts are no larger canary)."""
        key, version = self._key(config, config_hash), config["metadata"].get("resourceVersion")
        stored = self._canaries.unread(key, version) or Record.of(config).canary_of(config_hash)
        return canary.newest(stored, self._passed.get(key))

    def _report_pass(
        self, config: Json, version: str, results: Iterable[actions.RestartResult]
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
                + actions.listed(restarted),
            )
        refused = [f"{r.workload}: {r.refused}" for r in results if r.refused]
        if refused:
            self.recorder.record(
                config,
                "Warning",
                "RestartFailed",
                f"{len(refused)} restart(s) refused, retried next pass: " + actions.listed(refused),
            )

    def _workload_objects(self) -> list[Json]:
        return [obj for store in self.workloads.values() for obj in store.list()]

    def record(self, workload: mesh.Workload) -> Json | None:
        """An owner as its cache holds it (its restart record); None for a bare pod."""
        store = self.workloads.get(workload.kind)
        return None if store is None else store.get(f"{workload.namespace}/{workload.name}")

    def _evictions(self, config: Json, config_hash: str) -> tuple[int, float | None]:
        key = (config["metadata"]["name"], config_hash)
        if key not in self._evicted:
            reported = Record.of(config).evictions(config_hash)
            self._evicted[key] = (reported, 0.0)
        count, at = self._evicted[key]
        return count, (at or None)

    async def _restart_reported(
        self,
        config: Json,
        workload: mesh.Workload,
        config_hash: str,
        version: str,
        completed_at: float | None = None,
    ) -> actions.RestartResult:
        """``_restart``, counted, logged and recorded as an Event on the workload; a refusal
        is reported with the API server's reason and retried on a later pass."""
        involved = self._involved(workload)
        name = config["metadata"]["name"]
        try:
            restarted = await self._restart(config, workload, config_hash, completed_at)
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
            return actions.RestartResult(workload, refused=reason)
        if restarted:
            self.metrics.restarts.labels(workload.kind).inc()
            if involved is not None:
                verb = "evicted" if workload.kind == "Pod" else "restarted"
                again = ""
                if completed_at is not None and workload.kind != "Pod":
                    verb, again = (
                        "re-meshed",
                        (
                            ": its rollout had completed, and a pod of it runs without the proxy "
                            "(or another one) since"
                        ),
                    )
                self.recorder.record(
                    involved,
                    "Normal",
                    "WorkloadRestarted",
                    f"{verb} for proxy {version} (LinkerdConfig {name}, configuration "
                    f"{config_hash}){again}",
                )
        return actions.RestartResult(workload, done=restarted)

    def _involved(self, workload: mesh.Workload) -> Json | None:
        """The workload as an Event's involved object, from the cache (a workload's record
        keeps its uid; a bare pod's, its name and namespace only)."""
        if workload.kind == "Pod":
            cached = self.pods.get(f"{workload.namespace}/{workload.name}")
            api_version = PODS.api_version
        else:
            cached = self.record(workload)
            api_version = WORKLOAD_RESOURCES[workload.kind].api_version
        if cached is None:
            return None
        return {"kind": workload.kind, "apiVersion": api_version, "metadata": cached["metadata"]}

    async def _restart(
        self,
        config: Json,
        workload: mesh.Workload,
        config_hash: str,
        completed_at: float | None = None,
    ) -> bool:
        """Restart once per configuration (and once more per completion, a re-mesh:
        ``mesh.due``); False when it already was, is gone, or changed since we looked (the
        next pass looks again)."""
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
        if cached is None or not mesh.due(cached, config_hash, completed_at):
            return False
        resource = WORKLOAD_RESOURCES[workload.kind]
        try:
            await self.writer.merge_patch(
                resource,
                workload.namespace,
                workload.name,
                mesh.restart_patch(config_hash, cached["metadata"]["resourceVersion"], self.wall()),
            )
        except ApiError as exc:
            if exc.not_found or exc.conflict:
                return False
            raise
        log.info("workload restarted", workload=str(workload), hash=config_hash)
        return True

    async def _injector_ready(
        self, desired: Desired, workloads: Iterable[mesh.Workload]
    ) -> observe.InjectorAnswer:
        """Does the injector now inject the desired proxy into each of ``workloads``? Each is
        asked with a dry-run create of its own pod, as its owner would create it now, in its
        own namespace: what a namespace's labels, a webhook's object selector or an admission
        policy decide for one workload says nothing of another's. Workloads whose pods agree
        in namespace, labels and annotations share one question (``_question``): every
        webhook and policy reads the same object for them.

        Only the workloads whose pod came back with the configuration may restart
        (``admitted``). Three answers hold a workload without end (the Mesh rule: a restart
        never takes it out of the mesh, in a rollback included): the injector injects another
        proxy (not yet), the pod came back without a proxy (the injector is down, or not
        injecting there: the new pods would be unmeshed), or admission refused it
        (``refused``: its new pods would be refused too, which the machine counts as no
        progress). Only when none could be asked at all (no template could be read, the
        controller may not create pods there) does the fallback wait apply, and the cause is
        said."""
        asked = list(workloads)
        pods = await all_of(*(self._candidate_pod(w) for w in asked))
        questions: dict[str, tuple[str, Json]] = {}
        of: dict[mesh.Workload, str] = {}
        for workload, pod in zip(asked, pods, strict=True):
            if pod is not None:
                key = _question(workload.namespace, pod)
                questions.setdefault(key, (workload.namespace, pod))
                of[workload] = key
        keys = list(questions)
        gate = asyncio.Semaphore(RESTART_CONCURRENCY)

        async def ask(key: str) -> Json | ApiError:
            namespace, pod = questions[key]
            async with gate:
                try:
                    return await self.writer.dry_run_create(PODS, namespace, pod)
                except ApiError as exc:
                    return exc

        answers = dict(zip(keys, await all_of(*(ask(k) for k in keys)), strict=True))
        found = {w: answers[key] for w, key in of.items()}
        return self._answered(desired, asked, found)

    def _answered(
        self,
        desired: Desired,
        asked: list[mesh.Workload],
        answers: Mapping[mesh.Workload, Json | ApiError],
    ) -> observe.InjectorAnswer:
        """What the injector's (and admission's) answers say of ``asked``: each workload's own
        dry-run pod, or the API server's refusal of it (a workload missing: no template)."""
        admitted: list[mesh.Workload] = []
        refused: list[tuple[mesh.Workload, str]] = []
        unmeshed: list[mesh.Workload] = []
        not_yet: list[str] = []
        cause = "no stale workload's pod template could be read"
        for workload in asked:
            found = answers.get(workload)
            if found is None:
                continue
            if isinstance(found, ApiError):
                refusal = f"{found.status} {found.reason or 'Error'}: {found.message}"
                if found.unauthorized:
                    cause = f"the dry-run create of {workload}'s pod was refused: {refusal}"
                    log.info("dry-run create refused; cannot confirm injector", error=cause)
                else:
                    refused.append((workload, refusal))
                continue
            injected = mesh.pod_projection(found)
            if mesh.proxy_version(injected) is None:
                unmeshed.append(workload)
                continue
            namespace = self.namespaces.get(workload.namespace)
            mismatch = desired.proxy.mismatch(injected, namespace)
            if mismatch is None:
                admitted.append(workload)
            else:
                not_yet.append(f"{workload}: {mismatch}")
        held = tuple(refused)
        if admitted:
            return observe.InjectorAnswer(True, "", admitted=tuple(admitted), refused=held)
        if refused:
            workload, refusal = refused[0]
            others = f" (and {len(refused) - 1} more workload(s))" if len(refused) > 1 else ""
            return observe.InjectorAnswer(
                False,
                f"a dry-run create of {workload}'s pod was refused ({refusal}){others}: its "
                "new pods would be refused too, so it is not restarted",
                held=NEW_PODS_REFUSED,
                refused=held,
            )
        if unmeshed:
            shown = actions.listed([str(w) for w in unmeshed], 5)
            return observe.InjectorAnswer(
                False,
                f"Linkerd's proxy injector did not inject a dry-run pod of {shown} (each in "
                "its own namespace): it is down or not injecting there, and a restart now "
                "would take the workload out of the mesh, so nothing is restarted until it "
                "injects again",
                held=INJECTOR_NOT_INJECTING,
            )
        if not_yet:
            return observe.InjectorAnswer(
                False, f"the proxy injector does not inject it yet: {actions.listed(not_yet, 3)}"
            )
        written_at = self._of(desired.config_hash).written_at
        waited = 0.0 if written_at is None else self.monotonic() - written_at
        if waited >= self.options.injector_wait:
            return observe.InjectorAnswer(
                True,
                f"could not confirm the injector's version by dry-run ({cause}); restarted "
                f"after waiting {self.options.injector_wait:.0f}s",
                cause,
            )
        return observe.InjectorAnswer(
            False,
            f"cannot confirm the injector's version by dry-run ({cause}); waiting "
            f"{self.options.injector_wait - waited:.0f}s more before restarting",
            cause,
        )

    async def _candidate_pod(self, workload: mesh.Workload) -> Json | None:
        """A stale workload's pod as its owner would create it now (None if it is gone)."""
        resource = PODS if workload.kind == "Pod" else WORKLOAD_RESOURCES[workload.kind]
        source = await self.writer.get(resource, workload.namespace, workload.name)
        return None if source is None else mesh.candidate_pod(workload, source)
