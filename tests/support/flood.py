"""A hostile client that floods servers with requests from one source, run as its own process
(on the host, or in a pod on the real node with the controller's image: standard library only).

    python flood.py --seconds 60 \
        https://10.0.0.7:9443/validate-...=@review.json http://10.0.0.7:8081/readyz

For each target, ``--keep-alive`` workers send the request again and again on one connection
(opened again whenever the server closes it) and ``--churn`` workers open a new connection
(a TLS handshake, for https) for every request. ``=@file`` makes the request a POST of that
file's bytes (JSON), else a GET. Certificates are not checked: a flood need not trust anyone.

At the end, one JSON line per target on stdout: requests answered (by status code),
connections opened, connections the server refused or closed, other errors.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import ssl
import sys
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

MAX_WORKERS = 2000


@dataclass
class Target:
    url: str
    host: str
    port: int
    path: str
    tls: bool
    body: bytes | None
    answered: collections.Counter[int] = field(default_factory=collections.Counter)
    opened: int = 0
    closed_by_server: int = 0
    refused: int = 0
    errors: int = 0

    def request(self, keep_alive: bool) -> bytes:
        lines = [
            f"{'POST' if self.body is not None else 'GET'} {self.path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            "User-Agent: flood",
            f"Connection: {'keep-alive' if keep_alive else 'close'}",
        ]
        if self.body is not None:
            lines += ["Content-Type: application/json", f"Content-Length: {len(self.body)}"]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + (self.body or b"")

    def report(self) -> dict[str, object]:
        return {
            "target": self.url,
            "answered": sum(self.answered.values()),
            "status": {str(k): v for k, v in sorted(self.answered.items())},
            "opened": self.opened,
            "closed_by_server": self.closed_by_server,
            "refused": self.refused,
            "errors": self.errors,
        }


def parse_target(spec: str) -> Target:
    url, _, body_file = spec.partition("=@")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or not parts.port:
        raise SystemExit(f"flood: {spec!r}: expected http(s)://host:port/path[=@file]")
    body = open(body_file, "rb").read() if body_file else None  # noqa: SIM115
    return Target(url, parts.hostname, parts.port, parts.path or "/", parts.scheme == "https", body)


def client_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def answer(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """One response: its status code and whether the server keeps the connection open."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionResetError("closed before an answer")
    status = int(status_line.split()[1])
    length = 0
    keep = True
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value.strip())
        elif name == "connection" and value.strip().lower() == "close":
            keep = False
    if length:
        await reader.readexactly(length)
    return status, keep


async def worker(
    target: Target, keep_alive: bool, until: float, context: ssl.SSLContext, source: str | None
) -> None:
    request = target.request(keep_alive)
    local = (source, 0) if source else None
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    target.host, target.port, ssl=context if target.tls else None,
                    local_addr=local,
                ),
                timeout=10,
            )  # fmt: skip
        except (ConnectionRefusedError, ConnectionResetError, ssl.SSLError):
            target.refused += 1
            await asyncio.sleep(0.01)
            continue
        except (OSError, TimeoutError):
            target.errors += 1
            await asyncio.sleep(0.01)
            continue
        target.opened += 1
        try:
            while time.monotonic() < until:
                writer.write(request)
                status, keep = await asyncio.wait_for(answer(reader), timeout=10)
                target.answered[status] += 1
                if not (keep_alive and keep):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            target.closed_by_server += 1
        except (OSError, TimeoutError, ValueError, IndexError):
            target.errors += 1
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), timeout=1)


async def main(args: argparse.Namespace) -> None:
    targets = [parse_target(spec) for spec in args.targets]
    workers = len(targets) * (args.keep_alive + args.churn)
    if workers > MAX_WORKERS:
        raise SystemExit(f"flood: {workers} workers, at most {MAX_WORKERS}")
    context = client_context()
    until = time.monotonic() + args.seconds
    print(json.dumps({"flooding": [t.url for t in targets]}), flush=True)
    async with asyncio.TaskGroup() as group:
        for target in targets:
            for _ in range(args.keep_alive):
                group.create_task(worker(target, True, until, context, args.source))
            for _ in range(args.churn):
                group.create_task(worker(target, False, until, context, args.source))
    for target in targets:
        print(json.dumps(target.report()), flush=True)


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="flood", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--keep-alive", type=int, default=64, help="workers per target")
    parser.add_argument("--churn", type=int, default=16, help="workers per target")
    parser.add_argument("--source", help="the address to connect from (e.g. 127.0.0.2)")
    parser.add_argument("targets", nargs="+", help="http(s)://host:port/path[=@body.json]")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(arguments(sys.argv[1:])))
