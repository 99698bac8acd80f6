"""Issue 37, finding 6: the first upgrade can roll back. A LinkerdConfig adopting an
installation records what is installed (``rollback.adoption``, a format's ``snapshot``) as
its last completed configuration when every opted-in pod runs it; a rollback to it writes
that back (``restoring``): in the legacy format ``global`` and ``proxy`` byte for byte, in the
values format each field the spec sets as installed then, everything else as installed now."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from linkerd_config.linkerd.configmap.desired import (
    adopted_snapshot,
    desired_config,
    restored_config,
)
from linkerd_config.linkerd.formats import (
    FormatError,
    HelmValuesFormat,
    Installed,
    LegacyFormat,
    Snapshot,
    format_for,
)
from linkerd_config.linkerd.formats.helm_values import (
    TRUST_ROOTS_CONFIGMAP,
    TRUST_ROOTS_KEY,
    VALUES_KEY,
    parse_values,
)
from linkerd_config.linkerd.rollout import rollback
from linkerd_config.linkerd.rollout.record import MAX_SNAPSHOT_CHARS, Halt, Record
from tests.support.samples import SECOND_TRUST_ANCHOR, modern_install

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
Json = dict[str, Any]
LEGACY = LegacyFormat.for_version("edge-19.12.3")
VALUES = HelmValuesFormat(format_for("edge-26.8.3").version)


def legacy_installed() -> dict[str, dict[str, str]]:
    """linkerd-config as ``linkerd install`` of edge-19.12.1 wrote it (and a stray key)."""
    data = yaml.safe_load((FIXTURES / "linkerd-config_edge-19.12.1.yaml").read_text())["data"]
    return {"linkerd-config": {**data, "note": "not ours"}}


def values_installed() -> dict[str, dict[str, str]]:
    return {d["metadata"]["name"]: dict(d["data"]) for d in modern_install()}


def on(current: dict[str, dict[str, str]]) -> Installed:
    return Installed("linkerd/linkerd-config", current.get("linkerd-config", {}), current)


def legacy_spec(version: str) -> Json:
    spec: Json = yaml.safe_load((FIXTURES / "samples/edge_19.12.3.yaml").read_text())["spec"]
    spec["proxy"]["proxyVersion"] = version
    return spec


def lc(spec: Json, status: Json | None = None) -> Json:
    return {
        "apiVersion": "config.linkerd.io/v1alpha1",
        "kind": "LinkerdConfig",
        "metadata": {"name": "adopter", "generation": 1},
        "spec": spec,
        **({"status": status} if status is not None else {}),
    }


def test_the_legacy_snapshot_is_global_and_proxy_written_back_byte_for_byte() -> None:
    current = legacy_installed()
    snapshot = LEGACY.snapshot(on(current))
    assert snapshot == Snapshot(
        {k: current["linkerd-config"][k] for k in ("global", "proxy")}
    )  # the stray key is not ours
    upgraded = LEGACY.rendering(legacy_spec("edge-19.12.3"), on(current))
    assert upgraded.data != snapshot.data
    now = {"linkerd-config": {**current["linkerd-config"], **upgraded.data}}
    back = LEGACY.restoring(snapshot, legacy_spec("edge-19.12.3"), on(now))
    assert back.data == snapshot.data
    assert back.proxy.version == "edge-19.12.1"  # what the adopted pods run
    assert back.trust_anchor_source == "Cluster"


def test_the_values_snapshot_puts_back_only_what_the_spec_sets() -> None:
    current = values_installed()
    snapshot = VALUES.snapshot(on(current))
    assert snapshot.data == {VALUES_KEY: current["linkerd-config"][VALUES_KEY]}
    assert snapshot.companions == {
        TRUST_ROOTS_CONFIGMAP: {TRUST_ROOTS_KEY: current[TRUST_ROOTS_CONFIGMAP][TRUST_ROOTS_KEY]}
    }
    spec = {
        "proxy": {"proxyVersion": "edge-26.8.5", "logLevel": "debug"},
        "global": {"identityContext": {"trustAnchorsPEM": SECOND_TRUST_ANCHOR}},
    }
    upgraded = VALUES.rendering(spec, on(current))
    # Since the upgrade, a helm upgrade changed a value the LinkerdConfig does not set.
    values = parse_values(upgraded.data[VALUES_KEY], "upgraded")
    values["proxy"]["cores"] = 7
    now = {
        **current,
        "linkerd-config": {VALUES_KEY: yaml.safe_dump(values)},
        **upgraded.companions,
    }
    back = VALUES.restoring(snapshot, spec, on(now))
    before = parse_values(current["linkerd-config"][VALUES_KEY], "before")
    after = parse_values(back.data[VALUES_KEY], "after")
    assert after["proxy"]["cores"] == 7  # kept: not ours
    del after["proxy"]["cores"]
    expected = copy.deepcopy(before)
    expected["proxy"].pop("cores", None)
    assert after == expected
    assert back.companions == snapshot.companions  # the anchors installed then
    installed_as_it_was = VALUES.restoring(snapshot, spec, on(current))
    assert installed_as_it_was.data == snapshot.data  # untouched bytes: nothing to write
    assert back.proxy == installed_as_it_was.proxy
    assert back.proxy.version == "edge-26.8.3"


def test_a_value_the_installation_lacked_is_removed_again() -> None:
    current = values_installed()
    installed_values = parse_values(current["linkerd-config"][VALUES_KEY], "installed")
    assert "logLevel" in installed_values["proxy"]
    del installed_values["proxy"]["logLevel"]
    current["linkerd-config"] = {VALUES_KEY: yaml.safe_dump(installed_values)}
    snapshot = VALUES.snapshot(on(current))
    spec = {"proxy": {"logLevel": "debug"}}
    upgraded = VALUES.rendering(spec, on(current))
    now = {**current, "linkerd-config": upgraded.data}
    back = VALUES.restoring(snapshot, spec, on(now))
    assert "logLevel" not in parse_values(back.data[VALUES_KEY], "back")["proxy"]


@pytest.mark.parametrize(
    ("fmt", "snapshot", "field"),
    [
        (LEGACY, Snapshot({"global": "{}"}), "status.lastCompleted.installed"),
        (LEGACY, Snapshot({"global": "{}", "proxy": "{not json"}), "installed.proxy"),
        (LEGACY, Snapshot({"global": "{}", "proxy": "{}"}), "installed.proxy"),
        (VALUES, Snapshot({}), "status.lastCompleted.installed"),
        (VALUES, Snapshot({VALUES_KEY: "a: &x 1\nb: *x\n"}), "installed.values"),
    ],
)
def test_a_snapshot_that_cannot_be_written_back_is_refused_by_name(
    fmt: LegacyFormat | HelmValuesFormat, snapshot: Snapshot, field: str
) -> None:
    current = legacy_installed() if fmt is LEGACY else values_installed()
    with pytest.raises(FormatError) as raised:
        fmt.restoring(snapshot, {"proxy": {"proxyVersion": "edge-26.8.5"}}, on(current))
    assert field in str(raised.value)


def test_the_adopted_configuration_hashes_the_same_before_and_after_the_upgrade() -> None:
    current = values_installed()
    config = lc({"proxy": {"proxyVersion": "edge-26.8.5"}})
    snapshot = adopted_snapshot(config, current)
    adopted = restored_config(config, snapshot, current)
    upgraded = desired_config(config, current)
    assert adopted.config_hash != upgraded.config_hash
    # Nothing to write: it is what is installed.
    assert adopted.data == {VALUES_KEY: current["linkerd-config"][VALUES_KEY]}
    now = {**current, "linkerd-config": upgraded.data}
    back = restored_config(config, snapshot, now)
    assert back.config_hash == adopted.config_hash
    # The same values (written out again, as every rendering that changes values is).
    assert parse_values(back.data[VALUES_KEY], "back") == parse_values(
        adopted.data[VALUES_KEY], "adopted"
    )
    assert restored_config(config, snapshot, {**now, "linkerd-config": back.data}).data == (
        back.data
    )  # and stable once written: nothing drifts


def test_adoption_is_recorded_once_and_only_for_a_converged_installation() -> None:
    config = lc({"proxy": {"proxyVersion": "edge-26.8.5"}})
    snapshot = Snapshot({VALUES_KEY: "linkerdVersion: edge-26.8.3\n"})
    record, why = rollback.adoption(config, "h0", snapshot, 0, "2026-11-27T00:00:00Z")
    assert why == ""
    assert record is not None and record.to_json() == {
        "configHash": "h0",
        "generation": 0,
        "spec": None,
        "installed": {"data": dict(snapshot.data), "companions": {}},
        "at": "2026-11-27T00:00:00Z",
    }
    recorded = lc(
        config["spec"], {"lastCompleted": {k: v for k, v in record.to_json().items() if v}}
    )
    assert Record.of(recorded).completed is not None
    found = Record.of(recorded).completed
    assert found is not None and found.installed == snapshot and found.generation == 0
    assert rollback.settled(recorded) == "h0"
    # Once recorded, or once this LinkerdConfig wrote anything, nothing is adopted again.
    assert rollback.adoption(recorded, "h0", snapshot, 0, "t") == (None, "")
    written = lc(config["spec"], {"configHash": "h1"})
    assert rollback.adoption(written, "h0", snapshot, 0, "t") == (None, "")
    # Pods not on it: it is no completed configuration.
    record, why = rollback.adoption(config, "h0", snapshot, 2, "t")
    assert record is None
    assert "2 opted-in workload(s) do not run the installed configuration" in why
    huge = Snapshot({VALUES_KEY: "x" * (MAX_SNAPSHOT_CHARS + 1)})
    record, why = rollback.adoption(config, "h0", huge, 0, "t")
    assert record is None and "over" in why


def test_a_completed_record_replaces_an_adoption_whole() -> None:
    """Status is merge-patched: the completed configuration's record sets the snapshot to
    null, so no adoption's data lingers under a spec it does not belong to."""
    completed = rollback.completed_record(lc({"proxy": {}}), "h1", "t")
    assert completed is not None and completed.to_json()["installed"] is None


@pytest.mark.parametrize(
    "installed",
    [
        "text",
        {"data": "text"},
        {"data": {"values": 1}},
        {"data": {}, "companions": {"linkerd-identity-trust-roots": "pem"}},
        {"data": {"values": "x" * (MAX_SNAPSHOT_CHARS + 1)}},
    ],
)
def test_an_unreadable_adoption_record_is_no_completed_configuration(installed: Any) -> None:
    stored = lc({}, {"lastCompleted": {"configHash": "h0", "installed": installed}})
    assert Record.of(stored).completed is None
    assert rollback.target(stored, "h1") == (None, "status.lastCompleted cannot be read")


def test_a_rollback_to_an_adoption_writes_the_snapshot_back() -> None:
    current = legacy_installed()
    config = lc(legacy_spec("edge-19.12.3"))
    snapshot = adopted_snapshot(config, current)
    adopted = restored_config(config, snapshot, current)
    record, _ = rollback.adoption(config, adopted.config_hash, snapshot, 0, "t")
    assert record is not None
    stored = lc(config["spec"], {"lastCompleted": record.to_json()})
    target, why = rollback.target(stored, "failed")
    assert why == "" and target is not None
    halt = rollback.start(Halt("failed", 0, "", (), ""), target, [])
    upgraded = desired_config(config, current)
    now = {"linkerd-config": {**current["linkerd-config"], **upgraded.data}}
    back = rollback.rendered_target(stored, halt, now)
    assert back is not None
    assert back.config_hash == adopted.config_hash
    assert back.data == snapshot.data
    assert back.proxy.version == "edge-19.12.1"
    assert rollback.config_to_render(stored, halt) is None  # no spec to render
