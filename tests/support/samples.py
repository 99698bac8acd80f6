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


SECOND_TRUST_ANCHOR = (SAMPLES / "second_trust_anchor.pem").read_text()
"""A valid CA other than the one Linkerd's installs hold: a trust-anchor rotation."""


def modern_install() -> list[dict[str, Any]]:
    """linkerd-config and linkerd-identity-trust-roots as Linkerd edge-26.8.3's own
    `linkerd install --ignore-cluster` rendered them (regenerated with
    `python -m devcluster.linkerd_install edge-26.8.3`)."""
    text = (FIXTURES / "linkerd-config_edge-26.8.3.yaml").read_text()
    return [doc for doc in yaml.safe_load_all(text) if doc]
