"""The local control plane as a background service: ``up``, ``down``, ``status``.

``up`` starts a detached supervisor process that owns the components (they die with it) and
writes ``state.json`` once the API server is ready; ``down`` sends it SIGTERM and waits until
every component has exited and the work directory is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from devcluster import cert_manager, module_command, third_party_crds
from devcluster import real_node as real_node_module
from devcluster.addons import ADDONS
from devcluster.binaries import cache_root
from devcluster.cluster import ControlPlaneOptions, LocalControlPlane


class DevClusterError(RuntimeError):
    """Up, down or status could not do what was asked; the message says why and what to do."""


def default_state_dir() -> Path:
    return cache_root() / "dev-cluster"


def _state_file(state_dir: Path) -> Path:
    return state_dir / "state.json"


def read_state(state_dir: Path) -> dict[str, Any] | None:
    """The running supervisor's state; None if there is none we can read (a partial or foreign
    file counts as none: ``down`` then only cleans up)."""
    try:
        state = json.loads(_state_file(state_dir).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not isinstance(state.get("supervisor_pid"), int):
        return None
    return state


def _alive(pid: int) -> bool:
    """True while the process runs; an exited child not yet reaped (a zombie) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def up(
    state_dir: Path,
    workloads: bool = True,
    timeout: float = 3600.0,
    real_node: bool = False,
    addons: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Start the control plane in the background; returns its state once ready.

    The timeout is generous because the first run builds the binaries.
    """
    state = read_state(state_dir)
    if state and _alive(state["supervisor_pid"]):
        return state
    if real_node:
        try:
            real_node_module.check_machine()  # here, on one line, not in the supervisor's log
        except real_node_module.RealNodeUnavailableError as exc:
            raise DevClusterError(str(exc)) from None
    state_dir.mkdir(parents=True, exist_ok=True)
    _state_file(state_dir).unlink(missing_ok=True)
    log_path = state_dir / "supervisor.log"
    argv = [*module_command("devcluster.service"), str(state_dir)]
    if not workloads:
        argv.append("--no-workloads")
    if real_node:
        argv.append("--real-node")
    argv += [f"--with={addon}" for addon in addons]
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    printed = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        printed = _echo_new_lines(log_path, printed)
        state = read_state(state_dir)
        if state is not None:
            return state
        if proc.poll() is not None:
            _echo_new_lines(log_path, printed)
            raise DevClusterError(
                f"the control plane failed to start (exit {proc.returncode}); see {log_path}"
            )
        time.sleep(0.2)
    proc.terminate()
    raise DevClusterError(f"the control plane was not ready within {timeout:.0f}s")


def _echo_new_lines(path: Path, offset: int) -> int:
    with contextlib.suppress(OSError), path.open("rb") as f:
        f.seek(offset)
        data = f.read()
        if data:
            sys.stdout.write(data.decode(errors="replace"))
            sys.stdout.flush()
        return offset + len(data)
    return offset


def down(state_dir: Path, timeout: float = 60.0) -> bool:
    """Stop the supervisor and wait for it; False when nothing was running."""
    state = read_state(state_dir)
    if state is None or not _alive(state["supervisor_pid"]):
        _remove_files(state_dir)
        return False
    pid = int(state["supervisor_pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.killpg(pid, signal.SIGKILL)
        raise DevClusterError(f"supervisor {pid} ignored SIGTERM for {timeout:.0f}s; killed it")
    _remove_files(state_dir)
    return True


_OUR_FILES = ("state.json", "state.tmp", "kubeconfig", "supervisor.log")


def _remove_files(state_dir: Path) -> None:
    """What ``up`` created, and the folder if nothing else is in it: ``down`` leaves no trace."""
    for name in _OUR_FILES:
        (state_dir / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # not empty (a user's file) or already gone: leave it
        state_dir.rmdir()


def status(state_dir: Path) -> dict[str, Any] | None:
    state = read_state(state_dir)
    if state is None or not _alive(state["supervisor_pid"]):
        return None
    state["components_alive"] = {n: _alive(p) for n, p in state["pids"].items()}
    return state


def _add(cp: LocalControlPlane, addon: str) -> None:
    if addon == "cert-manager":
        cert_manager.start_cert_manager(cp)
    elif addon == "prometheus-operator-crds":
        third_party_crds.apply(
            cp, [third_party_crds.crd_path(p) for p in ("podmonitors", "prometheusrules")]
        )
    else:
        raise DevClusterError(f"unknown addon {addon!r}; known: {', '.join(ADDONS)}")


def _supervise(state_dir: Path, workloads: bool, real_node: bool, addons: tuple[str, ...]) -> int:
    stop = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    cp = LocalControlPlane(
        ControlPlaneOptions(workloads=workloads, real_node=real_node),
        progress=lambda m: print(m, flush=True),
    )
    cp.start()
    try:
        for addon in addons:
            _add(cp, addon)
        kubeconfig = state_dir / "kubeconfig"
        kubeconfig.write_bytes(cp.kubeconfig.read_bytes())
        kubeconfig.chmod(0o600)
        state = cp.describe() | {"kubeconfig": str(kubeconfig), "supervisor_pid": os.getpid()}
        tmp = _state_file(state_dir).with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(_state_file(state_dir))
        print(f"control plane ready at {cp.server}", flush=True)
        while not stop:
            dead = [n for n, p in cp.pids().items() if not _alive(p)]
            if dead or len(cp.pids()) < len(state["pids"]):
                print(f"component exited: {dead or 'unknown'}; stopping", flush=True)
                return 1
            time.sleep(0.5)
        return 0
    finally:
        cp.stop()
        _state_file(state_dir).unlink(missing_ok=True)
        print("control plane stopped", flush=True)


if __name__ == "__main__":
    sys.exit(
        _supervise(
            Path(sys.argv[1]),
            workloads="--no-workloads" not in sys.argv,
            real_node="--real-node" in sys.argv,
            addons=tuple(a.split("=", 1)[1] for a in sys.argv if a.startswith("--with=")),
        )
    )
