"""How an informer fills its cache: a streaming list where the client and server do it
(KEP-3157: a watch that starts with every object, ended by an ``initial-events-end``
bookmark), paged LISTs otherwise; and a paged LIST cut short leaves no request behind.
Over the scripted fake API of ``tests/support/informer_fakes.py``."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Mapping
from typing import Any

import pytest

from linkerd_config.kube import informer as informer_module
from linkerd_config.kube.client import ApiError
from linkerd_config.kube.informer import INITIAL_EVENTS_END, Informer
from linkerd_config.kube.resource import Json
from tests.support.informer_fakes import (
    Body,
    FakeApi,
    TellsMetadataFirst,
    make_informer,
    page,
    running,
)
from tests.support.waiting import until
from tests.support.watch_lines import cm, line, status


def end_of_initial_events(rv: str) -> bytes:
    return line(
        "BOOKMARK",
        {
            "kind": "ConfigMap",
            "metadata": {"resourceVersion": rv, "annotations": {INITIAL_EVENTS_END: "true"}},
        },
    )


def streaming_api() -> FakeApi:
    api = FakeApi()
    api.watch_list = True  # type: ignore[misc]  # the class says False; this client streams
    return api


async def test_a_streaming_list_fills_the_cache_then_the_watch_resumes_from_its_end() -> None:
    api = streaming_api()
    api.watches.extend(
        [
            Body(
                [
                    line("ADDED", cm("a", "10")),
                    line("ADDED", cm("b", "11")),
                    # An ordinary bookmark in the middle is not the end.
                    line("BOOKMARK", {"kind": "ConfigMap", "metadata": {"resourceVersion": "12"}}),
                    line("MODIFIED", cm("a", "13")),
                    end_of_initial_events("20"),
                ]
            ),
            Body([line("ADDED", cm("c", "21"))]),
        ]
    )
    inf, rec = make_informer(api, label_selector="app=x")
    async with running(inf, api):
        assert inf.has_synced
        assert sorted(rec.view) == ["a", "b", "c"]
        assert rec.view["a"]["metadata"]["resourceVersion"] == "13"
    assert api.list_calls() == []
    initial, resumed = api.watch_calls()[:2]
    assert initial["sendInitialEvents"] is True
    assert initial["resourceVersionMatch"] == "NotOlderThan"
    assert initial["allowWatchBookmarks"] is True
    assert initial["labelSelector"] == "app=x"
    assert "resourceVersion" not in initial  # "not older than" the server's current state
    assert resumed["resourceVersion"] == "20"
    assert "sendInitialEvents" not in resumed


async def test_a_server_that_refuses_streaming_lists_is_listed_in_pages_from_then_on() -> None:
    api = streaming_api()
    refused = ApiError(
        422, "GET", "/x", status(422, "Invalid", "sendInitialEvents is forbidden"), None
    )
    api.watches.extend([refused, Body([]), Body([])])
    api.lists.extend([page([cm("a", "5")], "5"), page([cm("a", "5")], "7")])
    inf, rec = make_informer(api)
    async with running(inf, api):
        assert inf.has_synced and sorted(rec.view) == ["a"]
        await inf.relist("asked", timeout=5)
    assert len(api.list_calls()) == 2  # the start and the relist, both in pages
    streamed = [w for w in api.watch_calls() if w.get("sendInitialEvents")]
    assert len(streamed) == 1  # asked once, never again


async def test_a_stream_that_ends_before_its_bookmark_falls_back_to_pages() -> None:
    api = streaming_api()
    api.watches.extend([Body([line("ADDED", cm("a", "3"))])])  # ends, no bookmark
    api.lists.append(page([cm("a", "3"), cm("b", "4")], "4"))
    inf, rec = make_informer(api)
    async with running(inf, api):
        assert sorted(rec.view) == ["a", "b"]
    assert len(api.list_calls()) == 1


class SlowSecondPage(FakeApi):
    """The second page's answer never comes: the informer is cancelled meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def request(self, method: str, path: str, **kw: Any) -> Json:
        params: Mapping[str, Any] = kw.get("params") or {}
        if params.get("continue"):
            self.asked.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        return await super().request(method, path, **kw)


async def test_a_list_cut_short_cancels_the_page_it_asked_for_ahead() -> None:
    api = SlowSecondPage()
    api.lists.append(page([cm("a", "1")], "1", cont="next"))
    inf = Informer(api, cm_resource(), namespace="ns", page_size=1)
    task = asyncio.create_task(inf.run())
    async with asyncio.timeout(5):
        await api.asked.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert api.cancelled.is_set()
    leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert not [t for t in leftover if t.get_name().startswith("list-")]


async def test_the_next_page_is_asked_for_when_the_metadata_is_read_and_never_two_ahead() -> None:
    api = TellsMetadataFirst()
    api.lists.extend(
        [
            page([cm("a", "1")], "1", cont="p2"),
            page([cm("b", "1")], "1", cont="p3"),
            page([cm("c", "1")], "1"),
        ]
    )
    inf, rec = make_informer(api, page_size=1)
    task = asyncio.create_task(inf.run())
    try:
        # The second page is asked for while the first one's items are still to come ...
        await until(lambda: ("asked", "p2") in api.log)
        assert ("in", "") not in api.log
        await asyncio.sleep(0.01)
        # ... and the third only once the second is the one being read.
        assert ("asked", "p3") not in api.log
        api.release("")
        await until(lambda: ("asked", "p3") in api.log)
        assert api.log.index(("in", "")) < api.log.index(("asked", "p3"))
        api.release("p2")
        api.release("p3")
        await until(lambda: inf.has_synced)
        assert sorted(rec.view) == ["a", "b", "c"]
        assert api.most_in_flight == 2
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_page_whose_early_metadata_was_not_its_own_is_asked_for_again() -> None:
    """The metadata told early said another continue token than the page's (no API server
    does this): the page asked for on it is dropped and the right one asked for."""
    api = TellsMetadataFirst(told={"": "elsewhere"})
    api.lists.extend(
        [
            page([cm("a", "1")], "1", cont="p2"),
            page([cm("x", "1")], "1"),  # what "elsewhere" would be: asked, then dropped
            page([cm("b", "1")], "1"),
        ]
    )
    for token in ("", "elsewhere", "p2"):
        api.release(token)
    inf, rec = make_informer(api, page_size=1)
    async with running(inf, api):
        assert sorted(rec.view) == ["a", "b"]
    assert [p.get("continue") for p in api.list_calls()] == [None, "elsewhere", "p2"]


async def test_a_page_asked_for_early_that_failed_and_was_dropped_leaves_no_error_unread() -> None:
    """The early metadata named a page that does not follow (no API server does this), and
    asking for it failed: dropped, its error read (asyncio reports no unread exception)."""
    api = TellsMetadataFirst(told={"": "elsewhere"})
    api.lists.extend(
        [
            page([cm("a", "1")], "1", cont="p2"),
            ApiError(500, "GET", "/x", status(500, "InternalError", "boom"), None),
            page([cm("b", "1")], "1"),
        ]
    )
    api.release("")
    api.release("p2")
    unread: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: unread.append(context))
    try:
        inf, rec = make_informer(api, page_size=1)
        async with running(inf, api):
            assert sorted(rec.view) == ["a", "b"]
        del inf
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert [p.get("continue") for p in api.list_calls()] == [None, "elsewhere", "p2"]
    assert unread == []


@pytest.mark.parametrize("turns", [1, 2, 3, 5, 8])
async def test_metadata_told_after_its_page_is_in_asks_for_nothing(turns: int) -> None:
    """A client that tells a page's metadata only after returning the page, while its items
    are worked on or after: the page's own metadata (no continue: the last page) counts."""
    api = TellsMetadataFirst(told={"": "zzz"}, late=turns)
    api.lists.extend([page([cm(f"a{i}", "1") for i in range(250)], "1"), page([cm("z", "1")], "1")])
    api.release("")
    inf, rec = make_informer(api, page_size=250)
    async with running(inf, api):
        assert len(rec.view) == 250
    await asyncio.sleep(0.01)
    assert [p.get("continue") for p in api.list_calls()] == [None]
    assert "z" not in rec.view
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("list-")]


def cm_resource() -> Any:
    from linkerd_config.kube.resource import CONFIGMAPS  # noqa: PLC0415

    return CONFIGMAPS


async def test_a_server_silent_on_a_streaming_list_is_listed_in_pages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server that ignored sendInitialEvents would watch from now on, sending nothing."""
    monkeypatch.setattr(informer_module, "STREAM_LIST_FIRST_EVENT", 0.05)
    api = streaming_api()
    api.watches.append(Body([], then_hang=True))
    api.lists.append(page([cm("a", "3")], "3"))
    inf, rec = make_informer(api)
    async with running(inf, api):
        assert sorted(rec.view) == ["a"]
    assert len(api.list_calls()) == 1
