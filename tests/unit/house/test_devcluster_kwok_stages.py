"""Reading kwok's Stage CRD and Stage sets the way kwok's kustomizations lay them out."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from devcluster import kwok_stages
from devcluster.binaries import KWOK_STAGE_CRD, KWOK_STAGE_SETS


def stage(name: str, kind: str = "Pod") -> dict[str, object]:
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {"resourceRef": {"apiGroup": "v1", "kind": kind}, "next": {}},
    }


def write(path: Path, *docs: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("---\n" + "---\n".join(yaml.safe_dump(d) for d in docs))


def kustomization(folder: Path, *resources: str) -> None:
    write(folder / "kustomization.yaml", {"kind": "Kustomization", "resources": list(resources)})


def test_a_stage_set_is_its_kustomizations_resources_in_order_folders_expanded(
    tmp_path: Path,
) -> None:
    sets = tmp_path / KWOK_STAGE_SETS
    kustomization(sets / "fast", "../node/fast", "../node/heartbeat", "../pod/fast")
    kustomization(sets / "node" / "fast", "node-initialize.yaml")
    write(sets / "node" / "fast" / "node-initialize.yaml", stage("node-initialize", "Node"))
    kustomization(sets / "node" / "heartbeat", "node-heartbeat.yaml")
    write(sets / "node" / "heartbeat" / "node-heartbeat.yaml", stage("node-heartbeat", "Node"))
    kustomization(sets / "pod" / "fast", "pod-ready.yaml", "more.yaml")
    write(sets / "pod" / "fast" / "pod-ready.yaml", stage("pod-ready"))
    write(sets / "pod" / "fast" / "more.yaml", stage("pod-complete"), stage("pod-delete"))
    write(sets / "pod" / "fast" / "unlisted.yaml", stage("pod-unlisted"))

    names = [s["metadata"]["name"] for s in kwok_stages.stage_set(tmp_path)]
    assert names == ["node-initialize", "node-heartbeat", "pod-ready", "pod-complete", "pod-delete"]
    only_pods = [s["metadata"]["name"] for s in kwok_stages.stage_set(tmp_path, "pod/fast")]
    assert only_pods == ["pod-ready", "pod-complete", "pod-delete"]


def test_a_set_holding_anything_but_stages_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / KWOK_STAGE_SETS / "fast"
    kustomization(folder, "odd.yaml")
    write(folder / "odd.yaml", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})
    with pytest.raises(ValueError, match="ConfigMap, not a Stage"):
        kwok_stages.stage_set(tmp_path)


def test_the_stage_crd_must_be_kwoks(tmp_path: Path) -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": kwok_stages.STAGE_CRD_NAME},
    }
    write(tmp_path / KWOK_STAGE_CRD, crd)
    assert kwok_stages.stage_crd(tmp_path) == crd
    write(tmp_path / KWOK_STAGE_CRD, {**crd, "metadata": {"name": "attaches.kwok.x-k8s.io"}})
    with pytest.raises(ValueError, match="not kwok's Stage CRD"):
        kwok_stages.stage_crd(tmp_path)
