"""Run an aiohttp application until cancelled, and always clean it up; over TLS with a
certificate that may change (files rotated by cert-manager) or not (made in memory).

Every server this process runs (webhooks, metrics, health) holds the same fixed limits
(``LIMITS``) against clients that connect and then do nothing, or dribble: the values
kube-apiserver and controller-runtime give Go's ``net/http.Server``, plus what Go leaves
out (a TLS handshake deadline and a cap on open connections, which Python needs more:
asyncio gives each TLS connection a 256 KiB read buffer up front).

The listener is our own accept loop rather than ``loop.create_server``: only so can a
connection still in its TLS handshake be counted against the cap, and be closed to make room.

One client cannot take what the others need (``per_source*``). Connections are counted per
source address too, and a source at its share makes room among its own: a pod flooding the
webhook port with new connections closes only its own, never the API server's fresh one;
nor, on the health port, the kubelet's. And a source's handshakes and requests take turns,
a few at a time: however many it sends, each pass of the event loop does a bounded amount of
its work, so another source's request waits for that much at most, not for the whole flood.
(A NetworkPolicy would keep such a pod out, but only where the network enforces it: the
server defends itself.)
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import socket
import ssl
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar, cast

import structlog
from aiohttp import hdrs, web
from aiohttp.http import HttpVersion11

from linkerd_config.kube.ratelimit import TokenBucket
from linkerd_config.kube.tls import load_chain_from_memory

log = structlog.get_logger(__name__)

V = TypeVar("V")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
"""An aiohttp request handler (or one a middleware wraps)."""


async def expect_within_limit(request: web.Request) -> web.StreamResponse | None:
    """aiohttp's ``Expect: 100-continue`` handler, but a body declared over the
    application's ``client_max_size`` is answered 413 at once, never invited with ``100
    Continue`` (aiohttp's own invites any: a client may then send a gigabyte for the body
    reader to refuse)."""
    expect = request.headers.get(hdrs.EXPECT, "")
    if request.version != HttpVersion11:
        return None
    if expect.lower() != "100-continue":
        raise web.HTTPExpectationFailed(text=f"Unknown Expect: {expect}")
    largest = request.client_max_size
    if request.content_length is not None and request.content_length > largest:
        return web.Response(status=413, text=f"request body larger than {largest} bytes\n")
    await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    request.writer.output_size = 0  # as aiohttp's: the response proper has not started
    return None


@dataclass(frozen=True)
class ConnectionLimits:
    """What one client connection may hold on a server, and for how long."""

    max_connections: int = 128
    """Open connections (handshaking ones included). One more closes another to make room:
    the oldest that has not sent a request yet (a squatter), else the least recently used
    of those answered at least ``grace`` ago, never one with bytes waiting to be read; else
    the one whose request has been in progress longest, if for ``slow_request`` or more (a
    client trickling its bodies to keep every connection busy). When none may be closed, the
    newcomer is. So a client that uses its connections (an API server, a kubelet) keeps them,
    and its new ones are let in."""
    per_source: int = 96
    """Open connections from one address at most (so others always have 32): one more from
    it closes one of its own by the rules above, else is closed. A source never makes room by
    closing another's; at ``max_connections``, room is made among the connections of the
    source holding most. The API server alone may use 96 at once (it opens one per request
    in flight)."""
    per_source_handshakes: int = 2
    """TLS handshakes in progress from one address at most (a new connection's costliest
    step); its others wait their turn, within ``handshake_timeout``."""
    per_source_requests: int = 4
    """Requests in progress from one address at most; its others wait their turn, in order
    (nothing is refused: a source only waits for itself) ..."""
    per_source_rate: float = 50.0
    per_source_burst: int = 100
    pacing_window: float = 60.0
    pace_alone: bool = False
    """Pace a source even when no other has asked (a scrape endpoint: no one needs more)."""
    """... and, while another source has asked within ``pacing_window`` seconds, paced: past
    a burst, a source's requests start ``per_source_rate`` a second at most (a token bucket
    that delays, never refuses). So however fast one source asks, it takes a bounded share of
    the one event loop when others need it (the kubelet probes every 10 s, Prometheus scrapes
    every 15 to 60 s), and all of it when no one else does (the API server alone, converting
    for every client of an old version, is never slowed)."""
    slow_request: float = 1.0
    """A request in progress this long may be cut to make room (an admission review takes
    milliseconds; the webhook's own deadline is 7 s)."""
    grace: float = 1.0
    """A connection answered less than this ago is not closed to make room: its client
    may be sending the next request on it right now."""
    handshake_timeout: float = 10.0
    """TLS: from accept to the end of the handshake."""
    body_timeout: float = 10.0
    """From the end of a request's headers to the end of its body, which is read before the
    request takes its source's turn: a client trickling a body holds a connection, never a
    turn (the API server's own webhook deadline is 10 s)."""
    header_timeout: float = 32.0
    """From a connection's start, or from the first byte of a later request, to the end
    of the request's headers: Go's ``ReadHeaderTimeout`` as both set it."""
    idle_timeout: float = 90.0
    """From the end of a request to the first byte of the next (Go's ``IdleTimeout``, as
    both set it, matching the API server's client keeping idle connections 90 s)."""
    close_timeout: float = 5.0
    """TLS: how long a closing connection waits for the client's close_notify."""
    max_header_line: int = 8190
    """Bytes in the request line and in each header line (aiohttp's default) ..."""
    max_headers: int = 128
    """... and header lines: about 1 MiB of headers at most, Go's ``MaxHeaderBytes``."""
    backlog: int = socket.SOMAXCONN
    """Connections the kernel queues before accept: as many as it allows, as Go asks."""


LIMITS = ConnectionLimits()


class _Turns:
    """At most ``limit`` at once per source; the others wait their turn, first come first
    served. A source's semaphore lives while someone of it holds or awaits a turn."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._semaphores: dict[str, asyncio.Semaphore] = {}
        self._users: Counter[str] = Counter()

    @contextlib.asynccontextmanager
    async def turn(self, source: str) -> AsyncIterator[None]:
        semaphore = self._semaphores.get(source)
        if semaphore is None:
            semaphore = self._semaphores[source] = asyncio.Semaphore(self.limit)
        self._users[source] += 1
        try:
            async with semaphore:
                yield
        finally:
            self._users[source] -= 1
            if not self._users[source]:
                del self._users[source]
                del self._semaphores[source]


def _remember(lru: OrderedDict[str, V], key: str, value: V, limit: int) -> None:
    """``key`` set to ``value`` as the most recently used of ``lru``, which keeps ``limit``."""
    lru[key] = value
    lru.move_to_end(key)
    if len(lru) > limit:
        lru.popitem(last=False)


class _Pacing:
    """A token bucket per source, the ``remembered`` most recently used kept (a source
    forgotten starts again with a full bucket, as one idle that long would have); applied
    only while another source has asked within ``window`` seconds: a source alone is never
    slowed (the API server converting for every client of an old version; a local run, where
    every client is 127.0.0.1)."""

    def __init__(
        self,
        rate: float,
        burst: int,
        window: float,
        remembered: int = 4096,
        *,
        alone: bool = False,
    ) -> None:
        TokenBucket.check(rate, burst)
        self.rate = rate
        self.burst = burst
        self.window = window
        self.alone = alone
        """Pace a source alone too."""
        self.remembered = remembered
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self._seen: OrderedDict[str, float] = OrderedDict()
        """When each source last asked, least recently first."""

    def delay(self, source: str, now: float) -> float:
        """Seconds until ``source``'s next request may start (a token taken for it when it
        is paced at all)."""
        _remember(self._seen, source, now, self.remembered)
        if not (self.alone or self._contended(source, now)):
            return 0.0
        bucket = self._buckets.get(source) or TokenBucket(self.rate, self.burst, now)
        _remember(self._buckets, source, bucket, self.remembered)
        return bucket.reserve(now)

    def _contended(self, source: str, now: float) -> bool:
        """Whether another source asked within ``window`` (the most recent other one is the
        last or the one before it: ``source`` was just moved to the end)."""
        for other, at in reversed(self._seen.items()):
            if other != source:
                return now - at <= self.window
        return False

    def refund(self, source: str) -> None:
        """Give back the token taken for a request of ``source`` cut before it started (Go's
        ``Reservation.Cancel``): else a source whose requests are cut while they wait (its
        clients leaving, its connections closed to make room) runs into debt without bound,
        and its next requests wait for ones that never ran."""
        bucket = self._buckets.get(source)
        if bucket is not None:
            bucket.cancel()


class _Connection(asyncio.Protocol):
    """One accepted connection: the server's protocol inside, the connection's deadline,
    and whether a request is in progress (told by the listener's middleware)."""

    def __init__(
        self, listener: _Listener, inner: asyncio.Protocol, sock: socket.socket, source: str
    ) -> None:
        self.listener = listener
        self.source = source
        """The client's address."""
        self.inner = inner
        self.sock = sock
        self.transport: asyncio.Transport | None = None
        self.handshake: asyncio.Task[None] | None = None
        self.requests = 0
        """In progress."""
        self.served = 0
        self.since = time.monotonic()
        """When the last request was answered."""
        self.busy_since = 0.0
        """When the request in progress started (with ``requests``), or its handler did: the
        time it waited for its source's turn and pace is not the client's doing."""
        self.waiting = False
        """Its request waits for its source's turn or pace: not a slow client's, never cut."""
        self.reading_headers = True
        self.handlers: set[asyncio.Task[object]] = set()
        """Its requests' handlers: cut with it (so a turn it holds is freed), or once its
        client is gone (no answer can reach it: a request waiting for its turn or its pace
        must not keep waiting, with its body, for a client that left)."""
        self.lost = False
        self._deadline: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol, passed on to the server's protocol ----------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self._arm(self.listener.limits.header_timeout, "headers not received in time")
        self.inner.connection_made(self.transport)

    def data_received(self, data: bytes) -> None:
        if self.requests == 0 and not self.reading_headers:
            self.reading_headers = True  # a next request's first byte: its headers are due
            self._arm(self.listener.limits.header_timeout, "headers not received in time")
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._disarm()
        self.listener.forget(self)
        self._cancel_handlers()
        self.inner.connection_lost(exc)

    # -- requests, told by the listener's middleware -------------------------------------------

    def request_started(self) -> None:
        if not self.requests:
            self.busy_since = time.monotonic()
        self.requests += 1
        self.reading_headers = False
        self._disarm()
        self.listener.used(self)

    def request_finished(self) -> None:
        self.requests -= 1
        self.served += 1
        self.since = time.monotonic()
        if self.requests == 0 and self.transport is not None and not self.lost:
            self._arm(self.listener.limits.idle_timeout, "idle", polite=True)
        self.listener.used(self)

    def closable(self, now: float) -> bool:
        """No request in progress, none just answered, no bytes sent and not yet read."""
        if self.requests or (self.served and now - self.since < self.listener.limits.grace):
            return False
        try:
            waiting = self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:  # reset already: closing it is what is left to do
            return True
        return not waiting  # b"": the client has closed its side

    def evict(self) -> None:
        """Close now (a request in progress on it is cut, its handler cancelled)."""
        self._disarm()
        self._cancel_handlers()
        if self.transport is not None:
            self.transport.abort()
        elif self.handshake is not None:
            self.handshake.cancel()

    def _cancel_handlers(self) -> None:
        for handler in self.handlers:
            handler.cancel()

    def _arm(self, seconds: float, why: str, *, polite: bool = False) -> None:
        self._disarm()
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_later(seconds, self._expire, why, polite)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self, why: str, polite: bool) -> None:
        self._deadline = None
        if self.transport is None or self.requests:
            return
        log.debug("closing connection", server=self.listener.name, reason=why)
        if polite:  # a keep-alive client's idle connection: TLS close_notify, then FIN
            self.transport.close()
        else:
            self.transport.abort()


_ACCEPT_RESOURCE_ERRORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class _Listener:
    """Accepts on ``sockets`` until cancelled, holding every connection to ``limits``;
    ``track`` (a middleware of the application) tells it which have a request in progress."""

    def __init__(
        self,
        name: str,
        sockets: list[socket.socket],
        protocol_factory: Callable[[], asyncio.Protocol],
        ssl_context: ssl.SSLContext | None,
        limits: ConnectionLimits,
    ) -> None:
        self.name = name
        self.sockets = sockets
        self.protocol_factory = protocol_factory
        self.ssl_context = ssl_context
        self.limits = limits
        self.open: OrderedDict[_Connection, None] = OrderedDict()
        """Open connections, least recently used first."""
        self.sources: dict[str, OrderedDict[_Connection, None]] = {}
        """The same, by source address."""
        self._by_protocol: dict[object, _Connection] = {}
        self._handshakes: set[asyncio.Task[None]] = set()
        self._handshake_turns = _Turns(limits.per_source_handshakes)
        self._request_turns = _Turns(limits.per_source_requests)
        self._pacing = _Pacing(
            limits.per_source_rate,
            limits.per_source_burst,
            limits.pacing_window,
            alone=limits.pace_alone,
        )
        self.evicted = 0
        self.refused = 0
        self._reported = 0.0

    async def track(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Run ``handler`` with its connection marked as having a request in progress."""
        connection = self._by_protocol.get(request.protocol)
        if connection is None:  # gone already (evicted while the request was parsed)
            return await handler(request)
        task = asyncio.current_task()
        assert task is not None
        connection.request_started()
        connection.handlers.add(task)
        try:
            refused = await self._read_body(request)
            if refused is not None:
                return refused
            connection.waiting = True
            async with self._request_turns.turn(connection.source):
                delay = self._pacing.delay(connection.source, time.monotonic())
                if delay > 0:
                    try:
                        await asyncio.sleep(delay)
                    except asyncio.CancelledError:
                        self._pacing.refund(connection.source)
                        raise
                connection.waiting = False
                connection.busy_since = time.monotonic()
                return await handler(request)
        finally:
            connection.waiting = False
            connection.handlers.discard(task)
            connection.request_finished()

    async def _read_body(self, request: web.Request) -> web.Response | None:
        """Read ``request``'s body (the handler then has it at once), within ``body_timeout``
        and the application's ``client_max_size``; the answer if it cannot be."""
        if not request.body_exists:
            return None
        largest = request.client_max_size
        too_large = web.Response(status=413, text=f"request body larger than {largest} bytes\n")
        if request.content_length is not None and request.content_length > largest:
            return too_large
        try:
            async with asyncio.timeout(self.limits.body_timeout):
                await request.read()
        except TimeoutError:
            return web.Response(status=408, text="request body not received in time\n")
        except web.HTTPRequestEntityTooLarge:
            return too_large
        return None

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                for sock in self.sockets:
                    group.create_task(self._accept(sock), name=f"{self.name}-accept")
        finally:
            for sock in self.sockets:
                sock.close()
            for task in list(self._handshakes):
                task.cancel()
            if self._handshakes:
                await asyncio.wait(self._handshakes, timeout=self.limits.close_timeout)

    def used(self, connection: _Connection) -> None:
        if connection in self.open:
            self.open.move_to_end(connection)
            self.sources[connection.source].move_to_end(connection)

    def forget(self, connection: _Connection) -> None:
        if connection in self.open:
            del self.open[connection]
            own = self.sources[connection.source]
            del own[connection]
            if not own:
                del self.sources[connection.source]
        self._by_protocol.pop(connection.inner, None)

    async def _accept(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, address = await loop.sock_accept(sock)
            except (ConnectionAbortedError, InterruptedError):
                continue
            except OSError as exc:
                if exc.errno not in _ACCEPT_RESOURCE_ERRORS:
                    raise
                # Out of file descriptors or memory: what asyncio's own server does, wait.
                log.error("cannot accept connections", server=self.name, error=str(exc))
                await asyncio.sleep(1.0)
                continue
            self._admit(conn, address)
            # Then whatever else is queued, as asyncio's own server does: a flood of
            # connections must not leave a kubelet's probe waiting in a full backlog.
            for _ in range(self.limits.backlog):
                try:
                    conn, address = sock.accept()
                except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                    break
                except OSError as exc:
                    if exc.errno not in _ACCEPT_RESOURCE_ERRORS:
                        raise
                    break
                self._admit(conn, address)

    def _admit(self, conn: socket.socket, address: object) -> None:
        source = _source(address)
        if len(self.sources.get(source, ())) >= self.limits.per_source:
            admitted = self._evict_one(source)
        elif len(self.open) >= self.limits.max_connections:
            busiest = max(self.sources, key=lambda s: len(self.sources[s]))
            admitted = self._evict_one(busiest) or self._evict_one(None)
        else:
            admitted = True
        if not admitted:
            self.refused += 1
            self._report()
            conn.close()
            return
        conn.setblocking(False)
        connection = _Connection(self, self.protocol_factory(), conn, source)
        self.open[connection] = None
        self.sources.setdefault(source, OrderedDict())[connection] = None
        self._by_protocol[connection.inner] = connection
        task = asyncio.create_task(self._start(connection, conn), name=f"{self.name}-handshake")
        connection.handshake = task
        self._handshakes.add(task)
        # A callback, not a ``finally``: a task cancelled before its first step (a connection
        # admitted and evicted in one burst of accepts) never runs its body.
        task.add_done_callback(functools.partial(self._started, connection, conn))

    def _started(
        self, connection: _Connection, conn: socket.socket, task: asyncio.Task[None]
    ) -> None:
        self._handshakes.discard(task)
        connection.handshake = None
        if connection.transport is None:  # failed, timed out, or evicted: never served
            self.forget(connection)
            conn.close()  # any transport over it is closed already; this closes the rest

    def _evict_one(self, source: str | None) -> bool:
        """Close the connection ``max_connections`` says to, among ``source``'s (None: any
        source's), if there is one."""
        now = time.monotonic()
        victim: _Connection | None = None
        candidates = self._of(source)
        for connection in candidates:  # least recently used first
            if connection.served and victim is not None:
                continue  # a squatter is still looked for; this one would not be chosen
            if connection.closable(now):
                victim = connection
                if not connection.served:
                    break
        if victim is None:
            victim = self._slowest(now, source)
        if victim is None:
            return False
        self.forget(victim)
        victim.evict()
        self.evicted += 1
        self._report()
        return True

    def _of(self, source: str | None) -> OrderedDict[_Connection, None]:
        """``source``'s open connections (None: everyone's), least recently used first."""
        if source is None:
            return self.open
        return self.sources.get(source) or OrderedDict()

    def _slowest(self, now: float, source: str | None) -> _Connection | None:
        """The connection whose request has been in progress longest (among ``source``'s),
        if for at least ``slow_request``: every connection busy means a client keeps them so
        on purpose."""
        candidates = self._of(source)
        busy = [c for c in candidates if c.requests and not c.waiting]
        if not busy:
            return None
        slowest = min(busy, key=lambda c: c.busy_since)
        if now - slowest.busy_since < self.limits.slow_request:
            return None
        log.debug("cutting the slowest request to make room", server=self.name)
        return slowest

    def _report(self) -> None:
        now = time.monotonic()
        if now - self._reported >= 60:
            self._reported = now
            log.warning(
                "connection limit reached: closing idle connections to admit new ones",
                server=self.name,
                limit=self.limits.max_connections,
                per_source=self.limits.per_source,
                busiest=sorted(len(own) for own in self.sources.values())[-3:],
                evicted=self.evicted,
                refused_while_all_busy=self.refused,
            )

    async def _start(self, connection: _Connection, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        tls = self.ssl_context is not None
        try:
            async with (
                asyncio.timeout(self.limits.handshake_timeout),
                self._handshake_turns.turn(connection.source),
            ):
                await loop.connect_accepted_socket(
                    lambda: connection,
                    conn,
                    ssl=self.ssl_context,
                    ssl_handshake_timeout=self.limits.handshake_timeout if tls else None,
                    ssl_shutdown_timeout=self.limits.close_timeout if tls else None,
                )
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            log.debug("connection not established", server=self.name, error=repr(exc))


def _source(address: object) -> str:
    """The client's address, as accept gives it (host, port[, flow, scope]); a Unix
    socket's peer has none."""
    if isinstance(address, tuple) and address and isinstance(address[0], str):
        return address[0]
    return ""


async def _bind(host: str, port: int, backlog: int) -> list[socket.socket]:
    """Listening sockets for every address ``host`` names, as ``loop.create_server`` binds."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                where = f"[{address[0]}]" if family == socket.AF_INET6 else address[0]
                raise OSError(
                    exc.errno, f"cannot listen on {where}:{port}: {exc.strerror}"
                ) from exc
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


async def serve(
    app: web.Application,
    host: str,
    port: int,
    *,
    name: str,
    ssl_context: ssl.SSLContext | None = None,
    on_bound: Callable[[int], None] | None = None,
    shutdown_timeout: float = 5.0,
    limits: ConnectionLimits = LIMITS,
) -> None:
    """Listen on host:port (0 picks a free port, reported to ``on_bound``) until cancelled,
    every connection held to ``limits``. ``app`` is this server's alone: a middleware that
    tells the limits when a request is in progress is put first in it."""
    runner = web.AppRunner(
        app,
        handle_signals=False,
        shutdown_timeout=shutdown_timeout,
        # aiohttp's own deadline for a connection with no request: a backstop behind ours.
        keepalive_timeout=limits.idle_timeout + limits.header_timeout,
        max_line_size=limits.max_header_line,
        max_field_size=limits.max_header_line,
        max_headers=limits.max_headers,
    )

    def protocol() -> asyncio.Protocol:
        assert runner.server is not None  # set up before the first accept
        return runner.server()

    listener = _Listener(
        name, await _bind(host, port, limits.backlog), protocol, ssl_context, limits
    )

    @web.middleware
    async def track(request: web.Request, handler: Handler) -> web.StreamResponse:
        return await listener.track(request, handler)

    app.middlewares.insert(0, track)
    try:
        await runner.setup()
        bound = int(listener.sockets[0].getsockname()[1])
        log.info("serving", server=name, host=host, port=bound, tls=ssl_context is not None)
        async with asyncio.TaskGroup() as group:
            group.create_task(listener.run(), name=f"{name}-listener")
            if on_bound is not None:
                on_bound(bound)
    finally:
        for sock in listener.sockets:
            sock.close()
        await asyncio.shield(runner.cleanup())
        log.info("stopped serving", server=name)


class ServingCertificate(Protocol):
    """What ``serve_tls`` needs; ``admission.ReloadingCertificate`` is one."""

    context: ssl.SSLContext
    available: asyncio.Event
    """Set once there is a pair to serve with."""

    async def watch(self, interval: float = 2.0) -> None:
        """Follow changes until cancelled."""
        ...


def server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class InMemoryCertificate:
    """A pair that never changes (say one made at start), loaded without writing the key to
    a file system where the platform allows it (a Linux memfd), else through a private
    temporary folder that is removed at once."""

    def __init__(self, cert_pem: bytes, key_pem: bytes) -> None:
        self.context = server_context()
        load_chain_from_memory(self.context, cert_pem + key_pem)
        self.available = asyncio.Event()
        self.available.set()

    async def watch(self, interval: float = 2.0) -> None:
        await asyncio.Event().wait()


async def serve_tls(
    app: web.Application,
    host: str,
    port: int,
    certificate: ServingCertificate,
    *,
    name: str,
    reload_interval: float = 2.0,
    on_bound: Callable[[int], None] | None = None,
    limits: ConnectionLimits = LIMITS,
) -> None:
    """``serve`` over TLS once ``certificate`` has a pair (until then nothing listens), while
    following its changes: new handshakes use the newest pair."""
    async with asyncio.TaskGroup() as group:
        group.create_task(certificate.watch(reload_interval), name=f"{name}-cert-reload")
        await certificate.available.wait()
        group.create_task(
            serve(
                app,
                host,
                port,
                name=name,
                ssl_context=certificate.context,
                on_bound=on_bound,
                limits=limits,
            ),
            name=f"{name}-serve",
        )
