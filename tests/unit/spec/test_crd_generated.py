"""The checked-in CRDs are what the generator produces (one source of truth): the one the
in-cluster webhook converts (manifests/crd) and the one a local run converts
(manifests/crd-local, what `make install` installs)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from linkerd_config.linkerd.spec.crd import (
    CONVERSION_REFUSAL,
    LOCAL_CONVERSION_URL,
    LOCAL_CONVERTER,
    crd_yaml,
)

MANIFESTS = Path(__file__).resolve().parents[3] / "manifests"
CRD = MANIFESTS / "crd" / "linkerdconfigs.yaml"
LOCAL_CRD = MANIFESTS / "crd-local" / "linkerdconfigs.yaml"


def test_checked_in_crd_is_current() -> None:
    assert CRD.read_text() == crd_yaml(), "run `make generate` and commit the result"


def test_checked_in_local_crd_is_current() -> None:
    assert LOCAL_CRD.read_text() == crd_yaml(local=True), "run `make generate` and commit"


def test_chart_carries_the_same_generated_files() -> None:
    """The chart reads the CRDs and the webhook configurations from its own files/ (Helm
    cannot read outside the chart): copies `make generate` writes, byte for byte."""
    pairs = [
        (CRD, "linkerdconfigs.yaml"),
        (LOCAL_CRD, "linkerdconfigs-local.yaml"),
        (MANIFESTS / "webhook" / "webhooks.yaml", "webhooks.yaml"),
    ]
    for generated, name in pairs:
        copy = MANIFESTS / "chart" / "files" / name
        assert copy.read_text() == generated.read_text(), "run `make generate` and commit"


def test_the_two_crds_differ_only_in_who_converts() -> None:
    """Same versions, schemas and columns; the local one's converter is a URL on loopback (no
    cert-manager annotation: its CA is the local controller's) and its v1alpha1 carries the
    refusal a local controller takes off while it serves."""
    cluster = yaml.safe_load(CRD.read_text())
    local = yaml.safe_load(LOCAL_CRD.read_text())
    assert local["metadata"]["annotations"] == dict([LOCAL_CONVERTER])
    assert cluster["metadata"]["annotations"]
    client = local["spec"]["conversion"]["webhook"]["clientConfig"]
    assert client["url"].startswith(LOCAL_CONVERSION_URL + "/")
    assert "service" in cluster["spec"]["conversion"]["webhook"]["clientConfig"]
    for c, lo in zip(cluster["spec"]["versions"], local["spec"]["versions"], strict=True):
        root = lo["schema"]["openAPIV3Schema"]
        rules = root.pop("x-kubernetes-validations", None)
        assert rules == ([CONVERSION_REFUSAL] if lo["name"] == "v1alpha1" else None)
        assert c == lo


def test_the_makefile_names_the_converters_the_crds_have() -> None:
    """`make install` and `make helm-takeover` rewrite the converter with values the Makefile
    spells out: the same as the generated CRDs'."""
    makefile = (MANIFESTS.parent / "Makefile").read_text()
    values = dict(line.split(" := ", 1) for line in makefile.splitlines() if " := " in line)
    cluster = yaml.safe_load(CRD.read_text())
    local = yaml.safe_load(LOCAL_CRD.read_text())
    assert values["CRD_NAME"] == cluster["metadata"]["name"] == local["metadata"]["name"]
    assert {"url": values["LOCAL_CONVERTER"]} == local["spec"]["conversion"]["webhook"][
        "clientConfig"
    ]
    assert json.loads(values["SERVICE_CONVERTER"]) == {
        "service": cluster["spec"]["conversion"]["webhook"]["clientConfig"]["service"]
    }
