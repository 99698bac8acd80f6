"""The development guide's local install block, run as it stands: a user who copies it gets what it
says (a real node, the image built and loaded, the controller installed with kustomize and
with Helm, each Ready, then everything removed)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from devcluster import module_command
from tests.support import in_cluster

pytestmark = [pytest.mark.integration, pytest.mark.real_node]

README = in_cluster.REPO / "docs" / "development.md"
BLOCK = re.compile(
    r"<!-- install-local:begin -->\n```sh\n(?P<commands>.*?)```\n<!-- install-local:end -->",
    re.DOTALL,
)


def readme_commands() -> list[str]:
    found = BLOCK.search(README.read_text())
    assert found, "docs/development.md has no install-local block"
    return [line for line in found["commands"].splitlines() if line.strip()]


def test_readme_block_uses_the_targets_the_deploy_tests_run() -> None:
    """The closer checks (test_in_cluster_deploy) run the same targets with the same image."""
    commands = readme_commands()
    for target in in_cluster.MAKE_TARGETS:
        assert any(
            c.startswith(f"make {target}") and (target == "helm-undeploy" or in_cluster.IMAGE in c)
            for c in commands
        ), (target, commands)


def test_readme_install_block_runs(tmp_path: Path) -> None:
    env = dict(os.environ)
    # A dev cluster of the test's own, not the user's.
    env["LINKERD_CONFIG_DEV_CLUSTER_DIR"] = str(tmp_path / "dev-cluster")
    env.pop("KUBECONFIG", None)
    script = "set -euxo pipefail\n" + "\n".join(readme_commands()) + "\n"
    try:
        proc = subprocess.run(
            ["bash", "-c", script],
            cwd=in_cluster.REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=1500,
            check=False,
        )
    finally:
        subprocess.run(
            [*module_command("devcluster"), "down"],
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    assert proc.stdout.count('deployment "linkerd-config" successfully rolled out') == 2, (
        proc.stdout[-4000:]
    )
    assert "control plane stopped" in proc.stdout + proc.stderr
