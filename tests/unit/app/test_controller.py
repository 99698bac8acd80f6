"""The worker pool's handling of each reconcile outcome."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest
from prometheus_client import CollectorRegistry

from linkerd_config.kube.client import ApiError
from linkerd_config.kube.controller import Controller, ControllerOptions, Result, TerminalError
from linkerd_config.kube.ratelimit import ItemExponentialFailureRateLimiter


class ScriptedReconciler:
    """Runs a per-key script of behaviours, one per call; records calls and overlaps."""

    def __init__(self, script: dict[str, list[Callable[[], Awaitable[Result]]]]) -> None:
        self.script = script
        self.calls: Counter[str] = Counter()
        self.running: set[str] = set()
        self.overlaps: list[str] = []
        self.finished = asyncio.Event()

    async def reconcile(self, key: str) -> Result:
        if key in self.running:
            self.overlaps.append(key)
        self.running.add(key)
        try:
            steps = self.script[key]
            step = steps[min(self.calls[key], len(steps) - 1)]
            self.calls[key] += 1
            return await step()
        finally:
            self.running.discard(key)
            if all(self.calls[k] >= len(v) for k, v in self.script.items()):
                self.finished.set()


async def ok() -> Result:
    return Result()


async def boom() -> Result:
    raise RuntimeError("boom")


async def terminal() -> Result:
    raise TerminalError("cannot fix by retrying")


async def again() -> Result:
    return Result(requeue=True)


async def later() -> Result:
    return Result(requeue_after=0.02)


def sample(registry: CollectorRegistry, result: str) -> float:
    value = registry.get_sample_value(
        "controller_runtime_reconcile_total", {"controller": "test", "result": result}
    )
    return value or 0.0


async def run_until_finished(controller: Controller, reconciler: ScriptedReconciler) -> None:
    task = asyncio.create_task(controller.run(initial_keys=reconciler.script.keys))
    try:
        await asyncio.wait_for(reconciler.finished.wait(), 10)
        await asyncio.sleep(0.05)  # let the last outcome be recorded
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def make(
    registry: CollectorRegistry, workers: int = 2
) -> Callable[[ScriptedReconciler], Controller]:
    return lambda r: Controller(
        "test",
        r,
        options=ControllerOptions(workers=workers, reconcile_timeout=0.5),
        registry=registry,
        rate_limiter=ItemExponentialFailureRateLimiter(base=0.001, cap=0.01),
    )


async def test_every_outcome_is_counted_and_errors_are_retried() -> None:
    registry = CollectorRegistry()
    reconciler = ScriptedReconciler(
        {
            "a": [ok],
            "b": [boom, boom, ok],
            "c": [terminal],
            "d": [again, ok],
            "e": [later, ok],
        }
    )
    controller = make(registry)(reconciler)
    await run_until_finished(controller, reconciler)

    assert reconciler.calls == {"a": 1, "b": 3, "c": 1, "d": 2, "e": 2}
    assert sample(registry, "success") == 4
    assert sample(registry, "error") == 3
    assert sample(registry, "requeue") == 1
    assert sample(registry, "requeue_after") == 1
    errors = registry.get_sample_value(
        "controller_runtime_reconcile_errors_total", {"controller": "test"}
    )
    assert errors == 3
    terminal_errors = registry.get_sample_value(
        "controller_runtime_terminal_reconcile_errors_total", {"controller": "test"}
    )
    assert terminal_errors == 1  # only "c"'s TerminalError
    # Success forgets the backoff; a terminal error is not retried.
    assert controller.queue.num_requeues("b") == 0
    assert controller.queue.num_requeues("c") == 0


async def test_a_bug_counts_as_a_panic_an_api_answer_does_not() -> None:
    async def refused() -> Result:
        raise ApiError(422, "PATCH", "/x", {"reason": "Invalid"}, None)

    registry = CollectorRegistry()
    reconciler = ScriptedReconciler({"bug": [boom, ok], "api": [refused, ok]})
    await run_until_finished(make(registry)(reconciler), reconciler)
    panics = registry.get_sample_value(
        "controller_runtime_reconcile_panics_total", {"controller": "test"}
    )
    assert panics == 1  # the RuntimeError; the API server's refusal is an expected error
    assert sample(registry, "error") == 2


async def test_a_write_refused_for_a_changed_object_is_retried_as_no_error() -> None:
    """A precondition refused (409: the object changed since the cache showed it) is
    optimistic concurrency at work: retried, counted as a requeue, no error."""

    async def raced() -> Result:
        raise ApiError(409, "PATCH", "/x/status", {"reason": "Conflict"}, None)

    registry = CollectorRegistry()
    reconciler = ScriptedReconciler({"raced": [raced, ok]})
    await run_until_finished(make(registry)(reconciler), reconciler)
    assert reconciler.calls == {"raced": 2}
    assert (sample(registry, "requeue"), sample(registry, "success")) == (1, 1)
    assert sample(registry, "error") == 0
    errors = registry.get_sample_value(
        "controller_runtime_reconcile_errors_total", {"controller": "test"}
    )
    assert not errors


async def test_a_hung_reconcile_times_out_and_is_retried_without_killing_the_worker() -> None:
    async def hang() -> Result:
        await asyncio.sleep(3600)
        return Result()

    registry = CollectorRegistry()
    reconciler = ScriptedReconciler({"slow": [hang, ok], "other": [ok]})
    await run_until_finished(make(registry, workers=1)(reconciler), reconciler)
    assert reconciler.calls == {"slow": 2, "other": 1}


async def test_one_key_never_runs_on_two_workers_at_once() -> None:
    async def slow_ok() -> Result:
        await asyncio.sleep(0.01)
        return Result()

    reconciler = ScriptedReconciler({"k": [slow_ok] * 5})
    controller = make(CollectorRegistry(), workers=4)(reconciler)
    task = asyncio.create_task(controller.run())
    try:
        for _ in range(5):
            for _ in range(10):
                controller.enqueue("k")  # many adds while it is processing
            await asyncio.sleep(0.015)
        await asyncio.wait_for(reconciler.finished.wait(), 10)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert reconciler.overlaps == []


async def test_cancelling_mid_reconcile_hands_the_key_back() -> None:
    started = asyncio.Event()

    async def blocked() -> Result:
        started.set()
        await asyncio.sleep(3600)
        return Result()

    reconciler = ScriptedReconciler({"k": [blocked]})
    controller = make(CollectorRegistry(), workers=1)(reconciler)
    task = asyncio.create_task(controller.run(initial_keys=lambda: ["k"]))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Not lost: the next leader term's workers get it again.
    assert controller.queue.get_nowait() == "k"


async def test_active_workers_and_max_concurrency_are_reported() -> None:
    registry = CollectorRegistry()
    Controller(
        "test", ScriptedReconciler({}), options=ControllerOptions(workers=3), registry=registry
    )
    labels = {"controller": "test"}
    assert registry.get_sample_value("controller_runtime_max_concurrent_reconciles", labels) == 3
    assert registry.get_sample_value("controller_runtime_active_workers", labels) == 0
    # Every result series exists before the first reconcile.
    for result in ("success", "error", "requeue", "requeue_after"):
        assert sample(registry, result) == 0.0


async def test_a_stopping_controller_finishes_its_reconcile_and_starts_no_other() -> None:
    """At SIGTERM a reconcile in flight ends; the keys waiting are not started (a rollout
    pass could restart workloads after the stop began): the next leader reconciles every
    object on taking the lead. The queue itself still hands them out, as client-go's does."""
    started, release = asyncio.Event(), asyncio.Event()

    async def held() -> Result:
        started.set()
        await release.wait()
        return Result()

    reconciler = ScriptedReconciler({"first": [held], "waiting": [ok]})
    controller = make(CollectorRegistry(), workers=1)(reconciler)
    task = asyncio.create_task(controller.run(initial_keys=lambda: ["first", "waiting"]))
    await asyncio.wait_for(started.wait(), 5)
    stopping = asyncio.create_task(controller.shut_down(timeout=5))
    await asyncio.sleep(0.05)
    release.set()
    assert await asyncio.wait_for(stopping, 5)  # drained: the one in flight finished
    await asyncio.sleep(0.05)
    assert reconciler.calls == Counter({"first": 1})
    assert controller.queue.get_nowait() == "waiting"  # left, not reconciled
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_shutdown_waits_no_longer_than_the_time_it_is_given() -> None:
    started = asyncio.Event()

    async def hung() -> Result:
        started.set()
        await asyncio.sleep(3600)
        return Result()

    controller = make(CollectorRegistry(), workers=1)(ScriptedReconciler({"k": [hung]}))
    controller.options = ControllerOptions(workers=1, reconcile_timeout=60, drain_timeout=30)
    task = asyncio.create_task(controller.run(initial_keys=lambda: ["k"]))
    await asyncio.wait_for(started.wait(), 5)
    # Given 0.2 s of its 30: False (unfinished) well before the 30, or wait_for fails.
    assert await asyncio.wait_for(controller.shut_down(timeout=0.2), 5) is False
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
