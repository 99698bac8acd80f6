"""CPU time of reading the installed ``linkerd-config`` within bounds (``formats.bounded``):
Linkerd's own values (bounded reader against the plain libyaml load it replaced), the
refusal of alias bombs, and the worst text the bounds admit, rendered as reconcile renders
it (off the event loop). No API server.

    .venv/bin/python bench/hostile_input_bench.py [--repeats 20]

Prints a table and writes ``bench/results/hostile_input.json``. The integration test
``test_hostile_configmap.py`` prints the /healthz and admission-review latencies it measured.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from linkerd_config.linkerd.configmap.desired import current_data, desired_config
from linkerd_config.linkerd.formats import InstalledDataError, bounded
from linkerd_config.linkerd.formats.helm_values import dump_values
from linkerd_config.linkerd.spec.crd import target_of
from tests.support.hostile import bombed_values, installed_values, with_values
from tests.support.samples import modern_install

RESULTS = Path(__file__).parent / "results" / "hostile_input.json"


def timed(action: Callable[[], Any], repeats: int) -> dict[str, float]:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return {"median_ms": statistics.median(samples), "max_ms": max(samples)}


def refused(text: str) -> None:
    try:
        bounded.yaml_value(text)
    except bounded.Unreadable:
        return
    raise AssertionError("not refused")


def largest_admitted() -> str:
    """Linkerd's values plus a mapping of short strings, just under MAX_NODES values."""
    base = installed_values()
    used = sum(1 for e in yaml.parse(base) if isinstance(e, yaml.NodeEvent))
    pairs = (bounded.MAX_NODES - used - 2) // 2
    filler = {"extra": {f"k{i}": f"v{i}" for i in range(pairs)}}
    return base + dump_values(filler)


def render(values: str, installed: list[dict[str, Any]]) -> None:
    config_cm, roots = installed
    config = {
        "apiVersion": "config.linkerd.io/v1alpha1",
        "kind": "LinkerdConfig",
        "metadata": {"name": "bench"},
        "spec": {"proxy": {"proxyVersion": "edge-26.8.4", "logLevel": "debug"}},
    }
    target = target_of(config)
    configmaps = {
        "linkerd-config": with_values(config_cm, values),
        roots["metadata"]["name"]: roots,
    }
    try:
        desired_config(config, current_data(configmaps, target))
    except InstalledDataError as error:
        raise AssertionError(str(error)) from error


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    real = installed_values()
    big = largest_admitted()
    bomb10, bomb11 = bombed_values(10), bombed_values(11)
    installed = modern_install()
    rows = {
        "Linkerd's values, plain libyaml load (before)": timed(
            lambda: yaml.load(real, Loader=yaml.CSafeLoader), args.repeats
        ),
        "Linkerd's values, bounded reader": timed(lambda: bounded.yaml_value(real), args.repeats),
        "10-level alias bomb refused": timed(lambda: refused(bomb10), args.repeats),
        "11-level alias bomb refused": timed(lambda: refused(bomb11), args.repeats),
        f"largest admitted ({len(big.encode())} bytes): bounded reader": timed(
            lambda: bounded.yaml_value(big), max(3, args.repeats // 4)
        ),
        "largest admitted: rendered as reconcile does (off the loop)": timed(
            lambda: render(big, installed), max(3, args.repeats // 4)
        ),
        # Quoting decided by one pass (it backtracked quadratically: minutes, GIL held).
        "number-like value at the bound (digits, then a letter), dumped": timed(
            lambda: dump_values({"note": "1" * (bounded.MAX_BYTES - 2048) + "x"}), args.repeats
        ),
    }
    width = max(map(len, rows))
    print(f"{'':{width}}  median ms  max ms")
    for name, row in rows.items():
        print(f"{name:{width}}  {row['median_ms']:9.2f}  {row['max_ms']:6.2f}")
    RESULTS.write_text(
        json.dumps(
            {"python": platform.python_version(), "machine": platform.machine(), "rows": rows},
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
