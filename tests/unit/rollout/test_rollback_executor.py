"""``onFailure: Rollback`` one reconcile at a time, with the rollout executor's fakes (real
caches, a recording writer, a settable clock): the failed rollout starts a rollback, the
restarted Deployment goes back to its previous ReplicaSet's template once the injector
injects the old proxy again, the rollback ends when it is healthy, and a new leader neither
repeats a restore nor loses the rollback."""

from __future__ import annotations

from linkerd_config.kube.resource import Json, rfc3339
from linkerd_config.linkerd.mesh import RESTORED_AT_ANNOTATION
from linkerd_config.linkerd.rollout import rollback
from linkerd_config.linkerd.rollout.executor import RolloutExecutor
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.rollout.record import RESUME_ANNOTATION
from linkerd_config.linkerd.spec.crd import HALT_FIELD
from tests.support.rollback_worlds import (
    OLD_DESIRED,
    OLD_HASH,
    RollbackWorld,
    failed_first_pass,
    rollback_config,
)
from tests.support.rollout_worlds import (
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


async def test_a_failed_rollout_rolls_back_the_workload_it_restarted_and_nothing_else() -> None:
    world = RollbackWorld(3)
    config = rollback_config()
    started = await failed_first_pass(world, config)
    assert started.reason == "RollingBack"
    assert "rolling back to configuration h0" in started.message
    assert 'new pods refused: pods "app-00-x" is forbidden' in started.message
    record = started.status[HALT_FIELD]
    assert record["rollback"] == {
        "toHash": OLD_HASH,
        "toGeneration": 1,
        "phase": "RollingBack",
        "workloads": ["deployment/ns/app-00"],
    }
    warnings = [(e[0], e[1], e[3]) for e in world.recorder.full if e[2] == "Warning"]
    assert warnings == [
        ("LinkerdConfig", "cfg", "RollingBack"),
        ("Deployment", "app-00", "RollingBack"),
    ]
    assert world.executor.metrics.rollbacks._value.get() == 1.0  # type: ignore[attr-defined]
    assert world.writer.patched == ["ns/app-00"]

    # The ConfigMap holds the old configuration now; the injector still injects the new one.
    config = with_status(config, started)
    world.executor.found(OLD_HASH)
    waiting = await roll(world.executor, config, DESIRED, OLD_DESIRED)
    assert waiting.reason == "RollingBack" and "does not inject it yet" in waiting.message
    assert world.writer.patched == ["ns/app-00"]  # nothing restored before it does

    world.writer.injects = OLD
    world.clock.now += 5.0
    restoring = await roll(world.executor, config, DESIRED, OLD_DESIRED)
    assert restoring.reason == "RollingBack" and "brought 1 of 1" in restoring.message
    assert world.writer.patched == ["ns/app-00", "ns/app-00"]
    _, patch = world.writer.patches[0]
    assert patch["metadata"] == {
        "resourceVersion": "1",
        "annotations": {RESTORED_AT_ANNOTATION: rfc3339(world.clock.now, micro=True)},
    }  # the template as it was; when, on the Deployment's own metadata
    # The template had no annotations before its restart: they go, the record with them.
    assert patch["spec"]["template"] == {"metadata": {"annotations": None}}
    assert world.restored() == ["ns/app-00"]
    template = world.deployments.get("ns/app-00")["spec"]["template"]
    assert template == world.live_replicasets["app-00"][0]["spec"]["template"]
    assert ("Deployment", "app-00", "Normal", "WorkloadRolledBack") in [
        e[:4] for e in world.recorder.full
    ]

    done = await roll(world.executor, config, DESIRED, OLD_DESIRED)
    assert done.reason == "RolledBack"
    assert "rolled back to configuration h0 (proxy edge-19.12.1)" in done.message
    assert done.status[HALT_FIELD]["rollback"]["phase"] == "RolledBack"
    config = with_status(config, done)
    world.clock.now += 600.0
    after = await roll(world.executor, config, DESIRED, OLD_DESIRED)
    assert after.reason == "RolledBack" and world.writer.patched == ["ns/app-00", "ns/app-00"]
    assert [e[3] for e in world.recorder.full].count("RolledBack") == 1  # said once


async def test_a_new_leader_continues_a_rollback_without_restoring_twice() -> None:
    world = RollbackWorld(2)
    config = rollback_config()
    config = with_status(config, await failed_first_pass(world, config))
    world.writer.injects = OLD

    def new_leader() -> RolloutExecutor:
        return RolloutExecutor(
            world.writer,  # type: ignore[arg-type]
            world.recorder,  # type: ignore[arg-type]
            RolloutOptions(restart_interval=1.0),
            pods=world.pods,
            namespaces=world.executor.namespaces,
            replicasets=world.replicasets,
            workloads=world.executor.workloads,
            wall=world.clock,
            monotonic=world.clock,
        )

    first = new_leader()
    first.found(OLD_HASH)
    outcome = await roll(first, config, DESIRED, OLD_DESIRED)
    assert "brought 1 of 1" in outcome.message
    world.restored()
    # Killed before writing status: the next leader reads the RollingBack record and the
    # cluster, finds app-00 back already, and only waits for it.
    second = new_leader()
    second.found(OLD_HASH)
    outcome = await roll(second, config, DESIRED, OLD_DESIRED)
    assert outcome.reason == "RolledBack"
    assert world.writer.patched == ["ns/app-00", "ns/app-00"]  # one restart, one restore


async def test_without_a_completed_configuration_it_halts_and_says_why() -> None:
    world = RollbackWorld(2)
    halted = await failed_first_pass(world, rollback_config(last_completed=False))
    assert halted.reason == "RolloutHalted"
    assert "no earlier configuration of this LinkerdConfig completed its rollout" in (
        halted.message
    )
    assert "rollback" not in halted.status[HALT_FIELD]


async def test_a_rollback_that_does_not_come_back_healthy_says_so_and_waits() -> None:
    world = RollbackWorld(2)
    config = rollback_config()
    config = with_status(config, await failed_first_pass(world, config))
    world.writer.injects = OLD
    world.executor.found(OLD_HASH)
    await roll(world.executor, config, DESIRED, OLD_DESIRED)
    world.restored()
    world.deployments.put({**world.deployments.get("ns/app-00"), "status": NOT_AVAILABLE})
    world.clock.now += 20.0  # within the deadline: waiting
    waiting = await roll(world.executor, config, DESIRED, OLD_DESIRED)
    assert waiting.reason == "RollingBack" and "not healthy on it yet" in waiting.message
    world.clock.now += 40.0  # past it: said, once, and still in force
    for _ in range(3):
        stuck = await roll(world.executor, config, DESIRED, OLD_DESIRED)
        assert stuck.reason == "RollbackNotHealthy"
        assert "deployment/ns/app-00: not complete 30s after its restart" in stuck.message
        assert stuck.status[HALT_FIELD]["rollback"]["phase"] == "RollingBack"
    said = [e for e in world.recorder.full if e[3] == "RollbackNotHealthy"]
    assert len(said) == 1 and said[0][2] == "Warning"
    # Once it comes back, the rollback ends as any other.
    world.deployments.put({**world.deployments.get("ns/app-00"), "status": HEALTHY_STATUS})
    assert (await roll(world.executor, config, DESIRED, OLD_DESIRED)).reason == "RolledBack"


async def test_a_restore_counts_its_deadline_from_that_restore() -> None:
    """Issue 58, finding 7: the injector took 40 s to inject the old proxy again; the
    Deployment brought back then (its previous ReplicaSet's template) was not available 1 s
    later, and its deadline (30 s) counted from the rollback's start had passed: a false
    ``RollbackNotHealthy`` Warning, which alerts fire on. Counted from its restore, it is
    waiting; a new leader reads the restore's time from the Deployment."""
    world = RollbackWorld(2)
    config = rollback_config()
    config = with_status(config, await failed_first_pass(world, config))
    world.executor.found(OLD_HASH)
    held = await roll(world.executor, config, DESIRED, OLD_DESIRED)
    assert held.reason == "RollingBack" and "does not inject it yet" in held.message
    world.clock.now += 40.0  # then the injector reads the old configuration
    world.writer.injects = OLD
    restoring = await roll(world.executor, config, DESIRED, OLD_DESIRED)
    assert "brought 1 of 1" in restoring.message
    ((_, patch),) = world.writer.patches
    assert patch["metadata"]["annotations"] == {
        RESTORED_AT_ANNOTATION: rfc3339(world.clock.now, micro=True)
    }
    world.restored()
    world.deployments.put({**world.deployments.get("ns/app-00"), "status": NOT_AVAILABLE})
    world.clock.now += 1.0
    world.executor.new_term()  # a new leader: the time is the Deployment's
    waiting = await roll(world.executor, config, DESIRED, OLD_DESIRED)
    assert waiting.reason == "RollingBack", waiting.message
    assert "not healthy on it yet" in waiting.message
    assert "RollbackNotHealthy" not in [e[3] for e in world.recorder.full]
    world.clock.now += 29.0  # 30 s after its restore: past its deadline now
    stuck = await roll(world.executor, config, DESIRED, OLD_DESIRED)
    assert stuck.reason == "RollbackNotHealthy", stuck.message


async def test_a_resume_ends_the_rollback() -> None:
    world = RollbackWorld(2)
    config = rollback_config()
    config = with_status(config, await failed_first_pass(world, config))
    resumed = {
        **config,
        "metadata": {**config["metadata"], "annotations": {RESUME_ANNOTATION: "1"}},
    }
    assert (
        rollback.config_to_render(resumed, world.executor.halt_state(resumed, HASH).halted) is None
    )
    # The spec's configuration is the target again: the next restart is for it.
    outcome = await roll(world.executor, resumed, DESIRED, DESIRED)
    assert outcome.status[HALT_FIELD] is None and NEW in outcome.message


async def test_an_edit_of_spec_rollout_alone_keeps_the_rollback() -> None:
    """Issue 58, finding 4: ``paused: true`` mid-rollback (or a new pace or deadline: a new
    generation, the same configuration) was read as a new attempt: ``rolloutHalt`` went to
    null, and the ConfigMap back to the failed proxy 0.6 s later. The rollback stays in
    force, the ConfigMap on the configuration it returned to, and a new leader reads it so."""
    world = RollbackWorld(2)
    config = rollback_config()
    config = with_status(config, await failed_first_pass(world, config))
    record = config["status"][HALT_FIELD]
    rollout = {**config["spec"]["rollout"], "paused": True, "progressDeadline": "1m"}
    edited = {
        **config,
        "metadata": {**config["metadata"], "generation": config["metadata"]["generation"] + 1},
        "spec": {**config["spec"], "rollout": rollout},
    }
    world.executor.new_term()  # a new leader too: status is the record
    halt = world.executor.halt_state(edited, HASH)
    assert halt.halted is not None and halt.halted.to_json() == record
    back = rollback.config_to_render(edited, halt.halted)  # what the ConfigMap holds
    assert back is not None and back["spec"]["proxy"]["proxyVersion"] == OLD
    outcome = await roll(world.executor, edited, DESIRED, OLD_DESIRED)
    assert outcome.reason == "RollingBack", outcome.message
    assert outcome.status[HALT_FIELD] == record
    assert world.writer.patched == ["ns/app-00"]  # nothing restarted onto the failed one


async def test_an_owner_the_record_does_not_list_still_goes_back() -> None:
    """The record's list is bounded; the restart records on the workloads are the truth."""
    world = RollbackWorld(2)
    config = rollback_config()
    started = await failed_first_pass(world, config)
    record = started.status[HALT_FIELD]
    unlisted = {**record, "rollback": {**record["rollback"], "workloads": []}}
    config = with_status(config, started)
    config["status"][HALT_FIELD] = unlisted
    world.executor._progress.clear()  # a new leader: only status and the cluster
    world.executor.found(OLD_HASH)
    world.writer.injects = OLD
    outcome = await roll(world.executor, config, DESIRED, OLD_DESIRED)
    assert "brought 1 of 1" in outcome.message
    assert world.restored() == ["ns/app-00"]


async def test_a_rollout_done_but_for_skipped_workloads_is_what_a_rollback_returns_to() -> None:
    """A paused workload never restarts, so the rollout never reaches UpToDate; everything it
    could restart being done and healthy, its configuration is still the last completed."""
    world = World(2, restart_interval=1.0)
    paused = world.deployments.get("ns/app-00")
    world.deployments.put({**paused, "spec": {**paused["spec"], "paused": True}})
    config: Json = {"metadata": {"name": "cfg", "generation": 4}, "status": {}}
    first = await roll(world.executor, config, DESIRED)
    assert world.writer.patched == ["ns/app-01"] and "lastCompleted" not in first.status
    world.record_restarts()  # app-01 back, healthy, on the new proxy
    world.clock.now += 5.0
    after = await roll(world.executor, config, DESIRED)
    assert after.reason == "RollingOut" and "paused (spec.paused)" in after.message
    assert after.status["lastCompleted"]["configHash"] == HASH


async def test_a_halt_stops_the_revision_its_restart_made() -> None:
    # Issue 58, finding 2: after a halt, the refused ReplicaSet our restart made kept trying,
    # and when the injector went down its pods were admitted without a proxy. Now the halt
    # undoes the Deployment to its previous ReplicaSet's template: that revision makes no
    # more pods. A new leader's first pass of the halt does it too (the record and the
    # workload's template are the state), and a workload no longer ours is left alone.
    world = RollbackWorld(2)
    config = {**rollback_config(last_completed=False)}
    config["spec"] = {"rollout": {"onFailure": "Halt", "maxRestartsPerPass": 1}}
    halted = await failed_first_pass(world, config)
    assert halted.reason == "RolloutHalted"
    assert world.writer.patched == ["ns/app-00", "ns/app-00"]  # restarted, then undone
    _, undo = world.writer.patches[0]
    assert undo["metadata"]["resourceVersion"] == "1"
    assert undo["spec"]["template"] == {"metadata": {"annotations": None}}
    assert world.restored() == ["ns/app-00"]
    said = [e for e in world.recorder.full if e[3] == "HaltedRevisionUndone"]
    assert [(e[0], e[1], e[2]) for e in said] == [("Deployment", "app-00", "Warning")]
    config = with_status(config, halted)
    again = await roll(world.executor, config, DESIRED, DESIRED)
    assert again.reason == "RolloutHalted"
    assert world.writer.patched == ["ns/app-00", "ns/app-00"]  # not ours any more: left
