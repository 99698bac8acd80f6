"""The machinery's two delay primitives and what is built from them.

* **Exponential backoff** (:func:`exponential_delay`): ``base * 2**failures`` capped. The work
  queue's per-item limiter keys it by item; the informer's :class:`JitteredBackoff` is the
  same for one watch, with jitter so many informers do not reconnect in step.
* **Token bucket** (:class:`TokenBucket`, golang.org/x/time/rate's ``Limiter``): the work
  queue's :class:`BucketRateLimiter` *reserves* tokens (a delay, never a refusal); the event
  recorder's spam filter *tries* one (refused when empty).

The work-queue limiters follow client-go's ``util/workqueue/default_rate_limiters.go``: a
per-item exponential backoff protects the API server from one hot, always-failing object, an
overall token bucket from many objects failing at once; the default takes the larger delay.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

T = TypeVar("T", bound=Hashable)
T_contra = TypeVar("T_contra", bound=Hashable, contravariant=True)

__all__ = [
    "BucketRateLimiter",
    "ItemExponentialFailureRateLimiter",
    "JitteredBackoff",
    "MaxOfRateLimiter",
    "RateLimiter",
    "TokenBucket",
    "default_controller_rate_limiter",
    "exponential_delay",
]


def exponential_delay(base: float, failures: int, cap: float) -> float:
    """``base * 2**failures``, never more than ``cap`` (and no overflow for huge counts)."""
    try:
        # ldexp is exact for powers of two and raises instead of silently losing range.
        return min(math.ldexp(base, failures), cap)
    except OverflowError:
        return cap


class TokenBucket:
    """``burst`` tokens, refilled at ``qps`` per second; starts full. Time is passed in.

    Invariant: ``tokens <= burst``; it goes negative only through :meth:`reserve`, as the debt
    of reservations handed out ahead of time, which later callers queue behind.
    """

    def __init__(self, qps: float, burst: int, now: float) -> None:
        self.check(qps, burst)
        self.qps = qps
        self.burst = burst
        self.tokens = float(burst)
        self._last = now

    @staticmethod
    def check(qps: float, burst: int) -> None:
        """Refuse a bucket that could never hand out a token (for callers that make them later)."""
        if qps <= 0 or not math.isfinite(qps):
            raise ValueError("qps must be positive and finite")
        if burst < 1:
            raise ValueError("burst must be at least 1")

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._last)  # a clock stepping back refills nothing
        self.tokens = min(float(self.burst), self.tokens + elapsed * self.qps)
        self._last = now

    def allow(self, now: float) -> bool:
        """Take a token if one is there (``Limiter.Allow``)."""
        self._refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def reserve(self, now: float) -> float:
        """Take a token, available or not, and return the seconds until it is (``Reserve``)."""
        self._refill(now)
        self.tokens -= 1.0
        return -self.tokens / self.qps if self.tokens < 0 else 0.0

    def cancel(self) -> None:
        """Give back a token :meth:`reserve` took for what never happened
        (``Reservation.Cancel``); never beyond ``burst``."""
        self.tokens = min(float(self.burst), self.tokens + 1.0)


class JitteredBackoff:
    """One retrying thing's delay: exponential (0.8 s doubling to 30 s, as client-go's
    reflector), +/- ``jitter``, at least the server's Retry-After (itself capped)."""

    def __init__(
        self,
        initial: float = 0.8,
        maximum: float = 30.0,
        jitter: float = 0.25,
        rng: random.Random | None = None,
        *,
        max_retry_after: float = 300.0,
    ) -> None:
        self.initial = initial
        self.maximum = maximum
        self.jitter = jitter
        self.max_retry_after = max_retry_after
        self.failures = 0
        self._rng = rng or random.Random()

    def next(self, retry_after: float | None = None) -> float:
        """The delay before the next attempt; counts one more failure."""
        base = exponential_delay(self.initial, self.failures, self.maximum)
        self.failures += 1
        delay = base * (1.0 + self._rng.uniform(-self.jitter, self.jitter))
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_retry_after))
        return delay

    def reset(self) -> None:
        self.failures = 0


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
        return exponential_delay(self._base, exp, self._cap)

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
        self._clock = clock
        self._bucket = TokenBucket(qps, burst, clock())

    def when(self, item: object) -> float:
        return self._bucket.reserve(self._clock())

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
