"""One pass of a LinkerdConfig's rollout, decided: ``step(observed, record, policy)``.

Pure: what the executor read of the cluster (``Observed``), the rollout's record in the
LinkerdConfig's status (``workload_health.HaltState``: a halt, a rollback, the forgiven; the
canary's record is read with the rest of ``Observed``) and its settings (``RolloutPolicy``) in;
a ``Step`` out: the phase (``rollout_phase.Phase``) and what status must say of it, and the
actions the executor performs (``AskInjector``, ``Restart``, ``Emit``, ``Halted``,
``CanaryKept``). The executor performs actions and nothing else; a question to the injector
is an action whose answer is observed, and the pass is decided again with it.

A pass, in order (each rule stops the pass where it applies):

0. the trust-anchor guard holds a removal (``Observed.anchors``) and what the pass would
   restart or bring back workloads onto is not the configuration that keeps every anchor in
   use: nothing is (``ANCHOR_HELD``; a halt stays a halt);
1. a halt in force: nothing is restarted (``HALTED``);
2. a restarted workload failed (its own rollout failed, or it missed ``progressDeadline``,
   on this attempt's evidence): the attempt halts, or rolls back with ``onFailure: Rollback``
   and a completed configuration to return to;
3. nothing stale and every restart healthy: ``DONE`` (the configuration is recorded as the
   last completed);
4. a restarted workload not healthy yet: the next pass waits (the canary's clock restarts);
5. ``paused``: counted, nothing restarted;
6. the pre-flight (skip what is paused or already unhealthy), the canary (only it, until it
   passes) and the pace (``batch`` per ``interval``) choose this pass's restarts;
7. Linkerd's injector must be seen injecting the configuration this pass (the Mesh rule);
8. restart them (``Restart``); what the API server said is folded in by ``after_restarts``.

The safety rules this keeps, whatever the faults between passes (a new leader deciding from
the record alone, caches that lag, refused writes, the injector down or on the old proxy,
admission refusing new pods, a hold of the guard coming and going):

* **Trust**: while the guard holds a removal, no restart or restore onto a configuration
  other than the one that keeps every anchor in use (rule 0; the guard's own decision keeps
  every anchor a running meshed pod relies on in what is written:
  ``trust_anchor_guard.decide``).
* **Mesh**: no restart or restore unless the injector was seen injecting the configuration
  this pass (rule 7, and the rollback's own question): a meshed workload never comes back
  without its proxy.
* **Once**: each workload is restarted at most once per configuration (its record on the
  owner, ``rollout.pending``), across leaders; a rollback's restores are counted apart.
* **Halt**: no restart after a halt of the same attempt (rule 1); a halt only on this
  attempt's evidence (the revision our restart made: ``workload_health.of_this_revision``,
  or a deadline from our restart). The attempt is the configuration the spec asks for, its
  generation and resume annotation, whichever configuration is rolled out
  (``Observed.attempt``): a halt on the bundle the guard holds on to is not ended by the
  hold's end, and ``onFailure: Rollback`` goes back from it.
* **Progress**: every wait names what it waits for in its message, and moves on by itself
  when its cause is gone; only ``HALTED`` and ``ROLLED_BACK`` wait for a person.

``tests/unit/test_rollout_invariants.py`` checks them with a hypothesis stateful test of the
executor on a simulated cluster; ``tests/unit/test_rollout_machine.py`` has a table row for
each rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from linkerd_config.kube.resource import Json, rfc3339
from linkerd_config.kube.rollout_status import Verdict
from linkerd_config.linkerd import canary, rollback, rollout, workload_health
from linkerd_config.linkerd.halt_record import Halt
from linkerd_config.linkerd.rollout import RolloutPlan, Workload
from linkerd_config.linkerd.rollout_phase import Phase
from linkerd_config.linkerd.rollout_policy import RolloutPolicy
from linkerd_config.linkerd.workload_health import HaltState, Restarted

HEALTH_RECHECK = 5.0
"""While restarted workloads come back, look again at least this often (their informers
wake the reconcile on every change; this bounds the wait for a deadline to pass)."""

HELD_ELSEWHERE = (
    "a trust-anchor removal is held meanwhile; ConfigMapSynced names the pods it waits for"
)

RESUME_HINT = (
    "Fix the workloads, then change the LinkerdConfig's spec (a new attempt) or annotate it "
    f"{workload_health.RESUME_ANNOTATION}=<anything new> (resume, the failed ones forgiven)"
)


# -- what goes in ------------------------------------------------------------------------------


@dataclass(frozen=True)
class InjectorAnswer:
    """What a question to the injector found: whether it injects the configuration, what
    status says, and, when it was not asked, why (the fallback wait applies), or, when it
    answered that restarts must wait without end, the Warning's reason for that."""

    injects: bool
    why: str
    cause: str = ""
    held: str = ""
    retry_after: float = 2.0
    """When it does not inject: seconds until it is asked again."""


@dataclass(frozen=True)
class GoingBack:
    """What a rollback in force reads (``onFailure: Rollback``): the configuration the
    ConfigMap went back to, and the workloads to bring back onto it."""

    to_hash: str
    """The configuration the ConfigMap holds now (the failed one's own hash when it cannot
    go back: status no longer records the target, or it no longer renders)."""
    to_version: str
    pending: tuple[Workload, ...]
    """Owners still recording the failed configuration: to bring back, listed or not."""
    workloads: tuple[Workload, ...]
    """Those and the ones the rollback record lists: health-gated once none is pending."""
    due: tuple[Workload, ...] = ()
    """Of ``pending``, those not tried in the last ``HEALTH_RECHECK`` seconds."""
    next_try: float = HEALTH_RECHECK
    """Seconds until the first of the others is due."""
    brought_back: tuple[Restarted, ...] = ()
    """How ``workloads`` stand on the configuration gone back to (read once none is
    pending), their deadline from the rollback's start."""


@dataclass(frozen=True)
class AnchorHold:
    """The trust-anchor guard's answer this pass (``trust_anchor_guard.evaluate``) when it
    holds a removal some meshed pod still needs."""

    waits_for: str
    """The hold, as ``ConfigMapSynced`` says it: what it drops, the pods that still need it."""
    holding_hash: str | None
    """The configuration that keeps every anchor in use (the spec with the bundle held on
    to), written and rolled out meanwhile; None when there is none: nothing may restart."""


@dataclass(frozen=True)
class Observed:
    """What the executor read for one pass of one configuration (its caches, and what it
    asked the API server and the injector). The callables read the same caches on demand:
    a pass that stops early does not pay for them."""

    config: Json
    """The LinkerdConfig as cached."""
    config_hash: str
    version: str
    """The proxy version the configuration gives a pod."""
    now: float
    """Wall time."""
    plan: RolloutPlan
    """The stale opted-in workloads."""
    restarted: Mapping[str, tuple[Restarted, Workload]]
    """The owners restarted for this configuration, by name: how each stands (its
    ``ReplicaFailure`` checked against the revision our restart made)."""
    restart_times: tuple[float, ...]
    """When each owner restarted for this configuration was restarted."""
    evicted: int
    """Bare pods evicted for this configuration."""
    last_eviction: float | None
    pass_finished: float | None
    """When this process's last pass finished sending its restarts."""
    preflight: Callable[[], tuple[list[Workload], list[tuple[str, str]]]]
    """The stale workloads not restarted yet: those the pre-flight lets restart, in order, and
    the others with why not."""
    labels: Callable[[Workload], canary.Labels | None]
    """A workload's labels and its namespace's (the canary's selectors)."""
    canary_record: canary.CanaryRecord | None = None
    """The canary's record: status's, or the one this process wrote and has not read back."""
    injector: InjectorAnswer | None = None
    """The injector's answer this pass; None: not asked yet."""
    going_back: GoingBack | None = None
    """While a rollback is in force: what it reads (``config_hash`` and ``version`` are the
    failed configuration's, ``plan`` the stale workloads of the one gone back to)."""
    anchors: AnchorHold | None = None
    """The trust-anchor guard's hold, when it holds a removal (None: it does not)."""
    asked_hash: str = ""
    """The configuration the spec asks for, when ``config_hash`` is another: the bundle the
    trust-anchor guard holds on to meanwhile (empty: ``config_hash`` itself)."""

    @property
    def attempt(self) -> str:
        """The configuration the attempt's halt is kept under: the one the spec asks for,
        whichever is rolled out (a halt on the bundle held on to outlives the hold)."""
        return self.asked_hash or self.config_hash

    @property
    def held_on_to(self) -> str:
        """How messages say the configuration rolled out is the bundle held on to ("")."""
        return rolled_instead(self.config_hash, self.attempt)

    @property
    def onto(self) -> str:
        """The configuration this pass would restart (or bring back) workloads onto."""
        return self.config_hash if self.going_back is None else self.going_back.to_hash

    @property
    def counts(self) -> tuple[int, int, int]:
        """Stale workloads, restarts for this configuration (owners and bare pods), bare pods."""
        return (len(self.plan.workloads), len(self.restart_times) + self.evicted, self.evicted)


def evictions_reported(status: Json, config_hash: str) -> int:
    """The bare pods a LinkerdConfig's status already reports evicted for ``config_hash``.

    An evicted bare pod leaves no record on any workload, so a new leader continues from this
    count; a count for an older configuration does not carry over to a new one.
    """
    if status.get("configHash") != config_hash:
        return 0
    count = status.get("evictedPods")
    return count if isinstance(count, int) and count >= 0 else 0


def going_back(
    halt: Halt,
    pending: Iterable[Workload],
    to_hash: str,
    to_version: str,
    tried: Mapping[str, float],
    now: float,
) -> GoingBack:
    """What a rollback pass reads, but how the workloads brought back stand (the caller
    reads that when ``gated``): every owner still recording the failed configuration
    (``pending``) goes back, listed or not (the record's list is bounded; the owners' records
    are the truth); the listed ones and those are health-gated. ``tried``: when each was last
    tried (on ``now``'s clock): tried again ``HEALTH_RECHECK`` later at the soonest."""
    section = halt.rollback
    named = () if section is None else section.workloads
    listed = [w for w in map(rollback.parse_workload, named) if w]
    waiting = sorted(pending)
    due = [w for w in waiting if now - tried.get(str(w), float("-inf")) >= HEALTH_RECHECK]
    waits = [tried[str(w)] + HEALTH_RECHECK - now for w in waiting if str(w) in tried]
    return GoingBack(
        to_hash, to_version, tuple(waiting), tuple(sorted({*listed, *waiting})), tuple(due),
        min(waits, default=HEALTH_RECHECK),
    )  # fmt: skip


def gated(back: GoingBack, failed_hash: str, halt: Halt) -> bool:
    """Whether a rollback pass health-gates the workloads brought back (``brought_back``):
    none is pending, there is a configuration to go back to, and it is not rolled back yet."""
    section = halt.rollback
    return (
        not back.pending
        and back.to_hash != failed_hash
        and (section is None or section.phase != Phase.ROLLED_BACK)
    )


def rolling_back(
    config: Json,
    halt: Halt,
    failed_version: str,
    now: float,
    plan: RolloutPlan,
    labels: Callable[[Workload], canary.Labels | None],
    back: GoingBack,
) -> Observed:
    """A rollback pass's observation: ``config_hash`` and ``version`` are the failed
    configuration's (``halt``'s: the one rolled out when it failed), ``plan`` the stale
    workloads of the one gone back to."""
    return Observed(
        config, halt.rolled, failed_version, now, plan, {}, (), 0, None, None,
        lambda: ([], []), labels, going_back=back, asked_hash=halt.config_hash,
    )  # fmt: skip


def rolled_instead(rolled: str, asked: str) -> str:
    """What messages add when the configuration rolled out (``rolled``) is not the one the
    spec asks for (``asked``): it is the bundle the trust-anchor guard holds on to."""
    if rolled == asked:
        return ""
    return f" (configuration {rolled}, the trust bundle held on to)"


# -- what comes out ----------------------------------------------------------------------------


@dataclass(frozen=True)
class AskInjector:
    """Ask Linkerd's injector (a dry-run create of one of these workloads' pods) whether it
    injects the configuration; decide the pass again with its answer."""

    workloads: tuple[Workload, ...]


@dataclass(frozen=True)
class Restart:
    """Restart these owners (evict these bare pods) onto the configuration, once each."""

    workloads: tuple[Workload, ...]


@dataclass(frozen=True)
class Restore:
    """Bring these owners back from the failed configuration onto ``to_hash`` (a Deployment
    to its previous ReplicaSet's template when only our restart changed it, else a restart)."""

    workloads: tuple[Workload, ...]
    to_hash: str


@dataclass(frozen=True)
class Emit:
    """An Event: on ``involved`` (a workload), or on the LinkerdConfig when None."""

    type: str
    reason: str
    message: str
    involved: Workload | None = None
    once: bool = False
    """Said once per configuration and reason by this process (not on every pass)."""


@dataclass(frozen=True)
class Halted:
    """The attempt halted (or, with ``rolling_back_to``, began to roll back): ``record`` is
    the status record, to remember until status holds it."""

    record: Halt
    failed: str
    """The failed workloads, as listed in messages."""
    rolling_back_to: str | None = None


@dataclass(frozen=True)
class RolledBack:
    """Every workload the failed attempt restarted is back and healthy: ``record`` is the
    status record, to remember until status holds it."""

    record: Halt
    to_hash: str


@dataclass(frozen=True)
class CanaryKept:
    """The canary's record decided this pass (to remember until status holds it), and
    whether it passed now."""

    record: canary.CanaryRecord
    passed_now: bool = False


Action = AskInjector | Restart | Restore | Emit | Halted | RolledBack | CanaryKept


@dataclass(frozen=True)
class RolloutOutcome:
    """What one pass found and did, for the status conditions and the requeue."""

    outdated: int
    restarted_total: int
    evicted: int
    reason: Phase
    message: str
    requeue_after: float | None = None
    status: Json = field(default_factory=dict)
    """Status fields of the rollout's own state (its halt, its canary, the last completed
    configuration), to write with the rest."""

    @property
    def up_to_date(self) -> bool:
        return self.reason == Phase.DONE


@dataclass(frozen=True)
class RestartPass:
    """A pass that restarts: what ``after_restarts`` needs to say how it went."""

    why: str
    """What the injector's answer says, and what the pre-flight skipped."""
    canary: canary.Canary


@dataclass(frozen=True)
class Step:
    """One pass decided: its outcome and the actions that carry it out."""

    outcome: RolloutOutcome
    actions: tuple[Action, ...] = ()
    restarting: RestartPass | None = None
    head: str = ""
    """A rollback pass that restores: its message before what the restores say."""

    @property
    def ask(self) -> AskInjector | None:
        return next((a for a in self.actions if isinstance(a, AskInjector)), None)

    @property
    def restart(self) -> Restart | None:
        return next((a for a in self.actions if isinstance(a, Restart)), None)

    @property
    def restore(self) -> Restore | None:
        return next((a for a in self.actions if isinstance(a, Restore)), None)


# -- deciding ----------------------------------------------------------------------------------


def step(observed: Observed, record: HaltState, policy: RolloutPolicy) -> Step:
    """This pass of ``observed``'s configuration: see the module's docstring."""
    counts, version = observed.counts, observed.version
    halted = record.halted
    rolling_back = halted is not None and halted.rollback is not None
    anchors = observed.anchors
    if (
        anchors is not None
        and anchors.holding_hash != observed.onto
        and (halted is None or rolling_back)
    ):
        return _anchor_held(observed, halted, anchors)
    if halted is not None and halted.rollback is not None and observed.going_back is not None:
        return _rolling_back(observed, halted, policy, observed.going_back)
    if halted is not None:
        failed = failures(halted.failed)
        of = rolled_instead(halted.rolled, halted.config_hash)
        return Step(
            RolloutOutcome(
                *counts, Phase.HALTED,
                f"rollout of proxy {version}{of} halted: {failed}. {RESUME_HINT}",
                status={workload_health.HALT_FIELD: halted.to_json()},
            )
        )  # fmt: skip
    restarted = observed.restarted
    checked = workload_health.gate(
        (standing for standing, _ in restarted.values()),
        observed.now,
        policy.progress_deadline,
        record.forgiven,
    )
    if checked.failed:
        return _halt(observed, policy, checked.failed)
    if not observed.plan.workloads and checked.open:
        completed = rollback.completed_record(
            observed.config, observed.config_hash, rfc3339(observed.now)
        )
        done = f"every opted-in pod runs proxy {version}"
        if anchors is not None:
            done += f" and the trust bundle held on to ({HELD_ELSEWHERE})"
        return Step(
            RolloutOutcome(
                *counts, Phase.DONE, done,
                status={} if completed is None else {rollback.LAST_COMPLETED_FIELD: completed},
            )
        )  # fmt: skip
    if checked.waiting:  # a canary not healthy: its clock starts again
        first = _canary(observed, record, policy, None)
        outcome = RolloutOutcome(
            *counts, Phase.ROLLING, waiting_message(checked.waiting, version),
            requeue_after=min(HEALTH_RECHECK, policy.interval or HEALTH_RECHECK),
        )  # fmt: skip
        return _with_canary(first, outcome)
    if policy.paused:
        plan = observed.plan
        return Step(
            RolloutOutcome(
                *counts, Phase.PAUSED,
                f"rollout paused: {len(plan.workloads)} workload(s) ({plan.stale_pods} pod(s)) "
                f"would be restarted for proxy {version}; set spec.rollout.paused to false "
                "to resume",
            )
        )  # fmt: skip
    ready, skipped = observed.preflight()
    first = _canary(observed, record, policy, ready)
    todo = list(first.restart)
    last = [
        *observed.restart_times,
        *([observed.last_eviction] if observed.last_eviction else []),
        *([observed.pass_finished] if observed.pass_finished else []),
    ]
    pace = rollout.pace(max(last, default=None), observed.now, policy.batch, policy.interval)
    if not todo or not pace.allowed:
        status = _completed_but_skipped(observed, ready, skipped)
        wait, said = pace.wait or policy.interval, skipped_message(skipped)
        outcome = _rolling(observed, policy, counts[1], wait, said, status)
        return _with_canary(first, outcome)
    answer = observed.injector
    if answer is None:
        return Step(_rolling(observed, policy, counts[1], 0.0, ""), (AskInjector(tuple(todo)),))
    if not answer.injects:
        outcome = RolloutOutcome(
            *counts, Phase.WAITING_FOR_INJECTOR, answer.why, requeue_after=answer.retry_after
        )
        return Step(outcome, _canary_actions(first))
    batch = tuple(todo[: pace.allowed])
    restarting = RestartPass(f"{answer.why} {skipped_message(skipped)}".strip(), first)
    outcome = _rolling(observed, policy, counts[1], policy.interval, restarting.why)
    return Step(outcome, (*_canary_actions(first), Restart(batch)), restarting)


@dataclass(frozen=True)
class RestartResult:
    """How one restart of a pass went (``Restart``'s result, as the executor reports it)."""

    workload: Workload
    done: bool = False
    refused: str = ""


def after_restarts(
    observed: Observed,
    policy: RolloutPolicy,
    decided: Step,
    results: Sequence[RestartResult],
    evicted: int,
) -> Step:
    """``decided`` (a pass that restarts) once its restarts are sent: the counts and the
    message with what the API server refused (retried next pass); ``evicted``: the bare pods
    evicted for this configuration now."""
    assert decided.restarting is not None
    why = decided.restarting.why
    refused = [f"{r.workload}: {r.refused}" for r in results if r.refused]
    if refused:
        why = f"{len(refused)} restart(s) refused, retried next pass: {'; '.join(refused)}. {why}"
    owners = sum(1 for r in results if r.done and r.workload.kind != "Pod")
    total = len(observed.restart_times) + owners + evicted
    seen = replace(observed, evicted=evicted)
    outcome = _rolling(seen, policy, total, policy.interval, why.strip())
    with_canary = _with_canary(decided.restarting.canary, outcome)
    return replace(with_canary, actions=decided.actions)


def _rolling_back(observed: Observed, halt: Halt, policy: RolloutPolicy, back: GoingBack) -> Step:
    """One pass of a rollback. The ConfigMap already holds the configuration gone back to
    (the controller wrote it); once the injector injects its proxy again, the workloads the
    failed attempt restarted are brought back onto it, then health-gated with the rollout's
    deadline: ``ROLLING_BACK`` until every one is healthy on it, then ``ROLLED_BACK``."""
    section = halt.rollback
    assert section is not None
    of = observed.held_on_to
    head = f"rollout of proxy {observed.version}{of} failed ({failures(halt.failed)})"
    counts = (len(observed.plan.workloads), 0, 0)
    kept = {workload_health.HALT_FIELD: halt.to_json()}
    if back.to_hash == observed.config_hash:
        return Step(
            RolloutOutcome(
                *counts, Phase.HALTED, f"{head}; cannot roll back to configuration "
                f"{section.to_hash}: status no longer records it as the last completed "
                "(lastCompleted), or its spec no longer validates or renders onto the Linkerd "
                f"installed now (the controller's log says which), so the rollout is halted "
                f"instead. {RESUME_HINT}",
                status=kept,
            )
        )  # fmt: skip
    back_to = f"configuration {back.to_hash} (proxy {back.to_version})"

    def rolling_back(message: str, requeue: float | None = HEALTH_RECHECK) -> RolloutOutcome:
        return RolloutOutcome(
            *counts, Phase.ROLLING_BACK, f"{head}; rolling back to {back_to}{message}",
            requeue_after=requeue, status=kept,
        )  # fmt: skip

    if section.phase == Phase.ROLLED_BACK:
        return Step(
            RolloutOutcome(
                *counts, Phase.ROLLED_BACK, f"{head}; rolled back to {back_to}. {RESUME_HINT}",
                status=kept,
            )
        )  # fmt: skip
    if back.pending:
        answer = observed.injector
        if answer is None:
            return Step(rolling_back(""), (AskInjector(back.pending),))
        if not answer.injects:
            return Step(rolling_back(f": {answer.why}", answer.retry_after))
        if not back.due:
            said = f": {len(back.pending)} workload(s) not back onto it yet, tried again shortly"
            return Step(rolling_back(said, back.next_try))
        restore = Restore(back.due, section.to_hash)
        bringing = f": bringing {len(back.due)} workload(s) back onto it"
        return Step(rolling_back(bringing), (restore,), head=rolling_back("").message)
    checked = workload_health.gate(back.brought_back, observed.now, policy.progress_deadline)
    if checked.failed:
        # Past the deadline on the old configuration too: the rollback stays in force (it
        # may still come back), said once as a Warning and in the reason.
        stuck = listed([f"{w}: {why}" for w, why in checked.failed], 5)
        warned = Emit(
            "Warning", Phase.ROLLBACK_STUCK,
            f"rolling back to {back_to} is not healthy either: {stuck}", once=True,
        )  # fmt: skip
        outcome = RolloutOutcome(
            *counts, Phase.ROLLBACK_STUCK,
            f"{head}; rolling back to {back_to}, which is not healthy either: {stuck}",
            requeue_after=HEALTH_RECHECK, status=kept,
        )  # fmt: skip
        return Step(outcome, (warned,))
    if checked.waiting:
        behind = [f"{w}: {why}" for w, why in checked.waiting]
        said = f": {len(behind)} workload(s) not healthy on it yet: {listed(behind, 5)}"
        return Step(rolling_back(said))
    finished = halt.rolled_back()
    done = Emit(
        "Warning", Phase.ROLLED_BACK,
        f"{head}; rolled back to {back_to}: {len(back.workloads)} workload(s) back on it and "
        "healthy",
    )  # fmt: skip
    outcome = RolloutOutcome(
        *counts, Phase.ROLLED_BACK, f"{head}; rolled back to {back_to}. {RESUME_HINT}",
        status={workload_health.HALT_FIELD: finished.to_json()},
    )  # fmt: skip
    return Step(outcome, (RolledBack(finished, back.to_hash), done))


def after_restores(decided: Step, back: GoingBack, brought: int) -> Step:
    """``decided`` (a rollback pass that restores) once its restores are sent: how many of
    the pending workloads came back onto the configuration gone back to."""
    said = f"{decided.head}: brought {brought} of {len(back.pending)} workload(s) back onto it"
    return replace(decided, outcome=replace(decided.outcome, message=said))


@dataclass(frozen=True)
class Pass:
    """One pass's restarts, as ``passes`` foresees them."""

    workloads: tuple[Workload, ...]
    canary: bool
    """Restarted as (part of) the canary, before it passed."""


MAX_PASSES = 100_000
"""``passes`` gives up after this many steps (a rollout of 100,000 passes is no plan)."""


def passes(
    observed: Observed, record: HaltState, policy: RolloutPolicy
) -> tuple[list[Pass], RolloutOutcome]:
    """The passes the rollout makes from ``observed`` when nothing else changes: the injector
    injecting, every restart healthy at once, the pace and the canary's stable time let run
    their course. Each is decided by ``step``, as the controller's are: what ``plan`` lists;
    and where the rollout then stands (``DONE``, or what it waits for)."""
    yes = InjectorAnswer(True, "")
    done = Verdict("done")
    ready, skipped = observed.preflight()
    restarted = {
        name: (replace(standing, verdict=done), workload)
        for name, (standing, workload) in observed.restarted.items()
    }
    seen = replace(
        observed, restarted=restarted, restart_times=(), last_eviction=None,
        pass_finished=None, injector=yes,
    )  # fmt: skip
    found: list[Pass] = []
    for _ in range(MAX_PASSES):
        seen = replace(seen, preflight=fixed_preflight(list(ready), list(skipped)))
        decided = step(seen, record, policy)
        kept = [a.record for a in decided.actions if isinstance(a, CanaryKept)]
        seen = replace(seen, canary_record=kept[-1] if kept else seen.canary_record)
        if (restart := decided.restart) is not None and decided.restarting is not None:
            found.append(Pass(restart.workloads, decided.restarting.canary.phase == canary.CANARY))
            now = seen.now
            restarted = {
                **restarted,
                **{
                    str(w): (Restarted(str(w), now, done), w)
                    for w in restart.workloads
                    if w.kind != "Pod"
                },
            }
            ready = [w for w in ready if w not in restart.workloads]
            stale = tuple(w for w in seen.plan.workloads if w not in restart.workloads)
            seen = replace(
                seen, plan=replace(seen.plan, workloads=stale), restarted=restarted,
                now=now + max(policy.interval, 0.0), pass_finished=now,
            )  # fmt: skip
        elif decided.outcome.reason == Phase.CANARY and decided.outcome.requeue_after:
            seen = replace(seen, now=seen.now + decided.outcome.requeue_after)  # its clock
        else:
            break
    return found, decided.outcome


def fixed_preflight(
    ready: list[Workload], skipped: list[tuple[str, str]]
) -> Callable[[], tuple[list[Workload], list[tuple[str, str]]]]:
    """``Observed.preflight`` when its answer is already known."""
    return lambda: (ready, skipped)


def _anchor_held(observed: Observed, halted: Halt | None, anchors: AnchorHold) -> Step:
    """The Trust rule: while the guard holds a removal, nothing is restarted (or brought
    back) onto a configuration other than the one that keeps every anchor in use. What is
    held, and for which pods, is the guard's message; a halt or rollback record is kept."""
    return Step(
        RolloutOutcome(
            *observed.counts, Phase.ANCHOR_HELD,
            f"nothing restarted onto configuration {observed.onto}: {anchors.waits_for}",
            requeue_after=None,
            status={} if halted is None else {workload_health.HALT_FIELD: halted.to_json()},
        )
    )  # fmt: skip


def _halt(observed: Observed, policy: RolloutPolicy, failed: tuple[tuple[str, str], ...]) -> Step:
    """Stop the attempt: recorded in status (any leader reads it back), one Warning on the
    LinkerdConfig and one on each failed workload. With ``onFailure: Rollback`` and a
    completed configuration to return to, the record starts a rollback instead."""
    config, config_hash, version = observed.config, observed.config_hash, observed.version
    # Kept under the attempt (the configuration the spec asks for), whichever was rolled out:
    # the next reconcile looks it up there, with the guard's hold or without.
    record = workload_health.halt_record(
        config, observed.attempt, failed, rfc3339(observed.now), rolled=config_hash
    )
    listed = failures(f"{w}: {why}" for w, why in failed)
    reason, outcome, after, back_hash = Phase.HALTED, "halted", "", None
    if policy.rollback:
        back_to, why_not = rollback.target(config, config_hash, observed.attempt)
        if back_to is not None:
            restarted = [w for _, w in observed.restarted.values()]
            record = rollback.start(record, back_to, restarted)
            reason, outcome = Phase.ROLLING_BACK, "failed"
            back_hash = back_to.config_hash
            after = f"; rolling back to configuration {back_hash}"
        else:
            after = f" (onFailure: Rollback, but {why_not}: halted instead)"
    said = f"rollout of proxy {version}{observed.held_on_to} {outcome}: {listed}{after}"
    name = config["metadata"]["name"]
    then = "halted" if reason == Phase.HALTED else "rolled back"
    actions: list[Action] = [Halted(record, listed, back_hash), Emit("Warning", reason, said)]
    for workload_name, why in failed:
        workload = observed.restarted[workload_name][1]
        actions.append(
            Emit(
                "Warning",
                reason,
                f"did not come back healthy on proxy {version} (LinkerdConfig {name}): "
                f"{why}; the rollout is {then}",
                workload,
            )
        )
    return Step(
        RolloutOutcome(
            *observed.counts, reason, f"{said}. {RESUME_HINT}",
            requeue_after=None if reason == Phase.HALTED else 0.5,
            status={workload_health.HALT_FIELD: record.to_json()},
        ),
        tuple(actions),
    )  # fmt: skip


def _canary(
    observed: Observed, record: HaltState, policy: RolloutPolicy, todo: list[Workload] | None
) -> canary.Canary:
    """The canary's part in this pass (``canary.decide``): which of ``todo`` it lets the pass
    restart, and what it says."""
    standing = [s for s, _ in observed.restarted.values()]
    return canary.decide(
        policy.canary,
        observed.config,
        observed.config_hash,
        observed.canary_record,
        standing,
        record.forgiven,
        todo,
        observed.labels,
        observed.now,
    )


def _canary_actions(first: canary.Canary) -> tuple[Action, ...]:
    if first.record is None:
        return ()
    kept = CanaryKept(first.record, first.passed_now)
    if first.passed_now:
        return (kept, Emit("Normal", "CanaryPassed", first.message))
    return (kept,)


def _with_canary(first: canary.Canary, outcome: RolloutOutcome) -> Step:
    """``outcome`` with the canary's part: what it says and keeps in status; while the rest
    wait for it, its phase, and a look again when it may have passed."""
    said = replace(
        outcome, message=outcome.message + first.note, status={**outcome.status, **first.status}
    )
    actions = _canary_actions(first)
    if not first.holds:
        return Step(said, actions)
    unmatched = first.phase == canary.UNMATCHED
    return Step(
        replace(
            said,
            reason=Phase.CANARY_UNMATCHED if unmatched else Phase.CANARY,
            requeue_after=min(
                outcome.requeue_after or HEALTH_RECHECK,
                first.requeue_after or HEALTH_RECHECK,
                HEALTH_RECHECK,
            ),
        ),
        actions,
    )


def _rolling(
    observed: Observed,
    policy: RolloutPolicy,
    total: int,
    wait: float,
    why: str,
    status: Json | None = None,
) -> RolloutOutcome:
    plan = observed.plan
    held = (
        "" if observed.anchors is None else f" and the trust bundle held on to ({HELD_ELSEWHERE})"
    )
    message = (
        f"{len(plan.workloads)} workload(s) ({plan.stale_pods} pod(s)) not yet on proxy "
        f"{observed.version}{held}; restarted {total} for this configuration. {why}"
    ).strip()
    return RolloutOutcome(
        len(plan.workloads),
        total,
        observed.evicted,
        Phase.ROLLING,
        message,
        requeue_after=wait if wait > 0 else policy.controller_interval,
        status=status or {},
    )


def _completed_but_skipped(
    observed: Observed, ready: list[Workload], skipped: list[tuple[str, str]]
) -> Json:
    """``status.lastCompleted`` when everything this rollout could restart is done and
    healthy (the gate is open), only skipped workloads left: they do not count against
    the configuration, so it is what a later rollback may return to."""
    if ready or not skipped:
        return {}
    completed = rollback.completed_record(
        observed.config, observed.config_hash, rfc3339(observed.now)
    )
    return {} if completed is None else {rollback.LAST_COMPLETED_FIELD: completed}


# -- messages ----------------------------------------------------------------------------------


def waiting_message(waiting: tuple[tuple[str, str], ...], version: str) -> str:
    shown = [f"{w}: {why}" for w, why in waiting]
    return (
        f"{len(waiting)} restarted workload(s) not healthy on proxy {version} yet, the next "
        f"pass waits for them: {listed(shown, 5)}"
    )


def skipped_message(skipped: list[tuple[str, str]]) -> str:
    if not skipped:
        return ""
    shown = [f"{w}: {why}" for w, why in skipped]
    return f"Skipped, not restarted: {listed(shown, 5)}."


def failures(failed: Iterable[object]) -> str:
    """Failed workloads and why, as messages list them: a few, each cut short, the rest
    counted (a condition's message is at most 32768 characters, and a pass may fail
    thousands of workloads at once, each with the API server's reason)."""
    items = [workload_health.cut(str(f), 1024) for f in failed]
    shown = "; ".join(items[:5])
    return shown if len(items) <= 5 else f"{shown}; and {len(items) - 5} more"


def listed(items: list[str], limit: int = 10) -> str:
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown} and {len(items) - limit} more"
