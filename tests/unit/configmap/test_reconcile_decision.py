"""``decision.decide``, the steps the controller and ``plan``/``status`` share before
anything is written, as a table: each refusal one row, then what a decided one holds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.configmap.decision import (
    CONFLICT,
    INSTALLED_CONFIG_UNREADABLE,
    INVALID,
    INVALID_CONFIG,
    NAMESPACE_NOT_MANAGED,
    Decided,
    Refused,
    decide,
)
from linkerd_config.linkerd.formats import FieldError
from linkerd_config.linkerd.spec.crd import Target
from tests.support.hostile import bombed_values, with_values
from tests.support.linkerdconfigs import config as legacy_config
from tests.support.linkerdconfigs import small
from tests.support.samples import modern_install


def by_key(*configmaps: Json) -> dict[str, Json]:
    return {f"{cm['metadata']['namespace']}/{cm['metadata']['name']}": cm for cm in configmaps}


def modern(**metadata: str) -> Json:
    config = small()
    return {**config, "metadata": {**config["metadata"], **metadata}}


def elsewhere() -> Json:
    config = small()
    return {**config, "spec": {**config["spec"], "global": {"linkerdNamespace": "mesh"}}}


def modern_cluster() -> dict[str, Json]:
    return by_key(*modern_install())


def bombed_cluster() -> dict[str, Json]:
    config_cm, roots = modern_install()
    return by_key(with_values(config_cm, bombed_values(10)), roots)


@dataclass(frozen=True)
class Row:
    config: Json
    configmaps: dict[str, Json]
    reason: str
    message: str
    """A part of the message that must be there."""
    errors: Sequence[FieldError] = ()
    configs: Sequence[Json] = field(default_factory=list)
    owner: str = ""


REFUSALS = {
    "invalid": Row(
        small(),
        modern_cluster(),
        INVALID,
        "spec.proxy.logLevel: must not be empty",
        errors=[FieldError("spec.proxy.logLevel", "must not be empty")],
    ),
    "namespace not managed": Row(
        elsewhere(),
        modern_cluster(),
        NAMESPACE_NOT_MANAGED,
        "ConfigMap mesh/linkerd-config is outside the namespace the controller manages (linkerd)",
    ),
    "an older one owns the target": Row(
        modern(name="young", creationTimestamp="2026-02-01T00:00:00Z"),
        modern_cluster(),
        CONFLICT,
        "ConfigMap linkerd/linkerd-config is managed by the older LinkerdConfig modern",
        configs=[small()],
        owner="modern",
    ),
    "installed config unreadable": Row(
        small(),
        bombed_cluster(),
        INSTALLED_CONFIG_UNREADABLE,
        "ConfigMap linkerd/linkerd-config, key values: line ",
    ),
    "does not render onto what is installed": Row(
        legacy_config(),  # edge-19.12.3's spec onto edge-26.8.3's install
        modern_cluster(),
        INVALID_CONFIG,
        "upgrade Linkerd first",
    ),
}


@pytest.mark.parametrize("row", REFUSALS.values(), ids=REFUSALS.keys())
def test_each_refusal_says_why(row: Row) -> None:
    decided = decide(row.config, row.errors, row.configs, row.configmaps, "linkerd")
    assert isinstance(decided, Refused), decided
    assert decided.reason == row.reason
    assert row.message in decided.message
    assert decided.owner == row.owner


def test_the_refusals_come_in_the_reconciles_order() -> None:
    """An invalid object is refused before its target is looked at; a target elsewhere
    before its ownership; a rival before anything installed is read."""

    def reason(config: Json, errors: Sequence[FieldError], configs: Sequence[Json]) -> str:
        decided = decide(config, errors, configs, bombed_cluster(), "linkerd")
        assert isinstance(decided, Refused)
        return decided.reason

    young = {**elsewhere(), "metadata": modern(name="young")["metadata"]}
    assert reason(young, [FieldError("spec", "is required")], []) == INVALID
    assert reason(young, (), []) == NAMESPACE_NOT_MANAGED
    rival = modern(name="young", creationTimestamp="2026-02-01T00:00:00Z")
    assert reason(rival, (), [small()]) == CONFLICT


def test_its_own_stored_copy_is_replaced_not_a_rival() -> None:
    """``plan`` decides over the object as it would be stored: the stored one of the same
    name, younger or older, is that object, not a rival for the ConfigMap."""
    stored = modern(creationTimestamp="2027-01-01T00:00:00Z")
    decided = decide(small(), (), [stored], modern_cluster(), "linkerd")
    assert isinstance(decided, Decided)


def test_a_decided_one_holds_what_the_writes_and_the_guard_read() -> None:
    config_cm, roots = modern_install()
    other = {**roots, "metadata": {**roots["metadata"], "namespace": "elsewhere"}}
    decided = decide(small(), (), [small()], {**modern_cluster(), **by_key(other)}, "linkerd")
    assert isinstance(decided, Decided)
    assert decided.target == Target("linkerd", "linkerd-config")
    assert sorted(decided.configmaps) == ["linkerd-config", "linkerd-identity-trust-roots"]
    assert decided.current["linkerd-config"] == config_cm["data"]
    assert decided.desired.target == decided.target
    assert decided.desired.config_format == "values"
