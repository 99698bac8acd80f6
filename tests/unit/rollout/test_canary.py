"""``spec.rollout.canary``'s decisions, as tables: which workloads are the canary (the first
``count`` it selects, by its namespace and workload selectors, in the rollout's order; never a
bare pod), what a pass may restart, when the canary is stable (every one of it healthy for
``stableFor``, the clock kept in status and started again when one is not healthy, or the
canary's workloads or the resume annotation changed), its passing (once, for the configuration),
what status says, and the spec's validation in both formats."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from linkerd_config.kube.labels import LabelSelector
from linkerd_config.kube.resource import Json, rfc3339, unix_time
from linkerd_config.kube.rollout_status import Verdict
from linkerd_config.linkerd.admission.validation import validate
from linkerd_config.linkerd.mesh import Workload
from linkerd_config.linkerd.rollout import canary
from linkerd_config.linkerd.rollout.health import Restarted
from linkerd_config.linkerd.rollout.phase import Phase
from linkerd_config.linkerd.rollout.record import RESUME_ANNOTATION, CanaryRecord, fields
from linkerd_config.linkerd.spec import canary_section
from linkerd_config.linkerd.spec.canary_section import CanarySpec
from linkerd_config.linkerd.spec.crd import (
    CANARY_FIELD,
    CANARY_MAX_RECORDED,
    RolloutSpec,
)
from tests.support.samples import sample

NOW = 1_800_000_000.0
HASH = "h1"


def dep(ns: str, name: str) -> Workload:
    return Workload("Deployment", ns, name)


A, B, C = dep("shop", "api"), dep("shop", "web"), dep("cart", "web")
POD = Workload("Pod", "shop", "solo")
LABELS: dict[Workload, tuple[dict[str, str], dict[str, str]]] = {
    A: ({"app": "api"}, {"env": "prod"}),
    B: ({"app": "web", "tier": "front"}, {"env": "prod"}),
    C: ({"app": "web"}, {"env": "staging"}),
}


def spec(count: int = 1, ns: str = "", sel: str = "", stable_for: float = 60.0) -> CanarySpec:
    return CanarySpec(count, LabelSelector.parse(ns), LabelSelector.parse(sel), stable_for)


TODO = sorted([A, B, C, POD])
REST = sorted([A, C])
"""What is left to restart once B is the canary."""


# -- choosing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("the_spec", "so_far", "forgiven", "restarted", "todo", "names", "restart"),
    [
        # The first pass: the first `count` selected, in the rollout's (sorted) order.
        (spec(), [], (), (), TODO, [str(C)], [C]),
        (spec(2), [], (), (), TODO, [str(C), str(A)], [C, A]),
        (spec(sel="app=web"), [], (), (), TODO, [str(C)], [C]),
        (spec(ns="env=prod", sel="app=web"), [], (), (), TODO, [str(B)], [B]),
        (spec(ns="kubernetes.io/metadata.name=shop"), [], (), (), TODO, [str(A)], [A]),
        (spec(sel="tier in (front,back)"), [], (), (), TODO, [str(B)], [B]),
        # Fewer match than count: those that do; none: none.
        (spec(5, sel="app=web"), [], (), (), TODO, [str(C), str(B)], [C, B]),
        (spec(sel="app=none"), [], (), (), TODO, [], []),
        # A bare pod, or a workload whose labels are not known, is never one.
        (spec(), [], (), (), [POD], [], []),
        (spec(), [], (), (), [dep("other", "x")], [], []),
        # Chosen before and restarted: kept, nothing more to restart.
        (spec(), [str(B)], (), [str(B)], REST, [str(B)], []),
        # Restarted for this configuration, never named: the canary all the same.
        (spec(), [], (), [str(B)], REST, [str(B)], []),
        # Chosen, not restarted yet, still to restart: restarted now.
        (spec(), [str(B)], (), (), TODO, [str(B)], [B]),
        # Chosen, neither restarted nor restartable any more: dropped, another chosen.
        (spec(), [str(B)], (), (), REST, [str(C)], [C]),
        # A forgiven one (resumed after it failed) does not count: another is chosen.
        (spec(), [str(B)], (str(B),), [str(B)], REST, [str(B), str(C)], [C]),
        # count raised after the first pass: grown.
        (spec(2), [str(B)], (), [str(B)], REST, [str(B), str(C)], [C]),
    ],
)  # fmt: skip
def test_which_workloads_are_the_canary(
    the_spec: CanarySpec,
    so_far: list[str],
    forgiven: tuple[str, ...],
    restarted: tuple[str, ...] | list[str],
    todo: list[Workload],
    names: list[str],
    restart: list[Workload],
) -> None:
    found = canary.choose(the_spec, so_far, frozenset(forgiven), todo, LABELS, restarted)
    assert found == (sorted(names), restart)


# -- deciding --------------------------------------------------------------------------------


def config(generation: int = 1, token: str = "", record: Json | None = None) -> Json:
    meta: Json = {"name": "cfg", "generation": generation}
    if token:
        meta["annotations"] = {RESUME_ANNOTATION: token}
    return {"metadata": meta, "status": {} if record is None else {CANARY_FIELD: record}}


def record(
    names: list[Workload], since: float | None = None, generation: int = 1, **more: Any
) -> Json:
    found: Json = {
        "configHash": HASH,
        "generation": generation,
        "resumeToken": "",
        "workloads": sorted(str(w) for w in names),
    }
    if since is not None:
        found["healthySince"] = rfc3339(since, micro=True)
    return {**found, **more}


def typed(stored: Json) -> CanaryRecord:
    found = CanaryRecord.parse(stored)
    assert found is not None and found.to_json() == stored  # one parser, one writer
    return found


def done(*workloads: Workload) -> list[Restarted]:
    return [Restarted(str(w), NOW - 300, Verdict("done")) for w in workloads]


def waiting(*workloads: Workload) -> list[Restarted]:
    return [Restarted(str(w), NOW - 5, Verdict("waiting", "0 of 1 updated")) for w in workloads]


OFF, PASSED = (None, False), (None, True)
CANARY, UNMATCHED = (Phase.CANARY, False), (Phase.CANARY_UNMATCHED, False)
"""What a pass's canary is expected to be: its phase (None: it holds nothing), and passed."""

PASSED_RECORD = record([B], NOW - 500, passedAt=rfc3339(NOW - 400, micro=True))


@pytest.mark.parametrize(
    ("the_spec", "cfg", "restarted", "forgiven", "todo", "phase", "restart", "said", "since",
     "requeue"),
    [
        # Off: everything as before; a record left by an earlier canary is removed.
        (None, config(), [], (), TODO, OFF, TODO, "", None, None),
        # The first pass: only the canary.
        (spec(sel="app=web"), config(), [], (), TODO, CANARY, [C],
         "canary: restarting deployment/cart/web first; the rest wait until it has been "
         "healthy for 1m0s", None, None),
        # No workload to restart matches: nothing restarts, and status says why.
        (spec(sel="app=none"), config(), [], (), TODO, UNMATCHED, [],
         "canary: no workload to restart matches selector 'app in (none)'; nothing is "
         "restarted until one does", None, None),
        # Restarted, not healthy yet: the rest wait, no clock.
        (spec(), config(record=record([B])), waiting(B), (), REST, CANARY, [],
         "canary: deployment/shop/web not healthy yet; the rest wait", None, None),
        # Healthy for the first time: the clock starts now.
        (spec(), config(record=record([B])), done(B), (), REST, CANARY, [],
         "canary: 1 workload(s) healthy for 0s of 1m0s (deployment/shop/web); the rest wait",
         NOW, 60.0),
        # Healthy since 40 s (status says): 20 s more.
        (spec(), config(record=record([B], NOW - 40)), done(B), (), REST, CANARY, [],
         "healthy for 40s of 1m0s", NOW - 40, 20.0),
        # Healthy for stableFor: passed, the rest may all restart.
        (spec(), config(record=record([B], NOW - 60)), done(B), (), REST, PASSED, REST,
         "canary passed: 1 workload(s) healthy for 1m0s (deployment/shop/web); the rest roll",
         NOW - 60, None),
        # Not healthy any more: the clock is dropped.
        (spec(), config(record=record([B], NOW - 40)), waiting(B), (), REST, CANARY, [],
         "not healthy yet", None, None),
        # An edit of spec.rollout since it became healthy (a new generation: paused, the
        # pace, stableFor; issue 58, finding 4) keeps the clock, and so does a selector
        # changed once the canary restarted (it is still the same workloads)...
        (spec(), config(2, record=record([B], NOW - 59)), done(B), (), REST, CANARY, [],
         "healthy for 59s", NOW - 59, 1.0),
        (spec(sel="app=none"), config(2, record=record([B], NOW - 59)), done(B), (), REST,
         CANARY, [], "healthy for 59s", NOW - 59, 1.0),
        # ... a resume starts it again (after a halt nobody watched the canary through).
        (spec(), config(token="7", record=record([B], NOW - 59)), done(B), (), REST, CANARY,
         [], "healthy for 0s", NOW, 60.0),
        # A canary grown since (count raised): the new one restarted, the clock dropped.
        (spec(2), config(record=record([B], NOW - 59)), done(B), (), REST, CANARY, [C],
         "canary: restarting deployment/cart/web first", None, None),
        # Several, one of them not healthy: no clock.
        (spec(2), config(record=record([B, C], NOW - 59)), [*done(B), *waiting(C)], (), [A],
         CANARY, [], "deployment/cart/web not healthy yet", None, None),
        # Added to a rollout under way: what was restarted so far is the canary.
        (spec(), config(), done(B, C), (), [A], CANARY, [],
         "canary: 2 workload(s) healthy for 0s of 1m0s", NOW, 60.0),
        # A record of another configuration is not this one's.
        (spec(), config(record={**record([B], NOW - 500), "configHash": "h0"}), [], (), TODO,
         CANARY, [C], "restarting deployment/cart/web", None, None),
        # Passed before, for this configuration: everything rolls, whatever happens since.
        (spec(), config(5, record=PASSED_RECORD), waiting(B), (), REST, PASSED, REST, "",
         NOW - 500, None),
    ],
)  # fmt: skip
def test_what_the_canary_lets_a_pass_do(
    the_spec: CanarySpec | None,
    cfg: Json,
    restarted: list[Restarted],
    forgiven: tuple[str, ...],
    todo: list[Workload],
    phase: tuple[Phase | None, bool],
    restart: list[Workload],
    said: str,
    since: float | None,
    requeue: float | None,
) -> None:
    stored = CanaryRecord.parse((cfg["status"] or {}).get(CANARY_FIELD))
    found = canary.decide(
        the_spec, cfg, HASH, stored, restarted, frozenset(forgiven), todo, LABELS, NOW
    )
    assert ((found.phase, found.passed), list(found.restart)) == (phase, restart)
    assert said in found.message, found.message
    assert found.holds == (phase in (CANARY, UNMATCHED) and not restart)
    assert found.requeue_after == (None if requeue is None else pytest.approx(requeue))
    written = fields(**found.parts).get(CANARY_FIELD)
    if the_spec is None:
        return
    assert written is not None and written["configHash"] == HASH
    kept = written.get("healthySince")
    assert (None if kept is None else unix_time(kept)) == (
        None if since is None else pytest.approx(since, abs=1e-3)
    )
    assert bool(written.get("passedAt")) == (phase == PASSED)
    assert found.passed_now == (phase == PASSED and not canary.passed(stored))


def test_off_removes_a_record_and_leaves_no_record_alone() -> None:
    left = canary.decide(None, config(record=record([B])), HASH, typed(record([B])), [],
                         frozenset(), TODO, LABELS, NOW)  # fmt: skip
    assert fields(**left.parts) == {CANARY_FIELD: None} and left.restart == tuple(TODO)
    clean = canary.decide(None, config(), HASH, None, [], frozenset(), TODO, LABELS, NOW)
    assert fields(**clean.parts) == {} and not clean.holds


def test_while_the_gate_waits_nothing_is_chosen_only_the_clock_dropped() -> None:
    """``todo=None``: the executor asks while restarted workloads are not healthy yet."""
    cfg = config(record=record([B], NOW - 30))
    found = canary.decide(spec(), cfg, HASH, typed(record([B], NOW - 30)), waiting(B),
                          frozenset(), None, LABELS, NOW)  # fmt: skip
    assert found.phase == Phase.CANARY and found.restart == () and found.holds
    assert "healthySince" not in fields(**found.parts)[CANARY_FIELD]
    assert found.note.startswith(" canary: deployment/shop/web not healthy yet")


def test_a_pass_remembered_by_this_process_wins_over_status_not_read_back_yet() -> None:
    passed = typed(record([B], NOW - 60, passedAt=rfc3339(NOW, micro=True)))
    assert canary.newest(typed(record([B], NOW - 60)), passed) == passed
    assert canary.newest(None, passed) == passed
    assert canary.newest(passed, None) == passed
    assert canary.newest(typed(record([B])), None) == typed(record([B]))
    other = typed({**record([B]), "configHash": "h2"})
    assert canary.newest(other, passed) == other
    # With it, the rest's restarts do not look like a larger canary: still passed.
    found = canary.decide(spec(), config(record=record([B], NOW - 60)), HASH,
                          canary.newest(typed(record([B], NOW - 60)), passed),
                          [*done(B), *waiting(A, C)], frozenset(), [], LABELS, NOW)  # fmt: skip
    assert (found.phase, found.passed) == PASSED and not found.holds and found.record == passed


def test_many_restarted_before_a_canary_was_added_are_named_up_to_the_bound() -> None:
    many = [dep("ns", f"app-{i:04d}") for i in range(CANARY_MAX_RECORDED + 5)]
    found = canary.decide(spec(), config(), HASH, None, done(*many), frozenset(), [],
                          LABELS, NOW)  # fmt: skip
    written = fields(**found.parts)[CANARY_FIELD]
    assert len(written["workloads"]) == CANARY_MAX_RECORDED
    # ... and the clock, once started, holds for the same (bounded) list.
    again = canary.decide(spec(), config(record=written), HASH, typed(written), done(*many),
                          frozenset(), [], LABELS, NOW + 30)  # fmt: skip
    assert "healthy for 30s of 1m0s" in again.message
    assert f"and {len(many) - 5} more)" in again.message  # the message names five


def test_the_summary_for_plan_and_status() -> None:
    assert canary.summary(None, None) == {"phase": canary.SUMMARY_OFF}
    found = canary.summary(spec(2, "env=prod", "app=web", 90.0), typed(PASSED_RECORD))
    assert found == {
        "phase": canary.SUMMARY_PASSED,
        "count": 2,
        "namespaceSelector": "env in (prod)",
        "selector": "app in (web)",
        "stableForSeconds": 90.0,
        "workloads": [str(B)],
        "healthySince": PASSED_RECORD["healthySince"],
        "passedAt": PASSED_RECORD["passedAt"],
    }


# -- the spec --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        (None, None),
        ({}, CanarySpec()),
        ({"count": 3, "selector": "app=web", "namespaceSelector": "env!=dev", "stableFor": "90s"},
         CanarySpec(3, LabelSelector.parse("env!=dev"), LabelSelector.parse("app=web"), 90.0)),
    ],
)  # fmt: skip
def test_the_spec_as_the_controller_reads_it(section: Any, expected: CanarySpec | None) -> None:
    rollout = {} if section is None else {"canary": section}
    assert RolloutSpec.of({"spec": {"rollout": rollout}}).canary == expected
    if expected is not None:
        assert expected.stable_for == (90.0 if section else canary_section.DEFAULT_STABLE_FOR)


def modern() -> Json:
    return {
        "apiVersion": "config.linkerd.io/v1alpha1",
        "kind": "LinkerdConfig",
        "metadata": {"name": "modern", "creationTimestamp": "2026-11-24T00:00:00Z"},
        "spec": {"proxy": {"proxyVersion": "edge-26.8.4"}},
    }


def legacy() -> Json:
    found: Json = sample("edge_19.12.3.yaml")
    return found


def with_canary(make: Any, section: Any) -> Json:
    config: Json = copy.deepcopy(make())
    config["spec"]["rollout"] = {"canary": section}
    return config


GOOD = {"count": 2, "namespaceSelector": "kubernetes.io/metadata.name in (shop)",
        "selector": "app=web,tier!=batch", "stableFor": "15s"}  # fmt: skip


@pytest.mark.parametrize("make", [modern, legacy], ids=["values", "legacy"])
@pytest.mark.parametrize(
    ("section", "field", "message"),
    [
        (GOOD, None, None),
        ({}, None, None),
        ({**GOOD, "count": 0}, "spec.rollout.canary.count", "from 1 to 1000"),
        ({**GOOD, "count": 1001}, "spec.rollout.canary.count", "from 1 to 1000"),
        ({**GOOD, "count": True}, "spec.rollout.canary.count", "whole number"),
        ({**GOOD, "count": "2"}, "spec.rollout.canary.count", "whole number"),
        ({**GOOD, "selector": "app=web!"}, "spec.rollout.canary.selector",
         "is not a label value"),
        ({**GOOD, "namespaceSelector": "a b"}, "spec.rollout.canary.namespaceSelector",
         "cannot read 'a b'"),
        ({**GOOD, "selector": 7}, "spec.rollout.canary.selector", "label selector string"),
        ({**GOOD, "stableFor": "soon"}, "spec.rollout.canary.stableFor", "is not a duration"),
        ({**GOOD, "stableFor": "0s"}, "spec.rollout.canary.stableFor", "positive duration"),
        ({**GOOD, "stableFor": "169h"}, "spec.rollout.canary.stableFor", "longer than 168h"),
        ("yes", "spec.rollout.canary", "must be an object"),
    ],
)  # fmt: skip
def test_the_spec_is_validated_in_both_formats(
    make: Any, section: Any, field: str | None, message: str | None
) -> None:
    errors = validate(with_canary(make, section))
    if field is None:
        assert errors == []
    else:
        assert [e.field for e in errors if message is not None and message in e.message] == [
            field
        ], errors
