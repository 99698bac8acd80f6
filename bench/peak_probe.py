"""Peak memory and time to ready of ``linkerd-config run``, several working trees interleaved,
on the scale bench's own set-up (``scale_bench``: its control plane, its pods labelled as a
real mesh labels them, its LinkerdConfig, its runtime Python). For comparing changes at one
size quickly; ``make bench`` stays the measure against the Go peers.

    PYTHONPATH=. .venv/bin/python bench/peak_probe.py --pods 10000 --rounds 3 TREE [TREE...]

A tree is a checkout's root (``git worktree add``); ``TREE|K=V;K=V`` runs it with those
environment variables set. Each round starts every tree once, in turn, and reads the
process's VmHWM ``--hold`` seconds after ``/readyz`` first answers 200."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import scale_bench as sb


def status(pid: int) -> dict[str, float]:
    """VmHWM and VmRSS of ``pid``, in MiB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            found[key] = int(value.split()[0]) / 1024
    return found


def launch(variant: str, kubeconfig: Path) -> sb.Proc:
    """``run`` from ``variant``'s tree, with its environment variables."""
    tree, _, assignments = variant.partition("|")
    env = dict(a.partition("=")[::2] for a in assignments.split(";") if a)
    health = sb.free_port()
    argv = sb.ours_argv(
        kubeconfig, "--metrics-bind-address=0", f"--health-probe-bind-address=127.0.0.1:{health}"
    )
    proc = sb.spawn("ours", argv, env, tree=Path(tree))
    proc.ready_port = health
    return proc


async def measure(args: argparse.Namespace) -> dict[str, list[tuple[float, float]]]:
    results: dict[str, list[tuple[float, float]]] = {v: [] for v in args.trees}
    with tempfile.TemporaryDirectory() as tmp:
        async with sb.cluster() as (cp, kube):
            await sb.write_config(kube, cp.kubeconfig, Path(tmp) / "desired")
            await sb.grow_to(kube, 0, args.pods)
            for _ in range(args.rounds):
                for variant in args.trees:
                    proc = launch(variant, cp.kubeconfig)
                    try:
                        ready = await sb.until_ready(proc, 120)
                        await asyncio.sleep(args.hold)
                        peak = status(proc.popen.pid)["VmHWM"]
                    finally:
                        proc.stop()
                    if ready is None:
                        raise RuntimeError(f"{variant} was never ready")
                    results[variant].append((ready, peak))
                    print(f"{variant}: ready {ready:.3f} s, peak {peak:.1f} MiB", flush=True)
    return results


def compile_trees(trees: list[str]) -> None:
    """Each tree's bytecode, as an install compiles it (``scale_bench.runtime_python``)."""
    python = sb.runtime_python()
    for tree in {v.partition("|")[0] for v in trees}:
        subprocess.run(
            [str(python), "-m", "compileall", "-q", "-j", "0", f"{tree}/linkerd_config"],
            check=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="+")
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hold", type=float, default=1.5)
    args = parser.parse_args()
    compile_trees(args.trees)
    results = asyncio.run(measure(args))
    for variant, rows in results.items():
        ready = statistics.median(r for r, _ in rows)
        peak = statistics.median(p for _, p in rows)
        print(f"median {variant}: ready {ready:.3f} s, peak {peak:.1f} MiB")


if __name__ == "__main__":
    main()
