"""The alerting rules (manifests/components/alerts/prometheus_rule.yaml): every alert proven by
Prometheus's own rule engine, and the PrometheusRule the kustomize component and the chart
render accepted by the Prometheus Operator's real CRD.

* ``promtool test rules`` (the pinned release's, built from its Go module like the
  control plane): for each alert, series in which it fires (with its labels and its annotations as
  Prometheus renders them, naming the LinkerdConfig) and series in which it must not. The
  metrics are the controller's names and labels; test_dashboard.py shows the live controller
  exports them.
* The component (added to the default overlay, as a user adds it) and the chart with
  ``alerts.enabled=true`` render the same PrometheusRule; each is created on the local control
  plane under the operator's own CRD (from its Go module, ``devcluster.third_party_crds``)
  and read back unchanged (nothing pruned, so no field the CRD does not know), and a rule
  the schema forbids is refused (the schema is really applied).
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.binaries import ensure_helm
from devcluster.cluster import LocalControlPlane
from devcluster.prometheus import find_promtool
from devcluster.third_party_crds import crd_path
from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.resource import CRDS, NAMESPACES, ApiResource
from tests.support.alert_rules import REPO, alerting_rules, write_rules_file
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
TOOL_TIMEOUT = 120.0
MANIFESTS = REPO / "manifests"
PROMETHEUS_RULES = ApiResource("monitoring.coreos.com", "v1", "prometheusrules", "PrometheusRule")

# -- the series: the controller's metric names and labels, two replicas of one Deployment ----

LEASE = 'name="linkerd-config-leader"'
JOB = 'job="linkerd/linkerd-config"'
A, B = 'instance="10.0.0.1:8080"', 'instance="10.0.0.2:8080"'
NAME = "linkerd"
"""The LinkerdConfig the series are about."""


def leader(replica: str) -> str:
    return f"leader_election_master_status{{{LEASE}, {JOB}, {replica}}}"


def gauge(metric: str, replica: str) -> str:
    return f'{metric}{{linkerdconfig="{NAME}", {JOB}, {replica}}}'


def errors(replica: str) -> str:
    return (
        f'controller_runtime_reconcile_errors_total{{controller="linkerdconfig", {JOB}, {replica}}}'
    )


def per_minute(values: list[int]) -> str:
    return " ".join(map(str, values))


def case(name: str, series: dict[str, str], evals: list[tuple[str, list[Obj]]]) -> Obj:
    """One promtool test: ``series`` sampled every minute; at each eval time, the alerts
    firing, as their labels beside the rule's own (an empty list: none firing)."""
    return {"name": name, "series": series, "evals": evals}


def halted_like(metric: str) -> list[Obj]:
    """A halted / rolled-back gauge: fires for the leader's 1, never for a former leader's
    stale 1 (the gauge is set by the replica that leads)."""
    firing = [{"linkerdconfig": NAME}]
    return [
        case(
            "set to 1 by the leader: fires after 1m",
            {leader(A): "1x20", leader(B): "0x20", gauge(metric, A): "0 0 1x18"},
            [("2m", []), ("4m", firing), ("20m", firing)],
        ),
        case(
            "a former leader's stale 1 after the new leader reset it: not after the handover",
            {
                leader(A): "1 1 1 0x17",
                gauge(metric, A): "1x20",
                leader(B): "0 0 0 1x17",
                gauge(metric, B): "_ _ _ 0x17",
            },
            [("2m", firing), ("5m", []), ("20m", [])],
        ),
        case(
            "0 everywhere: never",
            {leader(A): "1x20", gauge(metric, A): "0x20", gauge(metric, B): "0x20"},
            [("1m", []), ("20m", [])],
        ),
    ]


REVERTS = "linkerd_config_configmap_reverts_total"

CASES: dict[str, list[Obj]] = {
    "LinkerdConfigRolloutHalted": halted_like("linkerd_config_rollout_halted"),
    "LinkerdConfigRolloutRolledBack": halted_like("linkerd_config_rollout_rolled_back"),
    "LinkerdConfigConfigMapRevertedRepeatedly": [
        case(
            "a revert every minute (the series exists from the first write, at 0)",
            {gauge(REVERTS, A): "0+1x30"},
            [("3m", []), ("5m", [{"linkerdconfig": NAME}]), ("30m", [{"linkerdconfig": NAME}])],
        ),
        case(
            "two by the old leader, two by the new one within 15m: counted together",
            {gauge(REVERTS, A): "0 1 2 2x27", gauge(REVERTS, B): "_ _ _ 0 1 2 2x24"},
            [("4m", []), ("6m", [{"linkerdconfig": NAME}])],
        ),
        case(
            "one revert every 10 minutes (say, each `helm upgrade`): never more than 3 in 15m",
            {gauge(REVERTS, A): "0x9 1x9 2x9 3x9 4x9 5x9"},
            [("15m", []), ("30m", []), ("45m", []), ("59m", [])],
        ),
    ],
    "LinkerdConfigReconcileErrors": [
        case(
            "failing for good: retried every 17 minutes (past the 1000 s backoff cap)",
            {errors(A): per_minute([0] + [1 + (t - 1) // 17 for t in range(1, 91)])},
            [
                ("20m", []),
                ("30m", [{"controller": "linkerdconfig"}]),
                ("90m", [{"controller": "linkerdconfig"}]),
            ],
        ),
        case(
            "one burst of errors, then successes",
            {errors(A): "0 12 12x88"},
            [("10m", []), ("21m", []), ("26m", []), ("30m", []), ("60m", [])],
        ),
        case(
            "an error now and then, 25 minutes apart",
            {errors(A): per_minute([t // 25 for t in range(0, 91)])},
            [("30m", []), ("60m", []), ("90m", [])],
        ),
    ],
    "LinkerdConfigNoLeader": [
        case(
            "replicas scraped, none leading",
            {leader(A): "0x20", leader(B): "0x20"},
            [("4m", []), ("6m", [{"name": "linkerd-config-leader"}])],
        ),
        case(
            "a handover: two minutes without a leader",
            {leader(A): "1 1 1 0x17", leader(B): "0 0 0 0 0 1x15"},
            [("4m", []), ("10m", []), ("20m", [])],
        ),
        case(
            "no replica scraped at all: LinkerdConfigControllerDown's, not this",
            {'up{job="other"}': "1x20"},
            [("10m", []), ("20m", [])],
        ),
    ],
    "LinkerdConfigControllerDown": [
        case(
            "never scraped",
            {'up{job="other"}': "1x20"},
            [("4m", []), ("6m", [{"name": "linkerd-config-leader"}])],
        ),
        case(
            "scraped, then gone (its series marked stale)",
            {leader(A): "1x4 stale", leader(B): "0x4 stale"},
            [("9m", []), ("11m", [{"name": "linkerd-config-leader"}])],
        ),
        case(
            "scraped, no leader: LinkerdConfigNoLeader's, not this",
            {leader(A): "0x20"},
            [("10m", []), ("20m", [])],
        ),
    ],
}


def rendered_annotations(rule: Obj, labels: dict[str, str]) -> dict[str, str]:
    """The rule's annotations with each ``{{ $labels.x }}`` replaced by the alert's label:
    what Prometheus's template engine must render (promtool compares them exactly)."""
    out = {}
    for key, text in rule.get("annotations", {}).items():
        rendered = re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", lambda m: labels[m[1]], text)
        assert "{{" not in rendered, f"{rule['alert']}.{key}: a template this test cannot check"
        out[key] = rendered
    return out


def promtool_test(rules_file: Path, alert: str) -> Obj:
    rule = alerting_rules()[alert]
    tests = []
    for c in CASES[alert]:
        checks = []
        for at, firing in c["evals"]:
            expected = []
            for labels in firing:
                every = {**labels, **rule.get("labels", {})}
                expected.append(
                    {"exp_labels": every, "exp_annotations": rendered_annotations(rule, every)}
                )
            checks.append({"eval_time": at, "alertname": alert, "exp_alerts": expected})
        tests.append(
            {
                "name": f"{alert}: {c['name']}",
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in c["series"].items()],
                "alert_rule_test": checks,
            }
        )
    return {"rule_files": [str(rules_file)], "evaluation_interval": "1m", "tests": tests}


@pytest.fixture(scope="module")
def promtool() -> str:
    return str(find_promtool())  # none given, cached or buildable: fails, saying why


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_rules_file(tmp_path_factory.mktemp("rules"))


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT, check=False)


def test_promtool_accepts_the_rules(promtool: str, rules_file: Path) -> None:
    proc = run([promtool, "check", "rules", str(rules_file)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alerting_rules())} rules found" in proc.stdout + proc.stderr


def test_every_alert_has_cases_that_fire_and_cases_that_do_not() -> None:
    assert set(CASES) == set(alerting_rules())
    for alert, cases in CASES.items():
        evals = [firing for c in cases for _, firing in c["evals"]]
        assert any(evals), f"{alert}: no case in which it fires"
        assert not all(evals), f"{alert}: no case in which it must not fire"


@pytest.mark.parametrize("alert", sorted(CASES))
def test_promtool_fires_each_alert_exactly_when_it_should(
    promtool: str, rules_file: Path, tmp_path: Path, alert: str
) -> None:
    if alert not in alerting_rules():
        pytest.fail(f"{alert} is not in {rules_file.name}")
    tests = tmp_path / f"{alert}.test.yml"
    tests.write_text(yaml.safe_dump(promtool_test(rules_file, alert), sort_keys=False))
    proc = run([promtool, "test", "rules", str(tests)])
    assert proc.returncode == 0, f"promtool test rules {alert}:\n{proc.stdout}{proc.stderr}"
    assert "SUCCESS" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_promtool_would_notice_a_wrong_expectation(
    promtool: str, rules_file: Path, tmp_path: Path
) -> None:
    """The harness can fail: the halted alert expected from a former leader's stale gauge."""
    spec = promtool_test(rules_file, "LinkerdConfigRolloutHalted")
    stale = spec["tests"][1]
    assert "former leader" in stale["name"]
    stale["alert_rule_test"][-1]["exp_alerts"] = copy.deepcopy(
        spec["tests"][0]["alert_rule_test"][-1]["exp_alerts"]
    )
    tests = tmp_path / "wrong.test.yml"
    tests.write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = run([promtool, "test", "rules", str(tests)])
    assert proc.returncode != 0, proc.stdout


# -- the manifests: the component and the chart, under the real PrometheusRule CRD ----------


def kubectl_kustomize(cp: LocalControlPlane, folder: Path) -> list[Obj]:
    proc = run([str(cp.binary("kubectl")), "kustomize", str(folder)])
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def one_rule(objs: list[Obj]) -> Obj:
    rules = [o for o in objs if o["kind"] == "PrometheusRule"]
    assert len(rules) == 1, [o["kind"] for o in objs]
    return rules[0]


@pytest.fixture(scope="module")
def from_component(
    control_plane: LocalControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Obj:
    """The default overlay with the component added, as a user's kustomization adds it."""
    folder = tmp_path_factory.mktemp("with-alerts")
    relative = os.path.relpath(MANIFESTS, folder)
    (folder / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [f"{relative}/default"],
                "components": [f"{relative}/components/alerts"],
            }
        )
    )
    return one_rule(kubectl_kustomize(control_plane, folder))


@pytest.fixture(scope="module")
def helm() -> Iterator[list[str]]:
    yield [str(ensure_helm())]


def helm_template(helm: list[str], *values: str) -> list[Obj]:
    args = [a for v in values for a in ("--set", v)]
    chart = str(MANIFESTS / "chart")
    proc = run([*helm, "template", "linkerd-config", chart, "-n", "linkerd", *args])
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@pytest.fixture(scope="module")
def from_chart(helm: list[str]) -> Obj:
    return one_rule(helm_template(helm, "alerts.enabled=true", "alerts.labels.release=prom"))


def test_the_chart_renders_no_rule_by_default(helm: list[str]) -> None:
    assert not [o for o in helm_template(helm) if o["kind"] == "PrometheusRule"]


def test_the_component_and_the_chart_render_the_same_rules(
    from_component: Obj, from_chart: Obj
) -> None:
    assert from_chart["spec"] == from_component["spec"]
    assert (
        from_chart["spec"]["groups"]
        == yaml.safe_load(
            (MANIFESTS / "components" / "alerts" / "prometheus_rule.yaml").read_text()
        )["spec"]["groups"]
    )
    for rule in (from_component, from_chart):
        assert (rule["metadata"]["name"], rule["metadata"]["namespace"]) == (
            "linkerd-config",
            "linkerd",
        )
    # The chart's labels: its own, and the one a Prometheus's ruleSelector asks for.
    labels = from_chart["metadata"]["labels"]
    assert labels["release"] == "prom"
    assert (
        labels["app.kubernetes.io/name"]
        == from_component["metadata"]["labels"]["app.kubernetes.io/name"]
    )


@pytest.fixture(scope="module")
async def real_crd(kube: KubeClient) -> AsyncIterator[Obj]:
    """The operator's PrometheusRule CRD, created on the control plane (and removed after)."""
    docs = [d for d in yaml.safe_load_all(crd_path("prometheusrules").read_text()) if d]
    (crd,) = docs
    name = crd["metadata"]["name"]
    created = False
    try:
        await kube.request("POST", CRDS.path(), body=crd, fenced=False)
        created = True
    except ApiError as exc:
        if not exc.conflict:
            raise
        existing = await kube.request("GET", CRDS.path(name=name))
        assert existing["spec"]["versions"] == crd["spec"]["versions"], (
            f"{name} exists on the control plane and is not the operator's"
        )

    async def served() -> bool:
        await kube.request("GET", PROMETHEUS_RULES.path())
        return True

    await eventually(served, timeout=30, what=f"{name} served")
    try:
        yield crd
    finally:
        if created:
            with contextlib.suppress(ApiError):
                await kube.request("DELETE", CRDS.path(name=name), fenced=False)


async def created_and_read_back(kube: KubeClient, rule: Obj, namespace: str) -> Obj:
    with contextlib.suppress(ApiError):
        await kube.request(
            "POST", NAMESPACES.path(), body={"metadata": {"name": namespace}}, fenced=False
        )
    body = copy.deepcopy(rule)
    body["metadata"]["namespace"] = namespace
    path = PROMETHEUS_RULES.path(namespace)
    with contextlib.suppress(ApiError):
        await kube.request("DELETE", f"{path}/{body['metadata']['name']}", fenced=False)
    await kube.request("POST", path, body=body, fenced=False)
    return await kube.request("GET", f"{path}/{body['metadata']['name']}")


@pytest.mark.parametrize("source", ["component", "chart"])
async def test_the_real_crd_takes_the_rule_unchanged(
    kube: KubeClient, real_crd: Obj, from_component: Obj, from_chart: Obj, source: str
) -> None:
    rule = from_component if source == "component" else from_chart
    stored = await created_and_read_back(kube, rule, f"alerts-{source}")
    assert stored["spec"] == rule["spec"]  # nothing pruned: every field is one the CRD knows
    assert stored["metadata"]["labels"] == rule["metadata"]["labels"]


async def test_the_real_crd_refuses_what_its_schema_forbids(
    kube: KubeClient, real_crd: Obj, from_component: Obj
) -> None:
    broken = copy.deepcopy(from_component)
    broken["metadata"]["name"] = "broken"
    broken["spec"]["groups"][0]["rules"][0]["for"] = "five minutes"
    with pytest.raises(ApiError) as refused:
        await created_and_read_back(kube, broken, "alerts-component")
    assert refused.value.status == 422, refused.value
    assert "for" in refused.value.message, refused.value.message
