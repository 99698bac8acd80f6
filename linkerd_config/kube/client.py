"""API access: one pooled HTTPS session, plain dicts in and out, a timeout on every call.

kubernetes-asyncio is used only to resolve *where* and *as whom* to connect (kubeconfig or
in-cluster service account, token refresh included). Requests and watch streams go through
our own aiohttp session and come back as plain dicts: generated model classes cost ~14x more
CPU per object than a fast JSON decoder, which matters at thousands of pods. Writes are
JSON; informers' LISTs and watches of built-in types are Kubernetes' protobuf, decoded only
as far as the caller's fields (``protobuf_wire``).

Every mutating request passes the write gate (see ``leader.py``) unless the caller opts out
explicitly, which only the Lease elector does: a follower's write is refused here, before any
byte reaches the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import re
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

import aiohttp
import orjson
import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram

from linkerd_config.kube.field_tree import FieldTree
from linkerd_config.kube.kubeconfig import ClusterAccess
from linkerd_config.kube.metrics import ComponentMetrics
from linkerd_config.kube.protobuf_encoding import ProtobufError
from linkerd_config.kube.protobuf_wire import (
    PROTOBUF,
    ListReader,
    decode_object,
    decodes,
    watch_event_decoder,
)
from linkerd_config.kube.resource import (
    SUBJECT_ACCESS_REVIEWS,
    TOKEN_REVIEWS,
    ApiResource,
    Json,
    Prepare,
)
from linkerd_config.kube.watch import ByteSource, WatchStream

APPLICATION_JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"  # JSON is valid YAML
PARTIAL_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
PARTIAL_METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
_AS_METADATA = ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
_AS_METADATA_LIST = ";as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
CONTENT_TYPES = {"protobuf": PROTOBUF, "json": APPLICATION_JSON}
"""What ``--kube-api-content-type`` takes: how informers ask for built-in types (client-go's
``rest.Config.ContentType``); custom resources and every write are JSON either way."""

READ_BUFFER = 64 * 1024
"""What a response buffers before its connection stops reading (twice this), and the most a
gzipped body is inflated into at once: aiohttp's default is 256 KiB, and a LIST page of like
objects inflates twenty-fold, so the pages read at once (two informers' lists, each with its
next page asked ahead) held 1.5 MiB more, which set the peak at 10,000 pods (probe medians
of 3: 53.3 -> 52.4 MiB, ready unchanged)."""

_REFUSED_CODES = frozenset({406, 415})

_WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_RETRY_AFTER_CODES = frozenset({429, 500, 502, 503, 504})
_MAX_RETRY_AFTER_ATTEMPTS = 10
"""client-go's ``maxRetries`` for an answer that says when to come back: right after an
install, a LIST of a new CRD's objects is refused for seconds (429, "storage is
(re)initializing", Retry-After 1)."""
_MAX_RETRY_AFTER_SECONDS = 5.0


# What a YAML parser refuses raw (DEL, C1 controls, non-characters, surrogates) or reads as a
# line break and folds (NEL, LS, PS). JSON escapes the C0 controls itself.
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")


def _yaml_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    # A lone surrogate is not a character; the API server would read U+FFFD for it anyway.
    return "\\ufffd" if 0xD800 <= code <= 0xDFFF else f"\\u{code:04x}"


def encode_body(body: Any, content_type: str) -> bytes:
    """The request body. An apply patch is parsed as YAML by the server, which refuses or
    rewrites some characters JSON carries raw, and accepts non-BMP characters only unescaped;
    this keeps every string the API server can store intact."""
    if content_type != APPLY_PATCH:
        return orjson.dumps(body)
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return _YAML_UNSAFE.sub(_yaml_escape, text).encode("utf-8")


# A peer that vanished (host down, path blackholed) is noticed by the kernel within about
# KEEPIDLE + KEEPINTVL * KEEPCNT = 25 s even on an idle watch, and unacknowledged writes give
# up after USER_TIMEOUT; a frozen proxy that still acknowledges is ``watch_health``'s job.
_TCP_KEEPALIVE = {"TCP_KEEPIDLE": 10, "TCP_KEEPINTVL": 5, "TCP_KEEPCNT": 3}
_TCP_USER_TIMEOUT_MS = 25_000


def _keepalive_socket(addr_info: Any) -> socket.socket:
    family, type_, proto, _, _ = addr_info
    sock = socket.socket(family=family, type=type_, proto=proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in _TCP_KEEPALIVE.items():
        if hasattr(socket, name):  # Linux names; other systems keep their defaults
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, _TCP_USER_TIMEOUT_MS)
    return sock


log = structlog.get_logger(__name__)


class WriteGate(Protocol):
    """Decides whether this process may write now; raises when it may not."""

    def check(self, method: str, path: str) -> None: ...


_AUTHORIZER_REFUSAL = re.compile(r'User ".*" cannot \S+ (resource|path) "')


class ApiError(Exception):
    """A non-2xx answer, with the request it answered and the server's Status message."""

    def __init__(
        self, status: int, method: str, path: str, body: Json | None, retry_after: float | None
    ) -> None:
        self.status = status
        self.method = method
        self.path = path
        self.body = body or {}
        self.reason: str = self.body.get("reason", "")
        self.message: str = self.body.get("message", "") or str(body)
        self.retry_after = retry_after
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}")

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def unauthorized(self) -> bool:
        """Refused by authentication or authorization (RBAC: the request's user may not make
        it), not by admission: the API server's authorizer says ``User "u" cannot <verb>
        resource "r"`` (``responsewriters.forbiddenMessage``); admission's 403 names the object
        (``pods "x" is forbidden: ...``)."""
        return self.status == 401 or (
            self.status == 403 and _AUTHORIZER_REFUSAL.search(self.message) is not None
        )


@dataclass(frozen=True)
class Timeouts:
    """One frozen set of limits, so no call can wait forever."""

    request: float = 30.0
    connect: float = 10.0


class RestClientMetrics(ComponentMetrics):
    """client-go's rest client families (component-base latency buckets)."""

    LATENCY_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        self.requests = Counter(
            "rest_client_requests_total",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            ["code", "method", "host"],
            registry=registry,
        )
        self.latency = Histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            ["verb", "host"],
            buckets=self.LATENCY_BUCKETS,
            registry=registry,
        )


def _json_accept(metadata_only: bool, *, watch: bool) -> str:
    if not metadata_only:
        return APPLICATION_JSON
    return PARTIAL_METADATA if watch else PARTIAL_METADATA_LIST


class _RawClient(Protocol):
    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int | bool] | None = ...,
        accept: str = ...,
        timeout: float | None = ...,
    ) -> Json: ...

    def stream(
        self,
        path: str,
        *,
        params: Mapping[str, str | int | bool] | None = ...,
        accept: str = ...,
        total_timeout: float,
        read_timeout: float,
    ) -> contextlib.AbstractAsyncContextManager[ByteSource]: ...


LIST_YIELD_EVERY = 100
"""Items of a LIST page prepared between yields to the loop (a 500-pod page is several
milliseconds of work)."""


async def prepared(page: Json, prepare: Prepare | None) -> Json:
    """``page`` with each item through ``prepare`` (given its list's kind and apiVersion),
    yielding to the loop every ``LIST_YIELD_EVERY`` items."""
    items = page.get("items")
    if prepare is None or not isinstance(items, list):
        return page
    kind, api_version = str(page.get("kind") or ""), str(page.get("apiVersion") or "")
    for index, item in enumerate(items):
        items[index] = prepare(item, kind, api_version)
        if (index + 1) % LIST_YIELD_EVERY == 0:
            await asyncio.sleep(0)
    return page


class JsonListWatch:
    """LIST pages and watches in JSON over ``request`` and ``stream``: what an informer asks
    of its client (``informer.ListWatchClient``), the way every client can answer it."""

    watch_list = False
    """No streaming lists: informers fill their caches from paged LISTs."""

    async def list_page(
        self: _RawClient,
        path: str,
        *,
        params: Mapping[str, str | int | bool],
        metadata_only: bool,
        fields: FieldTree | None,
        timeout: float,
        on_metadata: Callable[[Json], None] | None = None,
        prepare: Prepare | None = None,
    ) -> Json:
        """One page as the server sent it (a JSON decoder builds every field anyway): read
        whole, so ``on_metadata`` is never called; then each item through ``prepare``."""
        accept = _json_accept(metadata_only, watch=False)
        page = await self.request("GET", path, params=params, accept=accept, timeout=timeout)
        return await prepared(page, prepare)

    @contextlib.asynccontextmanager
    async def watch(
        self: _RawClient,
        path: str,
        *,
        params: Mapping[str, str | int | bool],
        metadata_only: bool,
        fields: FieldTree | None,
        total_timeout: float,
        read_timeout: float,
        inactivity_timeout: float,
    ) -> AsyncIterator[WatchStream]:
        accept = _json_accept(metadata_only, watch=True)
        async with self.stream(
            path,
            params=params,
            accept=accept,
            total_timeout=total_timeout,
            read_timeout=read_timeout,
        ) as body:
            yield WatchStream(body, inactivity_timeout=inactivity_timeout)


class KubeClient(JsonListWatch):
    """Raw API access; use as ``async with``. Safe to share among tasks.

    Informers' LISTs and watches of built-in types travel in protobuf (``content_type``
    ``PROTOBUF``, the default, like client-go's), decoded only as far as the informer's
    transform reads; a server or proxy that refuses protobuf (406, 415) turns this client to
    JSON for good, with one warning. Custom resources and everything else are JSON.
    """

    def __init__(
        self,
        access: ClusterAccess,
        *,
        registry: CollectorRegistry | None = None,
        user_agent: str = "linkerd-config",
        timeouts: Timeouts | None = None,
        write_gate: WriteGate | None = None,
        pool_size: int = 32,
        content_type: str = PROTOBUF,
        watch_list: bool = True,
    ) -> None:
        if content_type not in CONTENT_TYPES.values():
            raise ValueError(f"content_type must be one of {sorted(CONTENT_TYPES.values())}")
        self.access = access
        self.registry = registry
        """Where this client's metrics go; informers on this client default to it too."""
        self.metrics = RestClientMetrics.of(registry)
        self.timeouts = timeouts or Timeouts()
        self.write_gate = write_gate
        self._host = urlsplit(access.server).netloc
        self._user_agent = user_agent
        self._pool_size = pool_size
        self._session: aiohttp.ClientSession | None = None
        self._probe_session: aiohttp.ClientSession | None = None
        # Invariant: both open or both None. The probe session holds one connection of its
        # own, kept alive by ``probe``: one that existed before any fault, as watches do.
        self._closing: set[asyncio.Task[None]] = set()
        # Invariant: sessions dropped by renew_connections whose close has not finished.
        self._streams: set[aiohttp.StreamReader] = set()
        # Invariant: the bodies of the streams (watches) being read right now.
        self.protobuf = content_type == PROTOBUF
        """Ask for protobuf where it can be decoded; False from the first refusal on."""
        self.watch_list = watch_list
        """Informers fill their caches from streaming lists (client-go's WatchListClient)."""

    async def __aenter__(self) -> KubeClient:
        self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def open(self) -> None:
        if self._session is None:
            self._session = self._new_session(self._pool_size)
            self._probe_session = self._new_session(1)

    def _new_session(self, limit: int) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            ssl=self.access.ssl_context,
            limit=limit,
            keepalive_timeout=60,
            socket_factory=_keepalive_socket,
        )
        return aiohttp.ClientSession(
            connector=connector,
            headers={"User-Agent": self._user_agent},
            json_serialize=lambda o: orjson.dumps(o).decode(),
            read_bufsize=READ_BUFFER,
        )

    def renew_connections(self) -> None:
        """Drop every pooled connection, presumed dead: new requests open new ones, and
        requests in flight on the old ones (watches included) fail now, not at their timeout.

        A stream is failed here, by its reader: closing a connection detaches its body from
        it (aiohttp 3.14), so a watch read on it would otherwise wait out its own inactivity
        deadline, blind, while reporting nothing wrong."""
        old = (self._session, self._probe_session)
        self._session = self._probe_session = None
        dropped = aiohttp.ClientConnectionError(
            "connection dropped: the path to the API server was presumed dead"
        )
        for body in self._streams:
            body.set_exception(dropped)
        self.open()
        for session in old:
            if session is None:
                continue
            task = asyncio.get_running_loop().create_task(session.close(), name="close-old-session")
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        for session in (self._session, self._probe_session):
            if session is not None:
                await session.close()
        self._session = self._probe_session = None
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("KubeClient used before open() or after close()")
        return self._session

    async def _headers(self, content_type: str | None, accept: str) -> dict[str, str]:
        headers = {"Accept": accept}
        if content_type:
            headers["Content-Type"] = content_type
        token = await self.access.bearer()
        if token:
            headers["Authorization"] = token
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str = APPLICATION_JSON,
        accept: str = APPLICATION_JSON,
        timeout: float | None = None,
        fenced: bool = True,
    ) -> Json:
        """One call; 2xx returns the decoded body, anything else raises ApiError.

        Like client-go, an answer that carries Retry-After (429, or a 5xx the server says it
        did not process) is retried a few times after the delay it asks for.
        """
        answer, raw = await self.request_raw(
            method,
            path,
            params=params,
            body=body,
            content_type=content_type,
            accept=accept,
            timeout=timeout,
            fenced=fenced,
        )
        return _decode(answer, raw, None)

    async def request_raw(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str = APPLICATION_JSON,
        accept: str = APPLICATION_JSON,
        timeout: float | None = None,
        fenced: bool = True,
    ) -> tuple[str, bytes]:
        """``request``, undecoded: the answer's content type and body."""
        return await self._request(
            method, path, _read_body, params, body, content_type, accept, timeout, fenced
        )

    async def _request(
        self,
        method: str,
        path: str,
        read: BodyReader[T],
        params: Mapping[str, str | int | bool] | None,
        body: Any,
        content_type: str,
        accept: str,
        timeout: float | None,
        fenced: bool,
    ) -> tuple[str, T]:
        """``request_raw`` with a 2xx body read by ``read`` (given the answer's content type
        and the body's stream)."""
        method = method.upper()
        if fenced and method in _WRITE_METHODS and self.write_gate is not None:
            self.write_gate.check(method, path)
        data = encode_body(body, content_type) if body is not None else None
        for attempt in range(_MAX_RETRY_AFTER_ATTEMPTS):
            try:
                return await self._once(
                    method, path, params, data, content_type, accept, timeout, read
                )
            except ApiError as exc:
                last_try = attempt == _MAX_RETRY_AFTER_ATTEMPTS - 1
                if exc.retry_after is None or exc.status not in _RETRY_AFTER_CODES or last_try:
                    raise
                await asyncio.sleep(min(max(exc.retry_after, 0.1), _MAX_RETRY_AFTER_SECONDS))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _once(
        self,
        method: str,
        path: str,
        params: Mapping[str, str | int | bool] | None,
        data: bytes | None,
        content_type: str,
        accept: str,
        timeout: float | None,
        read: BodyReader[T],
    ) -> tuple[str, T]:
        headers = await self._headers(content_type if data is not None else None, accept)
        limit = aiohttp.ClientTimeout(
            total=timeout or self.timeouts.request, connect=self.timeouts.connect
        )
        started = time.monotonic()
        code = "<error>"
        try:
            async with self.session.request(
                method,
                self.access.server + path,
                params=_query(params),
                data=data,
                headers=headers,
                timeout=limit,
            ) as resp:
                code = str(resp.status)
                if resp.status >= 300:
                    raise _api_error(resp, method, path, await resp.read())
                answer = resp.headers.get("Content-Type", "")
                return answer, await read(answer, resp.content)
        finally:
            self._observe(method, code, started)

    # -- informers' LISTs and watches ------------------------------------------------------

    def _asks_protobuf(self, path: str, metadata_only: bool) -> bool:
        return self.protobuf and decodes(path, metadata_only)

    def _refused(self, exc: ApiError) -> None:
        if self.protobuf:
            log.warning(
                "protobuf refused; asking for JSON from now on",
                path=exc.path,
                status=exc.status,
                error=exc.message[:200],
            )
        self.protobuf = False

    async def list_page(
        self,
        path: str,
        *,
        params: Mapping[str, str | int | bool],
        metadata_only: bool,
        fields: FieldTree | None,
        timeout: float,
        on_metadata: Callable[[Json], None] | None = None,
        prepare: Prepare | None = None,
    ) -> Json:
        """One page, in protobuf if the server speaks it for this path (JSON otherwise).
        Decoded from protobuf, it is read as it arrives: ``on_metadata`` has the list's
        metadata before the items are read, and each item holds only ``fields`` (None:
        everything), converted and handed to ``prepare`` as soon as it is in."""
        in_json = functools.partial(
            super().list_page,
            path,
            params=params,
            metadata_only=metadata_only,
            fields=fields,
            timeout=timeout,
            prepare=prepare,
        )
        if not self._asks_protobuf(path, metadata_only):
            return await in_json()
        json_accept = _json_accept(metadata_only, watch=False)
        accept = f"{PROTOBUF}{_AS_METADATA_LIST if metadata_only else ''}, {json_accept}"

        async def read_page(answer: str, body: aiohttp.StreamReader) -> Json:
            if not answer.startswith(PROTOBUF):
                return await prepared(_decode(answer, await body.read(), fields), prepare)
            # Decoded as it arrives, never held whole; each item prepared as it is in.
            page = ListReader(fields, on_metadata, prepare)
            yielded = 0
            async for chunk in body.iter_any():
                page.feed(chunk)
                if page.items_read - yielded >= LIST_YIELD_EVERY:
                    yielded = page.items_read
                    await asyncio.sleep(0)
            return page.result()

        try:
            _, page = await self._request(
                "GET", path, read_page, params, None, APPLICATION_JSON, accept, timeout, True
            )
        except ApiError as exc:
            if exc.status not in _REFUSED_CODES:
                raise
            self._refused(exc)
            return await in_json()
        return page

    @contextlib.asynccontextmanager
    async def watch(
        self,
        path: str,
        *,
        params: Mapping[str, str | int | bool],
        metadata_only: bool,
        fields: FieldTree | None,
        total_timeout: float,
        read_timeout: float,
        inactivity_timeout: float,
    ) -> AsyncIterator[WatchStream]:
        """A watch, as length-framed protobuf if the server speaks it (JSON lines else)."""
        protobuf = self._asks_protobuf(path, metadata_only)
        json_accept = _json_accept(metadata_only, watch=True)
        accept = json_accept
        if protobuf:
            accept = f"{PROTOBUF}{_AS_METADATA if metadata_only else ''}, {json_accept}"
        async with contextlib.AsyncExitStack() as stack:
            try:
                answer, body = await stack.enter_async_context(
                    self._stream(path, params, accept, total_timeout, read_timeout)
                )
            except ApiError as exc:
                if not protobuf or exc.status not in _REFUSED_CODES:
                    raise
                self._refused(exc)
                answer, body = await stack.enter_async_context(
                    self._stream(path, params, json_accept, total_timeout, read_timeout)
                )
            if answer.startswith(PROTOBUF):
                yield WatchStream(
                    body,
                    inactivity_timeout=inactivity_timeout,
                    framed=True,
                    decode=watch_event_decoder(fields),
                )
            else:
                yield WatchStream(body, inactivity_timeout=inactivity_timeout)

    async def probe(self, path: str, *, timeout: float) -> int:
        """A GET of ``path`` on a connection of its own that stays open between probes (so a
        path that froze under the connections already open freezes it too, where a request
        on the pool might get a new one): the answer's HTTP status, whatever it is.
        TimeoutError (or aiohttp's ClientError) when no answer comes."""
        if self._probe_session is None:
            raise RuntimeError("KubeClient used before open() or after close()")
        headers = await self._headers(None, APPLICATION_JSON)
        limit = aiohttp.ClientTimeout(total=timeout, connect=min(timeout, self.timeouts.connect))
        started = time.monotonic()
        code = "<error>"
        try:
            async with self._probe_session.get(
                self.access.server + path, headers=headers, timeout=limit
            ) as resp:
                code = str(resp.status)
                await resp.read()
                return resp.status
        finally:
            self._observe("GET", code, started)

    async def review_token(self, token: str, *, timeout: float | None = None) -> Json:
        """Who the API server says ``token`` belongs to: a TokenReview's ``status``
        (``authenticated``, ``user``, ``error``), for the API server's own audiences.
        The token travels only in the body."""
        return await self._review(TOKEN_REVIEWS, {"token": token}, timeout)

    async def review_access(self, spec: Json, *, timeout: float | None = None) -> Json:
        """Whether the authorizer allows ``spec`` (a SubjectAccessReview's spec: user, groups,
        uid, extra, and resource or non-resource attributes): the review's ``status``
        (``allowed``, ``denied``, ``reason``)."""
        return await self._review(SUBJECT_ACCESS_REVIEWS, spec, timeout)

    async def _review(self, kind: ApiResource, spec: Json, timeout: float | None) -> Json:
        """A review stores nothing, so it is not a write and is never fenced: every replica,
        follower or leader, answers its own callers."""
        review = await self.request(
            "POST",
            kind.path(),
            body={"apiVersion": kind.api_version, "kind": kind.kind, "spec": spec},
            timeout=timeout,
            fenced=False,
        )
        status: Json = review.get("status") or {}
        return status

    @contextlib.asynccontextmanager
    async def stream(
        self,
        path: str,
        *,
        params: Mapping[str, str | int | bool] | None = None,
        accept: str = APPLICATION_JSON,
        total_timeout: float,
        read_timeout: float,
    ) -> AsyncIterator[aiohttp.StreamReader]:
        """A long GET (a watch): the body as a stream, with a deadline on silence."""
        async with self._stream(path, params, accept, total_timeout, read_timeout) as (_, body):
            yield body

    @contextlib.asynccontextmanager
    async def _stream(
        self,
        path: str,
        params: Mapping[str, str | int | bool] | None,
        accept: str,
        total_timeout: float,
        read_timeout: float,
    ) -> AsyncIterator[tuple[str, aiohttp.StreamReader]]:
        """``stream``, with the answer's content type."""
        headers = await self._headers(None, accept)
        limit = aiohttp.ClientTimeout(
            total=total_timeout, connect=self.timeouts.connect, sock_read=read_timeout
        )
        started = time.monotonic()
        code = "<error>"
        try:
            async with self.session.get(
                self.access.server + path, params=_query(params), headers=headers, timeout=limit
            ) as resp:
                code = str(resp.status)
                if resp.status >= 300:
                    raise _api_error(resp, "GET", path, await resp.read())
                self._streams.add(resp.content)
                try:
                    yield resp.headers.get("Content-Type", ""), resp.content
                finally:
                    self._streams.discard(resp.content)
        finally:
            self._observe("WATCH", code, started)

    def _observe(self, method: str, code: str, started: float) -> None:
        self.metrics.requests.labels(code, method, self._host).inc()
        self.metrics.latency.labels(method, self._host).observe(time.monotonic() - started)


def _query(params: Mapping[str, str | int | bool] | None) -> dict[str, str] | None:
    if not params:
        return None
    return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in params.items()}


def _api_error(resp: aiohttp.ClientResponse, method: str, path: str, raw: bytes) -> ApiError:
    body: Any
    try:
        if resp.headers.get("Content-Type", "").startswith(PROTOBUF):
            body = decode_object(raw, None)  # a Status, asked for in protobuf
        else:
            body = orjson.loads(raw) if raw else None
    except (orjson.JSONDecodeError, ProtobufError, ValueError):
        body = {"message": raw[:500].decode(errors="replace")}
    if body is not None and not isinstance(body, dict):
        body = {"message": str(body)}
    retry_after: float | None = None
    header = resp.headers.get("Retry-After")
    if header:
        with contextlib.suppress(ValueError):
            retry_after = float(header)
    if retry_after is None and body is not None:
        # The Status says it too (apimachinery's SuggestsClientDelay reads either).
        details = body.get("details")
        seconds = details.get("retryAfterSeconds") if isinstance(details, dict) else None
        if isinstance(seconds, int) and not isinstance(seconds, bool) and seconds > 0:
            retry_after = float(seconds)
    return ApiError(resp.status, method, path, body, retry_after)


def token_access(server: str, ca_pem: bytes, token: str) -> ClusterAccess:
    """Access as a bearer token (e.g. a ServiceAccount's TokenRequest token)."""
    ctx = ssl.create_default_context(cadata=ca_pem.decode())

    async def bearer() -> str:
        return f"Bearer {token}"

    return ClusterAccess(server=server, ssl_context=ctx, bearer=bearer, source="token")


T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class BodyReader(Protocol[T_co]):
    """Reads a 2xx answer's body, given its content type."""

    async def __call__(self, content_type: str, body: aiohttp.StreamReader, /) -> T_co: ...


async def _read_body(content_type: str, body: aiohttp.StreamReader) -> bytes:
    return await body.read()


def _decode(content_type: str, raw: bytes, fields: FieldTree | None) -> Json:
    """A 2xx body by the content type the server chose: protobuf cut to ``fields``, or
    JSON."""
    if not raw:
        return {}
    if content_type.startswith(PROTOBUF):
        return decode_object(raw, fields)
    decoded: Json = orjson.loads(raw)
    return decoded
