"""HTTP/1.1 spoken by hand over a stream, for tests of what a server does with connections:
from a chosen loopback address (any 127/8 address is loopback's, so each is a source of its
own), one keep-alive GET at a time, and whether the server ends the connection; and the
server under test, ``served`` on a free port."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator

from aiohttp import web

from linkerd_config.kube.serving import ConnectionLimits, serve

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def connect(port: int, source: str = "127.0.0.1") -> Streams:
    """A connection to 127.0.0.1:``port`` from ``source``."""
    return await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)), 5
    )


async def ask(streams: Streams, path: str, within: float = 10.0) -> bytes:
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


async def ended(streams: Streams, within: float) -> bool:
    """Whether the server ends the connection (EOF or reset) within ``within`` seconds."""
    reader, _ = streams
    try:
        async with asyncio.timeout(within):
            return await reader.read(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


@contextlib.asynccontextmanager
async def served(
    app: web.Application,
    name: str,
    limits: ConnectionLimits,
    ssl_context: ssl.SSLContext | None = None,
) -> AsyncIterator[int]:
    """``kube.serving.serve`` of ``app`` on a free loopback port, over TLS with
    ``ssl_context``, while the block runs: the port."""
    bound: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(
        serve(
            app,
            "127.0.0.1",
            0,
            name=name,
            ssl_context=ssl_context,
            on_bound=bound.set_result,
            limits=limits,
        )
    )
    try:
        yield await asyncio.wait_for(bound, 10)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
