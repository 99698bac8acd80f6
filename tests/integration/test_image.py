"""The controller image (issue 24): built as a user builds it, ``make docker-build-local``
(the Dockerfile on a base made from Debian's packages, since no registry is reachable in CI),
then run with the same tool (docker, or podman) to check what the manifests rely on: user
65532:65532, a read-only root filesystem with nothing writable but a ``/tmp`` tmpfs, the
entry point ``linkerd-config`` with ``run`` as its command.

No container tool is a failure, not a skip: CI counts a skipped integration test as a failed
run, and a machine that cannot build the image has not shown that it builds.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devcluster.container_image import (
    ContainerToolError,
    container_tool,
    is_podman,
    tool_env,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 840.0
RUN_TIMEOUT = 60.0
NONROOT = "65532"


@dataclass(frozen=True)
class Built:
    tool: str
    image: str
    env: dict[str, str]

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.tool, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
            check=False,
        )

    def run(
        self, *args: str, options: Sequence[str] = (), entrypoint: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``run --rm OPTIONS IMAGE ARGS``."""
        if entrypoint is not None:
            options = ["--entrypoint", entrypoint, *options]
        return self("run", "--rm", *options, self.image, *args)

    def as_deployed(self, user: str = f"{NONROOT}:{NONROOT}") -> list[str]:
        """The Deployment's securityContext: a read-only root with only /tmp writable (an
        emptyDir there; podman would add tmpfs on /run and /var/tmp of its own accord,
        docker adds none), every capability dropped, no privilege escalation."""
        podman = ["--read-only-tmpfs=false"] if is_podman(self.tool) else []
        return [
            "--read-only",
            *podman,
            "--tmpfs",
            "/tmp",
            "--user",
            user,
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
        ]


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (
        f"{result.args} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    )
    return result.stdout


@pytest.fixture(scope="module")
def image() -> Iterator[Built]:
    """One build for the module, through the make target, removed afterwards (a tag of this
    process's own, so parallel runs neither share nor remove each other's image)."""
    try:
        tool = container_tool()
    except ContainerToolError as error:
        pytest.fail(f"cannot build the controller image: {error}", pytrace=False)
    tag = f"localhost/linkerd-config:test-{os.getpid()}"
    venv = Path(sys.prefix)
    # This interpreter's venv, taken as installed (-o): the test must not reinstall it.
    cmd = [
        "make",
        "--no-print-directory",
        f"VENV={venv}",
        "-o",
        str(venv / ".installed"),
        "docker-build-local",
        f"IMG={tag}",
        f"CONTAINER_TOOL={tool}",
    ]
    build = subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False
    )
    if build.returncode != 0:
        pytest.fail(
            f"{' '.join(cmd)} exited {build.returncode}\n{build.stdout[-4000:]}\n"
            f"{build.stderr[-4000:]}",
            pytrace=False,
        )
    built = Built(tool, tag, tool_env(tool))
    try:
        yield built
    finally:
        built("image", "rm", tag)


@pytest.fixture(scope="module")
def config(image: Built) -> dict[str, Any]:
    inspected = json.loads(_ok(image("image", "inspect", image.image)))
    cfg: dict[str, Any] = inspected[0]["Config"]
    return cfg


def test_the_entry_point_runs_the_controller(config: dict[str, Any]) -> None:
    assert config["Entrypoint"] == ["linkerd-config"]
    assert config["Cmd"] == ["run"]


def test_the_image_user_is_numeric_nonroot(config: dict[str, Any]) -> None:
    # Numeric, so the kubelet can check runAsNonRoot without reading /etc/passwd.
    assert config["User"] == f"{NONROOT}:{NONROOT}"


def test_it_runs_as_uid_and_gid_65532(image: Built) -> None:
    assert _ok(image.run("-u", entrypoint="id")).strip() == NONROOT
    assert _ok(image.run("-g", entrypoint="id")).strip() == NONROOT


def test_version_on_a_read_only_root(image: Built) -> None:
    expected = f"linkerd-config {importlib.metadata.version('linkerd-config')}"
    assert _ok(image.run("--version", options=["--read-only"])).strip() == expected


def test_the_run_command_starts_as_the_deployment_runs_it(image: Built) -> None:
    # It parses its flags and settings without writing anywhere.
    out = _ok(image.run("run", "--help", options=image.as_deployed()))
    assert out.startswith("usage: linkerd-config run")


def test_nothing_but_tmp_is_writable(image: Built) -> None:
    # As root, so that only the read-only mount (not file permissions) can refuse a write.
    folders = ("/", "/etc", "/opt/linkerd-config", "/var/tmp", "/run")
    script = f"touch /tmp/ok || exit 1; for d in {' '.join(folders)}; do touch $d/x 2>&1; done; :"
    out = _ok(image.run("-c", script, options=image.as_deployed(user="0"), entrypoint="sh"))
    refusals = [line for line in out.splitlines() if line.endswith("Read-only file system")]
    assert len(refusals) == len(folders), out


def test_the_image_holds_no_development_cluster(image: Built) -> None:
    """Issue 38: only the controller and its CLI; nothing that builds Kubernetes or runs a
    kubelet, and no development command in the CLI."""
    script = (
        "import importlib.util, linkerd_config, pathlib;"
        "print(importlib.util.find_spec('devcluster'), importlib.util.find_spec('tests'));"
        "root = pathlib.Path(linkerd_config.__file__).parent;"
        "print(sorted(str(p) for p in root.rglob('*') if 'devcluster' in str(p)"
        " or p.suffix == '.go'))"
    )
    out = _ok(image.run("-c", script, options=image.as_deployed(), entrypoint="python"))
    assert out.split() == ["None", "None", "[]"], out
    found = _ok(image.run("-c", "find / -xdev -name '*devcluster*' -o -name '*.go' | head -5",
                          options=image.as_deployed(), entrypoint="sh"))  # fmt: skip
    assert found.strip() == "", found
    usage = _ok(image.run("--help", options=image.as_deployed()))
    assert "dev-cluster" not in usage and "{run,plan,status,convert,check," in usage, usage
