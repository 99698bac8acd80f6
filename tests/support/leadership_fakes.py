"""A leadership for the manager's shutdown tests: no API server, a release that takes time."""

from __future__ import annotations

import asyncio


class SlowRelease:
    """A leadership (as ``Manager`` needs one) that leads at once and, when cancelled, takes
    ``release_seconds`` to release its Lease, as a slow API server makes it; ``released``
    says whether it got there."""

    def __init__(self, release_seconds: float) -> None:
        self.release_seconds = release_seconds
        self.leadership_lost = asyncio.Event()
        self.released = False

    async def run(self) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(self.release_seconds)  # the release request
            self.released = True
            self.leadership_lost.set()

    async def wait_for_leadership(self, timeout: float | None = None) -> None:
        return None
