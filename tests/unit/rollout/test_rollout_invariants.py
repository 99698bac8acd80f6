"""The rollout's safety rules as invariants, checked by a stateful property test: hypothesis
drives the rollout executor against a simulated cluster (``tests/support/rollout_sim.py``)
and injects faults at any point between passes: leader changes (a new executor from status
alone), caches that lag, conflicts and API errors, Linkerd's injector down or still on the old
proxy, admission refusing a workload's new pods (its dry run too, or only the real creates
our restart makes), an earlier revision's ReplicaFailure lingering, edits of ``spec.rollout``
alone (``paused`` toggled: a new generation, the same configuration), Deployments paused,
resumed and scaled (to zero included) by someone else at any point of their restart.

* **Mesh**: no restart is sent unless the injector was just seen injecting the desired proxy
  (a restart while it is down brings the workload back without a proxy).
  So is a halt's going back that makes pods (the previous revision has fewer than the
  Deployment's replicas): sent while the injector is down, the pods come without a proxy.
* **Once**: each workload is restarted at most once per configuration, across leaders.
* **Halt**: no restart for an attempt (its configuration: an edit of ``spec.rollout`` alone
  is the same attempt) after its halt, and the halt stays in status until a new
  configuration (issue 58, finding 4: ``paused: true`` ended a halt and a rollback); a halt
  only on this attempt's evidence: the newest revision's own refusal, or a deadline passed
  since our restart.
* **Trust**: while the trust-anchor guard holds a removal, no restart is sent onto any
  configuration but the one that keeps every anchor in use (none, when there is none).
* **Progress**: once the faults are gone (the hold lifted too), the rollout completes by
  itself (no deadlock), or a halt says what failed.

The guard's own decision (which bundle may be written, whatever it learns of the current one)
has its own property test (``test_trust_anchor_guard_properties.py``); here the rollout is
given its hold at any point, on this configuration, on another, or with no bundle at all.
``GuardedRolloutMachine`` runs the controller's whole reconcile instead, where the guard
decides the hold and the controller rolls out the bundle held on to in place of what the spec
asks for: a halt on that bundle lasts until a person resumes it, the hold lifting or not, and
``onFailure: Rollback`` rolls back from it.

CI runs a bounded, derandomized search (``make test``); ``make property`` runs a longer one
(``ROLLOUT_PROPERTY_EXAMPLES``).
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.configmap.desired import Desired
from linkerd_config.linkerd.mesh import TRUST_ROOT_ANNOTATION, DesiredProxy
from linkerd_config.linkerd.rollout import rollback
from linkerd_config.linkerd.rollout.executor import RolloutExecutor
from linkerd_config.linkerd.rollout.observe import AnchorHold
from linkerd_config.linkerd.rollout.phase import Phase
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.rollout.record import RESUME_ANNOTATION
from linkerd_config.linkerd.spec.crd import HALT_FIELD, Target
from tests.support.clock import FakeClock
from tests.support.guarded_controller import ASKED, BOTH, ONLY_B, GuardedWorld, X, root_hash
from tests.support.rollout_sim import NEW, SimCluster, executor_on, halted, merged_status
from tests.support.rollout_worlds import roll

NAMES = ["app-0", "app-1", "app-2", "app-3"]


def desired(k: int) -> Desired:
    """The ``k``-th configuration applied: its own hash and proxy version (the first is
    ``NEW``)."""
    version = NEW if k == 0 else f"edge-{k + 2}"
    return Desired(Target("linkerd", "linkerd-config"), {}, f"h{k}", "Spec", DesiredProxy(version))


DEADLINE, INTERVAL = 60.0, 5.0
ROLLOUT: Json = {"maxRestartsPerPass": 2, "restartInterval": "5s", "progressDeadline": "60s"}
EXAMPLES = int(os.environ.get("ROLLOUT_PROPERTY_EXAMPLES", "400"))


class RolloutMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock(1_700_000_000.0)
        self.sim = SimCluster(NAMES, self.clock)
        self.generation = 1
        self.version = 1
        self.paused = False
        """``spec.rollout.paused``."""
        self.k = 0
        self.status: Json = {}
        self.anchors: AnchorHold | None = None
        """The trust-anchor guard's hold, when it holds a removal."""
        self.halted_at: dict[str, Json] = {}
        """Configuration hash -> its halt's record, as first seen."""
        self.executor = self._leader()

    def _leader(self) -> RolloutExecutor:
        return executor_on(self.sim, self.clock, RolloutOptions(injector_wait=30.0))

    def config(self) -> Json:
        return {
            "metadata": {
                "name": "cfg",
                "generation": self.generation,
                "resourceVersion": str(self.version),
            },
            "spec": {"rollout": {**ROLLOUT, "paused": self.paused}},
            "status": self.status,
        }

    def teardown(self) -> None:
        self.loop.close()

    # -- the controller -----------------------------------------------------------------------

    @property
    def desired(self) -> Desired:
        return desired(self.k)

    def _reconcile(self) -> Json:
        config_hash = self.desired.config_hash
        before = len(self.sim.restarts)
        self.executor.found(config_hash)
        outcome = self.loop.run_until_complete(
            roll(self.executor, self.config(), self.desired, anchors=self.anchors)
        )
        if self.anchors is not None:
            onto = {r.config_hash for r in self.sim.restarts[before:]}
            assert onto <= {self.anchors.holding_hash}, f"Trust: restarted onto {onto} while held"
        new = merged_status(self.status, outcome.status)
        if new != self.status:
            self.status, self.version = new, self.version + 1
        event(f"restarts sent: {min(len(self.sim.restarts), 8)}")
        if config_hash in self.halted_at:
            assert len(self.sim.restarts) == before, "Halt: a restart after the halt"
            # The same record: neither ended nor replaced by a halt of a "new" attempt.
            kept = self.status.get(HALT_FIELD)
            assert kept == self.halted_at[config_hash], f"Halt: ended, not by a person: {kept}"
        elif halted(self.status, config_hash):
            self.halted_at[config_hash] = self.status[HALT_FIELD]
            self._check_evidence(self.status[HALT_FIELD])
        return outcome.__dict__

    def _check_evidence(self, record: Json) -> None:
        """Halt: each failed workload failed in this attempt (the newest revision's own
        refusal, or its pods without the proxy), or missed its deadline after our restart;
        or, never restarted, admission refused its dry-run pod for the deadline and more."""
        for line in record.get("failed") or ():
            name = str(line).split(":", 1)[0].rsplit("/", 1)[-1]
            w = self.sim.workloads[name]
            mine = [
                r
                for r in self.sim.restarts
                if r.workload == name and r.config_hash == self.desired.config_hash
            ]
            if not mine:
                asked = [at for n, at in self.sim.refused_asks if n == name]
                assert asked, f"Halt: {name} failed but was never restarted nor refused"
                assert self.clock() - min(asked) >= DEADLINE, f"Halt: refused too briefly: {line}"
                event("halted: new pods refused before any restart, for the deadline")
                continue
            late = self.clock() - mine[-1].at >= DEADLINE
            unmeshed = any(proxy is None for _, proxy in w.pods)
            if unmeshed and not (w.revisions[-1].failed or late):
                event("halted: out of the mesh")
            assert w.revisions[-1].failed or late or unmeshed, (
                f"Halt on no evidence of this attempt: {line}"
            )

    @rule()
    def reconcile(self) -> None:
        self._reconcile()

    @rule()
    def a_pass_later(self) -> None:
        """The common course between faults: an interval passes, Kubernetes acts on what we
        did, the caches catch up, and the controller reconciles."""
        self.clock.now += INTERVAL
        self.sim.controllers_act()
        self.sim.sync()
        self._reconcile()

    # -- the cluster ----------------------------------------------------------------------------

    @rule()
    def controllers_act(self) -> None:
        self.sim.controllers_act()

    @rule(which=st.sampled_from(["all", "deployments", "replicasets", "pods"]))
    def caches_catch_up(self, which: str) -> None:
        self.sim.sync(which)

    @rule(seconds=st.sampled_from([0.5, 2.0, 5.0, 20.0, 61.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.now += seconds

    @rule()
    def injector_down(self) -> None:
        self.sim.injector_up = False

    @rule()
    def injector_up(self) -> None:
        self.sim.injector_up = True

    @rule()
    def injector_reads_the_new_config(self) -> None:
        self.sim.injector_version = self.desired.proxy.version

    @rule()
    def new_configuration(self) -> None:
        """Another configuration applied (a new generation too): a new attempt."""
        self.k += 1
        self.generation += 1
        self.version += 1

    @rule(name=st.sampled_from(NAMES))
    def admission_refuses(self, name: str) -> None:
        self.sim.refusing.add(name)

    @rule(name=st.sampled_from(NAMES))
    def admission_refuses_real_creates(self, name: str) -> None:
        """Admits the controller's dry run, refuses the pods our restart makes (a quota at
        its limit, a webhook timing out under load)."""
        self.sim.refusing_real.add(name)

    @rule(name=st.sampled_from(NAMES))
    def admission_admits(self, name: str) -> None:
        self.sim.refusing.discard(name)
        self.sim.refusing_real.discard(name)

    @rule(name=st.sampled_from(NAMES))
    def workload_paused(self, name: str) -> None:
        """Someone pauses a Deployment (``spec.paused``), before or after our restart."""
        self._spec_changed(name, paused=True)

    @rule(name=st.sampled_from(NAMES))
    def workload_resumed(self, name: str) -> None:
        self._spec_changed(name, paused=False)

    @rule(name=st.sampled_from(NAMES), replicas=st.integers(0, 3))
    def workload_scaled(self, name: str, replicas: int) -> None:
        """Scaled by a person or an HPA, to zero included, at any point of its restart."""
        self._spec_changed(name, replicas=replicas)

    def _spec_changed(self, name: str, **changes: Any) -> None:
        w = self.sim.workloads[name]
        for field_name, value in changes.items():
            setattr(w, field_name, value)
        w.generation += 1
        w.resource_version += 1

    @rule(count=st.integers(1, 3))
    def api_errors(self, count: int) -> None:
        self.sim.failing_writes = count

    @rule()
    def leader_changes(self) -> None:
        self.executor = self._leader()

    @rule(onto=st.sampled_from(["no bundle", "this one", "another"]))
    def anchor_removal_held(self, onto: str) -> None:
        """The guard holds a removal: the bundle that keeps every anchor is this
        configuration's (the controller rolls it out), another's, or there is none."""
        holding = {"no bundle": None, "this one": self.desired.config_hash}.get(onto, "h-other")
        self.anchors = AnchorHold("4 meshed pod(s) still need the anchor dropped", holding)
        self._reconcile()  # the guard is asked on a reconcile: this one holds

    @rule()
    def anchor_hold_lifted(self) -> None:
        self.anchors = None

    @rule()
    def spec_rollout_edited(self) -> None:
        """``spec.rollout.paused`` toggled (an edit of spec.rollout alone: a new generation,
        the same configuration): no new attempt, so a halt holds (issue 58, finding 4)."""
        self.paused = not self.paused
        self.generation += 1
        self.version += 1

    # -- the invariants -------------------------------------------------------------------------

    @invariant()
    def mesh(self) -> None:
        for restart in self.sim.restarts:
            wanted = desired(int(restart.config_hash[1:])).proxy.version
            assert restart.injects == wanted, f"Mesh: {restart}, the injector on {restart.injects}"

    @invariant()
    def mesh_going_back(self) -> None:
        """Mesh, for a halt's undo too (issue 60, item 4.5): going back that makes pods is
        sent only while the injector injects (else they come without the proxy)."""
        for undo in self.sim.gone_back:
            event(f"undo sent: {'makes pods' if undo.makes_pods else 'scales down'}")
            assert not undo.makes_pods or undo.injects is not None, (
                f"Mesh: {undo}, sent while the injector was down"
            )

    @invariant()
    def once(self) -> None:
        counts = Counter((r.workload, r.config_hash) for r in self.sim.restarts)
        twice = [k for k, n in counts.items() if n > 1]
        assert not twice, f"Once: restarted twice for one configuration: {twice}"

    @precondition(lambda self: not halted(self.status, self.desired.config_hash))
    @rule()
    def faults_end_and_the_rollout_completes(self) -> None:
        """Progress: everything healed, the rollout finishes by itself, or halts saying why
        (a deadline an earlier fault made pass)."""
        self.sim.injector_up, self.sim.injector_version = True, self.desired.proxy.version
        self.sim.refusing.clear()
        self.sim.refusing_real.clear()
        self.sim.failing_writes = 0
        self.anchors = None
        if self.paused:  # resumed by the person who paused it
            self.paused = False
            self.generation, self.version = self.generation + 1, self.version + 1
        for w in self.sim.workloads.values():
            if w.paused:
                self._spec_changed(w.name, paused=False)
        outcome: Json = {}
        for _ in range(60):
            self.sim.controllers_act()
            self.sim.sync()
            outcome = self._reconcile()
            if outcome["reason"] == "UpToDate" or halted(self.status, self.desired.config_hash):
                break
            self.clock.now += INTERVAL
        if halted(self.status, self.desired.config_hash):
            event("progress: halted, naming what failed")
            assert self.status[HALT_FIELD]["failed"], "Progress: a halt naming nothing"
            return
        event("progress: completed")
        assert outcome["reason"] == "UpToDate", f"Progress: stuck: {outcome}"


RolloutMachine.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=40,
    derandomize="ROLLOUT_PROPERTY_EXAMPLES" not in os.environ,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestRollout = RolloutMachine.TestCase


# -- the whole reconcile, with the guard's hold coming and going ------------------------------

GUARDED_NAMES = ["app-0", "app-1", "app-2"]


class GuardedRolloutMachine(RuleBasedStateMachine):
    """The controller's whole reconcile (``tests/support/guarded_controller.py``): the spec
    asks for A, whose bundle drops an anchor a meshed bystander still runs; while it does,
    the controller writes and rolls out H (A with both anchors) instead. Faults between
    reconciles as above, the bystander restarting onto both anchors at any point (the hold
    lifts), ``spec.rollout`` edited alone (``paused`` toggled: a new generation, the same
    configuration), and a person resuming.

    * **Halt**: a halt in force (its configuration and resume annotation the
      LinkerdConfig's) stays in status until a person resumes it, the hold lifting or not,
      ``spec.rollout`` edited or not, and no restart is sent meanwhile but a rollback's onto
      the configuration it returns to.
    * **Rollback**: with ``onFailure: Rollback``, a halt that names a configuration to return
      to, which status still records as the last completed, rolls back: its rollout is never
      reported halted (``cannot roll back``), and the ConfigMap goes back to it; once back,
      it never holds the failed configuration (A, or H) again until a person resumes (issue
      58, finding 4: ``paused: true`` put it back on the failed proxy).
    * **Trust**: while the bystander runs the old anchor alone, nothing restarts onto A.
    """

    def __init__(self) -> None:
        super().__init__()
        self.world: GuardedWorld | None = None
        self.resumes = 0
        self.gone_back = False
        """The ConfigMap went back to a rollback's target, and no person resumed since."""

    @initialize(
        on_failure=st.sampled_from(["Halt", "Rollback"]),
        refusing=st.sets(st.sampled_from(GUARDED_NAMES), min_size=1, max_size=2),
    )
    def applied(self, on_failure: str, refusing: set[str]) -> None:
        """O completed; A applied (held); admission refuses some workloads' new pods."""
        self.world = GuardedWorld(GUARDED_NAMES, on_failure)
        self.world.sim.refusing |= refusing
        self.world.apply(ASKED, ONLY_B)
        self._reconcile()

    def teardown(self) -> None:
        if self.world is not None:
            self.world.close()

    @property
    def w(self) -> GuardedWorld:
        assert self.world is not None
        return self.world

    def _in_force(self) -> Json | None:
        """The halt status holds, if it is the attempt's now (the configuration the spec asks
        for, the resume token; not the generation: spec.rollout edited alone is the same)."""
        halt, meta = self.w.halt, self.w.config["metadata"]
        attempt = (self.w.a.config_hash, (meta.get("annotations") or {}).get(RESUME_ANNOTATION, ""))
        if halt is None or (halt["configHash"], halt["resumeToken"]) != attempt:
            return None
        return halt

    def _reconcile(self, seconds: float | None = None) -> None:
        w = self.w
        before, sent = self._in_force(), len(w.sim.restarts)
        held = w.ctl.meshed_pods.store.get("shop/bystander-1")["metadata"]["annotations"]
        on_x = held[TRUST_ROOT_ANNOTATION] == root_hash(X)
        said = w.reconcile() if seconds is None else w.a_pass_later(seconds)
        onto = {r.config_hash for r in w.sim.restarts[sent:]}
        event(f"guarded: {said.get('reason')}")
        if on_x:
            assert w.a.config_hash not in onto, "Trust: restarted onto A while held"
        if before is not None:
            assert self._in_force() is not None, f"Halt: ended by no person: {said}"
            back = (before.get("rollback") or {}).get("toHash")
            assert onto <= {back}, f"Halt: restarted onto {onto} after the halt"
        now = self._in_force()
        back = None if now is None else (now.get("rollback") or {}).get("toHash")
        if back is not None and back == rollback.settled(w.config):
            assert said.get("reason") != Phase.HALTED, f"Rollback: halted instead: {said}"
            if before is not None and before.get("rollback"):  # decided a reconcile ago
                assert w.in_configmap() == back, "Rollback: the ConfigMap did not go back"
                self.gone_back = True

    @invariant()
    def a_rollback_is_not_abandoned(self) -> None:
        if self.world is None or not self.gone_back:
            return
        failed = {self.w.a.config_hash, self.w.h.config_hash}
        assert self.w.in_configmap() not in failed, "Rollback: the ConfigMap went back to A"

    @rule()
    def reconcile(self) -> None:
        self._reconcile()

    @rule(seconds=st.sampled_from([1.0, 5.0, 61.0]))
    def a_pass_later(self, seconds: float) -> None:
        """The common course: the injector reads what was written, Kubernetes acts, the
        caches catch up, the controller reconciles."""
        self.w.injector_reads()
        self._reconcile(seconds)

    @rule()
    def injector_reads_the_configmap(self) -> None:
        self.w.injector_reads()

    @rule(name=st.sampled_from(GUARDED_NAMES))
    def admission_refuses(self, name: str) -> None:
        self.w.sim.refusing.add(name)

    @rule(name=st.sampled_from(GUARDED_NAMES))
    def admission_admits(self, name: str) -> None:
        self.w.sim.refusing.discard(name)

    @rule()
    def bystander_restarts(self) -> None:
        """Onto both anchors (the injector hands them out): the hold lifts. (No pod comes
        back on the old anchor alone: the injector no longer hands it out.)"""
        self.w.bystander(BOTH)

    @rule()
    def leader_changes(self) -> None:
        self.w.leader_changes()

    @rule(paused=st.booleans())
    def spec_rollout_edited(self, paused: bool) -> None:
        """Only ``spec.rollout`` edited (``paused``: a new generation, the same
        configuration); the edit wakes a reconcile."""
        self.w.edit_rollout(paused=paused)
        self._reconcile()

    @rule()
    def a_person_resumes(self) -> None:
        self.resumes += 1
        self.gone_back = False
        self.w.resume(str(self.resumes))


GuardedRolloutMachine.TestCase.settings = settings(
    max_examples=max(EXAMPLES // 4, 25),
    stateful_step_count=40,
    derandomize="ROLLOUT_PROPERTY_EXAMPLES" not in os.environ,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGuardedRollout = GuardedRolloutMachine.TestCase


# -- the seam the real proxies found ----------------------------------------------------------


class _OneLeader:
    """One leader reconciling the first configuration over a simulated cluster of
    ``names``, its status kept as the controller keeps it."""

    def __init__(self, names: list[str], rollout: Json) -> None:
        self.clock = FakeClock(1_700_000_000.0)
        self.sim = SimCluster(names, self.clock)
        self.sim.injector_version = NEW
        self.executor = executor_on(self.sim, self.clock, RolloutOptions(injector_wait=30.0))
        self.rollout = rollout
        self.status: Json = {}

    async def reconcile(self) -> Json:
        config = {
            "metadata": {"name": "cfg", "generation": 1, "resourceVersion": "1"},
            "spec": {"rollout": self.rollout},
            "status": self.status,
        }
        self.executor.found(desired(0).config_hash)
        outcome = await roll(self.executor, config, desired(0))
        self.status = merged_status(self.status, outcome.status)
        return outcome.__dict__


async def test_an_injector_outage_mid_restart_leaves_no_workload_out_of_the_mesh() -> None:
    """Issue 60, item 4.5, found on Linkerd's real data plane and replayed on the simulated
    cluster: a restart sent while the injector injects, the injector gone before the
    Deployment controller makes the pods (admitted without a proxy), the rollout halted on
    that evidence. Going back makes pods (the previous revision has none left), so it waits
    for the injector; once it injects, going back brings every pod back with the proxy."""
    world = _OneLeader(["app-0", "app-1"], {**ROLLOUT, "maxRestartsPerPass": 1})
    clock, sim, reconcile = world.clock, world.sim, world.reconcile

    await reconcile()
    assert [(r.workload, r.injects) for r in sim.restarts] == [("app-0", NEW)]
    sim.injector_up = False
    sim.controllers_act()
    sim.sync()
    assert sim.unmeshed_by_us, "the outage made no pod: nothing to replay"
    for _ in range(3):
        clock.now += INTERVAL
        outcome = await reconcile()
        sim.controllers_act()
        sim.sync()
    assert halted(world.status, desired(0).config_hash), outcome
    assert "waits for the injector" in outcome["message"], outcome["message"]
    assert sim.gone_back == [], "gone back while the injector was down"
    sim.injector_up = True
    clock.now += INTERVAL
    await reconcile()
    assert [(g.workload, g.makes_pods, g.injects) for g in sim.gone_back] == [("app-0", True, NEW)]
    sim.controllers_act()
    sim.sync()
    assert all(proxy == NEW for _, proxy in sim.workloads["app-0"].pods)
    assert len(sim.restarts) == 1  # halted: app-1 is not restarted


async def test_a_workload_out_of_the_mesh_after_the_halt_is_brought_back_too() -> None:
    """The same seam one step on: two restarts in a pass, one refused (the halt), the other
    paused by someone before its rollout; resumed while the injector is down, its pods come
    without the proxy after the halt was recorded. Not among the halt's failures, it is
    still on our restart's revision and out of the mesh: gone back from too, once the
    injector injects."""
    world = _OneLeader(["app-0", "app-1"], ROLLOUT)
    clock, sim, reconcile = world.clock, world.sim, world.reconcile

    await reconcile()
    assert sorted(r.workload for r in sim.restarts) == ["app-0", "app-1"]
    sim.refusing_real.add("app-0")
    app_1 = sim.workloads["app-1"]
    app_1.paused, app_1.generation = True, app_1.generation + 1
    sim.controllers_act()
    sim.sync()
    clock.now += INTERVAL
    await reconcile()
    assert halted(world.status, desired(0).config_hash)
    failed = world.status[HALT_FIELD]["failed"]
    assert [f.split(":", 1)[0] for f in failed] == ["deployment/ns/app-0"]
    sim.injector_up = False
    app_1.paused, app_1.generation = False, app_1.generation + 1
    sim.controllers_act()
    sim.sync()
    assert all(proxy is None for _, proxy in app_1.pods)
    clock.now += INTERVAL
    outcome = await reconcile()
    assert "app-1" in outcome["message"] and "waits for the injector" in outcome["message"]
    assert [g.workload for g in sim.gone_back if g.makes_pods] == []
    sim.injector_up = True
    clock.now += INTERVAL
    await reconcile()
    assert sorted((g.workload, g.makes_pods, g.injects) for g in sim.gone_back) == [
        ("app-0", False, NEW),  # in the halting pass: it only scaled down
        ("app-1", True, NEW),
    ]
    sim.controllers_act()
    sim.sync()
    assert all(proxy == NEW for _, proxy in app_1.pods)
