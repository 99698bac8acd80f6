"""Run an aiohttp application until cancelled, and always clean it up; over TLS with a
certificate that may change (files rotated by cert-manager) or not (made in memory)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Protocol

import structlog
from aiohttp import web

from linkerd_config.kube.tls import load_chain_from_memory

log = structlog.get_logger(__name__)


async def serve(
    app: web.Application,
    host: str,
    port: int,
    *,
    name: str,
    ssl_context: ssl.SSLContext | None = None,
    on_bound: Callable[[int], None] | None = None,
    shutdown_timeout: float = 5.0,
) -> None:
    """Listen on host:port (0 picks a free port, reported to ``on_bound``) until cancelled."""
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, ssl_context=ssl_context, reuse_address=True)
        await site.start()
        bound = int(runner.addresses[0][1]) if runner.addresses else port
        log.info("serving", server=name, host=host, port=bound, tls=ssl_context is not None)
        if on_bound is not None:
            on_bound(bound)
        await asyncio.Event().wait()
    finally:
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
) -> None:
    """``serve`` over TLS once ``certificate`` has a pair (until then nothing listens), while
    following its changes: new handshakes use the newest pair."""
    async with asyncio.TaskGroup() as group:
        group.create_task(certificate.watch(reload_interval), name=f"{name}-cert-reload")
        await certificate.available.wait()
        group.create_task(
            serve(app, host, port, name=name, ssl_context=certificate.context, on_bound=on_bound),
            name=f"{name}-serve",
        )
