"""``kube.expectations``: a write expected until the caller sees it, or until it lapses."""

from __future__ import annotations

from linkerd_config.kube.expectations import EXPECTATIONS_TTL, Expectations


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_expectation_holds_until_seen() -> None:
    clock = Clock()
    expected: Expectations[str] = Expectations(clock=clock)
    assert expected.get("a") is None
    expected.expect("a", "halted")
    clock.now += EXPECTATIONS_TTL - 1
    assert expected.get("a") == "halted"
    expected.seen("a")
    assert expected.get("a") is None


def test_an_expectation_lapses_after_its_ttl_as_client_gos_do() -> None:
    clock = Clock()
    expected: Expectations[str] = Expectations(ttl=10.0, clock=clock)
    expected.expect("a", "halted")
    clock.now += 10.5
    assert expected.get("a") is None
    assert expected.unread("a", None) is None


def test_unread_holds_only_while_the_object_decided_on_is_still_the_one_cached() -> None:
    expected: Expectations[str] = Expectations(clock=Clock())
    expected.expect("a", "clock started", read_at="10")
    assert expected.unread("a", "10") == "clock started"
    assert expected.unread("a", "11") is None  # the cache moved on: it shows the write, or later
    assert expected.get("a") == "clock started"  # kept: another rule may still want it


def test_forget_drops_what_its_owner_accepts_or_everything() -> None:
    expected: Expectations[int] = Expectations(clock=Clock())
    for key in [("x", 1), ("x", 2), ("y", 1)]:
        expected.expect(key, key[1])
    expected.forget(lambda key: isinstance(key, tuple) and key[0] == "x")
    assert [expected.get(k) for k in [("x", 1), ("x", 2), ("y", 1)]] == [None, None, 1]
    expected.forget()
    assert expected.get(("y", 1)) is None
