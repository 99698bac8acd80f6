"""kwok's Stage API on the local control plane: how simulated nodes and pods behave is a set
of Stage objects in the API server, so a test can change it.

kwok runs with ``--enable-crds=Stage``. Then (kwok v0.7.0, ``pkg/kwok/cmd/root.go`` and
``pkg/kwok/controllers/stages_manager.go``) it uses no built-in stage at all: it watches
Stage objects and runs a node or pod controller once a Stage for that kind exists, each
playing the Stages of its kind as they are now. So before kwok starts, the control plane
creates kwok's own Stage CRD and kwok's ``fast`` set (``kustomize/stage/fast``: node-initialize,
node-heartbeat-with-lease, pod-ready, pod-complete, pod-delete; what kwok's in-cluster
install applies as ``stage-fast.yaml``). Without ``--enable-crds`` and without a node lease
duration, as it ran here before, kwok plays exactly these five built in, so every pod still
becomes Running and Ready at once.

Both come from the kwok Go module the binary is built from (``binaries.ensure_kwok_manifests``).
Of a Stage set only what kwok's kustomizations use here is read: ``resources`` naming Stage
manifests or folders with a kustomization of their own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from devcluster.binaries import KWOK_STAGE_CRD, KWOK_STAGE_SETS
from linkerd_config.kube.resource import ApiResource

Json = dict[str, Any]

STAGES = ApiResource("kwok.x-k8s.io", "v1alpha1", "stages", "Stage", namespaced=False)
STAGE_CRD_NAME = "stages.kwok.x-k8s.io"
DEFAULT_STAGE_SET = "fast"
"""The set the control plane creates: kwok's built-in defaults, as Stage objects."""


def stage_crd(manifests: Path) -> Json:
    """kwok's Stage CustomResourceDefinition, as its module ships it."""
    (crd,) = _documents(manifests / KWOK_STAGE_CRD)
    if crd.get("kind") != "CustomResourceDefinition" or crd["metadata"]["name"] != STAGE_CRD_NAME:
        raise ValueError(f"{manifests / KWOK_STAGE_CRD} is not kwok's Stage CRD")
    return crd


def stage_set(manifests: Path, name: str = DEFAULT_STAGE_SET) -> list[Json]:
    """The Stage objects of kwok's set ``name`` (a folder under ``kustomize/stage``), in the
    order its kustomization lists them."""
    stages = [
        doc for path in _resources(manifests / KWOK_STAGE_SETS / name) for doc in _documents(path)
    ]
    for stage in stages:
        if stage.get("kind") != STAGES.kind or stage.get("apiVersion") != STAGES.api_version:
            raise ValueError(f"kwok stage set {name!r} holds a {stage.get('kind')}, not a Stage")
    return stages


def _resources(folder: Path) -> list[Path]:
    """The manifest files a kustomization lists, folders of its own expanded in place."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text()) or {}
    found: list[Path] = []
    for entry in kustomization.get("resources") or ():
        target = (folder / str(entry)).resolve()
        found.extend(_resources(target) if target.is_dir() else [target])
    return found


def _documents(path: Path) -> list[Json]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
