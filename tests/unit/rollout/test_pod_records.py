"""The opted-in pods' cache records (``mesh.running_pod_metadata``): a pod with a controller
is cached without its name and namespace (its key holds them) and shares one record with
every pod that agrees on all the rest; a pod that is its own workload, or one being deleted,
keeps both. Every decision reads a cached pod (``mesh.cached_pods``) as it reads the pod
itself."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkerd_config.kube.resource import Json
from linkerd_config.kube.shared_records import SharedRecords
from linkerd_config.linkerd import mesh

DESIRED = mesh.DesiredProxy(version="edge-26.8.3", trust_root_sha256="a" * 64)


def pod(
    name: str = "web-7d9f-abcde",
    namespace: str = "app",
    owner: str | None = "web-7d9f",
    version: str | None = "edge-26.8.2",
    **annotations: str,
) -> Json:
    meta: Json = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "resourceVersion": "7",
        "labels": {mesh.RECONCILE_LABEL: mesh.RECONCILE_AUTO, "app": "web"},
        "annotations": {"unread": name, **annotations},
    }
    if version is not None:
        meta["annotations"][mesh.PROXY_VERSION_ANNOTATION] = version
    if owner is not None:
        meta["ownerReferences"] = [
            {"kind": "ReplicaSet", "name": owner, "uid": f"uid-{owner}", "controller": True}
        ]
    return {"metadata": meta}


REPLICASETS = {
    ("app", "web-7d9f"): {
        "metadata": {
            "name": "web-7d9f",
            "namespace": "app",
            "ownerReferences": [{"kind": "Deployment", "name": "web", "controller": True}],
        }
    }
}


def replicaset(namespace: str, name: str) -> Json | None:
    return REPLICASETS.get((namespace, name))


def key(served: Json) -> str:
    return f"{served['metadata']['namespace']}/{served['metadata']['name']}"


def cached(*served: Json) -> list[Json]:
    """The pods as the decisions read them from the cache."""
    return list(mesh.cached_pods((key(p), mesh.running_pod_metadata(p)) for p in served))


def test_siblings_share_one_record_without_name_or_namespace() -> None:
    a = mesh.running_pod_metadata(pod("web-7d9f-aaaaa"))
    b = mesh.running_pod_metadata(pod("web-7d9f-bbbbb"))
    assert a is b
    assert "name" not in a["metadata"]
    assert "namespace" not in a["metadata"]
    assert a["status"] == {"phase": "Running"}


def test_like_pods_in_other_namespaces_share_one_record_and_are_read_each_in_its_own() -> None:
    shop = pod("web-7d9f-aaaaa", namespace="shop")
    app = pod("web-7d9f-bbbbb", namespace="app")
    assert mesh.running_pod_metadata(shop) is mesh.running_pod_metadata(app)
    read = cached(shop, app)
    assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in read] == [
        ("shop", "web-7d9f-aaaaa"),
        ("app", "web-7d9f-bbbbb"),
    ]
    shared = mesh.running_pod_metadata(app)
    assert "namespace" not in shared["metadata"]  # reading it did not write into the record


@pytest.mark.parametrize(
    ("differs", "other"),
    [
        ("owner", pod(owner="web-5c6b")),
        ("proxy version", pod(version="edge-26.8.3")),
        ("no proxy", pod(version=None)),
        ("trust root", pod(**{mesh.TRUST_ROOT_ANNOTATION: "b" * 64})),
        ("pin", pod(**{mesh.PIN_ANNOTATION: "edge-26.8.1"})),
        ("inject", pod(**{mesh.INJECT_ANNOTATION: "disabled"})),
    ],
)
def test_a_sibling_that_differs_in_what_is_read_has_its_own_record(
    differs: str, other: Json
) -> None:
    assert mesh.running_pod_metadata(pod()) != mesh.running_pod_metadata(other), differs


@pytest.mark.parametrize(
    ("case", "served"),
    [
        ("its own workload", pod(owner=None)),
        (
            "being deleted",
            {"metadata": {**pod()["metadata"], "deletionTimestamp": "2026-11-28T00:00:00Z"}},
        ),
    ],
)
def test_a_pod_that_is_its_own_workload_or_being_deleted_keeps_its_name_and_namespace(
    case: str, served: Json
) -> None:
    one = mesh.running_pod_metadata(served)
    again = mesh.running_pod_metadata(served)
    assert (one["metadata"]["namespace"], one["metadata"]["name"]) == ("app", "web-7d9f-abcde")
    assert one is not again, case  # a record of its own, never shared
    assert cached(served) == [one]  # read as it is


def test_an_ownerless_pod_is_its_own_workload_by_name() -> None:
    record = mesh.running_pod_metadata(pod(owner=None))
    assert mesh.owning_workload(record, replicaset) == mesh.Workload("Pod", "app", "web-7d9f-abcde")


def test_only_recent_siblings_share_and_the_table_stays_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mesh, "_RECENT", SharedRecords(6, recent=True))
    first = mesh.running_pod_metadata(pod("web-a", owner="web"))
    for i in range(50):  # one pod per owner: nothing to share
        record = mesh.running_pod_metadata(pod(f"p-{i}", owner=f"rs-{i}"))
        assert record["metadata"]["ownerReferences"][0]["name"] == f"rs-{i}"
        assert len(mesh._RECENT) <= 6
    late = mesh.running_pod_metadata(pod("web-b", owner="web"))
    assert late == first and late is not first  # equal, its own record: the first was let go
    assert mesh.running_pod_metadata(pod("web-c", owner="web")) is late


names = st.text("abcdef-0123", min_size=1, max_size=12)
versions = st.none() | st.sampled_from(["edge-26.8.2", "edge-26.8.3", ""])
annotation_values = st.sampled_from(["enabled", "disabled", "ingress", "edge-26.8.1", "a" * 64])


@st.composite
def served_pods(draw: Any) -> Json:
    annotations = draw(
        st.dictionaries(
            st.sampled_from(
                [mesh.TRUST_ROOT_ANNOTATION, mesh.PIN_ANNOTATION, mesh.INJECT_ANNOTATION]
            ),
            annotation_values,
        )
    )
    served = pod(
        draw(names),
        draw(st.sampled_from(["app", "shop"])),
        draw(st.none() | st.sampled_from(["web-7d9f", "web-5c6b"])),
        draw(versions),
        **annotations,
    )
    if draw(st.booleans()):
        served["metadata"]["deletionTimestamp"] = "2026-11-28T00:00:00Z"
    return served


@given(pods=st.lists(served_pods(), max_size=6))
@settings(max_examples=200, deadline=None)
def test_every_decision_reads_a_record_as_it_reads_the_pod(pods: list[Json]) -> None:
    namespace = {"metadata": {"name": "app", "annotations": {mesh.INJECT_ANNOTATION: "enabled"}}}
    records = cached(*pods)
    for served, record in zip(pods, records, strict=True):
        as_served = {**served, "status": {"phase": "Running"}}
        assert DESIRED.verdict(record, namespace) == DESIRED.verdict(as_served, namespace)
        assert DESIRED.stale_reason(record, namespace) == DESIRED.stale_reason(as_served, namespace)
        assert mesh.owning_workload(record, replicaset) == mesh.owning_workload(
            as_served, replicaset
        )
    namespaces = {"app": namespace}
    full = [{**p, "status": {"phase": "Running"}} for p in pods]
    assert mesh.plan_rollout(records, namespaces, DESIRED, replicaset) == mesh.plan_rollout(
        full, namespaces, DESIRED, replicaset
    )
    assert mesh.standing(records, namespaces, DESIRED, replicaset) == mesh.standing(
        full, namespaces, DESIRED, replicaset
    )
