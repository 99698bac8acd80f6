"""Run an aiohttp application until cancelled, and always clean it up."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable

import structlog
from aiohttp import web

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
