"""Rate limiters: client-go's default numbers, with a fake clock for the token bucket."""

from __future__ import annotations

import pytest

from linkerd_config.kube.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    JitteredBackoff,
    MaxOfRateLimiter,
    TokenBucket,
    default_controller_rate_limiter,
)
from tests.support.clock import FakeClock


def test_exponential_doubles_from_5ms_per_item() -> None:
    limiter = ItemExponentialFailureRateLimiter[str]()
    assert [limiter.when("a") for _ in range(5)] == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08])
    assert limiter.retries("a") == 5
    # Another item has its own count.
    assert limiter.when("b") == pytest.approx(0.005)
    assert limiter.retries("b") == 1


def test_exponential_caps_at_1000s() -> None:
    limiter = ItemExponentialFailureRateLimiter[str]()
    delays = [limiter.when("a") for _ in range(25)]
    # 0.005 * 2**17 = 655.36 s is the last uncapped step; 2**18 would be 1310.72 s.
    assert delays[17] == pytest.approx(655.36)
    assert delays[18:] == [1000.0] * 7


def test_exponential_does_not_overflow() -> None:
    limiter = ItemExponentialFailureRateLimiter[str](base=1.0, cap=5.0)
    delays = [limiter.when("a") for _ in range(3000)]
    assert delays[-1] == 5.0
    unbounded = ItemExponentialFailureRateLimiter[str](base=1.0, cap=float("inf"))
    assert [unbounded.when("a") for _ in range(3000)][-1] == float("inf")


def test_exponential_forget_resets_backoff() -> None:
    limiter = ItemExponentialFailureRateLimiter[str]()
    limiter.when("a")
    limiter.when("a")
    limiter.forget("a")
    assert limiter.retries("a") == 0
    assert limiter.when("a") == pytest.approx(0.005)
    limiter.forget("never-seen")  # forgetting an unknown item is harmless


def test_exponential_rejects_negative_parameters() -> None:
    with pytest.raises(ValueError):
        ItemExponentialFailureRateLimiter[str](base=-1.0)


def test_bucket_allows_burst_then_spaces_reservations() -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter(qps=10.0, burst=100, clock=clock)
    assert [bucket.when("x") for _ in range(100)] == [0.0] * 100
    # Each further call reserves the next token: 0.1 s apart at 10 qps.
    assert [bucket.when("x") for _ in range(3)] == pytest.approx([0.1, 0.2, 0.3])
    # After 0.3 s the debt is paid; the next token is again 0.1 s away.
    clock.now += 0.3
    assert bucket.when("x") == pytest.approx(0.1)
    assert bucket.retries("x") == 0
    bucket.forget("x")  # shared bucket: forgetting does not refund tokens
    assert bucket.when("x") == pytest.approx(0.2)


def test_bucket_refills_up_to_burst_only() -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter(qps=10.0, burst=5, clock=clock)
    for _ in range(5):
        bucket.when(None)
    clock.now += 3600.0
    assert [bucket.when(None) for _ in range(6)] == pytest.approx([0.0] * 5 + [0.1])


def test_bucket_ignores_clock_going_backwards() -> None:
    clock = FakeClock()
    bucket = BucketRateLimiter(qps=1.0, burst=1, clock=clock)
    assert bucket.when(None) == 0.0
    clock.now -= 10.0
    assert bucket.when(None) == pytest.approx(1.0)


@pytest.mark.parametrize(("qps", "burst"), [(0.0, 1), (-1.0, 1), (float("inf"), 1), (1.0, 0)])
def test_bucket_rejects_bad_parameters(qps: float, burst: int) -> None:
    with pytest.raises(ValueError):
        BucketRateLimiter(qps=qps, burst=burst)


def test_max_of_takes_largest_delay_and_records_in_all() -> None:
    clock = FakeClock()
    exponential = ItemExponentialFailureRateLimiter[str]()
    bucket = BucketRateLimiter(qps=10.0, burst=1, clock=clock)
    limiter = MaxOfRateLimiter[str](exponential, bucket)
    assert limiter.when("a") == pytest.approx(0.005)  # bucket had a token
    assert limiter.when("a") == pytest.approx(0.1)  # bucket dominates the 10 ms backoff
    assert exponential.retries("a") == 2  # both limiters saw both failures
    assert limiter.retries("a") == 2
    limiter.forget("a")
    assert limiter.retries("a") == 0
    assert exponential.retries("a") == 0


def test_max_of_needs_a_limiter() -> None:
    with pytest.raises(ValueError):
        MaxOfRateLimiter[str]()


def test_default_controller_rate_limiter() -> None:
    limiter = default_controller_rate_limiter()
    # The bucket starts full (burst 100), so the per-item backoff decides the first delays.
    assert [limiter.when("a") for _ in range(3)] == pytest.approx([0.005, 0.01, 0.02])
    assert limiter.when("b") == pytest.approx(0.005)
    assert limiter.retries("a") == 3
    limiter.forget("a")
    assert limiter.retries("a") == 0
    assert limiter.when("a") == pytest.approx(0.005)


def test_token_bucket_allow_refills_to_burst_only() -> None:
    bucket = TokenBucket(qps=1.0, burst=2, now=0.0)
    assert bucket.allow(0.0) and bucket.allow(0.0) and not bucket.allow(0.0)
    assert bucket.allow(100.0) and bucket.allow(100.0)
    assert not bucket.allow(100.0)  # 100s idle still buys only `burst` tokens


def test_token_bucket_reserve_queues_behind_earlier_reservations() -> None:
    bucket = TokenBucket(qps=2.0, burst=1, now=0.0)
    assert [bucket.reserve(0.0) for _ in range(3)] == [0.0, 0.5, 1.0]
    assert not bucket.allow(1.0)  # still in debt: the reservations come first
    assert bucket.allow(2.0)


# -- the informer's reconnect backoff ------------------------------------------------------


class FixedRandom:
    def __init__(self, value: float) -> None:
        self.value = value

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.value


def test_jittered_backoff_doubles_caps_resets_and_honours_retry_after() -> None:
    b = JitteredBackoff(initial=0.8, maximum=30, jitter=0.25, rng=FixedRandom(0.5))  # type: ignore[arg-type]
    assert [round(b.next(), 2) for _ in range(8)] == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30, 30]
    b.reset()
    assert b.next() == pytest.approx(0.8)
    assert b.next(retry_after=7) == 7
    assert b.next(retry_after=10_000) == 300  # capped at max_retry_after
    jittery = JitteredBackoff(initial=1, jitter=0.25)
    samples = [JitteredBackoff(initial=1, jitter=0.25).next() for _ in range(200)]
    assert all(0.75 <= s <= 1.25 for s in samples)
    assert len(set(samples)) > 1
    assert jittery.failures == 0


def test_a_cancelled_reservation_gives_its_token_back_never_past_the_burst() -> None:
    bucket = TokenBucket(qps=1.0, burst=2, now=0.0)
    delays = [bucket.reserve(0.0) for _ in range(4)]
    assert delays == [0.0, 0.0, 1.0, 2.0]
    bucket.cancel()  # the last one never ran: the next waits as long as it would have
    assert bucket.reserve(0.0) == 2.0
    for _ in range(10):
        bucket.cancel()
    assert bucket.tokens == 2.0
