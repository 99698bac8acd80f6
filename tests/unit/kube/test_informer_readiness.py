"""Readiness tells the truth after an outage: an informer is ``healthy`` (and the manager
``ready``) only while its cache is proven current. From the moment its stream is lost until a
relist completes or the resumed watch delivers an event or bookmark, it is not; an open
connection alone proves nothing (after an API server restart, a resumed watch is answered
200, then 410). Over the scripted fake API of ``tests/support/informer_fakes.py``.

Issue 37 (finding 7): after a 20 s outage the caches stayed stale while ``/readyz`` said true.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import aiohttp
import pytest
from structlog.testing import capture_logs

from linkerd_config.kube import informer as informer_module
from linkerd_config.kube.informer import Informer
from linkerd_config.kube.leader import NoElection
from linkerd_config.kube.resource import Json
from linkerd_config.manager import Manager
from tests.support.informer_fakes import Body, FakeApi, make_informer, page, running
from tests.support.watch_lines import cm, line, status


def cached_rv(inf: Informer, name: str) -> str | None:
    obj = inf.store.get(f"ns/{name}")
    return None if obj is None else str(obj["metadata"]["resourceVersion"])


def observing(seen: list[bool], inf: list[Informer]) -> Callable[[Json], Json]:
    """A transform that notes whether the informer called itself healthy while it listed."""

    def transform(obj: Json) -> Json:
        if inf:
            seen.append(inf[0].healthy)
        return obj

    return transform


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


async def test_not_healthy_while_relisting_after_a_resume_answered_410() -> None:
    """The resumed watch was accepted (200) and then refused (410): the cache is behind until
    the relist completes, and said so throughout it (before: healthy from the 200 on)."""
    api = FakeApi()
    api.lists.extend([page([cm("a", "1")], "1"), page([cm("a", "7"), cm("b", "7")], "7")])
    api.watches.extend(
        [
            aiohttp.ClientConnectionError("API server down"),
            Body([line("ERROR", status(410, "Expired", "too old resource version: 1 (6)"))]),
        ]
    )
    seen: list[bool] = []
    owner: list[Informer] = []
    inf, _ = make_informer(api, transform=observing(seen, owner))
    owner.append(inf)
    async with running(inf, api):
        assert inf.healthy
        assert (cached_rv(inf, "a"), cached_rv(inf, "b")) == ("7", "7")
    assert seen == [False, False, False]  # the first list, then both objects of the relist
    assert not inf.healthy  # a stopped informer follows nothing


async def test_a_silent_resumed_watch_is_replaced_by_a_relist(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A resume that says nothing proves nothing: not healthy while it is silent, then a
    relist proves the cache current (before: healthy from the moment it connected)."""
    monkeypatch.setattr(informer_module, "RESUME_PROOF_SECONDS", 0.05)
    api = FakeApi()
    api.lists.extend([page([cm("a", "1")], "1"), page([cm("a", "4")], "4")])
    api.watches.extend([aiohttp.ClientConnectionError("reset"), Body([], then_hang=True)])
    seen: list[bool] = []
    owner: list[Informer] = []
    inf, _ = make_informer(api, transform=observing(seen, owner))
    owner.append(inf)
    with capture_logs() as logs:
        async with running(inf, api):
            assert inf.healthy and cached_rv(inf, "a") == "4"
    assert seen == [False, False]
    reasons = [e["reason"] for e in logs if e["event"] == "relist"]
    assert reasons == ["initial", "resumed watch proved nothing (no event within 0.05 s)"]
    assert [p["resourceVersion"] for p in api.watch_calls()] == ["1", "1", "4"]


@pytest.mark.parametrize(
    "first",
    [
        line("MODIFIED", cm("a", "5")),
        line("BOOKMARK", {"kind": "ConfigMap", "metadata": {"resourceVersion": "5"}}),
    ],
    ids=["event", "bookmark"],
)
async def test_a_resumed_watch_proves_the_cache_with_its_first_event(first: bytes) -> None:
    """No relist needed: the first event or bookmark of the resume shows the server accepted
    the resourceVersion and is streaming what followed it."""
    api = FakeApi()
    api.lists.append(page([cm("a", "1")], "1"))
    dropped = Body([], then_hang=True)
    api.watches.extend([dropped, Body([first], then_hang=True)])
    inf, _ = make_informer(api)
    states: list[bool] = []

    async def sample() -> None:
        while True:
            if not states or states[-1] != inf.healthy:
                states.append(inf.healthy)
            await asyncio.sleep(0)

    sampler = asyncio.create_task(sample())
    task = asyncio.create_task(inf.run())
    try:
        with capture_logs() as logs:
            await until(lambda: inf.healthy)
            dropped.set_exception(aiohttp.ClientConnectionError("connection dropped"))
            await until(lambda: inf.resource_version == "5" and inf.healthy)
            await asyncio.sleep(0.01)
    finally:
        for t in (task, sampler):
            t.cancel()
        await asyncio.gather(task, sampler, return_exceptions=True)
    assert states[:4] == [False, True, False, True]
    assert len(api.list_calls()) == 1
    proofs = [e["first"] for e in logs if e["event"] == "watch resumed: cache current again"]
    assert proofs == [first.split(b'"')[3].decode()]


async def test_manager_not_ready_from_a_lost_stream_until_the_cache_is_proven_current(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The manager's readiness follows its informers' (and liveness stays: an outage is no
    reason to restart): ready, then the stream drops and the resumed watch stays silent, so
    not ready; ready again only with the relist, whose object is cached by then."""
    monkeypatch.setattr(informer_module, "RESUME_PROOF_SECONDS", 0.3)
    api = FakeApi()
    dropped = Body([], then_hang=True)
    api.lists.extend([page([cm("a", "1")], "1"), page([cm("a", "1"), cm("late", "9")], "9")])
    api.watches.extend([dropped, Body([], then_hang=True)])
    inf, _ = make_informer(api)
    manager = Manager(NoElection())
    manager.add_informer(inf)
    stop = asyncio.Event()
    run = asyncio.create_task(manager.run(stop))
    unready: list[tuple[bool, bool]] = []
    try:
        await until(manager.ready)
        dropped.set_exception(aiohttp.ClientConnectionError("connection dropped"))
        await until(lambda: not manager.ready())
        deadline = time.monotonic() + 10
        while not manager.ready():
            assert time.monotonic() < deadline, "never ready again"
            unready.append((manager.alive(), inf.store.get("ns/late") is not None))
            await asyncio.sleep(0.001)
        cached_when_ready = inf.store.get("ns/late") is not None
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(run, 10)
    assert cached_when_ready, "ready again before the cache caught up"
    assert len(unready) > 10  # the silent resume was waited out, not trusted
    assert all(alive for alive, _ in unready)
    assert len(api.list_calls()) == 2
