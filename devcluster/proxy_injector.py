"""Linkerd's real proxy injector as a component of the local control plane.

It runs as a cluster runs it, minus the container: Linkerd's own ``controller proxy-injector``
binary (built by ``linkerd_binaries``) serving TLS on loopback, registered with a
MutatingWebhookConfiguration shaped as Linkerd's install renders it for that release, reading
its configuration from the fixed paths under ``/var/run/linkerd`` that Linkerd mounts from
ConfigMaps. Those paths are served from a private mount namespace (``unshare -m``, or
``unshare -rm`` without root) in which a folder we own is bind-mounted over ``/run``; the host's
``/run`` is never touched. The folder is filled by ``configmap_volume`` (the kubelet's part),
``projection_delay`` seconds after each ConfigMap change.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization

from devcluster import module_command
from devcluster.binaries import Progress
from devcluster.cluster import LOOPBACK, LocalControlPlane, free_port
from devcluster.linkerd_binaries import ensure_linkerd, release
from linkerd_config.kube.certs import KeyPair

WEBHOOK_CONFIGURATION = "linkerd-proxy-injector-webhook-config"
WEBHOOK_NAME = "linkerd-proxy-injector.linkerd.io"
CONFIG_CONFIGMAP = "linkerd-config"
TRUST_ROOTS_CONFIGMAP = "linkerd-identity-trust-roots"
_MWC_PATH = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


class InjectorError(RuntimeError):
    """The injector could not be started; the message says what is missing."""


def legacy_webhook_configuration() -> dict[str, Any]:
    """edge-19.12.x's MutatingWebhookConfiguration, as its chart renders it
    (``charts/linkerd2/templates/proxy-injector-rbac.yaml``, ``webhookFailurePolicy: Ignore``).

    The chart targeted ``admissionregistration.k8s.io/v1beta1``; written as v1 it spells out
    what v1beta1 defaulted (AdmissionReview v1beta1, 30 s timeout). ``sideEffects: None`` is
    the chart's own (``omitWebhookSideEffects`` false), which is what lets the API server call
    the injector for server-side dry-run requests too.
    """
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {
            "name": WEBHOOK_CONFIGURATION,
            "labels": {
                "linkerd.io/control-plane-component": "proxy-injector",
                "linkerd.io/control-plane-ns": "linkerd",
            },
        },
        "webhooks": [
            {
                "name": WEBHOOK_NAME,
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "config.linkerd.io/admission-webhooks",
                            "operator": "NotIn",
                            "values": ["disabled"],
                        }
                    ]
                },
                "clientConfig": {"service": {"name": "linkerd-proxy-injector", "path": "/"}},
                "failurePolicy": "Ignore",
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ],
                "sideEffects": "None",
                "admissionReviewVersions": ["v1beta1"],
                "timeoutSeconds": 30,
            }
        ],
    }


def on_loopback(template: dict[str, Any], url: str, ca_pem: bytes) -> dict[str, Any]:
    """Linkerd's webhook configuration pointed at our loopback server instead of its Service."""
    config = copy.deepcopy(template)
    annotations = config["metadata"].get("annotations") or {}
    for key in [k for k in annotations if k.startswith("cert-manager.io/")]:
        del annotations[key]
    for webhook in config["webhooks"]:
        webhook["clientConfig"] = {"url": url, "caBundle": base64.b64encode(ca_pem).decode()}
    return config


def mount_namespace_command() -> list[str]:
    """``unshare`` for a private mount namespace, or an error in one line saying why not."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise InjectorError(
            "Linkerd's injector needs a private mount namespace for /var/run/linkerd, but "
            "'unshare' (util-linux) is not installed"
        )
    command = [unshare, "-m"] if os.geteuid() == 0 else [unshare, "-rm"]
    probe = subprocess.run([*command, "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        raise InjectorError(
            f"Linkerd's injector needs a private mount namespace for /var/run/linkerd, but "
            f"'{' '.join(command)}' fails here: {probe.stderr.strip() or probe.returncode}"
        )
    return command


class ProxyInjector:
    """One Linkerd release's injector: start it, read what it did, stop it."""

    def __init__(
        self,
        plane: LocalControlPlane,
        tag: str,
        *,
        projection_delay: float = 0.2,
        webhook_template: dict[str, Any] | None = None,
        namespace: str = "linkerd",
        progress: Progress = print,
    ) -> None:
        self.plane = plane
        self.release = release(tag)
        self.projection_delay = projection_delay
        self.namespace = namespace
        self.progress = progress
        if webhook_template is None:
            if self.release.modern_config:
                raise ValueError(f"{tag}: pass the webhook configuration its CLI rendered")
            webhook_template = legacy_webhook_configuration()
        self.webhook_template = webhook_template
        self.root = plane.workdir / f"linkerd-{tag}"
        self.run_dir = self.root / "run"
        self.record = self.root / "projections.jsonl"
        self.port = 0
        self.admin_port = 0
        self._names = (f"kubelet-volumes-{tag}", f"linkerd-proxy-injector-{tag}")
        self._argv: list[str] = []

    @property
    def tag(self) -> str:
        return self.release.tag

    @property
    def config_dir(self) -> Path:
        """What the injector sees as ``/var/run/linkerd/config``."""
        return self.run_dir / "linkerd" / "config"

    @property
    def trust_roots_dir(self) -> Path:
        return self.run_dir / "linkerd" / "identity" / "trust-roots"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/"

    def projections(self) -> list[dict[str, Any]]:
        """Every projection so far: which ConfigMap version reached the injector, and when."""
        try:
            lines = self.record.read_text().splitlines()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in lines if line.strip()]

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> ProxyInjector:
        unshare = mount_namespace_command()
        controller = ensure_linkerd(self.tag, "controller", self.progress)
        self.root.mkdir(parents=True, exist_ok=True)
        serving = self.plane.certificate_authority.serving(
            [f"linkerd-proxy-injector.{self.namespace}.svc", "localhost"], [LOOPBACK]
        )
        self._write_tls(serving)
        kubeconfig = self.plane.add_user(
            f"system:serviceaccount:{self.namespace}:linkerd-proxy-injector", ["system:masters"]
        )
        volumes = {CONFIG_CONFIGMAP: self.config_dir}
        if self.release.modern_config:
            volumes[TRUST_ROOTS_CONFIGMAP] = self.trust_roots_dir
        self.plane.launch_component(
            self._names[0],
            [
                *module_command("devcluster.configmap_volume"),
                f"--kubeconfig={kubeconfig}",
                f"--namespace={self.namespace}",
                f"--delay={self.projection_delay}",
                f"--record={self.record}",
                *(f"{name}={folder}" for name, folder in volumes.items()),
            ],
        )
        self.plane.wait_for(
            f"ConfigMaps {', '.join(volumes)} in namespace {self.namespace} projected "
            "(install Linkerd's configuration before its injector)",
            lambda: all((folder / "..data").exists() for folder in volumes.values()),
        )
        self.port, self.admin_port = free_port(), free_port()
        self._argv = [
            *unshare,
            "sh",
            "-c",
            'mount --bind "$0" "$(readlink -f /var/run)" && exec "$@"',
            str(self.run_dir),
            str(controller),
            "proxy-injector",
            f"-addr={LOOPBACK}:{self.port}",
            f"-metrics-addr={LOOPBACK}:{self.admin_port}",
            f"-kubeconfig={kubeconfig}",
        ]
        if self.release.modern_config:
            self._argv.append(f"-linkerd-namespace={self.namespace}")
        self.plane.launch_component(self._names[1], self._argv)
        self.plane.wait_for(f"Linkerd {self.tag} proxy injector ready", self._ready)
        self.plane.api_request(
            "POST", _MWC_PATH, on_loopback(self.webhook_template, self.url, self.plane.ca_pem)
        )
        self.plane.wait_for(f"the API server calling Linkerd {self.tag}'s injector", self._injects)
        return self

    def down(self) -> None:
        """The injector's process stopped, its webhook left registered: the API server's
        calls to it fail, and under Linkerd's ``failurePolicy: Ignore`` pods are admitted
        without a proxy (an injector crashed, or evicted, in a real cluster)."""
        self.plane.stop_component(self._names[1])

    def up(self) -> None:
        """The injector started again after ``down``, on the same address."""
        self.plane.launch_component(self._names[1], self._argv)
        self.plane.wait_for(f"Linkerd {self.tag} proxy injector ready", self._ready)
        self.plane.wait_for(f"the API server calling Linkerd {self.tag}'s injector", self._injects)

    def stop(self) -> None:
        with contextlib.suppress(OSError):  # already gone, or the control plane stopped first
            self.plane.api_request("DELETE", f"{_MWC_PATH}/{WEBHOOK_CONFIGURATION}")
        for name in reversed(self._names):
            self.plane.stop_component(name, missing_ok=True)

    def __enter__(self) -> ProxyInjector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- helpers -------------------------------------------------------------------------

    def _write_tls(self, serving: KeyPair) -> None:
        tls = self.run_dir / "linkerd" / "tls"
        tls.mkdir(parents=True, exist_ok=True)
        if self.release.modern_config:
            files = {"tls.crt": serving.cert_pem, "tls.key": serving.key_pem}
        else:
            # edge-19.12's decoder takes only "EC PRIVATE KEY" / "RSA PRIVATE KEY" blocks.
            key = serialization.load_pem_private_key(serving.key_pem, password=None)
            traditional = key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
            files = {"crt.pem": serving.cert_pem, "key.pem": traditional}
        for name, data in files.items():
            (tls / name).write_bytes(data)
            (tls / name).chmod(0o600)

    def _injects(self) -> bool:
        """A dry-run pod asking for injection comes back with Linkerd's proxy."""
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "linkerd-injector-probe",
                "annotations": {"linkerd.io/inject": "enabled"},
            },
            "spec": {"containers": [{"name": "probe", "image": "probe"}]},
        }
        created = self.plane.api_request("POST", "/api/v1/namespaces/default/pods?dryRun=All", pod)
        spec = created.get("spec") or {}
        containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        return any(c.get("name") == "linkerd-proxy" for c in containers)

    def _ready(self) -> bool:
        # Both releases answer /ready on the admin port only once their caches have synced.
        url = f"http://127.0.0.1:{self.admin_port}/ready"
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
