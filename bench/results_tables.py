"""Write the scale tables of ``bench/RESULTS.md`` from ``bench/results/scale.json``
(between the markers ``<!-- scale:begin -->`` and ``<!-- scale:end -->``), so they show what
the bench measured and nothing else: whole-process figures, the machine and its load, the command.
And the webhook flood's table from ``bench/results/webhook_flood.json`` (between
``<!-- webhook-flood:begin -->`` and ``<!-- webhook-flood:end -->``), and fairness's from
``bench/results/fairness.json`` (``<!-- fairness:begin -->`` … ``<!-- fairness:end -->``).

    .venv/bin/python bench/results_tables.py        (make bench runs it last)
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "scale.json"
FIGURES = ROOT / "bench" / "RESULTS.md"
BEGIN, END = "<!-- scale:begin -->", "<!-- scale:end -->"
FLOOD_RESULTS = ROOT / "bench" / "results" / "webhook_flood.json"
FLOOD_BEGIN, FLOOD_END = "<!-- webhook-flood:begin -->", "<!-- webhook-flood:end -->"
FAIRNESS_RESULTS = ROOT / "bench" / "results" / "fairness.json"
FAIRNESS_BEGIN, FAIRNESS_END = "<!-- fairness:begin -->", "<!-- fairness:end -->"


def _show(value: Any, unit: str = "") -> str:
    if value is None:
        return "—"
    return f"{value:g}{unit}" if isinstance(value, float | int) else str(value)


def _ratio(a: Any, b: Any) -> str:
    return "—" if a is None or b in (None, 0) else f"{a / b:.2f}"


def _rss(peer: dict[str, Any]) -> Any:
    """The median of the rounds' peak RSS (the maximum, in results written before medians)."""
    return peer.get("peak_rss_mib_median", peer.get("peak_rss_mib_max"))


def _rounds(label: str, peer: dict[str, Any]) -> str:
    ready = ", ".join(_show(x) for x in peer.get("ready_s", []))
    rss = peer.get("peak_rss_mib")
    return f"{label} {ready} s" + (f" ({', '.join(_show(x) for x in rss)} MiB)" if rss else "")


def scale_section(results: dict[str, Any]) -> str:
    args, machine = results["args"], results["machine"]
    command = (
        f"make bench-scale SCALE_ARGS='--pods {args['pods']} --repeats {args['repeats']} "
        f"--rounds {args['rounds']} --deployments {args['deployments']} "
        f"--batch {args['batch']} --interval {args['interval']:g}'"
    )
    lines = [
        f"Measured by `{command}` (`bench/scale_bench.py`): one local control plane, the peers "
        "started one at a time in rotating order, each a process of its own; figures are "
        "whole-process (time from spawn, peak RSS from `VmHWM`, CPU from the scheduler's "
        "nanoseconds per thread, `/proc/PID/task/*/schedstat`); start and "
        f"peak RSS are medians of {args['repeats']} interleaved rounds, drift p50/p99 over "
        f"{args['rounds']} rounds a run. Machine: "
        f"{machine['cpus']} CPUs, Python {machine['python']}, 1-minute load "
        f"{machine['load_1m_at_start']} at the start and {machine.get('load_1m_at_end')} at "
        "the end (the API server, etcd and the bench share those CPUs). kopf 1.45.2 is "
        f"started up to {args['kopf_max_pods']:,} pods and given {args['kopf_timeout']:g} s.",
        "",
        "| pods | | ours | go | go, streaming | go, streaming + trimmed | limit "
        "| limit, metadata | kopf | ours / best go | limit / go | limit, metadata / go "
        "| ours / kopf |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    drift = [
        "| pods | | ours | limit | kopf | ours / limit | ours / kopf |",
        "|---|---|---|---|---|---|---|",
    ]
    by_round = []
    for pods, point in results["points"].items():
        ours, limit, meta = point["ours"], point["limit"], point["limit-meta"]
        go, kopf, revert = point.get("go") or {}, point.get("kopf") or {}, point["revert"]
        kopf_ready = kopf.get("ready_s_median")
        if kopf.get("ready_s") and kopf_ready is None:  # started, never ready
            kopf_ready = f"not ready in {args['kopf_timeout']:g} s"
        stream, trim = point.get("go-stream") or {}, point.get("go-trim") or {}
        peers = (ours, go, stream, trim, limit, meta)
        starts = [
            ("start → ready (s)", [p.get("ready_s_median") for p in peers], kopf_ready),
            ("peak RSS (MiB)", [_rss(p) for p in peers], _rss(kopf)),
        ]
        for name, (a, g, gs, gt, b, m), c in starts:
            c_num = c if isinstance(c, int | float) else None
            best = _best(g, gs, gt)
            lines.append(
                f"| {int(pods):,} | {name} | {_show(a)} | {_show(g)} | {_show(gs)} "
                f"| {_show(gt)} | {_show(b)} | {_show(m)} | {_show(c)} | {_ratio(a, best)} "
                f"| {_ratio(b, g)} | {_ratio(m, g)} | {_ratio(a, c_num)} |"
            )
        rows = [
            ("drift revert p50 (ms)", ours["drift_p50_ms"], revert["drift_p50_ms"],
             kopf.get("drift_p50_ms")),
            ("drift revert p99 (ms)", ours["drift_p99_ms"], revert["drift_p99_ms"],
             kopf.get("drift_p99_ms")),
            ("CPU per revert (ms)", ours["cpu_ms_per_revert"], revert["cpu_ms_per_revert"],
             kopf.get("cpu_ms_per_revert")),
        ]  # fmt: skip
        for name, a, b, c in rows:
            drift.append(
                f"| {int(pods):,} | {name} | {_show(a)} | {_show(b)} | {_show(c)} | "
                f"{_ratio(a, b)} | {_ratio(a, c)} |"
            )
        named = (("ours", ours), ("go", go), ("go, streaming", stream),
                 ("go, streaming + trimmed", trim))  # fmt: skip
        rounds = [_rounds(label, p) for label, p in named if p]
        by_round.append(f"- {int(pods):,} pods: " + "; ".join(rounds))
    lines += ["", *drift]
    lines += ["", "Each round, start → ready (peak RSS):", "", *by_round]
    points = {int(p): v["ours"] for p, v in results["points"].items()}
    if len(points) >= 2:
        sizes = sorted(points)
        steps = []
        for a, b in itertools.pairwise(sizes):
            per_k = 1000 / (b - a)
            time_k = (points[b]["ready_s_median"] - points[a]["ready_s_median"]) * per_k
            rss_k = (_rss(points[b]) - _rss(points[a])) * per_k
            steps.append(f"{a:,} → {b:,}: {time_k:.2f} s and {rss_k:.2f} MiB per 1,000 pods")
        lines += ["", "Ours, growth between scale points: " + "; ".join(steps) + "."]
    lines.append("")
    lines.append(
        "go is a Go controller's cache of the same pods (`bench/go_peer/`): a client-go "
        "metadata informer (protobuf on the wire), ready at `HasSynced`; with a streaming "
        "list (`KUBE_FEATURE_WatchListClient=true`), and with a streaming list and a transform "
        "keeping only the label and annotations our decisions read (`--trim`). Ours is ready "
        "when `/readyz` answers 200 (polled every 20 ms). The limit is a bare "
        "process: a paginated LIST (500 a page; ours asks for 1,000) decoded and dropped, "
        "as JSON or as metadata "
        "(start, memory), or one watch and a PATCH (drift); kopf keeps an index of the opted-in "
        "pods and reverts the key from an `on.event` handler."
    )
    if any("peak_rss_mib_median" not in v["ours"] for v in results["points"].values()):
        lines[-1] += " Peak RSS here is the maximum of the rounds (written before medians)."
    if results.get("import_floor"):
        lines += ["", *floor_lines(results)]
    rollout = results.get("rollout")
    if rollout:
        lines += [
            "",
            "| Deployments | batch / interval | first → last restart "
            "| floor: (passes - 1) x interval | ratio (target ≤ 1.1) "
            "| API requests per restart (perfect: 2, the PATCH and its Event) "
            "| requests in the "
            f"{rollout['steady_seconds']:g} s after |",
            "|---|---|---|---|---|---|---|",
            f"| {rollout['deployments']:,} | {rollout['batch']} / {rollout['interval_s']:g} s "
            f"| {_show(rollout['first_to_last_s'], ' s')} "
            f"| {_show(rollout['implied_first_to_last_s'], ' s')} "
            f"| {_show(rollout.get('first_to_last_over_floor'))} "
            f"| {_show(rollout['requests_per_restart'])} "
            f"| {_show(rollout['steady_requests'])} |",
            "",
            "Rollout: each Deployment has one pod injected by Linkerd's real edge-19.12.3 "
            "injector; a LinkerdConfig moves the proxy from edge-19.12.1 to edge-19.12.3; "
            "kwok makes each new pod Running and Ready at once, and each pass waits until "
            "every workload restarted so far is healthy (the rollout's health gate); "
            "requests are the controller's own `rest_client_requests_total` from the apply "
            "until one interval after the last restart (leader election off: no Lease "
            "renewals); the first restart came "
            f"{_show(rollout['first_restart_s'], ' s')} after the apply, and Ready (every new "
            f"pod on the new proxy) {_show(rollout.get('ready_s'), ' s')} after it; the steady "
            "window starts at Ready.",
        ]
        again = results.get("rollout_args")
        if again:
            lines[-1] += (
                " This row was measured by a later run of the rollout alone: `make bench-scale "
                f'SCALE_ARGS=\'--pods "" --deployments {again["deployments"]} --batch '
                f"{again['batch']} --interval {again['interval']:g}'`."
            )
    if results.get("notes"):
        lines += ["", f"Note: {results['notes']}."]
    return "\n".join(lines)


def _best(*values: Any) -> Any:
    """The best (lowest) of the Go peers' figures that were measured, or None."""
    return min((v for v in values if v is not None), default=None)


def _above(value: float, floor: float) -> str:
    gap = round(value - floor, 1)
    return f"{_show(abs(gap))} MiB {'above' if gap >= 0 else 'below'}"


def floor_lines(results: dict[str, Any]) -> list[str]:
    """The runtime's memory before any work, and what it leaves of the best Go peer's peak
    at each scale point for ours' caches, connections and work."""
    floor = results["import_floor"]
    lines = [
        "Ours' floor: the whole-process RSS of a fresh runtime interpreter (the image's "
        "dependencies, `requirements/runtime.lock`) after importing each stage, no work done "
        f"(medians of {results['args']['repeats']} processes; `FLOOR_STAGES` in "
        "`bench/scale_bench.py`):",
        "",
        "| stage | RSS (MiB) |",
        "|---|---|",
        *(f"| {row['stage']} | {_show(row['rss_mib'])} |" for row in floor),
    ]
    # What `run` imports; cryptography is the last stage, which the measured run (v1alpha2
    # only: no conversion served) never loads: anchors are read by kube.x509_reader.
    base = floor[-2]["rss_mib"]
    left = []
    for pods, point in results["points"].items():
        best = _best(*(_rss(point.get(p) or {}) for p in ("go", "go-stream", "go-trim")))
        ours = _rss(point["ours"])
        if best is None or ours is None:
            continue
        left.append(
            f"at {int(pods):,} pods the best Go peer peaked at {_show(best)} MiB, "
            f"{_above(best, base)} the floor of what `run` imports ({_show(base)} MiB); "
            f"ours peaked {_above(ours, base)} it"
        )
    if left:
        lines += ["", "Against the floor: " + "; ".join(left) + "."]
    return lines


def flood_section(results: dict[str, Any]) -> str:
    """The latency table of one ``webhook_flood_bench.py`` run."""
    lines = [
        f"One source floods the webhook, health and metrics ports for {_show(results['seconds'])}"
        " s; the API server's reviews (kept-alive HTTPS, 20/s) and the kubelet's `/readyz` (a"
        " new connection each, 10/s) meanwhile, against the same alone.",
        "",
        "| | p50 ms | p99 ms | max ms | failed | n |",
        "|---|---|---|---|---|---|",
    ]
    for when in ("alone", "flooded"):
        for what in ("reviews", "probes"):
            row = results[when][what]
            lines.append(
                f"| {what}, {when} | {_show(row['p50_ms'])} | {_show(row['p99_ms'])} | "
                f"{_show(row['max_ms'])} | {row['failed']} | {row['n']} |"
            )
    flooded = results["flooded"]
    ratio = results["flooded_over_alone"]
    lines += [
        "",
        f"p99 flooded / alone: reviews {_show(ratio['reviews_p99'])}, probes"
        f" {_show(ratio['probes_p99'])}. The flood got {flooded['flood_answered']} answers on"
        f" {flooded['flood_opened']} connections; the controller used"
        f" {_show(flooded['controller_cpu_cores'])} cores meanwhile"
        f" ({results['machine']['cpus']} CPUs, the flood on the same machine).",
        "",
        "Command: `PYTHONPATH=. .venv/bin/python bench/webhook_flood_bench.py` (in `make bench`).",
    ]
    return "\n".join(lines)


def fairness_table(results: dict[str, Any]) -> str:
    points = results["points"]
    one = points.get("1")
    rows = [
        "| LinkerdConfigs | drift revert p50 (ms) | p99 (ms) | CPU per revert (ms)"
        " | p99 / p99 with one | settled after start (s) |",
        "|---|---|---|---|---|---|",
    ]
    for n, p in points.items():
        ratio = f"{p['p99_ms'] / one['p99_ms']:.2f}" if one else "—"
        settled = ", ".join(str(s) for s in p["settled_s"])
        rows.append(
            f"| {int(n):,} | {p['p50_ms']:.2f} | {p['p99_ms']:.2f}"
            f" | {p['cpu_ms_per_revert']:.2f} | {ratio} | {settled} |"
        )
    return "\n".join(rows)


def fairness_section(results: dict[str, Any]) -> str:
    """The drift table of one ``fairness_bench.py`` run."""
    args, machine = results["args"], results["machine"]
    counts = " and ".join(f"{int(n):,}" for n in results["points"])
    return "\n".join(
        [
            f"A drift of `linkerd-config` reverted with {counts} LinkerdConfigs"
            f" present (the others younger rivals of the same ConfigMap, 200-character names,"
            f" hostile labels and annotations): {args['rounds']} rounds in each of"
            f" {args['repeats']} processes a point; CPU per revert the median process's."
            f" {machine['cpus']} CPUs, 1-minute load {machine['load_1m_at_start']} at the start"
            f" and {machine['load_1m_at_end']} at the end.",
            "",
            fairness_table(results),
            "",
            "Command: `PYTHONPATH=. .venv/bin/python bench/fairness_bench.py` (in `make bench`).",
        ]
    )


def _replace(figures: str, begin: str, end: str, section: str) -> str:
    if begin not in figures or end not in figures:
        raise SystemExit(f"{FIGURES.name} has no {begin} … {end} section")
    return re.sub(
        re.escape(begin) + ".*?" + re.escape(end),
        lambda _m: f"{begin}\n{section}\n{end}",
        figures,
        flags=re.S,
    )


def main() -> None:
    figures = FIGURES.read_text()
    figures = _replace(figures, BEGIN, END, scale_section(json.loads(RESULTS.read_text())))
    if FLOOD_RESULTS.exists():
        flood = json.loads(FLOOD_RESULTS.read_text())
        figures = _replace(figures, FLOOD_BEGIN, FLOOD_END, flood_section(flood))
    if FAIRNESS_RESULTS.exists():
        fairness = json.loads(FAIRNESS_RESULTS.read_text())
        figures = _replace(figures, FAIRNESS_BEGIN, FAIRNESS_END, fairness_section(fairness))
    FIGURES.write_text(figures)
    print(f"{FIGURES.relative_to(ROOT)}: tables from {RESULTS.relative_to(ROOT)}"
          f" and {FLOOD_RESULTS.relative_to(ROOT)}")  # fmt: skip


if __name__ == "__main__":
    main()
