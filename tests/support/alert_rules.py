"""The alerting rules as shipped: manifests/components/alerts/prometheus_rule.yaml (the chart
carries a copy). Tests read them from there, never from a copy of their own, and hand
Prometheus and promtool its ``spec``: a plain Prometheus rules file, as the operator writes it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from devcluster.prometheus import Prometheus

REPO = Path(__file__).resolve().parents[2]
RULE_FILE = REPO / "manifests" / "components" / "alerts" / "prometheus_rule.yaml"
CHART_COPY = REPO / "manifests" / "chart" / "files" / "prometheus_rule.yaml"

Obj = dict[str, Any]


def prometheus_rule() -> Obj:
    loaded: Obj = yaml.safe_load(RULE_FILE.read_text())
    return loaded


def alerting_rules() -> dict[str, Obj]:
    """Every alerting rule by its alert name (names are unique across groups)."""
    found: dict[str, Obj] = {}
    for group in prometheus_rule()["spec"]["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                assert rule["alert"] not in found, f"alert {rule['alert']} defined twice"
                found[rule["alert"]] = rule
    return found


def write_rules_file(folder: Path) -> Path:
    """The PrometheusRule's ``spec`` as a rules file in ``folder``, for Prometheus/promtool."""
    path = folder / "linkerd-config.rules.yml"
    path.write_text(yaml.safe_dump(prometheus_rule()["spec"], sort_keys=False))
    return path


def expression(alert: str) -> str:
    expr: str = alerting_rules()[alert]["expr"]
    return expr


def threshold(alert: str) -> float:
    """The number an alert's expression compares with last (``... > 3``)."""
    found = re.search(r"[<>]=?\s*([0-9.]+)\s*$", expression(alert))
    assert found, f"{alert}: no trailing comparison in {expression(alert)!r}"
    return float(found[1])


def active(prometheus: Prometheus, alert: str) -> list[Obj]:
    """The alert's pending or firing instances, as the real Prometheus evaluates the rule."""
    return [a for a in prometheus.alerts() if a["labels"].get("alertname") == alert]
