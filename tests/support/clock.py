"""One settable clock for unit tests: code under test takes ``clock=FakeClock()`` and reads
``clock()``; the test moves time with ``clock.now += seconds``."""

from __future__ import annotations


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
