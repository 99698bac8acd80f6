"""Who manages a ConfigMap: ``crd.Owners``, kept change by change, always names the one
``owner_among`` picks from the LinkerdConfigs as they are (the oldest not being deleted,
ties broken by name), whatever comes, changes target, is being deleted or goes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.spec.crd import Owners, Target, owner_among

NAMES = st.sampled_from(["a", "b", "c", "d"])
ALL = (Target("linkerd", "linkerd-config"), Target("linkerd", "other"),
       Target("mesh", "linkerd-config"))  # fmt: skip
CREATED = st.sampled_from(["", "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"])


def config(name: str, target: Target, created: str, deleting: bool) -> Json:
    metadata: Json = {"name": name, "creationTimestamp": created}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-03T00:00:00Z"
    return {
        "metadata": metadata,
        "spec": {"global": {"linkerdNamespace": target.namespace, "configMap": target.name}},
    }


def owner_names(present: dict[str, Json]) -> dict[Target, str | None]:
    found = {target: owner_among(present.values(), target) for target in ALL}
    return {t: None if c is None else c["metadata"]["name"] for t, c in found.items()}


PUT = st.builds(config, NAMES, st.sampled_from(ALL), CREATED, st.booleans())
CHANGES = st.lists(st.one_of(PUT, NAMES), max_size=30)
"""A LinkerdConfig as it is now (come, or changed), or the name of one gone."""


@given(CHANGES)
def test_owners_kept_change_by_change_name_the_oldest(changes: list[Json | str]) -> None:
    owners, present = Owners(), dict[str, Json]()
    for change in changes:
        was = owner_names(present)
        if isinstance(change, str):
            present.pop(change, None)
            touched = owners.remove(change)
        else:
            present[change["metadata"]["name"]] = change
            touched = owners.put(change)
        now = owner_names(present)
        assert {target: owners.of(target) for target in ALL} == now
        # Every target whose owner changed is among those the change says it touched.
        assert {t for t in ALL if now[t] != was[t]} <= touched
    assert set(owners.targets()) == {t for t, name in owner_names(present).items() if name}
