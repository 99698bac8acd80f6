"""Admission-review and probe latency while one source floods the controller's servers.

The real controller (``linkerd-config run``, webhooks on, its own process) against a local
API server. The API server's part is played here: AdmissionReviews sent one after the other
on a kept-alive HTTPS connection from 127.0.0.1, as the API server sends them, and the
kubelet's: ``/readyz`` on a new connection each time. First alone, then while
``tests/support/flood.py``, from 127.0.0.2 (one source), floods the webhook, health and
metrics ports with requests on kept-alive connections and a new TLS connection per request.

    PYTHONPATH=. .venv/bin/python bench/webhook_flood_bench.py [--seconds 30]

Prints a table and writes ``bench/results/webhook_flood.json``: p50/p99/max of each, alone
and flooded, the ratio, and how much the flood got answered.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import ssl
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from devcluster.cluster import ControlPlaneOptions, LocalControlPlane, free_port
from linkerd_config.kube.certs import write_serving_pair
from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.linkerd.admission.webhooks import MUTATE_PATH, VALIDATE_PATH
from tests.support.run_process import RunProcess
from tests.support.samples import sample
from tests.support.scenario import install_crd

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "webhook_flood.json"
FLOOD = ROOT / "tests" / "support" / "flood.py"
MINIMAL = "edge_19.12.3_use_webhook_defaults.yaml"


def review(uid: int) -> dict[str, Any]:
    obj = sample(MINIMAL)
    obj["metadata"] = {"name": f"bench-{uid}"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": f"00000000-0000-0000-0000-{uid:012d}",
            "kind": {"group": "config.linkerd.io", "version": "v1alpha1", "kind": "LinkerdConfig"},
            "resource": {
                "group": "config.linkerd.io",
                "version": "v1alpha1",
                "resource": "linkerdconfigs",
            },
            "name": obj["metadata"]["name"],
            "operation": "CREATE",
            "userInfo": {"username": "bench"},
            "object": obj,
            "dryRun": True,
        },
    }


def summary(samples: list[float], failures: int) -> dict[str, Any]:
    ordered = sorted(samples)
    p99 = ordered[max(0, round(0.99 * len(ordered)) - 1)] if ordered else None
    return {
        "n": len(samples),
        "failed": failures,
        "p50_ms": round(statistics.median(ordered), 2) if ordered else None,
        "p99_ms": round(p99, 2) if p99 is not None else None,
        "max_ms": round(ordered[-1], 2) if ordered else None,
    }


async def timed_calls(
    call: Callable[[int], Awaitable[bool]], seconds: float, interval: float
) -> dict[str, Any]:
    """``call(n)`` one after the other for ``seconds``, ``interval`` apart: the latency of
    each that succeeds, and how many did not."""
    samples: list[float] = []
    failures = 0
    until = time.monotonic() + seconds
    n = 0
    while time.monotonic() < until:
        n += 1
        started = time.perf_counter()
        try:
            ok = await call(n)
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError):
            ok = False
        if ok:
            samples.append((time.perf_counter() - started) * 1000)
        else:
            failures += 1
        await asyncio.sleep(interval)
    return summary(samples, failures)


async def api_server(base: str, ca: ssl.SSLContext, seconds: float) -> dict[str, Any]:
    """Reviews one after the other, 20 a second, on a kept-alive connection."""
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ca)) as http:

        async def review_once(uid: int) -> bool:
            path = MUTATE_PATH if uid % 2 else VALIDATE_PATH
            async with http.post(base + path, json=review(uid), timeout=timeout) as answer:
                body = await answer.json()
                return answer.status == 200 and bool(body["response"]["allowed"])

        return await timed_calls(review_once, seconds, 0.05)


async def kubelet(url: str, seconds: float) -> dict[str, Any]:
    """``/readyz`` on a new connection each time, 10 a second, with the probe's 2 s timeout."""
    timeout = aiohttp.ClientTimeout(total=2)
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def probe_once(_: int) -> bool:
            async with http.get(url, timeout=timeout) as answer:
                await answer.read()
                return answer.status == 200

        return await timed_calls(probe_once, seconds, 0.1)


async def measure(ports: dict[str, int], ca: ssl.SSLContext, seconds: float) -> dict[str, Any]:
    reviews, probes = await asyncio.gather(
        api_server(f"https://127.0.0.1:{ports['webhook']}", ca, seconds),
        kubelet(f"http://127.0.0.1:{ports['health']}/readyz", seconds),
    )
    return {"reviews": reviews, "probes": probes}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def ready(url: str) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(600):
            try:
                async with http.get(url, timeout=aiohttp.ClientTimeout(total=2)) as answer:
                    if answer.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise SystemExit(f"bench: {url} never answered 200")


async def run(seconds: float) -> dict[str, Any]:
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"webhook-flood-bench-{os.getpid()}"
    certs = work / "certs"
    ca_pem = write_serving_pair(certs, ["localhost"], ["127.0.0.1"])
    ca = ssl.create_default_context(cadata=ca_pem.decode())
    body = work / "review.json"
    body.write_text(json.dumps(review(0)))
    ports = {"webhook": free_port(), "health": free_port(), "metrics": free_port()}
    with LocalControlPlane(ControlPlaneOptions(workloads=False)) as cp:
        controller = RunProcess(
            [sys.executable, "-m", "linkerd_config", "run",
             "--kubeconfig", str(cp.kubeconfig), "--leader-elect", "false",
             "--enable-webhooks", "true", "--webhook-cert-dir", str(certs),
             "--webhook-bind-address", f"127.0.0.1:{ports['webhook']}",
             "--health-probe-bind-address", f"127.0.0.1:{ports['health']}",
             "--metrics-bind-address", f"127.0.0.1:{ports['metrics']}"],
            env={**os.environ, "LOG_LEVEL": "warning"},
        )  # fmt: skip
        try:
            access = await load_access(str(cp.kubeconfig))
            async with KubeClient(access, user_agent="webhook-flood-bench") as kube:
                await install_crd(kube)
            await ready(f"http://127.0.0.1:{ports['health']}/readyz")
            alone = await measure(ports, ca, seconds)
            webhook = f"https://127.0.0.1:{ports['webhook']}"
            targets = [
                f"{webhook}{MUTATE_PATH}=@{body}",
                f"{webhook}{VALIDATE_PATH}=@{body}",
                f"http://127.0.0.1:{ports['health']}/readyz",
                f"http://127.0.0.1:{ports['metrics']}/metrics",
            ]
            flood = await asyncio.create_subprocess_exec(
                sys.executable, str(FLOOD), "--seconds", str(seconds + 5), "--source",
                "127.0.0.2", "--keep-alive", "48", "--churn", "16", *targets,
                stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            await asyncio.sleep(3)  # in full flow
            cpu_before = cpu_seconds(controller.proc.pid)
            flooded = await measure(ports, ca, seconds)
            flooded["controller_cpu_cores"] = round(
                (cpu_seconds(controller.proc.pid) - cpu_before) / seconds, 2
            )
            out, _ = await asyncio.wait_for(flood.communicate(), seconds + 60)
            lines = out.decode().splitlines()
            reports = [json.loads(line) for line in lines if '"target"' in line]
            flooded["flood_answered"] = sum(r["answered"] for r in reports)
            flooded["flood_opened"] = sum(r["opened"] for r in reports)
        finally:
            controller.stop()
    ratio = {
        f"{what}_p99": round(flooded[what]["p99_ms"] / alone[what]["p99_ms"], 2)
        if flooded[what]["p99_ms"] and alone[what]["p99_ms"]
        else None
        for what in ("reviews", "probes")
    }
    return {"seconds": seconds, "alone": alone, "flooded": flooded, "flooded_over_alone": ratio}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    results = asyncio.run(run(args.seconds))
    results["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"{'':22} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'failed':>7} {'n':>5}")
    for when in ("alone", "flooded"):
        for what in ("reviews", "probes"):
            row = results[when][what]
            print(f"{what + ', ' + when:22} {row['p50_ms']!s:>8} {row['p99_ms']!s:>8} "
                  f"{row['max_ms']!s:>8} {row['failed']:>7} {row['n']:>5}")  # fmt: skip
    print(f"flooded / alone, p99: {results['flooded_over_alone']}; the flood got "
          f"{results['flooded']['flood_answered']} answers on "
          f"{results['flooded']['flood_opened']} connections; the controller used "
          f"{results['flooded']['controller_cpu_cores']} cores")  # fmt: skip


if __name__ == "__main__":
    main()
