"""``all_of``: gather's results, but a failure leaves nothing running."""

from __future__ import annotations

import asyncio

import pytest

from linkerd_config.kube.concurrently import all_of


async def test_results_in_order() -> None:
    async def after(seconds: float, value: int) -> int:
        await asyncio.sleep(seconds)
        return value

    assert await all_of(after(0.02, 1), after(0.0, 2), after(0.01, 3)) == [1, 2, 3]
    assert await all_of() == []


async def test_the_first_failure_cancels_and_awaits_the_others_before_it_is_raised() -> None:
    """A rollout pass's restarts: one write times out; the others must not go on writing,
    owned by no one, after the pass failed (``asyncio.gather`` leaves them running)."""
    ended: list[str] = []

    async def slow_write(name: str) -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            ended.append(name)

    async def times_out() -> None:
        await asyncio.sleep(0.01)
        raise TimeoutError("PATCH timed out")

    with pytest.raises(TimeoutError, match="PATCH timed out"):
        await all_of(slow_write("a"), times_out(), slow_write("b"))
    assert sorted(ended) == ["a", "b"]  # cancelled, and finished, before the raise


async def test_the_callers_cancellation_cancels_them_all() -> None:
    ended: list[int] = []

    async def waits(i: int) -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            ended.append(i)

    task = asyncio.create_task(all_of(waits(1), waits(2)))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(ended) == [1, 2]
