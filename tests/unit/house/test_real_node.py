"""The real node's pure parts: what the machine lacks (one line, each item with where it comes
from), and the pause image's OCI archive (content-addressed as containerd will check it)."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from devcluster import module_command, real_node


def test_a_machine_without_the_parts_is_told_what_is_missing_on_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    monkeypatch.setattr(real_node, "CNI_BIN_DIR", tmp_path / "cni")
    missing = real_node.missing_requirements()
    for needed in (
        "containerd (Debian package containerd)",
        "runc (Debian package runc)",
        "iptables (Debian package iptables)",
        "ip (Debian package iproute2)",
    ):
        assert needed in missing
    assert f"{tmp_path / 'cni' / 'bridge'} (Debian package containernetworking-plugins)" in missing
    with pytest.raises(real_node.RealNodeUnavailableError) as raised:
        real_node.check_machine()
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("this machine cannot run a real node; missing: ")
    assert "containerd (Debian package containerd)" in message


def test_a_machine_with_every_part_passes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bin_dir, cni = tmp_path / "bin", tmp_path / "cni"
    bin_dir.mkdir()
    cni.mkdir()
    for tool in ("containerd", "ctr", "runc", "iptables", "ip", "mount", "gcc"):
        (bin_dir / tool).write_text("#!/bin/sh\n")
        (bin_dir / tool).chmod(0o755)
    for plugin in ("bridge", "host-local", "loopback", "portmap"):
        (cni / plugin).write_text("")
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(real_node, "CNI_BIN_DIR", cni)
    monkeypatch.setattr("os.geteuid", lambda: 0)
    assert real_node.missing_requirements() == []
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    assert real_node.missing_requirements() == [
        "root (a kubelet mounts volumes and makes network namespaces)"
    ]


def test_the_pause_archive_is_a_content_addressed_oci_layout() -> None:
    archive = real_node.oci_archive("localhost/x/pause:1", {"pause": b"\x7fELF..."}, ["/pause"])
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, blob in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(blob).hexdigest() == name.rsplit("/", 1)[1]
    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "localhost/x/pause:1"
    manifest = json.loads(files["blobs/sha256/" + entry["digest"].split(":")[1]])
    config = json.loads(files["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    assert config["config"]["Entrypoint"] == ["/pause"]
    (layer,) = manifest["layers"]
    assert config["rootfs"]["diff_ids"] == [layer["digest"]]
    with tarfile.open(fileobj=io.BytesIO(files["blobs/sha256/" + layer["digest"][7:]])) as tar:
        (member,) = tar.getmembers()
        assert member.name == "pause" and member.mode == 0o755


def test_placement_keeps_kwok_for_all_but_the_controller_namespace() -> None:
    config = json.loads(real_node.admission_config())
    (plugin,) = config["plugins"]
    assert plugin["name"] == "PodNodeSelector"
    selector = plugin["configuration"]["podNodeSelectorPluginConfig"]
    assert selector == {"clusterDefaultNodeSelector": "type=kwok"}
    namespace = real_node.controller_namespace()["metadata"]
    assert namespace["annotations"]["scheduler.alpha.kubernetes.io/node-selector"] == (
        "linkerd-config.dev/node=real"
    )
    # As Linkerd's install labels it: its injector leaves the namespace's pods alone.
    assert namespace["labels"]["config.linkerd.io/admission-webhooks"] == "disabled"


def test_dev_cluster_up_says_on_one_line_what_the_machine_lacks(tmp_path: Path) -> None:
    """Before any process is started: exit 1, one line on stderr, the state dir untouched."""
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}
    state = tmp_path / "state"
    proc = subprocess.run(
        [*module_command("devcluster"), "up", "--real-node", "--state-dir", str(state)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.startswith("error: this machine cannot run a real node; missing: ")
    assert "containerd (Debian package containerd)" in line
    assert not state.exists()
