"""The Prometheus Operator's own CustomResourceDefinitions, for tests that create our
PrometheusRule (and the like) on the local control plane against the real schema.

They come from the operator's Go module at the pinned version (``pinned.PROMETHEUS_OPERATOR``),
downloaded into the Go module cache the control plane's builds use (checksum-verified by Go,
read-only there), not copied into this repository: ``example/prometheus-operator-crd/`` holds
them as the operator's releases ship them.
"""

from __future__ import annotations

from pathlib import Path

from linkerd_config.devcluster import pinned
from linkerd_config.devcluster.binaries import (
    BinaryUnavailableError,
    go_module_dir,
    go_toolchain,
)

MODULE = "github.com/prometheus-operator/prometheus-operator"
CRD_FOLDER = "example/prometheus-operator-crd"
DOWNLOAD_TIMEOUT = 600.0


def module_dir(version: str = pinned.PROMETHEUS_OPERATOR) -> Path:
    """The operator's module in the Go module cache, downloaded first if missing (``go mod
    download`` answers from the cache when it has it)."""
    go = go_toolchain(
        f"the Prometheus Operator's CRDs ({MODULE} v{version})", "fill the Go module cache"
    )
    return go_module_dir(go, MODULE, f"v{version}", timeout=DOWNLOAD_TIMEOUT)


def crd_path(plural: str, version: str = pinned.PROMETHEUS_OPERATOR) -> Path:
    """The file of the CRD ``<plural>.monitoring.coreos.com`` (e.g. ``prometheusrules``)."""
    path = module_dir(version) / CRD_FOLDER / f"monitoring.coreos.com_{plural}.yaml"
    if not path.is_file():
        raise BinaryUnavailableError(f"{MODULE} v{version} has no {CRD_FOLDER}/{path.name}")
    return path


def main() -> None:
    """Print where the PrometheusRule CRD is (downloading the module if needed)."""
    print(f"prometheus-operator CRDs: {crd_path('prometheusrules').parent}", flush=True)


if __name__ == "__main__":
    main()
