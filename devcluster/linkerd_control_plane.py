"""Linkerd's real control plane on the real node, installed as a user installs it.

``install`` imports the images (``linkerd_images``) into the node's containerd, renders with
edge-26.8.3's own CLI (``linkerd install --crds``, then ``linkerd install``, asking the cluster
as it does), pointed at those images with ``imagePullPolicy: Never``, with the identity
certificates the caller owns, and applies both. Identity, destination (with the policy
controller and the ServiceProfile validator) and the proxy injector then run as pods, each
with its proxy, on the real node (namespace ``linkerd`` is placed there).

Ready means usable, not only Ready pods: the injector's endpoints lag its pod, and its webhook
fails open (``failurePolicy: Ignore``), so a pod created too early is admitted without a proxy.
So the control plane counts as up once the injector has put a proxy into a dry-run pod.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devcluster import linkerd_images, real_node
from devcluster.binaries import BinaryUnavailableError, Progress
from devcluster.cluster import LocalControlPlane
from devcluster.linkerd_binaries import ensure_linkerd

NAMESPACE = "linkerd"
DEPLOYMENTS = ("linkerd-identity", "linkerd-destination", "linkerd-proxy-injector")
PROXY_CONTAINER = "linkerd-proxy"
PROBE_NAMESPACE = "linkerd-mesh-probe"
SHUTDOWN_GRACE_PERIOD = "5s"
"""The proxy's own shutdown grace period (its default is 120 s)."""
ISSUANCE_LIFETIME = "60s"
"""How long the certificates identity issues to proxies last (Linkerd's default is 24 h);
proxies renew at 70% of it. A trust-anchor rotation waits, after the issuer is re-issued,
until no proxy still presents a certificate from the old one: a minute, not a day."""
Obj = dict[str, Any]


class ControlPlaneInstallError(RuntimeError):
    """Linkerd's control plane did not come up; the message says what was seen."""


@dataclass(frozen=True)
class IdentityCredentials:
    """The trust anchors (PEM bundle) and the issuer certificate and key identity signs with."""

    trust_anchors: str
    issuer_certificate: str
    issuer_key: str


@dataclass
class LinkerdControlPlane:
    cp: LocalControlPlane
    cli: Path
    credentials: IdentityCredentials
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds each step took: ``images imported``, ``rendered and applied``, ``ready``."""

    def linkerd(self, *args: str, timeout: float = 120.0) -> str:
        """Linkerd's CLI against this cluster; raises with its output if it fails."""
        return run([str(self.cli), f"--kubeconfig={self.cp.kubeconfig}", *args], timeout=timeout)


def install_values() -> list[str]:
    """The ``--set`` values that differ from a default install, each for a reason: the images
    are the local ones and must never be pulled; proxies stop in seconds, not 120 s; their
    certificates last a minute, not a day (``ISSUANCE_LIFETIME``); no heartbeat CronJob (it
    would call home)."""
    return [
        f"controllerImage={linkerd_images.CONTROLLER_IMAGE}",
        f"proxy.image.name={linkerd_images.PROXY_IMAGE}",
        "imagePullPolicy=Never",
        f"proxy.shutdownGracePeriod={SHUTDOWN_GRACE_PERIOD}",
        f"identity.issuer.issuanceLifetime={ISSUANCE_LIFETIME}",
        "disableHeartBeat=true",
    ]


def meshed_namespace(name: str) -> Obj:
    """A namespace whose pods Linkerd's injector meshes and the real node runs."""
    selector = f"{real_node.NODE_LABEL}={real_node.NODE_LABEL_VALUE}"
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "annotations": {
                "linkerd.io/inject": "enabled",
                "scheduler.alpha.kubernetes.io/node-selector": selector,
            },
        },
    }


def install(
    cp: LocalControlPlane,
    credentials: IdentityCredentials,
    progress: Progress = print,
    timeout: float = 240.0,
) -> LinkerdControlPlane:
    """Install Linkerd's control plane on ``cp``'s real node and wait until it meshes pods."""
    started = time.monotonic()
    archive = linkerd_images.ensure_images(progress)
    cli = ensure_linkerd(linkerd_images.TAG, "linkerd", progress)
    plane = LinkerdControlPlane(cp, cli, credentials)
    cp.node.import_image(archive)
    plane.timings["images imported"] = time.monotonic() - started

    step = time.monotonic()
    pki = cp.workdir / "linkerd-identity"
    pki.mkdir(exist_ok=True)
    files = {
        "ca.crt": credentials.trust_anchors,
        "issuer.crt": credentials.issuer_certificate,
        "issuer.key": credentials.issuer_key,
    }
    for name, text in files.items():
        (pki / name).write_text(text)
    # Linkerd's own copy of the Gateway API CRDs its policy controller reads (which it
    # otherwise requires installed first, from a registry this machine cannot reach).
    apply(cp, plane.linkerd("install", "--crds", "--set", "installGatewayAPI=true"))
    run(
        [*kubectl(cp), "wait", "--for=condition=established", "--timeout=60s", "crd", "--all"],
        timeout=90,
    )
    sets = [arg for value in install_values() for arg in ("--set", value)]
    rendered = plane.linkerd(
        "install",
        f"--identity-trust-anchors-file={pki / 'ca.crt'}",
        f"--identity-issuer-certificate-file={pki / 'issuer.crt'}",
        f"--identity-issuer-key-file={pki / 'issuer.key'}",
        *sets,
    )
    apply(cp, rendered)
    plane.timings["rendered and applied"] = time.monotonic() - step

    step = time.monotonic()
    deadline = started + timeout
    for deployment in DEPLOYMENTS:
        remaining = max(1, int(deadline - time.monotonic()))
        try:
            rollout_status(cp, NAMESPACE, deployment, remaining)
        except BinaryUnavailableError as exc:
            raise ControlPlaneInstallError(
                f"{deployment} not available: {exc}\n{pods(cp)}"
            ) from None
    wait_until_injecting(cp, deadline)
    plane.timings["ready"] = time.monotonic() - step
    progress(
        "Linkerd's control plane is up: "
        + ", ".join(f"{what} in {seconds:.1f} s" for what, seconds in plane.timings.items())
    )
    return plane


def wait_until_injecting(cp: LocalControlPlane, deadline: float) -> None:
    """Until the injector puts its proxy into a dry-run pod of a meshed namespace."""
    create(cp, "/api/v1/namespaces", meshed_namespace(PROBE_NAMESPACE))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": PROBE_NAMESPACE},
        "spec": {"containers": [{"name": "app", "image": linkerd_images.TESTAPP_IMAGE}]},
    }
    last = "no answer yet"
    while time.monotonic() < deadline:
        try:
            answer = cp.api_request(
                "POST", f"/api/v1/namespaces/{PROBE_NAMESPACE}/pods?dryRun=All", pod
            )
        except (urllib.error.URLError, OSError) as exc:  # no ServiceAccount yet, say
            last = str(exc)
        else:
            if has_proxy(answer):
                cp.api_request("DELETE", f"/api/v1/namespaces/{PROBE_NAMESPACE}")
                return
            last = "a dry-run pod came back without the proxy"
        time.sleep(0.5)
    raise ControlPlaneInstallError(f"the injector does not mesh pods: {last}")


def has_proxy(pod: Obj) -> bool:
    """The pod carries Linkerd's proxy (a native sidecar, or a plain container)."""
    spec = pod.get("spec") or {}
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    return any(c.get("name") == PROXY_CONTAINER for c in containers)


def kubectl(cp: LocalControlPlane) -> list[str]:
    return [str(cp.binary("kubectl")), f"--kubeconfig={cp.kubeconfig}"]


def apply(cp: LocalControlPlane, manifests: str) -> None:
    """``kubectl apply --server-side`` (forcing: the ``linkerd`` namespace was made by the
    control plane, which placed it on the real node; the install's fields win)."""
    run(
        [*kubectl(cp), "apply", "--server-side", "--force-conflicts", "-f", "-"],
        stdin=manifests,
        timeout=120,
    )


def rollout_status(cp: LocalControlPlane, namespace: str, deployment: str, timeout: int) -> None:
    """``kubectl rollout status``: until every replica of the Deployment is updated and
    available; raises with kubectl's output when ``timeout`` (seconds) runs out."""
    run(
        [
            *kubectl(cp),
            "-n",
            namespace,
            "rollout",
            "status",
            f"deployment/{deployment}",
            f"--timeout={timeout}s",
        ],
        timeout=timeout + 30,
    )


def create(cp: LocalControlPlane, path: str, obj: Obj) -> None:
    """POST ``obj``; one that exists already is left as it is."""
    try:
        cp.api_request("POST", path, obj)
    except urllib.error.HTTPError as exc:
        if exc.code != 409:
            raise


def pods(cp: LocalControlPlane, namespace: str = NAMESPACE) -> str:
    """One line per pod: name, phase, and each container's state (for failure messages)."""
    listed = cp.api_request("GET", f"/api/v1/namespaces/{namespace}/pods")
    lines = []
    for pod in listed.get("items", []):
        status = pod.get("status") or {}
        states = [
            f"{c['name']}={next(iter(c.get('state') or {'?': 0}))}"
            + ("(ready)" if c.get("ready") else "")
            for c in (status.get("initContainerStatuses") or [])
            + (status.get("containerStatuses") or [])
        ]
        lines.append(f"{pod['metadata']['name']} {status.get('phase')} {' '.join(states)}")
    return "\n".join(lines)


def run(argv: list[str], stdin: str | None = None, timeout: float = 120.0) -> str:
    """A command's output; raises with its output if it fails (no kubeconfig path shown)."""
    done = subprocess.run(
        argv, input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        shown = " ".join(a for a in argv[:4] if not a.startswith("--kubeconfig"))
        raise BinaryUnavailableError(
            f"{shown} failed (exit {done.returncode}): {(done.stderr or done.stdout)[-3000:]}"
        )
    return done.stdout
