"""A protobuf watch stalled in the middle of a frame (issue 39, finding 6): between the client
and the real API server, a proxy passes a watch event's frame length and half the frame, then
nothing, the connection held open (``tests/support/stalling_proxy.py``).

* An informer notices within the record deadline (10 s for an event of a few KiB), says its
  cache is not current meanwhile, restarts its watch and gets the event it was cut off from.
* The controller's ``/readyz`` fails within seconds of the stall while its ConfigMap watch
  keeps being cut (the heartbeat's path stays healthy: only that watch is broken), and is
  200 again once the path is.

Before the fix the informer noticed only at its inactivity deadline (150 s), ``/readyz`` 200
throughout.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import aiohttp
import pytest

from devcluster.cluster import LocalControlPlane, free_port
from linkerd_config.app import build, running
from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.informer import Informer
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.resource import CONFIGMAPS, NAMESPACES
from tests.support import scenario
from tests.support.stalling_proxy import stalling_proxy
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BOUND = 30.0
"""Well under the old 150 s: the record deadline (10 s) plus a backoff and a resumed watch."""


async def readyz(url: str) -> int:
    try:
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            return resp.status
    except aiohttp.ClientError:
        return 0


async def test_an_informer_restarts_a_watch_stalled_mid_frame_within_seconds(
    private_control_plane: LocalControlPlane,
) -> None:
    access = await load_access(str(private_control_plane.kubeconfig))
    async with KubeClient(access, user_agent="stalled-watch-test") as kube:
        ns = f"stall-{uuid.uuid4().hex[:6]}"
        await kube.request("POST", NAMESPACES.path(), body={"metadata": {"name": ns}})
        async with (
            stalling_proxy(access, f"/namespaces/{ns}/configmaps") as proxy,
            KubeClient(proxy.access, user_agent="through-the-proxy") as client,
        ):
            informer = Informer(client, CONFIGMAPS, namespace=ns, name="stalled")
            task = asyncio.create_task(informer.run())
            try:
                await informer.wait_synced(30)
                assert client.protobuf
                await eventually(
                    lambda: asyncio.sleep(0, result=proxy.watches > 0), what="watching"
                )
                watches = proxy.watches
                proxy.stall(times=1)
                cut_at = time.monotonic()
                await kube.request(
                    "POST", CONFIGMAPS.path(ns), body={"metadata": {"name": "after"}}
                )
                unhealthy: list[float] = []

                async def seen() -> bool:
                    if not informer.healthy and not unhealthy:
                        unhealthy.append(time.monotonic() - cut_at)
                    return f"{ns}/after" in informer.store

                await eventually(seen, timeout=BOUND * 2, interval=0.05, what="the event")
                took = time.monotonic() - cut_at
                print(
                    f"\nframe cut: unhealthy after {unhealthy}s, the event after {took:.1f}s, "
                    f"{proxy.watches - watches} watch(es) since"
                )
                assert len(proxy.cut) == 1, proxy.cut
                assert proxy.watches > watches  # a new watch, not the stalled one
                assert unhealthy, "the informer never said its cache was not current"
                assert took < BOUND, took
                assert informer.healthy
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)


async def test_readyz_fails_within_seconds_of_a_stalled_watch_and_recovers(
    private_control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    cp = private_control_plane
    access = await load_access(str(cp.kubeconfig))
    async with KubeClient(access, user_agent="stalled-watch-test") as kube:
        await scenario.install_crd(kube)
        await scenario.create(kube, NAMESPACES.path(), {"metadata": {"name": "linkerd"}})
        async with stalling_proxy(access, "/namespaces/linkerd/configmaps") as proxy:
            kubeconfig = tmp_path / "via-proxy.kubeconfig"
            kubeconfig.write_text(json.dumps(proxy.kubeconfig()))
            health = free_port()
            url = f"http://127.0.0.1:{health}/readyz"
            settings = scenario.local_settings(
                kubeconfig,
                "--identity", "stalled-watch",
                "--health-probe-bind-address", f"127.0.0.1:{health}",
                "--leader-elect", "false",
            )  # fmt: skip
            app = await build(settings)
            async with running(app):
                await eventually(
                    lambda: asyncio.sleep(0, result=proxy.watches > 0), timeout=60, what="watch"
                )
                await eventually(lambda: _is(readyz(url), 200), timeout=60, what="ready")
                proxy.stall(times=None)  # every ConfigMap watch in linkerd, until released
                cut_at = time.monotonic()
                await kube.request(
                    "POST", CONFIGMAPS.path("linkerd"), body={"metadata": {"name": "poke"}}
                )
                await eventually(
                    lambda: _is_not(readyz(url), 200), timeout=BOUND * 2, interval=0.2,
                    what="/readyz failing",
                )  # fmt: skip
                unready_after = time.monotonic() - cut_at
                # Still cut on every reconnect: still not ready a while later.
                await asyncio.sleep(5)
                assert await readyz(url) != 200
                proxy.release()
                released = time.monotonic()
                await eventually(lambda: _is(readyz(url), 200), timeout=90, what="ready again")
                back_after = time.monotonic() - released
                print(
                    f"\n/readyz: failing {unready_after:.1f}s after the frame was cut "
                    f"({len(proxy.cut)} frames cut), 200 again {back_after:.1f}s after release"
                )
                assert unready_after < BOUND, unready_after
                assert "linkerd/poke" in app.controller.configmaps.store


async def _is(status: object, expected: int) -> bool:
    return await status == expected  # type: ignore[misc]


async def _is_not(status: object, unexpected: int) -> bool:
    return await status != unexpected  # type: ignore[misc]
