"""The checked-in CRD is what the generator produces (one source of truth)."""

from __future__ import annotations

from pathlib import Path

from linkerd_config.linkerd.linkerdconfig_resource import crd_yaml

CRD = Path(__file__).resolve().parents[2] / "manifests" / "crd" / "linkerdconfigs.yaml"


def test_checked_in_crd_is_current() -> None:
    assert CRD.read_text() == crd_yaml(), "run `make generate` and commit the result"


def test_chart_carries_the_same_generated_files() -> None:
    """The chart reads the CRD and the webhook configurations from its own files/ (Helm cannot
    read outside the chart): copies `make generate` writes, byte for byte."""
    manifests = CRD.parents[1]
    for generated in (CRD, manifests / "webhook" / "webhooks.yaml"):
        copy = manifests / "chart" / "files" / generated.name
        assert copy.read_text() == generated.read_text(), "run `make generate` and commit"
