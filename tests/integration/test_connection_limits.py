"""Each of ``serve``'s connection limits, one at a time, over real sockets on loopback.

The limits are shrunk (``SMALL``) so that each is seen in a second or two; the controller runs
with ``LIMITS`` (test_idle_connections.py runs it so). Bounds on time are generous: a limit
is shown to act (the connection ends long before it would without it), not timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

from aiohttp import web

from linkerd_config.kube.admission import AdmissionServer
from linkerd_config.kube.certs import write_serving_pair
from linkerd_config.kube.serving import ConnectionLimits, server_context
from tests.support import raw_http
from tests.support.raw_http import Streams, ask, connect, served

SMALL = ConnectionLimits(
    max_connections=4,
    grace=0.2,
    handshake_timeout=0.5,
    header_timeout=0.5,
    idle_timeout=1.0,
    close_timeout=0.5,
    slow_request=1.5,
    body_timeout=0.5,
)
ENDS_WITHIN = 5.0
"""Generous: without the limit under test the connection would stay open for an hour."""


async def _slow(request: web.Request) -> web.Response:
    await asyncio.sleep(float(request.query.get("s", "1")))
    return web.Response(text="done")


async def _fast(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _echo(request: web.Request) -> web.Response:
    return web.Response(body=await request.read())


SHARED = replace(SMALL, max_connections=8, per_source=3, header_timeout=5.0)
"""Room for two sources at their share and two connections more."""


@contextlib.asynccontextmanager
async def server(tls: Path | None = None, limits: ConnectionLimits = SMALL) -> AsyncIterator[int]:
    """``serve`` with ``limits`` on a free port; with ``tls`` (a folder), over TLS."""
    app = web.Application()
    app.router.add_get("/fast", _fast)
    app.router.add_get("/slow", _slow)
    app.router.add_post("/echo", _echo)
    context = None
    if tls is not None:
        write_serving_pair(tls, ["localhost"], ["127.0.0.1"])
        context = server_context()
        context.load_cert_chain(tls / "tls.crt", tls / "tls.key")
    async with served(app, "limits-test", limits, context) as port:
        yield port


async def ended(streams: Streams, within: float = ENDS_WITHIN) -> bool:
    return await raw_http.ended(streams, within)


async def test_a_tls_client_that_never_says_hello_is_cut_at_the_handshake_timeout(
    tmp_path: Path,
) -> None:
    async with server(tls=tmp_path) as port:
        silent = await connect(port)  # TCP only: no ClientHello ever
        assert await ended(silent)
        # A real client still gets through.
        context = ssl.create_default_context(cafile=None)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        assert await ask((reader, writer), "/fast") == b"HTTP/1.1 200 OK ok"
        writer.close()


async def test_headers_sent_a_line_at_a_time_are_cut_at_the_header_timeout() -> None:
    async with server() as port:
        reader, writer = await connect(port)
        writer.write(b"GET /fast HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()

        async def dribble() -> None:
            with contextlib.suppress(ConnectionError):
                while True:
                    writer.write(b"X-Slow: yes\r\n")
                    await writer.drain()
                    await asyncio.sleep(0.1)

        dripping = asyncio.create_task(dribble())
        try:
            assert await ended((reader, writer))
        finally:
            dripping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await dripping
        # Cut for being slow, not for its size: a dozen short lines were sent at most.
        assert time.monotonic() - started < ENDS_WITHIN


async def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() -> None:
    async with server() as port:
        streams = await connect(port)
        assert await ask(streams, "/fast") == b"HTTP/1.1 200 OK ok"
        assert await ended(streams)


async def test_a_request_in_progress_outlives_the_header_and_idle_timeouts() -> None:
    """The deadlines are for waiting on a client, not on a handler."""
    async with server() as port:
        streams = await connect(port)
        wait = SMALL.idle_timeout + SMALL.header_timeout + 0.5
        assert await ask(streams, f"/slow?s={wait}") == b"HTTP/1.1 200 OK done"


async def test_at_the_cap_squatters_make_room_and_a_used_connection_is_kept() -> None:
    async with server() as port:
        user = await connect(port)
        assert await ask(user, "/fast") == b"HTTP/1.1 200 OK ok"
        squatters = [await connect(port) for _ in range(SMALL.max_connections - 1)]
        await asyncio.sleep(SMALL.grace * 2)
        # Twice the cap of newcomers: each closes the oldest squatter, never the user's.
        newcomers = [await connect(port) for _ in range(2 * SMALL.max_connections)]
        for squatter in squatters:
            assert await ended(squatter)
        assert await ask(user, "/fast") == b"HTTP/1.1 200 OK ok"
        # The newest newcomer was let in and is served.
        assert await ask(newcomers[-1], "/fast") == b"HTTP/1.1 200 OK ok"


async def test_a_request_in_progress_is_not_closed_to_make_room_before_it_is_slow() -> None:
    async with server() as port:
        busy = [await connect(port) for _ in range(SMALL.max_connections)]
        answers = [asyncio.create_task(ask(streams, "/slow?s=1")) for streams in busy]
        await asyncio.sleep(0.3)  # every request is in its handler
        # With every connection busy, a newcomer is the one refused.
        refused = await connect(port)
        assert await ended(refused, within=1.0)
        assert await asyncio.gather(*answers) == [b"HTTP/1.1 200 OK done"] * len(busy)
        # Then there is room again.
        await asyncio.sleep(SMALL.grace * 2)
        assert await ask(await connect(port), "/fast") == b"HTTP/1.1 200 OK ok"


async def test_when_every_connection_is_held_busy_the_slowest_request_is_cut() -> None:
    """Clients that keep every connection busy on purpose (a body trickled over seconds, then
    the next request at once) cannot lock a newcomer (the API server) out: the request in
    progress longest, past ``slow_request``, is cut to make room."""
    async with server() as port:
        held = [await connect(port) for _ in range(SMALL.max_connections)]
        hogs = [asyncio.create_task(ask(streams, "/slow?s=30")) for streams in held]
        await asyncio.sleep(SMALL.slow_request + 0.3)
        try:
            newcomer = await connect(port)
            assert await ask(newcomer, "/fast") == b"HTTP/1.1 200 OK ok"
            await asyncio.sleep(0.5)
            cut = [hog for hog in hogs if hog.done()]
            assert len(cut) == 1  # one made room; the others are left alone
            assert isinstance(cut[0].exception(), (asyncio.IncompleteReadError, OSError))
        finally:
            for hog in hogs:
                hog.cancel()
            await asyncio.gather(*hogs, return_exceptions=True)


async def test_a_burst_beyond_the_cap_is_accepted_and_closed_to_the_last_connection() -> None:
    """Connections queued while the server was busy are accepted in one go, and some are
    closed to make room before they were ever started: those must be closed too, not left
    open and forgotten."""
    async with server() as port:
        # Connected without yielding to the loop: the kernel queues them all, the server
        # accepts them in one burst.
        burst = [
            socket.create_connection(("127.0.0.1", port), timeout=5)
            for _ in range(3 * SMALL.max_connections)
        ]
        loop = asyncio.get_running_loop()

        async def ends(sock: socket.socket) -> bool:
            sock.setblocking(False)
            try:
                async with asyncio.timeout(ENDS_WITHIN):
                    return await loop.sock_recv(sock, 1) == b""
            except ConnectionResetError:
                return True
            except TimeoutError:
                return False

        try:
            assert await asyncio.gather(*(ends(s) for s in burst)) == [True] * len(burst)
        finally:
            for sock in burst:
                sock.close()


async def test_a_source_at_its_share_closes_its_own_never_another_sources() -> None:
    """A flood of new connections from one address (a pod) closes only its own: a kubelet's
    or the API server's connection from another, just opened and not yet used (which the
    cap alone would close first, as the oldest squatter), is kept and served."""
    async with server(limits=SHARED) as port:
        kubelet = await connect(port, "127.0.0.1")
        flood = [await connect(port, "127.0.0.2") for _ in range(4 * SHARED.max_connections)]
        await asyncio.sleep(0.2)
        assert await ask(kubelet, "/fast") == b"HTTP/1.1 200 OK ok"
        # The flood's newest are open, its others closed to make room: at most its share.
        assert await ask(flood[-1], "/fast") == b"HTTP/1.1 200 OK ok"
        assert [await ended(f, within=0.5) for f in flood[: -SHARED.per_source]] == [True] * (
            len(flood) - SHARED.per_source
        )


async def test_at_the_cap_room_is_made_among_the_busiest_sources_connections() -> None:
    async with server(limits=SHARED) as port:
        heavy = [await connect(port, "127.0.0.2") for _ in range(SHARED.per_source)]
        others = [await connect(port, f"127.0.0.{n}") for n in (3, 3, 3, 4, 4)]
        await asyncio.sleep(0.2)  # 8 open: the cap
        newcomer = await connect(port, "127.0.0.5")
        assert await ask(newcomer, "/fast") == b"HTTP/1.1 200 OK ok"
        # Two sources hold three each: one of their oldest made room, nobody else's.
        assert await ended(heavy[0], within=1.0) or await ended(others[0], within=1.0)
        for streams in (others[3], others[4]):
            assert await ask(streams, "/fast") == b"HTTP/1.1 200 OK ok"


async def test_a_body_trickled_past_the_body_timeout_is_408_and_holds_no_turn() -> None:
    """A body is read before the request takes its source's turn, within ``body_timeout``:
    trickling clients (as many as the source has turns, and more) hold connections, never the
    turns another request from the same address needs."""
    async with server(limits=replace(SMALL, max_connections=16)) as port:
        tricklers = []
        for _ in range(SMALL.per_source_requests + 1):
            streams = await connect(port)
            streams[1].write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
            tricklers.append(streams)
        await asyncio.sleep(0.1)
        assert await ask(await connect(port), "/fast") == b"HTTP/1.1 200 OK ok"
        reader, _ = tricklers[0]
        async with asyncio.timeout(ENDS_WITHIN):
            status = await reader.readline()
        assert status.startswith(b"HTTP/1.1 408"), status


async def test_a_body_declared_over_the_limit_is_refused_before_it_is_invited() -> None:
    """Issue 61, finding 9: ``Expect: 100-continue`` with a Content-Length of 999,999,999
    bytes was answered ``100 Continue`` (aiohttp's own handler invites any body). The
    admission webhook's routes answer it 413 at once; a body within the limit is invited."""
    admission = AdmissionServer("127.0.0.1", 0, None)  # type: ignore[arg-type]  # app() reads none
    admission.add("/validate", lambda _review: None)  # type: ignore[arg-type,return-value]
    head = (
        "POST /validate HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n"
    )
    async with served(admission.app(), "expect-test", SMALL, None) as port:
        for length, answer in ((999_999_999, b"HTTP/1.1 413"), (10, b"HTTP/1.1 100 Continue")):
            reader, writer = await connect(port)
            writer.write(head.format(length).encode())
            async with asyncio.timeout(ENDS_WITHIN):
                status = await reader.readline()
            assert status.startswith(answer), (length, status)
            writer.close()
