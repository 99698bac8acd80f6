"""The store behaves as a dict from key to the latest object, through every kind of write."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from linkerd_config.kube.store import Store


def pod(name: str, ns: str, rv: str = "1") -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": ns, "resourceVersion": rv}}


def test_cluster_scoped_objects_are_keyed_by_name() -> None:
    s = Store()
    s.put({"metadata": {"name": "node-1"}})
    assert s.keys() == ["node-1"] and "node-1" in s and len(s) == 1
    assert s.delete("node-1") == {"metadata": {"name": "node-1"}}
    assert s.delete("node-1") is None and len(s) == 0


def test_snapshot_is_unaffected_by_later_writes() -> None:
    s = Store()
    s.put(pod("a", "ns"))
    snap = s.snapshot()
    s.put(pod("b", "ns"))
    s.delete("ns/a")
    assert list(snap) == ["ns/a"]
    assert s.keys() == ["ns/b"]


OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"),
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from(["ns1", "ns2"]),
            st.sampled_from(["1", "2"]),
        ),
        st.tuples(st.just("delete"), st.sampled_from(["ns1/a", "ns2/b", "ns1/c"])),
        st.tuples(
            st.just("replace"),
            st.lists(
                st.tuples(st.sampled_from(["a", "b", "e"]), st.sampled_from(["ns1", "ns2"])),
                max_size=4,
            ),
        ),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_store_matches_a_dict_model(ops: list[Any]) -> None:
    s = Store()
    model: dict[str, dict[str, Any]] = {}
    for op in ops:
        if op[0] == "put":
            _, name, ns, rv = op
            obj = pod(name, ns, rv)
            assert s.put(obj) == model.get(f"{ns}/{name}")
            model[f"{ns}/{name}"] = obj
        elif op[0] == "delete":
            assert s.delete(op[1]) == model.pop(op[1], None)
        else:
            objs = [pod(n, ns) for n, ns in op[1]]
            new = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in objs}
            assert sorted(s.replace(objs)) == sorted(k for k in model if k not in new)
            model = new
        assert dict(s.items()) == model
        assert sorted(s.keys()) == sorted(model) == sorted(s)
