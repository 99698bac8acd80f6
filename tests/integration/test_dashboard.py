"""Every panel of manifests/grafana/linkerd-config.json returns data from a real Prometheus.

The controller runs in-process as ``linkerd-config run`` would (leader election, its webhooks
registered on the API server, metrics served on a port) beside Linkerd's real proxy injector;
Prometheus (the pinned release, built from its Go module like the control plane) scrapes it
every second. The scenario makes each panel mean something: the leader elected, an invalid
LinkerdConfig refused and a minimal one defaulted by the webhooks, the ConfigMap written, and
an opted-in Deployment restarted onto the new proxy. Then the dashboard's variables are
resolved as Grafana resolves them (their ``label_values`` queries must find this controller)
and every target of every panel, read from the JSON, is asked as a Grafana time-series panel
asks (a range query over the scenario): each must return a series with a value. Reconcile
errors do not happen here; their panels are satisfied by the zero-valued series every counter
has from start-up.

The same Prometheus evaluates the alerting rules (manifests/components/alerts, as shipped) every
second, on the real states they are about: while someone else holds the Lease the controller
is scraped but does not lead, and LinkerdConfigNoLeader's expression returns it (the alert
pending); once it leads and the scenario ran, every rule is healthy, the series each rule
reads are scraped with the labels it uses, and no alert is pending or firing; a manual edit of
linkerd-config made one more time than LinkerdConfigConfigMapRevertedRepeatedly allows, each
reverted, fires it for this LinkerdConfig; and once the controller has stopped,
LinkerdConfigControllerDown's absent() returns (pending) while LinkerdConfigNoLeader does not.

A control plane of its own: Linkerd's names (``linkerd-config``, the injector's webhook
configuration) and ours exist once per cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from devcluster.cluster import LocalControlPlane, free_port
from devcluster.prometheus import Prometheus, PrometheusError, ScrapeJob
from linkerd_config.app import build, running
from linkerd_config.kube.certs import write_serving_pair
from linkerd_config.kube.client import MERGE_PATCH, KubeClient
from linkerd_config.kube.leader import micro_time
from linkerd_config.kube.resource import (
    CONFIGMAPS,
    LEASES,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
)
from linkerd_config.linkerd.admission.webhooks import (
    MUTATE_PATH,
    VALIDATE_PATH,
    webhook_configurations,
)
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from linkerd_config.settings import parse
from tests.support import alert_rules, dashboard, scenario
from tests.support.samples import sample
from tests.support.waiting import eventually
from tests.support.webhook_probe import webhook_in_effect

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
JOB = "linkerd/linkerd-config"
"""The job label a PodMonitor named linkerd-config in namespace linkerd gives (the default
overlay's); the dashboard must find it through its variables, not be told."""
SCRAPE_INTERVAL = 1.0
STEP = 1.0
RATE_INTERVAL = max(STEP + SCRAPE_INTERVAL, 4 * SCRAPE_INTERVAL)
"""Grafana's ``$__rate_interval`` for a data source whose scrape interval is set to ours."""
NS = "dashboard"
CONFIG = "edge-19.12.3"


@contextlib.asynccontextmanager
async def prometheus_scraping(target: str, rules: Path) -> AsyncIterator[Prometheus]:
    prometheus = Prometheus(
        [ScrapeJob(JOB, [target])], scrape_interval=SCRAPE_INTERVAL, rule_files=[rules]
    )
    await asyncio.to_thread(prometheus.start)
    try:
        yield prometheus
    finally:
        await asyncio.to_thread(prometheus.stop)


def collection(config: Obj) -> str:
    resources = (MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS)
    return next(r for r in resources if r.kind == config["kind"]).path()


async def ready(kube: KubeClient) -> Obj | None:
    obj = await kube.request("GET", LINKERD_CONFIGS.path(name=CONFIG))
    conditions = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
    current = obj.get("status", {}).get("observedGeneration") == obj["metadata"]["generation"]
    return obj if current and conditions.get("Ready", {}).get("status") == "True" else None


def resolve_variables(prometheus: Prometheus, board: Obj) -> dict[str, str]:
    """Each template variable's value as Grafana would pick it: a query variable's
    ``label_values`` asked of Prometheus (it must find something), all of its values for a
    multi-value or include-All variable, else the first."""
    values: dict[str, str] = {}
    for name, variable in dashboard.variables(board).items():
        if variable["type"] == "datasource":
            continue
        assert variable["type"] == "query", f"variable {name}: type {variable['type']} unhandled"
        selector, label = dashboard.label_values_query(
            dashboard.substitute(variable["definition"], values)
        )
        found = sorted(prometheus.label_values(label, selector))
        assert found, f"variable {name}: {variable['definition']} found nothing"
        values[name] = dashboard.format_value(variable, found)
    return values


def has_value(series: list[Obj]) -> bool:
    return any(not math.isnan(float(v)) for s in series for _, v in s.get("values", []))


def check_panels(prometheus: Prometheus, board: Obj, start: float, end: float) -> int:
    values = resolve_variables(prometheus, board)
    assert values["job"] == JOB, values  # found by the variable's query, not told
    values |= {
        "__rate_interval": f"{RATE_INTERVAL:g}s",
        "__interval": f"{STEP:g}s",
        "__range": f"{math.ceil(end - start)}s",
    }
    failures, checked = [], 0
    for panel, target in dashboard.targets(board):
        expr = dashboard.substitute(target["expr"], values)
        try:
            series = prometheus.query_range(expr, start, end, STEP)
        except RuntimeError as exc:
            failures.append(f"{panel['title']!r} [{target['refId']}]: {exc}")
            continue
        checked += 1
        if not has_value(series):
            failures.append(f"{panel['title']!r} [{target['refId']}]: no data for {expr}")
    assert not failures, "panels without data:\n" + "\n".join(failures)
    return checked


def instant(prometheus: Prometheus, expr: str) -> float:
    result = prometheus.query(expr)
    assert len(result) == 1, (expr, result)
    return float(result[0]["value"][1])


# -- the alerting rules, on the real controller's states ------------------------------------

LEASE = parse([], env={}).lease_name
"""The controller's default --leader-election-id (the Lease the no-leader rules select)."""
ELSEWHERE = "someone-else"
REVERTED = "LinkerdConfigConfigMapRevertedRepeatedly"


async def hold_lease(kube: KubeClient, namespace: str) -> None:
    """Another candidate holds the controller's Lease, freshly renewed, for an hour."""
    now = micro_time()
    spec = {"holderIdentity": ELSEWHERE, "leaseDurationSeconds": 3600,
            "acquireTime": now, "renewTime": now, "leaseTransitions": 0}  # fmt: skip
    body = {"metadata": {"name": LEASE, "namespace": namespace}, "spec": spec}
    await kube.request("POST", LEASES.path(namespace), body=body)


async def release_lease(kube: KubeClient, namespace: str) -> None:
    """What a holder's graceful stop does: no holder, so a candidate takes it at once."""
    body = {"spec": {"holderIdentity": ""}}
    await kube.request("PATCH", LEASES.path(namespace, LEASE), body=body, content_type=MERGE_PATCH)


async def firing(prometheus: Prometheus, alert: str, state: str) -> list[Obj] | None:
    """The alert's instances once one is in ``state`` (pending or firing), else None."""
    found = await asyncio.to_thread(alert_rules.active, prometheus, alert)
    return found if any(a["state"] == state for a in found) else None


async def no_leader_seen(prometheus: Prometheus) -> None:
    """Scraped, not leading: the no-leader rule's expression returns the Lease (its value 0),
    and Prometheus holds the alert pending (``for`` not yet over)."""
    alert = "LinkerdConfigNoLeader"
    found = await eventually(
        lambda: firing(prometheus, alert, "pending"), timeout=30, what=f"{alert} pending"
    )
    assert [a["labels"]["name"] for a in found] == [LEASE], found
    result = await asyncio.to_thread(prometheus.query, alert_rules.expression(alert))
    assert [(r["metric"], r["value"][1]) for r in result] == [({"name": LEASE}, "0")], result


async def rules_healthy_and_quiet(prometheus: Prometheus, selector: str) -> None:
    """Every rule evaluated without error; the series each rule reads scraped from the
    controller, with the labels it selects by; and, the controller leading without errors,
    no alert pending or firing."""

    def evaluated() -> list[Obj] | None:
        rules = [r for g in prometheus.rule_groups() for r in g["rules"]]
        return rules if rules and all(r["health"] != "unknown" for r in rules) else None

    rules = await eventually(
        lambda: asyncio.to_thread(evaluated), timeout=30, what="every rule evaluated"
    )
    assert sorted(r["name"] for r in rules) == sorted(alert_rules.alerting_rules())
    unhealthy = [(r["name"], r["health"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not unhealthy, unhealthy
    errors = f'controller_runtime_reconcile_errors_total{{{selector}, controller="linkerdconfig"}}'
    read: dict[str, str | None] = {  # None: any value (a retried error would not alert)
        f'leader_election_master_status{{{selector}, name="{LEASE}"}}': "1",
        errors: None,
        f'linkerd_config_rollout_halted{{{selector}, linkerdconfig="{CONFIG}"}}': "0",
        f'linkerd_config_rollout_rolled_back{{{selector}, linkerdconfig="{CONFIG}"}}': "0",
        f'linkerd_config_configmap_reverts_total{{{selector}, linkerdconfig="{CONFIG}"}}': "0",
    }
    for series, value in read.items():
        result = await asyncio.to_thread(prometheus.query, series)
        assert len(result) == 1, (series, result)
        assert value in (None, result[0]["value"][1]), (series, result)
    for alert in alert_rules.alerting_rules():
        assert await asyncio.to_thread(alert_rules.active, prometheus, alert) == [], alert


async def reverted_again_and_again(kube: KubeClient, prometheus: Prometheus) -> None:
    """One manual edit more than the rule allows, each reverted by the controller: the alert
    fires, for this LinkerdConfig."""
    edits = int(alert_rules.threshold(REVERTED)) + 1
    path = CONFIGMAPS.path("linkerd", "linkerd-config")
    good = (await kube.request("GET", path))["data"]["proxy"]
    edited = good.replace("edge-19.12.3", "edge-19.12.1")
    assert edited != good
    for _ in range(edits):
        body = {"data": {"proxy": edited}}
        await kube.request("PATCH", path, body=body, content_type=MERGE_PATCH)

        async def reverted() -> bool:
            return bool((await kube.request("GET", path))["data"]["proxy"] == good)

        await eventually(reverted, timeout=15, interval=0.05, what="manual edit reverted")
    found = await eventually(
        lambda: firing(prometheus, REVERTED, "firing"), timeout=30, what=f"{REVERTED} firing"
    )
    assert [a["labels"]["linkerdconfig"] for a in found] == [CONFIG], found
    assert CONFIG in found[0]["annotations"]["summary"], found


async def controller_down_seen(prometheus: Prometheus) -> None:
    """Stopped: its series go stale, absent() returns, the alert is pending; the no-leader
    rule, about replicas that are scraped, says nothing."""
    alert = "LinkerdConfigControllerDown"
    found = await eventually(
        lambda: firing(prometheus, alert, "pending"), timeout=30, what=f"{alert} pending"
    )
    assert [a["labels"]["name"] for a in found] == [LEASE], found
    result = await asyncio.to_thread(prometheus.query, alert_rules.expression(alert))
    assert [r["metric"] for r in result] == [{"name": LEASE}], result
    assert await asyncio.to_thread(alert_rules.active, prometheus, "LinkerdConfigNoLeader") == []


async def test_every_panel_returns_data_from_a_real_prometheus(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, tmp_path: Path
) -> None:
    cp, kube = own_control_plane, own_kube
    began = time.monotonic()
    metrics_port, webhook_port = free_port(), free_port()
    board = dashboard.load()
    rules = alert_rules.write_rules_file(tmp_path)
    async with prometheus_scraping(f"127.0.0.1:{metrics_port}", rules) as prometheus:
        await scenario.install_crd(kube)
        await scenario.install_linkerd_edge_19_12_1(kube)
        async with scenario.linkerd_injector(cp):
            before = await scenario.meshed_namespace(kube, NS, ["web"], replicas=1)
            assert set(scenario.proxy_versions(before).values()) == {"edge-19.12.1"}

            cert_dir = tmp_path / "webhook"
            ca_pem = write_serving_pair(cert_dir, ["localhost"], ["127.0.0.1"])
            settings = scenario.local_settings(
                cp.kubeconfig,
                "--metrics-bind-address", f"127.0.0.1:{metrics_port}",
                "--enable-webhooks", "true",
                "--webhook-bind-address", f"127.0.0.1:{webhook_port}",
                "--webhook-cert-dir", str(cert_dir),
                "--leader-elect", "true",
                "--identity", "dashboard",
            )  # fmt: skip
            # Someone else leads at first: the no-leader rule on a real follower.
            await hold_lease(kube, settings.namespace)
            app = await build(settings, RolloutOptions(restart_interval=0.5, injector_wait=30.0))
            async with running(app):
                # Scraped before anything happens, so the series show the scenario unfold.
                await asyncio.to_thread(prometheus.wait_scraped, JOB)
                start = time.time()
                await no_leader_seen(prometheus)
                await release_lease(kube, settings.namespace)
                assert app.admission is not None
                await asyncio.wait_for(app.admission.started.wait(), 30)
                for config in webhook_configurations(ca_pem, f"https://127.0.0.1:{webhook_port}"):
                    await scenario.create(kube, collection(config), config)
                await eventually(
                    lambda: asyncio.sleep(0, result=app.manager.leading), timeout=30, what="leader"
                )
                await eventually(
                    lambda: webhook_in_effect(kube), timeout=30, what="webhook refusing"
                )
                # Only the fields a user states: the mutating webhook fills in the rest.
                minimal = sample("edge_19.12.3_use_webhook_defaults.yaml")
                await kube.request("POST", LINKERD_CONFIGS.path(), body=minimal)
                status = (await eventually(lambda: ready(kube), timeout=60, what="Ready"))["status"]
                assert status["restartedWorkloads"] == 1, status

                selector = f'job="{JOB}"'
                restarted = f"sum(linkerd_config_workload_restarts_total{{{selector}}})"

                async def restart_scraped() -> bool:
                    return await asyncio.to_thread(instant, prometheus, restarted) >= 1

                await eventually(restart_scraped, timeout=15, what="the restart scraped")
                # Two scrapes more, so every rate window can close on the final state.
                settled = time.time() + 2 * SCRAPE_INTERVAL
                last_scrape = f"max(timestamp(up{{{selector}}}))"

                async def scraped_since() -> bool:
                    return await asyncio.to_thread(instant, prometheus, last_scrape) >= settled

                await eventually(scraped_since, timeout=15, what="two more scrapes")
                end = time.time()

                # The scenario did what the panels are about, as Prometheus saw it.
                leader = f"max(leader_election_master_status{{{selector}}})"
                assert await asyncio.to_thread(instant, prometheus, leader) == 1
                for path in (MUTATE_PATH, VALIDATE_PATH):
                    calls = (
                        "sum(controller_runtime_webhook_requests_total"
                        f'{{{selector}, webhook="{path}", code="200"}})'
                    )
                    assert await asyncio.to_thread(instant, prometheus, calls) >= 1, path
                successes = (
                    "sum(controller_runtime_reconcile_total"
                    f'{{{selector}, result=~"success|requeue_after"}})'
                )
                assert await asyncio.to_thread(instant, prometheus, successes) >= 1

                checked = await asyncio.to_thread(check_panels, prometheus, board, start, end)
                await rules_healthy_and_quiet(prometheus, selector)
                await reverted_again_and_again(kube, prometheus)
            await controller_down_seen(prometheus)
    titles = {p["title"] for p, _ in dashboard.targets(board)}
    print(
        f"\n{checked} queries of {len(titles)} panels returned data over {end - start:.1f}s "
        f"of scenario; {time.monotonic() - began:.1f}s in all"
    )


def test_prometheus_answers_reports_bad_queries_and_leaves_nothing_behind() -> None:
    with Prometheus([ScrapeJob("nothing", ["127.0.0.1:1"])]) as prometheus:
        workdir, url = prometheus.workdir, prometheus.url
        assert prometheus.query("1 + 1")[0]["value"][1] == "2"
        with pytest.raises(PrometheusError, match="parse error"):
            prometheus.query("rate(up[")
    assert not workdir.exists()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{url}/-/ready", timeout=2)
