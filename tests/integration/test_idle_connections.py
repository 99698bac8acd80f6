"""Clients that connect and then send nothing cannot exhaust the controller's memory, nor
keep the API server's reviews or a kubelet's probes from being answered (issue 22, finding 2).

The real controller (``linkerd-config run``, its own process, so its RSS is its own) serves
the webhooks the real API server calls. A hostile client, in a process of its own, holds
1,000 idle connections on each of the webhook (TLS), health and metrics ports and opens
again every one the server closes. Meanwhile LinkerdConfigs are written through the API
server (dry-run: the mutating webhook's defaults must come back, the validating webhook's
refusal must come back) and /healthz, /readyz and /metrics are called as a kubelet and
Prometheus call them. Then the client stops reopening: the server must close what is left
without the client's help, within the header timeout.

The bounds are generous: RSS may grow by ``RSS_GROWTH_BOUND`` at most while the squatters
are there (before the limits it grew by about 290 MiB and stayed there), and no more than
``max_connections`` TLS connections are ever open at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devcluster.cluster import LocalControlPlane, free_port
from linkerd_config.kube.certs import write_serving_pair
from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.resource import (
    MUTATING_WEBHOOK_CONFIGURATIONS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
)
from linkerd_config.kube.serving import LIMITS
from linkerd_config.linkerd.admission.defaults import defaulted
from linkerd_config.linkerd.admission.webhooks import webhook_configurations
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import scenario
from tests.support.samples import SAMPLES, load, sample
from tests.support.waiting import eventually
from tests.support.webhook_probe import DENIED

Json = dict[str, Any]
IDLE = 1000
"""Idle connections the hostile client holds on each port."""
RSS_GROWTH_BOUND = 96 * 1024 * 1024
"""Generous: 128 TLS and 256 plain connections and their churn need about 60 MiB."""
SQUAT_SECONDS = 20.0
MINIMAL = "edge_19.12.3_use_webhook_defaults.yaml"


def rss(pid: int) -> int:
    """Resident memory of process ``pid`` in bytes (``VmRSS`` in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB"


def named(obj: Json) -> Json:
    obj["metadata"] = {"name": f"idle-{uuid.uuid4().hex[:6]}"}
    return obj


async def reviewed(kube: KubeClient) -> None:
    """One review by each webhook through the API server, each answered as it should be."""
    valid = named(sample(MINIMAL))
    created = await kube.request(
        "POST", LINKERD_CONFIGS.path(), body=valid, params={"dryRun": "All"}, fenced=False
    )
    assert created["spec"] == defaulted(valid["spec"])  # the mutating webhook answered
    invalid = named(load(SAMPLES / "invalid" / "expired_trust_anchor.yaml"))
    with pytest.raises(ApiError) as refused:
        await kube.request(
            "POST", LINKERD_CONFIGS.path(), body=invalid, params={"dryRun": "All"}, fenced=False
        )
    assert DENIED in refused.value.message, refused.value.message  # the validating one too


class Squatters:
    """The hostile client process and the status lines it prints (the newest per port)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.latest: dict[str, Json] = {}
        self.ready = asyncio.Event()
        self.reader = asyncio.create_task(self._read(), name="squatters-output")

    @classmethod
    async def start(cls, *targets: str) -> Squatters:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.support.idle_clients", "--reconnect",
            "--hold", "120", *targets,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        return cls(proc)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            event = json.loads(line)
            if event["event"] == "ready":
                self.ready.set()
            else:
                self.latest[event["target"]] = event

    async def stop_reopening(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"stop\n")
        await self.proc.stdin.drain()

    async def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.terminate()
        await asyncio.wait_for(self.proc.wait(), 30)
        await asyncio.wait_for(self.reader, 10)


@contextlib.asynccontextmanager
async def controller(
    cp: LocalControlPlane, tmp_path: Path, ports: dict[str, int]
) -> AsyncIterator[tuple[asyncio.subprocess.Process, bytes]]:
    """``linkerd-config run`` with its webhooks on ``ports``; its log in tmp_path."""
    certs = tmp_path / "certs"
    ca_pem = write_serving_pair(certs, ["localhost"], ["127.0.0.1"])
    (certs / "ca.pem").write_bytes(ca_pem)
    log = (tmp_path / "controller.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "linkerd_config", "run",
        "--kubeconfig", str(cp.kubeconfig),
        "--leader-elect", "false",
        "--enable-webhooks", "true",
        "--webhook-cert-dir", str(certs),
        "--webhook-bind-address", f"127.0.0.1:{ports['webhook']}",
        "--health-probe-bind-address", f"127.0.0.1:{ports['health']}",
        "--metrics-bind-address", f"127.0.0.1:{ports['metrics']}",
        stdout=log, stderr=asyncio.subprocess.STDOUT, env={**os.environ},
    )  # fmt: skip
    try:
        yield proc, ca_pem
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
        log.close()


async def status(http: aiohttp.ClientSession, url: str) -> int:
    async with http.get(url, timeout=aiohttp.ClientTimeout(total=5)) as response:
        await response.read()
        return response.status


async def test_idle_connections_neither_exhaust_memory_nor_block_reviews(
    private_control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    cp = private_control_plane
    ports = {"webhook": free_port(), "health": free_port(), "metrics": free_port()}
    access = await load_access(str(cp.kubeconfig))
    async with (
        KubeClient(access, user_agent="idle-connections-test") as kube,
        controller(cp, tmp_path, ports) as (proc, ca_pem),
        aiohttp.ClientSession() as http,
    ):
        await scenario.install_crd(kube)
        health = f"http://127.0.0.1:{ports['health']}"
        await eventually(
            lambda: _is(status(http, f"{health}/readyz"), 200), timeout=60, what="controller ready"
        )
        for configuration, resource in zip(
            webhook_configurations(ca_pem, url_base=f"https://127.0.0.1:{ports['webhook']}"),
            (MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS),
            strict=True,
        ):
            await kube.request("POST", resource.path(), body=configuration, fenced=False)
        await eventually(lambda: _ok(reviewed(kube)), timeout=30, what="webhooks in effect")
        for _ in range(5):  # warm: the connections and code paths a review uses are made
            await reviewed(kube)
        before = rss(proc.pid)

        ca_file = tmp_path / "certs" / "ca.pem"
        targets = {
            "webhook": f"127.0.0.1:{ports['webhook']}:{ca_file}={IDLE}",
            "health": f"127.0.0.1:{ports['health']}={IDLE}",
            "metrics": f"127.0.0.1:{ports['metrics']}={IDLE}",
        }
        squatters = await Squatters.start(*targets.values())
        peak = before
        reviews = 0
        try:
            await asyncio.wait_for(squatters.ready.wait(), 60)
            deadline = time.monotonic() + SQUAT_SECONDS
            while time.monotonic() < deadline:
                await reviewed(kube)
                reviews += 1
                for path in ("/healthz", "/readyz"):
                    assert await status(http, health + path) == 200
                assert await status(http, f"http://127.0.0.1:{ports['metrics']}/metrics") == 200
                peak = max(peak, rss(proc.pid))
                await asyncio.sleep(0.1)
            during = dict(squatters.latest)
            print(
                f"RSS before {mib(before)}, peak while squatted {mib(peak)}; {reviews} review "
                f"pairs answered meanwhile; squatters: {during}"
            )
            assert reviews > 0
            assert peak - before < RSS_GROWTH_BOUND, (mib(before), mib(peak))
            # TLS connections are made by our accept, so the client's count is the server's.
            webhook = f"127.0.0.1:{ports['webhook']}"
            assert during[webhook]["most_open"] <= LIMITS.max_connections, during
            await squatters.stop_reopening()

            async def all_closed_by_the_server() -> dict[str, Json]:
                nonlocal peak
                peak = max(peak, rss(proc.pid))
                latest = squatters.latest
                assert all(e["open"] == 0 for e in latest.values()), {
                    t: {k: e[k] for k in ("open", "attempted", "longest")}
                    for t, e in latest.items()
                }
                return latest

            # The last connections the client opened are closed at most a header timeout
            # (and a handshake) after they were made; the client may still open some for a
            # while after it was told to stop.
            after_squat = await eventually(
                all_closed_by_the_server,
                timeout=LIMITS.handshake_timeout + LIMITS.header_timeout + 60,
                interval=0.5,
                what="the server closes the idle connections left",
            )
        finally:
            await squatters.close()
        after = rss(proc.pid)
        await reviewed(kube)

        print(f"RSS after the squatters left {mib(after)}, peak {mib(peak)}")
        for event in after_squat.values():
            # Every connection the client had was closed by the server, none by the client,
            # and none was left open longer than the header timeout (plus slack for a
            # loaded machine: the bound is what matters, not its precision).
            assert event["established"] >= IDLE, event
            assert event["closed_by_server"] == event["established"], event
            assert event["longest"] < LIMITS.header_timeout + 10, event
        assert after_squat[webhook]["most_open"] <= LIMITS.max_connections, after_squat
        assert peak - before < RSS_GROWTH_BOUND, (mib(before), mib(peak), mib(after))


async def _is(value: Awaitable[int], expected: int) -> bool:
    return await value == expected


async def _ok(action: Awaitable[None]) -> bool:
    await action
    return True
