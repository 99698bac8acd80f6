"""The alerting rules file (manifests/components/alerts/prometheus_rule.yaml) agrees with the
code it is about and with the chart's copy. What each alert does is proven by Prometheus's rule
engine (tests/integration/test_alert_rules.py) and on a real Prometheus scraping the real
controller (tests/integration/test_dashboard.py)."""

from __future__ import annotations

import re
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest

from linkerd_config.kube.leader import LeaderElectionMetrics
from linkerd_config.linkerd.reconciler import LinkerdConfigController
from linkerd_config.linkerd.rollout.record import RESUME_ANNOTATION
from linkerd_config.settings import parse
from tests.support.alert_rules import CHART_COPY, RULE_FILE, alerting_rules, prometheus_rule

OURS = re.compile(r"\b(?:linkerd_config|controller_runtime|leader_election)_[a-z0-9_]+\b")
"""A metric name of the families the controller exports (label names never start so)."""


def controller_families() -> set[str]:
    """Every family the controller's /metrics declares, as named there (counters with
    ``_total``): a LinkerdConfigController built as the unit tests build it, plus leader
    election's, in one registry."""
    registry = CollectorRegistry()
    LinkerdConfigController(SimpleNamespace(registry=registry), recorder=None)  # type: ignore[arg-type]
    LeaderElectionMetrics.of(registry)
    text = generate_latest(registry).decode()
    return set(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))


def test_the_chart_carries_the_same_rules_file() -> None:
    """Helm reads only files inside the chart: `make generate` copies it, byte for byte."""
    assert CHART_COPY.read_text() == RULE_FILE.read_text(), "run `make generate` and commit"


def test_it_is_one_prometheus_rule_in_the_controllers_namespace() -> None:
    rule = prometheus_rule()
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert (rule["metadata"]["name"], rule["metadata"]["namespace"]) == (
        "linkerd-config",
        "linkerd",
    )


def test_every_metric_a_rule_reads_is_one_the_controller_exports() -> None:
    families = controller_families()
    assert "linkerd_config_configmap_reverts_total" in families  # the family is found at all
    for alert, rule in alerting_rules().items():
        read = set(OURS.findall(rule["expr"]))
        assert read, f"{alert} reads none of the controller's metrics"
        assert read <= families, f"{alert} reads {sorted(read - families)}, which nothing exports"


def test_the_no_leader_rules_select_the_default_lease() -> None:
    lease = parse([], env={}).lease_name
    for alert in ("LinkerdConfigNoLeader", "LinkerdConfigControllerDown"):
        assert f'leader_election_master_status{{name="{lease}"}}' in alerting_rules()[alert]["expr"]


def test_every_alert_has_a_severity_a_summary_and_a_description() -> None:
    for alert, rule in alerting_rules().items():
        assert rule["labels"]["severity"] in {"warning", "critical"}, alert
        assert set(rule["annotations"]) == {"summary", "description"}, alert


def test_alerts_about_one_linkerdconfig_name_it_and_a_stopped_rollout_says_how_to_resume() -> None:
    resume = (
        "kubectl annotate linkerdconfig {{ $labels.linkerdconfig }} "
        f"{RESUME_ANNOTATION}=$(date +%s) --overwrite"
    )
    for alert, rule in alerting_rules().items():
        if "by (linkerdconfig)" not in rule["expr"]:
            continue
        for key, text in rule["annotations"].items():
            assert "{{ $labels.linkerdconfig }}" in text, (alert, key)
        if alert in ("LinkerdConfigRolloutHalted", "LinkerdConfigRolloutRolledBack"):
            assert resume in rule["annotations"]["description"], alert
