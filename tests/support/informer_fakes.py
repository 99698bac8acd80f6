"""A scripted fake of the two client calls an informer makes (LIST pages and watch bodies),
recording every request; an informer over it with a handler that records what it is told,
and a way to run that informer until the script is exhausted. For the informer's unit tests."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry

from linkerd_config.kube.client import APPLICATION_JSON, JsonListWatch
from linkerd_config.kube.informer import Informer
from linkerd_config.kube.ratelimit import JitteredBackoff
from linkerd_config.kube.resource import CONFIGMAPS, Json

HANG = object()
"""A watch body that never sends anything (the informer idles on it until cancelled)."""


class Body:
    """A watch body: the given lines, then either end of stream or silence."""

    def __init__(self, lines: list[bytes], then_hang: bool = False) -> None:
        self._chunks = deque(lines)
        self._hang = then_hang
        self._failed: BaseException | None = None
        self._woken = asyncio.Event()

    async def readany(self) -> bytes:
        if self._failed is None and self._chunks:
            return self._chunks.popleft()
        if self._failed is None and self._hang:
            await self._woken.wait()
        if self._failed is not None:
            raise self._failed
        return b""

    def set_exception(self, exc: BaseException) -> None:
        """As aiohttp's body: the read in progress, and every later one, raises ``exc``."""
        self._failed = exc
        self._woken.set()


class FakeApi(JsonListWatch):
    """Scripted LIST pages and watch bodies; records every request the informer makes
    (the informer's LISTs and watches in JSON, as ``JsonListWatch`` makes them)."""

    def __init__(self) -> None:
        self.registry: CollectorRegistry | None = CollectorRegistry()
        self.lists: deque[Json | Exception] = deque()
        self.watches: deque[Body | Exception | object] = deque()
        self.calls: list[tuple[str, dict[str, Any], str]] = []
        self.idle = asyncio.Event()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int | bool] | None = None,
        accept: str = APPLICATION_JSON,
        timeout: float | None = None,
    ) -> Json:
        assert method == "GET"
        assert timeout is not None
        self.calls.append(("list", dict(params or {}), accept))
        page = self.lists.popleft()
        if isinstance(page, Exception):
            raise page
        return copy.deepcopy(page)

    @contextlib.asynccontextmanager
    async def stream(
        self,
        path: str,
        *,
        params: Mapping[str, str | int | bool] | None = None,
        accept: str = APPLICATION_JSON,
        total_timeout: float,
        read_timeout: float,
    ) -> AsyncIterator[Body]:
        assert total_timeout > 0 and read_timeout > 0
        self.calls.append(("watch", dict(params or {}), accept))
        item = self.watches.popleft() if self.watches else HANG
        if item is HANG:
            self.idle.set()
            yield Body([], then_hang=True)
            return
        if isinstance(item, Exception):
            raise item
        assert isinstance(item, Body)
        yield item

    def watch_calls(self) -> list[dict[str, Any]]:
        return [p for kind, p, _ in self.calls if kind == "watch"]

    def list_calls(self) -> list[dict[str, Any]]:
        return [p for kind, p, _ in self.calls if kind == "list"]


class TellsMetadataFirst(FakeApi):
    """Pages read as they arrive, as the protobuf client reads them: each tells its metadata
    at once (``told``: what it says, if not the page's own), and its items come only when
    the test releases the page. ``late``: a misbehaving client, telling the metadata only
    that many turns of the event loop after it has returned the page."""

    def __init__(self, told: Mapping[str, str] | None = None, late: int = 0) -> None:
        super().__init__()
        self.released: dict[str, asyncio.Event] = {}
        self.log: list[tuple[str, str]] = []
        self.in_flight = self.most_in_flight = 0
        self.told = dict(told or {})
        self.late = late

    def release(self, token: str) -> None:
        self.released.setdefault(token, asyncio.Event()).set()

    async def list_page(
        self,
        path: str,
        *,
        params: Mapping[str, str | int | bool],
        metadata_only: bool,
        fields: Any,
        timeout: float,
        on_metadata: Any = None,
        prepare: Any = None,
    ) -> Json:
        token = str(params.get("continue", ""))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.log.append(("asked", token))
        try:
            listed = await super().list_page(
                path,
                params=params,
                metadata_only=metadata_only,
                fields=fields,
                timeout=timeout,
                prepare=prepare,
            )
            meta = dict(listed["metadata"])
            if token in self.told:
                meta["continue"] = self.told[token]
            if self.late:
                asyncio.get_running_loop().call_soon(_after_turns, self.late, on_metadata, meta)
            else:
                on_metadata(meta)
            await self.released.setdefault(token, asyncio.Event()).wait()
            self.log.append(("in", token))
            return listed
        except asyncio.CancelledError:
            self.log.append(("cancelled", token))
            raise
        finally:
            self.in_flight -= 1


def _after_turns(turns: int, call: Any, *args: Any) -> None:
    """``call(*args)`` ``turns`` turns of the event loop from now."""
    if turns <= 1:
        call(*args)
    else:
        asyncio.get_running_loop().call_soon(_after_turns, turns - 1, call, *args)


def page(items: list[Json], rv: str, cont: str = "") -> Json:
    stripped = []
    for obj in items:
        o = copy.deepcopy(obj)
        o.pop("kind", None)  # the API server omits kind/apiVersion on list items
        o.pop("apiVersion", None)
        stripped.append(o)
    meta: Json = {"resourceVersion": rv}
    if cont:
        meta["continue"] = cont
    return {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": meta, "items": stripped}


class Recorder:
    """Replays handler calls into a model of what a consumer believes exists."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.view: dict[str, Json] = {}
        self.deleted: list[Json] = []

    def add(self, obj: Json) -> None:
        self.calls.append(("add", obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))
        self.view[obj["metadata"]["name"]] = obj

    def update(self, old: Json, new: Json) -> None:
        self.calls.append(("update", new["metadata"]["name"], new["metadata"]["resourceVersion"]))
        self.view[new["metadata"]["name"]] = new

    def delete(self, obj: Json) -> None:
        self.calls.append(("delete", obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))
        self.view.pop(obj["metadata"]["name"], None)
        self.deleted.append(obj)


def make_informer(api: FakeApi, **kw: Any) -> tuple[Informer, Recorder]:
    kw.setdefault("backoff", JitteredBackoff(initial=0.001, maximum=0.01))
    inf = Informer(api, CONFIGMAPS, namespace="ns", **kw)
    rec = Recorder()
    inf.add_handler(rec.add, rec.update, rec.delete, name="recorder")
    return inf, rec


@contextlib.asynccontextmanager
async def running(inf: Informer, api: FakeApi) -> AsyncIterator[asyncio.Task[None]]:
    """Run the informer until the script is exhausted (it idles on a silent watch)."""
    api.idle.clear()
    task = asyncio.create_task(inf.run())
    try:
        async with asyncio.timeout(10):
            await api.idle.wait()
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class SyncsWhenTold:
    """An informer as the manager sees it: its cache fills when the test says (``fill``),
    and is healthy while the test says; ``started`` once the manager has run it;
    ``relists``: the reason of each relist asked of it; ``want`` as ``Informer.want``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.healthy = False
        self.started = asyncio.Event()
        self.relists: list[str] = []
        self.wanted_at: float | None = None
        self._filled = asyncio.Event()
        self._wanted = asyncio.Event()

    def want(self) -> None:
        if self.wanted_at is None:
            self.wanted_at = time.monotonic()
            self._wanted.set()

    async def wait_wanted(self) -> None:
        await self._wanted.wait()

    @property
    def has_synced(self) -> bool:
        return self._filled.is_set()

    def fill(self) -> None:
        self.healthy = True
        self._filled.set()

    async def run(self) -> None:
        self.started.set()
        await asyncio.Event().wait()

    async def wait_synced(self, timeout: float | None = None) -> None:
        await self._filled.wait()

    def retry_now(self) -> None:
        pass

    async def relist(self, reason: str, timeout: float) -> None:
        self.relists.append(reason)
