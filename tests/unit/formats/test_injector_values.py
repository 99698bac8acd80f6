"""Every values path edge-26.8.3's proxy injector reads for a pod can be stated in v1alpha2 and
is written as Linkerd's own ``linkerd install --ignore-cluster --set PATH=VALUE`` renders it.

The list of paths, the sample values and what Linkerd's CLI rendered for each are the fixture
``tests/fixtures/injector_values_edge-26.8.3.json``: derived from Linkerd's templates
(charts/patch, charts/partials) and ``pkg/inject``, rendered by the edge-26.8.3 CLI this
project builds (``devcluster.linkerd_binaries``). For each path a LinkerdConfig states the
sample (and nothing else the user would not) under v1alpha2's ``spec.values``; the values
format must write, at that path, the value Linkerd rendered, with the same YAML type.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from linkerd_config.linkerd.admission.validation import validate
from linkerd_config.linkerd.formats import Installed, format_for
from linkerd_config.linkerd.formats.field_table import FIELDS
from linkerd_config.linkerd.spec.conversion import convert, to_hub
from tests.support.samples import SECOND_TRUST_ANCHOR, modern_install

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "injector_values_edge-26.8.3.json"
PATHS: list[dict[str, Any]] = json.loads(FIXTURE.read_text())["paths"]
MODERN = "edge-26.8.3"
FROM_FILE = "@file"
"""A value given with --set-file (a PEM bundle), which Linkerd renders verbatim."""

# Maps Helm deep-merges with the chart's defaults (``--set a.b.c=x`` keeps a.b's other keys):
# a LinkerdConfig states a whole value, which replaces the installed one. Linkerd's render
# holds the sample and more.
MERGED_BY_HELM = frozenset({"proxy.tracing.labels", "networkValidator.securityContext"})
# Where the fixture's command needs another value (Linkerd's install checks them together).
COMPANIONS: dict[str, dict[str, Any]] = {
    "proxy.tracing.enabled": {
        "proxy.tracing.collector.endpoint": "collector.linkerd-jaeger:4317",
        "proxy.tracing.collector.meshIdentity.serviceAccountName": "collector",
        "proxy.tracing.collector.meshIdentity.namespace": "linkerd-jaeger",
    },
    "proxyInit.closeWaitTimeoutSecs": {"proxyInit.runAsRoot": True},
}


def yaml_type(value: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "map"}.get(
        type(value), "null"
    )


def at(root: Any, path: str) -> Any:
    for key in path.split("."):
        root = root.get(key) if isinstance(root, dict) else None
    return root


def put(root: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    for key in keys[:-1]:
        root = root.setdefault(key, {})
    root[keys[-1]] = copy.deepcopy(value)


def stating(path: str, value: Any) -> dict[str, Any]:
    """A v1alpha2 LinkerdConfig stating ``path`` (and what Linkerd checks with it)."""
    values: dict[str, Any] = {"linkerdVersion": MODERN, "proxy": {"image": {"version": MODERN}}}
    put(values, path, value)
    for other, companion in COMPANIONS.get(path, {}).items():
        put(values, other, companion)
    return {
        "apiVersion": "config.linkerd.io/v1alpha2",
        "kind": "LinkerdConfig",
        "metadata": {"name": "injector-values", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"values": values},
    }


def written(obj: dict[str, Any]) -> dict[str, Any]:
    """The values the values format writes for ``obj`` over edge-26.8.3's install."""
    current = {d["metadata"]["name"]: dict(d["data"]) for d in modern_install()}
    installed = Installed("linkerd/linkerd-config", current["linkerd-config"], current)
    rendering = format_for(MODERN).rendering(to_hub(obj)["spec"], installed)
    found: dict[str, Any] = yaml.safe_load(rendering.data["values"])
    return found


def test_the_fixture_lists_what_the_injector_reads() -> None:
    paths = [entry["path"] for entry in PATHS]
    assert len(paths) == len(set(paths)) == 105
    for wanted in ("proxy.nativeSidecar", "proxy.defaultInboundPolicy", "proxy.accessLog"):
        assert wanted in paths
    assert "proxy.await" in paths and "proxyInit.ignoreInboundPorts" in paths


def test_every_fixture_path_is_a_v1alpha2_field() -> None:
    v1alpha2 = {".".join(row.v1alpha2_path).removeprefix("values.") for row in FIELDS}
    assert sorted(entry["path"] for entry in PATHS if entry["path"] not in v1alpha2) == []


@pytest.mark.parametrize("entry", PATHS, ids=[entry["path"] for entry in PATHS])
def test_written_as_linkerd_install_renders_it(entry: dict[str, Any]) -> None:
    path, sample, rendered = entry["path"], entry["sample"], entry["rendered"]
    if sample == rendered == FROM_FILE:
        sample = rendered = SECOND_TRUST_ANCHOR
    obj = stating(path, sample)
    assert validate(obj) == [], entry["command"]
    ours = at(written(obj), path)
    assert yaml_type(ours) == entry["rendered_yaml_type"], (entry["command"], ours)
    if path in MERGED_BY_HELM:
        assert ours == sample
        assert rendered.items() >= sample.items(), rendered
    else:
        assert ours == rendered, entry["command"]


@pytest.mark.parametrize("entry", PATHS, ids=[entry["path"] for entry in PATHS])
def test_survives_a_round_trip_through_v1alpha1(entry: dict[str, Any]) -> None:
    sample = SECOND_TRUST_ANCHOR if entry["sample"] == FROM_FILE else entry["sample"]
    obj = stating(entry["path"], sample)
    back = convert(convert(obj, "v1alpha1"), "v1alpha2")
    assert back == obj
