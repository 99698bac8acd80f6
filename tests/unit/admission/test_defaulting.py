"""Defaulting: the minimal sample becomes a complete edge-19.12.3 config, the mutating
webhook's JSONPatch produces exactly ``defaulted()``, and defaulting is a fixed point."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from linkerd_config.linkerd.admission.defaults import defaulted, json_patch
from tests.support.samples import sample

Json = dict[str, Any]

MINIMAL = "edge_19.12.3_use_webhook_defaults.yaml"


def apply_patch(document: Json, patch: list[Json]) -> Json:
    """A tiny RFC 6902 applier for the one operation defaulting uses: ``add``.

    Strict like the API server's: the parent must exist, ``~1``/``~0`` are unescaped, and
    ``add`` on an existing member replaces it.
    """
    result = copy.deepcopy(document)
    for op in patch:
        assert op["op"] == "add", op
        assert op["path"].startswith("/"), op
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"][1:].split("/")]
        parent: Any = result
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        last = tokens[-1]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            assert 0 <= index <= len(parent), op
            parent.insert(index, copy.deepcopy(op["value"]))
        else:
            assert isinstance(parent, dict), (op, parent)
            parent[last] = copy.deepcopy(op["value"])
    return result


def test_minimal_sample_gets_edge_19_12_3_defaults() -> None:
    spec = defaulted(sample(MINIMAL)["spec"])
    global_, proxy = spec["global"], spec["proxy"]
    assert global_["linkerdNamespace"] == "linkerd"
    assert global_["configMap"] == "linkerd-config"
    assert global_["version"] == proxy["proxyVersion"] == "edge-19.12.3"
    assert global_["cniEnabled"] is False
    assert global_["clusterDomain"] == "cluster.local"
    identity = global_["identityContext"]
    assert identity["trustDomain"] == "cluster.local"
    assert identity["issuanceLifeTime"] == "86400s"
    assert identity["clockSkewAllowance"] == "20s"
    assert identity["scheme"] == "linkerd.io/tls"
    assert identity["trustAnchorsPEM"].startswith("-----BEGIN CERTIFICATE-----")
    assert proxy["proxyImage"] == {"name": "gcr.io/linkerd-io/proxy", "pullPolicy": "IfNotPresent"}
    assert proxy["proxyInitImage"] == {
        "name": "gcr.io/linkerd-io/proxy-init",
        "pullPolicy": "IfNotPresent",
    }
    ports = (proxy["inboundPort"], proxy["outboundPort"], proxy["adminPort"], proxy["controlPort"])
    assert ports == (4143, 4140, 4191, 4190)
    assert proxy["proxyUID"] == 2102
    assert proxy["logLevel"] == "warn,linkerd2_proxy=info"
    assert proxy["proxyInitImageVersion"] == "v1.2.0"
    assert proxy["ignoreInboundPorts"] == proxy["ignoreOutboundPorts"] == []
    assert proxy["disableExternalProfiles"] is True


def test_minimal_sample_matches_the_full_sample_where_the_full_one_says_the_default() -> None:
    """The full sample spells out edge-19.12.3's install; it differs only where it chose to."""
    full = sample("edge_19.12.3.yaml")["spec"]
    minimal = defaulted(sample(MINIMAL)["spec"])
    chosen = {("global", "omitWebhookSideEffects"), ("proxy", "ignoreInboundPorts"),
              ("proxy", "ignoreOutboundPorts"), ("proxy", "resource")}  # fmt: skip
    for section in ("global", "proxy"):
        for key, value in full[section].items():
            if (section, key) not in chosen:
                assert minimal[section][key] == value, (section, key)
        assert set(minimal[section]) | {"resource"} >= set(full[section])


def test_present_fields_are_never_changed() -> None:
    spec = sample("edge_19.12.3.yaml")["spec"]
    assert defaulted(spec) == spec
    assert json_patch(spec) == []


def test_patch_of_the_minimal_sample_gives_exactly_defaulted() -> None:
    obj = sample(MINIMAL)
    patch = json_patch(obj["spec"])
    assert patch, "the minimal sample lacks defaults"
    assert all(op["op"] == "add" for op in patch)
    assert apply_patch(obj, patch)["spec"] == defaulted(obj["spec"])
    assert apply_patch(obj, patch)["metadata"] == obj["metadata"]


def test_patch_adds_a_missing_parent_whole() -> None:
    spec = {"proxy": {"proxyVersion": "edge-19.12.3", "proxyInitImageVersion": "v1.2.0"}}
    patch = json_patch(spec)
    assert {"op": "add", "path": "/spec/global", "value": defaulted(spec)["global"]} in patch
    assert apply_patch({"spec": spec}, patch)["spec"] == defaulted(spec)


def test_null_counts_as_missing() -> None:
    spec = {"global": None, "proxy": {"proxyVersion": "edge-19.12.3", "adminPort": None}}
    full = defaulted(spec)
    assert full["proxy"]["adminPort"] == 4191
    assert full["global"]["version"] == "edge-19.12.3"
    assert apply_patch({"spec": spec}, json_patch(spec))["spec"] == full


def test_defaulting_is_idempotent_on_the_samples() -> None:
    for name in (MINIMAL, "edge_19.12.3.yaml"):
        once = defaulted(sample(name)["spec"])
        assert defaulted(once) == once
        assert json_patch(once) == []


def test_patch_escapes_json_pointer_characters() -> None:
    patch = json_patch({"proxy": {}}, base_path="/spec")
    assert all(op["path"].startswith("/spec/") for op in patch)
    weird = json_patch({}, base_path="/a~1b")
    assert weird[0]["path"].startswith("/a~1b/")


# -- properties ------------------------------------------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**31), max_value=2**31),
    st.text(max_size=12),
    st.sampled_from(["edge-19.12.3", "stable-2.6.0", "", "86400s", "linkerd"]),
)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)


_values = st.recursive(_scalars, _containers, max_leaves=8)


def _section(keys: list[str], nested: dict[str, list[str]]) -> st.SearchStrategy[Json]:
    """Some of ``keys`` with random values (nested sections partly filled), plus extras."""
    known = {k: (_section(nested[k], {}) | _values) if k in nested else _values for k in keys}
    return st.fixed_dictionaries({}, optional=known).flatmap(
        lambda d: st.dictionaries(st.text(max_size=6), _values, max_size=2).map(lambda e: e | d)
    )


_GLOBAL = ["linkerdNamespace", "cniEnabled", "version", "identityContext",
           "omitWebhookSideEffects", "clusterDomain", "configMap"]  # fmt: skip
_IDENTITY = ["trustDomain", "trustAnchorsPEM", "issuanceLifeTime", "clockSkewAllowance", "scheme"]
_PROXY = ["proxyImage", "proxyInitImage", "adminPort", "controlPort", "inboundPort",
          "outboundPort", "ignoreInboundPorts", "ignoreOutboundPorts", "logLevel",
          "disableExternalProfiles", "proxyVersion", "proxyInitImageVersion", "proxyUID",
          "resource"]  # fmt: skip
_IMAGE = ["name", "pullPolicy"]

specs = st.fixed_dictionaries(
    {},
    optional={
        "global": st.none() | _section(_GLOBAL, {"identityContext": _IDENTITY}),
        "proxy": st.none() | _section(_PROXY, {"proxyImage": _IMAGE, "proxyInitImage": _IMAGE}),
    },
)


@settings(max_examples=400, deadline=None)
@given(specs)
def test_defaulting_is_a_fixed_point(spec: Json) -> None:
    once = defaulted(spec)
    assert defaulted(once) == once
    assert json_patch(once) == []


@settings(max_examples=400, deadline=None)
@given(specs)
def test_the_patch_gives_exactly_defaulted_and_never_touches_the_input(spec: Json) -> None:
    before = copy.deepcopy(spec)
    patch = json_patch(spec)
    assert spec == before
    assert all(op["op"] == "add" for op in patch)
    assert apply_patch({"spec": spec}, patch)["spec"] == defaulted(spec)


@settings(max_examples=200, deadline=None)
@given(specs)
def test_defaulting_only_fills(spec: Json) -> None:
    """Every value present (and not null) in the input is still there, unchanged."""
    full = defaulted(spec)
    for section in ("global", "proxy"):
        given_section = spec.get(section)
        if isinstance(given_section, dict):
            for key, value in given_section.items():
                if value is None or isinstance(value, dict):
                    continue  # null is filled; objects are filled inside
                if (section, key) == ("global", "version") and not value:
                    continue  # an empty version is the proxy's, like a missing one
                assert full[section][key] == value, (section, key)
