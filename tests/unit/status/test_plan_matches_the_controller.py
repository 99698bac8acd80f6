"""``plan`` and the controller make the same passes from the same cluster and record: the
passes ``plan`` lists (its batches, the canary's first) are the restarts the rollout executor
sends, pass by pass, when nothing else changes meanwhile. The cluster is the simulated one of
the property tests (``tests/support/rollout_sim.py``); ``plan`` reads it as the CLI's caches
would."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.configmap.desired import current_data, desired_config
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.spec.conversion import to_hub
from linkerd_config.linkerd.spec.crd import target_of
from linkerd_config.linkerd.status.plan import plan, status
from tests.support.clock import FakeClock
from tests.support.rollout_sim import SimCluster, executor_on, merged_status, view_of
from tests.support.rollout_worlds import roll
from tests.support.samples import install_configmap, sample

OLD, NEW = "edge-19.12.1", "edge-19.12.3"
NAMES = [f"app-{i}" for i in range(7)]
CANARY = {"count": 2, "selector": "app in (app-3,app-5)", "stableFor": "10s"}
DEFAULTS = RolloutOptions(max_restarts_per_pass=10, restart_interval=5.0)


def linkerdconfig(rollout: Json) -> Json:
    config = sample("edge_19.12.3.yaml")
    config["spec"]["rollout"] = rollout
    return config


def planned_passes(config: Json, sim: SimCluster) -> list[set[str]]:
    found = plan(config, view_of(sim, [], install_configmap()), DEFAULTS)
    assert found.problem is None, found.problem
    passes: dict[int, set[str]] = {}
    for line in found.restarts:
        passes.setdefault(line.batch, set()).add(line.workload.name)
    return [passes[n] for n in sorted(passes)]


def controller_passes(config: Json, sim: SimCluster, clock: FakeClock) -> list[set[str]]:
    hub = to_hub(config)
    cm = install_configmap()
    desired = desired_config(hub, current_data({cm["metadata"]["name"]: cm}, target_of(hub)))
    options = RolloutOptions(max_restarts_per_pass=DEFAULTS.max_restarts_per_pass)
    executor = executor_on(sim, clock, options)
    status: Json = {}
    passes: list[set[str]] = []
    loop = asyncio.new_event_loop()
    try:
        for version in range(1, 200):
            before = len(sim.restarts)
            meta = {**hub["metadata"], "generation": 1, "resourceVersion": str(version)}
            stored = {**hub, "metadata": meta, "status": status}
            executor.found(desired.config_hash)
            outcome: Any = loop.run_until_complete(roll(executor, stored, desired))
            status = merged_status(status, outcome.status)
            sent = {r.workload for r in sim.restarts[before:]}
            if sent:
                passes.append(sent)
            if outcome.reason == "UpToDate":
                return passes
            clock.now += 1.0
            sim.controllers_act()
            sim.sync()
    finally:
        loop.close()
    raise AssertionError(f"the rollout did not complete: {passes}")


ROLLOUTS = {
    "two-a-pass": {"maxRestartsPerPass": 2, "restartInterval": "5s"},
    "three-a-pass": {"maxRestartsPerPass": 3, "restartInterval": "1m"},
    "canary-first": {"maxRestartsPerPass": 2, "canary": CANARY},
    "one-pass": {"maxRestartsPerPass": 10},
}


@pytest.mark.parametrize("rollout", list(ROLLOUTS.values()), ids=list(ROLLOUTS))
def test_plan_lists_the_passes_the_controller_makes(rollout: Json) -> None:
    clock = FakeClock(1_700_000_000.0)
    sim = SimCluster(NAMES, clock, old=OLD)
    sim.injector_version = NEW
    config = linkerdconfig(rollout)
    planned = planned_passes(config, sim)
    assert sum(map(len, planned)) == len(NAMES)
    assert controller_passes(config, sim, clock) == planned


WITH_PAUSED = {**ROLLOUTS, "paused": {"maxRestartsPerPass": 2, "paused": True}}


@pytest.mark.parametrize("rollout", list(WITH_PAUSED.values()), ids=list(WITH_PAUSED))
def test_status_says_what_each_pass_of_the_controller_does(rollout: Json) -> None:
    """Before every pass, ``linkerd-config status`` (over the same caches and the stored
    status) names the phase the controller's pass then leaves the rollout in and the
    workloads it restarts: both are the same ``step``."""
    clock = FakeClock(1_700_000_000.0)
    sim = SimCluster(NAMES, clock, old=OLD)
    sim.injector_version = NEW
    hub = to_hub(linkerdconfig(rollout))
    cm = install_configmap()
    desired = desired_config(hub, current_data({cm["metadata"]["name"]: cm}, target_of(hub)))
    executor = executor_on(sim, clock, DEFAULTS)
    status_now: Json = {}
    seen: list[str] = []
    loop = asyncio.new_event_loop()
    try:
        for version in range(1, 200):
            meta = {**hub["metadata"], "generation": 1, "resourceVersion": str(version)}
            stored = {**hub, "metadata": meta, "status": status_now}
            (report,) = status(view_of(sim, [stored], install_configmap()), DEFAULTS, clock.now)
            said = report.next_pass
            assert said is not None, report.problem
            before = len(sim.restarts)
            executor.found(desired.config_hash)
            outcome: Any = loop.run_until_complete(roll(executor, stored, desired))
            sent = sorted(r.workload for r in sim.restarts[before:])
            assert (said.phase, sorted(w.name for w in said.restarts)) == (outcome.reason, sent)
            if not sent:  # (a pass that restarts says so once they are sent)
                assert said.message == outcome.message
            seen.append(said.phase)
            status_now = merged_status(status_now, outcome.status)
            if outcome.reason in ("UpToDate", "Paused"):
                break
            clock.now += 1.0
            sim.controllers_act()
            sim.sync()
    finally:
        loop.close()
    expected_last = "Paused" if rollout.get("paused") else "UpToDate"
    assert seen[-1] == expected_last
    if "canary" in rollout:
        assert "Canary" in seen
