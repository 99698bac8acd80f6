"""A TCP proxy on loopback whose existing connections can be frozen, as a dead NAT entry or a
hung load balancer freezes them: the connections stay open (the proxy's kernel even ACKs what
arrives), no byte goes through any more, and new connections work normally (or, frozen with
``new_too``, are accepted and never answered)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field


@dataclass
class _Connection:
    frozen: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)


class FreezableProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._connections: list[_Connection] = []
        self._never = asyncio.Event()  # never set: what a frozen pump waits on
        self._freeze_new = False

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def freeze(self, *, new_too: bool = False) -> int:
        """Freeze every connection open now; returns how many. With ``new_too``, connections
        opened from now on are accepted and never answered (the whole path is down)."""
        self._freeze_new = self._freeze_new or new_too
        for conn in self._connections:
            conn.frozen = True
        return len(self._connections)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in self._connections:
            for task in conn.tasks:
                task.cancel()
            for writer in conn.writers:
                writer.close()
        tasks = [t for c in self._connections for t in c.tasks]
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        conn = _Connection(frozen=self._freeze_new, writers=[writer, up_writer])
        self._connections.append(conn)
        conn.tasks = [
            asyncio.create_task(self._pump(conn, reader, up_writer), name="proxy-up"),
            asyncio.create_task(self._pump(conn, up_reader, writer), name="proxy-down"),
        ]

    async def _pump(
        self, conn: _Connection, source: asyncio.StreamReader, sink: asyncio.StreamWriter
    ) -> None:
        try:
            while True:
                if conn.frozen:
                    await self._never.wait()
                data = await source.read(65536)
                if not data or conn.frozen:  # what arrives after the freeze is lost
                    if not data:
                        break
                    continue
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if not conn.frozen:
                with contextlib.suppress(Exception):
                    sink.close()
