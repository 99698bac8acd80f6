"""The local control plane: real etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok on loopback, the envtest approach, for tests, the demo and the bench.

Development only: the product's package (``linkerd_config``), its wheel and its image hold
none of it, and the product never imports it (an import-linter contract)."""

from __future__ import annotations

import sys
from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parents[1]
"""The checkout this package runs from (it is not installed: the wheel does not ship it)."""


def module_command(module: str) -> list[str]:
    """``python -m module`` (one of this package's), found from any working directory."""
    run = (
        f"import runpy, sys; sys.path.insert(0, {str(SOURCE_ROOT)!r}); "
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    )
    return [sys.executable, "-c", run]
