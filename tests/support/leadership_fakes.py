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


class Toggled:
    """A leadership (as ``Manager`` needs one) that leads, loses and leads again when told:
    ``lose()`` as a missed renewal does, ``gain()`` as a won campaign."""

    def __init__(self) -> None:
        self.leadership_lost = asyncio.Event()
        self._leading = asyncio.Event()
        self._leading.set()

    async def run(self) -> None:
        await asyncio.Event().wait()

    def lose(self) -> None:
        self._leading.clear()
        self.leadership_lost.set()

    def gain(self) -> None:
        self.leadership_lost.clear()
        self._leading.set()

    async def wait_for_leadership(self, timeout: float | None = None) -> None:
        await asyncio.wait_for(self._leading.wait(), timeout)
