"""The Helm-values format against the ConfigMaps Linkerd edge-26.8.3's own CLI rendered
(tests/fixtures/linkerd-config_edge-26.8.3.yaml): it changes only what the spec states, keeps
every other value, writes nothing when nothing changes, and says what a fresh pod carries."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest

from linkerd_config.linkerd.formats import (
    FormatError,
    HelmValuesFormat,
    Installed,
    format_for,
    format_of,
)
from linkerd_config.linkerd.formats.helm_values import (
    TRUST_ROOTS_CONFIGMAP,
    TRUST_ROOTS_KEY,
    VALUES_KEY,
    dump_values,
    parse_values,
)
from linkerd_config.linkerd.rollout import DesiredProxy, proxy_version
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
