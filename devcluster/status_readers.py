"""``status-readers``: other tools' own code reading our status (issue 38), built from their Go
modules and cached like the control plane's binaries. Its main (``status_readers/main.go``)
calls kstatus's ``status.Compute`` (``sigs.k8s.io/cli-utils``), Flux's wait
(``github.com/fluxcd/pkg/ssa`` ``WaitForSetWithContext``, fail-fast, as kustomize-controller
runs it) and a health script under gopher-lua (the Lua VM Argo CD runs); see its header.

``python -m devcluster.status_readers`` builds it and prints its path."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devcluster import pinned
from devcluster.binaries import Progress, build_lock, cache_root, go_build, go_toolchain

MAIN = Path(__file__).resolve().parent / "status_readers" / "main.go"
MODULE = "linkerd-config.dev/status-readers"
REQUIRES = {
    "github.com/fluxcd/pkg/ssa": f"v{pinned.FLUX_SSA}",
    "github.com/yuin/gopher-lua": f"v{pinned.GOPHER_LUA}",
    "sigs.k8s.io/cli-utils": f"v{pinned.KSTATUS}",
}
GO_DIRECTIVE = "1.26.0"
"""What ``github.com/fluxcd/pkg/ssa`` v0.78.0's go.mod asks for."""
TIMEOUT = 300.0


def go_mod() -> str:
    required = "".join(f"\t{module} {version}\n" for module, version in sorted(REQUIRES.items()))
    return f"module {MODULE}\n\ngo {GO_DIRECTIVE}\n\nrequire (\n{required})\n"


def binary() -> Path:
    """Keyed by the main and the versions, so changing either rebuilds."""
    digest = hashlib.sha256(MAIN.read_bytes() + go_mod().encode()).hexdigest()[:12]
    return cache_root() / f"status-readers-{digest}" / "bin" / "status-readers"


def ensure_status_readers(progress: Progress = print) -> Path:
    """The ``status-readers`` binary, built on first use."""
    out = binary()
    if out.is_file() and os.access(out, os.X_OK):
        return out
    with build_lock("status-readers"):
        if not (out.is_file() and os.access(out, os.X_OK)):
            go = go_toolchain(
                "status-readers (kstatus, Flux's wait, gopher-lua)",
                "run the unit tests only (make test-unit)",
            )
            src = out.parent.parent / "src"
            src.mkdir(parents=True, exist_ok=True)
            (src / "go.mod").write_text(go_mod())
            (src / "main.go").write_bytes(MAIN.read_bytes())
            out.parent.mkdir(parents=True, exist_ok=True)
            go_build(go, src, "status-readers", ".", "", out, progress)
    return out


@dataclass(frozen=True)
class StatusReaders:
    """The built binary, one call per question."""

    path: Path

    def _run(self, *args: str, timeout: float = TIMEOUT) -> dict[str, Any]:
        done = subprocess.run(
            [str(self.path), *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"status-readers {args[0]} exited {done.returncode}: {done.stderr}")
        found: dict[str, Any] = json.loads(done.stdout)
        return found

    def kstatus(self, obj_file: Path) -> dict[str, Any]:
        return self._run("kstatus", str(obj_file))

    def argocd_health(self, script: Path, obj_file: Path) -> dict[str, Any]:
        return self._run("argocd-health", str(script), str(obj_file))

    def flux_wait(
        self, kubeconfig: Path, group: str, kind: str, name: str, timeout: float
    ) -> dict[str, Any]:
        return self._run(
            "flux-wait", f"--kubeconfig={kubeconfig}", f"--group={group}", f"--kind={kind}",
            f"--name={name}", f"--timeout={timeout}s", "--interval=1s",
            timeout=timeout + 60,
        )  # fmt: skip


if __name__ == "__main__":
    print(ensure_status_readers())
