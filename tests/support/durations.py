"""``make test-durations``: each integration test's seconds, from the JUnit XML of a full
``make test``, into ``tests/durations.json``, which ``tests/conftest.py``'s ``shard`` balances
the processes by. The five slowest modules are printed."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DURATIONS = REPO / "tests" / "durations.json"
"""Each integration test's seconds in the last full run (by node id), which the shards
balance."""
UNKNOWN_TEST_SECONDS = 20.0
"""What a test not in ``DURATIONS`` counts as."""


def known() -> dict[str, float]:
    """``DURATIONS``, or nothing before the first ``make test-durations``."""
    loaded: dict[str, float] = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    return loaded


def group_seconds(tests: Iterable[str], known: Mapping[str, float]) -> float:
    """What a group of tests (by node id) took in the last full run, a test not in ``known``
    counted as ``UNKNOWN_TEST_SECONDS``."""
    return sum(known.get(test, UNKNOWN_TEST_SECONDS) for test in tests)


def place(real_node: Mapping[str, bool], n: int, seconds: Mapping[str, float]) -> dict[str, int]:
    """Each group of tests (a module, or a test that runs apart from its module;
    ``real_node[g]``: it runs a real node) to one of ``n`` shards: every real-node group to
    shard 0 (one real node per machine), then the rest longest first (by ``seconds``), each
    to the shard with the least so far. The same for every process that collects the same
    tests."""
    load = [0.0] * n
    placed: dict[str, int] = {}
    for group in sorted(g for g, real in real_node.items() if real):
        placed[group] = 0
        load[0] += seconds[group]
    rest = sorted((g for g in real_node if g not in placed), key=lambda g: (-seconds[g], g))
    for group in rest:
        placed[group] = min(range(n), key=lambda s: (load[s], s))
        load[placed[group]] += seconds[group]
    return placed


def test_seconds(reports: list[Path]) -> dict[str, float]:
    """Seconds per integration test, by its node id (``tests/integration/x.py::name``, with
    its class if it has one), over every report."""
    seconds: dict[str, float] = {}
    for report in reports:
        for case in ET.parse(report).getroot().iter("testcase"):
            dotted = case.get("classname", "")
            if not dotted.startswith("tests.integration."):
                continue
            parts = dotted.split(".")
            test = "::".join(["/".join(parts[:3]) + ".py", *parts[3:], case.get("name", "")])
            seconds[test] = seconds.get(test, 0.0) + float(case.get("time", "0"))
    return seconds


def module_seconds(tests: Mapping[str, float]) -> dict[str, float]:
    """``test_seconds`` summed per module."""
    seconds: dict[str, float] = {}
    for test, spent in tests.items():
        module = test.partition("::")[0]
        seconds[module] = seconds.get(module, 0.0) + spent
    return seconds


def main(argv: list[str]) -> int:
    reports = [Path(a) for a in argv]
    if not reports:
        print("usage: python -m tests.support.durations REPORT.xml ...", file=sys.stderr)
        return 2
    tests = test_seconds(reports)
    if not tests:
        print("no integration test in the reports: run a full `make test` first", file=sys.stderr)
        return 1
    rounded = {t: round(s, 1) for t, s in sorted(tests.items())}
    DURATIONS.write_text(json.dumps(rounded, indent=1) + "\n")
    seconds = module_seconds(tests)
    for module, spent in sorted(seconds.items(), key=lambda kv: -kv[1])[:5]:
        print(f"{spent:8.1f} s  {module}")
    print(f"{sum(seconds.values()):8.1f} s  in {len(seconds)} modules -> {DURATIONS}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
