"""The controller's work queue: client-go's ``util/workqueue`` for asyncio.

The queue promises:

* Fair: items are handed out in the order in which they were added, within a priority.
* Prioritised: an item added with a higher ``priority`` is handed out before every waiting
  item of a lower one (controller-runtime's priority queue); adding a waiting item again
  with a higher priority raises it, never lowers it. One object's own change is then not
  queued behind a thousand others' wakes.
* Stingy: an item added several times before it is handed out is queued, and processed, once.
* Never concurrent: an item being processed (handed out by ``get`` and not yet ``done``) is
  never handed to a second consumer. Adding it meanwhile marks it dirty; ``done`` then puts it
  back at the end of the queue, so the change that caused the add is not lost.
* Many producers and many consumers (asyncio tasks on one event loop).
* Delayed adds (``add_after``) and rate-limited retries (``add_rate_limited``).
* Shutdown notification: ``get`` raises ``QueueShutDown`` once the queue is shut down and
  nothing is left waiting; ``shut_down_with_drain`` also waits for in-flight items.

Callers must call ``done(item)`` after every successful ``get``, and must not base decisions
on ``len(queue)``, which is only a snapshot that excludes in-flight and delayed items.

The queue is not thread-safe: use it from its event loop only.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable, Hashable
from contextlib import suppress
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from linkerd_config.kube.metrics import ComponentMetrics
from linkerd_config.kube.ratelimit import RateLimiter, default_controller_rate_limiter

T = TypeVar("T", bound=Hashable)

__all__ = ["QueueEmpty", "QueueShutDown", "WorkQueue"]


class QueueEmpty(Exception):
    """``get_nowait`` found nothing waiting."""


class QueueShutDown(Exception):
    """The queue is shut down and nothing is left waiting: the consumer should exit."""


class WorkqueueMetrics(ComponentMetrics):
    """controller-runtime's workqueue families (pkg/metrics/workqueue.go), by queue name."""

    BUCKETS = tuple(1e-8 * 10**i for i in range(12))  # ExponentialBuckets(10e-9, 10, 12)
    LABELS = ("name", "controller")

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        labels, r = self.LABELS, registry
        self.depth = Gauge("workqueue_depth", "Current depth of workqueue", labels, registry=r)
        self.adds = Counter(
            "workqueue_adds_total", "Total number of adds handled by workqueue", labels, registry=r
        )
        self.queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            labels,
            buckets=self.BUCKETS,
            registry=r,
        )
        self.work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            labels,
            buckets=self.BUCKETS,
            registry=r,
        )
        self.unfinished_work = Gauge(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been "
            "observed by work_duration",
            labels,
            registry=r,
        )
        self.longest_running = Gauge(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running",
            labels,
            registry=r,
        )
        self.retries = Counter(
            "workqueue_retries_total",
            "Total number of retries handled by workqueue",
            labels,
            registry=r,
        )


class _QueueRecorder(Generic[T]):
    """One queue's series, labelled ``(name, name)``, and the timestamps they need."""

    def __init__(self, metrics: WorkqueueMetrics, name: str, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._depth = metrics.depth.labels(name, name)
        self._adds = metrics.adds.labels(name, name)
        self._queue_duration = metrics.queue_duration.labels(name, name)
        self._work_duration = metrics.work_duration.labels(name, name)
        self._retries = metrics.retries.labels(name, name)
        self._unfinished = metrics.unfinished_work.labels(name, name)
        self._longest = metrics.longest_running.labels(name, name)
        # Keys: items added and not handed out since (the queue's dirty set); value: first add.
        self._added_at: dict[T, float] = {}
        # Keys: exactly the items in processing; value: when get handed each out.
        self._started_at: dict[T, float] = {}

    def added(self, item: T) -> None:
        self._adds.inc()
        self._added_at.setdefault(item, self._clock())

    def depth(self, waiting: int) -> None:
        self._depth.set(waiting)

    def got(self, item: T) -> None:
        now = self._clock()
        added = self._added_at.pop(item, None)
        if added is not None:
            self._queue_duration.observe(now - added)
        self._started_at[item] = now

    def done(self, item: T) -> None:
        started = self._started_at.pop(item, None)
        if started is not None:
            self._work_duration.observe(self._clock() - started)

    def retried(self) -> None:
        self._retries.inc()

    def update_unfinished_work(self) -> None:
        now = self._clock()
        running = [now - started for started in self._started_at.values()]
        self._unfinished.set(sum(running))
        self._longest.set(max(running, default=0.0))


class WorkQueue(Generic[T]):
    """A fair, prioritised, deduplicating, rate-limited work queue of hashable keys; see the
    module doc."""

    def __init__(
        self,
        name: str,
        *,
        rate_limiter: RateLimiter[T] | None = None,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._rate_limiter: RateLimiter[T] = (
            rate_limiter if rate_limiter is not None else default_controller_rate_limiter()
        )
        self._metrics = _QueueRecorder[T](WorkqueueMetrics.of(registry), name, clock)
        self._shutting_down = False
        # Waiting items as a heap of (-priority, order, item), the first handed out first;
        # an entry is current only while _waiting maps its item to its (priority, order):
        # raising an item's priority pushes a new entry and leaves the old one to be skipped.
        self._heap: list[tuple[int, int, T]] = []
        self._order = itertools.count()
        # Waiting items: no duplicates, all in _dirty, none in _processing.
        self._waiting: dict[T, tuple[int, int]] = {}
        # Items added since last handed out, with the highest priority they were added at:
        # exactly _waiting's plus in-flight items done requeues.
        self._dirty: dict[T, int] = {}
        # Items handed out by get whose done has not been called yet.
        self._processing: set[T] = set()
        # One pending timer per item with a delayed add, due at the earliest requested time.
        self._delayed: dict[T, asyncio.TimerHandle] = {}
        # Futures of get() calls blocked on an empty queue, oldest first; woken one per item.
        self._getters: deque[asyncio.Future[None]] = deque()
        # Futures of shut_down_with_drain calls; all are resolved once _processing empties.
        self._drainers: list[asyncio.Future[None]] = []

    def __len__(self) -> int:
        """Items waiting to be handed out; not in-flight or delayed ones, so never gate on it."""
        return len(self._waiting)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def add(self, item: T, priority: int = 0) -> None:
        """Mark ``item`` as needing processing, handed out before every waiting item of a
        lower ``priority``; ignored once the queue is shutting down."""
        if self._shutting_down:
            return
        added = self._dirty.get(item)
        if added is not None:
            if priority > added:
                self._dirty[item] = priority
                if item in self._waiting:
                    self._push(item, priority)  # raised: ahead of the lower ones
            return
        self._dirty[item] = priority
        self._metrics.added(item)
        if item in self._processing:
            return  # done() requeues it: never hand one item to two consumers
        self._push(item, priority)
        self._wake_one_getter()

    def _push(self, item: T, priority: int) -> None:
        order = next(self._order)
        self._waiting[item] = (priority, order)
        heapq.heappush(self._heap, (-priority, order, item))
        self._metrics.depth(len(self._waiting))

    def add_after(self, item: T, delay: float) -> None:
        """Add ``item`` after ``delay`` seconds (at priority 0); of several pending delays
        the earliest wins.

        Must be called from within the running event loop. A pending delayed add survives an
        immediate ``add`` of the same item, as a scheduled resync must still happen.
        """
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(item)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        pending = self._delayed.get(item)
        if pending is not None:
            if pending.when() <= due:
                return
            pending.cancel()
        self._delayed[item] = loop.call_at(due, self._add_delayed, item)

    def add_rate_limited(self, item: T) -> None:
        """Retry ``item`` after the rate limiter's delay; call ``forget`` once it succeeds."""
        if self._shutting_down:
            return
        self._metrics.retried()
        self.add_after(item, self._rate_limiter.when(item))

    def forget(self, item: T) -> None:
        """Reset ``item``'s backoff; without it, the next failure waits longer than it should."""
        self._rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return self._rate_limiter.retries(item)

    async def get(self) -> T:
        """Wait for an item; the caller must call ``done(item)`` when finished with it.

        After shut-down, items still waiting are handed out; then ``QueueShutDown`` is raised.
        """
        while not self._waiting and not self._shutting_down:
            getter = asyncio.get_running_loop().create_future()
            self._getters.append(getter)
            try:
                await getter
            except BaseException:
                getter.cancel()
                with suppress(ValueError):
                    self._getters.remove(getter)
                if not getter.cancelled():
                    # We were woken for an item but cancelled before taking it: pass it on.
                    self._wake_one_getter()
                raise
        return self.get_nowait()

    def get_nowait(self) -> T:
        """Take the oldest waiting item of the highest priority; the caller must call
        ``done(item)`` when finished."""
        if not self._waiting:
            raise QueueShutDown if self._shutting_down else QueueEmpty
        while True:
            negated, order, item = heapq.heappop(self._heap)
            if self._waiting.get(item) == (-negated, order):
                break  # else an entry its raise left behind
        del self._waiting[item]
        self._processing.add(item)
        self._dirty.pop(item, None)
        self._metrics.depth(len(self._waiting))
        self._metrics.got(item)
        return item

    def done(self, item: T) -> None:
        """Finish processing ``item``; if it was re-added meanwhile, queue it again.

        Must be called exactly once per item returned by ``get``, even when processing failed
        (then usually after ``add_rate_limited``); otherwise the item can never be handed out
        again and drains never finish. Raises ``ValueError`` for an item not in processing.
        """
        if item not in self._processing:
            raise ValueError(f"done({item!r}) called for an item that is not being processed")
        self._processing.remove(item)
        self._metrics.done(item)
        if item in self._dirty:
            self._push(item, self._dirty[item])
            self._wake_one_getter()
        if not self._processing:
            self._release_drainers()

    def update_unfinished_work(self) -> None:
        """Refresh the in-flight gauges; call it periodically (client-go does every 500 ms)."""
        self._metrics.update_unfinished_work()

    def shut_down(self) -> None:
        """Stop accepting adds, cancel delayed adds, and wake every blocked getter.

        Also ends any ``shut_down_with_drain`` in progress, as client-go's ShutDown does.
        """
        self._stop()
        self._release_drainers()

    async def shut_down_with_drain(self, timeout: float) -> bool:
        """Shut down, then wait up to ``timeout`` seconds for every in-flight item's ``done``.

        Returns whether nothing is left in processing. Waiting items are not waited for: they
        are still handed out to consumers that keep calling ``get``.
        """
        self._stop()
        if not self._processing:
            return True
        drainer = asyncio.get_running_loop().create_future()
        self._drainers.append(drainer)
        try:
            async with asyncio.timeout(timeout):
                await drainer
        except TimeoutError:
            pass
        finally:
            with suppress(ValueError):
                self._drainers.remove(drainer)
        return not self._processing

    def _stop(self) -> None:
        self._shutting_down = True
        for handle in self._delayed.values():
            handle.cancel()
        self._delayed.clear()
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)

    def _add_delayed(self, item: T) -> None:
        del self._delayed[item]
        self.add(item)

    def _wake_one_getter(self) -> None:
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)
                return

    def _release_drainers(self) -> None:
        for drainer in self._drainers:
            if not drainer.done():
                drainer.set_result(None)
        self._drainers.clear()
