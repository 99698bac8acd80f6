"""The restart count a new leader continues from: only its own configuration's, never junk."""

from __future__ import annotations

import pytest

from linkerd_config.linkerd.controller import restarts_reported


def test_the_same_configuration_continues_the_count() -> None:
    assert restarts_reported({"configHash": "abc", "restartedWorkloads": 6}, "abc") == 6


@pytest.mark.parametrize(
    "status",
    [
        {},
        {"configHash": "older", "restartedWorkloads": 6},
        {"configHash": "abc"},
        {"configHash": "abc", "restartedWorkloads": -1},
        {"configHash": "abc", "restartedWorkloads": "6"},
    ],
)
def test_anything_else_starts_from_zero(status: dict[str, object]) -> None:
    assert restarts_reported(status, "abc") == 0
