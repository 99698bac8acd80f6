"""WorkQueue: each promise and each caller obligation from the module docstring is a test."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Hashable

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from prometheus_client import CollectorRegistry

from linkerd_config.kube.ratelimit import ItemExponentialFailureRateLimiter
from linkerd_config.kube.workqueue import QueueEmpty, QueueShutDown, WorkQueue
from tests.support.clock import FakeClock

# Long enough that a loaded CI machine never hits it, short enough to fail fast on a hang.
PATIENCE = 10.0


class RecordingLimiter:
    """Fixed delay; records calls so tests can see the queue delegates to it."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.failures: dict[Hashable, int] = {}

    def when(self, item: Hashable) -> float:
        self.failures[item] = self.failures.get(item, 0) + 1
        return self.delay

    def forget(self, item: Hashable) -> None:
        self.failures.pop(item, None)

    def retries(self, item: Hashable) -> int:
        return self.failures.get(item, 0)


def drain_nowait(queue: WorkQueue[str]) -> list[str]:
    """Take and finish everything waiting, in hand-out order."""
    items = []
    while len(queue):
        item = queue.get_nowait()
        queue.done(item)
        items.append(item)
    return items


# --- Promises -------------------------------------------------------------------------------


def test_fair_items_are_handed_out_in_add_order() -> None:
    queue = WorkQueue[str]("q")
    for item in ("c", "a", "b"):
        queue.add(item)
    assert drain_nowait(queue) == ["c", "a", "b"]


def test_stingy_repeated_adds_queue_an_item_once() -> None:
    queue = WorkQueue[str]("q")
    for item in ("a", "b", "a", "a", "b"):
        queue.add(item)
    assert len(queue) == 2
    assert drain_nowait(queue) == ["a", "b"]
    with pytest.raises(QueueEmpty):
        queue.get_nowait()


def test_item_in_processing_is_not_handed_out_again_until_done() -> None:
    queue = WorkQueue[str]("q")
    queue.add("a")
    assert queue.get_nowait() == "a"
    queue.add("a")  # added while processing: marked dirty, not queued
    queue.add("a")
    assert len(queue) == 0
    with pytest.raises(QueueEmpty):
        queue.get_nowait()
    queue.done("a")  # now it is requeued, once
    assert len(queue) == 1
    assert queue.get_nowait() == "a"
    queue.done("a")
    assert len(queue) == 0


def test_a_higher_priority_goes_first_and_raises_a_waiting_item() -> None:
    queue = WorkQueue[str]("q")
    for item in ("a", "b", "c"):
        queue.add(item)
    queue.add("d", 1)
    queue.add("c", 1)  # raised: behind d, ahead of a and b
    queue.add("a", 0)  # already waiting at 0: stays where it is
    queue.add("d", 0)  # never lowered
    assert drain_nowait(queue) == ["d", "c", "a", "b"]


def test_an_item_in_processing_comes_back_at_the_highest_priority_it_was_added_at() -> None:
    queue = WorkQueue[str]("q")
    queue.add("a")
    assert queue.get_nowait() == "a"
    queue.add("b")
    queue.add("a", 2)
    queue.add("a", 0)
    queue.done("a")
    assert drain_nowait(queue) == ["a", "b"]


def test_item_requeued_by_done_goes_to_the_back() -> None:
    queue = WorkQueue[str]("q")
    queue.add("a")
    assert queue.get_nowait() == "a"
    queue.add("a")
    queue.add("b")
    queue.done("a")
    assert drain_nowait(queue) == ["b", "a"]


async def test_get_waits_for_an_add() -> None:
    queue = WorkQueue[str]("q")
    getter = asyncio.create_task(queue.get())
    await asyncio.sleep(0.01)
    assert not getter.done()
    queue.add("a")
    assert await asyncio.wait_for(getter, PATIENCE) == "a"


async def test_cancelled_getter_passes_its_wake_up_on() -> None:
    queue = WorkQueue[str]("q")
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await asyncio.sleep(0)  # both are now blocked, first in line
    queue.add("a")  # wakes `first`...
    first.cancel()  # ...which is cancelled before it runs
    assert await asyncio.wait_for(second, PATIENCE) == "a"
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_many_producers_and_consumers() -> None:
    queue = WorkQueue[int]("q")
    keys = range(20)
    in_flight: set[int] = set()
    last_added: dict[int, int] = {}  # key -> sequence number of its last add
    last_started: dict[int, int] = {}  # key -> sequence number when its last processing began
    seq = 0
    rng = random.Random(7)
    idle = asyncio.Event()  # set when nothing is waiting or in flight

    async def producer() -> None:
        nonlocal seq
        for _ in range(200):
            key = rng.choice(keys)
            seq += 1
            last_added[key] = seq
            queue.add(key)
            await asyncio.sleep(0)

    async def consumer() -> None:
        nonlocal seq
        while True:
            try:
                key = await queue.get()
            except QueueShutDown:
                return
            assert key not in in_flight, "one key handed to two consumers"
            in_flight.add(key)
            seq += 1
            last_started[key] = seq
            for _ in range(rng.randint(0, 3)):
                await asyncio.sleep(0)
            in_flight.remove(key)
            queue.done(key)
            if not len(queue) and not in_flight:
                idle.set()

    consumers = [asyncio.create_task(consumer()) for _ in range(4)]
    await asyncio.wait_for(asyncio.gather(*(producer() for _ in range(4))), PATIENCE)
    if len(queue) or in_flight:
        await asyncio.wait_for(idle.wait(), PATIENCE)
    queue.shut_down()
    await asyncio.wait_for(asyncio.gather(*consumers), PATIENCE)
    # No add was lost: every key was processed after the last time it was added.
    for key, added in last_added.items():
        assert last_started[key] > added


# --- Caller obligations ---------------------------------------------------------------------


def test_done_without_get_is_an_error() -> None:
    queue = WorkQueue[str]("q")
    queue.add("a")
    with pytest.raises(ValueError):
        queue.done("a")  # waiting, not processing
    assert queue.get_nowait() == "a"
    queue.done("a")
    with pytest.raises(ValueError):
        queue.done("a")  # twice
    assert len(queue) == 0


def test_len_excludes_in_flight_and_delayed_items_so_do_not_gate_on_it() -> None:
    queue = WorkQueue[str]("q")
    queue.add("a")
    queue.get_nowait()
    queue.add("a")  # still owed a run, but len() does not show it
    assert len(queue) == 0
    queue.done("a")
    assert len(queue) == 1


async def test_len_excludes_delayed_items() -> None:
    queue = WorkQueue[str]("q")
    queue.add_after("a", 60.0)
    assert len(queue) == 0
    queue.shut_down()


# --- Delayed and rate-limited adds ----------------------------------------------------------


async def test_add_after_hands_items_out_in_due_order() -> None:
    queue = WorkQueue[str]("q")
    queue.add_after("late", 0.06)
    queue.add_after("early", 0.02)
    queue.add_after("middle", 0.04)
    async with asyncio.timeout(PATIENCE):
        got = [await queue.get() for _ in range(3)]
    assert got == ["early", "middle", "late"]


async def test_add_after_earliest_wins_and_later_is_dropped() -> None:
    queue = WorkQueue[str]("q")
    queue.add_after("a", 0.3)
    queue.add_after("a", 0.02)  # earlier: replaces the 0.3 s timer
    queue.add_after("a", 0.2)  # later than the pending one: ignored
    assert await asyncio.wait_for(queue.get(), PATIENCE) == "a"
    queue.done("a")
    await asyncio.sleep(0.5)  # past both dropped deadlines
    assert len(queue) == 0


async def test_add_after_non_positive_delay_adds_now() -> None:
    queue = WorkQueue[str]("q")
    queue.add_after("a", 0)
    queue.add_after("b", -1.0)
    assert drain_nowait(queue) == ["a", "b"]


async def test_delayed_add_of_item_in_processing_marks_it_dirty() -> None:
    queue = WorkQueue[str]("q")
    queue.add("a")
    assert queue.get_nowait() == "a"
    queue.add_after("a", 0.01)
    await asyncio.sleep(0.05)
    assert len(queue) == 0  # not handed out while in processing
    queue.done("a")
    assert queue.get_nowait() == "a"


async def test_add_rate_limited_uses_the_limiter_delay() -> None:
    limiter = RecordingLimiter(0.02)
    queue = WorkQueue[str]("q", rate_limiter=limiter)
    queue.add_rate_limited("a")
    assert len(queue) == 0  # delayed, not immediate
    assert await asyncio.wait_for(queue.get(), PATIENCE) == "a"
    queue.done("a")
    assert queue.num_requeues("a") == 1
    queue.forget("a")
    assert queue.num_requeues("a") == 0
    assert limiter.failures == {}


async def test_default_rate_limiter_backs_off_per_item() -> None:
    queue = WorkQueue[str]("q")
    for _ in range(3):
        queue.add_rate_limited("a")
    assert queue.num_requeues("a") == 3
    queue.forget("a")
    assert queue.num_requeues("a") == 0
    queue.shut_down()


# --- Shutdown -------------------------------------------------------------------------------


async def test_shut_down_wakes_every_blocked_getter() -> None:
    queue = WorkQueue[str]("q")
    getters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert not any(g.done() for g in getters)
    queue.shut_down()
    assert queue.shutting_down
    results = await asyncio.wait_for(asyncio.gather(*getters, return_exceptions=True), PATIENCE)
    assert all(isinstance(r, QueueShutDown) for r in results)


async def test_after_shut_down_waiting_items_are_still_handed_out_then_shut_down() -> None:
    queue = WorkQueue[str]("q")
    queue.add("a")
    queue.shut_down()
    queue.add("b")  # ignored
    assert await queue.get() == "a"
    with pytest.raises(QueueShutDown):
        await queue.get()
    with pytest.raises(QueueShutDown):
        queue.get_nowait()
    queue.done("a")


async def test_shut_down_cancels_delayed_adds_and_ignores_new_ones() -> None:
    queue = WorkQueue[str]("q", rate_limiter=RecordingLimiter(0.01))
    queue.add_after("a", 0.02)
    queue.shut_down()
    queue.add_after("b", 0.01)
    queue.add_after("c", 0)
    queue.add_rate_limited("d")
    await asyncio.sleep(0.1)
    assert len(queue) == 0
    assert queue.num_requeues("d") == 0


async def test_drain_waits_for_items_in_processing() -> None:
    queue = WorkQueue[str]("q")
    queue.add("a")
    queue.add("b")
    assert queue.get_nowait() == "a"
    drain = asyncio.create_task(queue.shut_down_with_drain(PATIENCE))
    await asyncio.sleep(0.01)
    assert queue.shutting_down
    assert not drain.done()
    # A consumer can still take what was waiting, and the drain waits for it too.
    assert queue.get_nowait() == "b"
    queue.done("a")
    await asyncio.sleep(0.01)
    assert not drain.done()
    queue.done("b")
    assert await asyncio.wait_for(drain, PATIENCE) is True


async def test_drain_returns_false_on_timeout() -> None:
    queue = WorkQueue[str]("q")
    queue.add("a")
    queue.get_nowait()
    assert await queue.shut_down_with_drain(0.02) is False
    queue.done("a")


async def test_drain_with_nothing_in_flight_returns_at_once() -> None:
    queue = WorkQueue[str]("q")
    assert await queue.shut_down_with_drain(0) is True


async def test_shut_down_ends_a_drain_in_progress() -> None:
    queue = WorkQueue[str]("q")
    queue.add("a")
    queue.get_nowait()
    drain = asyncio.create_task(queue.shut_down_with_drain(PATIENCE))
    await asyncio.sleep(0.01)
    queue.shut_down()
    assert await asyncio.wait_for(drain, PATIENCE) is False


# --- Metrics --------------------------------------------------------------------------------


def sample(registry: CollectorRegistry, family: str, name: str = "q") -> float:
    value = registry.get_sample_value(family, {"name": name, "controller": name})
    assert value is not None, family
    return value


async def test_metrics() -> None:
    registry = CollectorRegistry()
    clock = FakeClock(100.0)
    queue = WorkQueue[str]("q", registry=registry, clock=clock, rate_limiter=RecordingLimiter(0))
    # Registered up front: every series exists before the first add.
    assert sample(registry, "workqueue_adds_total") == 0
    assert sample(registry, "workqueue_depth") == 0

    queue.add("a")
    queue.add("a")  # deduplicated: not an add
    queue.add("b")
    assert sample(registry, "workqueue_adds_total") == 2
    assert sample(registry, "workqueue_depth") == 2

    clock.now += 2.0
    assert queue.get_nowait() == "a"
    assert sample(registry, "workqueue_depth") == 1
    assert sample(registry, "workqueue_queue_duration_seconds_count") == 1
    assert sample(registry, "workqueue_queue_duration_seconds_sum") == pytest.approx(2.0)

    clock.now += 3.0
    assert queue.get_nowait() == "b"
    clock.now += 1.0
    queue.update_unfinished_work()
    assert sample(registry, "workqueue_unfinished_work_seconds") == pytest.approx(4.0 + 1.0)
    assert sample(registry, "workqueue_longest_running_processor_seconds") == pytest.approx(4.0)

    queue.done("a")
    queue.add_rate_limited("b")  # in processing: counts as a retry, marks it dirty
    queue.done("b")
    assert sample(registry, "workqueue_retries_total") == 1
    assert sample(registry, "workqueue_work_duration_seconds_count") == 2
    assert sample(registry, "workqueue_work_duration_seconds_sum") == pytest.approx(4.0 + 1.0)
    assert sample(registry, "workqueue_depth") == 1  # "b" requeued by done

    queue.update_unfinished_work()
    assert sample(registry, "workqueue_unfinished_work_seconds") == 0
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 0


# --- Property test --------------------------------------------------------------------------

KEYS = st.sampled_from(["k0", "k1", "k2", "k3", "k4"])
PRIORITIES = st.sampled_from([0, 0, 1, 2])
WORKERS = 3


class WorkQueueMachine(RuleBasedStateMachine):
    """Random adds at random priorities, gets by several workers, dones and forgets, checked
    against the promises.

    ``owed`` is every key added since it was last handed out, with the highest priority it
    was added at. The promises imply that each owed key that no worker holds is waiting
    exactly once, that the one handed out is the first added (or raised) of the highest
    priority waiting, and that draining the queue hands every owed key out.
    """

    def __init__(self) -> None:
        super().__init__()
        self.registry = CollectorRegistry()
        self.clock = FakeClock(100.0)
        # base=0: rate-limited adds are immediate, so no event loop is needed, but the
        # limiter still counts retries.
        limiter = ItemExponentialFailureRateLimiter[str](base=0.0)
        self.queue = WorkQueue[str](
            "prop", rate_limiter=limiter, registry=self.registry, clock=self.clock
        )
        self.held: dict[int, str] = {}
        self.owed: dict[str, int] = {}  # owed key -> the highest priority it was added at
        # Waiting keys -> (priority, when they took it): handed out highest first, then first.
        self.waiting: dict[str, tuple[int, int]] = {}
        self.tick = 0
        self.retries: dict[str, int] = {}

    def _wait(self, key: str, priority: int) -> None:
        self.tick += 1
        self.waiting[key] = (priority, self.tick)

    def _added(self, key: str, priority: int = 0) -> None:
        raised = priority > self.owed.get(key, -1)
        self.owed[key] = max(priority, self.owed.get(key, priority))
        if key not in self.held.values() and (key not in self.waiting or raised):
            self._wait(key, self.owed[key])

    @rule(key=KEYS, priority=PRIORITIES)
    def add(self, key: str, priority: int) -> None:
        self.queue.add(key, priority)
        self._added(key, priority)

    @rule(key=KEYS)
    def add_rate_limited(self, key: str) -> None:
        self.queue.add_rate_limited(key)
        self.retries[key] = self.retries.get(key, 0) + 1
        self._added(key)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data(), priority=PRIORITIES)
    def add_while_processing(self, data: st.DataObject, priority: int) -> None:
        key = data.draw(st.sampled_from(sorted(self.held.values())))
        self.queue.add(key, priority)
        self._added(key, priority)

    @rule(worker=st.integers(0, WORKERS - 1))
    def get(self, worker: int) -> None:
        if worker in self.held:
            return  # a worker processes one key at a time
        self.clock.now += 1.0
        try:
            key = self.queue.get_nowait()
        except QueueEmpty:
            assert not self.waiting, "an owed key is not waiting"
            return
        assert key not in self.held.values(), "one key held by two workers"
        assert key in self.owed, "handed out a key nobody added"
        first = min(self.waiting, key=lambda k: (-self.waiting[k][0], self.waiting[k][1]))
        assert key == first, "not the first added of the highest priority"
        del self.waiting[key], self.owed[key]
        self.held[worker] = key

    @rule(worker=st.integers(0, WORKERS - 1))
    def done(self, worker: int) -> None:
        key = self.held.pop(worker, None)
        if key is None:
            return
        self.clock.now += 1.0
        self.queue.done(key)
        if key in self.owed:
            self._wait(key, self.owed[key])

    @rule(key=KEYS)
    def forget(self, key: str) -> None:
        self.queue.forget(key)
        self.retries.pop(key, None)

    @invariant()
    def each_unheld_owed_key_waits_exactly_once(self) -> None:
        assert len(self.queue) == len(self.owed.keys() - set(self.held.values()))
        assert len(self.queue) == len(self.waiting)
        assert sample(self.registry, "workqueue_depth", "prop") == len(self.queue)

    @invariant()
    def requeues_match(self) -> None:
        for key, count in self.retries.items():
            assert self.queue.num_requeues(key) == count

    def teardown(self) -> None:
        # Workers keep finishing and getting: every owed key comes out exactly once.
        handed_out: list[str] = []
        for worker in list(self.held):
            self.done(worker)
        while True:
            try:
                key = self.queue.get_nowait()
            except QueueEmpty:
                break
            handed_out.append(key)
            self.queue.done(key)
        assert sorted(handed_out) == sorted(self.owed)
        assert len(handed_out) == len(set(handed_out))
        self.queue.update_unfinished_work()
        assert sample(self.registry, "workqueue_unfinished_work_seconds", "prop") == 0


WorkQueueMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=60)
TestWorkQueueMachine = WorkQueueMachine.TestCase
