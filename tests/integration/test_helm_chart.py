"""The Helm chart (manifests/chart), with the pinned ``helm`` built from Go modules.

One source of truth, proven: for each kustomize overlay, the chart with the matching values
renders the same objects, field for field (Helm's bookkeeping labels aside). Then `helm lint
--strict`, the certificate Helm generates when neither cert-manager nor your own is used, and
a real `helm install` / `upgrade` / `uninstall` on a local control plane of the test's own.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.binaries import ensure_helm
from devcluster.cluster import LocalControlPlane

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "manifests" / "chart"
HELM_TIMEOUT = 180.0
HELM_LABELS = frozenset(
    {
        "helm.sh/chart",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
    }
)
HELM_ANNOTATIONS = frozenset({"helm.sh/resource-policy"})

# The values that make the chart render what each overlay renders (kustomize's image tag is
# "latest"; the chart's default is its appVersion).
OVERLAY_VALUES: dict[str, list[str]] = {
    "default": ["webhook.certManager.enabled=true", "podMonitor.enabled=true"],
    "no-monitoring": ["webhook.certManager.enabled=true"],
    "own-certs": [
        "webhook.externalSecret=true",
        "webhook.injectCaFrom=linkerd/linkerd-config-serving-cert",
    ],
    "no-webhooks": ["webhook.enabled=false"],
    "secure-metrics": [
        "webhook.certManager.enabled=true",
        "podMonitor.enabled=true",
        "metrics.secure=true",
    ],
    "network-policy": [
        "webhook.certManager.enabled=true",
        "podMonitor.enabled=true",
        "networkPolicy.enabled=true",
        "networkPolicy.apiServerCIDRs={192.0.2.0/24}",
    ],
    "restart-namespaces": [
        "webhook.certManager.enabled=true",
        "podMonitor.enabled=true",
        "restartNamespaces={emojivoto}",
    ],
}
SAME_IMAGE = ["controllerImageVersion=latest"]

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """``helm`` with its cache, config and data folders of the module's own."""
    home = tmp_path_factory.mktemp("helm-home")
    for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        os.environ[var] = str(home / var.lower())
    try:
        yield [str(ensure_helm())]
    finally:
        for var in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
            os.environ.pop(var, None)


def run(argv: list[str]) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=HELM_TIMEOUT, check=False)
    assert proc.returncode == 0, f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr}"
    out: str = proc.stdout
    return out


def template(helm: list[str], *values: str) -> list[Obj]:
    args = [a for v in values for a in ("--set", v)]
    text = run([*helm, "template", "linkerd-config", str(CHART), "-n", "linkerd", *args])
    return [d for d in yaml.safe_load_all(text) if d]


def kustomize(control_plane: LocalControlPlane, overlay: str) -> list[Obj]:
    text = run(
        [str(control_plane.binary("kubectl")), "kustomize", str(REPO / "manifests" / overlay)]
    )
    return [d for d in yaml.safe_load_all(text) if d]


def without_helm_bookkeeping(obj: Obj) -> Obj:
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    for key, drop in (("labels", HELM_LABELS), ("annotations", HELM_ANNOTATIONS)):
        kept = {k: v for k, v in (meta.get(key) or {}).items() if k not in drop}
        if kept:
            meta[key] = kept
        else:
            meta.pop(key, None)
    return obj


def by_identity(objs: list[Obj]) -> dict[str, Obj]:
    keyed = {
        f"{o['kind']} {o['metadata'].get('namespace', '-')}/{o['metadata']['name']}": o
        for o in objs
    }
    assert len(keyed) == len(objs), "two objects with one identity"
    return keyed


# -- one source of truth ---------------------------------------------------------------------


def test_lint_is_clean(helm: list[str]) -> None:
    out = run([*helm, "lint", "--strict", str(CHART)])
    assert "1 chart(s) linted, 0 chart(s) failed" in out, out
    for values in OVERLAY_VALUES.values():
        run([*helm, "lint", "--strict", str(CHART), *(a for v in values for a in ("--set", v))])


@pytest.mark.parametrize("overlay", sorted(OVERLAY_VALUES))
def test_chart_renders_what_the_overlay_renders(
    helm: list[str], control_plane: LocalControlPlane, overlay: str
) -> None:
    chart = by_identity(
        [without_helm_bookkeeping(o) for o in template(helm, *OVERLAY_VALUES[overlay], *SAME_IMAGE)]
    )
    kustomized = by_identity(kustomize(control_plane, overlay))
    assert sorted(chart) == sorted(kustomized)
    for identity, obj in kustomized.items():
        assert chart[identity] == obj, f"{identity} differs between the chart and {overlay}"


def test_every_object_carries_helm_labels_and_the_crd_is_kept(helm: list[str]) -> None:
    objs = template(helm)
    for obj in objs:
        labels = obj["metadata"].get("labels", {})
        assert labels.keys() >= HELM_LABELS, obj["metadata"]["name"]
        assert labels["app.kubernetes.io/name"] == "linkerd-config"
    (crd,) = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert not [o for o in template(helm, "installCRDs=false") if o["kind"].startswith("Custom")]


def test_values_reach_the_pod(helm: list[str]) -> None:
    objs = template(
        helm,
        "controllerImage=registry.example/linkerd-config",
        "controllerImageVersion=v9",
        "controllerReplicas=3",
        "controllerLogLevel=debug",
        "imagePullSecrets[0].name=pull",
        "priorityClassName=system-cluster-critical",
        "nodeSelector.kubernetes\\.io/os=linux",
        "podAnnotations.example\\.com/a=b",
        "enablePodDisruptionBudget=false",
        "webhookFailurePolicy=Ignore",
        "webhook.timeoutSeconds=5",
    )
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    spec = dep["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["image"] == "registry.example/linkerd-config:v9"
    assert dep["spec"]["replicas"] == 3
    assert env["LOG_LEVEL"] == "debug"
    assert spec["imagePullSecrets"] == [{"name": "pull"}]
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert dep["spec"]["template"]["metadata"]["annotations"]["example.com/a"] == "b"
    assert not [o for o in objs if o["kind"] == "PodDisruptionBudget"]
    for config in (o for o in objs if o["kind"].endswith("WebhookConfiguration")):
        assert [(w["failurePolicy"], w["timeoutSeconds"]) for w in config["webhooks"]] == [
            ("Ignore", 5)
        ]
    default_image = next(o for o in template(helm) if o["kind"] == "Deployment")
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert default_image["spec"]["template"]["spec"]["containers"][0]["image"] == (
        f"linkerd-config:{chart['appVersion']}"
    )


def test_chart_follows_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    pyproject = (REPO / "pyproject.toml").read_text()
    version = next(
        line.split("=", 1)[1].strip().strip('"')
        for line in pyproject.splitlines()
        if line.startswith("version")
    )
    assert chart["version"] == chart["appVersion"] == version


def test_without_cert_manager_helm_makes_a_certificate_the_api_server_can_trust(
    helm: list[str], tmp_path: Path
) -> None:
    """The default: a CA and a serving certificate for the webhook Service, made once by Helm;
    both webhook configurations carry that CA. Proven by a TLS handshake, not by reading."""
    objs = template(helm)
    (secret,) = [o for o in objs if o["kind"] == "Secret"]
    assert secret["metadata"]["name"] == "linkerd-config-webhook-cert"
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    bundles = {
        w["clientConfig"]["caBundle"]
        for o in objs
        if o["kind"].endswith("WebhookConfiguration")
        for w in o["webhooks"]
    }
    assert len(bundles) == 1
    assert base64.b64decode(bundles.pop()) == data["ca.crt"]
    (tmp_path / "tls.crt").write_bytes(data["tls.crt"])
    (tmp_path / "tls.key").write_bytes(data["tls.key"])
    assert handshake(tmp_path, data["ca.crt"], "linkerd-config-webhook.linkerd.svc")
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(tmp_path, data["ca.crt"], "linkerd-config-webhook.other.svc")


def handshake(cert_dir: Path, ca: bytes, server_name: str) -> bool:
    """A TLS handshake on loopback: a server with the chart's certificate, a client that
    trusts only the chart's CA and asks for ``server_name`` (as the API server does)."""
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert_dir / "tls.crt", cert_dir / "tls.key")
    client_ctx = ssl.create_default_context(cadata=ca.decode())
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(10)
        port = listener.getsockname()[1]

        def serve() -> None:
            try:
                conn, _ = listener.accept()
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (OSError, ssl.SSLError):
                pass  # the client refused us: that is the client's answer to report

        server = threading.Thread(target=serve, daemon=True)
        server.start()
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
                client_ctx.wrap_socket(raw, server_hostname=server_name) as tls,
            ):
                tls.sendall(b"x")
                return True
        finally:
            server.join(10)


# -- a real install ----------------------------------------------------------------------------


def get(cp: LocalControlPlane, path: str) -> Obj | None:
    try:
        return cp.api_request("GET", path)
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise


def test_install_upgrade_uninstall(helm: list[str], own_control_plane: LocalControlPlane) -> None:
    cp = own_control_plane
    kube = ["--kubeconfig", str(cp.kubeconfig), "-n", "linkerd"]
    # The README's path: `make helm-deploy IMG=...` (helm upgrade --install with the image).
    run(
        [
            "make",
            "-C",
            str(REPO),
            "--no-print-directory",
            "helm-deploy",
            "IMG=registry.example:5000/team/linkerd-config:v1.2.3",
            f"HELM_ARGS=--kubeconfig {cp.kubeconfig} --wait --timeout 150s",
        ]
    )
    status = json.loads(run([*helm, "status", "linkerd-config", *kube, "-o", "json"]))
    assert status["info"]["status"] == "deployed"

    dep = get(cp, "/apis/apps/v1/namespaces/linkerd/deployments/linkerd-config")
    assert dep is not None and dep["status"].get("availableReplicas") == 2, dep and dep["status"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example:5000/team/linkerd-config:v1.2.3"
    for path in (
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/linkerdconfigs.config.linkerd.io",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/linkerd-config",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles/linkerd-config-events",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/linkerd-config-restart",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/linkerd-config-least-privilege",
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/linkerd-config-validating",
        "/api/v1/namespaces/linkerd/services/linkerd-config-webhook",
    ):
        assert get(cp, path) is not None, path
    # The injector is asked in each workload's own namespace (the restart's ClusterRole may
    # create pods, least-privilege's policy admits only dry runs): no namespace of its own.
    restart = get(cp, "/apis/rbac.authorization.k8s.io/v1/clusterroles/linkerd-config-restart")
    assert restart is not None
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]} in restart["rules"]
    assert get(cp, "/api/v1/namespaces/linkerd-config-probe") is None
    secret_path = "/api/v1/namespaces/linkerd/secrets/linkerd-config-webhook-cert"
    first = get(cp, secret_path)
    assert first is not None

    # An upgrade keeps the generated certificate (Helm looks the Secret up) and applies values.
    run(
        [
            *helm,
            "upgrade",
            "linkerd-config",
            str(CHART),
            *kube,
            "--reuse-values",
            "--set",
            "controllerLogLevel=debug",
            "--wait",
            "--timeout",
            "150s",
        ]
    )
    second = get(cp, secret_path)
    assert second is not None and second["data"] == first["data"]
    dep = get(cp, "/apis/apps/v1/namespaces/linkerd/deployments/linkerd-config")
    assert dep is not None
    env = {
        e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["LOG_LEVEL"] == "debug"
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":v1.2.3")
    hook = get(
        cp,
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/linkerd-config-mutating",
    )
    assert hook is not None
    assert base64.b64decode(hook["webhooks"][0]["clientConfig"]["caBundle"]) == base64.b64decode(
        first["data"]["ca.crt"]
    )

    run([*helm, "uninstall", "linkerd-config", *kube, "--wait", "--timeout", "120s"])
    deadline = time.monotonic() + 60
    while get(cp, "/apis/apps/v1/namespaces/linkerd/deployments/linkerd-config") is not None:
        assert time.monotonic() < deadline, "the Deployment outlived helm uninstall"
        time.sleep(0.5)
    assert get(cp, secret_path) is None
    # Deleting the CRD would delete every LinkerdConfig: the chart keeps it.
    assert (
        get(
            cp,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/linkerdconfigs.config.linkerd.io",
        )
        is not None
    )
