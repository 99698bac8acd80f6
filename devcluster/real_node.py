"""A real node beside kwok's simulated ones: a kubelet on this machine with Debian's
containerd and runc, the CNI bridge plugins, and kube-proxy routing Services.

Why kube-proxy (iptables mode), not only the API server's endpoint routing: a pod's
in-cluster configuration dials the ``kubernetes`` Service's ClusterIP
(``KUBERNETES_SERVICE_HOST``), and the API server's webhook calls go to the webhook
Service's ClusterIP; kube-proxy's rules route both, for pods and for processes on the host,
exactly as in a cluster. Without it a ClusterIP is an address nobody answers.

Placement: kwok keeps the test workloads, the real node runs the controller. The API
server's ``PodNodeSelector`` admission plugin does it, as a platform team would: every
namespace's pods default to kwok's node (``clusterDefaultNodeSelector``), and the
``linkerd`` namespace, created annotated here, selects the real node. The install commands
stay exactly a user's.

Addresses (one real node per machine: the kubelet's port, the bridge and the dummy link are
the machine's): the API server is advertised at ``NODE_IP``, an address of ours on the
loopback link (a pod cannot reach 127.0.0.1, but reaches any other address of the host; this
machine kind's kernel has no dummy links); pods get ``POD_SUBNET`` on the bridge ``BRIDGE``.
Everything else lives in the control plane's work directory and goes with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Any

from devcluster import cluster_dns, container_image, module_command
from devcluster.binaries import Progress, build_lock, cache_root

if TYPE_CHECKING:
    from devcluster.cluster import LocalControlPlane

NODE_NAME = "real-node-0"
NODE_LABEL = "linkerd-config.dev/node"
NODE_LABEL_VALUE = "real"
KWOK_NODE_SELECTOR = "type=kwok"
NODE_IP = "10.250.0.1"
ADDRESS_LINK = "lo"
BRIDGE = "lcbr0"
POD_SUBNET = "10.245.0.0/24"
KUBELET_PORT = 10250
CNI_BIN_DIR = Path("/usr/lib/cni")
PAUSE_IMAGE = "localhost/linkerd-config/pause:3.10"
CONTROLLER_NAMESPACE = "linkerd"
K8S_NAMESPACE = "k8s.io"
"""containerd's namespace for the CRI plugin's images and containers."""

# What Kubernetes' build/pause/linux/pause.c does: be PID 1 of the sandbox, reap children,
# exit on TERM/INT. Built static, so the image is one file.
_PAUSE_C = r"""
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static void sigdown(int signo) { (void)signo; _exit(0); }
static void sigreap(int signo) { (void)signo; while (waitpid(-1, NULL, WNOHANG) > 0) {} }
int main(void) {
  struct sigaction down = {.sa_handler = sigdown}, reap = {.sa_handler = sigreap};
  if (getpid() != 1) return 1;
  if (sigaction(SIGINT, &down, NULL) < 0 || sigaction(SIGTERM, &down, NULL) < 0) return 2;
  reap.sa_flags = SA_NOCLDSTOP;
  if (sigaction(SIGCHLD, &reap, NULL) < 0) return 3;
  for (;;) pause();
}
"""


class RealNodeUnavailableError(RuntimeError):
    """This machine cannot run a real node; the one-line message names what is missing."""


def missing_requirements() -> list[str]:
    """What this machine lacks for a real node, each with where it comes from."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (a kubelet mounts volumes and makes network namespaces)")
    for tool, package in (
        ("containerd", "containerd"),
        ("ctr", "containerd"),
        ("runc", "runc"),
        ("iptables", "iptables"),
        ("ip", "iproute2"),
        ("mount", "mount"),
        ("gcc", "gcc, for the pause image"),
    ):
        if shutil.which(tool) is None:
            missing.append(f"{tool} (Debian package {package})")
    for plugin in ("bridge", "host-local", "loopback", "portmap"):
        if not (CNI_BIN_DIR / plugin).is_file():
            missing.append(f"{CNI_BIN_DIR / plugin} (Debian package containernetworking-plugins)")
    return missing


def check_machine() -> None:
    missing = missing_requirements()
    if missing:
        raise RealNodeUnavailableError(
            "this machine cannot run a real node; missing: " + "; ".join(missing)
        )


# -- the pause image ---------------------------------------------------------------------------


def pause_image_archive(progress: Progress = print) -> Path:
    """An OCI image archive holding only a static ``/pause``, built once and cached (no
    registry is needed for the sandbox image)."""
    key = hashlib.sha256(_PAUSE_C.encode()).hexdigest()[:12]
    out = cache_root() / f"pause-{key}" / "pause.oci.tar"
    if out.is_file():
        return out
    with build_lock("pause"):
        if out.is_file():
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        src = out.parent / "pause.c"
        binary = out.parent / "pause"
        src.write_text(_PAUSE_C)
        progress(f"building the pause image ({PAUSE_IMAGE}) with gcc -static")
        _run(["gcc", "-static", "-Os", "-s", "-o", str(binary), str(src)])
        tmp = out.with_suffix(".tmp")
        tmp.write_bytes(oci_archive(PAUSE_IMAGE, {"pause": binary.read_bytes()}, ["/pause"]))
        tmp.replace(out)
    return out


def oci_archive(name: str, files: dict[str, bytes], entrypoint: list[str]) -> bytes:
    """A one-layer OCI image layout as a tar, named with containerd's annotation so
    ``ctr images import`` gives it ``name``."""
    layer = layer_tar({path: LayerFile(data) for path, data in files.items()})
    image = OciImage(name, (layer,), {"Entrypoint": entrypoint, "User": "65535:65535"})
    buf = io.BytesIO()
    write_oci_layout(buf, [image])
    return buf.getvalue()


@dataclass(frozen=True)
class LayerFile:
    """A regular file of an image layer; ``xattrs`` as ``setfattr`` names them (file
    capabilities are ``security.capability``), which containerd sets when it unpacks."""

    data: bytes
    mode: int = 0o755
    xattrs: Mapping[str, bytes] = field(default_factory=dict)


def file_capabilities(*capabilities: int) -> bytes:
    """``security.capability`` as ``setcap cap_x,cap_y+eip`` writes it (VFS_CAP_REVISION_2,
    effective): the capabilities permitted (and effective) when the file is executed."""
    permitted = sum(1 << c for c in capabilities)
    return struct.pack("<IIIII", 0x02000000 | 0x1, permitted & 0xFFFFFFFF, 0, permitted >> 32, 0)


def layer_tar(files: Mapping[str, LayerFile]) -> bytes:
    """An uncompressed layer, reproducible (owner root, time 0), each file's parent folders
    included (0755)."""
    folders = sorted({str(parent) for path in files for parent in PurePosixPath(path).parents})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for folder in folders:
            if folder != ".":
                info = tarfile.TarInfo(folder)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                tar.addfile(info)
        for path, file in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(file.data), file.mode, 0
            info.pax_headers = {
                f"SCHILY.xattr.{key}": value.decode("utf-8", "surrogateescape")
                for key, value in file.xattrs.items()
            }
            tar.addfile(info, io.BytesIO(file.data))
    return buf.getvalue()


@dataclass(frozen=True)
class OciImage:
    """One image of an OCI layout: its name (containerd's ``io.containerd.image.name``),
    its layers bottom first (uncompressed tars: in memory, or files such as a root file
    system mmdebstrap made) and its configuration (``Entrypoint``, ``Env``, ``User``...)."""

    name: str
    layers: tuple[bytes | Path, ...]
    config: Mapping[str, Any]


def write_oci_layout(target: Path | IO[bytes], images: list[OciImage]) -> None:
    """An OCI image layout as a tar (what ``ctr images import`` reads), holding every image;
    a layer two images share (the same file or bytes) is stored once."""

    def digest_of(layer: bytes | Path) -> tuple[str, int]:
        if isinstance(layer, bytes):
            return "sha256:" + hashlib.sha256(layer).hexdigest(), len(layer)
        sha = hashlib.sha256()
        with layer.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                sha.update(chunk)
        return "sha256:" + sha.hexdigest(), layer.stat().st_size

    blobs: dict[str, bytes | Path] = {}
    manifests = []
    for image in images:
        layers = []
        for layer in image.layers:
            digest, size = digest_of(layer)
            blobs[digest] = layer
            layers.append({"mediaType": OCI_LAYER, "digest": digest, "size": size})
        config = json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": dict(image.config),
                "rootfs": {"type": "layers", "diff_ids": [x["digest"] for x in layers]},
            }
        ).encode()
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {"mediaType": OCI_CONFIG, "digest": _sha(config), "size": len(config)},
                "layers": layers,
            }
        ).encode()
        blobs[_sha(config)] = config
        blobs[_sha(manifest)] = manifest
        manifests.append(
            {
                "mediaType": OCI_MANIFEST,
                "digest": _sha(manifest),
                "size": len(manifest),
                "annotations": {"io.containerd.image.name": image.name},
            }
        )
    index = json.dumps({"schemaVersion": 2, "manifests": manifests}).encode()
    members: dict[str, bytes | Path] = {
        "oci-layout": b'{"imageLayoutVersion":"1.0.0"}',
        "index.json": index,
        **{f"blobs/sha256/{d.split(':')[1]}": blob for d, blob in blobs.items()},
    }
    with contextlib.ExitStack() as stack:
        if isinstance(target, Path):
            tar = stack.enter_context(tarfile.open(target, "w", format=tarfile.PAX_FORMAT))
        else:
            tar = stack.enter_context(
                tarfile.open(fileobj=target, mode="w", format=tarfile.PAX_FORMAT)
            )
        for name, blob in sorted(members.items()):
            info = tarfile.TarInfo(name)
            info.mode, info.mtime = 0o644, 0
            if isinstance(blob, bytes):
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
            else:
                info.size = blob.stat().st_size
                with blob.open("rb") as f:
                    tar.addfile(info, f)


OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# -- configuration files -----------------------------------------------------------------------


def containerd_config(root: Path) -> str:
    """containerd 1.6's CRI plugin: runc with cgroupfs, our CNI network, our pause image.

    ``restrict_oom_score_adj``: a sandbox asks for OOM score -998, which needs
    CAP_SYS_RESOURCE this machine kind lacks (runc then fails with "can't get final child's
    PID from pipe"); restricted, the score is clamped to ours."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""\
version = 2
root = "{root / "root"}"
state = "{root / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = "{root / "containerd.sock"}"

[ttrpc]
  address = "{root / "containerd.sock.ttrpc"}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{root / "opt"}"

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  enable_selinux = false
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        BinaryName = "{shutil.which("runc") or "runc"}"
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{root / "cni"}"
"""


def cni_config(ipam_dir: Path) -> dict[str, Any]:
    """A bridge with the host as gateway: pods reach the host's addresses (the API server at
    ``NODE_IP``), the host reaches pods (the API server's webhook calls, Prometheus)."""
    return {
        "cniVersion": "1.0.0",
        "name": "linkerd-config-dev",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(ipam_dir),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(root: Path, ca_file: Path, runtime_socket: Path) -> dict[str, Any]:
    """The kubelet as a cluster runs it (x509 + webhook authn/authz for the API server's
    calls), with what this machine kind needs: cgroupfs on a cgroup v1 hierarchy, swap
    allowed, no eviction on a busy CI disk, and nothing written outside ``root``."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 0,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{runtime_socket}",
        "podLogsDir": str(root / "pod-logs"),
        "resolvConf": "/etc/resolv.conf",
        "clusterDomain": "cluster.local",
        "clusterDNS": [NODE_IP],  # cluster_dns, on the node's address
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "syncFrequency": "10s",
        "nodeStatusReportFrequency": "10s",
        "registerNode": True,
    }


def kube_proxy_config(kubeconfig: Path) -> dict[str, Any]:
    """iptables mode (the kernel has no IPVS). Conntrack sysctls are left alone: setting
    them needs privileges a sandboxed machine may not give, and defaults suffice here."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "hostnameOverride": NODE_NAME,
        "clusterCIDR": POD_SUBNET,
        "bindAddress": NODE_IP,
        "healthzBindAddress": "127.0.0.1:10256",
        "oomScoreAdj": 0,
        "metricsBindAddress": "127.0.0.1:10249",
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }


def admission_config() -> str:
    """PodNodeSelector's configuration: kwok's node unless a namespace says otherwise."""
    return json.dumps(
        {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AdmissionConfiguration",
            "plugins": [
                {
                    "name": "PodNodeSelector",
                    "configuration": {
                        "podNodeSelectorPluginConfig": {
                            "clusterDefaultNodeSelector": KWOK_NODE_SELECTOR
                        }
                    },
                }
            ],
        }
    )


def controller_namespace() -> dict[str, Any]:
    """``linkerd`` as Linkerd's own install makes it (edge-26.8.3's chart
    ``linkerd-control-plane/templates/namespace.yaml``: its labels keep Linkerd's injector
    away from the control plane's pods, ours included), and annotated so that its pods go to
    the real node."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": CONTROLLER_NAMESPACE,
            "labels": {
                "linkerd.io/is-control-plane": "true",
                "config.linkerd.io/admission-webhooks": "disabled",
                "linkerd.io/control-plane-ns": CONTROLLER_NAMESPACE,
            },
            "annotations": {
                "linkerd.io/inject": "disabled",
                "scheduler.alpha.kubernetes.io/node-selector": f"{NODE_LABEL}={NODE_LABEL_VALUE}",
            },
        },
    }


# -- host networking ---------------------------------------------------------------------------


def add_node_address() -> None:
    """``NODE_IP``: the API server's advertised address and the kubelet's, reachable from
    pods (through the bridge's gateway) and from the host."""
    _run(["ip", "addr", "add", f"{NODE_IP}/32", "dev", ADDRESS_LINK])


def remove_node_address() -> None:
    subprocess.run(
        ["ip", "addr", "del", f"{NODE_IP}/32", "dev", ADDRESS_LINK],
        capture_output=True,
        check=False,
    )
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)


def node_address_taken() -> bool:
    """True when another real node (another control plane) holds this machine's address."""
    shown = _run(["ip", "-o", "addr", "show", "dev", ADDRESS_LINK])
    return f" {NODE_IP}/" in shown


def unmount_under(root: Path) -> None:
    """Every mount below ``root`` (the kubelet's volumes, containerd's rootfs and netns),
    deepest first, so the work directory can be removed."""
    prefix = str(root.resolve()) + "/"
    mounts = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            target = line.split()[1].replace("\\040", " ")
            if target.startswith(prefix):
                mounts.append(target)
    for target in sorted(set(mounts), key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True, check=False)


def wait_until(ready: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, subprocess.SubprocessError):
            if ready():
                return True
        time.sleep(0.2)
    return False


def _run(argv: list[str], timeout: float = 120.0, stdin: bytes | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, timeout=timeout, check=False, input=stdin)
    if proc.returncode != 0:
        raise RealNodeUnavailableError(
            f"{' '.join(argv[:4])} failed (exit {proc.returncode}): "
            f"{(proc.stderr or proc.stdout).decode(errors='replace').strip()}"
        )
    return proc.stdout.decode(errors="replace")


# -- the node's lifecycle ----------------------------------------------------------------------


class RealNode:
    """containerd, the kubelet and kube-proxy as components of a local control plane.

    ``start`` after the API server (advertised at ``NODE_IP``) and the workload components;
    ``stop`` before the control plane stops: it deletes the node's pods so that the kubelet
    tears their sandboxes down (networks, mounts), then cleans up what is left."""

    def __init__(self, cp: LocalControlPlane, bins: dict[str, Path]) -> None:
        self.cp = cp
        self.bins = bins
        self.root = cp.workdir / "node"
        self.containerd_root = self.root / "containerd"
        self.socket = self.containerd_root / "containerd.sock"
        self._lock: IO[str] | None = None

    def start(self) -> None:
        """Take the machine's real-node lock first: held for the node's life (released if
        this process dies), so a second node is refused and a crashed one's leftovers are
        known to be stale and removed."""
        self._lock = take_machine_lock()
        pause = pause_image_archive(self.cp.progress)
        self.root.mkdir(parents=True, exist_ok=True)
        if node_address_taken():
            self.cp.progress("removing what a real node that did not stop left behind")
            clean_stale(self.bins["kube-proxy"], self.cp.workdir)
        add_node_address()
        self._start_cluster_dns()
        self._start_containerd()
        self.import_image(pause)
        self._start_kubelet()
        self._start_kube_proxy()
        self.cp.wait_for(f"node {NODE_NAME} Ready", self._ready)
        # The API server taints a new node not-ready; the node lifecycle controller (not
        # run here, as kwok's node needs no Lease) would lift it once Ready, so we do.
        self.cp.api_request(
            "PATCH",
            f"/api/v1/nodes/{NODE_NAME}",
            {"spec": {"taints": None}},
            content_type="application/merge-patch+json",
        )

    def describe(self) -> dict[str, str]:
        return {"name": NODE_NAME, "address": NODE_IP, "containerd": str(self.socket)}

    def ctr(self, *args: str, stdin: bytes | None = None, timeout: float = 300.0) -> str:
        return _run(
            ["ctr", "--address", str(self.socket), "--namespace", K8S_NAMESPACE, *args],
            timeout=timeout,
            stdin=stdin,
        )

    def import_image(self, archive: Path) -> None:
        """An image archive (OCI or docker-archive) into the CRI plugin's image store."""
        import_archive(self.socket, archive)

    def _start_cluster_dns(self) -> None:
        """``cluster_dns`` on ``NODE_IP``:53, with a client certificate of its own."""
        pair = self.cp.certificate_authority.client("system:cluster-dns", ["system:masters"])
        pki = self.root / "cluster-dns"
        pki.mkdir(parents=True, exist_ok=True)
        (pki / "tls.crt").write_bytes(pair.cert_pem)
        (pki / "tls.key").write_bytes(pair.key_pem)
        (pki / "tls.key").chmod(0o600)
        self.cp.launch_component(
            "cluster-dns",
            [
                *module_command("devcluster.cluster_dns"),
                f"--server={self.cp.server}",
                f"--ca={self.cp.workdir / 'ca.crt'}",
                f"--cert={pki / 'tls.crt'}",
                f"--key={pki / 'tls.key'}",
                f"--listen={NODE_IP}:53",
            ],
        )
        self.cp.wait_for("cluster DNS", self._dns_answers)

    def _dns_answers(self) -> bool:
        """True once ``kubernetes.default.svc.cluster.local`` resolves to the Service's IP."""
        return cluster_dns.resolve(NODE_IP, "kubernetes.default.svc.cluster.local") != []

    def _start_containerd(self) -> None:
        (self.containerd_root / "cni").mkdir(parents=True, exist_ok=True)
        conf = self.containerd_root / "cni" / "10-bridge.conflist"
        conf.write_text(json.dumps(cni_config(self.root / "cni-ipam"), indent=2))
        config = self.containerd_root / "config.toml"
        config.write_text(containerd_config(self.containerd_root))
        self.cp.launch_component("containerd", ["containerd", "--config", str(config)])
        self.cp.wait_for("containerd", self._containerd_answers)

    def _containerd_answers(self) -> bool:
        """False until containerd listens (a refused dial is the normal first answer)."""
        try:
            return bool(self.ctr("version", timeout=5))
        except RealNodeUnavailableError:
            return False

    def _start_kubelet(self) -> None:
        kubeconfig = self.cp.add_user(
            f"system:node:{NODE_NAME}", ["system:nodes", "system:masters"]
        )
        config = self.root / "kubelet.yaml"
        config.write_text(
            json.dumps(kubelet_config(self.root, self.cp.workdir / "ca.crt", self.socket))
        )
        self.cp.launch_component(
            "kubelet",
            [
                str(self.bins["kubelet"]),
                f"--config={config}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={self.root / 'kubelet'}",
                f"--cert-dir={self.root / 'kubelet-pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_IP}",
                f"--node-labels={NODE_LABEL}={NODE_LABEL_VALUE}",
                "--v=1",
            ],
        )

    def _start_kube_proxy(self) -> None:
        kubeconfig = self.cp.add_user("system:kube-proxy", ["system:node-proxier"])
        config = self.root / "kube-proxy.yaml"
        config.write_text(json.dumps(kube_proxy_config(kubeconfig)))
        self.cp.launch_component(
            "kube-proxy", [str(self.bins["kube-proxy"]), f"--config={config}", "--v=1"]
        )

    def _ready(self) -> bool:
        node = self.cp.api_request("GET", f"/api/v1/nodes/{NODE_NAME}")
        conditions = node.get("status", {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def stop(self) -> None:
        """Pods first (through the kubelet, so their networks and mounts are torn down; with
        nothing left to replace them), then the components, then whatever a crash left:
        tasks, network namespaces, mounts, links, rules."""
        if self._lock is None:
            return  # never started (another node holds the machine): nothing here is ours
        # The controllers first: else each deleted pod's ReplicaSet makes a new one, and the
        # wait for no tasks runs out (35 s, with a Deployment on the node).
        for name in ("kube-controller-manager", "kube-scheduler"):
            self.cp.stop_component(name, missing_ok=True)
        namespaces = self._network_namespaces()
        with contextlib.suppress(Exception):
            pods = self.cp.api_request(
                "GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{NODE_NAME}"
            )
            for pod in pods.get("items", []):
                meta = pod["metadata"]
                self.cp.api_request(
                    "DELETE",
                    f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                    {"gracePeriodSeconds": 0},
                )
            wait_until(self._no_tasks, timeout=30)
        for name in ("kube-proxy", "kubelet", "cluster-dns"):
            self.cp.stop_component(name, missing_ok=True)
        with contextlib.suppress(Exception):
            for task in self.ctr("tasks", "ls", "-q", timeout=10).split():
                self.ctr("tasks", "kill", "-a", "-s", "SIGKILL", task, timeout=10)
        self.cp.stop_component("containerd", missing_ok=True)
        _kill_shims(self.containerd_root)
        subprocess.run(
            [str(self.bins["kube-proxy"]), "--cleanup"], capture_output=True, check=False
        )
        for path in namespaces:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
            path.unlink(missing_ok=True)
        _remove_chains()
        unmount_under(self.root)
        remove_node_address()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _network_namespaces(self) -> list[Path]:
        """The network namespaces containerd made for this node's sandboxes (bind mounts
        under /var/run/netns), read from the containers' specs."""
        found: set[Path] = set()
        with contextlib.suppress(Exception):
            for container in self.ctr("containers", "ls", "-q", timeout=10).split():
                info = json.loads(self.ctr("containers", "info", container, timeout=10))
                spec = info.get("Spec") or {}
                for ns in (spec.get("linux") or {}).get("namespaces") or []:
                    if ns.get("type") == "network" and ns.get("path", "").startswith(
                        "/var/run/netns/"
                    ):
                        found.add(Path(ns["path"]))
        return sorted(found)

    def _no_tasks(self) -> bool:
        return not self.ctr("tasks", "ls", "-q", timeout=10).split()


def import_archive(socket: Path, archive: Path) -> None:
    _run(
        [
            "ctr",
            "--address",
            str(socket),
            "--namespace",
            K8S_NAMESPACE,
            "images",
            "import",
            str(archive),
        ],
        timeout=600,
    )


def load_image(socket: Path, image: str) -> None:
    """Copy ``image`` from podman's or docker's store into the node's containerd, as
    ``kind load docker-image`` does: a docker-archive carries its name with it."""
    try:
        tool = container_image.container_tool()
    except container_image.ContainerToolError as exc:
        raise RealNodeUnavailableError(str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="linkerd-config-image-") as tmp:
        archive = Path(tmp) / "image.tar"
        argv = [tool, "save", "-o", str(archive), image]
        if container_image.is_podman(tool):
            argv[2:2] = ["--format", "docker-archive"]
        _run(argv, timeout=600)
        import_archive(socket, archive)


def take_machine_lock() -> IO[str]:
    """The machine's one real node: an exclusive lock on a file in the cache, or an error
    naming the process that holds it."""
    path = cache_root() / "real-node.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.open("a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "unknown"
        lock.close()
        raise RealNodeUnavailableError(
            f"another real node runs on this machine (process {holder}); stop its control "
            "plane first (one real node per machine: its address, bridge and kubelet port)"
        ) from None
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()
    return lock


def clean_stale(kube_proxy: Path, own_workdir: Path) -> None:
    """What a real node whose process was killed left (its lock is free, so nobody runs it):
    its pods' processes (the kubelet's cgroups), containerd's shims, mounts, the address,
    the bridge, the rules."""
    for procs in Path("/sys/fs/cgroup/pids/kubepods").rglob("cgroup.procs"):
        with contextlib.suppress(OSError, ValueError):
            for pid in procs.read_text().split():
                os.kill(int(pid), 9)
    _kill_shims(Path("/node/containerd"), anywhere=True)
    with contextlib.suppress(OSError):
        targets = [
            line.split()[1]
            for line in Path("/proc/self/mounts").read_text().splitlines()
            if "/linkerd-config-cp-" in line and "/node/" in line
        ]
        for target in sorted(set(targets), key=len, reverse=True):
            subprocess.run(["umount", "-l", target], capture_output=True, check=False)
    subprocess.run([str(kube_proxy), "--cleanup"], capture_output=True, check=False)
    _remove_chains()
    remove_node_address()
    _remove_unused_network_namespaces()
    # The dead control plane's work directory (its other components died with it).
    for node_dir in Path(tempfile.gettempdir()).glob("linkerd-config-cp-*/node"):
        if node_dir.parent.resolve() != own_workdir.resolve():
            shutil.rmtree(node_dir.parent, ignore_errors=True)


def _remove_unused_network_namespaces() -> None:
    """containerd's sandbox namespaces (``cni-*``) that no process is in any more: a killed
    node's, whose pods were just killed. A namespace with a process in it is left alone."""
    in_use: set[int] = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                in_use.add((proc / "ns" / "net").stat().st_ino)
    for path in Path("/var/run/netns").glob("cni-*"):
        with contextlib.suppress(OSError):
            if path.stat().st_ino not in in_use:
                subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)
                path.unlink(missing_ok=True)


def _remove_chains() -> None:
    """The chains ``kube-proxy --cleanup`` leaves: the kubelet's canaries and hint, the localnet
    firewall, with the jumps to it."""
    commands = [["-D", hook, "-j", "KUBE-FIREWALL"] for hook in ("INPUT", "OUTPUT")]
    for table in ("mangle", "nat", "filter"):
        for chain in ("KUBE-KUBELET-CANARY", "KUBE-FIREWALL", "KUBE-IPTABLES-HINT"):
            commands += [["-t", table, "-F", chain], ["-t", table, "-X", chain]]
    for args in commands:
        subprocess.run(["iptables", *args], capture_output=True, check=False)


def _kill_shims(containerd_root: Path, anywhere: bool = False) -> None:
    """containerd's runc shims outlive it by design; ours are found by their socket path
    (``anywhere``: any control plane's real node, for a crashed one's)."""
    marker = str(containerd_root)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            ours = marker in cmdline and (not anywhere or "/linkerd-config-cp-" in cmdline)
            if "containerd-shim" in cmdline and ours:
                os.kill(int(proc.name), 9)
