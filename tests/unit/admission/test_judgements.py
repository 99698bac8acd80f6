"""``validation.Judgements``: reconcile's remembered validation. It must answer exactly what
``validate`` answers at that moment, for any sequence of objects and times, and judge an
object again only when what ``judge`` reads of it changed or a trust anchor's validity
boundary passed."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkerd_config.linkerd.admission import validation
from linkerd_config.linkerd.admission.validation import Judgement, Judgements, judge
from tests.support.anchors import bundle, trust_anchor
from tests.support.samples import sample

Json = dict[str, Any]
T0 = datetime.datetime(2030, 6, 1, tzinfo=datetime.UTC)
HOUR = datetime.timedelta(hours=1)
ANCHOR = "spec.global.identityContext.trustAnchorsPEM"

# Anchors whose validity boundaries fall inside the times the tests move through.
NOT_YET = trust_anchor("not-yet", valid_from=T0 + 2 * HOUR, valid_until=T0 + 900 * HOUR)
EXPIRING = trust_anchor("expiring", valid_from=T0 - 900 * HOUR, valid_until=T0 + 3 * HOUR)
LASTING = trust_anchor("lasting", valid_from=T0 - 900 * HOUR, valid_until=T0 + 9000 * HOUR)


def config(anchor: str | None = LASTING, *, name: str = "mesh", **changes: Any) -> Json:
    obj = copy.deepcopy(sample("edge_19.12.3.yaml"))
    obj["metadata"] = {"name": name, "uid": f"uid-{name}", "generation": 1}
    identity = obj["spec"]["global"]["identityContext"]
    if anchor is None:
        identity.pop("trustAnchorsPEM", None)
    else:
        identity["trustAnchorsPEM"] = anchor
    for key, value in changes.items():
        obj["spec"]["proxy"][key] = value
    return obj


def expected(obj: Json, now: datetime.datetime) -> list[validation.FieldError]:
    """What ``validate`` answers at ``now``: ``judge`` itself, as imported (the fixture below
    counts only the calls ``Judgements`` makes)."""
    return list(judge(obj, now=now).errors)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime.datetime:
        return self.now


@pytest.fixture
def judged(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names ``judge`` was asked about, in order."""
    calls: list[str] = []

    def counting(obj: Json, *args: Any, **kwargs: Any) -> Judgement:
        calls.append(obj["metadata"]["name"])
        return judge(obj, *args, **kwargs)

    monkeypatch.setattr(validation, "judge", counting)
    return calls


def test_the_same_object_is_judged_once(judged: list[str]) -> None:
    verdicts = Judgements(Clock())
    first = verdicts.validate(config())
    for _ in range(5):
        assert verdicts.validate(config()) == first == []
    assert judged == ["mesh"]


@pytest.mark.parametrize(
    ("what", "change"),
    [
        ("spec", lambda o: o["spec"]["proxy"].update(logLevel="warn,linkerd=info")),
        ("annotation", lambda o: o["metadata"].update(annotations={"a": "b"})),
        ("apiVersion", lambda o: o.update(apiVersion="config.linkerd.io/v1alpha2")),
        ("uid (recreated)", lambda o: o["metadata"].update(uid="another")),
        ("created", lambda o: o["metadata"].update(creationTimestamp="2030-01-01T00:00:00Z")),
    ],
)
def test_what_judge_reads_changing_judges_again(judged: list[str], what: str, change: Any) -> None:
    verdicts = Judgements(Clock())
    verdicts.validate(config())
    changed = config()
    change(changed)
    assert verdicts.validate(changed) == expected(changed, T0), what
    assert judged == ["mesh", "mesh"], what


@pytest.mark.parametrize(
    ("what", "change"),
    [
        ("status", lambda o: o.update(status={"observedGeneration": 1, "conditions": []})),
        ("resourceVersion", lambda o: o["metadata"].update(resourceVersion="99")),
        ("managedFields", lambda o: o["metadata"].update(managedFields=[{"manager": "x"}])),
        ("generation", lambda o: o["metadata"].update(generation=7)),
    ],
)
def test_what_judge_does_not_read_keeps_the_verdict(
    judged: list[str], what: str, change: Any
) -> None:
    verdicts = Judgements(Clock())
    verdicts.validate(config())
    changed = config()
    change(changed)
    assert verdicts.validate(changed) == []
    assert judged == ["mesh"], what


@pytest.mark.parametrize(
    ("anchor", "later", "before", "after"),
    [
        # An anchor not yet valid becomes valid at its notBefore.
        (NOT_YET, 2 * HOUR, ["is not valid before"], []),
        # One valid expires after its notAfter.
        (EXPIRING, 3 * HOUR + datetime.timedelta(seconds=1), [], ["expired on"]),
        # A bundle: the first boundary ahead counts, then the next.
        (bundle(NOT_YET, EXPIRING), 2 * HOUR, ["is not valid before"], []),
    ],
    ids=["not-yet-valid", "expiring", "bundle"],
)
def test_a_verdict_stands_until_an_anchor_boundary(
    judged: list[str], anchor: str, later: datetime.timedelta, before: list[str], after: list[str]
) -> None:
    clock = Clock()
    verdicts = Judgements(clock)

    def messages() -> list[str]:
        errors = verdicts.validate(config(anchor))
        assert errors == expected(config(anchor), clock.now)
        assert all(e.field == ANCHOR for e in errors)
        return [m for m in before + after if any(m in e.message for e in errors)]

    assert messages() == before
    clock.now = T0 + later - datetime.timedelta(seconds=2)
    assert messages() == before
    assert len(judged) == 1  # nothing passed a boundary yet
    clock.now = T0 + later
    assert messages() == after
    assert len(judged) == 2


def test_an_expired_or_absent_anchor_verdict_stands_for_ever(judged: list[str]) -> None:
    clock = Clock()
    verdicts = Judgements(clock)
    expired = trust_anchor("old", valid_from=T0 - 9 * HOUR, valid_until=T0 - HOUR)
    first = verdicts.validate(config(expired, name="expired"))
    assert [e.field for e in first] == [ANCHOR]
    verdicts.validate(config(None, name="absent"))
    clock.now = T0 + 100_000 * HOUR
    assert verdicts.validate(config(expired, name="expired")) == first
    assert verdicts.validate(config(None, name="absent")) == []
    assert judged == ["expired", "absent"]
    assert judge(config(expired), now=T0).until is None


def test_forgotten_names_are_not_kept(judged: list[str]) -> None:
    verdicts = Judgements(Clock())
    for n in range(3):
        verdicts.validate(config(name=f"c{n}"))
    assert len(verdicts) == 3
    verdicts.forget("c1")
    verdicts.forget("never-seen")
    assert len(verdicts) == 2
    verdicts.validate(config(name="c1"))
    assert judged == ["c0", "c1", "c2", "c1"]


@pytest.mark.parametrize(
    "obj",
    [
        {"metadata": {"name": "x"}, "spec": {"proxy": {"n": float("nan")}}},  # orjson: NaN ok
        {"metadata": {"name": "x"}, "spec": {"proxy": {1: "int key"}}},
        {"metadata": {"name": "x"}, "spec": {"proxy": {"set": {1, 2}}}},
        {"metadata": "not a map"},
        {"spec": {}},
    ],
    ids=["nan", "int-key", "set", "bad-metadata", "no-metadata"],
)
def test_what_is_not_json_is_judged_every_time_and_never_raises(obj: Json) -> None:
    verdicts = Judgements(Clock())
    for _ in range(2):
        assert verdicts.validate(obj) == expected(obj, T0)


# -- the property: remembered or not, the same answer ----------------------------------------

VARIANTS = [
    config(),
    config(NOT_YET),
    config(EXPIRING),
    config(bundle(NOT_YET, EXPIRING)),
    config(None),
    config(logLevel="not a filter ["),
    config(EXPIRING, name="other"),
    config(NOT_YET, name="other"),
]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(range(len(VARIANTS))),
            st.integers(min_value=0, max_value=4 * 3600),  # seconds the clock moves first
            st.booleans(),  # forget the object's name first
        ),
        max_size=25,
    )
)
def test_remembered_verdicts_equal_validate_at_that_moment(
    steps: list[tuple[int, int, bool]],
) -> None:
    clock = Clock()
    verdicts = Judgements(clock)
    for index, seconds, forget in steps:
        clock.now += datetime.timedelta(seconds=seconds)
        obj = VARIANTS[index]
        if forget:
            verdicts.forget(obj["metadata"]["name"])
        assert verdicts.validate(obj) == expected(obj, clock.now)
