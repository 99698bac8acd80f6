"""A hostile client, run as its own process: it opens many connections to loopback ports
(TLS handshake completed where asked) and then sends nothing at all, for a bounded time.

    python -m tests.support.idle_clients --hold 60 127.0.0.1:9443:ca.pem=1000 127.0.0.1:8081=1000

Each target is ``host:port[:ca-file]=count``; with a CA file the connections are TLS. With
``--reconnect`` a connection the server closes is opened again (a squatter that insists) until
``stdin`` says ``stop`` or the hold ends. It never closes a connection itself before the end,
so a connection that ends was closed by the server.

Every second, and once at the end, one JSON line per target on stdout: connections attempted,
established, failed (refused, reset, handshake refused or not finished in 10 s), closed by the
server, open now, most open at once, and how long the longest-lived of those the server
closed had been open. A ``ready`` line once the first round is up.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import ssl
import stat
import sys
import time
from dataclasses import dataclass

MAX_CONNECTIONS = 5000
MAX_HOLD = 300.0
LOOPBACK = {"127.0.0.1", "::1", "localhost"}


@dataclass
class Target:
    host: str
    port: int
    context: ssl.SSLContext | None
    count: int
    attempted: int = 0
    established: int = 0
    failed: int = 0
    closed_by_server: int = 0
    open: int = 0
    most_open: int = 0
    longest: float = 0.0
    """Seconds the longest-lived connection the server closed had been open."""

    @staticmethod
    def parse(text: str) -> Target:
        where, _, count = text.rpartition("=")
        parts = where.split(":")
        host, port = parts[0], int(parts[1])
        if host not in LOOPBACK:
            raise SystemExit(f"loopback only, not {host}")
        context = None
        if len(parts) > 2:
            context = ssl.create_default_context(cafile=parts[2])
            context.check_hostname = False
        number = int(count)
        if not 0 < number <= MAX_CONNECTIONS:
            raise SystemExit(f"between 1 and {MAX_CONNECTIONS} connections, not {number}")
        return Target(host, port, context, number)

    def report(self, event: str) -> str:
        return json.dumps(
            {
                "event": event,
                "target": f"{self.host}:{self.port}",
                "tls": self.context is not None,
                "attempted": self.attempted,
                "established": self.established,
                "failed": self.failed,
                "closed_by_server": self.closed_by_server,
                "open": self.open,
                "most_open": self.most_open,
                "longest": round(self.longest, 3),
            }
        )


async def squat(target: Target, gate: asyncio.Semaphore, again: asyncio.Event) -> None:
    """One connection slot: connect, read until the server closes, maybe connect again."""
    while True:
        async with gate:
            target.attempted += 1
            try:
                async with asyncio.timeout(10):
                    reader, writer = await asyncio.open_connection(
                        target.host, target.port, ssl=target.context
                    )
            except (OSError, TimeoutError):
                target.failed += 1
                reader = None
        if reader is not None:
            target.established += 1
            target.open += 1
            target.most_open = max(target.most_open, target.open)
            opened = time.monotonic()
            try:
                with contextlib.suppress(OSError):
                    await reader.read(1)  # b"" (or a reset) only when the server closes it
                target.closed_by_server += 1
                target.longest = max(target.longest, time.monotonic() - opened)
            finally:
                target.open -= 1
                writer.transport.abort()
        if not again.is_set():
            return
        await asyncio.sleep(0.05)


async def main(args: argparse.Namespace) -> None:
    targets = [Target.parse(t) for t in args.targets]
    again = asyncio.Event()
    if args.reconnect:
        again.set()
    gate = asyncio.Semaphore(64)  # connections being opened at once, per process
    loop = asyncio.get_running_loop()

    async def stdin_stop() -> None:
        if not stat.S_ISFIFO(os.fstat(sys.stdin.fileno()).st_mode):
            return  # no pipe to be told on
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := await reader.readline():
            if line.strip() == b"stop":
                again.clear()

    async def reports(started: float) -> None:
        ready = False
        while True:
            await asyncio.sleep(1)
            for target in targets:
                print(target.report("status"), flush=True)
            if not ready and all(t.attempted >= t.count for t in targets):
                ready = True
                print(json.dumps({"event": "ready", "after": time.monotonic() - started}))

    started = time.monotonic()
    async with asyncio.TaskGroup() as group:
        helpers = [group.create_task(reports(started)), group.create_task(stdin_stop())]
        slots = [
            group.create_task(squat(target, gate, again))
            for target in targets
            for _ in range(target.count)
        ]
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(args.hold, MAX_HOLD)):
                await asyncio.gather(*slots)
        for task in slots + helpers:
            task.cancel()
    for target in targets:
        print(target.report("end"), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="+", help="host:port[:ca-file]=count")
    parser.add_argument("--hold", type=float, default=60.0, help="seconds, at most 300")
    parser.add_argument("--reconnect", action="store_true")
    asyncio.run(main(parser.parse_args()))
