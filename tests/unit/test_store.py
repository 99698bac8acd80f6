"""The store's indexes stay exact through every kind of write."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkerd_config.kube.store import (
    Store,
    by_field,
    by_label,
    by_namespace,
    by_owner_uid,
)


def pod(
    name: str,
    ns: str = "default",
    *,
    phase: str | None = None,
    owners: tuple[str, ...] = (),
    labels: dict[str, str] | None = None,
    rv: str = "1",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "resourceVersion": rv}
    if owners:
        meta["ownerReferences"] = [{"uid": u, "kind": "ReplicaSet", "name": u} for u in owners]
    if labels:
        meta["labels"] = labels
    obj: dict[str, Any] = {"kind": "Pod", "metadata": meta}
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def indexed_store() -> Store:
    s = Store()
    s.add_index("ns", by_namespace)
    s.add_index("owner", by_owner_uid)
    s.add_index("phase", by_field(("status", "phase")))
    return s


def names(objs: list[dict[str, Any]]) -> list[str]:
    return [o["metadata"]["name"] for o in objs]


def test_add_files_object_under_every_index() -> None:
    s = indexed_store()
    assert s.put(pod("a", "ns1", phase="Running", owners=("rs1", "rs2"))) is None
    assert s.keys() == ["ns1/a"]
    assert names(s.by_index("ns", "ns1")) == ["a"]
    assert names(s.by_index("owner", "rs1")) == ["a"]
    assert names(s.by_index("owner", "rs2")) == ["a"]
    assert names(s.by_index("phase", "Running")) == ["a"]
    assert s.index_keys("owner") == ["rs1", "rs2"]
    assert s.keys_by_index("ns", "ns1") == ["ns1/a"]
    assert len(s) == 1
    assert "ns1/a" in s


def test_update_moves_object_between_index_values() -> None:
    s = indexed_store()
    s.put(pod("a", phase="Pending", owners=("rs1",)))
    s.put(pod("b", phase="Pending", owners=("rs1",)))
    old = s.put(pod("a", phase="Running", owners=("rs2",), rv="2"))
    assert old is not None and old["status"]["phase"] == "Pending"
    assert names(s.by_index("phase", "Pending")) == ["b"]
    assert names(s.by_index("phase", "Running")) == ["a"]
    assert names(s.by_index("owner", "rs1")) == ["b"]
    assert names(s.by_index("owner", "rs2")) == ["a"]
    # Moving the last object off a value removes the value entirely.
    s.put(pod("b", phase="Running", owners=("rs2",), rv="3"))
    assert s.index_keys("phase") == ["Running"]
    assert s.index_keys("owner") == ["rs2"]
    assert s.by_index("phase", "Pending") == []


def test_update_to_no_value_unfiles() -> None:
    s = indexed_store()
    s.put(pod("a", phase="Running"))
    s.put(pod("a"))  # status gone
    assert s.index_keys("phase") == []
    assert s.get("default/a") == pod("a")


def test_delete_unfiles_and_returns_last_state() -> None:
    s = indexed_store()
    s.put(pod("a", "ns1", phase="Running", owners=("rs1",)))
    s.put(pod("b", "ns1", phase="Running", owners=("rs1",)))
    gone = s.delete("ns1/a")
    assert gone is not None and gone["metadata"]["name"] == "a"
    assert s.delete("ns1/a") is None
    assert names(s.by_index("ns", "ns1")) == ["b"]
    assert names(s.by_index("owner", "rs1")) == ["b"]
    s.delete("ns1/b")
    assert s.index_keys("ns") == []
    assert s.index_keys("owner") == []
    assert s.index_keys("phase") == []
    assert len(s) == 0


def test_delete_is_exact_even_if_cached_object_was_mutated() -> None:
    s = indexed_store()
    obj = pod("a", phase="Running")
    s.put(obj)
    obj["status"]["phase"] = "Failed"  # a careless reader mutates the shared dict
    s.delete("default/a")
    assert s.index_keys("phase") == []


def test_replace_rebuilds_indexes_and_reports_vanished_keys() -> None:
    s = indexed_store()
    s.put(pod("a", "ns1", phase="Running", owners=("rs1",)))
    s.put(pod("b", "ns1", phase="Running"))
    s.put(pod("c", "ns2", phase="Pending"))
    vanished = s.replace(
        [pod("a", "ns2", phase="Failed", owners=("rs9",)), pod("d", "ns1", phase="Running")]
    )
    assert sorted(vanished) == ["ns1/a", "ns1/b", "ns2/c"]  # ns1/a moved namespace: new key
    assert sorted(s.keys()) == ["ns1/d", "ns2/a"]
    assert s.index_keys("ns") == ["ns1", "ns2"]
    assert names(s.by_index("ns", "ns1")) == ["d"]
    assert s.index_keys("owner") == ["rs9"]
    assert s.index_keys("phase") == ["Failed", "Running"]
    assert sorted(s.replace([])) == ["ns1/d", "ns2/a"]
    assert s.keys() == []
    assert s.index_keys("ns") == []


def test_add_index_later_files_existing_objects() -> None:
    s = Store()
    s.put(pod("a", labels={"app": "web"}))
    s.put(pod("b", labels={"app": "db"}))
    s.add_index("app", by_label("app"))
    assert s.index_keys("app") == ["db", "web"]
    with pytest.raises(ValueError, match="already exists"):
        s.add_index("app", by_label("app"))
    with pytest.raises(KeyError, match="no index"):
        s.by_index("nope", "x")


def test_by_field_values() -> None:
    f = by_field(("spec", "ports"))
    assert f({"spec": {"ports": [80, "443", True, {"x": 1}]}}) == ["80", "443", "true"]
    assert f({"spec": {"ports": None}}) == []
    assert f({"spec": "not a dict"}) == []
    assert by_field("kind")({"kind": "Pod"}) == ["Pod"]
    assert by_field(("metadata", "labels", "app.kubernetes.io/name"))(
        {"metadata": {"labels": {"app.kubernetes.io/name": "x"}}}
    ) == ["x"]
    with pytest.raises(ValueError):
        by_field(())


def test_cluster_scoped_and_duplicate_values() -> None:
    s = Store()
    s.add_index("ns", by_namespace)
    s.add_index("dup", lambda o: ["x", "x"])
    s.put({"metadata": {"name": "node-1"}})
    assert s.keys() == ["node-1"]
    assert s.index_keys("ns") == []
    assert s.keys_by_index("dup", "x") == ["node-1"]
    s.delete("node-1")
    assert s.index_keys("dup") == []


# -- property: after any sequence of writes, indexes equal a recomputation from scratch ----

OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            st.sampled_from(["a", "b", "c", "d"]),
            st.sampled_from(["ns1", "ns2"]),
            st.sampled_from([None, "Pending", "Running"]),
            st.lists(st.sampled_from(["o1", "o2", "o3"]), max_size=3),
        ),
        st.tuples(st.just("delete"), st.sampled_from(["ns1/a", "ns2/b", "ns1/c", "ns2/d"])),
        st.tuples(
            st.just("replace"),
            st.lists(
                st.tuples(
                    st.sampled_from(["a", "b", "e"]),
                    st.sampled_from(["ns1", "ns2"]),
                    st.sampled_from([None, "Running"]),
                ),
                max_size=4,
            ),
        ),
    ),
    max_size=40,
)


def expected_index(store: Store, fn: Any) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for key, obj in store.items():
        for v in fn(obj):
            out.setdefault(v, set()).add(key)
    return out


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_indexes_always_match_recomputation(ops: list[Any]) -> None:
    s = indexed_store()
    fns = {"ns": by_namespace, "owner": by_owner_uid, "phase": by_field(("status", "phase"))}
    model: dict[str, dict[str, Any]] = {}
    for op in ops:
        if op[0] == "put":
            _, name, ns, phase, owners = op
            obj = pod(name, ns, phase=phase, owners=tuple(owners))
            assert s.put(obj) == model.get(f"{ns}/{name}")
            model[f"{ns}/{name}"] = obj
        elif op[0] == "delete":
            assert s.delete(op[1]) == model.pop(op[1], None)
        else:
            objs = [pod(n, ns, phase=ph) for n, ns, ph in op[1]]
            new = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in objs}
            assert sorted(s.replace(objs)) == sorted(k for k in model if k not in new)
            model = new
        assert dict(s.items()) == model
        for name, fn in fns.items():
            want = expected_index(s, fn)
            assert s.index_keys(name) == sorted(want)
            for value, keys in want.items():
                assert s.keys_by_index(name, value) == sorted(keys)
