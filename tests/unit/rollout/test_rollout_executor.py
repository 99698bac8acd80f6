"""One rollout pass at a time, with simple fakes (``tests/support/rollout_worlds.py``): real
caches (Stores), a writer that records what it is asked, a settable clock. What gets
restarted, in which batch, and when to wait."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from linkerd_config.kube.client import ApiError
from linkerd_config.kube.resource import Json
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.configmap.desired import Desired
from linkerd_config.linkerd.mesh import DesiredProxy
from linkerd_config.linkerd.rollout.executor import PROBE_SPACING, RESTART_CONCURRENCY
from linkerd_config.linkerd.rollout.health import halt_state
from linkerd_config.linkerd.rollout.record import RESUME_ANNOTATION
from tests.support.rollout_worlds import (
    CONFIG,
    DESIRED,
    HASH,
    HEALTHY_STATUS,
    NEW,
    NOT_AVAILABLE,
    OLD,
    World,
    roll,
    with_status,
)


def replica_failure(message: str) -> Json:
    """A ReplicaFailure condition as the Deployment controller sets it (pods refused)."""
    return {
        "type": "ReplicaFailure",
        "status": "True",
        "reason": "FailedCreate",
        "message": message,
    }


async def test_restarts_come_in_batches_no_faster_than_the_interval() -> None:
    world = World(25, max_restarts_per_pass=10, restart_interval=5.0)
    first = await world.roll()
    assert len(world.writer.patched) == 10 and first.reason == "RollingOut"
    assert first.requeue_after == 5.0 and first.restarted_total == 10 and first.outdated == 25
    world.clock.now += 1.0  # woken early by pod events: nothing more
    early = await world.roll()
    assert len(world.writer.patched) == 10
    assert early.requeue_after == pytest.approx(4.0)
    world.clock.now += 4.0
    await world.roll()
    assert len(world.writer.patched) == 20
    world.clock.now += 5.0
    last = await world.roll()
    assert len(world.writer.patched) == 25 and last.restarted_total == 25
    assert len(set(world.writer.patched)) == 25  # each once
    world.clock.now += 60.0
    await world.roll()
    assert len(world.writer.patched) == 25  # recorded ones are rolling, never restarted again


async def test_nothing_restarts_while_the_injector_still_injects_the_old_proxy() -> None:
    world = World(3, injects=OLD, injector_wait=60.0)
    world.executor.found(HASH)
    outcome = await world.roll()
    assert outcome.reason == "WaitingForInjector" and world.writer.patched == []
    assert "edge-19.12.1 → edge-19.12.3" in outcome.message


async def test_an_injector_that_cannot_be_asked_is_waited_for_then_trusted() -> None:
    world = World(2, injector_wait=60.0)
    world.writer.deployments.clear()  # no template to ask about
    world.executor.found(HASH)
    waiting = await world.roll()
    assert waiting.reason == "WaitingForInjector" and "60s more" in waiting.message
    world.clock.now += 60.0
    after = await world.roll()
    assert len(world.writer.patched) == 2 and "after waiting 60s" in after.message


async def test_the_injector_is_waited_for_again_when_the_configmap_comes_back_to_it() -> None:
    """Written, rolled back from, then written again (a resume, or the spec back to it):
    the injector must read it again. The wait ran from the first write only, so a refused
    dry-run let a batch restart at once, onto whatever the injector still served."""
    world = World(2, injector_wait=60.0)
    world.writer.deployments.clear()  # no template to ask about: the wait decides
    world.executor.found(HASH)
    world.clock.now += 600.0  # long since; the ConfigMap held another configuration since
    world.executor.found(HASH, written=True)
    waiting = await world.roll()
    assert waiting.reason == "WaitingForInjector" and "60s more" in waiting.message
    assert world.writer.patched == []
    world.executor.found(HASH)  # a reconcile that wrote nothing new: the wait runs on
    world.clock.now += 60.0
    after = await world.roll()
    assert len(world.writer.patched) == 2 and "after waiting 60s" in after.message


async def test_a_dry_run_without_a_proxy_holds_the_restarts_past_any_wait() -> None:
    """The Mesh rule (issue 37, finding 3): a dry-run pod that comes back without Linkerd's
    proxy means the new pods would too. Before, it counted as "cannot ask", and the workloads
    were restarted out of the mesh once the fallback wait passed."""
    world = World(2, injects=None, injector_wait=60.0)
    world.executor.found(HASH)
    waiting = await world.roll()
    assert waiting.reason == "WaitingForInjector" and world.writer.patched == []
    assert "did not inject a dry-run pod of deployment/ns/app-00" in waiting.message
    for _ in range(5):
        world.clock.now += 60.0
        held = await world.roll()
        assert held.reason == "WaitingForInjector" and world.writer.patched == []
    said = [e for e in world.recorder.full if e[3] == "InjectorNotInjecting"]
    assert len(said) == 1 and said[0][2] == "Warning"  # once, not once per question
    world.writer.injects = NEW  # the injector is back
    world.clock.now += PROBE_SPACING
    await world.roll()
    assert len(world.writer.patched) == 2


async def test_an_up_to_date_data_plane_is_left_alone() -> None:
    world = World(0)
    outcome = await world.roll()
    assert outcome.reason == "UpToDate" and outcome.outdated == 0 and world.writer.patched == []


async def test_a_workload_changed_since_it_was_cached_is_not_counted() -> None:
    world = World(2)
    world.writer.conflicts.add("app-00")
    outcome = await world.roll()
    assert world.writer.patched == ["ns/app-01"] and outcome.restarted_total == 1
    assert world.recorder.events == [
        ("Normal", "WorkloadRestarted"),
        ("Normal", "WorkloadsRestarted"),
    ]


async def test_a_bare_pod_is_evicted_and_counted_from_status() -> None:
    world = World(0)
    world.pods.put(
        {
            "metadata": {
                "name": "solo",
                "namespace": "ns",
                "labels": {mesh.RECONCILE_LABEL: mesh.RECONCILE_AUTO},
                "annotations": {mesh.PROXY_VERSION_ANNOTATION: OLD},
            },
            "status": {"phase": "Running"},
        }
    )
    world.writer.deployments["ns/solo"] = {
        "metadata": {"name": "solo", "namespace": "ns"},
        "spec": {"containers": [{"name": "solo", "image": "solo"}]},
    }
    config = {"metadata": {"name": "cfg"}, "status": {"configHash": HASH, "evictedPods": 4}}
    outcome = await roll(world.executor, config, DESIRED)
    assert world.writer.evicted == ["ns/solo"]
    assert outcome.evicted == 5 and outcome.restarted_total == 5  # 4 by a previous leader


def bare_pod(world: World, name: str) -> None:
    world.pods.put(
        {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "labels": {mesh.RECONCILE_LABEL: mesh.RECONCILE_AUTO},
                "annotations": {mesh.PROXY_VERSION_ANNOTATION: OLD},
            },
            "status": {"phase": "Running"},
        }
    )
    world.writer.deployments[f"ns/{name}"] = {  # the pod the injector is asked about
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"containers": [{"name": name, "image": name}]},
    }


@pytest.mark.parametrize("regained", [True, False])
async def test_a_term_regained_counts_evictions_from_status_not_from_its_last_term(
    regained: bool,
) -> None:
    """This process evicted 1 pod and lost the lead; another leader evicted 5 more and wrote
    6 to status. Leading again, this process counts from status: its own 1 would have
    written 2 over the other leader's 6. ``forget`` (the LinkerdConfig deleted) lets go of
    the count too: one made again under the name starts from its own status."""
    world = World(0, restart_interval=0.0)
    bare_pod(world, "first")
    config = {"metadata": {"name": "cfg"}, "status": {"configHash": HASH}}
    assert (await roll(world.executor, config, DESIRED)).evicted == 1
    world.pods.delete("ns/first")
    bare_pod(world, "second")
    if regained:
        world.executor.new_term()
    others = {"metadata": {"name": "cfg"}, "status": {"configHash": HASH, "evictedPods": 6}}
    outcome = await roll(world.executor, others, DESIRED)
    assert world.writer.evicted == ["ns/first", "ns/second"]
    assert outcome.evicted == (7 if regained else 2)
    world.executor.forget("cfg")
    world.pods.delete("ns/second")
    bare_pod(world, "third")
    again = {"metadata": {"name": "cfg"}, "status": {"configHash": HASH}}
    assert (await roll(world.executor, again, DESIRED)).evicted == 1


async def test_each_workload_is_asked_about_in_its_own_namespace() -> None:
    # Issue 58, finding 1: one answer stood for a whole pass. Here the injector does not
    # inject in ns2 (its namespace lost linkerd.io/inject): only ns's workload restarts.
    world = World(1, max_restarts_per_pass=5)
    world.add("other", namespace="ns2")
    world.writer.injects_in["ns2"] = None
    outcome = await world.roll()
    assert sorted(ns for ns, _ in world.writer.asked) == ["ns", "ns2"]
    assert world.writer.patched == ["ns/app-00"]
    assert outcome.restarted_total == 1
    world.writer.asked.clear()
    world.clock.now += 10.0
    again = await world.roll()  # ns2 is asked again, and still holds
    assert [ns for ns, _ in world.writer.asked] == ["ns2"]
    assert again.reason == "WaitingForInjector" and "ns2/other" in again.message
    assert world.writer.patched == ["ns/app-00"]
    world.writer.injects_in.clear()  # injected there again
    world.clock.now += 10.0
    await world.roll()
    assert world.writer.patched == ["ns/app-00", "ns2/other"]


async def test_workloads_whose_pods_agree_share_one_question() -> None:
    world = World(0, max_restarts_per_pass=5)
    for name in ("a", "b"):
        world.add(name, app="same")  # the same pod, but its name, in the same namespace
    world.add("c", namespace="ns2", app="same")  # the same pod in another namespace
    await world.roll()
    assert sorted(ns for ns, _ in world.writer.asked) == ["ns", "ns2"]
    assert sorted(world.writer.patched) == ["ns/a", "ns/b", "ns2/c"]


def restart_samples(world: World) -> dict[tuple[str, str], float]:
    """The rollout's counters, by (family, kind), as /metrics would serve them."""
    return {
        (sample.name, sample.labels["kind"]): sample.value
        for family in world.executor.metrics.registry.collect()
        for sample in family.samples
        if sample.name.endswith("_total") and sample.value
    }


async def test_restarts_and_refused_restarts_are_counted_by_kind() -> None:
    world = World(4)
    assert restart_samples(world) == {}  # every kind's series exists, at zero
    world.writer.conflicts.add("app-00")  # changed since cached: neither restarted nor failed
    world.writer.forbidden.add("app-01")
    await world.roll()
    assert restart_samples(world) == {
        ("linkerd_config_workload_restarts_total", "Deployment"): 2.0,
        ("linkerd_config_workload_restart_failures_total", "Deployment"): 1.0,
    }
    kinds = {
        sample.labels["kind"]
        for family in world.executor.metrics.registry.collect()
        for sample in family.samples
        if sample.name.startswith("linkerd_config_workload_restart")
    }
    assert kinds == {"Deployment", "StatefulSet", "DaemonSet", "Pod"}


async def test_a_pass_over_unchanged_caches_reuses_the_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reconcile that changes no cache (a reverted edit, a status write) decides nothing
    again: planning over every pod runs once per change of the pods, namespaces, ReplicaSets
    or desired proxy, not once per reconcile."""
    world = World(3, max_restarts_per_pass=1)
    calls = {"plan": 0, "records": 0}
    plan, records = mesh.plan_rollout, mesh.restart_times

    def counted_plan(*args: Any) -> mesh.RolloutPlan:
        calls["plan"] += 1
        return plan(*args)

    def counted_records(*args: Any) -> list[float]:
        calls["records"] += 1
        return records(*args)

    monkeypatch.setattr(mesh, "plan_rollout", counted_plan)
    monkeypatch.setattr(mesh, "restart_times", counted_records)
    first = await roll(world.executor, CONFIG, DESIRED)
    assert first.outdated == 3 and calls == {"plan": 1, "records": 1}
    # The first pass restarted one Deployment: its cache changes (as the informer would put
    # the patched object); the pods do not, so the plan is reused and the record re-read.
    patched = world.deployments.get(world.writer.patched[0])
    assert patched is not None
    annotations = {mesh.RESTARTED_FOR_ANNOTATION: HASH, mesh.RESTARTED_AT_ANNOTATION: ""}
    world.deployments.put(
        {**patched, "spec": {"template": {**patched["spec"]["template"], "metadata": {
            "annotations": annotations}}}}
    )  # fmt: skip
    await roll(world.executor, CONFIG, DESIRED)
    await roll(world.executor, CONFIG, DESIRED)
    assert calls == {"plan": 1, "records": 2}
    world.add("app-new")
    await roll(world.executor, CONFIG, DESIRED)
    assert calls["plan"] == 2
    other = Desired(DESIRED.target, {}, HASH, "Spec", DesiredProxy("edge-20.1.1"))
    await roll(world.executor, CONFIG, other)
    assert calls["plan"] == 3


async def test_the_injector_is_asked_once_per_pass_not_once_per_reconcile() -> None:
    """Three passes: a dry-run for each workload of each pass's batch, asked when the pass
    runs (however many reconciles wake in between), never one for a whole pass."""
    world = World(25, max_restarts_per_pass=10, restart_interval=5.0)
    for _ in range(3):
        await world.roll()
        world.clock.now += 1.0
        await world.roll()  # woken early: no pass, no question
        world.clock.now += 4.0
    assert len(world.writer.patched) == 25
    asked = [pod["metadata"]["name"].split("-linkerd")[0] for _, pod in world.writer.asked]
    assert asked == [p.split("/")[1] for p in world.writer.patched]


async def test_an_injector_gone_mid_rollout_holds_the_next_pass() -> None:
    """The Mesh rule across passes: confirmed for the first pass, down before the second.
    Before, the first answer held for the whole configuration, and the rest of the rollout
    was restarted out of the mesh."""
    world = World(4, max_restarts_per_pass=2, restart_interval=5.0, injector_wait=60.0)
    await world.roll()
    assert len(world.writer.patched) == 2
    world.writer.injects = None  # the injector goes down
    world.clock.now += 5.0
    held = await world.roll()
    assert held.reason == "WaitingForInjector" and len(world.writer.patched) == 2


async def test_a_pass_restarts_its_batch_concurrently_ten_at_a_time() -> None:
    """A batch of 25 is 25 PATCHes; ten in flight at once keeps a pass short, so the
    interval between passes, not the batch's requests, sets the rollout's pace."""
    world = World(25, max_restarts_per_pass=25)
    in_flight, peak = 0, 0
    patch = world.writer.merge_patch

    async def slow_patch(resource: Any, namespace: str, name: str, body: Json) -> Json:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return await patch(resource, namespace, name, body)

    world.writer.merge_patch = slow_patch  # type: ignore[method-assign,assignment]
    outcome = await world.roll()
    assert len(world.writer.patched) == 25 and outcome.restarted_total == 25
    assert peak == RESTART_CONCURRENCY == 10


async def test_a_restart_failing_otherwise_than_refused_stops_the_passes_other_restarts() -> None:
    """A PATCH that times out (or a write the gate refuses) fails the pass; the other
    restarts of its batch used to go on, owned by no one, past the reconcile that had
    failed, and the retried pass could then have twice the writes in flight."""
    world = World(5, max_restarts_per_pass=5)
    patch = world.writer.merge_patch
    ended: list[str] = []

    async def one_times_out(resource: Any, namespace: str, name: str, body: Json) -> Json:
        if name == "app-00":
            await asyncio.sleep(0.01)
            raise TimeoutError("PATCH timed out")
        try:
            await asyncio.sleep(3600)
            return await patch(resource, namespace, name, body)
        finally:
            ended.append(name)

    world.writer.merge_patch = one_times_out  # type: ignore[method-assign,assignment]
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(world.roll(), 10)
    assert sorted(ended) == ["app-01", "app-02", "app-03", "app-04"]  # cancelled, not left
    assert world.writer.patched == []


async def test_while_the_injector_lags_it_is_asked_at_most_every_two_seconds() -> None:
    """Pod events wake reconciles often; the injector's answer changes only once it has read
    its files, so it is not asked again within PROBE_SPACING."""
    world = World(3, injects=OLD, injector_wait=60.0)
    world.executor.found(HASH)
    first = await world.roll()
    again = await world.roll()
    assert len(world.writer.asked) == 3  # one question per workload of the batch, once
    assert again.reason == first.reason == "WaitingForInjector"
    assert again.message == first.message
    assert again.requeue_after == pytest.approx(PROBE_SPACING)
    world.clock.now += PROBE_SPACING
    world.writer.injects = NEW
    done = await world.roll()
    assert len(world.writer.asked) == 6 and done.reason == "RollingOut"


def with_rollout(**section: Any) -> Json:
    return {**CONFIG, "spec": {"rollout": section}}


async def test_a_paused_rollout_restarts_nothing_and_says_what_it_would_restart() -> None:
    world = World(3)
    paused = await roll(world.executor, with_rollout(paused=True), DESIRED)
    assert world.writer.patched == [] and world.writer.asked == []
    assert paused.reason == "Paused" and paused.outdated == 3
    assert "3 workload(s) (3 pod(s)) would be restarted for proxy edge-19.12.3" in paused.message
    resumed = await roll(world.executor, with_rollout(paused=False), DESIRED)
    assert resumed.reason == "RollingOut" and len(world.writer.patched) == 3


async def test_the_spec_sets_the_batch_and_the_interval_over_the_flags() -> None:
    world = World(7, max_restarts_per_pass=10, restart_interval=60.0)
    config = with_rollout(maxRestartsPerPass=3, restartInterval="2s")
    first = await roll(world.executor, config, DESIRED)
    world.record_restarts()
    assert len(world.writer.patched) == 3 and first.requeue_after == 2.0
    world.clock.now += 1.9
    await roll(world.executor, config, DESIRED)
    assert len(world.writer.patched) == 3
    world.clock.now += 0.1
    await roll(world.executor, config, DESIRED)
    assert len(world.writer.patched) == 6


# -- what users read: Events on each workload, one per pass on the LinkerdConfig, reasons -----


async def test_each_restart_is_an_event_on_its_workload_and_each_pass_one_on_the_config() -> None:
    world = World(12, max_restarts_per_pass=12)
    await world.roll()
    on_workloads = [e for e in world.recorder.full if e[0] == "Deployment"]
    assert sorted(e[1] for e in on_workloads) == [f"app-{i:02d}" for i in range(12)]
    assert {(e[2], e[3]) for e in on_workloads} == {("Normal", "WorkloadRestarted")}
    assert "for proxy edge-19.12.3 (LinkerdConfig cfg" in on_workloads[0][4]
    (on_config,) = [e for e in world.recorder.full if e[0] == "LinkerdConfig"]
    assert on_config[2:4] == ("Normal", "WorkloadsRestarted")
    assert on_config[4].startswith("restarted 12 workload(s) for proxy edge-19.12.3: ")
    assert on_config[4].endswith("and 2 more")


async def test_a_refused_restart_names_the_api_servers_reason_everywhere() -> None:
    world = World(2)
    world.writer.forbidden.add("app-00")
    outcome = await world.roll()
    assert world.writer.patched == ["ns/app-01"]
    warnings = [e for e in world.recorder.full if e[2] == "Warning"]
    assert [(e[0], e[1], e[3]) for e in warnings] == [
        ("Deployment", "app-00", "RestartFailed"),
        ("LinkerdConfig", "cfg", "RestartFailed"),
    ]
    assert all("403 Forbidden" in e[4] for e in warnings)
    assert "1 restart(s) refused" in outcome.message and "403 Forbidden" in outcome.message


def refusing(message: str, status: int = 403) -> Any:
    async def refused(_resource: Any, namespace: str, _pod: Json) -> Json:
        raise ApiError(
            status,
            "POST",
            f"/api/v1/namespaces/{namespace}/pods",
            {"reason": "Forbidden", "message": message},
            None,
        )

    return refused


async def test_new_pods_refused_in_their_namespace_fail_the_rollout_at_its_deadline() -> None:
    # Issue 58, the demo: a refusal was a wait without end. Now it is no progress, said with
    # the API server's reason, and a failure once refused for progressDeadline (10m).
    world = World(2, injector_wait=60.0)
    world.writer.dry_run_create = refusing(  # type: ignore[method-assign]
        'pods "x" is forbidden: exceeded quota: q'
    )
    world.executor.found(HASH)
    waiting = await world.roll()
    assert waiting.reason == "WaitingForInjector"
    assert "exceeded quota: q" in waiting.message and "403 Forbidden" in waiting.message
    assert "the rollout fails in 600s" in waiting.message
    world.clock.now += PROBE_SPACING
    await world.roll()
    events = [e for e in world.recorder.full if e[3] == "NewPodsRefused"]
    assert len(events) == 1  # once per cause, not once per question
    world.clock.now += 600.0
    failed = await world.roll()
    assert failed.reason == "RolloutHalted" and world.writer.patched == []
    record = failed.status["rolloutHalt"]
    assert [f.split(":", 1)[0] for f in record["failed"]] == ["deployment/ns/app-00",
                                                             "deployment/ns/app-01"]  # fmt: skip
    assert all("exceeded quota: q" in f for f in record["failed"])
    on_workloads = [e for e in world.recorder.full if e[0] == "Deployment"]
    assert {e[1] for e in on_workloads} == {"app-00", "app-01"}


async def test_a_refusal_that_ends_restarts_its_deadline() -> None:
    world = World(1, injector_wait=60.0)
    refuse = refusing('pods "x" is forbidden: exceeded quota: q')
    admit = world.writer.dry_run_create
    world.writer.dry_run_create = refuse  # type: ignore[method-assign]
    world.executor.found(HASH)
    await world.roll()
    world.clock.now += 400.0
    world.writer.injects = OLD  # admitted again, though not on the new proxy yet
    world.writer.dry_run_create = admit  # type: ignore[method-assign]
    assert (await world.roll()).reason == "WaitingForInjector"
    world.writer.dry_run_create = refuse  # type: ignore[method-assign]
    world.clock.now += 400.0
    again = await world.roll()  # 800 s since the first refusal, 400 since this one
    assert again.reason == "WaitingForInjector" and "fails in 600s" in again.message


async def test_a_probe_the_controller_may_not_make_is_waited_out() -> None:
    world = World(2, injector_wait=60.0)
    world.writer.dry_run_create = refusing(  # type: ignore[method-assign]
        'pods is forbidden: User "system:serviceaccount:linkerd:linkerd-config" cannot create '
        'resource "pods" in API group "" in the namespace "ns"'
    )
    world.executor.found(HASH)
    await world.roll()
    world.clock.now += 60.0
    after = await world.roll()
    assert len(world.writer.patched) == 2 and "cannot create" in after.message


async def test_a_probe_refused_in_the_workloads_namespace_holds_its_restarts() -> None:
    """Admission that refuses the dry-run in the workload's own namespace will refuse its new
    pods: a restart would take it down. Before, the refusal counted as "cannot ask" and the
    restarts went ahead after the fallback wait (issue 37, finding 3)."""
    world = World(2, injector_wait=60.0)
    world.writer.dry_run_create = refusing(  # type: ignore[method-assign]
        'pods "x" is forbidden: violates PodSecurity "restricted:latest"'
    )
    world.executor.found(HASH)
    for _ in range(4):
        held = await world.roll()
        world.clock.now += 60.0
        assert held.reason == "WaitingForInjector" and world.writer.patched == []
    assert "violates PodSecurity" in held.message and "would be refused too" in held.message
    said = [e for e in world.recorder.full if e[3] == "NewPodsRefused"]
    assert len(said) == 1


# -- the health gate: a pass waits for what the last one restarted; failure halts ------------


async def test_a_pass_waits_until_the_workloads_it_restarted_are_healthy() -> None:
    world = World(3, max_restarts_per_pass=1, restart_interval=1.0)
    await roll(world.executor, CONFIG, DESIRED)
    world.record_restarts(NOT_AVAILABLE, proxy=OLD)  # new pods not up yet
    world.clock.now += 30.0  # far past the interval
    held = await roll(world.executor, CONFIG, DESIRED)
    assert world.writer.patched == ["ns/app-00"]
    assert held.reason == "RollingOut" and "deployment/ns/app-00: 0 of 1 updated" in held.message
    world.deployments.put({**world.deployments.get("ns/app-00"), "status": HEALTHY_STATUS})
    held = await roll(world.executor, CONFIG, DESIRED)  # done, but its pod is still the old one
    assert len(world.writer.patched) == 1 and "not on the desired proxy yet" in held.message
    pod = world.pods.get("ns/app-00-pod")
    annotations = {**pod["metadata"]["annotations"], mesh.PROXY_VERSION_ANNOTATION: NEW}
    world.pods.put({**pod, "metadata": {**pod["metadata"], "annotations": annotations}})
    await world.roll()
    assert world.writer.patched == ["ns/app-00", "ns/app-01"]


async def test_a_workload_not_healthy_by_the_deadline_halts_the_rollout_for_good() -> None:
    world = World(3, max_restarts_per_pass=1, restart_interval=1.0)
    config = with_rollout(progressDeadline="30s")
    config["metadata"]["generation"] = 1
    await roll(world.executor, config, DESIRED)
    world.record_restarts(NOT_AVAILABLE, proxy=OLD)
    world.clock.now += 29.0
    assert (await roll(world.executor, config, DESIRED)).reason == "RollingOut"
    world.clock.now += 1.0
    halted = await roll(world.executor, config, DESIRED)
    assert halted.reason == "RolloutHalted" and halted.outdated == 3
    assert "deployment/ns/app-00: not complete 30s after its restart: 0 of 1" in halted.message
    record = halted.status["rolloutHalt"]
    assert record["configHash"] == HASH and record["generation"] == 1
    warnings = [(e[0], e[1], e[3]) for e in world.recorder.full if e[2] == "Warning"]
    assert warnings == [
        ("LinkerdConfig", "cfg", "RolloutHalted"),
        ("Deployment", "app-00", "RolloutHalted"),
    ]
    assert world.executor.metrics.halts._value.get() == 1.0  # type: ignore[attr-defined]
    # Reconciles before the status write is read back: halted still, nothing said again.
    early = await roll(world.executor, config, DESIRED)
    assert early.reason == "RolloutHalted" and early.status["rolloutHalt"] == record
    assert len([e for e in world.recorder.full if e[2] == "Warning"]) == 2
    assert world.executor.metrics.halts._value.get() == 1.0  # type: ignore[attr-defined]
    # Held across reconciles and leaders (read back from status), even once it recovers.
    config = with_status(config, halted)
    world.deployments.put({**world.deployments.get("ns/app-00"), "status": HEALTHY_STATUS})
    world.clock.now += 60.0
    again = await roll(world.executor, config, DESIRED)
    assert again.reason == "RolloutHalted" and world.writer.patched == ["ns/app-00"]
    assert len([e for e in world.recorder.full if e[2] == "Warning"]) == 2  # said once


async def test_a_resume_forgives_the_failed_an_edit_of_spec_rollout_resumes_nothing() -> None:
    world = World(3, max_restarts_per_pass=1, restart_interval=1.0)
    config = with_rollout(progressDeadline="10s")
    config["metadata"] = {"name": "cfg", "generation": 1}
    await roll(world.executor, config, DESIRED)
    world.record_restarts(NOT_AVAILABLE, proxy=OLD)
    world.clock.now += 10.0
    config = with_status(config, await roll(world.executor, config, DESIRED))
    halt = config["status"]["rolloutHalt"]
    # An edit of spec.rollout alone (a new generation, the same configuration): the same
    # attempt, the same halt (issue 58, finding 4), nothing restarted.
    retried = {**with_rollout(progressDeadline="20s", paused=True), "status": config["status"]}
    retried["metadata"] = {"name": "cfg", "generation": 2}
    again = await roll(world.executor, retried, DESIRED)
    assert again.reason == "RolloutHalted" and again.status["rolloutHalt"] == halt
    assert world.writer.patched == ["ns/app-00"]
    retried = {**with_rollout(progressDeadline="20s"), "status": config["status"]}
    retried["metadata"] = {"name": "cfg", "generation": 3}
    # An explicit resume: app-00 forgiven, the rollout goes on.
    annotated = {
        **retried,
        "metadata": {**retried["metadata"], "annotations": {RESUME_ANNOTATION: "1"}},
    }
    resumed = await roll(world.executor, annotated, DESIRED)
    assert resumed.status["rolloutHalt"] is None
    assert resumed.status["rolloutForgiven"] == {
        "configHash": HASH,
        "generation": 3,
        "workloads": ["deployment/ns/app-00"],
    }
    assert world.writer.patched == ["ns/app-00", "ns/app-01"]


FORGIVEN = {"configHash": HASH, "generation": 2, "workloads": ["deployment/ns/app-00"]}


@pytest.mark.parametrize(
    ("generation", "record", "forgiven", "status"),
    [
        (2, FORGIVEN, {"deployment/ns/app-00"}, {}),  # the resume's own attempt
        # spec.rollout edited since (issue 58, finding 4): the same attempt
        (3, FORGIVEN, {"deployment/ns/app-00"}, {}),
        (2, {**FORGIVEN, "configHash": "other"}, set(), {"rolloutForgiven": None}),
        (2, {k: v for k, v in FORGIVEN.items() if k != "generation"},
         {"deployment/ns/app-00"}, {}),  # the generation is no part of the attempt
        (2, None, set(), {}),
    ],
    ids=["same-attempt", "later-generation", "other-hash", "no-generation", "none"],
)  # fmt: skip
def test_a_workload_is_forgiven_only_in_the_attempt_its_resume_ended(
    generation: int, record: Json | None, forgiven: set[str], status: Json
) -> None:
    """Forgiven for the configuration whose halt the resume ended: another configuration
    clears the record (the spec back to this one later forgives nothing), an edit of
    spec.rollout alone (a new generation) keeps it."""
    config = {
        "metadata": {"name": "cfg", "generation": generation},
        "status": {} if record is None else {"rolloutForgiven": record},
    }
    state = halt_state(config, HASH)
    assert state.halted is None
    assert state.forgiven == forgiven
    assert state.status == status


async def test_refused_new_pods_halt_at_once() -> None:
    world = World(2, max_restarts_per_pass=1, restart_interval=1.0)
    await roll(world.executor, CONFIG, DESIRED)
    refused = replica_failure('pods "app-00-x" is forbidden: ValidatingAdmissionPolicy says no')
    world.record_restarts({**NOT_AVAILABLE, "conditions": [refused]}, proxy=OLD)
    world.clock.now += 1.0
    halted = await roll(world.executor, CONFIG, DESIRED)
    assert halted.reason == "RolloutHalted"
    assert 'new pods refused: pods "app-00-x" is forbidden' in halted.message
    assert world.writer.patched == ["ns/app-00"]


async def test_a_paused_or_unhealthy_workload_is_skipped_and_said_so() -> None:
    world = World(3)
    paused = world.deployments.get("ns/app-00")
    world.deployments.put({**paused, "spec": {**paused["spec"], "paused": True}})
    broken = world.deployments.get("ns/app-01")
    world.deployments.put({**broken, "status": NOT_AVAILABLE})
    outcome = await world.roll()
    assert world.writer.patched == ["ns/app-02"]
    assert outcome.outdated == 3  # still on the old proxy: not up to date
    assert "Skipped, not restarted: deployment/ns/app-00: paused (spec.paused)" in outcome.message
    assert "deployment/ns/app-01: still rolling out a change of its own" in outcome.message


async def test_a_replica_failure_of_an_earlier_revision_halts_nothing() -> None:
    """The Halt rule (issue 37, finding 4): the Deployment controller copies an older
    ReplicaSet's ReplicaFailure onto the Deployment until that ReplicaSet is scaled down.
    Before, a new attempt halted on the previous attempt's refusal; now only the newest
    revision's own refusal halts."""
    world = World(2, max_restarts_per_pass=1, restart_interval=1.0)
    await roll(world.executor, CONFIG, DESIRED)
    refused = replica_failure('pods "app-00-old" is forbidden: the previous attempt\'s proxy')
    world.writer.earlier_revision_failed.add("app-00")
    world.record_restarts({**NOT_AVAILABLE, "conditions": [refused]}, proxy=OLD)
    world.clock.now += 1.0
    waiting = await roll(world.executor, CONFIG, DESIRED)
    assert waiting.reason == "RollingOut" and "rolloutHalt" not in waiting.status
    assert "an earlier ReplicaSet's ReplicaFailure still shows" in waiting.message
    world.writer.earlier_revision_failed.clear()  # now the newest revision's own
    halted = await roll(world.executor, CONFIG, DESIRED)
    assert halted.reason == "RolloutHalted" and "the previous attempt" in halted.message


async def test_a_restart_whose_pods_come_back_without_the_proxy_fails_at_once() -> None:
    # Issue 58, findings 1 and 3: the injector said yes to the dry run, but the real creates
    # came back without a proxy (a slow injector past the webhook's timeout, its namespace
    # unlabelled since). That is evidence from this attempt: out of the mesh, failed at once,
    # not counted excluded and done, nor waited for until the deadline.
    world = World(2, max_restarts_per_pass=1, restart_interval=5.0)
    await roll(world.executor, CONFIG, DESIRED)
    world.record_restarts(proxy=None)
    world.clock.now += 5.0
    failed = await world.roll()
    assert failed.reason == "RolloutHalted" and world.writer.patched == ["ns/app-00"]
    (why,) = failed.status["rolloutHalt"]["failed"]
    assert why.startswith("deployment/ns/app-00: out of the mesh: 1 pod(s) its restart made")
    gauge = world.executor.metrics.registry.get_sample_value(
        "linkerd_config_workloads_out_of_mesh", {"linkerdconfig": "cfg"}
    )
    assert gauge == 1
    on_workload = [e for e in world.recorder.full if e[:2] == ("Deployment", "app-00")]
    assert any(e[2] == "Warning" and "out of the mesh" in e[4] for e in on_workload)


async def test_a_pod_without_the_proxy_from_before_the_restart_is_not_its_evidence() -> None:
    # Mid-rollout, a Deployment's unmeshed pod of its old ReplicaSet (created while the
    # injector was down) is not what our restart made: the newest ReplicaSet is asked.
    world = World(1)
    await roll(world.executor, CONFIG, DESIRED)
    world.record_restarts(status={**HEALTHY_STATUS, "updatedReplicas": 0}, proxy=None)
    world.clock.now += 5.0
    outcome = await roll(world.executor, CONFIG, DESIRED)
    assert outcome.reason == "RollingOut", outcome.message  # app-00-rs is not app-00-2


async def test_a_pod_created_unmeshed_after_the_rollout_completed_is_re_meshed_once() -> None:
    # Issue 58, build item 2: the injector was down when a pod of a workload already rolled
    # was created (failurePolicy: Ignore, linkerd2 #5070): it runs without the proxy. Before,
    # the workload was not due again (restarted once for the configuration) and its deadline
    # from that restart halted the completed rollout. Now it is restarted once more, once the
    # injector is seen injecting in its namespace again, and not again after that.
    world = World(2, max_restarts_per_pass=5, restart_interval=5.0)
    config: Json = {"metadata": {"name": "cfg"}, "status": {}}
    await roll(world.executor, config, DESIRED)
    world.record_restarts()
    world.clock.now += 5.0
    done = await roll(world.executor, config, DESIRED)
    assert done.reason == "UpToDate"
    config = with_status(config, done)
    assert world.writer.patched == ["ns/app-00", "ns/app-01"]
    world.clock.now += 600.0
    pod = world.pods.get("ns/app-00-pod")
    assert pod is not None
    unmeshed = {
        **pod["metadata"],
        "annotations": {mesh.INJECT_ANNOTATION: "enabled"},  # no proxy: injector was down
    }
    world.pods.put({**pod, "metadata": unmeshed})
    world.writer.injects = None  # still down: asked in its namespace, not restarted
    held = await roll(world.executor, config, DESIRED)
    assert held.reason == "WaitingForInjector" and len(world.writer.patched) == 2
    world.writer.injects = NEW  # back
    world.clock.now += PROBE_SPACING
    await roll(world.executor, config, DESIRED)
    assert world.writer.patched == ["ns/app-00", "ns/app-01", "ns/app-00"]  # re-meshed
    said = [e[4] for e in world.recorder.full if e[:2] == ("Deployment", "app-00")]
    assert said[-1].startswith("re-meshed for proxy edge-19.12.3")
    world.record_restarts()
    world.clock.now += 5.0
    again = await roll(world.executor, config, DESIRED)
    assert again.reason == "UpToDate"
    config = with_status(config, again)
    world.clock.now += 600.0
    assert (await roll(world.executor, config, DESIRED)).reason == "UpToDate"
    assert len(world.writer.patched) == 3  # once per completion, not on every pass
