"""Third-party CustomResourceDefinitions users have in their clusters (the Prometheus
Operator's, cert-manager's), for tests that create or dry-run our objects of those kinds on the
local control plane against the real schema, never a stand-in with the same names.

Each comes from its project's Go module at the pinned version (``pinned``), downloaded into
the Go module cache the control plane's builds use (checksum-verified by Go, read-only there),
not copied into this repository.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from devcluster import pinned
from devcluster.binaries import (
    BinaryUnavailableError,
    go_module_dir,
    go_toolchain,
)

if TYPE_CHECKING:
    from devcluster.cluster import LocalControlPlane

DOWNLOAD_TIMEOUT = 600.0


@dataclass(frozen=True)
class CrdSource:
    """Where a project's module keeps its CRDs, one file per kind."""

    project: str
    module: str
    version: str
    folder: str
    """The folder in the module, as the project's releases ship the CRDs."""
    group: str
    """Files are named ``<group>_<plural>.yaml``."""


PROMETHEUS_OPERATOR = CrdSource(
    "the Prometheus Operator",
    "github.com/prometheus-operator/prometheus-operator",
    pinned.PROMETHEUS_OPERATOR,
    "example/prometheus-operator-crd",
    "monitoring.coreos.com",
)
CERT_MANAGER = CrdSource(
    "cert-manager",
    "github.com/cert-manager/cert-manager",
    pinned.CERT_MANAGER,
    "deploy/crds",
    "cert-manager.io",
)


def module_dir(source: CrdSource) -> Path:
    """The project's module in the Go module cache, downloaded first if missing (``go mod
    download`` answers from the cache when it has it)."""
    go = go_toolchain(
        f"{source.project}'s CRDs ({source.module} v{source.version})", "fill the Go module cache"
    )
    return go_module_dir(go, source.module, f"v{source.version}", timeout=DOWNLOAD_TIMEOUT)


def crd_path(plural: str, source: CrdSource = PROMETHEUS_OPERATOR) -> Path:
    """The file of the CRD ``<plural>.<group>`` (e.g. ``prometheusrules``)."""
    path = module_dir(source) / source.folder / f"{source.group}_{plural}.yaml"
    if not path.is_file():
        raise BinaryUnavailableError(
            f"{source.module} v{source.version} has no {source.folder}/{path.name}"
        )
    return path


def apply(cp: LocalControlPlane, files: Sequence[Path]) -> None:
    """Server-side apply each CRD file (idempotent; never held like a POST right after
    another CRD), then wait until every one is served."""
    from linkerd_config.kube.resource import CRDS  # noqa: PLC0415 - keeps main() light

    crds: list[dict[str, Any]] = [yaml.safe_load(p.read_text()) for p in files]
    for crd in crds:
        cp.api_request(
            "PATCH",
            CRDS.path(name=crd["metadata"]["name"])
            + "?fieldManager=linkerd-config-devcluster&force=true",
            crd,
            content_type="application/apply-patch+yaml",
        )
    for crd in crds:
        spec = crd["spec"]
        version = next(v["name"] for v in spec["versions"] if v.get("served", True))
        path = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}?limit=1"
        cp.wait_for(f"{crd['metadata']['name']} served", lambda p=path: _get(cp, p))


def _get(cp: LocalControlPlane, path: str) -> bool:
    cp.api_request("GET", path)
    return True


def main() -> None:
    """Print where each project's CRDs are (downloading the modules if needed)."""
    for source, plural in ((PROMETHEUS_OPERATOR, "prometheusrules"), (CERT_MANAGER, "issuers")):
        print(f"{source.project} CRDs: {crd_path(plural, source).parent}", flush=True)


if __name__ == "__main__":
    main()
