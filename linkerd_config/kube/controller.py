"""A controller: a work queue of keys and a pool of workers that reconcile them.

The user contract is one method, ``Reconciler.reconcile(key) -> Result``, as in
controller-runtime. The request carries only the key, never the event that caused it: the
reconciler reads current state from caches and makes the world match, so a missed or
coalesced event cannot cause a wrong decision (level-triggered).

Outcomes, each with its counter in ``controller_runtime_reconcile_total{result}``:

* ``Result()`` (done): the key's backoff is forgotten.
* ``Result(requeue=True)``: added again with rate-limited backoff.
* ``Result(requeue_after=s)``: added again after ``s`` seconds; backoff forgotten.
* raises ``TerminalError``: logged and counted, not retried (bad input that only a change of
  the object can fix; that change will enqueue it again).
* raises anything else, or exceeds the reconcile timeout: logged with the key and retried
  with backoff. A worker never dies of a reconcile's exception.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from linkerd_config.kube.client import ApiError
from linkerd_config.kube.metrics import ComponentMetrics
from linkerd_config.kube.ratelimit import RateLimiter
from linkerd_config.kube.workqueue import QueueShutDown, WorkQueue

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Result:
    requeue: bool = False
    requeue_after: float | None = None


class TerminalError(Exception):
    """A failure that retrying cannot fix."""


class Reconciler(Protocol):
    async def reconcile(self, key: str) -> Result: ...


@dataclass(frozen=True)
class ControllerOptions:
    workers: int = 2
    """Reconciles of different keys run concurrently up to this many; one key never twice."""
    reconcile_timeout: float = 120.0
    """A reconcile running longer is cancelled and retried: no key holds a worker forever."""
    drain_timeout: float = 20.0
    """On shutdown, how long in-flight reconciles may finish before they are cancelled."""


class ReconcileMetrics(ComponentMetrics):
    """controller-runtime's per-controller families (pkg/internal/controller/metrics)."""

    BUCKETS = (
        0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7,
        0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15,
        20, 25, 30, 40, 50, 60,
    )  # fmt: skip
    RESULTS = ("success", "error", "requeue", "requeue_after")

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        r = registry
        self.total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ["controller", "result"],
            registry=r,
        )
        self.errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ["controller"],
            registry=r,
        )
        self.terminal_errors = Counter(
            "controller_runtime_terminal_reconcile_errors_total",
            "Total number of terminal reconciliation errors per controller",
            ["controller"],
            registry=r,
        )
        self.panics = Counter(
            "controller_runtime_reconcile_panics_total",
            "Total number of reconciliation panics per controller",
            ["controller"],
            registry=r,
        )
        self.time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller"],
            buckets=self.BUCKETS,
            registry=r,
        )
        self.max_concurrent_reconciles = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            ["controller"],
            registry=r,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            ["controller"],
            registry=r,
        )

    def register(self, controller: str, workers: int) -> None:
        """Create every per-controller series now, so the first scrape already shows them."""
        for result in self.RESULTS:
            self.total.labels(controller, result)
        self.errors.labels(controller)
        self.terminal_errors.labels(controller)
        self.panics.labels(controller)
        self.time.labels(controller)
        self.max_concurrent_reconciles.labels(controller).set(workers)
        self.active_workers.labels(controller).set(0)


class Controller:
    """Owns a queue and its workers. ``run`` is one coroutine; cancelling it stops them all."""

    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        *,
        options: ControllerOptions | None = None,
        registry: CollectorRegistry | None = None,
        rate_limiter: RateLimiter[str] | None = None,
    ) -> None:
        self.name = name
        self.reconciler = reconciler
        self.options = options or ControllerOptions()
        if self.options.workers < 1:
            raise ValueError(f"controller {name}: workers must be >= 1")
        self.metrics = ReconcileMetrics.of(registry)
        self.metrics.register(name, self.options.workers)
        self.queue: WorkQueue[str] = WorkQueue(name, rate_limiter=rate_limiter, registry=registry)
        self._active = 0

    def enqueue(self, key: str, priority: int = 0) -> None:
        """Reconcile ``key``, before every waiting key of a lower ``priority``."""
        self.queue.add(key, priority)

    def enqueue_all(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.queue.add(key)

    async def run(self, initial_keys: Callable[[], Iterable[str]] | None = None) -> None:
        """Work until cancelled. ``initial_keys`` are enqueued first: on gaining leadership,
        every object is reconciled once, so nothing changed while no one led is missed."""
        if initial_keys is not None:
            self.enqueue_all(initial_keys())
        log.info("controller started", controller=self.name, workers=self.options.workers)
        try:
            async with asyncio.TaskGroup() as group:
                for i in range(self.options.workers):
                    group.create_task(self._worker(), name=f"{self.name}-worker-{i}")
                group.create_task(self._report_unfinished_work(), name=f"{self.name}-metrics")
        finally:
            log.info("controller stopped", controller=self.name)

    async def shut_down(self, timeout: float | None = None) -> bool:
        """Stop taking keys, new or waiting, and let in-flight reconciles finish within
        ``options.drain_timeout`` (or ``timeout``, if less); True if all finished. A key left
        waiting is reconciled by whoever leads next: every object is, on taking the lead."""
        limit = self.options.drain_timeout if timeout is None else timeout
        return await self.queue.shut_down_with_drain(min(self.options.drain_timeout, limit))

    async def _report_unfinished_work(self) -> None:
        while True:
            self.queue.update_unfinished_work()
            await asyncio.sleep(1.0)

    async def _worker(self) -> None:
        while True:
            try:
                # Stopping: no new reconcile starts (one could write after SIGTERM); the
                # queue would still hand out what waits, as client-go's.
                if self.queue.shutting_down:
                    return
                key = await self.queue.get()
            except QueueShutDown:
                return
            try:
                await self._process(key)
            except asyncio.CancelledError:
                # Unfinished: hand it back so whoever leads next (maybe us) processes it.
                self.queue.done(key)
                self.queue.add(key)
                raise
            self.queue.done(key)

    async def _process(self, key: str) -> None:
        """One reconcile. Every log line inside carries ``controller``, ``key`` and a fresh
        ``reconcileID`` (controller-runtime's names), and it ends with one info line saying
        the outcome and how long it took."""
        with structlog.contextvars.bound_contextvars(
            controller=self.name, key=key, reconcileID=str(uuid.uuid4())
        ):
            await self._process_bound(key)

    def _failed(self, key: str, exc: Exception) -> str:
        """A reconcile's exception, counted, logged and retried with backoff; its outcome."""
        m = self.metrics
        if isinstance(exc, ApiError) and exc.conflict:
            # Optimistic concurrency: a write decided on an object that changed since (its
            # precondition refused). No error: the next reconcile reads the newer one.
            m.total.labels(self.name, "requeue").inc()
            log.info("reconcile raced a change; retrying", path=exc.path)
            self.queue.add_rate_limited(key)
            return "requeue"
        m.total.labels(self.name, "error").inc()
        m.errors.labels(self.name).inc()
        if not isinstance(exc, OSError | ApiError):
            # Not an answer from the API server nor the network: a bug, what Go panics on.
            m.panics.labels(self.name).inc()
        log.warning(
            "reconcile failed; retrying",
            error=f"{type(exc).__name__}: {exc}",
            retries=self.queue.num_requeues(key),
            # An answer from the API server or a network error is expected: one line.
            exc_info=not isinstance(exc, OSError | ApiError),
        )
        self.queue.add_rate_limited(key)
        return "error"

    async def _process_bound(self, key: str) -> None:
        m = self.metrics
        self._active += 1
        m.active_workers.labels(self.name).set(self._active)
        started = time.monotonic()
        outcome = "error"
        try:
            async with asyncio.timeout(self.options.reconcile_timeout):
                result = await self.reconciler.reconcile(key)
        except TerminalError as exc:
            m.total.labels(self.name, "error").inc()
            m.errors.labels(self.name).inc()
            m.terminal_errors.labels(self.name).inc()
            log.error("reconcile failed permanently", error=str(exc))
            self.queue.forget(key)
        except TimeoutError:
            m.total.labels(self.name, "error").inc()
            m.errors.labels(self.name).inc()
            log.warning("reconcile timed out; retrying", timeout=self.options.reconcile_timeout)
            self.queue.add_rate_limited(key)
        except Exception as exc:
            outcome = self._failed(key, exc)
        else:
            if result.requeue_after is not None:
                outcome = "requeue_after"
                self.queue.forget(key)
                self.queue.add_after(key, result.requeue_after)
            elif result.requeue:
                outcome = "requeue"
                self.queue.add_rate_limited(key)
            else:
                outcome = "success"
                self.queue.forget(key)
            m.total.labels(self.name, outcome).inc()
        finally:
            self._active -= 1
            seconds = time.monotonic() - started
            m.active_workers.labels(self.name).set(self._active)
            m.time.labels(self.name).observe(seconds)
            log.info("reconcile finished", result=outcome, seconds=round(seconds, 6))
