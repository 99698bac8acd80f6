"""Warm start time and memory of the local control plane (binaries already built).

Prints and writes bench/results/control_plane.json. Run: make bench (or this file).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from devcluster.cluster import ControlPlaneOptions, LocalControlPlane

RESULTS = Path(__file__).parent / "results" / "control_plane.json"
RUNS = 3


def rss_kib(pid: int) -> tuple[int, int]:
    """(current RSS, peak RSS) in KiB from /proc."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def one_run(workloads: bool) -> dict[str, object]:
    started = time.monotonic()
    cp = LocalControlPlane(ControlPlaneOptions(workloads=workloads), progress=lambda _m: None)
    cp.start()
    ready = time.monotonic() - started
    try:
        # Some load so the numbers are not those of an idle process.
        for i in range(50):
            cp.api_request(
                "POST",
                "/api/v1/namespaces/default/configmaps",
                {"metadata": {"name": f"bench-{i}"}, "data": {"k": "v" * 1000}},
            )
        per = {name: rss_kib(pid) for name, pid in cp.pids().items()}
    finally:
        cp.stop()
    return {
        "seconds_to_ready": round(ready, 3),
        "rss_mib": {n: round(v[0] / 1024, 1) for n, v in per.items()},
        "peak_rss_mib": {n: round(v[1] / 1024, 1) for n, v in per.items()},
        "total_peak_rss_mib": round(sum(v[1] for v in per.values()) / 1024, 1),
    }


def main() -> None:
    results: dict[str, object] = {}
    for workloads, label in ((False, "etcd+apiserver"), (True, "full (with KCM, scheduler, kwok)")):
        runs = [one_run(workloads) for _ in range(RUNS)]
        times = [float(r["seconds_to_ready"]) for r in runs]  # type: ignore[arg-type]
        results[label] = {
            "runs": runs,
            "median_seconds_to_ready": round(statistics.median(times), 3),
        }
        print(
            f"{label}: ready in {', '.join(f'{t:.2f}s' for t in times)} "
            f"(median {statistics.median(times):.2f}s); peak RSS total "
            f"{runs[-1]['total_peak_rss_mib']} MiB {runs[-1]['peak_rss_mib']}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
