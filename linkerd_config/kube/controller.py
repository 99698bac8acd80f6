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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import structlog

from linkerd_config.kube.client import ApiError
from linkerd_config.kube.metrics import Metrics
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


class Controller:
    """Owns a queue and its workers. ``run`` is one coroutine; cancelling it stops them all."""

    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        *,
        options: ControllerOptions | None = None,
        metrics: Metrics | None = None,
        rate_limiter: RateLimiter[str] | None = None,
    ) -> None:
        self.name = name
        self.reconciler = reconciler
        self.options = options or ControllerOptions()
        if self.options.workers < 1:
            raise ValueError(f"controller {name}: workers must be >= 1")
        self.metrics = metrics or Metrics()
        self.queue: WorkQueue[str] = WorkQueue(
            name, rate_limiter=rate_limiter, metrics=self.metrics
        )
        self.metrics.register_controller(name, self.options.workers)
        self._active = 0

    def enqueue(self, key: str) -> None:
        self.queue.add(key)

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

    async def shut_down(self) -> bool:
        """Stop taking keys and let in-flight reconciles finish; True if all finished."""
        return await self.queue.shut_down_with_drain(self.options.drain_timeout)

    async def _report_unfinished_work(self) -> None:
        while True:
            self.queue.update_unfinished_work()
            await asyncio.sleep(1.0)

    async def _worker(self) -> None:
        while True:
            try:
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
        m = self.metrics
        self._active += 1
        m.active_workers.labels(self.name).set(self._active)
        started = time.monotonic()
        try:
            async with asyncio.timeout(self.options.reconcile_timeout):
                result = await self.reconciler.reconcile(key)
        except TerminalError as exc:
            m.reconcile_total.labels(self.name, "error").inc()
            m.reconcile_errors.labels(self.name).inc()
            log.error("reconcile failed permanently", controller=self.name, key=key, error=str(exc))
            self.queue.forget(key)
        except TimeoutError:
            m.reconcile_total.labels(self.name, "error").inc()
            m.reconcile_errors.labels(self.name).inc()
            log.warning(
                "reconcile timed out; retrying",
                controller=self.name,
                key=key,
                timeout=self.options.reconcile_timeout,
            )
            self.queue.add_rate_limited(key)
        except Exception as exc:
            m.reconcile_total.labels(self.name, "error").inc()
            m.reconcile_errors.labels(self.name).inc()
            if not isinstance(exc, OSError | ApiError):
                # Not an answer from the API server nor the network: a bug, what Go panics on.
                m.reconcile_panics.labels(self.name).inc()
            log.warning(
                "reconcile failed; retrying",
                controller=self.name,
                key=key,
                error=f"{type(exc).__name__}: {exc}",
                retries=self.queue.num_requeues(key),
                # An answer from the API server or a network error is expected: one line.
                exc_info=not isinstance(exc, OSError | ApiError),
            )
            self.queue.add_rate_limited(key)
        else:
            if result.requeue_after is not None:
                m.reconcile_total.labels(self.name, "requeue_after").inc()
                self.queue.forget(key)
                self.queue.add_after(key, result.requeue_after)
            elif result.requeue:
                m.reconcile_total.labels(self.name, "requeue").inc()
                self.queue.add_rate_limited(key)
            else:
                m.reconcile_total.labels(self.name, "success").inc()
                self.queue.forget(key)
        finally:
            self._active -= 1
            m.active_workers.labels(self.name).set(self._active)
            m.reconcile_time.labels(self.name).observe(time.monotonic() - started)
