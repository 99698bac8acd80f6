"""``--restart-namespace-selector``: which namespaces the controller may restart in.

The label selector as the API server reads it (``kube.labels``), the domain's decision over
a namespace (``mesh.selected_for_restarts``), and the verdict it gives pods of each config
format (a pod in a namespace not selected is excluded, never restarted, and says why), in
the controller's plan and in ``plan``/``status`` alike.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from linkerd_config.kube.labels import EVERYTHING, LabelSelector
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.configmap.desired import desired_config
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.status.plan import plan, status
from linkerd_config.linkerd.status.view import ClusterView
from linkerd_config.settings import SettingsError, parse
from tests.support.samples import install_configmap, modern_install, sample

Obj = dict[str, Any]

# -- the selector ----------------------------------------------------------------------------

LABELS = {"team": "payments", "tier": "web", "kubernetes.io/metadata.name": "shop"}

MATCHES = [
    # (selector, labels, selected)
    ("", {}, True),
    ("   ", LABELS, True),
    ("team=payments", LABELS, True),
    ("team==payments", LABELS, True),
    ("team = payments", LABELS, True),
    ("team=search", LABELS, False),
    ("team!=search", LABELS, True),
    ("team!=payments", LABELS, False),
    ("owner!=x", LABELS, True),  # != selects objects without the key too
    ("team in (search, payments)", LABELS, True),
    ("team in (search)", LABELS, False),
    ("owner in (x)", LABELS, False),  # in needs the key
    ("team notin (search,payments)", LABELS, False),
    ("owner notin (x)", LABELS, True),
    ("team", LABELS, True),
    ("owner", LABELS, False),
    ("!owner", LABELS, True),
    ("!team", LABELS, False),
    ("team=payments,tier=web", LABELS, True),
    ("team=payments,tier=db", LABELS, False),
    ("kubernetes.io/metadata.name in (shop,blog)", LABELS, True),
    ("kubernetes.io/metadata.name notin (kube-system)", LABELS, True),
    ("kubernetes.io/metadata.name notin (shop)", LABELS, False),
]


@pytest.mark.parametrize(("text", "labels", "selected"), MATCHES)
def test_a_selector_matches_as_the_api_server_does(
    text: str, labels: dict[str, str], selected: bool
) -> None:
    assert LabelSelector.parse(text).matches(labels) is selected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("team in ()", "needs at least one value"),
        ("team in (a", "unbalanced parenthesis"),
        ("team in a)", "unbalanced parenthesis"),
        ("team=a,,tier=b", "an empty requirement"),
        ("team>1", "cannot read 'team>1'"),
        ("team=a b", "cannot read"),
        ("team=-a", "is not a label value"),
        ("-team", "cannot read"),
    ],
)
def test_a_selector_it_cannot_read_is_refused_naming_the_part(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LabelSelector.parse(text)


def test_a_selector_reads_back_as_it_means() -> None:
    text = "kubernetes.io/metadata.name in (shop, blog),!legacy,tier!=db"
    selector = LabelSelector.parse(text)
    assert str(selector) == "kubernetes.io/metadata.name in (blog,shop),!legacy,tier notin (db)"
    assert LabelSelector.parse(str(selector)) == selector
    assert hash(selector) == hash(LabelSelector.parse(text))  # a cache key
    assert LabelSelector.parse("").everything and selector != EVERYTHING


def test_the_flag_is_read_once_and_a_bad_one_is_refused_naming_it() -> None:
    assert parse([]).restart_namespaces == EVERYTHING
    chosen = parse(["--restart-namespace-selector", "kubernetes.io/metadata.name in (a,b)"])
    assert chosen.restart_namespaces == LabelSelector.parse("kubernetes.io/metadata.name in (b,a)")
    from_env = parse([], {"RESTART_NAMESPACE_SELECTOR": "team=payments"})
    assert from_env.restart_namespaces == LabelSelector.parse("team=payments")
    with pytest.raises(SettingsError, match=r"--restart-namespace-selector = 'a in \(\)'"):
        parse(["--restart-namespace-selector", "a in ()"])


# -- the decision ----------------------------------------------------------------------------


def namespace(name: str, **labels: str) -> Obj:
    return {"metadata": {"name": name, "labels": labels}}


BY_NAME = LabelSelector.parse("kubernetes.io/metadata.name in (shop,blog)")
BY_LABEL = LabelSelector.parse("restarts=linkerd-config")
NOT_SYSTEM = LabelSelector.parse("kubernetes.io/metadata.name notin (kube-system,monitoring)")

SELECTED = [
    # (namespace name, its object, selector, selected)
    ("kube-system", namespace("kube-system"), EVERYTHING, True),
    ("kube-system", None, EVERYTHING, True),
    ("shop", namespace("shop"), BY_NAME, True),
    ("shop", None, BY_NAME, True),  # not cached yet: its name is still its name
    ("kube-system", namespace("kube-system"), BY_NAME, False),
    ("shop", namespace("shop", restarts="linkerd-config"), BY_LABEL, True),
    ("shop", namespace("shop"), BY_LABEL, False),
    ("shop", None, BY_LABEL, False),  # labels unknown: not selected
    ("kube-system", namespace("kube-system"), NOT_SYSTEM, False),
    ("monitoring", namespace("monitoring"), NOT_SYSTEM, False),
    ("shop", namespace("shop"), NOT_SYSTEM, True),
    # A label cannot pretend to be another namespace's name: the name wins.
    ("kube-system", namespace("kube-system", **{"kubernetes.io/metadata.name": "shop"}), BY_NAME,
     False),
]  # fmt: skip


@pytest.mark.parametrize(("name", "obj", "selector", "selected"), SELECTED)
def test_which_namespaces_the_controller_restarts_in(
    name: str, obj: Obj | None, selector: LabelSelector, selected: bool
) -> None:
    assert mesh.selected_for_restarts(name, obj, selector) is selected


# -- the verdict, in each config format ------------------------------------------------------


def legacy_desired() -> mesh.DesiredProxy:
    """What the legacy format (edge-19.12.1's cluster) says an up-to-date pod carries."""
    current = {"linkerd-config": dict(install_configmap()["data"])}
    desired = desired_config(sample("edge_19.12.3.yaml"), current)
    assert desired.config_format == "legacy"
    return desired.proxy


def values_desired() -> mesh.DesiredProxy:
    """... and the Helm-values format (edge-26.8.3's cluster), trust root and all."""
    current = {d["metadata"]["name"]: dict(d["data"]) for d in modern_install()}
    config = {"metadata": {"name": "modern"}, "spec": {"proxy": {"proxyVersion": "edge-26.8.4"}}}
    desired = desired_config(config, current)
    assert desired.config_format != "legacy" and desired.proxy.trust_root_sha256
    return desired.proxy


def meshed_pod(ns: str, version: str, trust_root: str | None = None) -> Obj:
    annotations = {mesh.PROXY_VERSION_ANNOTATION: version}
    if trust_root is not None:
        annotations[mesh.TRUST_ROOT_ANNOTATION] = trust_root
    return {
        "metadata": {
            "name": "web-1",
            "namespace": ns,
            "labels": {mesh.RECONCILE_LABEL: mesh.RECONCILE_AUTO},
            "annotations": annotations,
        },
        "status": {"phase": "Running"},
    }


@pytest.mark.parametrize("fmt", ["legacy", "values"])
def test_a_stale_pod_outside_the_selected_namespaces_is_excluded_in_every_format(
    fmt: str,
) -> None:
    desired = legacy_desired() if fmt == "legacy" else values_desired()
    stale = meshed_pod("kube-public", "edge-19.12.1", "old-root" if fmt == "values" else None)
    ns = namespace("kube-public")
    assert desired.verdict(stale, ns) is not None
    assert desired.verdict(stale, ns).state == mesh.STALE  # type: ignore[union-attr]

    narrowed = desired.restarting_in(BY_NAME)
    assert narrowed.verdict(stale, ns) == mesh.PodState(
        mesh.EXCLUDED,
        "namespace kube-public is not selected by --restart-namespace-selector "
        "'kubernetes.io/metadata.name in (blog,shop)'",
    )
    assert narrowed.stale_reason(stale, ns) is None  # the controller's hot path agrees
    selected = {**stale, "metadata": {**stale["metadata"], "namespace": "shop"}}
    assert narrowed.verdict(selected, namespace("shop")) == desired.verdict(selected, ns)
    plan_ = mesh.plan_rollout([stale, selected], {"shop": namespace("shop")}, narrowed, _none)
    assert plan_.workloads == (mesh.Workload("Pod", "shop", "web-1"),)


def _none(namespace: str, name: str) -> Obj | None:
    return None


# -- plan and status show it -----------------------------------------------------------------


def test_plan_and_status_show_a_namespace_not_selected_as_excluded() -> None:
    config = sample("edge_19.12.3.yaml")
    cm = install_configmap()
    view = ClusterView(
        configs=[],
        configmaps={"linkerd/linkerd-config": cm},
        pods=[meshed_pod("shop", "edge-19.12.1"), meshed_pod("kube-public", "edge-19.12.1")],
        namespaces={"shop": namespace("shop"), "kube-public": namespace("kube-public")},
        replicasets={},
        workloads={},
        config_namespace="linkerd",
    )
    everywhere = plan(config, view, RolloutOptions())
    assert [str(line.workload) for line in everywhere.restarts] == [
        "pod/kube-public/web-1",
        "pod/shop/web-1",
    ]
    narrowed = plan(config, view, RolloutOptions(restart_namespaces=BY_NAME))
    assert [str(line.workload) for line in narrowed.restarts] == ["pod/shop/web-1"]
    (kept,) = narrowed.kept
    assert (str(kept.workload), kept.state) == ("pod/kube-public/web-1", mesh.EXCLUDED)
    assert list(kept.reasons) == [
        "namespace kube-public is not selected by --restart-namespace-selector "
        "'kubernetes.io/metadata.name in (blog,shop)'"
    ]

    applied = {
        **config,
        "metadata": {**config["metadata"], "creationTimestamp": "2020-01-01T00:00:00Z"},
    }
    cluster = replace(view, configs=[applied])
    (everything,) = status(cluster, RolloutOptions())
    (only_shop,) = status(cluster, RolloutOptions(restart_namespaces=BY_NAME))
    assert [str(line.workload) for line in everything.stale] == [
        "pod/kube-public/web-1",
        "pod/shop/web-1",
    ]
    assert [str(line.workload) for line in only_shop.stale] == ["pod/shop/web-1"]
    assert only_shop.namespaces["kube-public"][mesh.EXCLUDED] == 1
    assert only_shop.namespaces["kube-public"][mesh.STALE] == 0
