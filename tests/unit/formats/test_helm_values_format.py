"""The Helm-values format against the ConfigMaps Linkerd edge-26.8.3's own CLI rendered
(tests/fixtures/linkerd-config_edge-26.8.3.yaml): it changes only what the spec states, keeps
every other value, writes nothing when nothing changes, and says what a fresh pod carries."""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkerd_config.linkerd.formats import (
    FormatError,
    HelmValuesFormat,
    Installed,
    format_for,
    format_of,
)
from linkerd_config.linkerd.formats.helm_values import (
    _NOT_PLAIN,
    TRUST_ROOTS_CONFIGMAP,
    TRUST_ROOTS_KEY,
    VALUES_KEY,
    dump_values,
    parse_values,
)
from linkerd_config.linkerd.mesh import DesiredProxy, proxy_version
from tests.support.samples import SECOND_TRUST_ANCHOR, modern_install

ANCHOR = SECOND_TRUST_ANCHOR


def installed() -> dict[str, dict[str, str]]:
    """The ConfigMaps of namespace linkerd, by name: their data."""
    return {d["metadata"]["name"]: dict(d["data"]) for d in modern_install()}


def on(current: dict[str, dict[str, str]]) -> Installed:
    """What reconcile hands a format: linkerd/linkerd-config and its neighbours."""
    return Installed("linkerd/linkerd-config", current.get("linkerd-config", {}), current)


def small(**proxy: Any) -> dict[str, Any]:
    """As small as a LinkerdConfig gets: the one thing a user wants to change."""
    return {"proxy": {"proxyVersion": "edge-26.8.4", "logLevel": "debug", **proxy}}


FMT = HelmValuesFormat(format_for("edge-26.8.3").version)


def without(values: dict[str, Any], *paths: tuple[str, ...]) -> dict[str, Any]:
    result = copy.deepcopy(values)
    for path in paths:
        node = result
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return result


def test_only_the_stated_fields_change_and_everything_else_is_kept() -> None:
    current = installed()
    rendering = FMT.rendering(small(), on(current))
    before = parse_values(current["linkerd-config"][VALUES_KEY], "before")
    after = parse_values(rendering.data[VALUES_KEY], "after")
    assert after["proxy"]["image"]["version"] == "edge-26.8.4"
    assert after["proxy"]["logLevel"] == "debug"
    changed = (("proxy", "image", "version"), ("proxy", "logLevel"))
    assert without(after, *changed) == without(before, *changed)  # value for value
    assert set(rendering.data) == {VALUES_KEY}
    assert rendering.companions == {}  # no anchor stated: the cluster's trust roots stand
    assert rendering.trust_anchor_source == "Cluster"
    assert rendering.managed == {"proxy.image.version": "edge-26.8.4", "proxy.logLevel": "debug"}


def test_a_fresh_pod_is_what_the_injector_would_make() -> None:
    current = installed()
    bundle = current[TRUST_ROOTS_CONFIGMAP][TRUST_ROOTS_KEY]
    assert FMT.rendering(small(), on(current)).proxy == DesiredProxy(
        "edge-26.8.4",
        hashlib.sha256(bundle.encode()).hexdigest(),
        frozenset({"kube-system", "cert-manager"}),
    )
    # No proxy.image.version stated or installed: linkerdVersion is what the injector uses.
    assert (
        FMT.rendering({"proxy": {"logLevel": "info"}}, on(current)).proxy.version == "edge-26.8.3"
    )


def test_nothing_changes_when_nothing_managed_differs() -> None:
    current = installed()
    first = FMT.rendering(small(), on(current)).data
    again = FMT.rendering(small(), on({**current, "linkerd-config": first})).data
    assert again == first
    # The installation's own bytes stand when the spec states what is already there (our
    # YAML printer would write them differently: no churn, no restart).
    same = {"proxy": {"logLevel": "warn,linkerd=info,hickory=error"}}
    assert (
        FMT.rendering(same, on(current)).data[VALUES_KEY] == current["linkerd-config"][VALUES_KEY]
    )


def test_a_stated_trust_anchor_goes_to_values_and_to_the_trust_roots() -> None:
    spec = small()
    spec["global"] = {"identityContext": {"trustAnchorsPEM": ANCHOR}}
    rendering = FMT.rendering(spec, on(installed()))
    values = parse_values(rendering.data[VALUES_KEY], "after")
    assert values["identityTrustAnchorsPEM"] == ANCHOR
    assert rendering.companions == {TRUST_ROOTS_CONFIGMAP: {TRUST_ROOTS_KEY: ANCHOR.strip()}}
    assert rendering.proxy.trust_root_sha256 == hashlib.sha256(ANCHOR.strip().encode()).hexdigest()
    assert rendering.trust_anchor_source == "Spec"


def test_the_spec_maps_onto_values_paths() -> None:
    spec = {
        "global": {"clusterDomain": "example.org", "identityContext": {"trustDomain": "td"}},
        "proxy": {
            "proxyImage": {"name": "registry.local/proxy", "pullPolicy": "Always"},
            "adminPort": 4291,
            "ignoreInboundPorts": ["25", "4000-4100"],
            "disableExternalProfiles": True,
            "proxyUID": 2202,
            "resource": {"requests": {"cpu": "100m"}, "limits": {"memory": "250Mi"}},
        },
    }
    values = parse_values(FMT.rendering(spec, on(installed())).data[VALUES_KEY], "after")
    assert values["clusterDomain"] == "example.org"
    assert values["identityTrustDomain"] == "td"
    assert values["proxy"]["image"]["name"] == "registry.local/proxy"
    assert values["proxy"]["image"]["pullPolicy"] == "Always"
    assert values["proxy"]["ports"]["admin"] == 4291
    assert values["proxyInit"]["ignoreInboundPorts"] == "25,4000-4100"
    assert values["proxy"]["enableExternalProfiles"] is False
    assert values["proxy"]["uid"] == 2202
    assert values["proxy"]["resources"]["cpu"]["request"] == "100m"
    assert values["proxy"]["resources"]["memory"]["limit"] == "250Mi"


def test_fields_a_release_has_no_place_for_are_refused_by_name() -> None:
    spec = small(proxyInitImageVersion="v2.4.3", somethingElse=1)
    with pytest.raises(FormatError) as refused:
        FMT.rendering(spec, on(installed()))
    fields = {e.field: e.message for e in refused.value.errors}
    assert "unified proxy image" in fields["spec.proxy.proxyInitImageVersion"]
    assert "edge-25.11.3" in fields["spec.proxy.proxyInitImageVersion"]
    assert fields["spec.proxy.somethingElse"] == "is not a LinkerdConfig field"
    # A field of the table this release's chart lacks: named with the first that has it.
    storage = small(resource={"limits": {"ephemeral-storage": "1Gi"}})
    older_chart = HelmValuesFormat(format_for("edge-21.10.3").version)
    assert older_chart.check(storage) == [
        ("spec.proxy.resource.limits.ephemeral-storage", "needs Linkerd edge-21.11.1 or later")
    ]
    assert FMT.check(storage) == []
    # Before the unified image, the init image is a Helm value like any other.
    older = HelmValuesFormat(format_for("edge-24.5.1").version)
    assert older.check(small(proxyInitImageVersion="v2.4.0")) == []


def test_the_2_9_layout_nests_shared_values_under_global() -> None:
    fmt = HelmValuesFormat(format_for("stable-2.9.0").version)
    text = dump_values(
        {"global": {"linkerdVersion": "stable-2.9.0", "proxy": {"logLevel": "warn"}}, "x": 1}
    )
    rendering = fmt.rendering(small(), on({"linkerd-config": {VALUES_KEY: text}}))
    values = parse_values(rendering.data[VALUES_KEY], "after")
    assert values == {
        "global": {
            "linkerdVersion": "stable-2.9.0",
            "proxy": {"logLevel": "debug", "image": {"version": "edge-26.8.4"}},
        },
        "x": 1,
    }
    assert rendering.proxy.version == "edge-26.8.4"
    assert rendering.proxy.trust_root_sha256 is None  # not stamped on pods before 2.12.1
    assert rendering.proxy.excluded_namespaces == frozenset()


def test_no_values_to_change_is_refused() -> None:
    with pytest.raises(FormatError, match="no `values` to update"):
        FMT.rendering(small(), on({"linkerd-config": {}}))


def test_the_format_follows_the_spec_or_the_cluster_and_refuses_a_mismatch() -> None:
    modern = on(installed())
    assert isinstance(format_of(small(), modern), HelmValuesFormat)  # the cluster decides
    assert str(format_of(small(), modern).version) == "edge-26.8.3"
    with pytest.raises(FormatError) as refused:
        format_of({"global": {"version": "edge-19.12.3"}}, modern)
    assert "the cluster runs Linkerd edge-26.8.3" in str(refused.value)
    legacy = on({"linkerd-config": {"global": '{"version":"edge-19.12.1"}'}})
    with pytest.raises(FormatError, match="upgrade Linkerd first"):
        format_of({"global": {"version": "edge-26.8.3"}}, legacy)
    with pytest.raises(FormatError, match="declares no version"):
        format_of(small(), on({}))


def test_stale_pods_as_linkerd_decides() -> None:
    desired = DesiredProxy("edge-26.8.4", "abc", frozenset({"kube-system"}))

    def pod(ns: str = "app", version: str = "edge-26.8.4", root: str = "abc", **ann: str) -> Any:
        return {
            "metadata": {
                "name": "p",
                "namespace": ns,
                "labels": {"config.linkerd.io/reconcile": "auto"},
                "annotations": {"linkerd.io/trust-root-sha256": root, **ann},
            },
            # A native sidecar: the proxy is an init container.
            "spec": {"initContainers": [{"name": "linkerd-proxy", "image": f"proxy:{version}"}]},
            "status": {"phase": "Running"},
        }

    assert proxy_version(pod()) == "edge-26.8.4"
    assert desired.stale_reason(pod(), None) is None
    stale = desired.stale_reason(pod(version="edge-26.8.3"), None)
    assert stale == "proxy version edge-26.8.3 → edge-26.8.4"
    assert desired.stale_reason(pod(root="old"), None) == "trust root changed"
    pinned = pod(version="edge-26.1.1", **{"config.linkerd.io/proxy-version": "edge-26.1.1"})
    assert desired.stale_reason(pinned, None) is None  # restarting would pin it again
    assert desired.stale_reason(pod(ns="kube-system", version="old"), None) is None


def test_ephemeral_storage_is_written_where_the_chart_reads_it() -> None:
    """Issue 25: ``proxy.resource.*.ephemeral-storage`` was mapped but pruned by the schema."""
    spec = small(
        resource={
            "requests": {"ephemeral-storage": "100Mi", "cpu": "100m"},
            "limits": {"ephemeral-storage": "1Gi"},
        }
    )
    values = parse_values(FMT.rendering(spec, on(installed())).data[VALUES_KEY], "after")
    resources = values["proxy"]["resources"]
    assert resources["ephemeral-storage"] == {
        **resources["ephemeral-storage"],
        "request": "100Mi",
        "limit": "1Gi",
    }
    assert resources["cpu"]["request"] == "100m"


# -- unmanaged values keep what Linkerd reads in them (issue 39, finding 2) ----------------------

UNMANAGED = """\
unmanaged:
  octal: 0o17
  word: y
  under: 1_000
  exponent: 1e3
  leading: 08
  stamp: 2001-12-14T21:59:43Z
  quotedbinary: '0b-101'
  big: 1e400
  list: [on, 0x1F, '0x1F', ~]
  nested: {num: 18446744073709551615, f: 1.0, n: no}
"""
"""Values no LinkerdConfig manages, as someone may have set them with ``helm upgrade --set``:
each plain one means to Linkerd (sigs.k8s.io/yaml) what it does not mean to PyYAML."""

WRITTEN_AS = [
    "  octal: 15\n",  # Go's int 15 (PyYAML's string '0o17', quoted back, was Go's string)
    "  word: true\n",
    "  under: 1000\n",
    "  exponent: 1000.0\n",  # a float stays a float: 1000 would be Go's int
    "  leading: 8.0\n",
    "  stamp: '2001-12-14T21:59:43Z'\n",  # Go's string, the same string (PyYAML: a datetime)
    "  quotedbinary: '0b-101'\n",  # written plain, Go read -5
    "  big: '1e400'\n",  # Go's string (PyYAML: infinity)
    "  - true\n  - 31\n  - '0x1F'\n  - null\n",
    "    f: 1.0\n    'false': false\n    num: 18446744073709551615\n",  # key n is Go's false
]


def go_same(got: Any, expected: Any) -> bool:
    """Equal, and of one type all the way down (True is not 1, 1.0 is not 1 to Go)."""
    if isinstance(expected, dict):
        return (
            isinstance(got, dict)
            and got.keys() == expected.keys()
            and all(go_same(got[k], expected[k]) for k in expected)
        )
    if isinstance(expected, list):
        return (
            isinstance(got, list)
            and len(got) == len(expected)
            and all(go_same(g, e) for g, e in zip(got, expected, strict=True))
        )
    return type(got) is type(expected) and got == expected


def test_unmanaged_values_are_written_back_as_linkerd_read_them() -> None:
    """A rendering re-dumps ``values``: each unmanaged value is written so that Go reads the
    value (and Go type) it read in the installed text."""
    current = installed()
    current["linkerd-config"] = {VALUES_KEY: current["linkerd-config"][VALUES_KEY] + UNMANAGED}
    text = FMT.rendering(small(), on(current)).data[VALUES_KEY]
    for written in WRITTEN_AS:
        assert written in text, f"{written!r} not in the rendering"
    before = parse_values(current["linkerd-config"][VALUES_KEY], "before")["unmanaged"]
    assert go_same(parse_values(text, "after")["unmanaged"], before)
    assert before["stamp"] == "2001-12-14T21:59:43Z"
    assert before["octal"] == 15


@pytest.mark.parametrize(
    "value",
    ["0b-101", "0b+1_01", "+_1", "._5", ".5_0", "08", "1e400", "1_000", "0o17", "y", "~",
     "2001-12-14", "<<", "=", "1:30", "-", "0x", "é1", "tRUE", "infinity",
     "中文", "\U0001f600", "a\u2028b", "a\x85b", "a\u2029", "\x85", "a\nb\x85c\n", "\ufeffa",
     "a\u00a0b", "é:", "1" * 40 + "x"],
)  # fmt: skip
def test_a_string_is_written_so_it_reads_back_as_itself(value: str) -> None:
    text = dump_values({value: value, "list": [value]})
    assert go_same(parse_values(text, "back"), {value: value, "list": [value]}), text


def test_text_beyond_ascii_is_written_as_utf8_not_escaped() -> None:
    """Escaped, each character took up to 10 bytes: 240 KB of values was written at twice
    what the reader admits, and refused at the next reconcile. Go reads UTF-8."""
    text = dump_values({"note": "中" * 1000, "smile": "\U0001f600"})
    assert "中" * 1000 in text and "\U0001f600" in text
    assert "\\u" not in text and "\\U" not in text
    assert parse_values(text, "back") == {"note": "中" * 1000, "smile": "\U0001f600"}


def test_the_longest_number_like_value_is_written_quoted() -> None:
    """Digits and then a letter, as long as the bound admits: the pattern deciding whether
    it needs quotes backtracked quadratically over it (minutes, the event loop stopped with
    the GIL held); it is one pass now. The hostile-input bench renders it."""
    value = "1" * (256 * 1024 - 2048) + "x"
    text = dump_values({"note": value, "num": "1" * 1000})
    assert text.startswith("note: " + value) and "num: '" + "1" * 1000 + "'" in text
    assert parse_values(text, "back") == {"note": value, "num": "1" * 1000}


_BACKTRACKING = re.compile(_NOT_PLAIN.pattern.replace("*+", "*").replace("++", "+"), re.VERBOSE)
"""``_NOT_PLAIN`` as first written (plain quantifiers, which backtrack): what it matched."""


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="0123456789_.:eExXoObB+-aTy ", max_size=14))
def test_the_possessive_pattern_matches_what_the_backtracking_one_did(value: str) -> None:
    assert "*+" in _NOT_PLAIN.pattern  # what is compared: two spellings of one pattern
    assert bool(_NOT_PLAIN.fullmatch(value)) == bool(_BACKTRACKING.fullmatch(value))


@pytest.mark.parametrize(("installed_as", "spec"), [("0", False), ("1", True), ("1.0", True)])
def test_a_hand_edited_value_of_another_type_is_written_over(installed_as: str, spec: bool) -> None:
    """To Go ``0`` is no bool (Linkerd's injector fails on it); Python's ``0 == False`` made
    the rendering keep the installed text, and drift was never seen."""
    current = installed()
    text = current["linkerd-config"][VALUES_KEY]
    assert "\ncniEnabled: false\n" in text
    current["linkerd-config"] = {
        VALUES_KEY: text.replace("\ncniEnabled: false\n", f"\ncniEnabled: {installed_as}\n")
    }
    stated = {"global": {"cniEnabled": spec}}  # the one field: nothing else to rewrite for
    written = FMT.rendering(stated, on(current)).data[VALUES_KEY]
    assert f"\ncniEnabled: {str(spec).lower()}\n" in written
    assert parse_values(written, "after")["cniEnabled"] is spec
