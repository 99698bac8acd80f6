"""The rollout's pure step, from tables: one row per rule of a pass (``rollout.machine``'s
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
from linkerd_config.linkerd.mesh import RolloutPlan, Workload
from linkerd_config.linkerd.rollout import actions, health, machine, rollback
from linkerd_config.linkerd.rollout.actions import (
    AskInjector,
    Emit,
    Halted,
    Restart,
    RestartResult,
    Restore,
    RolledBack,
)
from linkerd_config.linkerd.rollout.health import HaltState, Restarted
from linkerd_config.linkerd.rollout.observe import (
    HEALTH_RECHECK,
    AnchorHold,
    GoingBack,
    InjectorAnswer,
    Observed,
)
from linkerd_config.linkerd.rollout.phase import Phase
from linkerd_config.linkerd.rollout.policy import RolloutPolicy
from linkerd_config.linkerd.rollout.record import Completed, Halt
from linkerd_config.linkerd.spec import canary_section
from linkerd_config.linkerd.spec.crd import HALT_FIELD, LAST_COMPLETED_FIELD
from linkerd_config.linkerd.status.plan import passes

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
REFUSED_A = InjectorAnswer(
    False, "a dry-run create of a's pod was refused", held="NewPodsRefused",
    refused=((A, "403 Forbidden: denied by policy p"),),
)  # fmt: skip
REFUSED_AB = InjectorAnswer(
    False, "a dry-run create of a's pod was refused", held="NewPodsRefused",
    refused=((A, "403 Forbidden: denied by policy p"), (B, "403 Forbidden: denied by policy p")),
)  # fmt: skip
ONLY_B = InjectorAnswer(True, "", admitted=(B,))
DOWN = InjectorAnswer(
    False, "Linkerd's proxy injector did not inject a dry-run pod of a", held="InjectorDown",
    retry_after=2.0,
)  # fmt: skip
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
    skipped: tuple[tuple[Workload, str], ...] = ()
    injector: InjectorAnswer | None = None
    status: Json = field(default_factory=dict)
    halt: HaltState = NO_HALT
    anchors: AnchorHold | None = None
    refused_since: dict[Workload, float] = field(default_factory=dict)
    """Since when each workload's new pods have been refused."""
    completed_at: float | None = None
    on_revision: dict[Workload, bool] = field(default_factory=dict)
    """Of a halt's failed Deployments, those still on our restart's revision, each with
    whether going back creates pods."""


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
        restarted, row.restart_times, ready=tuple(ready), skipped=row.skipped,
        injector=row.injector, anchors=row.anchors,
        refused_since={str(w): at for w, at in row.refused_since.items()},
        completed_at=row.completed_at, back_to=rollback.target(config(row.status), HASH),
        halted_revisions=row.on_revision,
    )  # fmt: skip


POLICY = RolloutPolicy(batch=2, interval=10.0, progress_deadline=60.0)
BACK = replace(POLICY, rollback=True)


def halted_record() -> Halt:
    return health.halt_record(config(), HASH, [(str(A), "refused")], "2026-11-27T00:00:00Z")


def read_back(record: Halt) -> HaltState:
    """``record`` as the next pass reads it from status once spec.rollout alone was edited
    (``paused: true``): a new generation, the same configuration hash."""
    edited = config({HALT_FIELD: record.to_json()})
    edited["metadata"]["generation"] += 1
    edited["spec"]["rollout"] = {"paused": True}
    return health.halt_state(edited, HASH)


def kinds(actions: tuple[Any, ...]) -> list[str]:
    return [type(a).__name__ for a in actions]


# -- the forward pass ---------------------------------------------------------------------------

FORWARD: list[tuple[str, Row, RolloutPolicy, Phase, list[str]]] = [
    (
        "a halt in force restarts nothing; going back that only scales down is done at once",
        Row(stale=(A, B), halt=HaltState(halted_record(), frozenset(), {}), on_revision={A: False}),
        POLICY,
        Phase.HALTED,
        ["Undo"],
    ),
    (
        "a halt with every failed Deployment back: nothing to do",
        Row(stale=(A, B), halt=HaltState(halted_record(), frozenset(), {})),
        POLICY,
        Phase.HALTED,
        [],
    ),
    (
        "Mesh: going back that creates pods asks the injector first (issue 60, item 4.5)",
        Row(stale=(A, B), halt=HaltState(halted_record(), frozenset(), {}), on_revision={A: True}),
        POLICY,
        Phase.HALTED,
        ["AskInjector"],
    ),
    (
        "Mesh: the injector injects there: the halted revision is gone back from",
        Row(
            stale=(A, B),
            halt=HaltState(halted_record(), frozenset(), {}),
            on_revision={A: True},
            injector=YES,
        ),
        POLICY,
        Phase.HALTED,
        ["Undo"],
    ),
    (
        "Mesh: the injector down: going back waits for it",
        Row(
            stale=(A, B),
            halt=HaltState(halted_record(), frozenset(), {}),
            on_revision={A: True},
            injector=DOWN,
        ),
        POLICY,
        Phase.HALTED,
        [],
    ),
    (
        "an edit of spec.rollout alone ends no halt (issue 58, finding 4)",
        Row(stale=(A, B), halt=read_back(halted_record()), on_revision={A: False}),
        replace(POLICY, paused=True),
        Phase.HALTED,
        ["Undo"],
    ),
    (
        "a failed restart halts; its revision gone back from once the injector is asked",
        Row(stale=(B,), restarted={A: (FAILED, NOW - 5)}),
        POLICY,
        Phase.HALTED,
        ["Halted", "Emit", "AskInjector", "Emit"],
    ),
    (
        "a failed restart halts; the injector injects: its revision gone back from",
        Row(stale=(B,), restarted={A: (FAILED, NOW - 5)}, injector=YES),
        POLICY,
        Phase.HALTED,
        ["Halted", "Emit", "Undo", "Emit"],
    ),
    (
        "a failed restart halts; the injector down: going back waits",
        Row(stale=(B,), restarted={A: (FAILED, NOW - 5)}, injector=DOWN),
        POLICY,
        Phase.HALTED,
        ["Halted", "Emit", "Emit"],
    ),
    (
        "past its deadline fails too",
        Row(stale=(A,), restarted={A: (WAITING, NOW - 61)}, injector=YES),
        POLICY,
        Phase.HALTED,
        ["Halted", "Emit", "Undo", "Emit"],
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
        Row(stale=(B,), restarted={A: (FAILED, NOW - 5)}, injector=YES),
        BACK,
        Phase.HALTED,
        ["Halted", "Emit", "Undo", "Emit"],
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
        "injecting it into one of the two asked: only that one restarts",
        Row(stale=(A, B, C), injector=ONLY_B),
        POLICY,
        Phase.ROLLING,
        ["Restart"],
    ),
    (
        "new pods refused, within the deadline: a wait, nothing restarts",
        Row(stale=(A, B), injector=REFUSED_A, refused_since={A: NOW - 59}),
        POLICY,
        Phase.WAITING_FOR_INJECTOR,
        [],
    ),
    (
        "new pods refused for the deadline: no progress, the attempt halts",
        Row(stale=(A, B), injector=REFUSED_A, refused_since={A: NOW - 60}),
        POLICY,
        Phase.HALTED,
        ["Halted", "Emit", "Emit"],
    ),
    (
        "one refused for the deadline, another refused only now: it alone fails the attempt",
        Row(stale=(A, B), injector=REFUSED_AB, refused_since={A: NOW - 60, B: NOW}),
        POLICY,
        Phase.HALTED,
        ["Halted", "Emit", "Emit"],
    ),
    (
        "two refused, neither for the deadline: a wait",
        Row(stale=(A, B), injector=REFUSED_AB, refused_since={A: NOW - 59, B: NOW - 30}),
        POLICY,
        Phase.WAITING_FOR_INJECTOR,
        [],
    ),
    (
        "new pods refused for the deadline, onFailure: Rollback: it rolls back",
        Row(stale=(A, B), injector=REFUSED_A, refused_since={A: NOW - 60}, status=COMPLETED),
        BACK,
        Phase.ROLLING_BACK,
        ["Halted", "Emit", "Emit"],
    ),
    (
        "new pods refused for the deadline, nothing completed to go back to: halted",
        Row(stale=(A, B), injector=REFUSED_A, refused_since={A: NOW - 60}),
        BACK,
        Phase.HALTED,
        ["Halted", "Emit", "Emit"],
    ),
    (
        "completed, then a restarted workload unhealthy: no failure of the completed rollout",
        Row(stale=(A,), ready=(), restarted={A: (WAITING, NOW - 1000)}, completed_at=NOW - 500),
        POLICY,
        Phase.ROLLING,
        [],
    ),
    (
        "completed, then a pod without the proxy: re-meshed once the injector injects there",
        Row(stale=(A,), ready=(A,), restarted={A: (FAILED, NOW - 1000)}, completed_at=NOW - 500),
        POLICY,
        Phase.ROLLING,
        ["AskInjector"],
    ),
    (
        "completed, re-meshing: the injector injects it there, so it restarts",
        Row(
            stale=(A,),
            ready=(A,),
            restarted={A: (FAILED, NOW - 1000)},
            completed_at=NOW - 500,
            injector=YES,
        ),
        POLICY,
        Phase.ROLLING,
        ["Restart"],
    ),
    (
        "completed, a re-mesh that fails is this attempt's evidence: halted",
        Row(stale=(A,), restarted={A: (FAILED, NOW - 5)}, completed_at=NOW - 500, injector=YES),
        POLICY,
        Phase.HALTED,
        ["Halted", "Emit", "Undo", "Emit"],
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
        Row(
            stale=(A, B),
            halt=HaltState(halted_record(), frozenset(), {}),
            anchors=HELD_NO_BUNDLE,
            on_revision={A: False},
        ),
        POLICY,
        Phase.HALTED,
        ["Undo"],
    ),
    (
        "only skipped ones left",
        Row(stale=(A,), ready=(), skipped=((A, "paused (spec.paused)"),)),
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
    decided = machine.step(seen, row.halt, policy)
    assert decided.outcome.reason == phase, decided.outcome.message
    assert kinds(decided.actions) == actions
    assert seen.config == before  # decided, not done: nothing it was given changed
    assert machine.step(seen, row.halt, policy) == decided  # and decided alike again


def test_the_batch_is_the_first_ones_the_pass_may_restart() -> None:
    decided = machine.step(observed(Row(stale=(A, B, C), injector=YES)), NO_HALT, POLICY)
    assert decided.restart == Restart((A, B))
    asked = machine.step(observed(Row(stale=(A, B, C))), NO_HALT, POLICY)
    assert (
        asked.ask == AskInjector((A, B)) and asked.restart is None
    )  # Mesh: no answer, no restart; asked about exactly the batch it would restart
    only_b = machine.step(observed(Row(stale=(A, B, C), injector=ONLY_B)), NO_HALT, POLICY)
    assert only_b.restart == Restart((B,))  # A's own answer was not a yes: A waits


def test_refused_new_pods_fail_the_attempt_naming_the_workload_and_the_refusal() -> None:
    row = Row(stale=(A, B), injector=REFUSED_A, refused_since={A: NOW - 60}, status=COMPLETED)
    decided = machine.step(observed(row), NO_HALT, BACK)
    (halted,) = [a for a in decided.actions if isinstance(a, Halted)]
    assert halted.rolling_back_to == OLD_HASH
    assert halted.record.failed == (
        f"{A}: new pods refused for 1m0s (no progress): 403 Forbidden: denied by policy p",
    )
    assert halted.record.rollback is not None and halted.record.rollback.workloads == ()
    on_a = [a for a in decided.actions if isinstance(a, Emit) and a.involved == A]
    assert len(on_a) == 1 and on_a[0].message.startswith("its new pods were refused")
    waiting = machine.step(
        observed(replace(row, refused_since={A: NOW - 20})), NO_HALT, BACK
    ).outcome
    assert "the rollout fails in 40s (progressDeadline 1m0s)" in waiting.message
    assert waiting.requeue_after is not None and waiting.requeue_after <= 40


def test_each_workload_is_refused_on_its_own_clock() -> None:
    """Found by the stateful test: A refused a minute, B only now; the halt named both
    "refused for 1m0s". Only A failed the attempt; B is no evidence yet."""
    row = Row(stale=(A, B), injector=REFUSED_AB, refused_since={A: NOW - 60, B: NOW})
    decided = machine.step(observed(row), NO_HALT, POLICY)
    (halted,) = [a for a in decided.actions if isinstance(a, Halted)]
    assert [f.split(":", 1)[0] for f in halted.record.failed] == [str(A)]
    assert [a.involved for a in decided.actions if isinstance(a, Emit) and a.involved] == [A]


def test_a_halt_is_recorded_with_its_evidence_and_said_on_each_failed_workload() -> None:
    row = Row(stale=(B,), restarted={A: (FAILED, NOW - 5)}, injector=YES)
    decided = machine.step(observed(row), NO_HALT, POLICY)
    halted, on_config, undo, on_workload = decided.actions
    assert isinstance(halted, Halted) and halted.rolling_back_to is None
    assert halted.record.failed == (f"{A}: new pods refused: no",)
    assert decided.outcome.status[HALT_FIELD] == halted.record.to_json()
    assert isinstance(on_config, Emit) and on_config.involved is None
    assert isinstance(on_workload, Emit) and on_workload.involved == A
    assert decided.outcome.requeue_after is None  # only a person moves it on
    # Issue 58, finding 2: the halt stops the revision the failed restart made.
    assert undo == actions.Undo((A,), HASH)
    in_force = HaltState(halted.record, frozenset(), {})
    again = machine.step(
        observed(replace(row, on_revision={A: True})), in_force, POLICY
    )  # and so does every pass of the halt after it (a new leader's first included)
    assert again.outcome.reason == Phase.HALTED and again.actions == (undo,)


def test_going_back_that_creates_pods_waits_for_the_injector_and_says_so() -> None:
    """Issue 60, item 4.5, on real proxies: the injector scaled to nothing mid-rollout, the
    restart's next pod came without the proxy, the rollout halted, and the halt's undo, sent
    at once, had the previous ReplicaSet make every pod again without the proxy. Now the
    undo waits, said in status and looked at again soon; scaling down alone does not."""
    row = Row(stale=(B,), restarted={A: (FAILED, NOW - 5)}, injector=DOWN)
    halting = machine.step(observed(row), NO_HALT, POLICY)
    assert not any(isinstance(a, actions.Undo) for a in halting.actions)
    assert "waits for the injector" in halting.outcome.message, halting.outcome.message
    assert halting.outcome.requeue_after == DOWN.retry_after
    (halted,) = [a for a in halting.actions if isinstance(a, Halted)]
    in_force = HaltState(halted.record, frozenset(), {})
    waiting = machine.step(observed(replace(row, on_revision={A: True})), in_force, POLICY)
    assert waiting.actions == () and waiting.outcome.requeue_after == DOWN.retry_after
    assert f"Bringing {A} off the revision its restart made waits" in waiting.outcome.message
    back = machine.step(
        observed(replace(row, on_revision={A: True}, injector=YES)), in_force, POLICY
    )
    assert back.actions == (actions.Undo((A,), HASH),) and back.outcome.requeue_after is None
    scaling_down = machine.step(observed(replace(row, on_revision={A: False})), in_force, POLICY)
    assert scaling_down.actions == (actions.Undo((A,), HASH),)


def test_a_rollback_starts_from_the_last_completed_configuration() -> None:
    row = Row(stale=(B,), restarted={A: (FAILED, NOW - 5)}, status=COMPLETED)
    halted = machine.step(observed(row), NO_HALT, BACK).actions[0]
    assert isinstance(halted, Halted) and halted.rolling_back_to == OLD_HASH
    assert halted.record.to_json()["rollback"] == {
        "toHash": OLD_HASH, "toGeneration": 3, "phase": "RollingBack", "workloads": [str(A)],
    }  # fmt: skip


def test_done_records_the_configuration_as_the_last_completed() -> None:
    decided = machine.step(observed(Row(restarted={A: (DONE, NOW - 5)})), NO_HALT, POLICY)
    assert decided.outcome.status["lastCompleted"]["configHash"] == HASH


def test_the_pace_says_how_long_until_the_next_pass() -> None:
    row = Row(stale=(B,), restarted={A: (DONE, NOW - 4)}, restart_times=(NOW - 4,))
    decided = machine.step(observed(row), NO_HALT, POLICY)
    assert decided.outcome.requeue_after == pytest.approx(6.0)


def test_after_the_restarts_refusals_are_said_and_counted_out() -> None:
    seen = observed(Row(stale=(A, B), injector=YES))
    decided = machine.step(seen, NO_HALT, POLICY)
    results = [RestartResult(A, done=True), RestartResult(B, refused="409 Conflict: changed")]
    after = machine.after_restarts(seen, POLICY, decided, results, 0)
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
    target = Completed(OLD_HASH, 3, "")
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
        "injecting it into one of the two due (each asked in its own namespace): that one",
        GoingBack(OLD_HASH, "edge-26.8.3", (A, B), (A, B), due=(A, B)),
        ONLY_B,
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
    decided = machine.step(seen, record, BACK)
    assert decided.outcome.reason == phase, decided.outcome.message
    assert kinds(decided.actions) == actions


def test_a_rollback_asks_about_the_due_ones_and_restores_only_those_injected() -> None:
    # Issue 58, finding 1, in a rollback: one answer stood for every workload restored.
    two = GoingBack(OLD_HASH, "edge-26.8.3", (A, B, C), (A, B, C), due=(A, B))
    asked = machine.step(rolling_back(two)[0], rolling_back(two)[1], BACK)
    assert asked.ask == AskInjector((A, B))  # the due ones, not every pending one
    seen, record = rolling_back(two, ONLY_B)
    assert machine.step(seen, record, BACK).restore == Restore((B,), OLD_HASH)


def test_a_rollback_restores_at_the_rollouts_pace() -> None:
    """Issue 61, finding 1: a rollback brought 12 workloads back at once past
    ``maxRestartsPerPass: 4``. It restores a pass's worth (``BACK``: 2), a pass's interval
    (10 s) after its last restores."""
    many = tuple(Workload("Deployment", "a", n) for n in "cdefgh")
    back = GoingBack(OLD_HASH, "edge-26.8.3", many, many, due=many)
    seen, record = rolling_back(back)
    assert machine.step(seen, record, BACK).ask == AskInjector(many[:2])
    seen, record = rolling_back(back, YES)
    assert machine.step(seen, record, BACK).restore == Restore(many[:2], OLD_HASH)
    seen, record = rolling_back(replace(back, since_restores=4.0), YES)
    decided = machine.step(seen, record, BACK)
    assert decided.restore is None and decided.ask is None
    assert decided.outcome.reason == Phase.ROLLING_BACK
    assert decided.outcome.requeue_after == pytest.approx(6.0)
    seen, record = rolling_back(replace(back, since_restores=10.0), YES)
    assert machine.step(seen, record, BACK).restore == Restore(many[:2], OLD_HASH)


def test_an_edit_of_spec_rollout_alone_ends_no_rollback() -> None:
    """Issue 58, finding 4: ``paused: true`` mid-rollback read as a new attempt dropped the
    rollback (``rolloutHalt`` null, ``RollingOut``), and the ConfigMap went back to the
    failed proxy. Read back after the edit, the rollback is in force, and kept in status."""
    seen, record = rolling_back(GONE_BACK, YES)
    assert record.halted is not None
    edited = read_back(record.halted)
    decided = machine.step(seen, edited, replace(BACK, paused=True))
    assert decided.outcome.reason == Phase.ROLLING_BACK, decided.outcome.message
    assert {**edited.status, **decided.outcome.status} == {HALT_FIELD: record.halted.to_json()}


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
    decided = machine.step(replace(seen, anchors=anchors), record, BACK)
    assert decided.outcome.reason == phase, decided.outcome.message
    assert kinds(decided.actions) == actions
    assert decided.outcome.status[HALT_FIELD] == record.halted.to_json()  # type: ignore[union-attr]
    if phase == Phase.ANCHOR_HELD:
        assert HELD in decided.outcome.message


def test_a_removal_held_names_what_it_waits_for_in_every_phase() -> None:
    """The Progress rule under a hold: what the rollout says names the hold while it rolls
    the bundle held on to, and once that is done."""
    rolling = machine.step(
        observed(Row(stale=(A, B, C), injector=YES, anchors=HELD_ON_THIS)), NO_HALT, POLICY
    )
    done = machine.step(
        observed(Row(restarted={A: (DONE, NOW - 5)}, anchors=HELD_ON_THIS)), NO_HALT, POLICY
    )
    held = machine.step(
        observed(Row(stale=(A, B, C), injector=YES, anchors=HELD_NO_BUNDLE)), NO_HALT, POLICY
    )
    assert machine.HELD_ELSEWHERE in rolling.outcome.message
    assert machine.HELD_ELSEWHERE in done.outcome.message
    assert HELD in held.outcome.message and HASH in held.outcome.message


def test_a_rollback_restores_onto_its_target_and_says_how_many_came_back() -> None:
    seen, record = rolling_back(replace(GONE_BACK, pending=(A, B), due=(A,)), YES)
    decided = machine.step(seen, record, BACK)
    assert decided.restore == Restore((A,), OLD_HASH)
    after = machine.after_restores(decided, replace(GONE_BACK, pending=(A, B)), 1)
    assert after.outcome.message.endswith("brought 1 of 2 workload(s) back onto it")


def test_a_finished_rollback_is_recorded_and_the_stuck_warning_said_once() -> None:
    seen, record = rolling_back(HEALTHY_BACK)
    done = machine.step(seen, record, BACK)
    (finished, _) = done.actions
    assert isinstance(finished, RolledBack)
    assert finished.record.rollback is not None
    assert finished.record.rollback.phase == Phase.ROLLED_BACK
    stuck = replace(HEALTHY_BACK, brought_back=(Restarted(str(A), NOW - 61, WAITING),))
    seen, record = rolling_back(stuck)
    (warning,) = machine.step(seen, record, BACK).actions
    assert isinstance(warning, Emit) and warning.once
    assert machine.step(seen, record, BACK).outcome.requeue_after == HEALTH_RECHECK


# -- the passes plan lists ----------------------------------------------------------------------


def test_the_passes_take_the_pending_workloads_in_order_a_batch_at_a_time() -> None:
    ws = tuple(Workload("Deployment", "a", n) for n in "abcde")
    found, then = passes(observed(Row(stale=ws)), NO_HALT, POLICY)
    assert [p.workloads for p in found] == [ws[:2], ws[2:4], ws[4:]]
    assert not any(p.canary for p in found)
    assert then.reason == Phase.DONE
    assert passes(observed(Row()), NO_HALT, POLICY)[0] == []


def test_the_canary_passes_first_then_the_rest_once_it_was_stable() -> None:
    ws = tuple(Workload("Deployment", "a", n) for n in "abcde")
    spec = canary_section.CanarySpec.of({"count": 1, "selector": "app=c", "stableFor": "10m"})
    seen = replace(observed(Row(stale=ws)), labels={w: ({"app": w.name}, {}) for w in ws})
    found, then = passes(seen, NO_HALT, replace(POLICY, canary=spec))
    assert [(p.workloads, p.canary) for p in found] == [
        ((ws[2],), True),
        ((ws[0], ws[1]), False),
        ((ws[3], ws[4]), False),
    ]
    assert then.reason == Phase.DONE


def test_skipped_workloads_are_in_no_pass_and_a_paused_rollout_in_none() -> None:
    row = Row(stale=(A, B), ready=(B,), skipped=((A, "paused (spec.paused)"),))
    found, _ = passes(observed(row), NO_HALT, POLICY)
    assert [p.workloads for p in found] == [(B,)]
    paused, then = passes(observed(row), NO_HALT, replace(POLICY, paused=True))
    assert paused == [] and then.reason == Phase.PAUSED


def test_a_re_mesh_that_comes_back_healthy_moves_the_completion_on() -> None:
    # Issue 58, build item 2: re-meshed once per completion. Healthy again, the completion's
    # time moves on, so the re-meshed workload is not judged again on its old restart.
    completed = {**COMPLETED["lastCompleted"], "configHash": HASH, "at": "2026-11-01T00:00:00Z"}
    row = Row(restarted={A: (DONE, NOW - 5)}, completed_at=NOW - 500,
              status={"lastCompleted": completed})  # fmt: skip
    decided = machine.step(observed(row), NO_HALT, POLICY)
    assert decided.outcome.reason == Phase.DONE
    again = decided.outcome.status[LAST_COMPLETED_FIELD]
    assert again["configHash"] == HASH and again["at"] != completed["at"]
    settled = machine.step(
        observed(replace(row, restarted={A: (DONE, NOW - 1000)})), NO_HALT, POLICY
    )
    assert settled.outcome.reason == Phase.DONE and not settled.outcome.status
