"""A rollout that fails on the bundle the trust-anchor guard holds on to, through the whole
reconcile (``tests/support/guarded_controller.py``): the spec asks for A, whose bundle drops an
anchor a meshed pod still runs, so the controller writes and rolls out H (A with both anchors)
instead, and a workload's restart onto H fails.

The halt is of the attempt the spec asked for (A, its generation, its resume annotation),
whichever configuration was rolled when it failed: it stays until a person resumes it (or
changes the spec), the guard's hold lifting or not; and ``onFailure: Rollback`` goes back to
the last completed configuration. Before, the record was kept under H's hash and looked up
under A's: the rollback was never taken (halted instead, saying status no longer records the
configuration to go back to), and a halt ended when the hold lifted. The guard reads the
trust-root hash only Linkerd's values format stamps (edge-22.9.1 on): the legacy format has no
hold, hence no held configuration, and its halts are covered by ``test_rollback*.py``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.preview import status
from linkerd_config.linkerd.rollout_phase import Phase
from linkerd_config.linkerd.rollout_policy import RolloutOptions
from tests.support.guarded_controller import ASKED, BOTH, ONLY_B, GuardedWorld

NAMES = ["app-0", "app-1"]


def next_pass_said(world: GuardedWorld, seconds: float = 5.0) -> Json:
    """A pass later, as ``a_pass_later``; ``linkerd-config status`` over the same caches and
    stored status first names the phase the controller's pass then leaves (the same step)."""
    world.clock.now += seconds
    world.sim.controllers_act()
    world.sim.sync()
    (report,) = status(world.view(), RolloutOptions(), world.clock.now)
    assert report.problem is None, report.problem
    said = world.reconcile()
    assert report.next_pass is not None and report.next_pass.phase == said["reason"], said
    return said


@pytest.fixture
def halt_world() -> Iterator[GuardedWorld]:
    world = GuardedWorld(NAMES, "Halt")
    yield world
    world.close()


@pytest.fixture
def rollback_world() -> Iterator[GuardedWorld]:
    world = GuardedWorld(NAMES, "Rollback")
    yield world
    world.close()


def failed_on_the_held_bundle(world: GuardedWorld) -> Json:
    """A applied; the guard holds it, H is written and rolled out; app-0's new pods are
    refused: the pass after that fails the rollout. What DataPlaneUpToDate then says."""
    world.apply(ASKED, ONLY_B)
    world.reconcile()
    assert world.in_configmap() == world.h.config_hash  # the bundle held on to
    world.injector_reads()
    world.sim.refusing.add("app-0")
    world.a_pass_later()
    assert {r.config_hash for r in world.sim.restarts} == {world.h.config_hash}
    return world.a_pass_later()


def test_a_halt_on_the_held_bundle_outlives_the_hold(halt_world: GuardedWorld) -> None:
    world = halt_world
    said = failed_on_the_held_bundle(world)
    assert said["reason"] == Phase.HALTED
    assert world.halt is not None
    assert world.a_pass_later()["reason"] == Phase.HALTED
    sent = len(world.sim.restarts)

    world.bystander(BOTH)  # the pod that held the removal restarted onto both anchors
    for _ in range(3):
        said = next_pass_said(world)
        world.injector_reads()
        assert said["reason"] == Phase.HALTED, said
        assert world.halt is not None, "the halt ended with the hold, not by a person"
        assert len(world.sim.restarts) == sent, "a restart after the halt"
    assert world.in_configmap() == world.a.config_hash  # the spec, written once safe

    world.resume("1")  # a person: the failed workload forgiven, the rest rolls on
    world.sim.refusing.clear()
    world.a_pass_later()
    assert world.halt is None
    for _ in range(6):
        world.injector_reads()
        world.a_pass_later()
    onto_a = {r.workload for r in world.sim.restarts[sent:]}
    assert onto_a == set(NAMES)
    assert {r.config_hash for r in world.sim.restarts[sent:]} == {world.a.config_hash}


def test_a_halt_on_the_held_bundle_survives_a_new_leader(halt_world: GuardedWorld) -> None:
    world = halt_world
    assert failed_on_the_held_bundle(world)["reason"] == Phase.HALTED
    world.leader_changes()
    world.bystander(BOTH)
    sent = len(world.sim.restarts)
    for _ in range(3):
        assert world.a_pass_later()["reason"] == Phase.HALTED
        world.injector_reads()
    assert world.halt is not None and len(world.sim.restarts) == sent


def test_a_failed_restart_onto_the_held_bundle_rolls_back(rollback_world: GuardedWorld) -> None:
    """``onFailure: Rollback``: back to O, the last completed configuration (its bundle has
    both anchors too: the guard lets it be written), the workloads restarted onto H brought
    back onto it; what is said names H, the configuration whose rollout failed."""
    world = rollback_world
    said = failed_on_the_held_bundle(world)
    back_to = world.o.config_hash
    assert said["reason"] == Phase.ROLLING_BACK, said
    assert f"rolling back to configuration {back_to}" in str(said["message"])
    halt = world.halt
    assert halt is not None and halt["rollback"]["toHash"] == back_to

    said = next_pass_said(world)
    assert said["reason"] == Phase.ROLLING_BACK, said
    assert "cannot roll back" not in str(said["message"])
    assert world.in_configmap() == back_to  # the ConfigMap went back to O
    world.injector_reads()
    world.sim.refusing.clear()
    for _ in range(8):
        said = next_pass_said(world)
        if said["reason"] == Phase.ROLLED_BACK:
            break
    assert said["reason"] == Phase.ROLLED_BACK, said
    assert world.in_configmap() == back_to
    restored = {r.workload for r in world.sim.restarts if r.config_hash == back_to}
    assert restored == set(NAMES)  # both were restarted onto H: both brought back
    assert world.h.config_hash in str(said["message"])  # the configuration that failed

    world.bystander(BOTH)  # the hold lifts: still rolled back, until a person moves it on
    for _ in range(2):
        said = next_pass_said(world)
        assert said["reason"] == Phase.ROLLED_BACK, said
        assert world.in_configmap() == back_to
