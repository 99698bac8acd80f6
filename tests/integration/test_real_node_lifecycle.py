"""The real node's life on a machine: one at a time, a clean stop, and a killed owner's
leftovers (pods still running under containerd's shims, the address, the bridge, the rules)
removed by the next start instead of blocking it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devcluster import real_node
from devcluster.cluster import ControlPlaneOptions, LocalControlPlane

pytestmark = [pytest.mark.integration, pytest.mark.real_node]

_OWNER = """
import json, sys, time
from devcluster.cluster import ControlPlaneOptions, LocalControlPlane
cp = LocalControlPlane(ControlPlaneOptions(real_node=True), progress=lambda m: None)
cp.start()
pod = {"metadata": {"name": "sleeper", "namespace": "linkerd"},
       "spec": {"containers": [{"name": "c", "image": sys.argv[1],
                                "imagePullPolicy": "Never"}]}}
cp.api_request("POST", "/api/v1/namespaces/linkerd/pods", pod)
def running():
    p = cp.api_request("GET", "/api/v1/namespaces/linkerd/pods/sleeper")
    return p.get("status", {}).get("phase") == "Running"
cp.wait_for("the pod Running", running)
print(json.dumps({"workdir": str(cp.workdir)}), flush=True)
time.sleep(600)
"""


def shims_of(workdir: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "containerd-shim" in cmdline and workdir in cmdline:
                found.append(int(proc.name))
    return found


def machine_clean() -> list[str]:
    """What a stopped real node must not leave: its address, bridge, kube-proxy's chains."""
    left = []
    if real_node.node_address_taken():
        left.append(f"address {real_node.NODE_IP}")
    bridge = ["ip", "link", "show", real_node.BRIDGE]
    if subprocess.run(bridge, capture_output=True, check=False).returncode == 0:
        left.append(f"bridge {real_node.BRIDGE}")
    for table in ("nat", "filter", "mangle"):
        rules = subprocess.run(
            ["iptables", "-t", table, "-S"], capture_output=True, text=True, check=False
        ).stdout
        left += [f"{table}: {r}" for r in rules.splitlines() if "KUBE-" in r]
    return left


def test_a_killed_owner_leaves_nothing_that_blocks_the_next_node() -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER, real_node.PAUSE_IMAGE],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()
        assert line, f"the owner exited with {owner.wait(timeout=30)}"
        workdir = json.loads(line)["workdir"]
        assert shims_of(workdir), "the pod's shim should run"
    finally:
        with contextlib.suppress(ProcessLookupError):  # no stop(): as kill -9 leaves it
            os.killpg(owner.pid, signal.SIGKILL)
        owner.wait(timeout=30)
    time.sleep(1)
    assert shims_of(workdir), "containerd's shims outlive their containerd, by design"
    assert real_node.node_address_taken()

    netns = set(Path("/var/run/netns").glob("cni-*"))
    assert netns, "the dead node's pod network namespace is still there"

    with LocalControlPlane(ControlPlaneOptions(real_node=True), progress=lambda m: None) as cp:
        assert not shims_of(workdir), "the next start removes the dead node's pods"
        assert not Path(workdir).exists(), "... and its work directory"
        assert not netns & set(Path("/var/run/netns").glob("cni-*")), "... and its netns"
        node = cp.api_request("GET", f"/api/v1/nodes/{real_node.NODE_NAME}")
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
        # One real node per machine: a second is refused, naming who holds it.
        with pytest.raises(real_node.RealNodeUnavailableError, match="another real node runs"):
            LocalControlPlane(ControlPlaneOptions(real_node=True)).start()
        # ... and that refusal did not disturb the first.
        assert real_node.node_address_taken()
        services = ["iptables", "-t", "nat", "-S", "KUBE-SERVICES"]
        assert subprocess.run(services, capture_output=True, check=False).returncode == 0
        node = cp.api_request("GET", f"/api/v1/nodes/{real_node.NODE_NAME}")
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True"
    assert machine_clean() == []
