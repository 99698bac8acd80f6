"""One LeaderElector in a process of its own, so failover tests can SIGKILL or SIGTERM it.

Prints one JSON object per line on stdout, each with ``event`` and ``t`` (``time.monotonic()``,
which on Linux is one system-wide clock, so the test can compare it with its own):
``started``, ``new_leader`` (with ``leader``), ``leading``, ``stopped_leading``, and on a
graceful exit ``exited`` (with ``holder``, the lease holder last seen: "" after a release).
Logs go to stderr. SIGTERM cancels the elector, which releases the lease if it leads.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from typing import Any

import structlog

from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.leader import LeaderElectionConfig, LeaderElector, LeaderGate


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": time.monotonic(), **fields}), flush=True)


async def main(args: argparse.Namespace) -> None:
    access = await load_access(args.kubeconfig)
    config = LeaderElectionConfig(
        args.namespace,
        args.lease,
        identity=args.identity,
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
    )
    async with KubeClient(access, user_agent=f"elector-process/{args.identity}") as client:
        elector = LeaderElector(client, config)
        client.write_gate = LeaderGate(elector)
        task = asyncio.create_task(elector.run())
        reporter = asyncio.create_task(report(elector))
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        emit("started", pid=os.getpid(), identity=args.identity)
        with contextlib.suppress(asyncio.CancelledError):
            await task
        reporter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reporter
        emit("exited", holder=elector.leader)


async def report(elector: LeaderElector) -> None:
    """Turn the elector's signals into lines: the same ones a manager waits on."""
    seen = ""

    async def leaders() -> None:
        nonlocal seen
        while True:
            if elector.leader and elector.leader != seen:
                seen = elector.leader
                emit("new_leader", leader=seen)
            await asyncio.sleep(0.02)

    watcher = asyncio.create_task(leaders())
    leading = False
    try:
        while True:
            await elector.wait_for_leadership()
            emit("leading")
            leading = True
            await elector.leadership_lost.wait()
            emit("stopped_leading")
            leading = False
    finally:
        watcher.cancel()
        if leading and elector.leadership_lost.is_set():  # lost while we were being cancelled
            emit("stopped_leading")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--lease", required=True)
    p.add_argument("--identity", required=True)
    p.add_argument("--lease-duration", type=float, default=4.0)
    p.add_argument("--renew-deadline", type=float, default=3.0)
    p.add_argument("--retry-period", type=float, default=0.5)
    return p.parse_args()


if __name__ == "__main__":
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    asyncio.run(main(parse()))
