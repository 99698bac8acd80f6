"""A plain-HTTP proxy to the API server (as its admin) that can stall a protobuf watch in the
middle of a frame, as a broken server or middlebox might: it passes the frame's 4-byte length
and half of the frame, then nothing more, holding the connection open. It can also cut a
LIST's answer short: part of its body, then the connection dropped. Everything else passes
through, streams included (``test_protobuf_against_api_server``'s refusing proxy does the
same for refusals)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from linkerd_config.kube.kubeconfig import ClusterAccess

PROTOBUF_WATCH = "application/vnd.kubernetes.protobuf;stream=watch"


class StallingProxy:
    """Proxies to ``access``'s API server; ``stall`` arms it for the watches whose path holds
    ``path_part``."""

    def __init__(self, access: ClusterAccess, path_part: str) -> None:
        self.upstream = access
        self.path_part = path_part
        self.watches = 0
        """Protobuf watch responses of ``path_part`` begun so far, streaming lists aside."""
        self.cut: list[float] = []
        """When (monotonic) each frame was cut."""
        self._left: int | None = 0
        # Invariant: how many more frames to cut (None: every one, until ``release``).
        self.lists = 0
        """LIST answers of ``path_part`` begun so far."""
        self.lists_cut = 0
        self._lists_left = 0
        self._list_cut_after = 0
        self._released = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    def stall(self, times: int | None = 1) -> None:
        """Cut the next ``times`` frames of the watches of ``path_part`` (None: every one until
        ``release``), one per response, each response then held open and silent."""
        self._left = times
        self._released.clear()

    def cut_lists(self, times: int, after: int) -> None:
        """Cut the next ``times`` LIST answers of ``path_part``: ``after`` bytes of the body
        pass (at least one chunk), then the connection is dropped mid-body."""
        self._lists_left, self._list_cut_after = times, after

    def release(self) -> None:
        """Stall no more; the held responses end (their clients have long given up)."""
        self._left = 0
        self._released.set()

    @property
    def access(self) -> ClusterAccess:
        """How a client reaches the API server through this proxy."""

        async def no_token() -> str | None:
            return None

        return ClusterAccess(f"http://127.0.0.1:{self.port}", False, no_token, "stalling-proxy")

    def kubeconfig(self) -> dict[str, object]:
        """A kubeconfig for ``access``: the proxy's address, no credentials."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "anyone", "user": {}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "anyone"}}],
            "current-context": "proxy",
        }

    async def start(self) -> None:
        ssl = self.upstream.ssl_context
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ssl), timeout=aiohttp.ClientTimeout(total=None)
        )
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # A handler ends with its client (a streaming list it has read, a stalled watch it
        # gave up on), not at the upstream's next byte or the runner's 60 s shutdown wait.
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=5.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def close(self) -> None:
        self._released.set()
        if self._session is not None:  # first: a handler still reading upstream ends now
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def _should_cut(self) -> bool:
        if self._left is None:
            return True
        if self._left > 0:
            self._left -= 1
            return True
        return False

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        headers = {
            k: v for k, v in request.headers.items() if k.lower() in ("accept", "content-type")
        }
        token = await self.upstream.bearer()
        if token:
            headers["Authorization"] = token
        async with self._session.request(
            request.method,
            self.upstream.server + request.path_qs,
            data=await request.read() if request.can_read_body else None,
            headers=headers,
        ) as upstream:
            response = web.StreamResponse(status=upstream.status)
            response.headers["Content-Type"] = upstream.headers.get("Content-Type", "")
            await response.prepare(request)
            watched = (
                request.query.get("watch") in ("true", "1")
                and self.path_part in request.path
                and upstream.headers.get("Content-Type", "").startswith(PROTOBUF_WATCH)
            )
            if watched and request.query.get("sendInitialEvents") != "true":
                self.watches += 1
            listed = (
                request.method == "GET"
                and self.path_part in request.path
                and request.query.get("watch") not in ("true", "1")
            )
            if listed:
                self.lists += 1
            with contextlib.suppress(ConnectionResetError, aiohttp.ClientError):
                if watched:
                    await self._frames(request, upstream, response)
                elif listed and self._lists_left > 0:
                    self._lists_left -= 1
                    await self._cut_short(request, upstream, response)
                    return response
                else:
                    async for chunk in upstream.content.iter_any():
                        await response.write(chunk)
                await response.write_eof()
            return response

    async def _cut_short(
        self, request: web.Request, upstream: aiohttp.ClientResponse, response: web.StreamResponse
    ) -> None:
        """Part of the body, then the connection dropped: no end of the chunked body."""
        sent = 0
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
            sent += len(chunk)
            if sent >= self._list_cut_after:
                break
        self.lists_cut += 1
        if request.transport is not None:
            request.transport.abort()

    async def _frames(
        self, request: web.Request, upstream: aiohttp.ClientResponse, response: web.StreamResponse
    ) -> None:
        """Whole frames through, until one is to be cut: its length and half of it, then
        nothing until released. A response whose client has gone (a streaming list, once it
        has what it asked for) ends, and cuts nothing."""
        buf = bytearray()
        async for chunk in upstream.content.iter_any():
            buf += chunk
            while len(buf) >= 4 and len(buf) >= 4 + (size := int.from_bytes(buf[:4], "big")):
                if request.transport is None or request.transport.is_closing():
                    return
                if self._should_cut():
                    await response.write(bytes(buf[: 4 + size // 2]))
                    self.cut.append(time.monotonic())
                    await self._released.wait()
                    return
                await response.write(bytes(buf[: 4 + size]))
                del buf[: 4 + size]


@contextlib.asynccontextmanager
async def stalling_proxy(access: ClusterAccess, path_part: str) -> AsyncIterator[StallingProxy]:
    proxy = StallingProxy(access, path_part)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()
