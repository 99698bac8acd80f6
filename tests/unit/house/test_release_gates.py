"""Issue 26's version gates, for every row of the field table: a value stated for a Linkerd
release whose chart does not have it is refused naming the first release that does; a value
only the values format has is refused on a legacy release, saying so. Each as a v1alpha2 user
states it (the messages use v1alpha2's names)."""

from __future__ import annotations

from typing import Any

import pytest

from linkerd_config.linkerd.admission.validation import validate
from linkerd_config.linkerd.formats.field_table import FIELDS, VALUES_RELEASES, ConfigField
from linkerd_config.linkerd.formats.versions import LinkerdVersion
from linkerd_config.linkerd.spec.conversion import GROUP, V1ALPHA2

Json = dict[str, Any]
LEGACY = "edge-20.10.1"  # the last release that reads global/proxy


def before(version: LinkerdVersion) -> str:
    """A release just before ``version`` in its channel (gates compare numbers only)."""
    major, minor, patch = version.numbers
    if patch > 0:
        return f"{version.channel}-{major}.{minor}.{patch - 1}"
    if minor > 0:
        return f"{version.channel}-{major}.{minor - 1}.99"
    return f"{version.channel}-{major - 1}.99.99"


def stated(row: ConfigField, linkerd: str) -> Json:
    """A v1alpha2 LinkerdConfig for ``linkerd`` stating ``row`` (its example) and what every
    object needs (the proxy version)."""
    values: Json = {"linkerdVersion": linkerd, "proxy": {"image": {"version": linkerd}}}
    spec: Json = {"values": values}
    node = spec
    for key in row.v1alpha2_path[:-1]:
        node = node.setdefault(key, {})
    if row.v1alpha2_path[-1] not in node:  # not the version itself
        node[row.v1alpha2_path[-1]] = row.v1alpha2_grammar.example
    return {
        "apiVersion": f"{GROUP}/{V1ALPHA2}",
        "kind": "LinkerdConfig",
        "metadata": {"name": "gates"},
        "spec": spec,
    }


def about(row: ConfigField, obj: Json) -> list[str]:
    field = row.served_field(V1ALPHA2)
    return [e.message for e in validate(obj) if e.field == field]


GATED = [
    pytest.param(row, first, id=f"{row.name}@{first}")
    for row in FIELDS
    if row.values is not None
    for first in row.values.releases.since
    if first not in VALUES_RELEASES.since
]
VALUES_ONLY = [
    pytest.param(row, id=row.name)
    for row in FIELDS
    if row.values is not None and row.legacy is None
]


def test_the_tables_cover_the_new_rows() -> None:
    assert len(GATED) >= 60  # most of v1alpha2's values came after the first values release
    assert len(VALUES_ONLY) >= 75


@pytest.mark.parametrize(("row", "first"), GATED)
def test_refused_before_its_first_release_naming_it(
    row: ConfigField, first: LinkerdVersion
) -> None:
    refused = about(row, stated(row, before(first)))
    assert refused, f"{row.name} accepted on {before(first)}"
    assert any(str(first) in message for message in refused), refused
    assert about(row, stated(row, str(first))) == []


@pytest.mark.parametrize("row", VALUES_ONLY)
def test_refused_on_a_legacy_release_saying_only_the_values_format_has_it(
    row: ConfigField,
) -> None:
    (message,) = about(row, stated(row, LEGACY))
    assert "is not in Linkerd's legacy config format; only the values format has it" in message
