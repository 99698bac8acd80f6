"""A restarted workload's verdict from its cached state, as tables: kubectl's own rollout-status
cases for each kind (``pkg/polymorphichelpers/rollout_status_test.go``: generation, replicas,
updated, available, old replicas, partitions, revisions), the failures kubectl only reports
(a progress deadline exceeded, new pods refused), the proxy check on the pods that came back,
and the pre-flight that keeps an already unhealthy or paused workload out of a rollout."""

from __future__ import annotations

from typing import Any

import pytest

from linkerd_config.kube.resource import Json, rfc3339
from linkerd_config.kube.rollout_status import Verdict, rollout_status
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.mesh import (
    RESTARTED_AT_ANNOTATION,
    Workload,
    restart_patch,
    restore_patch,
)
from linkerd_config.linkerd.rollout import health
from linkerd_config.linkerd.rollout.health import (
    Restarted,
    gate,
    preflight,
    restart_verdict,
)
from linkerd_config.linkerd.rollout.record import RESUME_ANNOTATION
from linkerd_config.linkerd.spec.crd import FORGIVEN_FIELD, HALT_FIELD
from tests.support.merge_patch import apply_merge_patch

TIMED_OUT = {
    "type": "Progressing",
    "status": "False",
    "reason": "ProgressDeadlineExceeded",
    "message": 'ReplicaSet "foo-1" has timed out progressing.',
}
REFUSED = {
    "type": "ReplicaFailure",
    "status": "True",
    "reason": "FailedCreate",
    "message": 'pods "foo-1-x" is forbidden: exceeded quota: q',
}


@pytest.mark.parametrize(
    ("obj", "state", "why"),
    [
        # kubectl's cases.
        (
            {
                "metadata": {"generation": 0},
                "spec": {"replicas": 1},
                "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 0,
                           "availableReplicas": 1},
            },
            "waiting", "0 of 1 new replicas updated",
        ),
        (
            {
                "metadata": {"generation": 1},
                "spec": {"replicas": 1},
                "status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 1,
                           "availableReplicas": 2},
            },
            "waiting", "1 old replica(s) pending termination",
        ),
        (
            {
                "metadata": {"generation": 1},
                "spec": {"replicas": 2},
                "status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
                           "availableReplicas": 1},
            },
            "waiting", "1 of 2 updated replicas available",
        ),
        (
            {
                "metadata": {"generation": 1},
                "spec": {"replicas": 2},
                "status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
                           "availableReplicas": 2},
            },
            "done", "",
        ),
        (
            {
                "metadata": {"generation": 2},
                "spec": {"replicas": 2},
                "status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
                           "availableReplicas": 2},
            },
            "waiting", "not seen the restart yet",
        ),
        (
            {
                "metadata": {"generation": 1},
                "spec": {"replicas": 1},
                "status": {"observedGeneration": 1, "conditions": [TIMED_OUT]},
            },
            "failed", "timed out progressing. (ProgressDeadlineExceeded)",
        ),
        # What kubectl only reports, and we act on: new pods refused.
        (
            {
                "metadata": {"generation": 1},
                "spec": {"replicas": 2},
                "status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 1,
                           "availableReplicas": 2, "conditions": [REFUSED]},
            },
            "failed", "new pods refused: pods \"foo-1-x\" is forbidden: exceeded quota: q",
        ),
        # A default of one replica when spec.replicas is left out.
        (
            {
                "metadata": {"generation": 1},
                "spec": {},
                "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                           "availableReplicas": 1},
            },
            "done", "",
        ),
    ],
)  # fmt: skip
def test_deployment_rollout_status(obj: dict[str, Any], state: str, why: str) -> None:
    verdict = rollout_status("Deployment", obj)
    assert verdict.state == state
    assert why in verdict.why


def daemonset(generation: int = 1, observed: int = 1, **status: int) -> dict[str, Any]:
    return {
        "metadata": {"generation": generation},
        "spec": {"updateStrategy": {"type": "RollingUpdate"}},
        "status": {"observedGeneration": observed, **status},
    }


@pytest.mark.parametrize(
    ("obj", "state", "why"),
    [
        (daemonset(updatedNumberScheduled=0, numberAvailable=0, desiredNumberScheduled=1),
         "waiting", "0 of 1 new pods scheduled"),
        (daemonset(updatedNumberScheduled=1, numberAvailable=0, desiredNumberScheduled=1),
         "waiting", "0 of 1 updated pods available"),
        (daemonset(updatedNumberScheduled=1, numberAvailable=1, desiredNumberScheduled=1),
         "done", ""),
        (daemonset(updatedNumberScheduled=0, numberAvailable=0, desiredNumberScheduled=0),
         "done", ""),
        (daemonset(generation=2, updatedNumberScheduled=1, numberAvailable=1,
                   desiredNumberScheduled=1), "waiting", "not seen"),
    ],
)  # fmt: skip
def test_daemonset_rollout_status(obj: dict[str, Any], state: str, why: str) -> None:
    verdict = rollout_status("DaemonSet", obj)
    assert (verdict.state, why in verdict.why) == (state, True)


def statefulset(
    replicas: int = 3,
    partition: int | None = None,
    generation: int = 1,
    observed: int = 1,
    strategy: str = "RollingUpdate",
    **status: Any,
) -> dict[str, Any]:
    update: dict[str, Any] = {"type": strategy}
    if partition is not None:
        update["rollingUpdate"] = {"partition": partition}
    return {
        "metadata": {"generation": generation},
        "spec": {"replicas": replicas, "updateStrategy": update},
        "status": {"observedGeneration": observed, **status},
    }


@pytest.mark.parametrize(
    ("obj", "state", "why"),
    [
        (statefulset(observed=0, readyReplicas=3), "waiting", "not seen"),
        (statefulset(generation=2, readyReplicas=3), "waiting", "not seen"),
        (statefulset(readyReplicas=1), "waiting", "2 pod(s) not ready"),
        (statefulset(readyReplicas=3, updatedReplicas=1, updateRevision="r2",
                     currentRevision="r1"), "waiting", "1 pod(s) at revision r2"),
        (statefulset(readyReplicas=3, updatedReplicas=3, updateRevision="r2",
                     currentRevision="r2"), "done", ""),
        (statefulset(partition=2, readyReplicas=3, updatedReplicas=0), "waiting",
         "0 of 1 new pods updated"),
        (statefulset(partition=2, readyReplicas=3, updatedReplicas=1), "done", ""),
        (statefulset(strategy="OnDelete", readyReplicas=0), "done", ""),
    ],
)  # fmt: skip
def test_statefulset_rollout_status(obj: dict[str, Any], state: str, why: str) -> None:
    verdict = rollout_status("StatefulSet", obj)
    assert (verdict.state, why in verdict.why) == (state, True)


def test_an_unknown_kind_has_no_rollout_status() -> None:
    with pytest.raises(ValueError, match="CronJob"):
        rollout_status("CronJob", {})


HEALTHY: dict[str, Any] = {
    "metadata": {"name": "foo", "generation": 1},
    "spec": {"replicas": 2},
    "status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
               "availableReplicas": 2},
}  # fmt: skip
UNAVAILABLE = {
    "type": "Available",
    "status": "False",
    "reason": "MinimumReplicasUnavailable",
    "message": "Deployment does not have minimum availability.",
}


@pytest.mark.parametrize(
    ("kind", "obj", "why"),
    [
        ("Deployment", HEALTHY, None),
        ("Deployment", {**HEALTHY, "spec": {"replicas": 2, "paused": True}}, "paused"),
        ("Deployment", {**HEALTHY, "status": {**HEALTHY["status"],
                                              "conditions": [TIMED_OUT]}},
         "already failing before its restart"),
        ("Deployment", {**HEALTHY, "status": {**HEALTHY["status"],
                                              "conditions": [UNAVAILABLE]}},
         "not available before its restart"),
        ("Deployment", {**HEALTHY, "status": {**HEALTHY["status"], "availableReplicas": 1}},
         "still rolling out a change of its own"),
        ("Deployment", {**HEALTHY, "metadata": {"generation": 2}}, None),
        ("StatefulSet", statefulset(readyReplicas=1), "still rolling out"),
        ("DaemonSet", daemonset(updatedNumberScheduled=1, numberAvailable=1,
                                desiredNumberScheduled=1), None),
        # OnDelete: a restart replaces nothing; skipped, healthy or not (issue 37, finding 5).
        ("StatefulSet", statefulset(strategy="OnDelete"), "updateStrategy OnDelete"),
        ("DaemonSet", {**daemonset(updatedNumberScheduled=1, numberAvailable=1,
                                   desiredNumberScheduled=1),
                       "spec": {"updateStrategy": {"type": "OnDelete"}}},
         "updateStrategy OnDelete"),
    ],
)  # fmt: skip
def test_preflight(kind: str, obj: dict[str, Any], why: str | None) -> None:
    found = preflight(kind, obj)
    assert (found is None) == (why is None), found
    if why is not None:
        assert found is not None and why in found


def test_a_restart_is_done_when_its_rollout_is_and_every_pod_has_the_proxy() -> None:
    assert restart_verdict("Deployment", HEALTHY, {}) == Verdict("done")
    rolling = {**HEALTHY, "status": {**HEALTHY["status"], "availableReplicas": 1}}
    assert restart_verdict("Deployment", rolling, {"x": 1}).state == "waiting"
    # Done by its own account, a pod still stale: waiting (caches lag; the deadline decides).
    lagging = restart_verdict("Deployment", HEALTHY, {"proxy version a → b": 1})
    assert lagging == Verdict(
        "waiting", "1 pod(s) not on the desired proxy yet: proxy version a → b (1)"
    )
    refused = {**HEALTHY, "status": {**HEALTHY["status"], "conditions": [REFUSED]}}
    assert restart_verdict("Deployment", refused, {"x": 2}).failed


def item(name: str, at: float, state: str, why: str = "w") -> Restarted:
    return Restarted(name, at, Verdict(state, why))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("items", "now", "forgiven", "waiting", "failed"),
    [
        ([], 100.0, (), (), ()),
        ([item("a", 0, "done")], 100.0, (), (), ()),
        ([item("a", 50, "waiting", "1 of 2")], 100.0, (), (("a", "1 of 2"),), ()),
        ([item("a", 0, "waiting", "1 of 2")], 600.0, (), (),
         (("a", "not complete 10m0s after its restart: 1 of 2"),)),
        ([item("a", 90, "failed", "refused")], 100.0, (), (), (("a", "refused"),)),
        ([item("b", 90, "waiting"), item("a", 90, "failed", "x")], 100.0, (),
         (("b", "w"),), (("a", "x"),)),
        ([item("a", 0, "failed", "x"), item("b", 90, "done")], 100.0, ("a",), (), ()),
    ],
)  # fmt: skip
def test_the_gate(
    items: list[Restarted],
    now: float,
    forgiven: tuple[str, ...],
    waiting: tuple[tuple[str, str], ...],
    failed: tuple[tuple[str, str], ...],
) -> None:
    found = gate(items, now, 600.0, frozenset(forgiven))
    assert (found.waiting, found.failed) == (waiting, failed)
    assert found.open == (not waiting and not failed)


def _restarted_for(obj: dict[str, Any], config_hash: str) -> dict[str, Any]:
    annotations = {"config.linkerd.io/restarted-for": config_hash}
    spec = {**obj["spec"], "template": {"metadata": {"annotations": annotations}}}
    return {**obj, "spec": spec}


REFUSED_BY_US = _restarted_for(
    {**HEALTHY, "status": {**HEALTHY["status"], "conditions": [TIMED_OUT]}}, "h-failed"
)


@pytest.mark.parametrize(
    ("obj", "settled", "why"),
    [
        # Broken by an attempt of ours that never completed (halted, rolled back short of
        # it, superseded): restarting it onto the new configuration repairs it.
        (REFUSED_BY_US, "h-completed", None),
        (REFUSED_BY_US, None, None),
        # Broken after a rollout of ours completed on it: its own trouble, skipped.
        (_restarted_for(REFUSED_BY_US, "h-completed"), "h-completed", "already failing"),
        # Paused is paused, whoever restarted it last.
        (_restarted_for({**HEALTHY, "spec": {"replicas": 2, "paused": True}}, "h-failed"),
         "h-completed", "paused"),
    ],
)  # fmt: skip
def test_preflight_does_not_skip_what_an_earlier_attempt_of_ours_broke(
    obj: dict[str, Any], settled: str | None, why: str | None
) -> None:
    found = preflight("Deployment", obj, settled)
    assert (found is None) == (why is None), found
    if why is not None:
        assert found is not None and why in found


# -- out of the mesh (issue 58, findings 1 and 3) ---------------------------------------------

DONE_DEPLOYMENT: Json = {
    "metadata": {"generation": 2},
    "spec": {"replicas": 2},
    "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
               "availableReplicas": 2},
}  # fmt: skip
ROLLING_DEPLOYMENT: Json = {
    **DONE_DEPLOYMENT,
    "status": {**DONE_DEPLOYMENT["status"], "updatedReplicas": 1, "replicas": 3},
}


@pytest.mark.parametrize(
    ("kind", "obj", "unmeshed", "newest", "failed"),
    [
        pytest.param("Deployment", DONE_DEPLOYMENT, {}, None, False, id="every pod meshed"),
        pytest.param("Deployment", ROLLING_DEPLOYMENT, {"web-new": 1}, "web-new", True,
                     id="a pod of the newest ReplicaSet without a proxy"),
        pytest.param("Deployment", ROLLING_DEPLOYMENT, {"web-old": 1}, "web-new", False,
                     id="only an earlier ReplicaSet's pod without a proxy"),
        pytest.param("Deployment", ROLLING_DEPLOYMENT, {"web-new": 1}, None, False,
                     id="under way, the newest ReplicaSet not read: not yet evidence"),
        pytest.param("Deployment", DONE_DEPLOYMENT, {"web-new": 2}, None, True,
                     id="done: every pod is the newest revision's"),
    ],
)  # fmt: skip
def test_pods_a_restart_made_without_the_proxy_are_out_of_the_mesh(
    kind: str, obj: Json, unmeshed: dict[str, int], newest: str | None, failed: bool
) -> None:
    before = health.restart_verdict(kind, obj, {})
    verdict = health.out_of_mesh(kind, obj, before, unmeshed, newest)
    assert verdict.failed is failed
    if failed:
        assert verdict.why.startswith(health.OUT_OF_MESH)


def test_the_plan_counts_pods_without_a_proxy_by_replicaset() -> None:
    def pod(name: str, rs: str, proxy: str | None) -> Json:
        annotations = {} if proxy is None else {mesh.PROXY_VERSION_ANNOTATION: proxy}
        return {
            "metadata": {
                "name": name, "namespace": "shop",
                "labels": {mesh.RECONCILE_LABEL: mesh.RECONCILE_AUTO},
                "annotations": annotations,
                "ownerReferences": [{"kind": "ReplicaSet", "name": rs, "controller": True}],
            },
            "status": {"phase": "Running"},
        }  # fmt: skip

    def replicaset(_ns: str, name: str) -> Json:
        owner = {"kind": "Deployment", "name": "web", "controller": True}
        return {"metadata": {"name": name, "ownerReferences": [owner]}}

    pods = [pod("a", "web-old", "edge-1"), pod("b", "web-new", None), pod("c", "web-new", None)]
    disabled = {"metadata": {"labels": {mesh.WEBHOOKS_LABEL: "disabled"}}}
    planned = mesh.plan_rollout(pods, {}, mesh.DesiredProxy("edge-2"), replicaset)
    assert planned.unmeshed == {mesh.Workload("Deployment", "shop", "web"): {"web-new": 2}}
    untouched = mesh.plan_rollout(pods, {"shop": disabled}, mesh.DesiredProxy("edge-2"), replicaset)
    assert untouched.unmeshed == {}  # a namespace no rollout touches answers for nothing


# -- what ends a halt: the attempt is the configuration and the resume annotation ------------

_HALTED_AT = "2026-11-27T00:00:00Z"


def _lc(generation: int, status: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    """A LinkerdConfig at ``generation`` (its spec.rollout alone edited since the halt, when
    later than 4), with ``status`` and the resume annotation ``token``."""
    annotations = {} if token is None else {RESUME_ANNOTATION: token}
    return {
        "metadata": {"name": "lc", "generation": generation, "annotations": annotations},
        "spec": {"rollout": {"paused": generation > 4}},
        "status": status,
    }


@pytest.mark.parametrize("rolling_back", [False, True], ids=["halt", "rollback"])
def test_an_edit_of_spec_rollout_alone_ends_no_halt_nor_rollback(rolling_back: bool) -> None:
    """Issue 58, finding 4: ``spec.rollout.paused: true`` (or a new pace, a new deadline)
    bumps the generation but not the configuration hash, and was read as a new attempt: the
    rollback was dropped, and 0.6 s later the ConfigMap was back on the failed proxy. The
    attempt is the configuration and the resume annotation: a new configuration is a new
    attempt, a new resume annotation resumes, a new generation alone is neither."""
    record = health.halt_record(
        _lc(4, {}), "h1", [("deployment/ns/a", "new pods refused")], _HALTED_AT
    )
    if rolling_back:
        record = record.with_rollback("h0", 3, ["deployment/ns/a"])
    status = {HALT_FIELD: record.to_json()}
    for generation in (4, 5, 9):
        kept = health.halt_state(_lc(generation, status), "h1")
        assert (kept.halted, kept.status) == (record, {}), generation
    other = health.halt_state(_lc(5, status), "h2")
    assert other.halted is None and other.status[HALT_FIELD] is None
    resumed = health.halt_state(_lc(5, status, token="1"), "h1")
    assert resumed.halted is None and resumed.forgiven == {"deployment/ns/a"}
    forgiven = {FORGIVEN_FIELD: resumed.status[FORGIVEN_FIELD]}
    # The resume's forgiven outlive a later edit of spec.rollout too; another configuration
    # clears them.
    later = health.halt_state(_lc(6, forgiven, token="1"), "h1")
    assert (later.halted, later.forgiven, later.status) == (None, {"deployment/ns/a"}, {})
    cleared = health.halt_state(_lc(6, forgiven, token="1"), "h2")
    assert cleared.forgiven == frozenset()
    assert cleared.status == {FORGIVEN_FIELD: None}


# -- a rollback's deadlines: each from its own restore (issue 58, finding 7) ----------------


def test_a_restore_counts_its_deadline_from_that_restore() -> None:
    """A rollback waits for the injector to inject the old proxy before it restores
    anything; its deadline counted from the rollback's start, a workload restored half a
    second earlier was past it already, and a false ``RollbackNotHealthy`` Warning (which
    alerts fire on) named it. Each restore's time is read from the workload (a new leader
    reads it too): a restart's stamp on the pod template, or an undo's on the Deployment's
    own metadata (the template must stay the previous revision's exactly). None readable,
    or an earlier one (a restart of ours before this rollback): the rollback's start."""
    started = 1_800_000_000.0
    coming = {
        "metadata": {**HEALTHY["metadata"], "resourceVersion": "1"},
        "spec": {**HEALTHY["spec"], "template": {"metadata": {"labels": {"app": "a"}}}},
        "status": {**HEALTHY["status"], "availableReplicas": 0},
    }
    previous = {  # the template gone back to, made by a restart of ours an hour before
        "metadata": {"labels": {"app": "a"},
                     "annotations": {RESTARTED_AT_ANNOTATION: rfc3339(started - 3600)}},
    }  # fmt: skip
    a, b, c, d = (Workload("Deployment", "ns", n) for n in "abcd")
    objects = {
        a: apply_merge_patch(coming, restart_patch("h0", "1", started + 50.5)),
        b: apply_merge_patch(coming, restore_patch(coming, previous, started + 40.0)),
        c: coming,
        d: apply_merge_patch(coming, restart_patch("h0", "1", started - 3600)),
    }
    assert objects[b]["spec"]["template"] == previous  # the undo left the template alone
    found = health.brought_back(objects, objects.get, {}, started)
    at = {name: standing.restarted_at for name, (standing, _) in found.items()}
    assert at == {str(a): started + 50.5, str(b): started + 40.0, str(c): started,
                  str(d): started}  # fmt: skip
    checked = gate([standing for standing, _ in found.values()], started + 70.0, 60.0)
    assert [name for name, _ in checked.waiting] == [str(a), str(b)]
    assert [name for name, _ in checked.failed] == [str(c), str(d)]
