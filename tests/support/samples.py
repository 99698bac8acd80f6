"""The LinkerdConfig samples and the Linkerd fixture, copied into the repo from shared/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SAMPLES = FIXTURES / "samples"
INVALID = sorted((SAMPLES / "invalid").glob("*.yaml"))


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def sample(name: str) -> dict[str, Any]:
    return load(SAMPLES / name)


def why_invalid(path: Path) -> str:
    """The first line of an invalid sample says why it must be refused."""
    return path.read_text().splitlines()[0].lstrip("# ")


def install_configmap() -> dict[str, Any]:
    """The linkerd-config ConfigMap exactly as Linkerd edge-19.12.1's install wrote it."""
    return load(FIXTURES / "linkerd-config_edge-19.12.1.yaml")
