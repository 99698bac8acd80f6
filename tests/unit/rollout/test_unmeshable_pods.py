"""Opted-in pods without a proxy that Linkerd's injector would not mesh again are out of every
rollout, with why (issue 37, finding 5: such a workload counted stale, was restarted on every
change, and halted every rollout at its deadline). The injection rule is Linkerd's own, as
``pkg/inject/report.go`` tabulates it for the webhook (edge-26.8.3; edge-19.12.3 the same
without ``ingress``): pod annotation x namespace annotation -> injected?"""

from __future__ import annotations

from typing import Any

import pytest

from linkerd_config.linkerd import mesh

DESIRED = mesh.DesiredProxy(version="edge-26.8.3")


def pod(annotations: dict[str, str] | None = None, meshed: bool = False) -> dict[str, Any]:
    annotations = dict(annotations or {})
    if meshed:
        annotations[mesh.PROXY_VERSION_ANNOTATION] = "edge-26.8.2"
    return {
        "metadata": {
            "name": "web-1",
            "namespace": "app",
            "labels": {mesh.RECONCILE_LABEL: mesh.RECONCILE_AUTO},
            "annotations": annotations,
        },
        "status": {"phase": "Running"},
    }


def ns(value: str | None) -> dict[str, Any]:
    annotations = {} if value is None else {mesh.INJECT_ANNOTATION: value}
    return {"metadata": {"name": "app", "annotations": annotations}}


# Linkerd's table (report.go, "webhook" rows): namespace, pod -> injected.
@pytest.mark.parametrize(
    ("on_ns", "on_pod", "injected"),
    [
        ("enabled", "enabled", True),
        ("enabled", "", True),
        ("enabled", "disabled", False),
        ("disabled", "enabled", True),
        ("", "enabled", True),
        ("disabled", "disabled", False),
        ("", "disabled", False),
        ("disabled", "", False),
        ("", "", False),
        ("ingress", "", True),
        ("", "ingress", True),
        ("bogus", "enabled", False),
        ("enabled", "bogus", False),
    ],
)
def test_linkerds_injection_rule(on_ns: str, on_pod: str, injected: bool) -> None:
    refused = mesh.injection_refused(
        pod({mesh.INJECT_ANNOTATION: on_pod} if on_pod else {}), ns(on_ns or None)
    )
    assert (refused is None) == injected, refused


def test_an_unmeshed_pod_the_injector_would_not_mesh_is_excluded_not_stale() -> None:
    p = pod({mesh.INJECT_ANNOTATION: "disabled"})
    verdict = DESIRED.verdict(p, ns("enabled"))
    assert verdict is not None and verdict.state == mesh.EXCLUDED
    assert "not meshed" in verdict.reason and "linkerd.io/inject=disabled on the pod" in (
        verdict.reason
    )
    assert DESIRED.stale_reason(p, ns("enabled")) is None  # never restarted


def test_an_unmeshed_pod_the_injector_would_mesh_stays_stale() -> None:
    """Created while the injector was down (its webhook fails open): its restart meshes it."""
    p = pod()
    verdict = DESIRED.verdict(p, ns("enabled"))
    assert verdict is not None and verdict.state == mesh.STALE
    assert DESIRED.stale_reason(p, ns("enabled")) is not None


def test_a_meshed_pod_is_judged_by_its_proxy_as_before() -> None:
    p = pod(meshed=True)
    assert DESIRED.stale_reason(p, ns(None)) == "proxy version edge-26.8.2 → edge-26.8.3"


def test_the_pod_cache_keeps_the_inject_annotation() -> None:
    full = pod({mesh.INJECT_ANNOTATION: "disabled", "other": "x"})
    kept = mesh.pod_projection(full)
    assert kept["metadata"]["annotations"] == {mesh.INJECT_ANNOTATION: "disabled"}
