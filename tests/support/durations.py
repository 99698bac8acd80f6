"""``make test-durations``: each integration module's seconds, summed from the JUnit XML of a
full ``make test``, into ``tests/durations.json``, which ``tests/conftest.py``'s ``shard``
balances the processes by. The five slowest are printed."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DURATIONS = REPO / "tests" / "durations.json"
"""Each integration module's seconds in the last full run, which the shards balance."""
UNKNOWN_MODULE_SECONDS = 60.0
"""What a module not in ``DURATIONS`` counts as."""


def known() -> dict[str, float]:
    """``DURATIONS``, or nothing before the first ``make test-durations``."""
    loaded: dict[str, float] = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    return loaded


def place(real_node: Mapping[str, bool], n: int, known: Mapping[str, float]) -> dict[str, int]:
    """Each module (``real_node[m]``: it runs a real node) to one of ``n`` shards: every
    real-node module to shard 0 (one real node per machine), then the rest longest first
    (by ``known``; ``UNKNOWN_MODULE_SECONDS`` if not), each to the shard with the least so
    far. The same for every process that collects the same modules."""

    def seconds(module: str) -> float:
        return known.get(module, UNKNOWN_MODULE_SECONDS)

    load = [0.0] * n
    placed: dict[str, int] = {}
    for module in sorted(m for m, real in real_node.items() if real):
        placed[module] = 0
        load[0] += seconds(module)
    for module in sorted((m for m in real_node if m not in placed), key=lambda m: (-seconds(m), m)):
        placed[module] = min(range(n), key=lambda s: (load[s], s))
        load[placed[module]] += seconds(module)
    return placed


def module_seconds(reports: list[Path]) -> dict[str, float]:
    """Seconds per integration module (``tests/integration/x.py``), over every report."""
    seconds: dict[str, float] = {}
    for report in reports:
        for case in ET.parse(report).getroot().iter("testcase"):
            dotted = case.get("classname", "")
            if not dotted.startswith("tests.integration."):
                continue
            parts = dotted.split(".")
            module = "/".join(parts[:3]) + ".py"
            seconds[module] = seconds.get(module, 0.0) + float(case.get("time", "0"))
    return seconds


def main(argv: list[str]) -> int:
    reports = [Path(a) for a in argv]
    if not reports:
        print("usage: python -m tests.support.durations REPORT.xml ...", file=sys.stderr)
        return 2
    seconds = module_seconds(reports)
    if not seconds:
        print("no integration test in the reports: run a full `make test` first", file=sys.stderr)
        return 1
    rounded = {m: round(s, 1) for m, s in sorted(seconds.items())}
    DURATIONS.write_text(json.dumps(rounded, indent=1) + "\n")
    for module, spent in sorted(seconds.items(), key=lambda kv: -kv[1])[:5]:
        print(f"{spent:8.1f} s  {module}")
    print(f"{sum(seconds.values()):8.1f} s  in {len(seconds)} modules -> {DURATIONS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
