"""The listener's bookkeeping (``serving._Listener``) holds after any interleaving of accepts,
handshakes, requests, evictions, clients leaving and shutdown: what it counts is what is open,
nothing is left behind once the clients are gone, and a client gone takes its work with it.

Over real loopback sockets with shrunken limits; sources told apart by their 127/8 address.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random
import socket
import ssl
import struct
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from aiohttp import web

from linkerd_config.kube import serving
from linkerd_config.kube.certs import write_serving_pair
from linkerd_config.kube.serving import ConnectionLimits, serve, server_context
from tests.support.raw_http import Streams, ask, connect, served

SMALL = ConnectionLimits(
    max_connections=8,
    per_source=4,
    per_source_handshakes=1,
    per_source_requests=1,
    grace=0.1,
    handshake_timeout=0.5,
    header_timeout=0.5,
    idle_timeout=1.0,
    close_timeout=0.5,
    slow_request=0.5,
    body_timeout=0.5,
)


@dataclass
class Running:
    port: int
    listener: serving._Listener
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    """``/held`` answers once set."""
    calls: dict[str, int] = field(default_factory=dict)
    """Handler runs by path."""


CONNECTIONS: weakref.WeakSet[serving._Connection] = weakref.WeakSet()
"""Every ``_Connection`` made (while ``listeners`` is in use) and still referenced."""


@pytest.fixture
def listeners(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[serving._Listener]]:
    """Every ``_Listener`` made while the test runs."""
    made: list[serving._Listener] = []

    class Recorded(serving._Listener):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            made.append(self)

    class Connection(serving._Connection):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            CONNECTIONS.add(self)

    monkeypatch.setattr(serving, "_Listener", Recorded)
    monkeypatch.setattr(serving, "_Connection", Connection)
    CONNECTIONS.clear()
    yield made


@contextlib.asynccontextmanager
async def running(
    listeners: list[serving._Listener],
    limits: ConnectionLimits = SMALL,
    *,
    ssl_context: ssl.SSLContext | None = None,
) -> AsyncIterator[Running]:
    app = web.Application(client_max_size=64 * 1024)
    calls: dict[str, int] = {}
    gate = asyncio.Event()

    def counted(path: str) -> None:
        calls[path] = calls.get(path, 0) + 1

    async def fast(_request: web.Request) -> web.Response:
        counted("/fast")
        return web.Response(text="ok")

    async def held(_request: web.Request) -> web.Response:
        counted("/held")
        await gate.wait()
        return web.Response(text="held")

    async def echo(request: web.Request) -> web.Response:
        counted("/echo")
        return web.Response(body=await request.read())

    async def slow(request: web.Request) -> web.Response:
        counted("/slow")
        await asyncio.sleep(float(request.query.get("s", "1")))
        return web.Response(text="done")

    app.router.add_get("/fast", fast)
    app.router.add_get("/held", held)
    app.router.add_post("/echo", echo)
    app.router.add_get("/slow", slow)
    async with served(app, "bookkeeping", limits, ssl_context) as port:
        try:
            yield Running(port, listeners[-1], gate, calls)
        finally:
            gate.set()


def reset(streams: Streams) -> None:
    """Leave at once, with a reset (no FIN: the server learns of it only by reading)."""
    _, writer = streams
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def check(listener: serving._Listener) -> None:
    """What the listener counts agrees with itself and with its limits."""
    limits = listener.limits
    by_source = [c for own in listener.sources.values() for c in own]
    assert len(listener.open) == len(by_source)
    assert set(listener.open) == set(by_source)
    assert all(listener.sources.values()), "an empty per-source entry"
    for source, own in listener.sources.items():
        assert len(own) <= limits.per_source
        assert all(c.source == source for c in own)
    assert len(listener.open) <= limits.max_connections
    assert {id(c) for c in listener._by_protocol.values()} == {id(c) for c in listener.open}
    for turns in (listener._handshake_turns, listener._request_turns):
        assert set(turns._users) == set(turns._semaphores)
        assert all(n > 0 for n in turns._users.values())
    assert len(listener._pacing._buckets) <= listener._pacing.remembered


def check_empty(listener: serving._Listener) -> None:
    """Nothing kept once every client is gone and its work done."""
    check(listener)
    assert not listener.open
    assert not listener.sources
    assert not listener._by_protocol
    assert not listener._handshakes
    assert not listener._handshake_turns._users
    assert not listener._request_turns._users


async def until(condition: Callable[[], object], within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while True:
            if condition():
                return
            await asyncio.sleep(0.01)


async def settled(listener: serving._Listener, within: float = 5.0) -> None:
    """Wait for the listener to have nothing open (the clients gone), then check it."""
    await until(
        lambda: not (listener.open or listener._handshakes or listener._request_turns._users),
        within,
    )
    check_empty(listener)
    # And nothing holds on to a connection gone (a deadline armed on it, say, keeping its
    # transport and TLS buffers for the idle timeout).
    gc.collect()
    kept = [c for c in CONNECTIONS if c.listener is listener]
    assert not kept, [(c.lost, c.requests, c._deadline) for c in kept]


async def test_requests_of_clients_gone_are_not_kept_waiting_for_their_turn(
    listeners: list[serving._Listener],
) -> None:
    """A client that sends a request and leaves while its source's turns are taken takes its
    request with it: a source cannot queue unbounded work (and bodies, up to client_max_size
    each) behind its turns by connecting, asking and resetting in a loop, the connections
    never counting against its share."""
    async with running(listeners) as server:
        holder = await connect(server.port)
        holder[1].write(b"GET /held HTTP/1.1\r\nHost: x\r\n\r\n")
        await until(lambda: server.calls.get("/held"))
        body = b"x" * 32 * 1024
        for _ in range(40):
            streams = await connect(server.port)
            streams[1].write(
                b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body
            )
            await streams[1].drain()
            await asyncio.sleep(0.01)  # read by the server, queued for the turn
            reset(streams)
        await asyncio.sleep(0.2)
        check(server.listener)
        waiting = server.listener._request_turns._users.get("127.0.0.1", 0)
        assert waiting <= SMALL.per_source, f"{waiting} requests waiting for turns"
        server.gate.set()
        async with asyncio.timeout(5):
            await holder[0].readuntil(b"held")
        await asyncio.sleep(0.2)
        assert server.calls.get("/echo", 0) == 0, "answered clients that had left"
        holder[1].close()
        await settled(server.listener)


async def test_requests_cut_while_paced_give_their_time_back(
    listeners: list[serving._Listener],
) -> None:
    """A request waiting for its pace has taken a token ahead of time; cut (its client gone,
    or its connection closed to make room), it gives it back. Else a source asking and
    leaving in a loop runs its bucket into debt without bound: 100 requests cut over 2 s
    left the next request from that address waiting 18 s."""
    paced = replace(SMALL, per_source_requests=2, per_source_rate=5.0, per_source_burst=2)
    async with running(listeners, paced) as server:
        # Another address asks too: pacing applies only while someone else needs the server.
        other = await connect(server.port, "127.0.0.2")
        assert await ask(other, "/fast") == b"HTTP/1.1 200 OK ok"
        other[1].close()
        for _ in range(50):
            gone = [await connect(server.port) for _ in range(paced.per_source_requests)]
            for _, writer in gone:
                writer.write(b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
            await asyncio.sleep(0.03)  # each read, in its turn, paced
            for streams in gone:
                reset(streams)
        await asyncio.sleep(0.1)
        check(server.listener)
        # At most the burst and the turns' reservations ahead: well under a second at 5/s.
        streams = await connect(server.port)
        assert await ask(streams, "/fast", within=2.0) == b"HTTP/1.1 200 OK ok"
        streams[1].close()
        await settled(server.listener)


FUZZ = ConnectionLimits(
    max_connections=8,
    per_source=3,
    per_source_handshakes=1,
    per_source_requests=1,
    per_source_rate=40.0,
    per_source_burst=3,
    grace=0.05,
    handshake_timeout=0.4,
    header_timeout=0.4,
    idle_timeout=0.6,
    close_timeout=0.2,
    slow_request=0.3,
    body_timeout=0.3,
)
SOURCES = [f"127.0.0.{n}" for n in range(1, 5)]


def tls_pair(folder: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context on a fresh pair, and a client context that accepts it."""
    ca = write_serving_pair(folder, ["localhost"], ["127.0.0.1"])
    server_side = server_context()
    server_side.load_cert_chain(folder / "tls.crt", folder / "tls.key")
    client_side = ssl.create_default_context(cadata=ca.decode())
    return server_side, client_side


async def client(rng: random.Random, port: int, tls: ssl.SSLContext) -> None:
    """One client doing one of the things clients do, well or badly, then leaving (closing,
    resetting, or just stopping: the server's deadlines end what is left)."""
    source = rng.choice(SOURCES)
    kind = rng.choice(["silent", "garbage", "hello-cut", "requests", "requests", "trickle"])
    try:
        async with asyncio.timeout(3):
            if kind in ("silent", "garbage", "hello-cut"):
                streams = await connect(port, source)
                if kind == "garbage":
                    streams[1].write(b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")  # not TLS
                elif kind == "hello-cut":
                    streams[1].write(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
            else:
                streams = await asyncio.open_connection(
                    "127.0.0.1", port, ssl=tls, local_addr=(source, 0)
                )
                writer = streams[1]
                for _ in range(rng.randint(0, 3)):
                    if kind == "trickle":  # past body_timeout (408), or not
                        writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\n")
                        for _ in range(8):
                            writer.write(b"x")
                            await asyncio.sleep(rng.choice([0.0, 0.0, 0.1]))
                    else:
                        path = rng.choice(["/fast", "/fast", "/slow?s=0.1", "/slow?s=0.5"])
                        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                    await writer.drain()
                    if rng.random() < 0.7:
                        await streams[0].readuntil(b"\r\n\r\n")
            await asyncio.sleep(rng.choice([0.0, 0.0, 0.1, 0.5, 1.0]))
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return  # closed on us: one of the limits at work
    ending = rng.choice(["close", "reset", "leave"])
    if ending == "reset" and not streams[1].is_closing():
        reset(streams)
    elif ending == "close":
        streams[1].close()
    # "leave": dropped without a word; the server's deadlines close it


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_the_bookkeeping_holds_whatever_the_clients_do(
    listeners: list[serving._Listener], tmp_path: Path, seed: int
) -> None:
    """Clients from a few addresses connect, handshake or not, ask, trickle, reset and leave,
    many at once over the shrunken limits (squatters, idle and slow connections closed to
    make room, handshakes and requests waiting for turns, paced): at every moment what the
    listener counts agrees and stays within the limits, and once they are gone nothing is
    left."""
    rng = random.Random(seed)
    server_side, client_side = tls_pair(tmp_path)
    violations: list[str] = []
    async with running(listeners, FUZZ, ssl_context=server_side) as server:

        async def watch() -> None:
            while True:
                try:
                    check(server.listener)
                except AssertionError as exc:
                    violations.append(str(exc))
                await asyncio.sleep(0.005)

        watching = asyncio.create_task(watch())
        clients: set[asyncio.Task[None]] = set()
        try:
            for _ in range(150):
                clients.add(asyncio.create_task(client(rng, server.port, client_side)))
                await asyncio.sleep(rng.choice([0.0, 0.005, 0.02]))
            await asyncio.gather(*clients)
            await asyncio.sleep(0.1)
            # Whatever the clients left open, the server's deadlines close.
            await settled(server.listener, within=FUZZ.idle_timeout + FUZZ.header_timeout + 3)
        finally:
            watching.cancel()
            for task in clients:
                task.cancel()
            await asyncio.gather(watching, *clients, return_exceptions=True)
        assert server.listener.evicted, "the limits were never reached: a weak test"
    assert not violations, violations[:3]


async def test_shutdown_amid_the_clients_returns_promptly_and_leaves_nothing(
    listeners: list[serving._Listener], tmp_path: Path
) -> None:
    """Cancelled while handshakes wait for their turn, requests for theirs or for their
    pace, and connections are being closed to make room: serve() returns within its
    shutdown deadline, no task of its is left, and the listener holds nothing."""
    rng = random.Random(7)
    server_side, client_side = tls_pair(tmp_path)
    before = asyncio.all_tasks()
    clients: set[asyncio.Task[None]] = set()
    kept: list[Streams] = []
    limits = replace(FUZZ, max_connections=16, per_source=4, handshake_timeout=2, slow_request=2)
    try:
        async with running(listeners, limits, ssl_context=server_side) as server:
            # Handshakes waiting for their turn (behind a silent one) ...
            kept += [await connect(server.port, "127.0.0.8") for _ in range(3)]
            # ... and requests waiting for theirs (behind a slow one) ...
            for _ in range(3):
                streams = await asyncio.open_connection(
                    "127.0.0.1", server.port, ssl=client_side, local_addr=("127.0.0.9", 0)
                )
                streams[1].write(b"GET /slow?s=0.5 HTTP/1.1\r\nHost: x\r\n\r\n")
                kept.append(streams)
            listener = server.listener
            await until(
                lambda: (
                    listener._handshake_turns._users["127.0.0.8"] == 3
                    and listener._request_turns._users["127.0.0.9"] == 3
                )
            )
            # ... amid clients doing all sorts of things.
            for _ in range(80):
                clients.add(asyncio.create_task(client(rng, server.port, client_side)))
                await asyncio.sleep(rng.choice([0.0, 0.005]))
            stopping = time.monotonic()
        stopped = time.monotonic() - stopping
    finally:
        for streams in kept:
            streams[1].close()
        for task in clients:
            task.cancel()
        await asyncio.gather(*clients, return_exceptions=True)
    assert stopped < 5.0  # serve's shutdown_timeout: no request here lasts half a second
    await until(lambda: not server.listener.open, within=FUZZ.close_timeout + 2)
    check_empty(server.listener)
    left = asyncio.all_tasks() - before - {asyncio.current_task()}
    assert not left, left


def test_pacing_remembers_a_bounded_number_of_sources() -> None:
    """5,000 addresses (a pod with many, or many pods) keep 4,096 buckets at most, the most
    recently used: the one just used is there, the first forgotten (it starts afresh)."""
    pacing = serving._Pacing(rate=50.0, burst=100, window=60.0)
    for n in range(5000):
        assert pacing.delay(f"10.{n // 65536}.{n // 256 % 256}.{n % 256}", now=float(n)) == 0
    assert len(pacing._buckets) == pacing.remembered == 4096
    assert len(pacing._seen) == pacing.remembered
    assert "10.0.19.135" in pacing._buckets  # the 5,000th
    assert "10.0.0.0" not in pacing._buckets


@pytest.mark.parametrize(
    ("address", "source"),
    [
        (("127.0.0.1", 5000), "127.0.0.1"),
        (("::1", 5000, 0, 0), "::1"),
        (("fe80::1", 5000, 0, 2), "fe80::1"),
        ("", ""),  # a Unix socket's unnamed peer
        (b"\x00abstract", ""),
        (None, ""),
        ((), ""),
    ],
)
def test_a_source_is_the_peer_address_or_empty(address: object, source: str) -> None:
    assert serving._source(address) == source


async def test_ipv6_loopback_is_a_source_like_any_other(
    listeners: list[serving._Listener],
) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    app = web.Application()
    app.router.add_get("/fast", _ok)
    bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    limits = replace(SMALL, per_source=2)
    try:
        task = asyncio.create_task(
            serve(app, "::1", 0, name="v6", on_bound=bound.set_result, limits=limits)
        )
        port = await asyncio.wait_for(bound, 10)
    except OSError as exc:  # no ::1 here (a container without IPv6)
        pytest.skip(str(exc))
    listener = listeners[-1]
    try:
        first = await asyncio.open_connection("::1", port)
        assert await ask(first, "/fast") == b"HTTP/1.1 200 OK ok"
        others = [await asyncio.open_connection("::1", port) for _ in range(3)]
        await until(lambda: listener.evicted >= 1)
        check(listener)
        assert set(listener.sources) == {"::1"}
        assert len(listener.sources["::1"]) == limits.per_source
        for streams in [first, *others]:
            streams[1].close()
        await settled(listener)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _ok(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


def test_a_source_alone_is_never_paced_and_is_when_another_asks() -> None:
    """Pacing is for sharing: the API server alone (converting for every client of an old
    version, or everything on 127.0.0.1 in a local run) asks as fast as it likes; once another
    source has asked within the window, each is held to its rate past its burst."""
    pacing = serving._Pacing(rate=10.0, burst=5, window=60.0)
    alone = [pacing.delay("10.0.0.1", now=0.001 * n) for n in range(1000)]
    assert alone == [0.0] * 1000
    assert pacing.delay("10.0.0.2", now=1.0) == 0.0  # its burst
    shared = [pacing.delay("10.0.0.1", now=1.0) for _ in range(10)]
    assert shared[:5] == [0.0] * 5 and shared[-1] == pytest.approx(0.5)
    # The other gone quiet past the window: alone again.
    assert pacing.delay("10.0.0.1", now=62.0) == 0.0
