"""The rollout's pure step, from tables: one row per rule of a pass (``rollout_machine``'s
docstring), what was observed and recorded in, the phase and the actions out. No executor, no
caches: what ``step`` decides is all there is to see."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
import pytest

from linkerd_config.kube.resource import Json
from linkerd_config.kube.rollout_status import Verdict
from linkerd_config.linkerd import canary, rollback, rollout_machine, workload_health
from linkerd_config.linkerd.halt_record import Halt
from linkerd_config.linkerd.rollout import RolloutPlan, Workload
from linkerd_config.linkerd.rollout_machine import (
    HEALTH_RECHECK,
    AnchorHold,
    AskInjector,
    Emit,
    GoingBack,
    Halted,
    InjectorAnswer,
    Observed,
    Restart,
    RestartResult,
    Restore,
    RolledBack,
)
from linkerd_config.linkerd.rollout_phase import Phase
from linkerd_config.linkerd.rollout_policy import RolloutPolicy
from linkerd_config.linkerd.workload_health import HaltState, Restarted

HASH, OLD_HASH, VERSION = "new0000000000000", "old0000000000000", "edge-26.8.5"
NOW = 1_000_000.0
A, B, C = (Workload("Deployment", "apps", n) for n in "abc")
DONE, WAITING, FAILED = (
    Verdict("done"),
    Verdict("waiting", "1 of 2 updated"),
    Verdict("failed", "new pods refused: no"),
)
YES = InjectorAnswer(True, "Linkerd's injector injects it")
NOT_YET = InjectorAnswer(False, "the proxy injector does not inject it yet", retry_after=1.5)
NO_HALT = HaltState(None, frozenset(), {})
HELD = "ConfigMap linkerd/linkerd-identity-trust-roots not written: ... 4 meshed pod(s) ..."
HELD_NO_BUNDLE = AnchorHold(HELD, None)
HELD_ON_THIS = AnchorHold(HELD, HASH)
HELD_ON_ANOTHER = AnchorHold(HELD, OLD_HASH)


def config(status: Json | None = None) -> Json:
    return {
        "metadata": {"name": "lc", "generation": 4, "resourceVersion": "9"},
        "spec": {"proxy": {"proxyVersion": VERSION}},
        "status": status or {},
    }


COMPLETED = {
    "lastCompleted": {
        "configHash": OLD_HASH,
        "generation": 3,
        "spec": orjson.dumps({"proxy": {"proxyVersion": "edge-26.8.3"}}).decode(),
    }
}


@dataclass(frozen=True)
class Row:
    """One situation: what the executor saw and status records."""

    stale: tuple[Workload, ...] = ()
    restarted: dict[Workload, tuple[Verdict, float]] = field(default_factory=dict)
    restart_times: tuple[float, ...] = ()
    ready: tuple[Workload, ...] | None = None
    """What the pre-flight lets restart (default: the stale ones not restarted)."""
    skipped: tuple[tuple[str, str], ...] = ()
    injector: InjectorAnswer | None = None
    status: Json = field(default_factory=dict)
    halt: HaltState = NO_HALT
    anchors: AnchorHold | None = None


def observed(row: Row) -> Observed:
    restarted = {
        str(w): (Restarted(str(w), at, verdict), w) for w, (verdict, at) in row.restarted.items()
    }
    ready = (
        row.ready
        if row.ready is not None
        else tuple(w for w in row.stale if w not in row.restarted)
    )
    return Observed(
        config(row.status), HASH, VERSION, NOW,
        RolloutPlan(len(row.stale), row.stale, {w: {"stale": 1} for w in row.stale}),
        restarted, row.restart_times, 0, None, None,
        lambda: (list(ready), list(row.skipped)), lambda _: ({}, {}),
        injector=row.injector, anchors=row.anchors,
    )  # fmt: skip


POLICY = RolloutPolicy(batch=2, interval=10.0, progress_deadline=60.0)
BACK = replace(POLICY, rollback=True)


def halted_record() -> Halt:
    return workload_health.halt_record(
        config(), HASH, [(str(A), "refused")], "2026-11-27T00:00:00Z"
    )


def kinds(actions: tuple[Any, ...]) -> list[str]:
    return [type(a).__name__ for a in actions]


# -- the forward pass ---------------------------------------------------------------------------

FORWARD: list[tuple[str, Row, RolloutPolicy, Phase, list[str]]] = [
    (
        "a halt in force restarts nothing",
        Row(stale=(A, B), halt=HaltState(halted_record(), frozenset(), {})),
        POLICY,
        Phase.HALTED,
        [],
    ),
    (
        "a failed restart halts",
        Row(stale=(B,), restarted={A: (FAILED, NOW - 5)}),
        POLICY,
        Phase.HALTED,
        ["Halted", "Emit", "Emit"],
    ),
    (
        "past its deadline fails too",
        Row(stale=(A,), restarted={A: (WAITING, NOW - 61)}),
        POLICY,
        Phase.HALTED,
        ["Halted", "Emit", "Emit"],
    ),
    (
        "onFailure: Rollback goes back",
        Row(stale=(B,), restarted={A: (FAILED, NOW - 5)}, status=COMPLETED),
        BACK,
        Phase.ROLLING_BACK,
        ["Halted", "Emit", "Emit"],
    ),
    (
        "with nothing to go back to it halts",
        Row(stale=(B,), restarted={A: (FAILED, NOW - 5)}),
        BACK,
        Phase.HALTED,
        ["Halted", "Emit", "Emit"],
    ),
    (
        "nothing stale, every restart healthy",
        Row(restarted={A: (DONE, NOW - 5)}),
        POLICY,
        Phase.DONE,
        [],
    ),
    (
        "a restart not healthy yet holds the pass",
        Row(stale=(A, B), restarted={A: (WAITING, NOW - 5)}),
        POLICY,
        Phase.ROLLING,
        [],
    ),
    ("paused", Row(stale=(A, B)), replace(POLICY, paused=True), Phase.PAUSED, []),
    ("the injector is asked first", Row(stale=(A, B, C)), POLICY, Phase.ROLLING, ["AskInjector"]),
    (
        "not injecting it yet: nothing restarts",
        Row(stale=(A, B), injector=NOT_YET),
        POLICY,
        Phase.WAITING_FOR_INJECTOR,
        [],
    ),
    (
        "injecting it: a batch restarts",
        Row(stale=(A, B, C), injector=YES),
        POLICY,
        Phase.ROLLING,
        ["Restart"],
    ),
    (
        "paced: too soon after the last pass",
        Row(stale=(B,), restarted={A: (DONE, NOW - 5)}, restart_times=(NOW - 5,)),
        POLICY,
        Phase.ROLLING,
        [],
    ),
    (
        "Trust: a removal held with no bundle to hold on to: nothing restarts",
        Row(stale=(A, B, C), injector=YES, anchors=HELD_NO_BUNDLE),
        POLICY,
        Phase.ANCHOR_HELD,
        [],
    ),
    (
        "Trust: a removal held, another configuration holds every anchor: nothing restarts",
        Row(stale=(A, B, C), injector=YES, anchors=HELD_ON_ANOTHER),
        POLICY,
        Phase.ANCHOR_HELD,
        [],
    ),
    (
        "Trust: a removal held, this one holds every anchor: the holders come onto it",
        Row(stale=(A, B, C), injector=YES, anchors=HELD_ON_THIS),
        POLICY,
        Phase.ROLLING,
        ["Restart"],
    ),
    (
        "Trust: the bundle held on to rolled out: done, the hold still said",
        Row(restarted={A: (DONE, NOW - 5)}, anchors=HELD_ON_THIS),
        POLICY,
        Phase.DONE,
        [],
    ),
    (
        "Trust: a halt stays a halt while a removal is held",
        Row(stale=(A, B), halt=HaltState(halted_record(), frozenset(), {}), anchors=HELD_NO_BUNDLE),
        POLICY,
        Phase.HALTED,
        [],
    ),
    (
        "only skipped ones left",
        Row(stale=(A,), ready=(), skipped=((str(A), "paused (spec.paused)"),)),
        POLICY,
        Phase.ROLLING,
        [],
    ),
]


@pytest.mark.parametrize(
    ("row", "policy", "phase", "actions"),
    [pytest.param(*case[1:], id=case[0]) for case in FORWARD],
)
def test_a_pass_of_a_rollout(
    row: Row, policy: RolloutPolicy, phase: Phase, actions: list[str]
) -> None:
    seen = observed(row)
    before = copy.deepcopy(seen.config)
    decided = rollout_machine.step(seen, row.halt, policy)
    assert decided.outcome.reason == phase, decided.outcome.message
    assert kinds(decided.actions) == actions
    assert seen.config == before  # decided, not done: nothing it was given changed
    assert rollout_machine.step(seen, row.halt, policy) == decided  # and decided alike again


def test_the_batch_is_the_first_ones_the_pass_may_restart() -> None:
    decided = rollout_machine.step(observed(Row(stale=(A, B, C), injector=YES)), NO_HALT, POLICY)
    assert decided.restart == Restart((A, B))
    asked = rollout_machine.step(observed(Row(stale=(A, B, C))), NO_HALT, POLICY)
    assert (
        asked.ask == AskInjector((A, B, C)) and asked.restart is None
    )  # Mesh: no answer, no restart


def test_a_halt_is_recorded_with_its_evidence_and_said_on_each_failed_workload() -> None:
    row = Row(stale=(B,), restarted={A: (FAILED, NOW - 5)})
    decided = rollout_machine.step(observed(row), NO_HALT, POLICY)
    halted, on_config, on_workload = decided.actions
    assert isinstance(halted, Halted) and halted.rolling_back_to is None
    assert halted.record.failed == (f"{A}: new pods refused: no",)
    assert decided.outcome.status[workload_health.HALT_FIELD] == halted.record.to_json()
    assert isinstance(on_config, Emit) and on_config.involved is None
    assert isinstance(on_workload, Emit) and on_workload.involved == A
    assert decided.outcome.requeue_after is None  # only a person moves it on


def test_a_rollback_starts_from_the_last_completed_configuration() -> None:
    row = Row(stale=(B,), restarted={A: (FAILED, NOW - 5)}, status=COMPLETED)
    halted = rollout_machine.step(observed(row), NO_HALT, BACK).actions[0]
    assert isinstance(halted, Halted) and halted.rolling_back_to == OLD_HASH
    assert halted.record.to_json()["rollback"] == {
        "toHash": OLD_HASH, "toGeneration": 3, "phase": "RollingBack", "workloads": [str(A)],
    }  # fmt: skip


def test_done_records_the_configuration_as_the_last_completed() -> None:
    decided = rollout_machine.step(observed(Row(restarted={A: (DONE, NOW - 5)})), NO_HALT, POLICY)
    assert decided.outcome.status["lastCompleted"]["configHash"] == HASH


def test_the_pace_says_how_long_until_the_next_pass() -> None:
    row = Row(stale=(B,), restarted={A: (DONE, NOW - 4)}, restart_times=(NOW - 4,))
    decided = rollout_machine.step(observed(row), NO_HALT, POLICY)
    assert decided.outcome.requeue_after == pytest.approx(6.0)


def test_after_the_restarts_refusals_are_said_and_counted_out() -> None:
    seen = observed(Row(stale=(A, B), injector=YES))
    decided = rollout_machine.step(seen, NO_HALT, POLICY)
    results = [RestartResult(A, done=True), RestartResult(B, refused="409 Conflict: changed")]
    after = rollout_machine.after_restarts(seen, POLICY, decided, results, 0)
    assert after.outcome.restarted_total == 1
    assert (
        f"1 restart(s) refused, retried next pass: {B}: 409 Conflict: changed"
        in after.outcome.message
    )
    assert after.actions == decided.actions


# -- a rollback in force ------------------------------------------------------------------------


def rolling_back(
    back: GoingBack, injector: InjectorAnswer | None = None, phase: str = "RollingBack"
) -> tuple[Observed, HaltState]:
    target = rollback.Completed(OLD_HASH, 3, "")
    record = rollback.start(halted_record(), target, [A])
    record = record.rolled_back() if phase == "RolledBack" else record
    seen = replace(observed(Row(status=COMPLETED)), going_back=back, injector=injector)
    return seen, HaltState(record, frozenset(), {})


GONE_BACK = GoingBack(OLD_HASH, "edge-26.8.3", (A,), (A,), due=(A,))
HEALTHY_BACK = GoingBack(
    OLD_HASH, "edge-26.8.3", (), (A,), brought_back=(Restarted(str(A), NOW - 5, DONE),)
)

BACKWARD: list[tuple[str, GoingBack, InjectorAnswer | None, str, Phase, list[str]]] = [
    (
        "the injector is asked for the old proxy",
        GONE_BACK,
        None,
        "RollingBack",
        Phase.ROLLING_BACK,
        ["AskInjector"],
    ),
    (
        "not injecting it: nothing is restored",
        GONE_BACK,
        NOT_YET,
        "RollingBack",
        Phase.ROLLING_BACK,
        [],
    ),
    (
        "tried moments ago: not again yet",
        replace(GONE_BACK, due=(), next_try=3.0),
        YES,
        "RollingBack",
        Phase.ROLLING_BACK,
        [],
    ),
    (
        "injecting it: the due ones are restored",
        GONE_BACK,
        YES,
        "RollingBack",
        Phase.ROLLING_BACK,
        ["Restore"],
    ),
    (
        "all back and healthy",
        HEALTHY_BACK,
        None,
        "RollingBack",
        Phase.ROLLED_BACK,
        ["RolledBack", "Emit"],
    ),
    (
        "back, not healthy yet",
        replace(HEALTHY_BACK, brought_back=(Restarted(str(A), NOW - 5, WAITING),)),
        None,
        "RollingBack",
        Phase.ROLLING_BACK,
        [],
    ),
    (
        "back, past the deadline",
        replace(HEALTHY_BACK, brought_back=(Restarted(str(A), NOW - 61, WAITING),)),
        None,
        "RollingBack",
        Phase.ROLLBACK_STUCK,
        ["Emit"],
    ),
    ("rolled back stays so", HEALTHY_BACK, None, "RolledBack", Phase.ROLLED_BACK, []),
    (
        "nothing to go back to any more",
        replace(GONE_BACK, to_hash=HASH),
        None,
        "RollingBack",
        Phase.HALTED,
        [],
    ),
]


@pytest.mark.parametrize(
    ("back", "injector", "record_phase", "phase", "actions"),
    [pytest.param(*case[1:], id=case[0]) for case in BACKWARD],
)
def test_a_pass_of_a_rollback(
    back: GoingBack,
    injector: InjectorAnswer | None,
    record_phase: str,
    phase: Phase,
    actions: list[str],
) -> None:
    seen, record = rolling_back(back, injector, record_phase)
    decided = rollout_machine.step(seen, record, BACK)
    assert decided.outcome.reason == phase, decided.outcome.message
    assert kinds(decided.actions) == actions


@pytest.mark.parametrize(
    ("anchors", "phase", "actions"),
    [
        (HELD_NO_BUNDLE, Phase.ANCHOR_HELD, []),
        (HELD_ON_THIS, Phase.ANCHOR_HELD, []),  # the failed one's: not what goes back
        (AnchorHold(HELD, OLD_HASH), Phase.ROLLING_BACK, ["Restore"]),
    ],
    ids=["no-bundle-held-on-to", "held-on-the-failed-one", "held-on-the-one-gone-back-to"],
)
def test_a_rollback_brings_back_only_onto_the_bundle_a_held_removal_keeps(
    anchors: AnchorHold, phase: Phase, actions: list[str]
) -> None:
    """The Trust rule in a rollback: while the guard holds a removal, workloads are brought
    back only onto the configuration that keeps every anchor in use; the record is kept."""
    seen, record = rolling_back(GONE_BACK, YES)
    decided = rollout_machine.step(replace(seen, anchors=anchors), record, BACK)
    assert decided.outcome.reason == phase, decided.outcome.message
    assert kinds(decided.actions) == actions
    assert decided.outcome.status[workload_health.HALT_FIELD] == record.halted.to_json()  # type: ignore[union-attr]
    if phase == Phase.ANCHOR_HELD:
        assert HELD in decided.outcome.message


def test_a_removal_held_names_what_it_waits_for_in_every_phase() -> None:
    """The Progress rule under a hold: what the rollout says names the hold while it rolls
    the bundle held on to, and once that is done."""
    rolling = rollout_machine.step(
        observed(Row(stale=(A, B, C), injector=YES, anchors=HELD_ON_THIS)), NO_HALT, POLICY
    )
    done = rollout_machine.step(
        observed(Row(restarted={A: (DONE, NOW - 5)}, anchors=HELD_ON_THIS)), NO_HALT, POLICY
    )
    held = rollout_machine.step(
        observed(Row(stale=(A, B, C), injector=YES, anchors=HELD_NO_BUNDLE)), NO_HALT, POLICY
    )
    assert rollout_machine.HELD_ELSEWHERE in rolling.outcome.message
    assert rollout_machine.HELD_ELSEWHERE in done.outcome.message
    assert HELD in held.outcome.message and HASH in held.outcome.message


def test_a_rollback_restores_onto_its_target_and_says_how_many_came_back() -> None:
    seen, record = rolling_back(replace(GONE_BACK, pending=(A, B), due=(A,)), YES)
    decided = rollout_machine.step(seen, record, BACK)
    assert decided.restore == Restore((A,), OLD_HASH)
    after = rollout_machine.after_restores(decided, replace(GONE_BACK, pending=(A, B)), 1)
    assert after.outcome.message.endswith("brought 1 of 2 workload(s) back onto it")


def test_a_finished_rollback_is_recorded_and_the_stuck_warning_said_once() -> None:
    seen, record = rolling_back(HEALTHY_BACK)
    done = rollout_machine.step(seen, record, BACK)
    (finished, _) = done.actions
    assert isinstance(finished, RolledBack)
    assert finished.record.rollback is not None
    assert finished.record.rollback.phase == Phase.ROLLED_BACK
    stuck = replace(HEALTHY_BACK, brought_back=(Restarted(str(A), NOW - 61, WAITING),))
    seen, record = rolling_back(stuck)
    (warning,) = rollout_machine.step(seen, record, BACK).actions
    assert isinstance(warning, Emit) and warning.once
    assert rollout_machine.step(seen, record, BACK).outcome.requeue_after == HEALTH_RECHECK


# -- the passes plan lists ----------------------------------------------------------------------


def test_the_passes_take_the_pending_workloads_in_order_a_batch_at_a_time() -> None:
    ws = tuple(Workload("Deployment", "a", n) for n in "abcde")
    found, then = rollout_machine.passes(observed(Row(stale=ws)), NO_HALT, POLICY)
    assert [p.workloads for p in found] == [ws[:2], ws[2:4], ws[4:]]
    assert not any(p.canary for p in found)
    assert then.reason == Phase.DONE
    assert rollout_machine.passes(observed(Row()), NO_HALT, POLICY)[0] == []


def test_the_canary_passes_first_then_the_rest_once_it_was_stable() -> None:
    ws = tuple(Workload("Deployment", "a", n) for n in "abcde")
    spec = canary.CanarySpec.of({"count": 1, "selector": "app=c", "stableFor": "10m"})
    labels = {str(w): {"app": w.name} for w in ws}
    seen = replace(observed(Row(stale=ws)), labels=lambda w: (labels[str(w)], {}))
    found, then = rollout_machine.passes(seen, NO_HALT, replace(POLICY, canary=spec))
    assert [(p.workloads, p.canary) for p in found] == [
        ((ws[2],), True),
        ((ws[0], ws[1]), False),
        ((ws[3], ws[4]), False),
    ]
    assert then.reason == Phase.DONE


def test_skipped_workloads_are_in_no_pass_and_a_paused_rollout_in_none() -> None:
    row = Row(stale=(A, B), ready=(B,), skipped=((str(A), "paused (spec.paused)"),))
    found, _ = rollout_machine.passes(observed(row), NO_HALT, POLICY)
    assert [p.workloads for p in found] == [(B,)]
    paused, then = rollout_machine.passes(observed(row), NO_HALT, replace(POLICY, paused=True))
    assert paused == [] and then.reason == Phase.PAUSED
