"""The checked-in CRD is what the generator produces (one source of truth)."""

from __future__ import annotations

from pathlib import Path

from linkerd_config.linkerd.linkerdconfig_resource import crd_yaml

CRD = Path(__file__).resolve().parents[2] / "manifests" / "crd" / "linkerdconfigs.yaml"


def test_checked_in_crd_is_current() -> None:
    assert CRD.read_text() == crd_yaml(), "run `make generate` and commit the result"
