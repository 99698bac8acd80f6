"""The bounded tables of shared records (``kube.shared_records``), from tables of cases."""

from __future__ import annotations

import pytest

from linkerd_config.kube.shared_records import SharedRecords


def make(value: str) -> list[str]:
    return [value]


@pytest.mark.parametrize(
    ("recent", "keys", "kept"),
    [
        # A table that starts again when full: a churn stops the sharing, never grows it.
        (False, ["a", "b", "c"], ["c"]),
        (False, ["a", "b", "a"], ["a", "b"]),
        # A table of recent records: the least recently used goes; a hit is recent again.
        (True, ["a", "b", "c"], ["b", "c"]),
        (True, ["a", "b", "a", "c"], ["a", "c"]),
    ],
)
def test_a_full_table_keeps_what_its_policy_says(
    recent: bool, keys: list[str], kept: list[str]
) -> None:
    table: SharedRecords[str, list[str]] = SharedRecords(2, recent=recent)
    for key in keys:
        table.get(key, lambda k=key: make(k))
    assert len(table) == len(kept)
    for key in kept:
        first = table.get(key, lambda: make("made again"))
        assert first == [key]  # kept: not made again


def test_a_key_kept_gives_the_same_object_and_is_not_made_again() -> None:
    table: SharedRecords[tuple[str, str], list[str]] = SharedRecords(8)
    made: list[str] = []

    def once() -> list[str]:
        made.append("x")
        return ["x"]

    first = table.get(("a", "b"), once)
    assert table.get(("a", "b"), once) is first
    assert made == ["x"]


def test_a_table_holds_at_least_one() -> None:
    with pytest.raises(ValueError, match="at least one"):
        SharedRecords(0)
