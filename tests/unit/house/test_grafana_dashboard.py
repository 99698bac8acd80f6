"""manifests/grafana/linkerd-config.json is a well-formed Grafana dashboard, and every metric
its queries name is one the controller registers: the app is built (every component, webhooks
and leader election on) without being started, and each expression's series names are looked
up among the families in its registry. Whether the queries return data from a real Prometheus
is tests/integration/test_dashboard.py's job."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from linkerd_config.app import build
from linkerd_config.settings import parse
from tests.support.dashboard import (
    DATASOURCE_REF,
    format_value,
    label_values_query,
    load,
    metric_names,
    panels,
    substitute,
    variables,
)

GRID_COLUMNS = 24
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range", "__interval_ms", "__range_s"}

Json = dict[str, Any]


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("up", {"up"}),
        ('process_open_fds{job="$job", instance=~"$instance"}', {"process_open_fds"}),
        (
            'histogram_quantile(0.99, sum by (le, verb) (rate(a_bucket{verb!="WATCH", '
            'x=~"by(y)"}[$__rate_interval])))',
            {"a_bucket"},
        ),
        ("sum(rate(a_total[5m])) by (code) / ignoring(code) group_left sum(b)", {"a_total", "b"}),
        ("max without (pod) (c offset 5m) > bool 1e3 and on (x) d", {"c", "d"}),
        ("rate(e[1m:10s]) or vector(0)", {"e"}),
    ],
)
def test_metric_names_finds_the_series_and_nothing_else(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_substitute_replaces_every_reference_and_refuses_unknown_ones() -> None:
    values = {"job": "j", "__rate_interval": "4s"}
    assert substitute('rate(x{job="$job"}[${__rate_interval}])', values) == 'rate(x{job="j"}[4s])'
    with pytest.raises(KeyError, match="pod"):
        substitute('x{pod=~"$pod"}', values)


def test_a_multi_value_variable_becomes_an_escaped_alternation() -> None:
    instances = ["10.0.0.1:8080", "10.0.0.2:8080"]
    # What Grafana writes into instance=~"...": a regex, its backslashes escaped for PromQL.
    assert format_value({"multi": True}, instances) == r"(10\\.0\\.0\\.1:8080|10\\.0\\.0\\.2:8080)"
    assert format_value({"includeAll": True}, instances[:1]) == r"(10\\.0\\.0\\.1:8080)"
    assert format_value({"multi": False}, ["linkerd/linkerd-config"]) == "linkerd/linkerd-config"


# -- the dashboard ----------------------------------------------------------------------------


def test_the_dashboard_is_a_grafana_dashboard_on_a_prometheus_variable() -> None:
    dashboard = load()
    assert dashboard["title"] and dashboard["uid"]
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert dashboard["id"] is None  # importable anywhere: Grafana assigns the id
    vars_ = variables(dashboard)
    assert vars_["datasource"]["type"] == "datasource"
    assert vars_["datasource"]["query"] == "prometheus"
    for name, var in vars_.items():
        if var["type"] == "query":
            assert var["datasource"] == DATASOURCE_REF, name
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            assert query == var["definition"], name
            selector, _label = label_values_query(query)
            assert metric_names(selector), name


def test_every_panel_has_a_title_the_variable_and_queries() -> None:
    dashboard = load()
    all_panels = panels(dashboard)
    assert len(all_panels) >= 15
    ids = [p.get("id") for p in all_panels]
    assert all(isinstance(i, int) for i in ids), ids
    assert len(set(ids)) == len(ids), f"duplicate panel ids: {ids}"
    titles = [p.get("title", "").strip() for p in all_panels]
    assert all(titles), "a panel without a title"
    assert len(set(titles)) == len(titles), f"duplicate titles: {titles}"
    for panel in all_panels:
        title = panel["title"]
        if panel["type"] == "row":
            continue
        assert panel.get("datasource") == DATASOURCE_REF, title
        targets = panel.get("targets") or []
        assert targets, f"{title}: no targets"
        ref_ids = [t.get("refId") for t in targets]
        assert all(ref_ids) and len(set(ref_ids)) == len(ref_ids), f"{title}: refIds {ref_ids}"
        for target in targets:
            assert (target.get("expr") or "").strip(), f"{title}: a target without expr"
            assert target.get("datasource", DATASOURCE_REF) == DATASOURCE_REF, title


def test_panels_fit_the_grid_without_overlapping() -> None:
    taken: dict[tuple[int, int], str] = {}
    for panel in panels(load()):
        grid = panel["gridPos"]
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] >= 0 and grid["y"] >= 0
        assert grid["x"] + grid["w"] <= GRID_COLUMNS, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                other = taken.setdefault((x, y), panel["title"])
                assert other == panel["title"], f"{panel['title']} overlaps {other}"


def test_every_variable_an_expression_uses_is_defined() -> None:
    dashboard = load()
    defined = set(variables(dashboard)) | GRAFANA_BUILTINS
    for panel in panels(dashboard):
        for target in panel.get("targets") or []:
            used = set(re.findall(r"\$\{?(\w+)", target["expr"]))
            assert used <= defined, f"{panel['title']}: undefined {used - defined}"


# -- every series name is registered by the controller ---------------------------------------

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


def series_names(family: Any) -> set[str]:
    """The names a family's samples carry in the exposition format."""
    name, kind = family.name, family.type
    if kind == "counter":
        return {f"{name}_total"}
    if kind == "histogram":
        return {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
    if kind == "summary":
        return {name, f"{name}_count", f"{name}_sum"}
    if kind == "info":
        return {f"{name}_info"}
    return {name}


@pytest.fixture
async def registered(tmp_path: Path) -> AsyncIterator[set[str]]:
    """Every series name the controller's registry can serve, with every component built."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    settings = parse(
        [
            "--kubeconfig", str(kubeconfig),
            "--metrics-bind-address", "127.0.0.1:0",
            "--health-probe-bind-address", "127.0.0.1:0",
            "--enable-webhooks", "true",
            "--webhook-cert-dir", str(tmp_path / "certs"),
            "--leader-elect", "true",
        ],
        env={},
    )  # fmt: skip
    app = await build(settings)
    try:
        yield {n for family in app.registry.collect() for n in series_names(family)}
    finally:
        await app.client.close()


def test_series_names_of_each_family_type() -> None:
    registry = CollectorRegistry()
    Counter("c_total", "c", registry=registry)
    Gauge("g", "g", registry=registry)
    Histogram("h_seconds", "h", registry=registry)
    names = {n for family in registry.collect() for n in series_names(family)}
    assert names == {"c_total", "g", "h_seconds_bucket", "h_seconds_count", "h_seconds_sum"}


async def test_every_metric_in_the_dashboard_is_registered_by_the_controller(
    registered: set[str],
) -> None:
    # Not vacuous: the registry holds the components' families, and each expression names one.
    assert {"controller_runtime_reconcile_total", "workqueue_depth"} <= registered
    assert "process_resident_memory_bytes" in registered
    used: set[str] = set()
    for panel in panels(load()):
        for target in panel.get("targets") or []:
            names = metric_names(target["expr"])
            assert names, f"{panel['title']}: no metric found in {target['expr']!r}"
            unknown = names - registered
            assert not unknown, f"{panel['title']}: {sorted(unknown)} not registered by the app"
            used |= names
    for var in variables(load()).values():
        if var["type"] == "query":
            selector, _label = label_values_query(var["definition"])
            unknown = metric_names(selector) - registered
            assert not unknown, f"variable {var['name']}: {sorted(unknown)} not registered"
    # The families the dashboard exists for are all charted.
    for family in (
        "controller_runtime_reconcile_total",
        "controller_runtime_reconcile_errors_total",
        "controller_runtime_reconcile_time_seconds_bucket",
        "workqueue_depth",
        "leader_election_master_status",
        "linkerd_config_workload_restarts_total",
        "controller_runtime_webhook_requests_total",
        "rest_client_requests_total",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
    ):
        assert family in used, f"no panel charts {family}"
