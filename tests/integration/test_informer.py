"""The informer against a real kube-apiserver: it converges, survives 410s and restarts.

Every assertion compares the informer with a fresh LIST from the server, or with what its
handlers were told; nothing waits for a fixed time. Each test polls with a generous deadline,
so a loaded two-core machine makes them slower, not flaky.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from devcluster.cluster import LocalControlPlane
from linkerd_config.kube.client import APPLICATION_JSON, MERGE_PATCH, ApiError, KubeClient
from linkerd_config.kube.informer import Informer, keep_fields
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.protobuf_wire import PROTOBUF
from linkerd_config.kube.resource import CONFIGMAPS, object_key
from tests.support.informer_objects import ROOT_CA, configmap, make_namespace
from tests.support.stalling_proxy import stalling_proxy
from tests.support.waiting import eventually

Json = dict[str, Any]


# -- helpers -------------------------------------------------------------------------------


def ours(key: str) -> bool:
    return not key.endswith(f"/{ROOT_CA}")


def uid_of(obj: Json) -> str:
    return str(obj["metadata"]["uid"])


def rv_of(obj: Json) -> str:
    return str(obj["metadata"]["resourceVersion"])


@dataclass
class Tracker:
    """What a consumer believes of the test's own objects, rebuilt only from handler calls."""

    view: dict[str, Json] = field(default_factory=dict)
    seen_uids: set[str] = field(default_factory=set)
    deleted_uids: set[str] = field(default_factory=set)
    deleted: list[Json] = field(default_factory=list)
    calls: int = 0

    def attach(self, informer: Informer) -> Tracker:
        informer.add_handler(self.on_add, self.on_update, self.on_delete, name="tracker")
        return self

    def on_add(self, obj: Json) -> None:
        if not ours(object_key(obj)):
            return
        self.calls += 1
        self.view[object_key(obj)] = obj
        self.seen_uids.add(uid_of(obj))

    def on_update(self, old: Json, new: Json) -> None:
        if not ours(object_key(new)):
            return
        self.calls += 1
        self.view[object_key(new)] = new
        self.seen_uids.add(uid_of(new))

    def on_delete(self, obj: Json) -> None:
        if not ours(object_key(obj)):
            return
        self.calls += 1
        self.view.pop(object_key(obj), None)
        self.deleted_uids.add(uid_of(obj))
        self.deleted.append(obj)

    def versions(self) -> dict[str, str]:
        return {k: rv_of(v) for k, v in self.view.items()}


@contextlib.asynccontextmanager
async def running(*informers: Informer, sync_timeout: float = 60) -> AsyncIterator[None]:
    """Run informers for the block's duration; cancel them (and only them) afterwards."""
    tasks = [asyncio.create_task(inf.run(), name=f"informer-{inf.name}") for inf in informers]
    try:
        for inf in informers:
            await inf.wait_synced(sync_timeout)
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def server_state(client: KubeClient, ns: str | None, **params: str) -> dict[str, Json]:
    path = CONFIGMAPS.path(ns)
    listing = await client.request("GET", path, params=params or None, timeout=30)
    out = {}
    for item in listing["items"]:
        if ours(object_key(item)):
            out[object_key(item)] = item
    return out


def cache_versions(inf: Informer) -> dict[str, str]:
    return {k: rv_of(v) for k, v in inf.store.items() if ours(k)}


async def converged(
    client: KubeClient, ns: str | None, pairs: list[tuple[Informer, Tracker]], **params: str
) -> dict[str, Json]:
    """Wait until every informer's cache and every tracker's view equal a fresh LIST."""
    server: dict[str, Json] = {}

    async def probe() -> bool:
        nonlocal server
        server = await server_state(client, ns, **params)
        want = {k: rv_of(v) for k, v in server.items()}
        return all(cache_versions(inf) == want and t.versions() == want for inf, t in pairs)

    await eventually(probe, timeout=90, interval=0.25, what="informers equal a fresh LIST")
    return server


def assert_no_ghosts(tracker: Tracker, server: dict[str, Json]) -> None:
    """Every object the handlers were told about that is gone got an on_delete."""
    live = {uid_of(o) for o in server.values()}
    assert tracker.seen_uids - live <= tracker.deleted_uids


async def bounded(limit: int, jobs: list[Callable[[], Awaitable[object]]]) -> None:
    """Run every job, at most ``limit`` at once."""
    gate = asyncio.Semaphore(limit)

    async def one(job: Callable[[], Awaitable[object]]) -> None:
        async with gate:
            await job()

    await asyncio.gather(*(one(j) for j in jobs))


def metric(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def private_client(cp: LocalControlPlane) -> KubeClient:
    access = await load_access(str(cp.kubeconfig))
    client = KubeClient(access, registry=CollectorRegistry(), user_agent="informer-tests")
    client.open()
    return client


# -- (a) a storm of changes ----------------------------------------------------------------


async def test_storm_of_changes_converges(kube: KubeClient) -> None:
    ns = await make_namespace(kube, "storm")
    label = {"storm": ns}
    path = CONFIGMAPS.path(ns)
    names = [f"cm-{i:03d}" for i in range(120)]
    await bounded(
        20,
        [partial(kube.request, "POST", path, body=configmap(n, label, v="0")) for n in names[:60]],
    )

    informers = [
        Informer(kube, CONFIGMAPS, namespace=ns, page_size=7, name=f"storm-full-{ns}"),
        Informer(
            kube,
            CONFIGMAPS,
            namespace=ns,
            transform=keep_fields("metadata.labels"),
            page_size=25,
            name=f"storm-lean-{ns}",
        ),
        Informer(kube, CONFIGMAPS, namespace=ns, metadata_only=True, name=f"storm-meta-{ns}"),
        Informer(kube, CONFIGMAPS, label_selector=f"storm={ns}", name=f"storm-all-ns-{ns}"),
    ]
    trackers = [Tracker().attach(inf) for inf in informers]

    rng = random.Random(1234)
    deleted_uids: set[str] = set()
    done = {"create": 0, "update": 0, "delete": 0, "conflict": 0}

    async def op(i: int, kind: str, name: str) -> None:
        try:
            if kind == "create":
                await kube.request("POST", path, body=configmap(name, label, v=str(i)))
            elif kind == "update":
                patch = {"data": {"v": str(i)}, "metadata": {"annotations": {"op": str(i)}}}
                await kube.request("PATCH", f"{path}/{name}", body=patch, content_type=MERGE_PATCH)
            else:
                gone = await kube.request("DELETE", f"{path}/{name}")
                uid = (gone.get("details") or {}).get("uid") or gone["metadata"]["uid"]
                deleted_uids.add(uid)
            done[kind] += 1
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise
            done["conflict"] += 1  # racing another op on the same name: a legal outcome

    ops = [
        (i, rng.choices(["create", "update", "delete"], [3, 4, 3])[0], rng.choice(names))
        for i in range(1000)
    ]
    async with running(*informers):
        await bounded(20, [partial(op, *o) for o in ops])
        server = await converged(kube, ns, list(zip(informers, trackers, strict=True)))

    assert sum(done.values()) == 1000
    assert min(done["create"], done["update"], done["delete"]) > 100, done
    for inf, tracker in zip(informers, trackers, strict=True):
        assert deleted_uids <= tracker.deleted_uids, inf.name  # every delete was delivered
        assert_no_ghosts(tracker, server)
        assert inf.has_synced
    # The lean and metadata-only caches hold only what they should.
    lean = next(o for k, o in informers[1].store.items() if ours(k))
    assert set(lean) == {"metadata"}
    assert "managedFields" not in lean["metadata"] and lean["metadata"]["labels"] == label
    meta = next(o for k, o in informers[2].store.items() if ours(k))
    assert meta["kind"] == "PartialObjectMetadata" and "data" not in meta


# -- (b) 410 after compaction --------------------------------------------------------------


async def etcd_compact(etcd_url: str) -> int:
    """Compact etcd up to its current revision via the v3 HTTP/JSON gateway."""
    timeout = aiohttp.ClientTimeout(total=30)
    key = base64.b64encode(b"/registry").decode()
    async with aiohttp.ClientSession(timeout=timeout) as http:
        async with http.post(f"{etcd_url}/v3/kv/range", json={"key": key}) as resp:
            resp.raise_for_status()
            revision = int((await resp.json())["header"]["revision"])
        body = {"revision": str(revision), "physical": True}
        async with http.post(f"{etcd_url}/v3/kv/compaction", json=body) as resp:
            resp.raise_for_status()
    return revision


async def test_resume_after_compaction_relists(private_control_plane: LocalControlPlane) -> None:
    cp = private_control_plane
    client = await private_client(cp)
    assert client.metrics is not None
    try:
        ns = await make_namespace(client, "gone", with_kcm=False)
        path = CONFIGMAPS.path(ns)
        for i in range(20):
            await client.request("POST", path, body=configmap(f"keep-{i:02d}", v="0"))
        inf = Informer(client, CONFIGMAPS, namespace=ns, name="gone")
        tracker = Tracker().attach(inf)
        async with running(inf):
            await converged(client, ns, [(inf, tracker)])
        stopped_at = inf.resource_version
        before = {k: rv_of(v) for k, v in inf.store.items()}

        # While the informer is stopped: deletes, updates, creates, then history is erased.
        for i in range(10):
            await client.request("DELETE", f"{path}/keep-{i:02d}")
        for i in range(10, 15):
            await client.request(
                "PATCH", f"{path}/keep-{i:02d}", body={"data": {"v": "1"}}, content_type=MERGE_PATCH
            )
        for i in range(10):
            await client.request("POST", path, body=configmap(f"new-{i:02d}", v="0"))
        revision = await etcd_compact(cp.etcd_url)
        assert revision > int(stopped_at)
        await asyncio.to_thread(cp.restart_apiserver)  # empties the watch cache too

        with capture_logs() as logs:
            async with running(inf):  # resumes from stopped_at, which no longer exists
                server = await converged(client, ns, [(inf, tracker)])

        assert inf.resource_version != stopped_at
        reasons = [e["reason"] for e in logs if e["event"] == "relist"]
        assert reasons and all(r.startswith("watch") for r in reasons), reasons
        assert metric(client.metrics.registry, "informer_relists_total", resource="gone") == 2
        # The vanished objects were delivered as deletes of the last state we knew.
        gone = {object_key(o): rv_of(o) for o in tracker.deleted}
        assert gone == {f"{ns}/keep-{i:02d}": before[f"{ns}/keep-{i:02d}"] for i in range(10)}
        assert sorted(k.split("/")[1] for k in server) == sorted(
            [f"keep-{i:02d}" for i in range(10, 20)] + [f"new-{i:02d}" for i in range(10)]
        )
        assert_no_ghosts(tracker, server)
    finally:
        await client.close()


# -- (c) API server restarted under a running informer -------------------------------------


async def test_informer_survives_apiserver_restart(
    private_control_plane: LocalControlPlane,
) -> None:
    cp = private_control_plane
    client = await private_client(cp)
    try:
        ns = await make_namespace(client, "restart", with_kcm=False)
        path = CONFIGMAPS.path(ns)
        for i in range(30):
            await client.request("POST", path, body=configmap(f"cm-{i:02d}", v="0"))
        inf = Informer(client, CONFIGMAPS, namespace=ns, name="restart")
        tracker = Tracker().attach(inf)
        rng = random.Random(99)
        writes = {"ok": 0, "failed": 0}

        async def churn(i: int) -> None:
            name = f"cm-{rng.randrange(40):02d}"
            kind = rng.choice(["create", "update", "delete"])
            try:
                if kind == "create":
                    await client.request("POST", path, body=configmap(name, v=str(i)), timeout=5)
                elif kind == "update":
                    await client.request(
                        "PATCH",
                        f"{path}/{name}",
                        body={"data": {"v": str(i)}},
                        content_type=MERGE_PATCH,
                        timeout=5,
                    )
                else:
                    await client.request("DELETE", f"{path}/{name}", timeout=5)
                writes["ok"] += 1
            except (ApiError, aiohttp.ClientError, OSError, TimeoutError):
                writes["failed"] += 1  # conflicts, or the server is down: both are fine here
                await asyncio.sleep(0.05)

        stop = asyncio.Event()

        async def writer() -> None:
            i = 0
            while not stop.is_set():
                i += 1
                await churn(i)

        async with running(inf):
            writing = asyncio.create_task(writer())
            try:
                await asyncio.to_thread(cp.restart_apiserver)
                ok_at_restart = writes["ok"]
                # Keep writing after the restart until a good number of writes landed.
                await eventually(
                    _async(lambda: writes["ok"] >= ok_at_restart + 100),
                    timeout=90,
                    what="writes after restart",
                )
            finally:
                stop.set()
                await writing
            server = await converged(client, ns, [(inf, tracker)])
        assert writes["ok"] > 100
        assert_no_ghosts(tracker, server)
        watches = sum(
            s.value
            for m in client.metrics.requests.collect()
            for s in m.samples
            if s.name.endswith("_total") and s.labels["method"] == "WATCH"
        )
        assert watches >= 2  # the restart really broke the watch, and it reconnected
    finally:
        await client.close()


def _async(fn: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return fn()

    return probe


# -- (d) selectors and metadata-only -------------------------------------------------------


async def test_selectors_and_metadata_only(kube: KubeClient) -> None:
    ns = await make_namespace(kube, "select")
    path = CONFIGMAPS.path(ns)
    for name, tier in (("a", "front"), ("b", "back"), ("c", "front")):
        await kube.request("POST", path, body=configmap(name, {"tier": tier}, secret="s3cr3t"))

    by_label = Informer(
        kube, CONFIGMAPS, namespace=ns, label_selector="tier=front", name=f"label-{ns}"
    )
    by_name = Informer(
        kube, CONFIGMAPS, namespace=ns, field_selector="metadata.name=b", name=f"field-{ns}"
    )
    meta = Informer(kube, CONFIGMAPS, namespace=ns, metadata_only=True, name=f"meta-{ns}")
    label_t, name_t, meta_t = (Tracker().attach(i) for i in (by_label, by_name, meta))

    def names(inf: Informer) -> set[str]:
        return {k.split("/")[1] for k in inf.store if ours(k)}

    async with running(by_label, by_name, meta):
        assert names(by_label) == {"a", "c"}
        assert names(by_name) == {"b"}
        assert names(meta) == {"a", "b", "c"}
        for key, obj in meta.store.items():  # from the LIST
            if not ours(key):
                continue
            assert obj["kind"] == "PartialObjectMetadata"
            assert obj["apiVersion"] == "meta.k8s.io/v1"
            assert "data" not in obj and "spec" not in obj
            assert obj["metadata"]["labels"]["tier"] in ("front", "back")

        async def relabel(name: str, tier: str) -> None:
            body = {"metadata": {"labels": {"tier": tier}}, "data": {"v": tier}}
            await kube.request("PATCH", f"{path}/{name}", body=body, content_type=MERGE_PATCH)

        await relabel("a", "back")  # leaves the label selector: a delete for that informer
        await relabel("b", "front")  # enters it: an add
        await kube.request("POST", path, body=configmap("d", {"tier": "front"}))

        await eventually(
            _async(lambda: names(by_label) == {"b", "c", "d"}), timeout=60, what="label set"
        )
        await converged(kube, ns, [(by_label, label_t)], labelSelector="tier=front")
        await converged(kube, ns, [(by_name, name_t)], fieldSelector="metadata.name=b")
        await converged(kube, ns, [(meta, meta_t)])
    assert [object_key(o) for o in label_t.deleted] == [f"{ns}/a"]
    assert names(by_name) == {"b"} and not name_t.deleted
    for obj in meta.store.list():  # b and a came through the WATCH this time (the root CA too)
        assert obj["kind"] == "PartialObjectMetadata"
        assert "data" not in obj
    assert meta.store.get(f"{ns}/b")["metadata"]["labels"] == {"tier": "front"}  # type: ignore[index]


# -- (e) bookmarks -------------------------------------------------------------------------


async def test_bookmarks_advance_resume_point_without_object_changes(kube: KubeClient) -> None:
    quiet = await make_namespace(kube, "quiet")
    noisy = await make_namespace(kube, "noisy")
    await kube.request("POST", CONFIGMAPS.path(quiet), body=configmap("only"))
    inf = Informer(kube, CONFIGMAPS, namespace=quiet, name="bookmarks")
    tracker = Tracker().attach(inf)
    async with running(inf):
        start_rv = int(inf.resource_version)
        calls_after_sync = tracker.calls

        async def bookmarked() -> bool:
            # Changes elsewhere move the server's resourceVersion; only a bookmark can tell
            # this watch about it, since none of them match its namespace.
            await kube.request("POST", CONFIGMAPS.path(noisy), body=configmap(uuid.uuid4().hex))
            seen = metric(
                inf.metrics.registry,
                "informer_watch_events_total",
                resource="bookmarks",
                type="BOOKMARK",
            )
            return seen > 0 and int(inf.resource_version) > start_rv

        # The API server sends a bookmark about once a minute per watch.
        await eventually(bookmarked, timeout=180, interval=2, what="a bookmark")
    assert tracker.calls == calls_after_sync  # the resume point moved; no handler ran
    assert [k for k in inf.store if ours(k)] == [f"{quiet}/only"]


# -- (f) a LIST cut short mid-body -----------------------------------------------------------


@pytest.mark.parametrize("content_type", [PROTOBUF, APPLICATION_JSON])
async def test_a_list_cut_mid_body_is_listed_again_whole(
    kube: KubeClient, content_type: str
) -> None:
    """Between the informer and the real API server, a proxy drops the connection part way
    through the body of the first two LIST answers (the first page, and the page asked for
    early or the first page again): the informer lists again and its cache is exactly the
    server's, each object transformed from a complete read, nothing kept of a cut page."""
    ns = await make_namespace(kube, "cut-list")
    names = [f"cm-{i:03d}" for i in range(250)]
    await bounded(
        20,
        [
            partial(kube.request, "POST", CONFIGMAPS.path(ns), body=configmap(n, v="x" * 200))
            for n in names
        ],
    )
    async with (
        stalling_proxy(kube.access, f"/namespaces/{ns}/configmaps") as proxy,
        KubeClient(
            proxy.access,
            registry=CollectorRegistry(),
            user_agent="cut",
            content_type=content_type,
            watch_list=False,  # paged LISTs, as a run makes them (``--watch-list=false``)
        ) as client,
    ):
        proxy.cut_lists(times=2, after=4096)
        informer = Informer(
            client,
            CONFIGMAPS,
            namespace=ns,
            page_size=100,
            transform=keep_fields("data"),
            name="cut-lists",
        )
        task = asyncio.create_task(informer.run())
        try:
            await informer.wait_synced(60)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert proxy.lists_cut == 2
    assert proxy.lists > 2 + 3 - 1  # the cut answers, then the three pages (one maybe twice)
    server = await server_state(kube, ns)
    assert sorted(k for k, _ in informer.store.items() if ours(k)) == sorted(server)
    for key, obj in informer.store.items():
        if ours(key):
            assert obj["data"] == server[key]["data"]
            assert set(obj) <= {"metadata", "data", "kind", "apiVersion"}
    # The first list, and at least one more after a cut.
    assert metric(client.metrics.registry, "informer_relists_total", resource="cut-lists") >= 2
