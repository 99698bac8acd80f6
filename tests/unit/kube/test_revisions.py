"""A Deployment's revisions read from its ReplicaSets (``kube/revisions.py``), from tables."""

from __future__ import annotations

import pytest

from linkerd_config.kube import revisions, rollout_status
from linkerd_config.kube.resource import Json

DEPLOYMENT: Json = {"metadata": {"name": "web", "uid": "u1"}}


def replicaset(name: str, revision: str | None, owner: str = "u1", failure: str = "") -> Json:
    annotations = {} if revision is None else {revisions.REVISION_ANNOTATION: revision}
    conditions = []
    if failure:
        conditions = [{"type": "ReplicaFailure", "status": "True", "message": failure}]
    return {
        "metadata": {
            "name": name,
            "annotations": annotations,
            "ownerReferences": [{"kind": "Deployment", "uid": owner, "controller": True}],
        },
        "status": {"conditions": conditions},
    }


@pytest.mark.parametrize(
    ("listed", "newest"),
    [
        ([], None),
        ([replicaset("a", "1")], "a"),
        ([replicaset("a", "2"), replicaset("b", "10")], "b"),  # numbers, not strings
        ([replicaset("a", "1"), replicaset("b", None)], "a"),  # unreadable: oldest
        ([replicaset("a", "1"), replicaset("x", "9", owner="u2")], "a"),  # another's
    ],
)
def test_the_newest_revision(listed: list[Json], newest: str | None) -> None:
    found = revisions.newest(DEPLOYMENT, listed)
    assert (None if found is None else found["metadata"]["name"]) == newest


@pytest.mark.parametrize(
    ("conditions", "failure"),
    [
        ([], None),
        ([{"type": "ReplicaFailure", "status": "False", "message": "m"}], None),
        ([{"type": "ReplicaFailure", "status": "True", "message": "quota"}], "quota"),
        ([{"type": "ReplicaFailure", "status": "True"}], "no reason"),
        ([{"type": "Available", "status": "True"}], None),
        (["not a condition"], None),
    ],
)
def test_a_replica_failure(conditions: list[object], failure: str | None) -> None:
    assert revisions.replica_failure({"status": {"conditions": conditions}}) == failure


# Whose ReplicaFailure: only the newest revision's fails the restart (issue 37, finding 4).
_FAILING = rollout_status.Verdict("failed", "new pods refused: old", replica_failure=True)


@pytest.mark.parametrize(
    ("verdict", "listed", "state", "why"),
    [
        (_FAILING, [replicaset("a", "1", failure="old"), replicaset("b", "2")], "waiting",
         rollout_status.EARLIER_REVISION),
        (_FAILING, [], "waiting", rollout_status.EARLIER_REVISION),  # not listed yet
        (_FAILING, [replicaset("a", "1"), replicaset("b", "2", failure="new")], "failed",
         "new pods refused: new"),
        (_FAILING, [replicaset("x", "9", owner="u2", failure="theirs")], "waiting",
         rollout_status.EARLIER_REVISION),
        (rollout_status.Verdict("failed", "deadline"), [replicaset("b", "2", failure="new")],
         "failed", "deadline"),
        (rollout_status.Verdict("done"), [], "done", ""),
    ],
)  # fmt: skip
def test_a_failure_counts_only_when_the_newest_revision_has_it(
    verdict: rollout_status.Verdict, listed: list[Json], state: str, why: str
) -> None:
    found = rollout_status.of_newest_revision(verdict, DEPLOYMENT, listed)
    assert (found.state, found.why) == (state, why)


def with_template(rs: Json, image: str) -> Json:
    template = {
        "metadata": {
            "labels": {"app": "web", revisions.TEMPLATE_HASH_LABEL: rs["metadata"]["name"]}
        },
        "spec": {"containers": [{"name": "web", "image": image}]},
    }
    return {**rs, "spec": {"template": template}}


def test_the_revision_template_is_the_newest_kept_without_its_hash_label() -> None:
    listed = [
        with_template(replicaset("rs-1", "1"), "web:1"),
        with_template(replicaset("rs-3", "3"), "web:3"),
        with_template(replicaset("rs-2", "2"), "web:2"),
        with_template(replicaset("theirs", "9", owner="u2"), "web:9"),
    ]

    def not_three(template: Json) -> bool:
        return bool(template["spec"]["containers"][0]["image"] != "web:3")

    found = revisions.revision_template(DEPLOYMENT, listed, not_three)
    assert found == {
        "metadata": {"labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": "web:2"}]},
    }
    assert revisions.TEMPLATE_HASH_LABEL in listed[2]["spec"]["template"]["metadata"]["labels"]
    assert revisions.revision_template(DEPLOYMENT, listed, lambda _: False) is None
