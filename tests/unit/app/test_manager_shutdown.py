"""A graceful stop runs each drain (the Event recorder's flush, in the app) once the
controllers have stopped and while this replica still leads, before the Lease is released and
before the servers stop; each is bounded by its timeout, and one that hangs or fails holds up
neither the others nor the stop. Drains get only the grace the Lease's release does not need:
a successor that waits out the lease duration leaves the controllers idle that long."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from linkerd_config.kube.controller import Controller, ControllerOptions, Result
from linkerd_config.kube.leader import NoElection
from linkerd_config.manager import DRAIN_SECONDS, Drain, Manager
from tests.support.leadership_fakes import SlowRelease
from tests.support.waiting import eventually


async def _started(manager: Manager) -> None:
    async def leading() -> bool:
        return manager.leading

    await eventually(leading, timeout=10, what="the manager leads")


async def test_drains_run_while_still_leading_and_before_the_servers_stop() -> None:
    elector = NoElection()
    manager = Manager(elector)
    server_stopped = asyncio.Event()

    async def server() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            server_stopped.set()

    seen: list[tuple[str, float, bool, bool]] = []

    def drain(name: str) -> Drain:
        async def run(timeout: float) -> bool:
            seen.append((name, timeout, elector.leadership_lost.is_set(), server_stopped.is_set()))
            return True

        return run

    manager.add_server("events", server)
    manager.add_drain("first", drain("first"))
    manager.add_drain("second", drain("second"))
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    await _started(manager)
    assert seen == []  # nothing drains while running
    stop.set()
    await asyncio.wait_for(task, 10)
    # In the order added, each given the full drain time (the grace is far off), the Lease
    # still held and the server still up; both gone once the stop is over.
    assert seen == [("first", DRAIN_SECONDS, False, False), ("second", DRAIN_SECONDS, False, False)]
    assert elector.leadership_lost.is_set() and server_stopped.is_set()


async def test_a_drain_that_hangs_or_fails_holds_up_neither_the_others_nor_the_stop() -> None:
    elector = NoElection()
    manager = Manager(elector, drain_timeout=0.3)
    ran: list[str] = []

    async def hangs(timeout: float) -> bool:
        ran.append("hangs")
        await asyncio.Event().wait()  # ignores its timeout
        return True

    async def fails(timeout: float) -> bool:
        ran.append("fails")
        raise RuntimeError("the API server went away")

    async def times_out(timeout: float) -> bool:
        ran.append("times out")
        return False  # as EventRecorder.flush answers when its writes took too long

    async def finishes(timeout: float) -> bool:
        ran.append(f"finishes, leading={not elector.leadership_lost.is_set()}")
        return True

    for name, drain in (("hangs", hangs), ("fails", fails), ("late", times_out), ("ok", finishes)):
        manager.add_drain(name, drain)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    await _started(manager)
    with capture_logs() as logs:
        stop.set()
        await asyncio.wait_for(task, 10)  # the hung drain is cut off at its 0.3 s
    assert ran == ["hangs", "fails", "times out", "finishes, leading=True"]
    assert elector.leadership_lost.is_set()
    said = {(e["event"], e.get("drain")) for e in logs}
    assert ("drain did not finish in time", "hangs") in said
    assert ("drain failed", "fails") in said
    assert ("drain did not finish in time", "late") in said
    assert not any(e.get("drain") == "ok" for e in logs)


async def _stop_with_a_slow_drain(grace: float) -> tuple[SlowRelease, list[float], list[str]]:
    """Stop a manager (drains up to 2 s each, 1.5 s kept for the release) with ``grace``,
    whose one drain takes all the time it is given (slow writes) and whose Lease release
    takes 1.2 s: what the drain got, and what was said."""
    leadership = SlowRelease(release_seconds=1.2)
    manager = Manager(leadership, shutdown_grace=grace, drain_timeout=2.0, release_reserve=1.5)
    given: list[float] = []

    async def slow(timeout: float) -> bool:
        given.append(timeout)
        await asyncio.sleep(timeout)
        return False

    manager.add_drain("events", slow)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    await _started(manager)
    with capture_logs() as logs:
        stop.set()
        await asyncio.wait_for(task, grace + 10)
    return leadership, given, [str(e["event"]) for e in logs]


async def test_drains_leave_the_lease_release_its_share_of_the_grace() -> None:
    # A drain given all of the 3 s grace (2 s, its cap) would leave the release 1 s of the
    # 1.2 s it takes: the Lease would stay held and a successor wait out its duration.
    leadership, given, said = await _stop_with_a_slow_drain(grace=3.0)
    (timeout,) = given
    assert 1.3 < timeout <= 1.5, timeout  # the grace less what the release keeps
    assert leadership.released, said
    assert "component did not stop in time" not in said


async def test_no_drain_when_the_release_needs_all_the_grace_left() -> None:
    leadership, given, said = await _stop_with_a_slow_drain(grace=1.4)
    assert given == []
    assert "no time left to drain; releasing the Lease" in said
    assert leadership.released


class _Hangs:
    """A reconciler whose every reconcile runs until cancelled (a rollout pass with a slow
    API server); ``started`` once one is running."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def reconcile(self, key: str) -> Result:
        self.started.set()
        await asyncio.Event().wait()
        return Result()


async def test_a_reconcile_running_at_the_stop_leaves_the_drains_and_release_theirs() -> None:
    """The controllers' own drain (30 s here) was not taken from the grace: a reconcile still
    running at SIGTERM used it all, the Events drain was skipped and the Lease release got
    1 s. They now get what the grace leaves after the drains, the cancellation and the
    release: here 8 - (1 + 5 + 1.5) = 0.5, so 1 s, the least."""
    leadership = SlowRelease(release_seconds=1.2)
    manager = Manager(leadership, shutdown_grace=8.0, drain_timeout=1.0, release_reserve=1.5)
    reconciler = _Hangs()
    controller = Controller(
        "test",
        reconciler,
        options=ControllerOptions(workers=1, reconcile_timeout=60, drain_timeout=30),
        registry=CollectorRegistry(),
    )
    manager.add_controller(controller, lambda: ["k"])
    given: list[float] = []

    async def events(timeout: float) -> bool:
        given.append(timeout)
        return True

    manager.add_drain("events", events)
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    await asyncio.wait_for(reconciler.started.wait(), 10)
    with capture_logs() as logs:
        started = time.monotonic()
        stop.set()
        await asyncio.wait_for(task, 20)
        took = time.monotonic() - started
    said = [str(e["event"]) for e in logs]
    assert "reconciles still running at shutdown" in said
    assert given == [1.0], said  # the Events drain ran, with its whole bound
    assert leadership.released, said
    assert took < 8.0, took  # within the grace: nothing waited out the 30 s
