"""``spec.rollout.canary`` one pass at a time, with the rollout executor's fakes (real caches,
a recording writer, a settable clock): the first pass restarts only the canary; the rest wait,
the status saying so, until it has been healthy for ``stableFor`` (a moment not healthy starts
the clock again); then they roll, the passing said once. A canary that fails halts through the
gate; none matching holds everything; a new leader continues from status and the records."""

from __future__ import annotations

from typing import Any

from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.rollout.phase import Phase
from linkerd_config.linkerd.spec.crd import CANARY_FIELD
from tests.support.rollout_worlds import (
    DESIRED,
    HEALTHY_STATUS,
    NOT_AVAILABLE,
    World,
    roll,
    with_status,
)

REFUSED: Json = {
    **NOT_AVAILABLE,
    "conditions": [
        {
            "type": "ReplicaFailure",
            "status": "True",
            "reason": "FailedCreate",
            "message": 'pods "app-01-x" is forbidden: no new proxy here',
        }
    ],
}


def config(**section: Any) -> Json:
    rollout = {"canary": section, "restartInterval": "1s"}
    return {
        "metadata": {"name": "cfg", "generation": 1},
        "spec": {"rollout": rollout},
        "status": {},
    }


def labelled(world: World, name: str, labels: dict[str, str]) -> None:
    obj = world.deployments.get(f"ns/{name}")
    assert obj is not None
    world.deployments.put({**obj, "metadata": {**obj["metadata"], "labels": labels}})


def set_status(world: World, name: str, status: Json) -> None:
    obj = world.deployments.get(f"ns/{name}")
    assert obj is not None
    world.deployments.put({**obj, "status": status})


class Rollout:
    """Passes of one LinkerdConfig, its status written back after each (as the controller
    does) unless told otherwise."""

    def __init__(self, world: World, cfg: Json) -> None:
        self.world, self.config = world, cfg

    async def roll(self, write_status: bool = True) -> Any:
        outcome = await roll(self.world.executor, self.config, DESIRED)
        self.world.record_restarts()
        if write_status:
            self.config = with_status(self.config, outcome)
        return outcome

    @property
    def record(self) -> Json:
        found: Json = self.config["status"].get(CANARY_FIELD) or {}
        return found


async def test_the_canary_first_then_the_rest_once_it_has_been_healthy_for_stable_for() -> None:
    world = World(3, restart_interval=1.0)
    labelled(world, "app-01", {"tier": "canary"})
    run = Rollout(world, config(count=1, selector="tier=canary", stableFor="60s"))

    first = await run.roll()
    assert world.writer.patched == ["ns/app-01"]
    assert first.reason == "RollingOut"
    assert "canary: restarting deployment/ns/app-01 first" in first.message
    assert run.record["workloads"] == ["deployment/ns/app-01"]

    world.clock.now += 2.0  # the canary is back, healthy: its clock starts
    held = await run.roll()
    assert world.writer.patched == ["ns/app-01"]
    assert held.reason == Phase.CANARY
    assert "healthy for 0s of 1m0s" in held.message
    assert held.requeue_after is not None and held.requeue_after <= 5.0
    started = run.record["healthySince"]

    world.clock.now += 30.0
    later = await run.roll()
    assert "healthy for 30s of 1m0s" in later.message and world.writer.patched == ["ns/app-01"]

    set_status(world, "app-01", NOT_AVAILABLE)  # a moment not healthy ...
    world.clock.now += 1.0
    unhealthy = await run.roll()
    assert unhealthy.reason == Phase.CANARY
    assert "not healthy" in unhealthy.message and "healthySince" not in run.record
    set_status(world, "app-01", HEALTHY_STATUS)  # ... its clock starts again
    world.clock.now += 1.0
    again = await run.roll()
    assert "healthy for 0s of 1m0s" in again.message
    assert run.record["healthySince"] > started

    world.clock.now += 59.0
    still = await run.roll()
    assert still.reason == Phase.CANARY and world.writer.patched == ["ns/app-01"]
    world.clock.now += 1.0
    rolled = await run.roll()
    assert world.writer.patched == ["ns/app-01", "ns/app-00", "ns/app-02"]
    assert rolled.reason == "RollingOut" and "canary passed" in rolled.message
    assert run.record.get("passedAt")
    passed = [e for e in world.recorder.full if e[3] == "CanaryPassed"]
    assert len(passed) == 1 and "deployment/ns/app-01" in passed[0][4]

    world.clock.now += 2.0
    done = await run.roll()
    assert done.reason == "UpToDate"
    assert len([e for e in world.recorder.full if e[3] == "CanaryPassed"]) == 1


async def test_a_pass_not_read_back_yet_is_not_taken_for_a_larger_canary() -> None:
    """After the canary passed, the rest restarted and not healthy yet, a reconcile that still
    reads the old status (the informer lags its write) neither holds nor forgets the pass."""
    world = World(3, restart_interval=1.0)
    run = Rollout(world, config(count=1, stableFor="10s"))
    await run.roll()
    world.clock.now += 2.0
    await run.roll()
    world.clock.now += 10.0
    before = run.config
    await run.roll()
    assert world.writer.patched == ["ns/app-00", "ns/app-01", "ns/app-02"]
    set_status(world, "app-01", NOT_AVAILABLE)
    set_status(world, "app-02", NOT_AVAILABLE)
    run.config = before  # status without the pass
    world.clock.now += 1.0
    lagging = await run.roll(write_status=False)
    assert lagging.reason == "RollingOut" and "canary" not in lagging.message
    assert lagging.status[CANARY_FIELD].get("passedAt")


async def test_a_failing_canary_halts_the_rollout_and_the_rest_never_restart() -> None:
    world = World(3, restart_interval=1.0)
    labelled(world, "app-01", {"tier": "canary"})
    run = Rollout(world, config(selector="tier=canary", stableFor="60s"))
    await run.roll()
    set_status(world, "app-01", REFUSED)
    world.clock.now += 2.0
    halted = await run.roll()
    assert halted.reason == "RolloutHalted" and "no new proxy here" in halted.message
    world.clock.now += 120.0
    await run.roll()
    assert world.writer.patched == ["ns/app-01"]


async def test_when_nothing_matches_nothing_restarts_and_status_says_why() -> None:
    world = World(2, restart_interval=1.0)
    run = Rollout(world, config(namespaceSelector="kubernetes.io/metadata.name=elsewhere"))
    held = await run.roll()
    assert world.writer.patched == []
    assert held.reason == Phase.CANARY_UNMATCHED
    assert "no workload to restart matches namespaceSelector" in held.message
    assert run.record["workloads"] == []
    # The namespace named: the canary is chosen there.
    run.config["spec"]["rollout"]["canary"]["namespaceSelector"] = "kubernetes.io/metadata.name=ns"
    world.clock.now += 2.0
    await run.roll()
    assert world.writer.patched == ["ns/app-00"]


async def test_a_new_leader_continues_the_canarys_clock_from_status() -> None:
    world = World(2, restart_interval=1.0)
    run = Rollout(world, config(stableFor="60s"))
    await run.roll()
    world.clock.now += 2.0
    await run.roll()
    world.clock.now += 45.0
    fresh = type(world.executor)(  # another process: the same caches, a memory of its own
        world.writer,  # type: ignore[arg-type]
        world.recorder,  # type: ignore[arg-type]
        world.executor.options,
        pods=world.pods,
        namespaces=world.executor.namespaces,
        replicasets=world.replicasets,
        workloads=world.executor.workloads,
        wall=world.clock,
        monotonic=world.clock,
    )
    outcome = await roll(fresh, run.config, DESIRED)
    assert "healthy for 45s of 1m0s" in outcome.message and world.writer.patched == ["ns/app-00"]
    world.clock.now += 15.0
    await roll(fresh, with_status(run.config, outcome), DESIRED)
    assert world.writer.patched == ["ns/app-00", "ns/app-01"]


async def test_without_a_canary_nothing_changes_and_an_old_record_is_removed() -> None:
    world = World(2, restart_interval=1.0)
    cfg = config()
    cfg["spec"]["rollout"].pop("canary")
    cfg["status"] = {CANARY_FIELD: {"configHash": "h0", "workloads": []}}
    outcome = await roll(world.executor, cfg, DESIRED)
    assert world.writer.patched == ["ns/app-00", "ns/app-01"]
    assert outcome.status[CANARY_FIELD] is None and "canary" not in outcome.message


async def test_a_clock_not_read_back_yet_is_not_started_again() -> None:
    """Two passes on the same cached object (the informer has not delivered the first one's
    status write): the second reads the clock the first started, not a new one milliseconds
    later, which would overwrite it and restart the canary's stable time (seen in CI as two
    healthySince 11 ms apart). Once the write is read back, status is the record."""
    world = World(3, restart_interval=1.0)
    cfg = config(count=1, stableFor="60s")
    cfg["metadata"]["resourceVersion"] = "1"
    run = Rollout(world, cfg)
    await run.roll()
    world.clock.now += 2.0
    cached = {**run.config, "metadata": {**run.config["metadata"], "resourceVersion": "2"}}
    run.config = cached
    started = await run.roll(write_status=False)  # the canary healthy: its clock starts
    clock = started.status[CANARY_FIELD]["healthySince"]
    world.clock.now += 0.011
    again = await run.roll(write_status=False)  # the same cached object, rv 2
    assert again.status[CANARY_FIELD]["healthySince"] == clock
    world.clock.now += 5.0
    read_back = with_status(cached, again)
    read_back["metadata"] = {**read_back["metadata"], "resourceVersion": "3"}
    run.config = read_back
    later = await run.roll()
    assert later.status[CANARY_FIELD]["healthySince"] == clock
    assert "healthy for 5s of 1m0s" in later.message
