"""Choosing the tool and its build command, and what a failed build tells the user: pure
decisions, table-driven (the integration test builds and runs the image for real)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from devcluster import container_image


@pytest.mark.parametrize(
    ("tool", "python_image", "expected"),
    [
        ("docker", "", ["docker", "build", "-t", "img", "."]),
        (
            "docker",
            "python:3.11",
            ["docker", "build", "-t", "img", "--build-arg", "PYTHON_IMAGE=python:3.11", "."],
        ),
        # buildah 1.28's cache bug: no layers; a local base is never pulled.
        ("podman", "", ["podman", "build", "-t", "img", "--layers=false", "."]),
        (
            "/usr/bin/podman",
            "localhost/base:1",
            [
                "/usr/bin/podman", "build", "-t", "img", "--build-arg",
                "PYTHON_IMAGE=localhost/base:1", "--layers=false", "--pull=never", ".",
            ],
        ),
    ],
)  # fmt: skip
def test_build_command(tool: str, python_image: str, expected: list[str]) -> None:
    assert container_image.build_command(tool, "img", python_image) == expected


def _failing_run(
    cmd: Sequence[str], env: Mapping[str, str] | None = None, progress: object = None
) -> None:
    raise container_image.ContainerToolError(f"{cmd[0]} build failed (exit 125)")


@pytest.mark.parametrize(
    ("python_image", "hint"),
    [("", True), ("python:3.11.13-slim-bookworm", True), ("localhost/base:1", False)],
)
def test_a_failed_build_points_to_the_local_base_unless_it_used_one(
    monkeypatch: pytest.MonkeyPatch, python_image: str, hint: bool
) -> None:
    monkeypatch.setattr(container_image, "run_command", _failing_run)
    monkeypatch.setattr(container_image, "tool_env", lambda tool: {})
    with pytest.raises(container_image.ContainerToolError) as raised:
        container_image.build("img", python_image, tool="true")
    assert ("make docker-build-local" in str(raised.value)) is hint
    assert "\n" not in str(raised.value)
