"""The restart count a new leader continues from: only its own configuration's, never junk."""

from __future__ import annotations

import pytest

from linkerd_config.linkerd.rollout.record import Record


def test_the_same_configuration_continues_the_count() -> None:
    assert Record.read({"configHash": "abc", "evictedPods": 6}).evictions("abc") == 6


@pytest.mark.parametrize(
    "status",
    [
        {},
        {"configHash": "older", "evictedPods": 6},
        {"configHash": "abc"},
        {"configHash": "abc", "evictedPods": -1},
        {"configHash": "abc", "evictedPods": "6"},
    ],
)
def test_anything_else_starts_from_zero(status: dict[str, object]) -> None:
    assert Record.read(status).evictions("abc") == 0
