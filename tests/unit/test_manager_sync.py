"""Before the caches sync, leader election has not started: the manager says so, again and
again, instead of staying silent (an unreachable API server looked like a hung process)."""

from __future__ import annotations

import asyncio

from structlog.testing import capture_logs

from linkerd_config.kube.leader import NoElection
from linkerd_config.manager import Manager
from tests.support.informer_fakes import SyncsWhenTold
from tests.support.waiting import until


class NeverSyncs:
    """An informer whose API server never answers."""

    name = "linkerdconfigs"
    has_synced = False
    healthy = False

    async def run(self) -> None:
        await asyncio.Event().wait()

    async def wait_synced(self, timeout: float | None = None) -> None:
        await asyncio.Event().wait()


async def test_waiting_for_caches_is_reported_until_stopped() -> None:
    manager = Manager(NoElection(), sync_report_interval=0.05)
    manager.add_informer(NeverSyncs())  # type: ignore[arg-type]
    stop = asyncio.Event()
    with capture_logs() as logs:
        task = asyncio.create_task(manager.run(stop))
        await asyncio.sleep(0.3)
        stop.set()
        await asyncio.wait_for(task, 10)
    said = [e for e in logs if e["event"] == "leader election not started: caches not synced"]
    assert len(said) >= 3
    assert all(e["waiting"] == ["linkerdconfigs"] and e["log_level"] == "warning" for e in said)
    assert any(e["event"] == "leader election starts once the caches have synced" for e in logs)
    assert not manager.leading and not manager.synced.is_set()


async def test_a_component_down_before_the_caches_sync_starts_no_campaign() -> None:
    """A server that cannot start (its port taken) stops the process: it must not first
    campaign for the Lease (a dying replica briefly leading bumps the Lease's transitions)."""
    elector = NoElection()
    manager = Manager(elector)

    async def cannot_listen() -> None:
        raise OSError(98, "cannot listen on 127.0.0.1:8081: Address already in use")

    manager.add_server("health", cannot_listen)
    manager.add_informer(NeverSyncs())  # type: ignore[arg-type]
    with capture_logs() as logs:
        await asyncio.wait_for(manager.run(asyncio.Event()), 10)
    said = [str(e["event"]) for e in logs]
    assert "component exited; shutting down" in said
    assert "caches synced" not in said
    assert not manager.synced.is_set()
    assert "leader election disabled; leading" not in said  # its campaign never ran


async def test_an_informer_ready_does_not_wait_for_starts_once_the_others_have_synced() -> None:
    """``add_informer(wait=False)``: neither ready nor the election waits for it, and its
    first list starts only once the others' are in (it does not slow them); once it has
    filled, its health counts toward ready like any other's."""
    manager = Manager(NoElection())
    needed, later = SyncsWhenTold("pods"), SyncsWhenTold("meshed-pods")
    manager.add_informer(needed)  # type: ignore[arg-type]
    manager.add_informer(later, wait=False)  # type: ignore[arg-type]
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    try:
        await until(needed.started.is_set)
        await asyncio.sleep(0.05)
        assert not later.started.is_set(), "listed before the others were in"
        assert not manager.ready()
        needed.fill()
        await until(manager.ready)
        assert later.started.is_set() and not later.has_synced  # ready without it
        assert manager.synced.is_set()
        later.fill()
        assert manager.ready()
        later.healthy = False  # its stream lost, as any cache's
        assert not manager.ready()
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
