"""The NetworkPolicy (manifests/components/network-policy, the chart's networkPolicy.*) admits
what the README says and nothing else, and says it about the pods and ports that exist.

No CNI runs on the local control plane, so what is checked is the object: it selects the
Deployment's pods; every port it names is a container port of the pod (a named port that
does not exist admits nothing, silently); the webhook port is open only to the CIDRs given;
the health port has no rule (the kubelet's probes come from the pod's node, which
NetworkPolicy always allows); and the API server accepts it (tests/integration/
test_manifests.py applies the overlay, test_helm_chart.py proves the chart renders the same).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.binaries import ensure_binaries, ensure_helm

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "manifests" / "chart"
PLACEHOLDER = "192.0.2.0/24"
LINKERD_PROXY_ADMIN = 4191

Obj = dict[str, Any]


def run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, env=env)


def rendered_overlay(overlay: str) -> list[Obj]:
    done = run(
        [
            str(ensure_binaries(("kubectl",))["kubectl"]),
            "kustomize",
            str(REPO / "manifests" / overlay),
        ]
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.fixture(scope="module")
def helm_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    home = tmp_path_factory.mktemp("helm-home")
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        **{
            v: str(home / v.lower())
            for v in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME")
        },
    }


def chart(env: dict[str, str], *values: str) -> subprocess.CompletedProcess[str]:
    args = [a for v in values for a in ("--set", v)]
    return run(
        [str(ensure_helm()), "template", "linkerd-config", str(CHART), "-n", "linkerd", *args], env
    )


def objects(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if d]


def the(objs: list[Obj], kind: str) -> Obj:
    (found,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == "linkerd-config"]
    return found


def check_policy(objs: list[Obj], cidrs: list[str], *, webhooks: bool = True) -> None:
    policy = the(objs, "NetworkPolicy")
    pod = the(objs, "Deployment")["spec"]["template"]
    labels = pod["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector and selector.items() <= labels.items(), (selector, labels)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    rules = policy["spec"]["ingress"]
    admitted: dict[str | int, list[Obj]] = {}
    for rule in rules:
        for port in rule["ports"]:
            assert port["protocol"] == "TCP"
            name = port["port"]
            assert name in ports or name == LINKERD_PROXY_ADMIN, f"no container port {name}"
            assert name not in admitted, f"port {name} in two rules"
            admitted[name] = rule.get("from", [])
    assert "health" not in admitted  # kubelet probes: node traffic, always allowed
    assert ports["health"] not in admitted
    if webhooks:
        assert admitted["webhook"] == [{"ipBlock": {"cidr": c}} for c in cidrs]
    else:
        assert "webhook" not in admitted
    # Prometheus' namespace and linkerd-viz's, by their kubernetes.io/metadata.name.
    metrics_from = admitted["metrics"]
    assert admitted[LINKERD_PROXY_ADMIN] == metrics_from
    names = {
        peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        for peer in metrics_from
    }
    assert names == {"monitoring", "linkerd-viz"}
    assert all(set(peer) == {"namespaceSelector"} for peer in metrics_from)


def test_the_overlay_admits_the_webhook_port_only_from_the_api_server() -> None:
    objs = rendered_overlay("network-policy")
    check_policy(objs, [PLACEHOLDER])
    # The default overlay has none: the component is what adds it.
    assert not any(o["kind"] == "NetworkPolicy" for o in rendered_overlay("default"))


@pytest.mark.parametrize("secure", [False, True], ids=["metrics", "secure-metrics"])
def test_the_chart_option_admits_what_the_component_admits(
    helm_env: dict[str, str], secure: bool
) -> None:
    cidrs = ["10.0.0.1/32", "10.0.0.2/32"]
    done = chart(
        helm_env,
        "networkPolicy.enabled=true",
        "networkPolicy.apiServerCIDRs={" + ",".join(cidrs) + "}",
        f"metrics.secure={str(secure).lower()}",
    )
    assert done.returncode == 0, done.stderr
    check_policy(objects(done.stdout), cidrs)
    # Off by default.
    default = chart(helm_env)
    assert default.returncode == 0, default.stderr
    assert not any(o["kind"] == "NetworkPolicy" for o in objects(default.stdout))


def test_the_chart_refuses_a_policy_without_the_api_servers_addresses(
    helm_env: dict[str, str],
) -> None:
    """An empty list would render a webhook rule admitting no one: every LinkerdConfig write
    refused. Say so at install instead."""
    done = chart(helm_env, "networkPolicy.enabled=true")
    assert done.returncode != 0
    assert "networkPolicy.apiServerCIDRs" in done.stderr, done.stderr
    # Without webhooks there is no webhook port to admit anyone to, and nothing to name.
    plain = chart(helm_env, "networkPolicy.enabled=true", "webhook.enabled=false")
    assert plain.returncode == 0, plain.stderr
    check_policy(objects(plain.stdout), [], webhooks=False)
