"""The demo's real-data-plane act can fail: its last word is the client's own count over the
rollout, and a failed request is printed and fails the demo (``make demo`` exits non-zero)."""

from __future__ import annotations

import datetime

import pytest

from tests.support import demo
from tests.support.mesh_traffic import Counts, Failure

WHEN = datetime.datetime(2026, 12, 3, 16, 55, tzinfo=datetime.UTC)


def counts(total: int, failures: tuple[Failure, ...] = ()) -> Counts:
    failed = len(failures)
    return Counts(total, total - failed, failed, failures, WHEN, WHEN)


def test_no_request_failed_ends_on_the_count(capsys: pytest.CaptureFixture[str]) -> None:
    demo.report_traffic(counts(100), counts(930))
    assert capsys.readouterr().out.rstrip().endswith("830 requests, 0 failed" + demo.RESET)


def test_a_failed_request_is_printed_and_fails_the_demo(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lost = Failure(WHEN, "http://server-1.shop.svc.cluster.local:8080/hello", "status 502")
    with pytest.raises(RuntimeError, match="1 of the client's requests failed"):
        demo.report_traffic(counts(100), counts(930, (lost,)))
    out = capsys.readouterr().out
    assert "16:55:00.000000 http://server-1.shop.svc.cluster.local:8080/hello: status 502" in out
    assert "830 requests, 1 failed" in out
