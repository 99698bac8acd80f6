"""Rate limiters that decide how long a failed item waits before it is retried.

Modelled on client-go's ``util/workqueue/default_rate_limiters.go``: a per-item exponential
backoff protects the API server from one hot, always-failing object, and an overall token
bucket protects it from many objects failing at once. The controller default takes the
larger of the two delays.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

T = TypeVar("T", bound=Hashable)
T_contra = TypeVar("T_contra", bound=Hashable, contravariant=True)

__all__ = [
    "BucketRateLimiter",
    "ItemExponentialFailureRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "default_controller_rate_limiter",
]


class RateLimiter(Protocol[T_contra]):
    """Decides retry delays; the work queue calls ``when`` once per rate-limited add."""

    def when(self, item: T_contra) -> float:
        """Record one more failure of ``item`` and return the seconds to wait before retrying."""
        ...

    def forget(self, item: T_contra) -> None:
        """Stop tracking ``item`` (it succeeded, or was given up on) so its backoff resets."""
        ...

    def retries(self, item: T_contra) -> int:
        """How many times ``item`` has been rate limited since it was last forgotten."""
        ...


class ItemExponentialFailureRateLimiter(Generic[T]):
    """Per-item backoff of ``base * 2**failures`` seconds, never more than ``cap``."""

    def __init__(self, base: float = 0.005, cap: float = 1000.0) -> None:
        if base < 0 or cap < 0:
            raise ValueError("base and cap must be non-negative")
        self._base = base
        self._cap = cap
        # Keys: items passed to when() since last forgotten; value: how many times (>= 1).
        self._failures: dict[T, int] = {}

    def when(self, item: T) -> float:
        exp = self._failures.get(item, 0)
        self._failures[item] = exp + 1
        try:
            # ldexp is exact for powers of two and raises instead of silently losing range.
            backoff = math.ldexp(self._base, exp)
        except OverflowError:
            return self._cap
        return min(backoff, self._cap)

    def forget(self, item: T) -> None:
        self._failures.pop(item, None)

    def retries(self, item: T) -> int:
        return self._failures.get(item, 0)


class BucketRateLimiter:
    """Token bucket shared by all items, with ``rate.Limiter.Reserve().Delay()`` semantics.

    Every call reserves a token, even one that is not available yet, and returns how long
    until it will be; later callers queue behind earlier reservations, so a burst of failures
    is spread out at ``qps`` instead of retried all at once.
    """

    def __init__(
        self, qps: float = 10.0, burst: int = 100, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if qps <= 0 or not math.isfinite(qps):
            raise ValueError("qps must be positive and finite")
        if burst < 1:
            raise ValueError("burst must be at least 1")
        self._qps = qps
        self._burst = float(burst)
        self._clock = clock
        self._tokens = self._burst  # may go negative: that is the debt of future reservations
        self._last = clock()

    def when(self, item: object) -> float:
        now = self._clock()
        elapsed = max(0.0, now - self._last)  # a clock stepping back refills nothing
        tokens = min(self._burst, self._tokens + elapsed * self._qps) - 1.0
        self._tokens = tokens
        self._last = now
        return -tokens / self._qps if tokens < 0 else 0.0

    def forget(self, item: object) -> None:
        """Nothing to forget: the bucket is shared and not keyed by item."""

    def retries(self, item: object) -> int:
        return 0


class MaxOfRateLimiter(Generic[T]):
    """Waits for the slowest of several limiters; every limiter sees every failure."""

    def __init__(self, *limiters: RateLimiter[T]) -> None:
        if not limiters:
            raise ValueError("at least one rate limiter is required")
        self._limiters = limiters

    def when(self, item: T) -> float:
        # Call every limiter (no short-circuit): each must record the failure.
        return max([limiter.when(item) for limiter in self._limiters])

    def forget(self, item: T) -> None:
        for limiter in self._limiters:
            limiter.forget(item)

    def retries(self, item: T) -> int:
        return max(limiter.retries(item) for limiter in self._limiters)


def default_controller_rate_limiter() -> RateLimiter[Hashable]:
    """client-go's DefaultControllerRateLimiter: 5 ms doubling to 1000 s, and 10 qps/100 burst."""
    return MaxOfRateLimiter[Hashable](
        ItemExponentialFailureRateLimiter(base=0.005, cap=1000.0),
        BucketRateLimiter(qps=10.0, burst=100),
    )
