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
from linkerd_config.linkerd.rollout import rollback
from linkerd_config.linkerd.rollout.phase import Phase
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.spec.crd import RECORD_ANNOTATION
from linkerd_config.linkerd.status.plan import status
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


def until_rolled_back(world: GuardedWorld, passes: int = 8) -> Json:
    """Passes until the rollback ends (at most ``passes``): what DataPlaneUpToDate says then."""
    for _ in range(passes):
        said = next_pass_said(world)
        if said["reason"] == Phase.ROLLED_BACK:
            return said
    raise AssertionError(f"not rolled back after {passes} passes: {said}")


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
    world.sim.refusing_real.add("app-0")  # the dry run admitted, the pods refused
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
    world.sim.refusing_real.clear()
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
    world.sim.refusing_real.clear()
    said = until_rolled_back(world)
    assert world.in_configmap() == back_to
    restored = {r.workload for r in world.sim.restarts if r.config_hash == back_to}
    restored |= {g.workload for g in world.sim.gone_back}  # or to their previous template
    assert restored == set(NAMES)  # both were restarted onto H: both brought back
    assert world.h.config_hash in str(said["message"])  # the configuration that failed

    world.bystander(BOTH)  # the hold lifts: still rolled back, until a person moves it on
    for _ in range(2):
        said = next_pass_said(world)
        assert said["reason"] == Phase.ROLLED_BACK, said
        assert world.in_configmap() == back_to


def test_an_edit_of_spec_rollout_mid_rollback_keeps_the_configmap_back(
    rollback_world: GuardedWorld,
) -> None:
    """Issue 58, finding 4, through the whole reconcile: ``paused: true`` mid-rollback (a new
    generation, the same configuration) ended the rollback, and the ConfigMap went back to
    the failed configuration. It stays on the one returned to, paused or resumed, and the
    rollback goes on to its end."""
    world = rollback_world
    assert failed_on_the_held_bundle(world)["reason"] == Phase.ROLLING_BACK
    back_to, record = world.o.config_hash, world.halt
    assert next_pass_said(world)["reason"] == Phase.ROLLING_BACK
    assert world.in_configmap() == back_to
    world.injector_reads()
    world.sim.refusing_real.clear()
    sent = len(world.sim.restarts)
    for changes in ({"paused": True}, {"progressDeadline": "2m"}, {"paused": False}):
        world.edit_rollout(**changes)
        said = next_pass_said(world)
        assert said["reason"] in (Phase.ROLLING_BACK, Phase.ROLLED_BACK), (changes, said)
        assert world.halt is not None and world.halt["at"] == record["at"], changes
        assert world.in_configmap() == back_to, changes
    said = until_rolled_back(world)
    assert world.in_configmap() == back_to
    assert {r.config_hash for r in world.sim.restarts[sent:]} <= {back_to}


def test_a_linkerdconfig_made_again_mid_rollback_goes_on_going_back(
    rollback_world: GuardedWorld,
) -> None:
    """Issue 58, finding 6: the LinkerdConfig deleted mid-rollback (a GitOps prune), then made
    again from the same manifest. Its status went with it: before, the ConfigMap went back to
    the failed configuration (nothing recorded a rollback, nor a configuration to return to).
    The managed ConfigMap carries the record while the rollback is in force, and the new
    object's status is given it back before anything is written."""
    world = rollback_world
    assert failed_on_the_held_bundle(world)["reason"] == Phase.ROLLING_BACK
    back_to, record = world.o.config_hash, world.halt
    assert next_pass_said(world)["reason"] == Phase.ROLLING_BACK
    assert world.in_configmap() == back_to
    cm = world.ctl.configmaps.store.get("linkerd/linkerd-config")
    assert RECORD_ANNOTATION in cm["metadata"]["annotations"]  # carried with the rollback
    world.made_again()
    applied = len(world.writer.applied)
    said = world.reconcile()  # the record given back, nothing written
    assert len(world.writer.applied) == applied and world.in_configmap() == back_to
    assert world.halt is not None and world.halt["at"] == record["at"]
    assert [e for e in world.recorder.events if e[1] == "RolloutRecordRestored"]
    world.injector_reads()
    world.sim.refusing_real.clear()
    for _ in range(8):
        said = next_pass_said(world)
        assert world.in_configmap() == back_to, said
        if said["reason"] == Phase.ROLLED_BACK:
            break
    assert said["reason"] == Phase.ROLLED_BACK, said
    assert {r.config_hash for r in world.sim.restarts} <= {world.h.config_hash, back_to}


def test_a_record_of_another_linkerdconfig_or_attempt_is_not_taken(
    rollback_world: GuardedWorld,
) -> None:
    world = rollback_world
    assert failed_on_the_held_bundle(world)["reason"] == Phase.ROLLING_BACK
    next_pass_said(world)
    cm = world.ctl.configmaps.store.get("linkerd/linkerd-config")
    fresh = {"metadata": {"name": "other"}, "status": {}}
    assert rollback.carried_back(cm, fresh, world.a.config_hash) is None  # another's
    mine = {"metadata": {"name": world.config["metadata"]["name"]}, "status": {}}
    assert rollback.carried_back(cm, mine, world.o.config_hash) is None  # another attempt
    assert rollback.carried_back(cm, mine, world.a.config_hash) is not None
    kept = {**mine, "status": {"lastCompleted": world.config["status"]["lastCompleted"]}}
    assert rollback.carried_back(cm, kept, world.a.config_hash) is None  # status has one
