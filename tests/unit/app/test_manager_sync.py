"""Before the caches sync, leader election has not started: the manager says so, again and
again, instead of staying silent (an unreachable API server looked like a hung process)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from structlog.testing import capture_logs

from linkerd_config import manager as manager_module
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


@contextlib.asynccontextmanager
async def running_with_a_cache_on_demand(
    manager: Manager, *, filled: bool = False
) -> AsyncIterator[tuple[SyncsWhenTold, SyncsWhenTold]]:
    """``manager`` running with a cache it waits for ("pods", filled already if ``filled``)
    and one started on demand ("meshed-pods", ``on_demand=True``); stopped on the way out."""
    needed, later = SyncsWhenTold("pods"), SyncsWhenTold("meshed-pods")
    manager.add_informer(needed)  # type: ignore[arg-type]
    manager.add_informer(later, on_demand=True)  # type: ignore[arg-type]
    if filled:
        needed.fill()
    stop = asyncio.Event()
    task = asyncio.create_task(manager.run(stop))
    try:
        yield needed, later
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_an_informer_on_demand_starts_when_wanted_and_never_before_the_others_synced() -> (
    None
):
    """``add_informer(on_demand=True)``: not started until wanted, and then not before the others'
    first lists are in (it does not slow them); neither ready nor the election waits for it;
    once it has filled, its health counts toward ready like any other's."""
    manager = Manager(NoElection())
    async with running_with_a_cache_on_demand(manager) as (needed, later):
        await until(needed.started.is_set)
        later.want()  # wanted early: still waits for the others
        await asyncio.sleep(0.05)
        assert not later.started.is_set(), "listed before the others were in"
        assert not manager.ready()
        needed.fill()
        await until(manager.ready)
        await until(later.started.is_set)
        assert not later.has_synced  # ready without it
        assert manager.synced.is_set()
        later.fill()
        assert manager.ready()
        later.healthy = False  # its stream lost, as any cache's
        assert not manager.ready()


async def test_an_informer_on_demand_never_wanted_is_never_started() -> None:
    manager = Manager(NoElection(), sync_timeout=0.2)
    async with running_with_a_cache_on_demand(manager, filled=True) as (_, later):
        await until(lambda: manager.leading)
        await asyncio.sleep(0.4)  # past sync_timeout: nothing to fill, nothing late
        assert not later.started.is_set()
        assert manager.ready()


async def test_a_new_term_relists_what_has_filled_not_a_first_list_still_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A term that starts long after the caches synced relists them (a follower's cache may
    have gone stale unnoticed), but not one still on its first list: that list is as fresh,
    and a relist would start it again. Nor does the term wait for it."""
    monkeypatch.setattr(manager_module, "FRESH_SYNC_SECONDS", -1.0)  # every term relists
    manager = Manager(NoElection())
    async with running_with_a_cache_on_demand(manager, filled=True) as (needed, later):
        later.want()
        await until(lambda: manager.leading)
        assert needed.relists == ["leadership gained"]
        assert later.relists == [] and not later.has_synced


async def test_a_cache_on_demand_that_never_fills_makes_the_replica_unready_once_wanted() -> None:
    """Waited for by nothing while its first list runs, but not for ever: past
    ``sync_timeout`` from when it was wanted, unfilled (its list failing, say), ready is
    False until it fills."""
    manager = Manager(NoElection(), sync_timeout=0.3)
    async with running_with_a_cache_on_demand(manager, filled=True) as (_, later):
        await until(manager.ready)
        await asyncio.sleep(0.4)
        assert manager.ready()  # not wanted: not late
        later.want()
        await until(later.started.is_set)
        assert manager.ready()  # wanted just now
        await until(lambda: not manager.ready())
        assert not later.has_synced
        later.fill()
        assert manager.ready()
