"""The controller as users run it: its image built, loaded into the real node of a local
control plane, installed with the Makefile's own targets, and looked at from outside.

Commands run here are the README's install section, word for word (test_readme_install
checks that); what they are run against is the test's control plane (``KUBECONFIG``,
``KUBECTL``).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from devcluster import real_node
from devcluster.cluster import LocalControlPlane
from tests.support import audit
from tests.support.waiting import eventually

REPO = Path(__file__).resolve().parents[2]
IMAGE = "localhost/linkerd-config:dev"
MAKE_TARGETS = ("docker-build-local", "deploy", "undeploy", "helm-deploy", "helm-undeploy")
"""What test_in_cluster_deploy runs, each also in the README's install block."""
NAMESPACE = "linkerd"
DEPLOYMENT = "linkerd-config"
LEASE = "linkerd-config-leader"
SERVICE_ACCOUNT = "system:serviceaccount:linkerd:linkerd-config"
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
Json = dict[str, Any]


def make(cp: LocalControlPlane | None, *args: str, timeout: float = 1200.0) -> str:
    """``make ARGS`` in the repository (against ``cp`` when given); fails with its output."""
    env = dict(os.environ)
    if cp is not None:
        env.update({"KUBECONFIG": str(cp.kubeconfig), "KUBECTL": str(cp.binary("kubectl"))})
    proc = subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"make {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def kubectl(cp: LocalControlPlane, *args: str, check: bool = True) -> str:
    proc = subprocess.run(
        [str(cp.binary("kubectl")), f"--kubeconfig={cp.kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if check:
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
        return proc.stdout
    return proc.stdout + proc.stderr


def controller_pods(cp: LocalControlPlane) -> list[Json]:
    out = kubectl(
        cp,
        "-n",
        NAMESPACE,
        "get",
        "pods",
        "-l",
        "app.kubernetes.io/name=linkerd-config",
        "-o",
        "json",
    )
    pods: list[Json] = json.loads(out)["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def ready(pod: Json) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def lease_holder(cp: LocalControlPlane) -> str | None:
    out = kubectl(cp, "-n", NAMESPACE, "get", "lease", LEASE, "-o", "json", check=False)
    try:
        holder = json.loads(out)["spec"].get("holderIdentity")
    except (ValueError, KeyError):
        return None
    return str(holder) if holder else None


def lease_renewed(cp: LocalControlPlane) -> tuple[str, str] | None:
    """(holder, renewTime) of the Lease, None when nobody holds it."""
    out = kubectl(cp, "-n", NAMESPACE, "get", "lease", LEASE, "-o", "json", check=False)
    try:
        spec = json.loads(out)["spec"]
    except (ValueError, KeyError):
        return None
    holder, renewed = spec.get("holderIdentity"), spec.get("renewTime")
    return (str(holder), str(renewed)) if holder and renewed else None


def pod_logs(cp: LocalControlPlane, pod: str) -> str:
    """Through the API server and the kubelet, as ``kubectl logs`` reads them."""
    return kubectl(cp, "-n", NAMESPACE, "logs", pod, "--all-containers")


def controller_writes(cp: LocalControlPlane, since: float) -> list[audit.Entry]:
    """The controller's successful writes since ``since``, oldest first; each audit entry
    names the pod IP it came from (no NAT between a pod and the API server here)."""
    return sorted(
        (
            e
            for e in audit.audit_entries(cp)
            if (e.get("user") or {}).get("username") == SERVICE_ACCOUNT
            and e.get("verb") in WRITE_VERBS
            and (e.get("responseStatus") or {}).get("code", 500) < 300
            and audit.received_at(e) >= since
        ),
        key=audit.received_at,
    )


def writes_by_non_holders(writes: list[audit.Entry]) -> list[str]:
    """Writes other than to the Lease made by a pod that was not, at that moment, the last
    to have written the Lease successfully (that is, the holder)."""
    holder: str | None = None
    wrong = []
    for entry in writes:
        source = (entry.get("sourceIPs") or ["?"])[0]
        resource = audit.audited_resource(entry)
        if resource == "leases" and (entry.get("objectRef") or {}).get("name") == LEASE:
            holder = source
            continue
        if source != holder:
            wrong.append(
                f"{entry.get('verb')} {resource} {(entry.get('objectRef') or {}).get('name')} "
                f"from {source} while {holder} held the Lease"
            )
    return wrong


async def running_install(cp: LocalControlPlane) -> list[Json]:
    """Two pods Ready on the real node, through the kubelet's calls to their probes."""

    async def two_ready() -> list[Json] | None:
        pods = controller_pods(cp)
        ok = [p for p in pods if ready(p)]
        return pods if len(pods) == 2 and len(ok) == 2 else None

    pods = await eventually(two_ready, timeout=240, interval=1, what="two controller pods Ready")
    for pod in pods:
        spec = pod["spec"]
        assert spec["nodeName"] == real_node.NODE_NAME
        # Ready as the kubelet reports it (kwok manages only its own node).
        (status,) = pod["status"]["containerStatuses"]
        assert status["containerID"].startswith("containerd://") and status["ready"], status
        container = spec["containers"][0]
        assert container["image"] == IMAGE
        assert container["readinessProbe"]["httpGet"] and container["livenessProbe"]["httpGet"]
        env = {e["name"] for e in container.get("env", [])}
        assert "KUBECONFIG" not in env
        assert not any("kubeconfig" in v["name"] for v in spec.get("volumes", []))
    return pods
