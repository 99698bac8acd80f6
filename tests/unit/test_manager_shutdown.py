"""A graceful stop runs each drain (the Event recorder's flush, in the app) once the
controllers have stopped and while this replica still leads, before the Lease is released and
before the servers stop; each is bounded by its timeout, and one that hangs or fails holds up
neither the others nor the stop."""

from __future__ import annotations

import asyncio

from structlog.testing import capture_logs

from linkerd_config.kube.leader import NoElection
from linkerd_config.manager import DRAIN_SECONDS, Manager
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

    def drain(name: str):  # type: ignore[no-untyped-def]
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
    manager = Manager(elector, shutdown_grace=0.5)
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
        # The hung drain is given what is left of the 0.5 s grace (at least 0.1 s), plus 1 s.
        await asyncio.wait_for(task, 10)
    assert ran == ["hangs", "fails", "times out", "finishes, leading=True"]
    assert elector.leadership_lost.is_set()
    said = {(e["event"], e.get("drain")) for e in logs}
    assert ("drain did not finish in time", "hangs") in said
    assert ("drain failed", "fails") in said
    assert ("drain did not finish in time", "late") in said
    assert not any(e.get("drain") == "ok" for e in logs)
