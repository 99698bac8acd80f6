"""What a controller wrote and its caches have not shown yet: client-go's
``ControllerExpectations``, for values.

A reconcile that decides a write acts on it at once, but the next reconcile may run on a
cache from before it: it must read the write it expects, not what the cache still shows (a
second halt, a clock started twice). Each expectation is the value written and the
resourceVersion of the object it was decided on; the caller says when the cache shows it
(``seen``). Like client-go's, an expectation lapses after ``ttl`` (five minutes): a write
lost, or read back where no caller looked, is no reason to distrust the cache for ever. What
it does not know: whether the cache shows the value (the caller's rule), nor anything of
another process (a new term clears it all).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

V = TypeVar("V")

EXPECTATIONS_TTL = 300.0
"""Seconds an expectation is kept at most (client-go's ``ExpectationsTimeout``)."""


@dataclass(frozen=True)
class Expected(Generic[V]):
    value: V
    read_at: object
    """The resourceVersion of the object the write was decided on (None: not said)."""
    at: float
    """When it was expected (the clock of ``Expectations``)."""


class Expectations(Generic[V]):
    """Values written and not yet read back, by key, each until ``seen`` or ``ttl``."""

    def __init__(
        self, ttl: float = EXPECTATIONS_TTL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.clock = clock
        self._expected: dict[Hashable, Expected[V]] = {}

    def expect(self, key: Hashable, value: V, read_at: object = None) -> None:
        self._expected[key] = Expected(value, read_at, self.clock())

    def get(self, key: Hashable) -> V | None:
        """The value expected under ``key``, unless it lapsed."""
        found = self._expected.get(key)
        if found is None:
            return None
        if self.clock() - found.at > self.ttl:
            del self._expected[key]
            return None
        return found.value

    def unread(self, key: Hashable, version: object) -> V | None:
        """The value expected under ``key`` while the object it was decided on is still the
        one cached (``version``, its resourceVersion): a cache that moved on since may show
        it, and is read instead."""
        value = self.get(key)
        return value if value is not None and self._expected[key].read_at == version else None

    def seen(self, key: Hashable) -> None:
        """The cache shows it (or something since): the cache is believed again."""
        self._expected.pop(key, None)

    def forget(self, owner: Callable[[Hashable], bool] | None = None) -> None:
        """Drop the expectations whose key ``owner`` accepts (all of them by default)."""
        for key in [k for k in self._expected if owner is None or owner(k)]:
            del self._expected[key]
