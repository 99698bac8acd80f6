"""The manager: builds nothing, owns everything long-lived, and stops it in order.

Each component is one coroutine that runs until cancelled. Start order, and why:

1. probe and metrics servers: a kubelet must be able to ask from the first second;
2. servers that every replica runs (the admission webhooks): followers answer too;
3. informers: every replica keeps its caches warm, so a new leader acts at once;
4. once caches have synced: ready, and the leader election campaign starts; an informer
   started on demand (``add_informer(on_demand=True)``) starts when first wanted
   (``Informer.want``), never before the others have synced: a cache only rare decisions
   read costs nothing until one does;
5. each leadership term: a fresh LIST of every informer (a follower's cache may have gone
   stale unnoticed: a new leader must not act on it), then the controllers, with every known
   key enqueued once (level-triggered: nothing changed while no one led is missed).

Shutdown runs in reverse under one grace deadline: controllers start no new reconcile and
drain those in flight (in what the grace leaves after the drains' bounds, the cancellation of
what still runs and the Lease release), the drains run (writes still waiting, such as Events,
made while this replica still leads and its writes are allowed), the elector releases the
Lease (a successor takes over at once), then informers and servers stop. A task that does
not stop in time is named in the log.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from linkerd_config.kube.concurrently import all_of
from linkerd_config.kube.controller import Controller
from linkerd_config.kube.informer import Informer

log = structlog.get_logger(__name__)

FRESH_SYNC_SECONDS = 10.0
"""Caches listed this recently need no second LIST when leadership comes."""

DRAIN_SECONDS = 5.0
"""The most a shutdown waits for one drain (less when the grace deadline is nearer)."""

RELEASE_SECONDS = 5.0
"""What drains leave of the grace for the elector to release the Lease: a successor that
must wait out the lease duration instead leaves the controllers idle that long."""

CANCEL_SECONDS = 5.0
"""How long reconciles still running after their drain are given to end once cancelled."""

Drain = Callable[[float], Awaitable[bool]]
"""Writes what its component still holds within the seconds given; False if it could not."""


class Leadership(Protocol):
    """What the manager needs of an elector (LeaderElector, or NoElection)."""

    leadership_lost: asyncio.Event

    async def run(self) -> None: ...

    async def wait_for_leadership(self, timeout: float | None = None) -> None: ...


@dataclass
class _LeaderWork:
    controller: Controller
    initial_keys: Callable[[], Iterable[str]]
    new_term: Callable[[], None] | None = None
    """Called before each term's controller starts: what a reconciler remembers of its last
    term may be older than another leader's writes since."""


@dataclass
class Manager:
    leadership: Leadership
    sync_timeout: float = 120.0
    sync_report_interval: float = 10.0
    """While caches have not synced (the API server unreachable, say), say so this often:
    leader election starts only after them, and would otherwise be silent."""
    shutdown_grace: float = 25.0
    drain_timeout: float = DRAIN_SECONDS
    release_reserve: float = RELEASE_SECONDS
    _servers: list[tuple[str, Callable[[], Awaitable[None]]]] = field(default_factory=list)
    _informers: list[Informer] = field(default_factory=list)
    _on_demand: list[Informer] = field(default_factory=list)
    # Invariant: _informers and _on_demand are disjoint; only _informers gate sync.
    _leader_work: list[_LeaderWork] = field(default_factory=list)
    _drains: list[tuple[str, Drain]] = field(default_factory=list)
    _tasks: dict[str, asyncio.Task[Any]] = field(default_factory=dict)
    # Invariant: _tasks holds exactly the running components, in start order.
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    _failure: asyncio.Event = field(default_factory=asyncio.Event)
    # Invariant: set once any component returned or raised on its own (not by cancellation).
    leading: bool = False
    _stopping: bool = False
    _synced_at: float = 0.0

    def add_server(self, name: str, run: Callable[[], Awaitable[None]]) -> None:
        self._servers.append((name, run))

    def add_drain(self, name: str, drain: Drain) -> None:
        """At shutdown, once the controllers have stopped and before the Lease is released,
        in the grace the release does not need (``RELEASE_SECONDS``)."""
        self._drains.append((name, drain))

    def add_informer(self, informer: Informer, *, on_demand: bool = False) -> None:
        """``on_demand``: a cache that only rare decisions read (and those wait for it
        themselves): started on demand, when first wanted (``Informer.want``) and the others
        have synced; until then it holds nothing and opens no watch. Neither ready nor the
        election waits for its first list (``sync_timeout`` at most from when it was wanted:
        past it, ready is False until it has filled). Once filled, it counts as every other:
        its health toward ready, a relist each new term. Once started, it runs until the
        manager stops."""
        (self._on_demand if on_demand else self._informers).append(informer)

    def add_controller(
        self,
        controller: Controller,
        initial_keys: Callable[[], Iterable[str]],
        new_term: Callable[[], None] | None = None,
    ) -> None:
        self._leader_work.append(_LeaderWork(controller, initial_keys, new_term))

    def retry_informers(self) -> None:
        """The API server answers again: every informer waiting out a backoff retries now."""
        for informer in (*self._informers, *self._on_demand):
            informer.retry_now()

    def ready(self) -> bool:
        """Synced, every filled informer's cache proven current (``Informer.healthy``: none
        between a lost stream and a relist or resumed watch that proves it again), none of
        those started on demand still filling past ``sync_timeout`` since wanted, every
        component running. Unlike ``alive``, this turns False during an API server outage, and stays
        False until each cache has caught up: a kubelet then takes the replica out of its
        Services rather than let it answer from stale caches."""
        if self._stopping:
            return False
        return (
            self.synced.is_set()
            and all(i.healthy for i in self._informers)
            and all(self._fine_on_demand(i) for i in self._on_demand)
            and all(not t.done() for n, t in self._tasks.items() if not n.startswith("controller:"))
        )

    def _fine_on_demand(self, informer: Informer) -> bool:
        if informer.has_synced:
            return informer.healthy
        if informer.wanted_at is None:
            return True  # not started: nothing to fill
        since = max(informer.wanted_at, self._synced_at)  # it starts no sooner than sync
        return time.monotonic() - since < self.sync_timeout

    def alive(self) -> bool:
        """Every long-lived task still runs (a crashed informer means restart me)."""
        return not self._failure.is_set() and all(not t.done() for t in self._tasks.values())

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set (SIGTERM), then shut down in reverse order."""
        try:
            for name, server in self._servers:
                self._start(f"server:{name}", server())
            for informer in self._informers:
                self._start(f"informer:{informer.name}", informer.run())
            await self._wait_synced(stop)
            if stop.is_set() or self._failed():  # a component down: no campaign for the Lease
                return
            self.synced.set()
            self._synced_at = time.monotonic()
            log.info("caches synced", informers=[i.name for i in self._informers])
            for informer in self._on_demand:
                self._start(f"informer:{informer.name}", self._when_wanted(informer))
            self._start("leader-election", self.leadership.run())
            await self._lead_while_elected(stop)
        finally:
            await self._shut_down()

    async def _when_wanted(self, informer: Informer) -> None:
        await informer.wait_wanted()
        log.info("cache wanted: listing it", informer=informer.name)
        await informer.run()

    async def _wait_synced(self, stop: asyncio.Event) -> None:
        waits = [i.wait_synced(self.sync_timeout) for i in self._informers]
        log.info(
            "leader election starts once the caches have synced",
            informers=[i.name for i in self._informers],
        )
        await _first(
            asyncio.gather(*waits), stop.wait(), self._any_task_failed(), self._report_unsynced()
        )

    async def _report_unsynced(self) -> None:
        """Runs until cancelled (by ``_first``, when syncing ends one way or another)."""
        started = time.monotonic()
        while True:
            await asyncio.sleep(self.sync_report_interval)
            log.warning(
                "leader election not started: caches not synced",
                waiting=[i.name for i in self._informers if not i.has_synced],
                seconds=round(time.monotonic() - started),
                timeout=self.sync_timeout,
            )

    async def _lead_while_elected(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await _first(
                self.leadership.wait_for_leadership(), stop.wait(), self._any_task_failed()
            )
            if stop.is_set() or self._failed():
                return
            if time.monotonic() - self._synced_at > FRESH_SYNC_SECONDS:
                await _first(self._relist_all(), stop.wait(), self._any_task_failed())
                if stop.is_set() or self._failed():
                    return
            self.leading = True
            log.info("leading: starting controllers", controllers=self._controller_names())
            for work in self._leader_work:
                if work.new_term is not None:
                    work.new_term()
                self._start(
                    f"controller:{work.controller.name}", work.controller.run(work.initial_keys)
                )
            await _first(
                self.leadership.leadership_lost.wait(), stop.wait(), self._any_task_failed()
            )
            self.leading = False
            if stop.is_set() or self._failed():
                return
            log.warning("leadership lost: stopping controllers now")
            await self._stop_controllers(drain=False)

    async def _relist_all(self) -> None:
        started = time.monotonic()
        # One still on its first list is as fresh as a relist; asked to relist, it would
        # start that list again (or, listing in pages, list once more when its watch ends).
        filled = [i for i in self._on_demand if i.has_synced]
        try:
            await all_of(
                *(
                    i.relist("leadership gained", self.sync_timeout)
                    for i in (*self._informers, *filled)
                )
            )
        except TimeoutError as exc:
            log.warning("relist on gaining leadership incomplete; leading anyway", error=str(exc))
            return
        log.info("caches relisted for the new term", seconds=round(time.monotonic() - started, 2))

    def _controller_names(self) -> list[str]:
        return [w.controller.name for w in self._leader_work]

    def _start(self, name: str, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        task.add_done_callback(self._on_done)
        self._tasks[name] = task

    def _on_done(self, task: asyncio.Task[Any]) -> None:
        if not task.cancelled():
            self._failure.set()

    def _failed(self) -> list[str]:
        return [n for n, t in self._tasks.items() if t.done() and not t.cancelled()]

    async def _any_task_failed(self) -> None:
        await self._failure.wait()
        for name in self._failed():
            task = self._tasks[name]
            exc = task.exception()
            log.error("component exited; shutting down", component=name, error=describe(exc))

    async def _stop_controllers(self, drain: bool, budget: float | None = None) -> None:
        names = [n for n in self._tasks if n.startswith("controller:")]
        if drain:
            started = time.monotonic()
            for work in self._leader_work:
                left = None if budget is None else max(0.0, budget - (time.monotonic() - started))
                finished = await work.controller.shut_down(left)
                if not finished:
                    log.warning(
                        "reconciles still running at shutdown", controller=work.controller.name
                    )
        await self._cancel(names, timeout=CANCEL_SECONDS)

    async def _shut_down(self) -> None:
        self._stopping = True
        started = time.monotonic()
        # In-flight reconciles get what the grace leaves after the drains' bounds, the
        # cancellation of what is still running and the Lease release: they never take it.
        kept = self.release_reserve + CANCEL_SECONDS + (self.drain_timeout if self._drains else 0.0)
        await self._stop_controllers(drain=True, budget=max(1.0, self.shutdown_grace - kept))
        for name, drain in self._drains:
            spare = self.shutdown_grace - (time.monotonic() - started) - self.release_reserve
            if spare <= 0:
                log.warning("no time left to drain; releasing the Lease", drain=name)
                break
            await self._drain(name, drain, min(self.drain_timeout, spare))
        # Reverse start order: the elector releases the Lease before caches and servers go.
        for name in reversed(list(self._tasks)):
            remaining = max(1.0, self.shutdown_grace - (time.monotonic() - started))
            await self._cancel([name], timeout=remaining)
        log.info("manager stopped", seconds=round(time.monotonic() - started, 2))

    async def _drain(self, name: str, drain: Drain, timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout):  # a drain that ignores its timeout too
                done = await drain(timeout)
        except TimeoutError:
            done = False
        except Exception as exc:
            log.error("drain failed", drain=name, error=describe(exc))
            return
        if not done:
            log.warning("drain did not finish in time", drain=name, timeout=round(timeout, 2))

    async def _cancel(self, names: list[str], timeout: float) -> None:
        tasks = [self._tasks.pop(n) for n in names if n in self._tasks]
        for task in tasks:
            task.cancel()
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            log.error("component did not stop in time", component=task.get_name(), timeout=timeout)
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                log.error(
                    "component failed", component=task.get_name(), error=describe(task.exception())
                )


def describe(exc: BaseException | None) -> str:
    """A component's failure in one line: the exceptions inside task groups, not the groups
    ("OSError: [Errno 98] cannot listen on 127.0.0.1:9443: Address already in use", not
    "ExceptionGroup('unhandled errors in a TaskGroup', [ExceptionGroup(...)])")."""
    if exc is None:
        return "returned without an error"
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


async def _first(*aws: Awaitable[Any]) -> None:
    """Wait until the first of several awaitables finishes; cancel the others."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()  # re-raise a failure (e.g. cache sync timeout)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
