"""Polling with a deadline: integration tests wait for conditions, never for fixed times."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T | None]],
    *,
    timeout: float = 60.0,
    interval: float = 0.1,
    what: str = "condition",
) -> T:
    """Return the first truthy result of ``probe``; fail with the last error after timeout."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            result = await probe()
            if result:
                return result
            last = result
        except Exception as exc:  # reported if the deadline passes
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout:.0f}s (last: {last!r})")
        await asyncio.sleep(interval)


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """``eventually`` for a plain condition, checked every millisecond."""

    async def probe() -> bool:
        return condition()

    await eventually(probe, timeout=timeout, interval=0.001, what="the condition")
