"""A user's terminal for the local-run tests: the repository, the test's cluster in
``KUBECONFIG``, its kubectl first on ``PATH``, free ports for the controller; commands run as
typed, ``make run`` in the background until Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from devcluster.cluster import LocalControlPlane, free_port
from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.resource import CRDS
from linkerd_config.linkerd.spec.crd import LINKERD_CONFIGS
from tests.support.waiting import eventually

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "user-guide.md"
BLOCK = re.compile(
    r"<!-- local-run:begin -->\n```sh\n(?P<commands>.*?)```\n<!-- local-run:end -->", re.DOTALL
)
CRD_NAME = str(LINKERD_CONFIGS)
Json = dict[str, Any]


def guide_commands() -> list[str]:
    """The user guide's local-run block, a command a line."""
    found = BLOCK.search(GUIDE.read_text())
    assert found, "docs/user-guide.md has no local-run block"
    return [line for line in found["commands"].splitlines() if line.strip()]


class Shell:
    """The user's terminal: the repository, the test's cluster, its kubectl on PATH."""

    def __init__(self, cp: LocalControlPlane) -> None:
        self.health_port = free_port()
        self.env = dict(os.environ)
        self.env.update(
            {
                "KUBECONFIG": str(cp.kubeconfig),
                "KUBECTL": str(cp.binary("kubectl")),
                "PATH": f"{cp.binary('kubectl').parent}{os.pathsep}{os.environ['PATH']}",
                "HEALTH_PROBE_BIND_ADDRESS": f"127.0.0.1:{self.health_port}",
                "METRICS_BIND_ADDRESS": f"127.0.0.1:{free_port()}",
                "WEBHOOK_BIND_ADDRESS": f"127.0.0.1:{free_port()}",
                "LOG_FORMAT": "json",
            }
        )

    def run(self, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["bash", "-c", command],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if check:
            assert proc.returncode == 0, f"{command}:\n{proc.stdout}\n{proc.stderr}"
        return proc

    def start(self, command: str) -> subprocess.Popen[str]:
        """In the background, in a session of its own (Ctrl-C reaches the whole group)."""
        return subprocess.Popen(
            ["bash", "-c", command],
            cwd=REPO,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.health_port}/readyz", timeout=2
            ) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False


def interrupt(proc: subprocess.Popen[str]) -> tuple[int, str]:
    """Ctrl-C in the terminal: SIGINT to the foreground group; its exit code and output (if
    it already ended, what it ended with)."""
    if proc.poll() is not None:
        out, _ = proc.communicate(timeout=10)
        return proc.returncode, out
    os.killpg(proc.pid, signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=10)
    return proc.returncode, out


async def started(shell: Shell, command: str) -> subprocess.Popen[str]:
    """``command`` (``make run``) in the background, once its /readyz answers 200."""
    proc = shell.start(command)

    async def ready_or_exited() -> bool:
        return shell.ready() or proc.poll() is not None

    try:
        await eventually(ready_or_exited, timeout=120, interval=0.2, what=f"{command} Ready")
    except AssertionError as exc:
        _, out = interrupt(proc)
        raise AssertionError(f"{exc}; its output:\n{out[-5000:]}") from None
    except BaseException:
        interrupt(proc)
        raise
    if proc.poll() is not None:
        raise AssertionError(f"{command} exited {proc.returncode}:\n{proc.communicate()[0]}")
    return proc


async def v1alpha1_rules(kube: KubeClient) -> list[Json]:
    """The root validation rules of the CRD's v1alpha1 (the refusal, while none converts)."""
    crd = await kube.request("GET", CRDS.path(name=CRD_NAME))
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    rules: list[Json] = v1["schema"]["openAPIV3Schema"].get("x-kubernetes-validations", [])
    return rules


def records_of(out: str) -> list[Json]:
    """The JSON log lines of a run's output."""
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def stopped_gracefully(code: int, out: str) -> None:
    """Ctrl-C: make passes SIGINT on and dies of it (-2) or exits 130 once the controller,
    which stops gracefully on it, has exited; the controller says it stopped."""
    assert code in (0, 130, -signal.SIGINT), out[-3000:]
    assert any(r.get("msg") == "manager stopped" for r in records_of(out)), out[-3000:]
