"""The listener's bookkeeping (``serving._Listener``) holds after any interleaving of accepts,
handshakes, requests, evictions, clients leaving and shutdown: what it counts is what is open,
nothing is left behind once the clients are gone, and a client gone takes its work with it.

Over real loopback sockets with shrunken limits; sources told apart by their 127/8 address.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import struct
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field, replace

import pytest
from aiohttp import web

from linkerd_config.kube import serving
from linkerd_config.kube.serving import ConnectionLimits, serve

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

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


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
    listeners: list[serving._Listener], limits: ConnectionLimits = SMALL
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

    app.router.add_get("/fast", fast)
    app.router.add_get("/held", held)
    app.router.add_post("/echo", echo)
    bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve(app, "127.0.0.1", 0, name="bookkeeping", on_bound=bound.set_result, limits=limits)
    )
    try:
        port = await asyncio.wait_for(bound, 10)
        yield Running(port, listeners[-1], gate, calls)
    finally:
        gate.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def connect(port: int, source: str = "127.0.0.1") -> Streams:
    return await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)), 5
    )


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


async def ask(streams: Streams, path: str, within: float = 5.0) -> bytes:
    """One keep-alive GET on ``streams``; its status line and body."""
    reader, writer = streams
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    async with asyncio.timeout(within):
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        return head.split(b"\r\n")[0] + b" " + await reader.readexactly(length)


async def test_requests_cut_while_paced_give_their_time_back(
    listeners: list[serving._Listener],
) -> None:
    """A request waiting for its pace has taken a token ahead of time; cut (its client gone,
    or its connection closed to make room), it gives it back. Else a source asking and
    leaving in a loop runs its bucket into debt without bound: 100 requests cut over 2 s
    left the next request from that address waiting 18 s."""
    paced = replace(SMALL, per_source_requests=2, per_source_rate=5.0, per_source_burst=2)
    async with running(listeners, paced) as server:
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
