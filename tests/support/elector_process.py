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

from linkerd_config.kube.client import KubeClient, load_access
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
        elector = LeaderElector(
            client,
            config,
            on_started_leading=lambda: emit("leading"),
            on_stopped_leading=lambda: emit("stopped_leading"),
            on_new_leader=lambda who: emit("new_leader", leader=who),
        )
        client.write_gate = LeaderGate(elector)
        task = asyncio.create_task(elector.run())
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        emit("started", pid=os.getpid(), identity=args.identity)
        with contextlib.suppress(asyncio.CancelledError):
            await task
        emit("exited", holder=elector.leader)


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
