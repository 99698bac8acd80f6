"""The informer driven through an in-memory fake of the two client calls it makes (LIST pages
and watch bodies), to pin down logic that a real API server only shows non-deterministically:
bookmarks moving the resume point, 410 handling, expired continue tokens, Retry-After, and its
transforms. The integration suite (``tests/integration/test_informer.py``) proves the same
against a real kube-apiserver.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import aiohttp
import pytest
from structlog.testing import capture_logs

from linkerd_config.kube.client import (
    LIST_YIELD_EVERY,
    PARTIAL_METADATA,
    PARTIAL_METADATA_LIST,
    ApiError,
    prepared,
)
from linkerd_config.kube.informer import (
    INITIAL_EVENTS_END,
    Informer,
    keep_fields,
    strip_managed_fields,
)
from linkerd_config.kube.ratelimit import JitteredBackoff
from linkerd_config.kube.resource import CONFIGMAPS, Json
from tests.support.informer_fakes import (
    Body,
    FakeApi,
    Recorder,
    TellsMetadataFirst,
    make_informer,
    page,
    running,
)
from tests.support.watch_lines import cm, line, status

# -- transforms --------------------------------------------------------------


def test_strip_managed_fields() -> None:
    obj = {"metadata": {"name": "a", "managedFields": [{"manager": "kubectl"}]}, "data": {}}
    assert strip_managed_fields(obj) == {"metadata": {"name": "a"}, "data": {}}


def test_keep_fields() -> None:
    keep = keep_fields("metadata.labels", ("metadata", "annotations"), "spec.nodeName")
    obj = {
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u",
            "resourceVersion": "5",
            "labels": {"a": "b"},
            "managedFields": [{}],
            "generation": 3,
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
        "status": {"phase": "Running"},
    }
    assert keep(obj) == {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u",
            "resourceVersion": "5",
            "labels": {"a": "b"},
        },
        "spec": {"nodeName": "n1"},
    }
    whole = keep_fields("metadata", "metadata.name")(obj)
    assert "managedFields" not in whole["metadata"]
    assert whole["metadata"]["generation"] == 3
    with pytest.raises(ValueError):
        keep_fields("spec..x")


# -- the informer over a scripted fake API -----------------------------------------------


def metric(api: FakeApi, name: str, **labels: str) -> float:
    assert api.registry is not None
    value = api.registry.get_sample_value(name, labels)
    return value or 0.0


async def test_paginated_list_then_watch_with_bookmarks_and_selectors() -> None:
    api = FakeApi()
    api.lists.extend([page([cm("a", "10")], "20", cont="tok"), page([cm("b", "11")], "20")])
    api.watches.append(
        Body(
            [
                line("ADDED", cm("c", "21")),
                line("BOOKMARK", {"kind": "ConfigMap", "metadata": {"resourceVersion": "35"}}),
            ]
        )
    )
    inf, rec = make_informer(
        api, page_size=1, label_selector="app=x", field_selector="metadata.name!=z"
    )
    async with running(inf, api):
        assert inf.has_synced
        assert rec.calls == [("add", "a", "10"), ("add", "b", "11"), ("add", "c", "21")]
        # Items get the kind/apiVersion the list omitted, so LIST and WATCH objects agree.
        assert inf.store.get("ns/a") == cm("a", "10")
    first, second = api.list_calls()
    assert first == {"labelSelector": "app=x", "fieldSelector": "metadata.name!=z", "limit": 1}
    assert second["continue"] == "tok"
    w1, w2 = api.watch_calls()[:2]
    assert w1["resourceVersion"] == "20"  # from the list
    assert w1["allowWatchBookmarks"] is True and w1["watch"] is True
    assert 300 <= w1["timeoutSeconds"] <= 600
    assert w1["labelSelector"] == "app=x" and w1["fieldSelector"] == "metadata.name!=z"
    # The bookmark moved the resume point without any handler call.
    assert w2["resourceVersion"] == "35"
    assert inf.resource_version == "35"
    assert metric(api, "informer_watch_events_total", resource="configmaps", type="BOOKMARK") == 1
    assert metric(api, "informer_cache_objects", resource="configmaps") == 3


async def test_watch_timeouts_are_randomised() -> None:
    api = FakeApi()
    api.lists.append(page([], "1"))
    api.watches.extend([Body([line("BOOKMARK", {"metadata": {"resourceVersion": "1"}})])] * 30)
    inf, _ = make_informer(api, watch_timeout=(300, 600))
    async with running(inf, api):
        pass
    timeouts = {p["timeoutSeconds"] for p in api.watch_calls()}
    assert len(timeouts) > 5
    assert all(300 <= t <= 600 for t in timeouts)


async def test_watch_events_update_cache_and_handlers() -> None:
    api = FakeApi()
    api.lists.append(page([cm("a", "1"), cm("b", "2")], "2"))
    api.watches.append(
        Body(
            [
                line("MODIFIED", cm("a", "3", v="2")),
                line("DELETED", cm("b", "4")),
                line("ADDED", cm("b", "5", uid="uid-b2")),
            ]
        )
    )
    inf, rec = make_informer(api)
    async with running(inf, api):
        pass
    assert rec.calls[2:] == [("update", "a", "3"), ("delete", "b", "4"), ("add", "b", "5")]
    assert inf.store.get("ns/a")["data"] == {"v": "2"}  # type: ignore[index]
    assert inf.store.get("ns/b")["metadata"]["uid"] == "uid-b2"  # type: ignore[index]
    assert inf.resource_version == "5"


@pytest.mark.parametrize("how", ["error-event", "http-410"])
async def test_gone_relists_and_delivers_the_difference(how: str) -> None:
    api = FakeApi()
    api.lists.append(page([cm("a", "1"), cm("b", "2"), cm("c", "3"), cm("d", "4")], "4"))
    gone: Body | Exception = (
        Body([line("MODIFIED", cm("a", "5")), line("ERROR", status(410, "Expired", "too old"))])
        if how == "error-event"
        else ApiError(410, "GET", "/x", status(410, "Gone"), None)
    )
    api.watches.append(gone)
    # Meanwhile: b deleted, c changed, d deleted and recreated (new uid), e created.
    api.lists.append(
        page([cm("a", "5"), cm("c", "9"), cm("d", "10", uid="uid-d2"), cm("e", "11")], "12")
    )
    inf, rec = make_informer(api)
    with capture_logs() as logs:
        async with running(inf, api):
            pass
    relist = [e for e in logs if e["event"] == "relist"]
    assert relist[0]["reason"] == "initial"
    assert relist[1]["reason"].startswith("watch")
    counts = {k: relist[1][k] for k in ("added", "updated", "recreated", "deleted")}
    assert metric(api, "informer_relists_total", resource="configmaps") == 2
    diff = [
        ("delete", "b", "2"),  # the last state we knew
        ("update", "c", "9"),
        ("delete", "d", "4"),  # recreated: delete the old uid, then add the new one
        ("add", "d", "10"),
        ("add", "e", "11"),
    ]
    if how == "error-event":  # the watch delivered a's change before the 410
        assert rec.calls[4:] == [("update", "a", "5"), *diff]
        assert counts == {"added": 1, "updated": 1, "recreated": 1, "deleted": 1}
    else:  # a's change arrives with the relist
        assert rec.calls[4:] == [diff[0], ("update", "a", "5"), *diff[1:]]
        assert counts == {"added": 1, "updated": 2, "recreated": 1, "deleted": 1}
    assert sorted(inf.store.keys()) == ["ns/a", "ns/c", "ns/d", "ns/e"]
    assert {k: v["metadata"]["resourceVersion"] for k, v in rec.view.items()} == {
        "a": "5",
        "c": "9",
        "d": "10",
        "e": "11",
    }
    assert api.watch_calls()[-1]["resourceVersion"] == "12"


@pytest.mark.parametrize("reads", ["whole", "metadata-first"])
async def test_expired_continue_token_falls_back_to_one_unpaginated_list(reads: str) -> None:
    """Also when the second page was asked for while the first was read (its metadata told
    before its items): one unpaginated list, the first page's objects not delivered twice."""
    api = FakeApi() if reads == "whole" else TellsMetadataFirst()
    if isinstance(api, TellsMetadataFirst):
        api.release("")
    api.lists.extend(
        [
            page([cm("a", "1")], "5", cont="tok"),
            ApiError(410, "GET", "/x", status(410, "Expired", "continue expired"), None),
            page([cm("a", "1"), cm("b", "6")], "7"),
        ]
    )
    inf, rec = make_informer(api, page_size=1)
    async with running(inf, api):
        pass
    calls = api.list_calls()
    assert calls[1]["continue"] == "tok"
    assert "limit" not in calls[2] and "continue" not in calls[2]
    assert [c[1] for c in rec.calls] == ["a", "b"]  # the partial first page was not delivered
    assert api.watch_calls()[0]["resourceVersion"] == "7"


async def test_failures_back_off_and_honour_retry_after() -> None:
    delays: list[tuple[float | None, float]] = []

    class Recording(JitteredBackoff):
        def next(self, retry_after: float | None = None) -> float:
            delays.append((retry_after, super().next(None)))
            return 0.001

    api = FakeApi()
    api.lists.extend(
        [ApiError(429, "GET", "/x", status(429), 3.0), ApiError(500, "GET", "/x", None, None)]
    )
    api.lists.append(page([cm("a", "1")], "1"))
    api.watches.extend(
        [
            Body([line("ERROR", status(500, "InternalError"))]),
            aiohttp.ClientConnectionError("refused"),
            Body([b"garbage\n"]),
        ]
    )
    inf, rec = make_informer(api, backoff=Recording(initial=0.8, maximum=30, jitter=0))
    async with running(inf, api):
        pass
    assert delays[0][0] == 3.0  # the 429's Retry-After reached the backoff
    assert [round(d, 1) for _, d in delays] == [0.8, 1.6, 3.2, 6.4, 12.8]
    assert rec.calls == [("add", "a", "1")]
    assert [p["resourceVersion"] for p in api.watch_calls()] == ["1", "1", "1", "1"]


async def test_healthy_watch_resets_backoff() -> None:
    api = FakeApi()
    api.lists.append(page([], "1"))
    api.watches.extend(
        [
            aiohttp.ClientConnectionError("x"),
            aiohttp.ClientConnectionError("x"),
            Body([line("ADDED", cm("a", "2")), line("ERROR", status(500))]),
        ]
    )
    backoff = JitteredBackoff(initial=0.001, maximum=0.01)
    inf, _ = make_informer(api, backoff=backoff)
    async with running(inf, api):
        # Two failures grew it; the watch that delivered an event reset it before failing.
        assert backoff.failures == 1


async def test_handler_exception_is_logged_with_key_and_contained() -> None:
    api = FakeApi()
    api.lists.append(page([cm("a", "1"), cm("b", "2")], "2"))
    api.watches.append(Body([line("MODIFIED", cm("a", "3"))]))
    inf = Informer(api, CONFIGMAPS, namespace="ns")
    seen: list[str] = []

    def bad_add(obj: Json) -> None:
        if obj["metadata"]["name"] == "a":
            raise RuntimeError("boom")

    inf.add_handler(on_add=bad_add, on_update=lambda o, n: seen.append("update"))
    inf.add_handler(on_add=lambda o: seen.append(o["metadata"]["name"]))
    with capture_logs() as logs:
        async with running(inf, api):
            pass
    assert seen == ["a", "b", "update"]
    failures = [e for e in logs if e["event"] == "informer handler failed"]
    assert len(failures) == 1
    assert failures[0]["key"] == "ns/a" and failures[0]["change"] == "add"
    assert inf.store.get("ns/a")["metadata"]["resourceVersion"] == "3"  # type: ignore[index]


async def test_cancel_then_run_resumes_from_last_resource_version() -> None:
    api = FakeApi()
    api.lists.append(page([cm("a", "1")], "8"))
    api.watches.append(Body([line("MODIFIED", cm("a", "9"))]))
    inf, rec = make_informer(api)
    before = asyncio.all_tasks()
    async with running(inf, api):
        pass
    assert asyncio.all_tasks() == before  # run() left nothing behind
    api.calls.clear()
    async with running(inf, api):
        pass
    assert [k for k, _, _ in api.calls] == ["watch"]  # no relist
    assert api.watch_calls()[0]["resourceVersion"] == "9"
    assert rec.calls == [("add", "a", "1"), ("update", "a", "9")]


async def test_metadata_only_uses_partial_object_metadata() -> None:
    api = FakeApi()
    api.lists.append(
        {
            "kind": "PartialObjectMetadataList",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": "3"},
            "items": [{"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "3"}}],
        }
    )
    inf, _ = make_informer(api, metadata_only=True)
    async with running(inf, api):
        pass
    assert [accept for _, _, accept in api.calls] == [PARTIAL_METADATA_LIST, PARTIAL_METADATA]
    assert inf.store.get("ns/a") == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "3"},
    }


async def test_transform_applies_before_caching_and_failure_falls_back() -> None:
    api = FakeApi()
    good = cm("a", "1", v="x")
    good["metadata"]["managedFields"] = [{"manager": "m"}]
    api.lists.append(page([good, cm("boom", "2")], "2"))

    def transform(obj: Json) -> Json:
        if obj["metadata"]["name"] == "boom":
            raise ValueError("bad transform")
        return keep_fields()(obj)

    inf, _ = make_informer(api, transform=transform)
    with capture_logs() as logs:
        async with running(inf, api):
            pass
    assert inf.store.get("ns/a") == {
        "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1", "uid": "uid-a"}
    }
    assert inf.store.get("ns/boom") is not None
    assert any(e["event"].startswith("transform failed") for e in logs)


async def test_each_listed_object_is_typed_then_transformed_once() -> None:
    """The page's items are prepared by the client as they are read (``prepare``): typed
    from their list, transformed once, never again by the informer."""
    api = FakeApi()
    api.lists.append(page([cm("a", "1"), cm("b", "2")], "5", cont="next"))
    api.lists.append(page([cm("c", "3")], "5"))
    seen: list[tuple[str, str, str]] = []

    def transform(obj: Json) -> Json:
        seen.append((obj["metadata"]["name"], obj["kind"], obj["apiVersion"]))
        return {"metadata": {"name": obj["metadata"]["name"], "namespace": "ns"}}

    inf, _ = make_informer(api, transform=transform, page_size=2)
    async with running(inf, api):
        pass
    assert seen == [(n, "ConfigMap", "v1") for n in ("a", "b", "c")]
    assert sorted(inf.store.keys()) == ["ns/a", "ns/b", "ns/c"]


def unnamed_by_value() -> Callable[[Json], Json]:
    """A transform that keeps no name: one record, never mutated, for every ConfigMap with
    the same ``v`` (as pods of one ReplicaSet share theirs)."""
    records: dict[str, Json] = {}

    def transform(obj: Json) -> Json:
        v = obj["data"].get("v", "")
        return records.setdefault(v, {"data": {"v": v}})

    return transform


def told_values(inf: Informer) -> list[tuple[str, ...]]:
    """What a handler is told, by value (an unnamed record says what, not which)."""
    told: list[tuple[str, ...]] = []
    inf.add_handler(
        lambda o: told.append(("add", o["data"]["v"])),
        lambda old, new: told.append(("update", old["data"]["v"], new["data"]["v"])),
        lambda o: told.append(("delete", o["data"]["v"])),
    )
    return told


@pytest.mark.parametrize("fills", ["pages", "stream"])
async def test_a_transform_may_drop_identity_each_object_keyed_as_served(fills: str) -> None:
    """Keys are taken from the objects as served, before the transform: records that share
    one object and hold no name are still cached one per object, and a watched change, a
    delete and a relist's difference each land on the key of the object they are about."""
    api = FakeApi()
    initial = [cm("a", "1", v="x"), cm("b", "2", v="x"), cm("c", "3", v="y")]
    # Meanwhile: c changed to x, d created; a as the watch left it.
    relisted = [cm("a", "4", v="y"), cm("c", "6", v="x"), cm("d", "7", v="x")]
    watched = [
        line("MODIFIED", cm("a", "4", v="y")),
        line("DELETED", cm("b", "5", v="x")),
        line("ERROR", status(410, "Expired", "too old")),
    ]
    if fills == "pages":
        api.lists.extend([page(initial[:2], "3", cont="more"), page(initial[2:], "3")])
        api.watches.append(Body(watched))
        api.lists.append(page(relisted, "7"))
    else:
        api.watch_list = True  # type: ignore[misc]  # this client streams

        def streamed(objects: list[Json], rv: str) -> Body:
            end = {"resourceVersion": rv, "annotations": {INITIAL_EVENTS_END: "true"}}
            bookmark = line("BOOKMARK", {"kind": "ConfigMap", "metadata": end})
            return Body([*(line("ADDED", o) for o in objects), bookmark])

        api.watches.extend([streamed(initial, "3"), Body(watched), streamed(relisted, "7")])
    backoff = JitteredBackoff(initial=0.001, maximum=0.01)
    inf = Informer(
        api, CONFIGMAPS, namespace="ns", transform=unnamed_by_value(), page_size=2, backoff=backoff
    )
    told = told_values(inf)
    async with running(inf, api):
        pass
    x, y = {"data": {"v": "x"}}, {"data": {"v": "y"}}
    assert dict(inf.store.items()) == {"ns/a": y, "ns/c": x, "ns/d": x}
    assert inf.store.get("ns/c") is inf.store.get("ns/d")  # one record, two objects
    assert told == [
        *(("add", v) for v in "xxy"),
        ("update", "x", "y"),  # a
        ("delete", "x"),  # b
        ("update", "y", "x"),  # c, from the relist; a, unchanged there, is not told again
        ("add", "x"),  # d
    ]


async def test_preparing_a_page_yields_to_the_loop() -> None:
    """A page read whole is prepared item by item, the loop let run every
    ``LIST_YIELD_EVERY`` items (a probe, a webhook review wait no longer than that)."""
    items = [{"n": i} for i in range(LIST_YIELD_EVERY * 3)]
    turns: list[int] = []

    def prepare(item: Json, kind: str, api_version: str) -> Json:
        turns.append(len(ran))
        return {"n": item["n"], "list": (kind, api_version)}

    ran: list[None] = []

    async def other() -> None:
        while True:
            ran.append(None)
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    await asyncio.sleep(0)
    try:
        page = await prepared({"kind": "ThingList", "apiVersion": "v1", "items": items}, prepare)
    finally:
        task.cancel()
    assert page["items"] == [{"n": i, "list": ("ThingList", "v1")} for i in range(len(items))]
    # The other task ran between each LIST_YIELD_EVERY items, not during them.
    assert turns[0] < turns[LIST_YIELD_EVERY] < turns[2 * LIST_YIELD_EVERY]
    assert turns[LIST_YIELD_EVERY - 1] == turns[0]
    assert await prepared({"kind": "Status"}, prepare) == {"kind": "Status"}


async def test_resync_redelivers_cached_objects() -> None:
    api = FakeApi()
    api.lists.append(page([cm("a", "1"), cm("b", "2")], "2"))
    inf, rec = make_informer(api, resync_period=0.05)
    resynced = asyncio.Event()
    inf.add_handler(on_update=lambda old, new: resynced.set() if old is new else None)
    before = asyncio.all_tasks()
    async with running(inf, api):
        async with asyncio.timeout(10):
            await resynced.wait()
            resynced.clear()
            await resynced.wait()  # and again: it is periodic
    assert asyncio.all_tasks() == before  # the resync task went with run()
    updates = [c for c in rec.calls if c[0] == "update"]
    assert {c[1] for c in updates} == {"a", "b"}


async def test_late_handler_gets_cache_replayed_and_wait_synced() -> None:
    api = FakeApi()
    api.lists.append(page([cm("a", "1")], "1"))
    inf, _ = make_informer(api)
    with pytest.raises(TimeoutError, match="not synced"):
        await inf.wait_synced(0.01)
    async with running(inf, api):
        await inf.wait_synced(1)
        late = Recorder()
        handle = inf.add_handler(late.add, late.update, late.delete)
        assert late.calls == [("add", "a", "1")]
        inf.remove_handler(handle)
        with pytest.raises(RuntimeError, match="already running"):
            await inf.run()


async def test_a_relist_wakes_an_informer_sleeping_out_a_backoff() -> None:
    """On gaining the lead every informer relists; one waiting out a long backoff (a
    Retry-After of minutes) did so only when its sleep ended, and the new leader's
    controllers waited for it up to the sync timeout."""
    api = FakeApi()
    api.lists.extend([page([cm("a", "1")], "1"), page([cm("a", "1"), cm("b", "2")], "2")])
    api.watches.append(aiohttp.ClientConnectionError("refused"))
    inf, rec = make_informer(api, backoff=JitteredBackoff(initial=600, maximum=600, jitter=0))
    task = asyncio.create_task(inf.run())
    try:
        await inf.wait_synced(5)
        await asyncio.sleep(0.05)  # the watch failed: the informer sleeps out 600 s
        await inf.relist("leadership gained", timeout=5)  # TimeoutError if it slept on
        assert sorted(inf.store.keys()) == ["ns/a", "ns/b"]
        assert ("add", "b", "2") in rec.calls
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_relist_does_not_cut_short_a_wait_the_server_asked_for() -> None:
    """Every informer relists when the lead changes; one the API server told to come back
    later (429 with Retry-After, as API Priority and Fairness answers) waits it out, rather
    than join a burst of LISTs against a server that is shedding load."""
    api = FakeApi()
    api.lists.extend([page([cm("a", "1")], "1"), page([cm("a", "1")], "2")])
    api.watches.append(ApiError(429, "GET", "/x", status(429), 30.0))
    inf, _ = make_informer(api, backoff=JitteredBackoff(initial=0.001, maximum=0.01, jitter=0))
    task = asyncio.create_task(inf.run())
    try:
        await inf.wait_synced(5)
        await asyncio.sleep(0.05)  # the watch was refused: the informer waits 30 s
        with pytest.raises(TimeoutError, match="not relisted"):
            await inf.relist("leadership gained", timeout=0.3)
        assert len(api.list_calls()) == 1  # asked once, at the start
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
