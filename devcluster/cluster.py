"""A real control plane on loopback: etcd, kube-apiserver, and optionally
kube-controller-manager, kube-scheduler and kwok (simulated nodes).

One implementation serves the pytest fixture, the ``dev-cluster`` CLI and ``make demo``.
Everything it makes lives in one work directory that ``stop`` removes.
"""

from __future__ import annotations

import base64
import fcntl
import json
import random
import shutil
import socket
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from devcluster import kwok_stages, pinned, real_node
from devcluster.binaries import (
    NODE_BINARIES,
    Progress,
    ensure_binaries,
    ensure_kwok_manifests,
)
from devcluster.processes import ManagedProcess
from linkerd_config.kube.certs import KeyPair, TinyCA, signing_key
from linkerd_config.kube.resource import CRDS

LOOPBACK = "127.0.0.1"
ADMIN_USER = "admin"
KWOK_NODE = "kwok-node-0"
NODE_RESOURCES = {
    "cpu": "1000",
    "memory": "4000Gi",
    "ephemeral-storage": "1000Gi",
    "pods": "100000",
}
"""The fake node's capacity and allocatable."""
KWOK_FIRST_WAIT = 30.0
"""Seconds kwok has to make its node Ready before it is restarted once (it takes about 3)."""

# Writes at Metadata level, reads not at all: enough to prove who wrote what, small on disk.
_AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    verbs: ["get", "list", "watch"]
  - level: Metadata
"""

_CONTROLLERS = ",".join(
    [
        "deployment-controller",
        "replicaset-controller",
        "statefulset-controller",
        "daemonset-controller",
        "garbage-collector-controller",
        "namespace-controller",
        "disruption-controller",
        "pod-garbage-collector-controller",
        "serviceaccount-controller",
        "root-ca-certificate-publisher-controller",
        # Quotas are enforced as a cluster enforces them: admission charges a pod against
        # a quota's status, which only this controller fills.
        "resourcequota-controller",
    ]
)
_REAL_NODE_CONTROLLERS = ",endpoints-controller,endpointslice-controller"
"""kube-proxy routes a Service to the endpoints these keep; kwok's pods need none."""
SERVICE_CIDR = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"


class ControlPlaneError(RuntimeError):
    """A component failed to start or to become ready; the message carries its log tail."""


@dataclass(frozen=True)
class ControlPlaneOptions:
    workloads: bool = True
    """Run kube-controller-manager, kube-scheduler and kwok so workloads really roll."""
    real_node: bool = False
    """Also run a real node (kubelet, containerd, kube-proxy: ``real_node``) for the
    controller's own pods; needs root and Debian's containerd, runc and CNI plugins."""
    start_timeout: float = 90.0


PORT_CLAIMS = Path(tempfile.gettempdir()) / "linkerd-config-ports"
"""One lock file per port handed out; the lock lasts as long as the process that took it."""
_claimed: list[IO[bytes]] = []


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port for a server a test starts, nobody else's until this process ends.

    Not the kernel's ``bind(0)``: that port is free only for the moment asked, and in the
    ephemeral range, where any outgoing connection (the tests make thousands) or another test
    process may take it before its server binds (a ``make run`` that exits at start). So below
    that range, which outgoing connections never use, from a random start, and claimed with
    an exclusive lock on a file of its own, which other test processes skip."""
    PORT_CLAIMS.mkdir(exist_ok=True)
    low, high = 20000, _ephemeral_low()
    if high - low < 1000:
        low = 1024
    span = high - low
    start = random.randrange(span)
    for i in range(span):
        port = low + (start + i) % span
        claim = (PORT_CLAIMS / str(port)).open("ab")
        try:
            fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another test process's
            with socket.socket() as s:
                s.bind((LOOPBACK, port))  # a server of someone else's
        except OSError:
            claim.close()
            continue
        _claimed.append(claim)
        return port
    raise RuntimeError(f"no free loopback port in {low}-{high}")


@dataclass
class LocalControlPlane:
    """Start with ``start()``, stop with ``stop()``; also a context manager."""

    options: ControlPlaneOptions = field(default_factory=ControlPlaneOptions)
    progress: Progress = print
    workdir: Path = field(init=False)
    apiserver_port: int = field(init=False, default=0)
    etcd_port: int = field(init=False, default=0)
    _ca: TinyCA = field(init=False)
    _procs: dict[str, ManagedProcess] = field(init=False, default_factory=dict)

    @property
    def server(self) -> str:
        return f"https://{LOOPBACK}:{self.apiserver_port}"

    @property
    def etcd_url(self) -> str:
        return f"http://{LOOPBACK}:{self.etcd_port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / f"{ADMIN_USER}.kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    @property
    def ca_pem(self) -> bytes:
        return (self.workdir / "ca.crt").read_bytes()

    @property
    def bin_dir(self) -> Path:
        return self._bins["kube-apiserver"].parent

    def binary(self, name: str) -> Path:
        return self._bins[name]

    def __enter__(self) -> LocalControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        names = ["etcd", "kube-apiserver", "kubectl"]
        if self.options.workloads:
            names += ["kube-controller-manager", "kube-scheduler", "kwok"]
        self._node: real_node.RealNode | None = None
        if self.options.real_node:
            if not self.options.workloads:
                raise ControlPlaneError("a real node needs the workload components")
            real_node.check_machine()
            names += list(NODE_BINARIES)
        self._bins = ensure_binaries(tuple(names), self.progress)
        if self.options.workloads:
            self._kwok_manifests = ensure_kwok_manifests(self.progress)
        self.workdir = Path(tempfile.mkdtemp(prefix="linkerd-config-cp-"))
        try:
            self._write_pki()
            self._start_etcd()
            self._start_apiserver()
            self.add_user(ADMIN_USER, ["system:masters"], self.kubeconfig)
            if self.options.workloads:
                self._start_workload_components()
            if self.options.real_node:
                self.api_request("POST", "/api/v1/namespaces", real_node.controller_namespace())
                self._node = real_node.RealNode(self, self._bins)
                self._node.start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop components in reverse start order, then remove every file we made."""
        node = getattr(self, "_node", None)
        if node is not None:
            node.stop()
            self._node = None
        for name in reversed(list(self._procs)):
            self._procs[name].stop()
        self._procs.clear()
        if hasattr(self, "workdir") and self.workdir.exists():
            shutil.rmtree(self.workdir, ignore_errors=True)

    def pids(self) -> dict[str, int]:
        return {n: p.pid for n, p in self._procs.items() if p.pid is not None and p.running()}

    def restart_apiserver(self) -> None:
        """Stop and start kube-apiserver on the same port, as an upgrade or crash would."""
        self._procs.pop("kube-apiserver").stop()
        self._start_apiserver()

    def stop_component(self, name: str, missing_ok: bool = False) -> None:
        proc = self._procs.pop(name, None)
        if proc is not None:
            proc.stop()
        elif not missing_ok:
            raise KeyError(f"no component {name!r} is running")

    @property
    def node(self) -> real_node.RealNode:
        """The real node; only with ``ControlPlaneOptions(real_node=True)``."""
        if self._node is None:
            raise ControlPlaneError("this control plane has no real node")
        return self._node

    @property
    def certificate_authority(self) -> TinyCA:
        """The CA the API server trusts for clients and webhooks: it signs serving certs too."""
        return self._ca

    def launch_component(self, name: str, argv: list[str]) -> None:
        """Run one more process as part of this control plane (logged, stopped with it)."""
        self._launch(name, argv)

    def wait_for(self, what: str, ready: Any) -> None:
        """Poll ``ready`` until true; fails fast, with its log, if any component exits."""
        self._wait(what, ready)

    # -- identities --------------------------------------------------------------------------

    def add_user(self, user: str, groups: list[str], path: Path | None = None) -> Path:
        """Mint a client certificate for ``user`` and write a kubeconfig that uses it."""
        pair = self._ca.client(user, groups)
        path = path or self.workdir / f"{user.replace(':', '_')}.kubeconfig"
        write_kubeconfig(path, self.server, self._ca.cert_pem, user=user, client=pair)
        return path

    # -- components --------------------------------------------------------------------------

    def _write_pki(self) -> None:
        self._ca = TinyCA("linkerd-config-local-ca")
        _write(self.workdir / "ca.crt", self._ca.cert_pem)
        # Also the names and addresses a pod uses for the API server (in-cluster config).
        serving = self._ca.serving(
            ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
            [LOOPBACK, KUBERNETES_SERVICE_IP, real_node.NODE_IP],
        )
        _write(self.workdir / "apiserver.crt", serving.cert_pem)
        _write(self.workdir / "apiserver.key", serving.key_pem)
        sa = signing_key()
        _write(self.workdir / "sa.pub", sa.cert_pem)
        _write(self.workdir / "sa.key", sa.key_pem)
        _write(self.workdir / "audit-policy.yaml", _AUDIT_POLICY.encode())
        probe = self._ca.client("system:local-probe", ["system:masters"])
        _write(self.workdir / "probe.crt", probe.cert_pem)
        _write(self.workdir / "probe.key", probe.key_pem)
        kubelet_client = self._ca.client("kube-apiserver-kubelet-client", ["system:masters"])
        _write(self.workdir / "kubelet-client.crt", kubelet_client.cert_pem)
        _write(self.workdir / "kubelet-client.key", kubelet_client.key_pem)

    def _start_etcd(self) -> None:
        self.etcd_port = free_port()
        peer = f"http://{LOOPBACK}:{free_port()}"
        self._launch(
            "etcd",
            [
                str(self._bins["etcd"]),
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=default={peer}",
                "--unsafe-no-fsync=true",
                "--quota-backend-bytes=8589934592",
            ],
        )
        self._wait("etcd", lambda: _http_ok(f"{self.etcd_url}/health"))

    def _start_apiserver(self) -> None:
        if not self.apiserver_port:
            self.apiserver_port = free_port()
        w = self.workdir
        self._launch(
            "kube-apiserver",
            [
                str(self._bins["kube-apiserver"]),
                f"--etcd-servers={self.etcd_url}",
                *self._address_flags(),
                f"--secure-port={self.apiserver_port}",
                f"--tls-cert-file={w / 'apiserver.crt'}",
                f"--tls-private-key-file={w / 'apiserver.key'}",
                f"--client-ca-file={w / 'ca.crt'}",
                "--authorization-mode=RBAC",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                *self._admission_flags(),
                f"--service-account-issuer={self.server}",
                f"--service-account-key-file={w / 'sa.pub'}",
                f"--service-account-signing-key-file={w / 'sa.key'}",
                f"--audit-policy-file={w / 'audit-policy.yaml'}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
            ],
        )
        self._wait("kube-apiserver", lambda: self._api_ok("/readyz"))

    def _address_flags(self) -> list[str]:
        """Loopback only, unless a real node's pods must reach the API server: then it
        listens on every address and is advertised (the ``kubernetes`` Service's endpoint)
        at the node's address, and calls the kubelet with a client certificate."""
        if not self.options.real_node:
            return [
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                "--endpoint-reconciler-type=none",
            ]
        w = self.workdir
        config = w / "admission.json"
        _write(config, real_node.admission_config().encode())
        return [
            "--bind-address=0.0.0.0",
            f"--advertise-address={real_node.NODE_IP}",
            "--endpoint-reconciler-type=lease",
            f"--kubelet-client-certificate={w / 'kubelet-client.crt'}",
            f"--kubelet-client-key={w / 'kubelet-client.key'}",
            "--kubelet-preferred-address-types=InternalIP",
            "--enable-admission-plugins=PodNodeSelector",
            f"--admission-control-config-file={config}",
        ]

    def _admission_flags(self) -> list[str]:
        # With a controller manager, behave like a real cluster: the ServiceAccount plugin
        # gives every pod its ServiceAccount and token volume (Linkerd's injected proxy mounts
        # it), and KCM creates each namespace's "default" ServiceAccount and root CA ConfigMap.
        # Without one, no ServiceAccount would ever exist, so the plugin would refuse every pod.
        if self.options.workloads:
            return []
        return ["--disable-admission-plugins=ServiceAccount"]

    def _start_workload_components(self) -> None:
        for component, user in (
            ("kube-controller-manager", "system:kube-controller-manager"),
            ("kube-scheduler", "system:kube-scheduler"),
            ("kwok", "system:kwok"),
        ):
            self.add_user(user, ["system:masters"], self.workdir / f"{component}.kubeconfig")
        kc = self.workdir / "kube-controller-manager.kubeconfig"
        self._launch(
            "kube-controller-manager",
            [
                str(self._bins["kube-controller-manager"]),
                f"--kubeconfig={kc}",
                f"--controllers={self._controllers()}",
                f"--root-ca-file={self.workdir / 'ca.crt'}",
                "--leader-elect=false",
                "--secure-port=0",
                "--concurrent-deployment-syncs=10",
                "--concurrent-replicaset-syncs=10",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
            ],
        )
        self._launch(
            "kube-scheduler",
            [
                str(self._bins["kube-scheduler"]),
                f"--kubeconfig={self.workdir / 'kube-scheduler.kubeconfig'}",
                "--leader-elect=false",
                "--secure-port=0",
                "--kube-api-qps=200",
                "--kube-api-burst=400",
            ],
        )
        self._install_kwok_stages()
        self._launch("kwok", self._kwok_argv())
        self._create_kwok_node()
        time.sleep(0.5)
        for name in ("kube-controller-manager", "kube-scheduler", "kwok"):
            proc = self._procs[name]
            if not proc.running():
                raise ControlPlaneError(f"{name} exited at start:\n{proc.log_tail()}")
        self._wait_kwok_node()
        # The API server taints every new node not-ready; the node lifecycle controller would
        # lift it, but it also expects node Leases that kwok does not renew. We lift it instead.
        self.api_request(
            "PATCH",
            f"/api/v1/nodes/{KWOK_NODE}",
            {"spec": {"taints": None}},
            content_type="application/merge-patch+json",
        )

    def _controllers(self) -> str:
        return _CONTROLLERS + (_REAL_NODE_CONTROLLERS if self.options.real_node else "")

    def _kwok_argv(self) -> list[str]:
        return [
            str(self._bins["kwok"]),
            f"--kubeconfig={self.workdir / 'kwok.kubeconfig'}",
            # Nodes and pods behave as the Stage objects in the API server say: kwok's
            # defaults, applied just before, plus any a test adds (kwok_stages.py).
            f"--enable-crds={kwok_stages.STAGES.kind}",
            # Only its own node: a real node's pods must get their status from the kubelet
            # (managing all nodes, kwok marked them Ready before their containers existed).
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--cidr=10.244.0.0/16",
            f"--node-ip={LOOPBACK}",
            "--server-address=",
        ]

    def _wait_kwok_node(self) -> None:
        """kwok makes its node Ready within seconds (3 s idle or loaded, 50 starts measured);
        once, in a CI run under load, it did not within 90 s, with nothing to show why. So:
        wait a while, then restart kwok once (it reads the node and the Stages again), and
        if that fails too, say what both kwoks logged."""
        try:
            self._wait("kwok node Ready", self._node_ready, timeout=KWOK_FIRST_WAIT)
            return
        except ControlPlaneError:
            first = self._procs["kwok"].log_tail()
        self.progress(f"kwok's node not Ready after {KWOK_FIRST_WAIT:.0f}s; restarting kwok")
        self.stop_component("kwok")
        self._launch("kwok", self._kwok_argv())
        try:
            self._wait("kwok node Ready", self._node_ready)
        except ControlPlaneError as exc:
            raise ControlPlaneError(
                f"{exc}; kwok restarted once. The first kwok's log ended:\n{first}\n"
                f"the second's:\n{self._procs['kwok'].log_tail()}"
            ) from None

    def _install_kwok_stages(self) -> None:
        """kwok's Stage CRD and its default stages, before kwok starts (it reads them then).

        Server-side apply, not POST: the API server holds every create of a custom resource
        for 2 s after its CRD is established (for HA peers to catch up); an apply that
        creates is not held, and there is one API server here."""
        self.api_request("POST", CRDS.path(), kwok_stages.stage_crd(self._kwok_manifests))
        self._wait("kwok's Stage API served", lambda: self._api_ok(kwok_stages.STAGES.path()))
        for stage in kwok_stages.stage_set(self._kwok_manifests):
            path = kwok_stages.STAGES.path(name=stage["metadata"]["name"])
            self.api_request(
                "PATCH",
                f"{path}?fieldManager=local-control-plane",
                stage,
                content_type="application/apply-patch+yaml",
            )

    def _create_kwok_node(self) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": KWOK_NODE,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {
                    "type": "kwok",
                    "kubernetes.io/hostname": KWOK_NODE,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                },
            },
            "status": {
                # What a kubelet reports, ephemeral-storage too: a pod whose proxy requests
                # it (proxy.resources.ephemeral-storage) fits no node that lacks it.
                "allocatable": NODE_RESOURCES,
                "capacity": NODE_RESOURCES,
            },
        }
        self.api_request("POST", "/api/v1/nodes", node)

    def _node_ready(self) -> bool:
        node = self.api_request("GET", f"/api/v1/nodes/{KWOK_NODE}")
        conditions = node.get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    # -- plumbing ----------------------------------------------------------------------------

    def _launch(self, name: str, argv: list[str]) -> None:
        proc = ManagedProcess(name, argv, self.workdir / f"{name}.log")
        proc.start()
        self._procs[name] = proc

    def _wait(self, what: str, ready: Any, timeout: float | None = None) -> None:
        limit = self.options.start_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        last_error = ""
        while time.monotonic() < deadline:
            for proc in self._procs.values():
                if not proc.running():
                    raise ControlPlaneError(
                        f"{proc.name} exited with code {proc.exit_code()} while waiting for "
                        f"{what}; its log ({proc.log_path}) ends:\n{proc.log_tail()}"
                    )
            try:
                if ready():
                    return
            except (OSError, urllib.error.URLError, ValueError) as exc:
                last_error = str(exc)
            time.sleep(0.1)
        raise ControlPlaneError(f"{what} not ready after {limit:.0f}s (last error: {last_error})")

    def _ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.workdir / "ca.crt"))
        ctx.load_cert_chain(self.workdir / "probe.crt", self.workdir / "probe.key")
        return ctx

    def _api_ok(self, path: str) -> bool:
        with urllib.request.urlopen(self.server + path, context=self._ssl(), timeout=5) as r:
            return bool(r.status == 200)

    def api_request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """A bare request as the control plane's own superuser, for bootstrap and tests."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.server + path,
            data=data,
            method=method,
            headers={"Content-Type": content_type, "Accept": "application/json"},
        )
        with urllib.request.urlopen(req, context=self._ssl(), timeout=10) as resp:
            result: dict[str, Any] = json.loads(resp.read() or b"{}")
            return result

    def describe(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "workdir": str(self.workdir),
            "kubernetes": pinned.KUBERNETES,
            "etcd": pinned.ETCD,
            "kwok": pinned.KWOK if self.options.workloads else None,
            "pids": self.pids(),
            "bin_dir": str(self.bin_dir),
            "real_node": self._node.describe() if self._node is not None else None,
        }


def write_kubeconfig(path: Path, server: str, ca_pem: bytes, user: str, client: KeyPair) -> None:
    """A self-contained kubeconfig (certificates inline), safe to copy elsewhere."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(client.cert_pem),
                    "client-key-data": b64(client.key_pem),
                },
            }
        ],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }
    _write(path, json.dumps(config, indent=2).encode())


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(0o600)


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return bool(resp.status == 200)
