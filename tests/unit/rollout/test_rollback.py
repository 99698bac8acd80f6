"""The rollback's pure decisions, from tables: what ``lastCompleted`` keeps, which pod
template a Deployment goes back to (``kubectl rollout undo``'s choice), the merge patch that
gets there, and the phase records a new leader reads back."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from linkerd_config.kube import revisions
from linkerd_config.kube.json_merge_patch import merge_patch
from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.formats import Snapshot
from linkerd_config.linkerd.mesh import RESTARTED_FOR_ANNOTATION, Workload
from linkerd_config.linkerd.rollout import health, rollback
from linkerd_config.linkerd.rollout.phase import Phase
from linkerd_config.linkerd.rollout.record import MAX_SPEC_CHARS, Completed, Halt, Record, Rollback
from linkerd_config.linkerd.spec.crd import LAST_COMPLETED_FIELD
from tests.support.merge_patch import apply_merge_patch

SPEC: Json = {
    "global": {"linkerdVersion": "edge-26.8.3"},
    "proxy": {"proxyVersion": "edge-26.8.2"},
    "rollout": {"onFailure": "Rollback"},
}


def config(status: Json | None = None, generation: int = 3, spec: Json | None = None) -> Json:
    return {
        "metadata": {"name": "lc", "generation": generation},
        "spec": SPEC if spec is None else spec,
        "status": status or {},
    }


def test_last_completed_keeps_what_the_configuration_is_rendered_from() -> None:
    found = rollback.completed_record(config(), "h0", "2026-11-24T00:00:00Z")
    assert found is not None
    record = found.to_json()
    assert record["configHash"] == "h0" and record["generation"] == 3
    assert orjson.loads(record["spec"]) == {"global": SPEC["global"], "proxy": SPEC["proxy"]}
    # Already recorded: nothing to write.
    recorded = config({LAST_COMPLETED_FIELD: record})
    assert rollback.completed_record(recorded, "h0", "later") is None
    assert rollback.completed_record(recorded, "h1", "later") is not None


@pytest.mark.parametrize(
    ("stored", "readable"),
    [
        ({"configHash": "h0", "spec": "{}"}, True),
        ({"configHash": "h0"}, False),
        ({"configHash": 7, "spec": "{}"}, False),
        ({"configHash": "h0", "spec": "x" * (MAX_SPEC_CHARS + 1)}, False),
        ("not a record", False),
    ],
)
def test_only_a_readable_last_completed_is_used(stored: Any, readable: bool) -> None:
    found = Record.of(config({LAST_COMPLETED_FIELD: stored})).completed
    assert (found is not None) == readable


def halt_to(to_hash: str, phase: Phase = Phase.ROLLING_BACK) -> Halt:
    halt = Halt("h1", 3, "", ("deployment/a/web: refused",), "")
    target = Completed(to_hash, 2, "")
    started = rollback.start(halt, target, [Workload("Deployment", "a", "web")])
    return started if phase == Phase.ROLLING_BACK else started.rolled_back()


def test_the_config_rendered_while_rolled_back_is_the_last_completed_one() -> None:
    old = {"global": {"version": "edge-26.8.1"}, "proxy": {"proxyVersion": "edge-26.8.1"}}
    last = {"configHash": "h0", "generation": 2, "spec": orjson.dumps(old).decode()}
    stored = config({LAST_COMPLETED_FIELD: last})
    rendered = rollback.config_to_render(stored, halt_to("h0"))
    assert rendered is not None
    assert rendered["spec"] == {**old, "rollout": SPEC["rollout"]}  # rollout kept as it is now
    assert rendered["metadata"] == stored["metadata"]
    # A plain halt renders the spec; a target status no longer records cannot be gone back to.
    assert rollback.config_to_render(stored, Halt("h1", 3, "", (), "")) is None
    assert rollback.config_to_render(stored, halt_to("h9")) is None
    broken = config({LAST_COMPLETED_FIELD: {**last, "spec": "{not json"}})
    assert rollback.config_to_render(broken, halt_to("h0")) is None
    not_a_spec = config({LAST_COMPLETED_FIELD: {**last, "spec": "[]"}})
    assert rollback.config_to_render(not_a_spec, halt_to("h0")) is None


def test_a_rollback_lists_the_owners_it_brings_back_and_moves_only_forward() -> None:
    halt = Halt("h1", 0, "", (), "2026-11-24T10:00:00Z")
    started = rollback.start(
        halt,
        Completed("h0", 2, ""),
        [
            Workload("Pod", "a", "bare"),
            Workload("StatefulSet", "b", "db"),
            Workload("Deployment", "a", "web"),
        ],
    )
    assert started.to_json()["rollback"] == {
        "toHash": "h0",
        "toGeneration": 2,
        "phase": "RollingBack",
        "workloads": ["deployment/a/web", "statefulset/b/db"],  # a bare pod is gone for good
    }
    done = started.rolled_back()
    assert done.rollback is not None and done.rollback.phase == Phase.ROLLED_BACK
    assert done.config_hash == "h1" and done.same(started) and done.same(halt)
    assert [r.rank for r in (halt, started, done)] == [0, 1, 2]
    assert started.started_at == 1_795_514_400.0
    assert Halt("h1", 0, "", (), "yesterday").started_at is None


@pytest.mark.parametrize(
    "stored",
    [
        {"configHash": "h1", "rolledHash": "h1", "generation": 3, "resumeToken": "t",
         "failed": ["a: x"], "at": "T"},
        {**{"configHash": "h1", "rolledHash": "h1-held", "generation": 3, "resumeToken": "",
            "failed": [], "at": "T"},
         "rollback": {"toHash": "h0", "toGeneration": 2, "phase": "RolledBack",
                      "workloads": ["deployment/a/web"]}},
    ],
)  # fmt: skip
def test_the_halt_record_reads_back_what_it_writes(stored: Json) -> None:
    parsed = Halt.parse(stored)
    assert parsed is not None and parsed.to_json() == stored


def test_a_halt_record_of_the_previous_release_reads_as_the_configuration_rolled() -> None:
    """A controller upgraded mid-rollout: the previous release wrote no ``rolledHash`` (it
    kept a halt under the configuration rolled out): that configuration is both."""
    earlier = {"configHash": "h1", "generation": 3, "resumeToken": "", "failed": [], "at": "T"}
    parsed = Halt.parse(earlier)
    assert parsed == Halt("h1", 3, "", (), "T") and parsed.rolled == "h1"
    assert parsed.to_json() == {**earlier, "rolledHash": "h1"}
    held = health.halt_record({"metadata": {"generation": 3}}, "h1", [], "T", "h1-held")
    assert (held.config_hash, held.rolled) == ("h1", "h1-held")
    assert Halt.parse(held.to_json()) == held
    same = health.halt_record({"metadata": {"generation": 3}}, "h1", [], "T", "h1")
    assert same == parsed and Halt.parse(same.to_json()) == same


@pytest.mark.parametrize(
    ("stored", "read"),
    [
        ("text", None),
        ({}, Halt("", 0, "", (), "")),
        ({"configHash": 7, "generation": True, "failed": "x", "rollback": {"phase": "Nope"}},
         Halt("", 0, "", (), "", Rollback("", 0, Phase.ROLLING_BACK))),
    ],
)  # fmt: skip
def test_a_halt_record_someone_else_wrote_reads_leniently(
    stored: object, read: Halt | None
) -> None:
    assert Halt.parse(stored) == read


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("deployment/a/web", Workload("Deployment", "a", "web")),
        ("statefulset/b/db", Workload("StatefulSet", "b", "db")),
        ("daemonset/c/agent", Workload("DaemonSet", "c", "agent")),
        ("pod/a/bare", None),
        ("deployment/a", None),
        ("deployment//web", None),
        ("deployment/a/web/x", None),
    ],
)
def test_workload_names_read_back(name: str, parsed: Workload | None) -> None:
    assert rollback.parse_workload(name) == parsed
    if parsed is not None:
        assert str(parsed) == name


# -- kubectl rollout undo: the previous ReplicaSet's template --------------------------------

DEPLOYMENT: Json = {
    "metadata": {"name": "web", "namespace": "a", "uid": "d1", "resourceVersion": "9"}
}


def rs(name: str, revision: str | None, restarted_for: str | None, owner: str = "d1") -> Json:
    annotations = {} if restarted_for is None else {RESTARTED_FOR_ANNOTATION: restarted_for}
    meta: Json = {
        "name": name,
        "ownerReferences": [{"kind": "Deployment", "uid": owner, "controller": True}],
    }
    if revision is not None:
        meta["annotations"] = {revisions.REVISION_ANNOTATION: revision}
    return {
        "metadata": meta,
        "spec": {
            "template": {
                "metadata": {
                    "labels": {"app": "web", revisions.TEMPLATE_HASH_LABEL: name},
                    "annotations": annotations,
                },
                "spec": {"containers": [{"name": "web", "image": "web:1"}]},
            }
        },
    }


@pytest.mark.parametrize(
    ("replicasets", "chosen"),
    [
        # The usual case: the failed restart's ReplicaSet and the one before it.
        ([rs("new", "3", "h1"), rs("old", "2", "h0")], "old"),
        # Several earlier revisions: the newest of them (kubectl undo's "previous").
        (
            [rs("new", "5", "h1"), rs("r2", "2", None), rs("r4", "4", "h0"), rs("r3", "3", None)],
            "r4",
        ),
        # Never restarted by us before: its template has no record at all.
        ([rs("new", "2", "h1"), rs("first", "1", None)], "first"),
        # Only the failed one kept (revisionHistoryLimit: 0): nothing to go back to.
        ([rs("new", "2", "h1")], None),
        # Other owners' ReplicaSets never count.
        ([rs("new", "2", "h1"), rs("other", "9", None, owner="d2")], None),
        # A ReplicaSet without a readable revision is the last choice, not an error.
        ([rs("new", "3", "h1"), rs("odd", None, None), rs("old", "1", None)], "old"),
    ],
)
def test_the_template_gone_back_to_is_the_previous_replicasets(
    replicasets: list[Json], chosen: str | None
) -> None:
    template = rollback.previous_template(DEPLOYMENT, replicasets, "h1")
    if chosen is None:
        assert template is None
        return
    assert template is not None
    assert template["metadata"]["labels"] == {"app": "web"}  # its own hash label dropped
    expected = next(r for r in replicasets if r["metadata"]["name"] == chosen)
    assert template["spec"] == expected["spec"]["template"]["spec"]
    # The ReplicaSet read is not changed by taking its template.
    assert revisions.TEMPLATE_HASH_LABEL in expected["spec"]["template"]["metadata"]["labels"]


@pytest.mark.parametrize(
    ("current", "wanted", "patch"),
    [
        ({"a": 1}, {"a": 1}, {}),
        ({"a": 1}, {"a": 2}, {"a": 2}),
        ({"a": 1, "b": 2}, {"a": 1}, {"b": None}),
        ({"m": {"x": 1, "y": 2}}, {"m": {"x": 1}}, {"m": {"y": None}}),
        ({"m": {"x": 1}}, {"m": {}}, {"m": {"x": None}}),
        ({"l": [1, 2]}, {"l": [1]}, {"l": [1]}),  # lists are replaced whole
        ({"v": "s"}, {"v": {"k": 1}}, {"v": {"k": 1}}),
        ({}, {"new": {"deep": True}}, {"new": {"deep": True}}),
    ],
)
def test_merge_patch_between_two_documents(current: Json, wanted: Json, patch: Json) -> None:
    assert merge_patch(current, wanted) == patch
    assert apply_merge_patch(current, patch) == wanted


def test_restore_patch_is_conditional_and_lands_exactly_on_the_old_template() -> None:
    failed_template = {
        "metadata": {
            "labels": {"app": "web"},
            "annotations": {RESTARTED_FOR_ANNOTATION: "h1", "config.linkerd.io/restarted-at": "t"},
        },
        "spec": {"containers": [{"name": "web", "image": "web:1"}]},
    }
    deployment = {**DEPLOYMENT, "spec": {"template": failed_template}}
    old = rollback.previous_template(deployment, [rs("new", "2", "h1"), rs("old", "1", None)], "h1")
    assert old is not None
    patch = revisions.undo_patch(deployment, old)
    assert patch["metadata"] == {"resourceVersion": "9"}
    assert apply_merge_patch(failed_template, patch["spec"]["template"]) == old
    assert old["metadata"]["annotations"] == {}  # the failed restart's record is gone


def test_the_last_completed_record_reads_back_what_it_writes() -> None:
    """One parser, one writer, for both kinds of record (a spec, an adopted installation)."""
    found = rollback.completed_record(config(), "h0", "2026-11-24T00:00:00Z")
    assert found is not None
    written = found.to_json()
    assert written["installed"] is None  # a merge patch: the other goes
    read = Completed.parse(written)
    assert read is not None and read.to_json() == written
    assert (read.config_hash, read.generation, read.installed) == ("h0", 3, None)
    snapshot = Snapshot({"values": "linkerdVersion: edge-26.8.3\n"}, {"roots": {"ca": "pem"}})
    adoption, _ = rollback.adoption(config(), "h9", snapshot, 0, "2026-11-24T00:00:00Z")
    assert adoption is not None
    adopted = adoption.to_json()
    assert adopted["spec"] is None
    back = Completed.parse(adopted)
    assert back is not None and back.installed == snapshot and back.to_json() == adopted
