"""The local control plane's Linkerd parts that need no cluster: the kubelet-like ConfigMap
projection, finding Linkerd's source, the edge-19.12.3 build patch, the webhook rewrite."""

from __future__ import annotations

import base64
import copy
import io
import os
import tarfile
from pathlib import Path

import pytest

from devcluster import linkerd_binaries, pinned
from devcluster.binaries import BinaryUnavailableError
from devcluster.configmap_volume import DATA_LINK, project
from devcluster.proxy_injector import legacy_webhook_configuration, on_loopback


def test_projection_swaps_the_whole_set_at_once(tmp_path: Path) -> None:
    folder = tmp_path / "config"
    first = project(folder, {"global": "g1", "proxy": "p1", "install": "i1"})
    assert os.readlink(folder / DATA_LINK) == first
    assert (folder / "proxy").read_text() == "p1"
    assert os.readlink(folder / "proxy") == f"{DATA_LINK}/proxy"  # readers follow ..data

    second = project(folder, {"global": "g2", "proxy": "p2"})
    assert second != first
    assert os.readlink(folder / DATA_LINK) == second
    assert (folder / "global").read_text() == "g2"
    assert (folder / "proxy").read_text() == "p2"
    assert not (folder / "install").exists()  # a key gone from the ConfigMap is gone here
    assert not (folder / first).exists()  # the previous payload is removed
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [DATA_LINK, second, "global", "proxy"]
    )


def _tarball(path: Path, tag: str) -> Path:
    archive = path / f"linkerd2-{tag}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        data = b"module github.com/linkerd/linkerd2\n"
        info = tarfile.TarInfo(f"linkerd2-{tag}/go.mod")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return archive


def test_a_tarball_whose_sha256_differs_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rel = pinned.LINKERD_EDGE_19_12_3
    _tarball(tmp_path, rel.tag)
    monkeypatch.setenv(linkerd_binaries.SOURCE_ENV, str(tmp_path))
    with pytest.raises(BinaryUnavailableError, match=r"sha256 .* not the pinned"):
        linkerd_binaries._source_tree(rel, tmp_path / "src", print)
    assert not (tmp_path / "src" / f"linkerd2-{rel.tag}").exists()  # nothing half-made left


def test_an_unpacked_tree_is_copied_and_a_missing_one_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rel = pinned.LINKERD_EDGE_26_8_3
    given = tmp_path / "given"
    (given / f"linkerd2-{rel.tag}").mkdir(parents=True)
    (given / f"linkerd2-{rel.tag}" / "go.mod").write_text("module x\n")
    monkeypatch.setenv(linkerd_binaries.SOURCE_ENV, str(given))
    tree = linkerd_binaries._source_tree(rel, tmp_path / "src", print)
    assert (tree / "go.mod").read_text() == "module x\n"

    monkeypatch.setenv(linkerd_binaries.SOURCE_ENV, str(tmp_path / "empty"))
    with pytest.raises(BinaryUnavailableError, match=r"LINKERD2_SOURCE=.*linkerd2-edge-19\.12\.3"):
        linkerd_binaries._source_tree(pinned.LINKERD_EDGE_19_12_3, tmp_path / "src2", print)


def test_the_cronjob_patch_changes_exactly_one_line(tmp_path: Path) -> None:
    main = tmp_path / "controller" / "cmd" / "proxy-injector" / "main.go"
    main.parent.mkdir(parents=True)
    original = (
        "webhook.Launch(\n"
        "\t\t[]k8s.APIResource{k8s.NS, k8s.Deploy, k8s.RC, k8s.RS, k8s.Job, k8s.DS, k8s.SS, "
        "k8s.Pod, k8s.CJ},\n\t\t9995,\n"
    )
    main.write_text(original)
    linkerd_binaries._patch_cronjob_informer(tmp_path)
    patched = main.read_text()
    assert "k8s.CJ" not in patched
    assert [
        a for a, b in zip(original.splitlines(), patched.splitlines(), strict=True) if a != b
    ] == [original.splitlines()[1]]
    linkerd_binaries._patch_cronjob_informer(tmp_path)  # idempotent on its own copy
    assert main.read_text() == patched

    main.write_text("something else entirely\n")
    with pytest.raises(BinaryUnavailableError, match="the source differs"):
        linkerd_binaries._patch_cronjob_informer(tmp_path)


def test_an_unknown_release_is_named() -> None:
    with pytest.raises(BinaryUnavailableError, match=r"edge-1\.0\.0.*known: edge-19\.12\.3"):
        linkerd_binaries.ensure_linkerd("edge-1.0.0")
    with pytest.raises(BinaryUnavailableError, match="no 'linkerd' binary"):
        linkerd_binaries.ensure_linkerd("edge-19.12.3", "linkerd")


def test_linkerds_webhook_is_pointed_at_loopback_and_nothing_else_changes() -> None:
    template = legacy_webhook_configuration()
    template["metadata"]["annotations"] = {"cert-manager.io/inject-ca-from": "linkerd/x"}
    pristine = copy.deepcopy(template)
    config = on_loopback(template, "https://127.0.0.1:1234/", b"PEM")
    assert template == pristine  # the template is not modified
    (webhook,) = config["webhooks"]
    assert webhook["clientConfig"] == {
        "url": "https://127.0.0.1:1234/",
        "caBundle": base64.b64encode(b"PEM").decode(),
    }
    assert config["metadata"]["annotations"] == {}
    rest = {k: v for k, v in webhook.items() if k != "clientConfig"}
    assert rest == {k: v for k, v in pristine["webhooks"][0].items() if k != "clientConfig"}
    assert rest["namespaceSelector"]["matchExpressions"][0]["key"] == (
        "config.linkerd.io/admission-webhooks"
    )
    assert rest["sideEffects"] == "None"  # lets the API server call it for dry-run requests
