"""``kube.resource``'s time formats: ``rfc3339`` writes what the API server writes, and
``unix_time`` reads it back (and reads nothing else), for every record kept in status or in
an annotation; ``go_duration`` prints a duration as Go does (metav1.Duration), and
``go_seconds`` whole seconds of one, as every message and the CLI say them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from linkerd_config.kube.resource import go_duration, go_seconds, rfc3339, unix_time


@given(st.floats(min_value=0, max_value=4e9, allow_nan=False), st.booleans())
def test_what_rfc3339_writes_unix_time_reads_back(when: float, micro: bool) -> None:
    read = unix_time(rfc3339(when, micro=micro))
    assert read is not None
    assert abs(read - when) < (1e-6 if micro else 1.0)


def test_a_timestamp_without_a_zone_is_utc() -> None:
    assert unix_time("1970-01-01T00:01:00") == 60.0
    assert unix_time("1970-01-01T00:01:00Z") == 60.0
    assert unix_time("1970-01-01T01:01:00+01:00") == 60.0


def test_anything_else_is_no_time() -> None:
    for junk in (None, "", "yesterday", 60, 60.0, ["1970-01-01T00:00:00Z"], "1970-13-01T00:00:00Z"):
        assert unix_time(junk) is None, junk


@pytest.mark.parametrize(
    ("nanos", "printed"),
    [
        (0, "0s"),
        (1, "1ns"),
        (1_500, "1.5µs"),
        (250_000_000, "250ms"),
        (1_500_000_000, "1.5s"),
        (90 * 10**9, "1m30s"),
        (3600 * 10**9, "1h0m0s"),
        (-(61 * 10**9), "-1m1s"),
    ],
)
def test_a_duration_prints_as_go_prints_it(nanos: int, printed: str) -> None:
    assert go_duration(nanos) == printed


def test_whole_seconds_print_as_go_prints_them() -> None:
    assert [go_seconds(s) for s in (0, 30, 90.7, 600, 3600, 3661)] == [
        "0s", "30s", "1m30s", "10m0s", "1h0m0s", "1h1m1s",
    ]  # fmt: skip
