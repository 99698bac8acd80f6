"""One pass of a LinkerdConfig's rollout, decided: ``step(observed, record, policy)``.

Pure: what the executor read of the cluster (``Observed``), the rollout's record in the
LinkerdConfig's status (``health.HaltState``: a halt, a rollback, the forgiven; the
canary's record is read with the rest of ``Observed``) and its settings (``RolloutPolicy``) in;
a ``Step`` out: the phase (``phase.Phase``) and what status must say of it, and the
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
7. Linkerd's injector must be seen injecting the configuration this pass into each workload
   it restarts, asked with that workload's own pod in its own namespace (the Mesh rule); a
   workload whose new pods admission refuses makes no progress, and once refused for
   ``progressDeadline`` the attempt fails as in rule 2 (a wait that only a change of the
   cluster ends is a failure, not a wait: ``onFailure: Rollback`` writes the last completed
   configuration back, so the namespace's new pods are admitted again);
8. restart them (``Restart``); what the API server said is folded in by ``after_restarts``.

The safety rules this keeps, whatever the faults between passes (a new leader deciding from
the record alone, caches that lag, refused writes, the injector down or on the old proxy,
admission refusing new pods, a hold of the guard coming and going):

* **Trust**: while the guard holds a removal, no restart or restore onto a configuration
  other than the one that keeps every anchor in use (rule 0; the guard's own decision keeps
  every anchor a running meshed pod relies on in what is written:
  ``guard.decide``).
* **Mesh**: no restart or restore unless the injector was seen injecting the configuration
  this pass into that workload's own pod, in its own namespace (rule 7, and the rollback's
  own question): a meshed workload never comes back without its proxy.
* **Once**: each workload is restarted at most once per configuration (its record on the
  owner, ``mesh.pending``), across leaders; a rollback's restores are counted apart.
* **Halt**: no restart after a halt of the same attempt (rule 1); a halt only on this
  attempt's evidence (the revision our restart made: ``rollout_status.of_newest_revision``,
  or a deadline from our restart). The attempt is the configuration the spec asks for and
  the resume annotation (an edit of ``spec.rollout`` alone is none), whichever is rolled out
  (``Observed.attempt``): a halt on the bundle the guard holds on to is not ended by the
  hold's end, and ``onFailure: Rollback`` goes back from it.
* **Progress**: every wait names what it waits for in its message, and moves on by itself
  when its cause is gone; only ``HALTED`` and ``ROLLED_BACK`` wait for a person.

``tests/unit/rollout/test_rollout_invariants.py`` checks them with a hypothesis stateful test of the
executor on a simulated cluster; ``tests/unit/rollout/test_rollout_machine.py`` has a table row for
each rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from linkerd_config.kube.resource import Json, go_seconds, rfc3339
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.mesh import Workload
from linkerd_config.linkerd.rollout import canary, health, rollback
from linkerd_config.linkerd.rollout.actions import (
    Action,
    AskInjector,
    CanaryKept,
    Emit,
    Halted,
    Restart,
    RestartPass,
    RestartResult,
    Restore,
    RolledBack,
    RolloutOutcome,
    Step,
    Undo,
    failures,
    listed,
    skipped_message,
    waiting_message,
)
from linkerd_config.linkerd.rollout.health import HaltState
from linkerd_config.linkerd.rollout.observe import (
    HEALTH_RECHECK,
    AnchorHold,
    GoingBack,
    InjectorAnswer,
    Observed,
    rolled_instead,
)
from linkerd_config.linkerd.rollout.phase import Phase
from linkerd_config.linkerd.rollout.policy import RolloutPolicy
from linkerd_config.linkerd.rollout.record import RESUME_ANNOTATION, Halt, Part

HELD_ELSEWHERE = (
    "a trust-anchor removal is held meanwhile; ConfigMapSynced names the pods it waits for"
)

RESUME_HINT = (
    "Fix the workloads, then change the LinkerdConfig's configuration (a new attempt; "
    "spec.rollout alone is none) or annotate it "
    f"{RESUME_ANNOTATION}=<anything new> (resume, the failed ones forgiven)"
)


# -- deciding ----------------------------------------------------------------------------------


def step(observed: Observed, record: HaltState, policy: RolloutPolicy) -> Step:
    """This pass of ``observed``'s configuration: see the module's docstring."""
    counts, version = observed.counts, observed.version
    halted = record.halted
    in_rollback = halted is not None and halted.rollback is not None
    anchors = observed.anchors
    if (
        anchors is not None
        and anchors.holding_hash != observed.onto
        and (halted is None or in_rollback)
    ):
        return _anchor_held(observed, halted, anchors)
    if halted is not None and halted.rollback is not None and observed.going_back is not None:
        return _rollback_step(observed, halted, policy, observed.going_back)
    if halted is not None:
        failed = failures(halted.failed)
        of = rolled_instead(halted.rolled, halted.config_hash)
        undo = _undo(halted, observed, observed.halted_revisions)
        return Step(
            RolloutOutcome(
                *counts, Phase.HALTED,
                f"rollout of proxy {version}{of} halted: {failed}.{undo.waits} {RESUME_HINT}",
                requeue_after=undo.requeue_after, parts={"halt": halted},
            ),
            undo.actions,
        )  # fmt: skip
    restarted = observed.restarted
    if observed.completed_at is not None:
        # Completed: only a restart since (a re-mesh) is this attempt's to judge; a pod that
        # went unmeshed, or unhealthy, later is no failure of the rollout that completed.
        restarted = {
            name: (standing, workload)
            for name, (standing, workload) in restarted.items()
            if standing.restarted_at > observed.completed_at
        }
    checked = health.gate(
        (standing for standing, _ in restarted.values()),
        observed.now,
        policy.progress_deadline,
        record.forgiven,
    )
    if checked.failed:
        return _halt(observed, policy, checked.failed)
    if not observed.plan.workloads and checked.open:
        completed = rollback.completed_record(
            observed.config,
            observed.config_hash,
            rfc3339(observed.now, micro=True),
            again=bool(restarted),
        )
        done = f"every opted-in pod runs proxy {version}"
        if anchors is not None:
            done += f" and the trust bundle held on to ({HELD_ELSEWHERE})"
        return Step(
            RolloutOutcome(
                *counts, Phase.DONE, done,
                parts={} if completed is None else {"completed": completed},
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
    ready, skipped = list(observed.ready), list(observed.skipped)
    first = _canary(observed, record, policy, ready)
    todo = list(first.restart)
    last = [
        *observed.restart_times,
        *([observed.last_eviction] if observed.last_eviction else []),
        *([observed.pass_finished] if observed.pass_finished else []),
    ]
    pace = mesh.pace(max(last, default=None), observed.now, policy.batch, policy.interval)
    if not todo or not pace.allowed:
        status = _completed_but_skipped(observed, ready, skipped)
        wait, said = pace.wait or policy.interval, skipped_message(skipped)
        outcome = _rolling(observed, policy, counts[1], wait, said, status)
        return _with_canary(first, outcome)
    candidates = tuple(todo[: pace.allowed])
    answer = observed.injector
    if answer is None:
        return Step(_rolling(observed, policy, counts[1], 0.0, ""), (AskInjector(candidates),))
    refused_for = {
        w: observed.now - observed.refused_since.get(str(w), observed.now)
        for w, _ in answer.refused
    }
    past = tuple(
        (w, why) for w, why in answer.refused if refused_for[w] >= policy.progress_deadline
    )
    if past:
        return _halt(observed, policy, _refused_failures(past, policy), past)
    admitted = candidates if answer.admitted is None else answer.admitted
    batch = tuple(w for w in candidates if w in admitted) if answer.injects else ()
    if not batch:
        outcome = _waiting_for_injector(
            observed, policy, answer, max(refused_for.values(), default=0.0)
        )
        return Step(outcome, _canary_actions(first))
    restarting = RestartPass(f"{answer.why} {skipped_message(skipped)}".strip(), first)
    outcome = _rolling(observed, policy, counts[1], policy.interval, restarting.why)
    return Step(outcome, (*_canary_actions(first), Restart(batch)), restarting)


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


def _rollback_step(observed: Observed, halt: Halt, policy: RolloutPolicy, back: GoingBack) -> Step:
    """One pass of a rollback. The ConfigMap already holds the configuration gone back to
    (the controller wrote it); once the injector injects its proxy again, the workloads the
    failed attempt restarted are brought back onto it, then health-gated with the rollout's
    deadline: ``ROLLING_BACK`` until every one is healthy on it, then ``ROLLED_BACK``."""
    section = halt.rollback
    assert section is not None
    of = observed.held_on_to
    head = f"rollout of proxy {observed.version}{of} failed ({failures(halt.failed)})"
    counts = (len(observed.plan.workloads), 0, 0)
    kept: dict[str, Part] = {"halt": halt}
    if back.to_hash == observed.config_hash:
        return Step(
            RolloutOutcome(
                *counts, Phase.HALTED, f"{head}; cannot roll back to configuration "
                f"{section.to_hash}: status no longer records it as the last completed "
                "(lastCompleted), or not as one the controller recorded, or its spec no longer "
                "validates or renders onto the Linkerd "
                f"installed now (the controller's log says which), so the rollout is halted "
                f"instead. {RESUME_HINT}",
                parts=kept,
            )
        )  # fmt: skip
    back_to = f"configuration {back.to_hash} (proxy {back.to_version})"

    def going(message: str, requeue: float | None = HEALTH_RECHECK) -> RolloutOutcome:
        return RolloutOutcome(
            *counts, Phase.ROLLING_BACK, f"{head}; rolling back to {back_to}{message}",
            requeue_after=requeue, parts=kept,
        )  # fmt: skip

    if section.phase == Phase.ROLLED_BACK:
        return Step(
            RolloutOutcome(
                *counts, Phase.ROLLED_BACK, f"{head}; rolled back to {back_to}. {RESUME_HINT}",
                parts=kept,
            )
        )  # fmt: skip
    if back.pending:
        if not back.due:
            said = f": {len(back.pending)} workload(s) not back onto it yet, tried again shortly"
            return Step(going(said, back.next_try))
        # At the rollout's pace (issue 61, finding 1: a rollback restored 12 workloads at
        # once past maxRestartsPerPass: 4): a pass's worth, a pass's interval apart.
        if back.since_restores < policy.interval:
            wait = policy.interval - back.since_restores
            said = f": {len(back.pending)} workload(s) to bring back, the next in {wait:.0f}s"
            return Step(going(said, wait))
        batch = back.due[: policy.batch]
        # Each is asked about in its own namespace, as a rollout's restarts are (the Mesh
        # rule): only those the injector injects the configuration gone back to come back.
        answer = observed.injector
        if answer is None:
            return Step(going(""), (AskInjector(batch),))
        admitted = batch if answer.admitted is None else answer.admitted
        due = tuple(w for w in batch if w in admitted) if answer.injects else ()
        if not due:
            return Step(going(f": {answer.why}", answer.retry_after))
        restore = Restore(due, section.to_hash)
        bringing = f": bringing {len(due)} workload(s) back onto it"
        return Step(going(bringing), (restore,), head=going("").message)
    checked = health.gate(back.brought_back, observed.now, policy.progress_deadline)
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
            requeue_after=HEALTH_RECHECK, parts=kept,
        )  # fmt: skip
        return Step(outcome, (warned,))
    if checked.waiting:
        behind = [f"{w}: {why}" for w, why in checked.waiting]
        said = f": {len(behind)} workload(s) not healthy on it yet: {listed(behind, 5)}"
        return Step(going(said))
    finished = halt.rolled_back()
    done = Emit(
        "Warning", Phase.ROLLED_BACK,
        f"{head}; rolled back to {back_to}: {len(back.workloads)} workload(s) back on it and "
        "healthy",
    )  # fmt: skip
    outcome = RolloutOutcome(
        *counts, Phase.ROLLED_BACK, f"{head}; rolled back to {back_to}. {RESUME_HINT}",
        parts={"halt": finished},
    )  # fmt: skip
    return Step(outcome, (RolledBack(finished, back.to_hash), done))


def after_restores(decided: Step, back: GoingBack, brought: int) -> Step:
    """``decided`` (a rollback pass that restores) once its restores are sent: how many of
    the pending workloads came back onto the configuration gone back to."""
    said = f"{decided.head}: brought {brought} of {len(back.pending)} workload(s) back onto it"
    return replace(decided, outcome=replace(decided.outcome, message=said))


def _anchor_held(observed: Observed, halted: Halt | None, anchors: AnchorHold) -> Step:
    """The Trust rule: while the guard holds a removal, nothing is restarted (or brought
    back) onto a configuration other than the one that keeps every anchor in use. What is
    held, and for which pods, is the guard's message; a halt or rollback record is kept."""
    return Step(
        RolloutOutcome(
            *observed.counts, Phase.ANCHOR_HELD,
            f"nothing restarted onto configuration {observed.onto}: {anchors.waits_for}",
            requeue_after=None,
            parts={} if halted is None else {"halt": halted},
        )
    )  # fmt: skip


def _waiting_for_injector(
    observed: Observed, policy: RolloutPolicy, answer: InjectorAnswer, refused_for: float
) -> RolloutOutcome:
    """Nothing restarts: the injector injects none of this pass's workloads (yet). Refused
    new pods are no progress: the message says when that fails the attempt (``refused_for``:
    how long the longest refused of them has been)."""
    why, requeue = answer.why, answer.retry_after
    if answer.refused:
        left = max(policy.progress_deadline - refused_for, 0.0)
        why += (
            f"; refused new pods are no progress: the rollout fails in {left:.0f}s "
            f"(progressDeadline {go_seconds(policy.progress_deadline)})"
        )
        requeue = min(requeue, left)
    return RolloutOutcome(*observed.counts, Phase.WAITING_FOR_INJECTOR, why, requeue_after=requeue)


def undo_targets(halted: Halt) -> tuple[Workload, ...]:
    """The Deployments a halt names as failed: those ``Undo`` brings off the revision its
    restarts made (``Observed.halted_revisions`` says which still are on it)."""
    named = (rollback.parse_workload(f.split(":", 1)[0]) for f in halted.failed)
    return tuple(w for w in named if w is not None and w.kind == "Deployment")


@dataclass(frozen=True)
class _Undoing:
    actions: tuple[Action, ...] = ()
    waits: str = ""
    """What the halt's message adds: the undo that waits for the injector, and why."""
    requeue_after: float | None = None


def _undo(halted: Halt, observed: Observed, targets: Mapping[Workload, bool]) -> _Undoing:
    """The Deployments a halt goes back from (``targets``: its failed ones, and those out
    of the mesh, still on the revision our restart made, each with whether going back
    creates pods) brought off it (``Undo``). Going back that
    only scales the revision down is done at once; going back that creates pods waits until
    the injector is seen injecting into that workload's own pod (the Mesh rule: issue 60,
    item 4.5, on real proxies: an undo sent while the injector was down brought every pod of
    the previous revision back without the proxy, and a halt restarts nothing after)."""
    now = tuple(w for w, makes_pods in targets.items() if not makes_pods)
    gated = tuple(w for w, makes_pods in targets.items() if makes_pods)
    answer = observed.injector
    if gated and answer is None:
        return _Undoing((AskInjector(gated),))
    waiting: tuple[Workload, ...] = ()
    if gated and answer is not None:
        admitted = gated if answer.admitted is None else answer.admitted
        waiting = tuple(w for w in gated if not answer.injects or w not in admitted)
        now += tuple(w for w in gated if w not in waiting)
    done = (Undo(now, halted.rolled),) if now else ()
    if not waiting or answer is None:
        return _Undoing(done)
    shown = listed([str(w) for w in waiting], 5)
    said = (
        f" Bringing {shown} off the revision its restart made waits for the injector (going "
        f"back creates pods, which must come with the proxy): {answer.why}."
    )
    return _Undoing(done, said, answer.retry_after)


def _refused_failures(
    refused: tuple[tuple[Workload, str], ...], policy: RolloutPolicy
) -> tuple[tuple[str, str], ...]:
    """Workloads whose new pods admission refused for ``progressDeadline``, as failures."""
    deadline = go_seconds(policy.progress_deadline)
    return tuple(
        (str(w), f"new pods refused for {deadline} (no progress): {why}") for w, why in refused
    )


def _halt(
    observed: Observed,
    policy: RolloutPolicy,
    failed: tuple[tuple[str, str], ...],
    refused: tuple[tuple[Workload, str], ...] = (),
) -> Step:
    """Stop the attempt: recorded in status (any leader reads it back), one Warning on the
    LinkerdConfig and one on each failed workload (a restarted one, or one whose new pods
    were ``refused`` before any restart). With ``onFailure: Rollback`` and a completed
    configuration to return to, the record starts a rollback instead: the ConfigMap goes back,
    so the namespace's new pods are admitted again."""
    config, config_hash, version = observed.config, observed.config_hash, observed.version
    # Kept under the attempt (the configuration the spec asks for), whichever was rolled out:
    # the next reconcile looks it up there, with the guard's hold or without.
    record = health.halt_record(
        config, observed.attempt, failed, rfc3339(observed.now), rolled=config_hash
    )
    listed = failures(f"{w}: {why}" for w, why in failed)
    reason, outcome, after, back_hash = Phase.HALTED, "halted", "", None
    if policy.rollback:
        back_to, why_not = observed.back_to
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
    undo = _Undoing()
    if reason == Phase.HALTED:
        # Whether going back creates pods is read on the halt's next pass; until then it
        # is taken to, so the injector is asked first.
        gone = {w: True for w in undo_targets(record) if str(w) in observed.restarted}
        undo = _undo(record, observed, gone)
        actions.extend(undo.actions)
    involved = {str(w): w for w, _ in refused}
    involved.update((key, w) for key, (_, w) in observed.restarted.items())
    for workload_name, why in failed:
        workload = involved[workload_name]
        did = "did not come back healthy"
        if workload_name not in observed.restarted:
            did = "its new pods were refused"
        actions.append(
            Emit(
                "Warning",
                reason,
                f"{did} on proxy {version} (LinkerdConfig {name}): {why}; the rollout is {then}",
                workload,
            )
        )
    return Step(
        RolloutOutcome(
            *observed.counts, reason, f"{said}.{undo.waits} {RESUME_HINT}",
            requeue_after=undo.requeue_after if reason == Phase.HALTED else 0.5,
            parts={"halt": record},
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
        outcome, message=outcome.message + first.note, parts={**outcome.parts, **first.parts}
    )
    actions = _canary_actions(first)
    if not first.holds or first.phase is None:
        return Step(said, actions)
    return Step(
        replace(
            said,
            reason=first.phase,
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
        parts=status or {},
    )


def _completed_but_skipped(
    observed: Observed, ready: list[Workload], skipped: list[tuple[Workload, str]]
) -> Json:
    """``status.lastCompleted`` when everything this rollout could restart is done and
    healthy (the gate is open), only skipped workloads left: they do not count against
    the configuration, so it is what a later rollback may return to."""
    if ready or not skipped:
        return {}
    completed = rollback.completed_record(
        observed.config, observed.config_hash, rfc3339(observed.now)
    )
    return {} if completed is None else {"completed": completed}
