"""Awaiting several things at once, leaving nothing behind."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def all_of(*aws: Awaitable[T]) -> list[T]:
    """Every awaitable's result, in order, run concurrently, as ``asyncio.gather`` gives
    them; but the first failure cancels the others, and they are awaited before it is
    raised (``gather`` leaves them running, owned by no one: a batch of writes would go on
    after the step that made them had failed). The caller's cancellation
    cancels them all, as ``gather``'s does."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        pending = [task for task in tasks if not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
