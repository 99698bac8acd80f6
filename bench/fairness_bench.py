"""Fairness: a drift of ``linkerd-config`` reverted with one LinkerdConfig present, and with a
thousand (issue 61, finding 8).

One local control plane (etcd + kube-apiserver), Linkerd edge-19.12.1's config and the
LinkerdConfig that manages it, as ``scale_bench.py`` sets them up. At each point
(``--linkerdconfigs``, growing: 1, then 1,000) the others are rivals of that one: younger
LinkerdConfigs of the same ConfigMap (the controller refuses each, Conflict), with
200-character names, hostile labels and annotations, as the attack made them. Ours is
started as a process of its own (``linkerd-config run``, one replica, webhooks off), left to
settle (every rival's Conflict written), then ``--rounds`` drift rounds: the probe tampers
with the managed key and times until the watch shows it restored (``scale_bench.drift``),
with the CPU the process spent per revert; ``--repeats`` processes per point.

    PYTHONPATH=. .venv/bin/python bench/fairness_bench.py [--linkerdconfigs 1,1000]

Prints a table and writes ``bench/results/fairness.json``; ``bench/results_tables.py`` puts
it in ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import scale_bench
from bench.results_tables import fairness_table
from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.linkerd.spec.crd import LINKERD_CONFIGS_V1ALPHA1
from tests.support.samples import sample

RESULTS = scale_bench.BENCH / "results" / "fairness.json"
CREATE_CONCURRENCY = 32

Json = dict[str, Any]


def rival(i: int) -> Json:
    """The ``i``th rival: the managing object's spec, a 200-character name, a label and ten
    annotations as hostile as the API server admits."""
    obj = copy.deepcopy(sample("edge_19.12.3.yaml"))
    obj["metadata"] = {
        "name": f"rival-{i:04d}-" + "x" * 189,
        "labels": {"a" * 63: "b" * 63, "evil.example/" + "c" * 50: "d" * 63},
        "annotations": {f"evil.example/{j}": "\u202e\ufeff" * 300 for j in range(10)},
    }
    return obj


async def grow_to(kube: KubeClient, have: int, want: int) -> None:
    """Rivals ``have`` .. ``want - 1`` made (the managing object is the first of ``want``)."""
    gate = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def one(i: int) -> None:
        async with gate:
            try:
                await kube.request("POST", LINKERD_CONFIGS_V1ALPHA1.path(), body=rival(i))
            except ApiError as exc:
                if exc.status != 409:
                    raise

    await asyncio.gather(*(one(i) for i in range(max(have, 1), want)))


async def measure_point(
    kube: KubeClient, kubeconfig: Path, desired_file: Path, args: argparse.Namespace
) -> Json:
    desired = await asyncio.to_thread(desired_file.read_text)
    samples: list[float] = []
    cpu: list[float] = []
    settle: list[float] = []
    for _ in range(args.repeats):
        proc = scale_bench.start("ours", kubeconfig, desired_file, 0)
        try:
            if await scale_bench.until_ready(proc, 300) is None:
                raise RuntimeError("ours was not ready in 300 s")
            settle.append(await scale_bench.settled(proc, window=1.0, timeout=600))
            d = await scale_bench.drift(kube, proc, desired, args.rounds)
            samples += d["samples_ms"]
            cpu.append(d["cpu_ms_per_revert"])
        finally:
            proc.stop()
    return {
        "drift_ms": samples,
        "p50_ms": scale_bench.pct(samples, 0.5),
        "p99_ms": scale_bench.pct(samples, 0.99),
        "cpu_ms_per_revert": sorted(cpu)[len(cpu) // 2],
        "settled_s": [round(s, 1) for s in settle],
    }


async def main_async(args: argparse.Namespace) -> Json:
    results = scale_bench.results_skeleton(args)
    with tempfile.TemporaryDirectory() as tmp:
        desired_file = Path(tmp) / "desired"
        async with scale_bench.cluster() as (cp, kube):
            await scale_bench.write_config(kube, cp.kubeconfig, desired_file)
            have = 1
            for n in (int(p) for p in args.linkerdconfigs.split(",") if p):
                started = time.monotonic()
                await grow_to(kube, have, n)
                have = max(have, n)
                print(f"{n:,} LinkerdConfigs: made in {time.monotonic() - started:.0f}s",
                      flush=True)  # fmt: skip
                results["points"][str(n)] = await measure_point(
                    kube, cp.kubeconfig, desired_file, args
                )
                p = results["points"][str(n)]
                print(f"  drift p50 {p['p50_ms']:.2f} ms, p99 {p['p99_ms']:.2f} ms", flush=True)
    results["machine"]["load_1m_at_end"] = round(os.getloadavg()[0], 2)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--linkerdconfigs", default="1,1000", help="comma-separated, growing")
    parser.add_argument("--repeats", type=int, default=3, help="processes per point")
    parser.add_argument("--rounds", type=int, default=20, help="drift rounds per process")
    args = parser.parse_args()
    results = asyncio.run(main_async(args))
    print(fairness_table(results))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
