"""What applying a LinkerdConfig would do (``plan``), and where the data plane stands against
the configuration in the cluster (``status``). Pure, over what the controller's caches hold.

Both use the reconciler's own decisions, never a copy of them: ``validation.validate`` (the
webhook's checks), ``decision.decide`` (the target, its ownership, and
``desired.desired_config`` over ``desired.current_data``: what would be written),
``mesh.plan_rollout`` and ``mesh.pending`` (what the executor restarts), and
``DesiredProxy.verdict`` (why a pod is or is not restarted). So a plan cannot say something
the controller would not do.

The order of restarts is the executor's: each pass restarts the next ``batch`` pending
workloads in sorted order. A plan's batches hold while nothing else changes meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from linkerd_config.kube.resource import Json, rfc3339, stored_json
from linkerd_config.kube.rollout_status import Verdict
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.admission.defaults import defaulted
from linkerd_config.linkerd.admission.validation import defaultable, validate, warnings_for
from linkerd_config.linkerd.configmap import decision
from linkerd_config.linkerd.configmap.desired import (
    Desired,
    current_data,
    desired_config,
    drifted,
    held_config_hash,
    missing,
)
from linkerd_config.linkerd.formats import (
    FieldError,
    FormatError,
    InstalledDataError,
    VersionError,
)
from linkerd_config.linkerd.formats.config_diff import Change, diff, key_diff
from linkerd_config.linkerd.formats.field_grammar import DNS_SUBDOMAIN
from linkerd_config.linkerd.mesh import Workload
from linkerd_config.linkerd.rollout import actions, canary, health, machine, observe, rollback
from linkerd_config.linkerd.rollout.phase import Phase
from linkerd_config.linkerd.rollout.policy import RolloutOptions, RolloutPolicy
from linkerd_config.linkerd.rollout.record import Halt, Record, vouched
from linkerd_config.linkerd.spec import canary_section
from linkerd_config.linkerd.spec.conversion import (
    V1ALPHA1,
    convert,
    said_to_writer,
    served_text,
    to_hub,
    version_of,
)
from linkerd_config.linkerd.spec.crd import (
    HASH_ANNOTATION,
    OWNER_ANNOTATION,
    READY,
    Target,
)
from linkerd_config.linkerd.status.view import ClusterView
from linkerd_config.linkerd.trust.guard import (
    BundleError,
    Decision,
    evaluate,
    holding_config,
)

NOT_CREATED_YET = "9999-12-31T23:59:59Z"
"""The creationTimestamp a LinkerdConfig not yet in the cluster is planned with."""
RESTARTING = "restarting"
"""A stale workload already restarted for this configuration: its pods are rolling."""
SKIPPED = "skipped"
"""Stale, but not restarted: paused or already unhealthy (the pre-flight), with why."""


@dataclass(frozen=True)
class KeyChange:
    configmap: str
    """``namespace/name``."""
    key: str
    changes: tuple[Change, ...]

    def as_json(self) -> Json:
        return {
            "configMap": self.configmap,
            "key": self.key,
            "changes": [c.as_json() for c in self.changes],
        }


@dataclass(frozen=True)
class WorkloadLine:
    """A workload, its opted-in pods counted by reason, and (for a restart) its batch."""

    workload: Workload
    state: str
    """``stale`` (to restart), ``restarting``, or the state of pods not restarted
    (``up-to-date``, ``pinned``, ``excluded``; ``mixed`` when they differ)."""
    reasons: Mapping[str, int]
    batch: int = 0
    """1-based pass of the rollout that restarts it; 0 when none does."""
    canary: bool = False
    """Restarted first, as the canary (``spec.rollout.canary``): the rest wait for it."""

    @property
    def pods(self) -> int:
        return sum(self.reasons.values())

    def as_json(self) -> Json:
        found: Json = {
            "kind": self.workload.kind,
            "namespace": self.workload.namespace,
            "name": self.workload.name,
            "state": self.state,
            "pods": self.pods,
            "reasons": [{"reason": r, "pods": n} for r, n in sorted(self.reasons.items())],
        }
        if self.batch:
            found["batch"] = self.batch
        if self.canary:
            found["canary"] = True
        return found


@dataclass(frozen=True)
class Problem:
    """Why there is no plan (or no status): the object is invalid, or cannot be applied."""

    reason: str
    message: str


@dataclass(frozen=True)
class Plan:
    name: str
    problem: Problem | None = None
    warnings: tuple[str, ...] = ()
    target: str = ""
    config_format: str = ""
    linkerd_version: str = ""
    proxy_version: str = ""
    config_hash: str = ""
    current_hash: str | None = None
    keys: tuple[KeyChange, ...] = ()
    metadata: tuple[Change, ...] = ()
    """Our annotations on the ConfigMap (owner, configuration hash) that would change."""
    restarts: tuple[WorkloadLine, ...] = ()
    kept: tuple[WorkloadLine, ...] = ()
    """Opted-in workloads not restarted, with why."""
    batch_size: int = 0
    interval: float = 0.0
    paused: bool = False
    halted: tuple[str, ...] = ()
    """The stored object's rollout of this very spec is halted: each failed workload, why."""
    anchors: Decision | None = None
    """The trust-anchor guard on the bundle it writes (None: the bundle does not change)."""
    canary: Json = field(default_factory=dict)
    """``spec.rollout.canary``: ``canary.summary``, the workloads restarted first
    (``restartFirst``), and whether none matches (``unmatched``: nothing restarts)."""

    @property
    def canary_unmatched(self) -> bool:
        """No workload to restart matches the canary: applying it restarts nothing now."""
        return bool(self.canary.get("unmatched"))

    @property
    def anchor_hold(self) -> bool:
        """The trust-anchor guard holds it: applying it writes nothing until pods restart."""
        return self.anchors is not None and self.anchors.held

    @property
    def held(self) -> bool:
        """Restarts that applying it would not make now: paused, halted, or the write held by
        the trust-anchor guard."""
        return self.paused or bool(self.halted) or self.anchor_hold or self.canary_unmatched

    @property
    def changes(self) -> bool:
        """Whether applying it changes anything now (a paused or halted rollout restarts
        nothing)."""
        return bool(self.keys or self.metadata or (self.restarts and not self.held))

    @property
    def batches(self) -> int:
        return max((w.batch for w in self.restarts), default=0)

    def as_json(self) -> Json:
        found: Json = {"linkerdConfig": self.name, "valid": self.problem is None}
        if self.problem is not None:
            found["error"] = {"reason": self.problem.reason, "message": self.problem.message}
            return found
        found.update(
            {
                "warnings": list(self.warnings),
                "configMap": self.target,
                "configFormat": self.config_format,
                "linkerdVersion": self.linkerd_version,
                "proxyVersion": self.proxy_version,
                "configHash": {"current": self.current_hash, "planned": self.config_hash},
                "changes": self.changes,
                "configMapChanges": [k.as_json() for k in self.keys],
                "metadataChanges": [c.as_json() for c in self.metadata],
                "trustAnchors": None if self.anchors is None else self.anchors.as_json(),
                "rollout": {
                    "paused": self.paused,
                    "halted": list(self.halted),
                    "maxRestartsPerPass": self.batch_size,
                    "restartIntervalSeconds": self.interval,
                    "batches": self.batches,
                    "restarts": [w.as_json() for w in self.restarts],
                    "notRestarted": [w.as_json() for w in self.kept],
                    "canary": self.canary or canary.summary(None, None),
                },
            }
        )
        return found


def plan(
    config: Json, view: ClusterView, defaults: RolloutOptions, now: float | None = None
) -> Plan:
    """What applying ``config`` (as read from a file) would do ``now`` (wall time; the
    clock's when None); nothing is written. Every message names fields as the file's API
    version does."""
    found = _plan(config, view, defaults, time.time() if now is None else now)
    if found.problem is None:
        return found
    # As validation names them: a v1alpha1 file's v1alpha2-only values are in its annotation.
    version, spec = version_of(config), config.get("spec")
    annotated = version == V1ALPHA1 and not (isinstance(spec, Mapping) and "values" in spec)
    message = served_text(found.problem.message, version, annotated=annotated)
    return replace(found, problem=replace(found.problem, message=message))


def _plan(config: Json, view: ClusterView, defaults: RolloutOptions, now: float) -> Plan:
    metadata = config.get("metadata")
    name = str(metadata.get("name") or "") if isinstance(metadata, dict) else ""
    old = next((c for c in view.configs if c["metadata"]["name"] == name), None)
    others = [c for c in view.configs if c["metadata"]["name"] != name]
    # Checked as the API server checks it: as it stores JSON (no nulls, integers), after the
    # mutating webhook's defaults.
    spec = config.get("spec")
    mutated = config
    if defaultable(spec):  # within validation's bounds: normalizing it is cheap
        config = {**config, "spec": stored_json(spec)}
        hub = to_hub(config)
        if defaultable(hub["spec"]):
            filled = {**hub, "spec": defaulted(dict(hub["spec"]))}
            mutated = convert(filled, version_of(config))
    errors = validate(mutated, old, others)
    # The API server's own checks, which validation leaves to it.
    if not name:
        errors.insert(0, FieldError("metadata.name", "is required"))
    else:
        given = metadata.get("name") if isinstance(metadata, dict) else None
        errors[:0] = [FieldError("metadata.name", m) for _, m in DNS_SUBDOMAIN.problems(given)]
    if defaultable(spec):  # from here on the domain reads the hub (spec.conversion)
        config = to_hub(config)
    if not errors:  # (an invalid one may have no metadata to keep it in)
        config = _as_stored(config, old)
    decided = _desired(config, errors, view)
    if isinstance(decided, Problem):
        return Plan(name, decided)
    desired, configmaps = decided.desired, decided.configmaps
    desired = defaults.restricted(desired)
    # The stored object's rollout of this very configuration rolled back: applying it again,
    # or with only its spec.rollout changed (the same attempt), keeps the ConfigMaps on the
    # configuration returned to, as the controller does (``rollback.rendered_target``).
    written = desired
    if old is not None:  # its record as the controller reads it (``record.vouched``)
        old = _vouched(old, configmaps, desired.target)
        halt = health.halt_state(old, desired.config_hash).halted
        held = _rolled_back_to(old, halt, configmaps, desired)
        if isinstance(held, Problem):
            return Plan(name, held)
        written = held or desired
    try:
        anchors, holding = _anchors(written, configmaps, old, view, config, now)
    except BundleError as exc:
        return Plan(name, Problem("InstalledConfigUnreadable", str(exc)))
    rolled, hold = desired, _anchor_hold(anchors, holding)
    if holding is not None and written is desired:
        # A held removal: the keys say what the spec asks (held), the restarts what the
        # controller does meanwhile: roll out the bundle with both anchors.
        rolled = defaults.restricted(holding)
    target = desired.target
    current = configmaps.get(target.name)
    annotations = ((current or {}).get("metadata") or {}).get("annotations") or {}
    data = (current or {}).get("data") or {}
    keys = [
        KeyChange(str(target), key, tuple(found))
        for key in sorted(written.data)
        if (found := key_diff(data.get(key), written.data[key]))
    ]
    for companion, wanted in sorted(written.companions.items()):
        there = (configmaps.get(companion) or {}).get("data") or {}
        keys.extend(
            KeyChange(f"{target.namespace}/{companion}", key, tuple(found))
            for key in sorted(wanted)
            if (found := key_diff(there.get(key), wanted[key]))
        )
    ours = {OWNER_ANNOTATION: name, HASH_ANNOTATION: written.config_hash}
    metadata_changes = diff(
        {k: annotations[k] for k in ours if k in annotations}, ours, "metadata.annotations"
    )
    policy = RolloutPolicy.of(config, defaults)
    restarts, kept_lines, first = _rollout(
        view, rolled, policy, config, old, hold, desired.config_hash
    )
    return Plan(
        name,
        warnings=tuple(warnings_for(mutated)),  # as the webhook warns: in the file's names
        target=str(target),
        config_format=desired.config_format,
        linkerd_version=desired.linkerd_version,
        proxy_version=desired.proxy.version,
        config_hash=desired.config_hash,
        current_hash=annotations.get(HASH_ANNOTATION),
        keys=tuple(keys),
        metadata=tuple(metadata_changes),
        restarts=restarts,
        kept=kept_lines,
        batch_size=policy.batch,
        interval=policy.interval,
        paused=policy.paused,
        halted=_halted(old, desired.config_hash),
        anchors=anchors,
        canary=first,
    )


def _as_stored(config: Json, old: Json | None) -> Json:
    """``config`` as the API server would store it: it keeps the stored object's identity on
    update; a new object is younger than every other (which matters for ownership: the
    oldest wins)."""
    kept = {"creationTimestamp": NOT_CREATED_YET}
    if old is not None:
        kept = {k: old["metadata"][k] for k in ("creationTimestamp", "uid") if k in old["metadata"]}
    return {**config, "metadata": {**config["metadata"], **kept}}


def _anchors(
    desired: Desired,
    configmaps: Mapping[str, Json],
    stored: Json | None,
    view: ClusterView,
    config: Json,
    now: float,
) -> tuple[Decision | None, Desired | None]:
    """The trust-anchor guard, as the reconcile asks it (the stored object's record of known
    bundles, the meshed pods): its decision (None when the bundle does not change), and,
    while a removal is held, what the controller writes and rolls out instead (``config``
    with the bundle that keeps every anchor in use), else None."""
    current = current_data(configmaps, desired.target)
    guard = evaluate(
        desired, current, (stored or {}).get("status"), lambda: view.meshed,
        view.issuer_updated, now,
    )  # fmt: skip
    decision = guard.decision
    changes = bool(decision.dropped) or decision.held
    holding = None
    if guard.holding is not None:
        try:
            holding = desired_config(holding_config(config, guard.holding), current)
        except (FormatError, VersionError):
            holding = None  # as the controller: nothing written while held
    return (decision if changes else None), holding


def _anchor_hold(decision: Decision | None, holding: Desired | None) -> observe.AnchorHold | None:
    """The guard's hold as the rollout's step reads it (None: no removal held)."""
    if decision is None or not decision.held:
        return None
    return observe.AnchorHold(decision.message(), None if holding is None else holding.config_hash)


def _halted(stored: Json | None, config_hash: str) -> tuple[str, ...]:
    """The failed workloads of a halt that applying a spec of configuration ``config_hash``
    would leave in force: the stored object's, for the same configuration (a new one is a
    new attempt; an edit of spec.rollout alone is none)."""
    if stored is None:
        return ()
    halted = health.halt_state(stored, config_hash).halted
    return () if halted is None else halted.failed


_CONSEQUENCES = {
    decision.NAMESPACE_NOT_MANAGED: "; it would write nothing",
    decision.CONFLICT: "; this one would change nothing",
}
"""What ``plan`` and ``status`` add to a refusal's fact (the controller says it in its own
tense)."""


def _desired(
    config: Json, errors: Sequence[FieldError], view: ClusterView
) -> decision.Decided | Problem:
    """The reconciler's steps before it writes (``decision.decide``): its target,
    its ownership, its rendering."""
    decided = decision.decide(config, errors, view.configs, view.configmaps, view.config_namespace)
    if isinstance(decided, decision.Refused):
        return Problem(decided.reason, decided.message + _CONSEQUENCES.get(decided.reason, ""))
    return decided


def _observation(
    view: ClusterView,
    desired: Desired,
    config: Json,
    stored: Json | None,
    now: float,
    asked: str = "",
) -> observe.Observed:
    """What the controller's pass of ``desired``'s rollout would read from these caches
    (``observe.observed``). ``stored``: the LinkerdConfig as stored, None when it is not
    (its records: restarts, evictions, the canary's); ``asked``: the configuration the spec
    asks for, when ``desired`` is another (the bundle the trust-anchor guard holds on to)."""
    planned = view.rollout_plan(desired)
    config_hash = desired.config_hash
    restarted = {
        name: (replace(standing, verdict=_unchecked(standing.verdict)), workload)
        for name, (standing, workload) in health.restarted(
            view.workloads, config_hash, planned.reasons, now, planned.unmeshed
        ).items()
    }
    everyone = [obj for objects in view.workloads.values() for obj in objects.values()]
    read = {**config, "status": {}} if stored is None else stored  # a file's is no record
    return observe.observed(
        view, read, config_hash, desired.proxy.version, now, planned,
        restarted=restarted, restart_times=mesh.restart_times(everyone, config_hash),
        evicted=Record.of(stored or {}).evictions(config_hash),
        canary_record=Record.of(stored or {}).canary_of(config_hash),
        back_to=rollback.target(stored or config, config_hash, asked or config_hash),
        asked=asked,
    )  # fmt: skip


UNCHECKED_REVISION = (
    "ReplicaFailure shows on it; the controller asks its newest ReplicaSet whether that is "
    "this revision's (then the rollout fails) or an earlier one's"
)


def _unchecked(verdict: Verdict) -> Verdict:
    """A restart's verdict as these caches can tell it: which revision a Deployment's
    ``ReplicaFailure`` belongs to takes the ReplicaSets' status, which no cache keeps (the
    controller reads them live: ``rollout_status.of_newest_revision``)."""
    return Verdict("waiting", UNCHECKED_REVISION) if verdict.replica_failure else verdict


def _rollout(
    view: ClusterView,
    desired: Desired,
    policy: RolloutPolicy,
    config: Json,
    stored: Json | None = None,
    anchors: observe.AnchorHold | None = None,
    asked: str = "",
) -> tuple[tuple[WorkloadLine, ...], tuple[WorkloadLine, ...], Json]:
    """The workloads restarted, pass by pass, as the controller's step decides them
    (``passes``: the canary's first, in passes of their own); the opted-in
    others; and the canary (``Plan.canary``). ``asked``: the configuration the spec asks
    for, when ``desired`` is the bundle the trust-anchor guard holds on to instead (what
    a resume forgave is kept under it)."""
    observed = _observation(view, desired, config, stored, time.time(), asked)
    observed = replace(observed, anchors=anchors)
    todo, skipped, planned = list(observed.ready), observed.skipped, observed.plan
    forgiven = health.halt_state(stored or {}, observed.attempt).forgiven
    said = _canary_first(view, desired.config_hash, policy.canary, stored, todo, forgiven)
    # Listed whether paused or not (``Plan.paused`` says it is held); with a canary that
    # matches nothing, as they would go once one does (``Plan.canary_unmatched``).
    record, unheld = health.HaltState(None, forgiven, {}), replace(policy, paused=False)
    found, then = passes(observed, record, unheld)
    if not found and then.reason == Phase.CANARY_UNMATCHED:
        found, then = passes(observed, record, replace(unheld, canary=None))
    restarts = [
        WorkloadLine(w, mesh.STALE, planned.reasons[w], number, canary=made.canary)
        for number, made in enumerate(found, start=1)
        for w in made.workloads
    ]
    passed = {w for made in found for w in made.workloads}
    waiting = set(todo) | {w for w, _ in skipped}
    kept = [
        WorkloadLine(w, RESTARTING, planned.reasons[w])
        for w in planned.workloads
        if w not in waiting
    ]
    kept.extend(
        WorkloadLine(w, SKIPPED, {f"skipped: {why}": sum(planned.reasons[w].values())})
        for w, why in skipped
    )
    kept.extend(
        WorkloadLine(w, SKIPPED, {f"waits: {then.reason}": sum(planned.reasons[w].values())})
        for w in todo
        if w not in passed
    )
    for workload, states in sorted(view.standing(desired).workloads.items()):
        if workload in planned.reasons:
            continue
        reasons: dict[str, int] = {}
        for counted in states.values():
            for reason, pods in counted.items():
                reasons[reason] = reasons.get(reason, 0) + pods
        state = next(iter(states)) if len(states) == 1 else "mixed"
        kept.append(WorkloadLine(workload, state, reasons))
    return tuple(restarts), tuple(sorted(kept, key=lambda line: line.workload)), said


def _restarted_for(view: ClusterView, config_hash: str) -> list[Workload]:
    """The owners whose template records a restart for ``config_hash``."""
    return [
        Workload(kind, *key.split("/", 1))
        for kind, objects in view.workloads.items()
        for key, obj in objects.items()
        if mesh.already_restarted(obj, config_hash)
    ]


def _canary_first(
    view: ClusterView,
    config_hash: str,
    first: canary_section.CanarySpec | None,
    stored: Json | None,
    todo: list[Workload],
    forgiven: frozenset[str],
) -> Json:
    """What ``Plan.canary`` says: the canary as the controller chooses it (``canary.choose``)
    from what it would restart, the stored object's record (the canary so far, whether it
    passed), the workloads' records and those a resume forgave."""
    record = Record.of(stored or {}).canary_of(config_hash)
    said = canary.summary(first, record)
    if first is None or canary.passed(record):
        return said
    restarted = [str(w) for w in _restarted_for(view, config_hash)]
    labels = {w: canary.labels_of(view.record(w), view.namespace(w.namespace)) for w in todo}
    names, ahead = canary.choose(
        first, canary.canaries_so_far(record, restarted), forgiven, todo, labels, restarted
    )
    counted = [n for n in names if n not in forgiven]
    return {
        **said,
        "workloads": names,
        "restartFirst": [str(w) for w in ahead],
        "unmatched": not counted,
    }


# -- status ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class NextPass:
    """The rollout's next pass, as the controller's ``step`` decides it from the caches: the
    phase it leaves the rollout in (the ``DataPlaneUpToDate`` reason) and what it says, the
    workloads it restarts (or, rolling back, brings back), and whether it asks Linkerd's
    injector first (those restarts go only if it injects the configuration)."""

    phase: Phase
    message: str
    restarts: tuple[Workload, ...] = ()
    restores: tuple[Workload, ...] = ()
    asks_injector: bool = False

    def as_json(self) -> Json:
        return {
            "phase": str(self.phase),
            "message": self.message,
            "restarts": [str(w) for w in self.restarts],
            "restores": [str(w) for w in self.restores],
            "asksInjector": self.asks_injector,
        }


def next_pass(
    observed: observe.Observed, record: health.HaltState, policy: RolloutPolicy
) -> NextPass:
    """``machine.step`` on ``observed``; when the pass would ask the injector first,
    decided again as if it injects the configuration (``NextPass.asks_injector``)."""
    decided = machine.step(observed, record, policy)
    asks = decided.ask is not None
    if asks:
        yes = observe.InjectorAnswer(True, "")
        decided = machine.step(replace(observed, injector=yes), record, policy)
    restart, restore = decided.restart, decided.restore
    return NextPass(
        decided.outcome.reason,
        decided.outcome.message,
        () if restart is None else restart.workloads,
        () if restore is None else restore.workloads,
        asks,
    )


def _rollback_observation(
    view: ClusterView, config: Json, failed: Desired, to: Desired | None, halt: Halt, now: float
) -> observe.Observed:
    """What the controller's pass of a rollback would read from these caches: the owners
    still recording the configuration rolled out when it failed (``Halt.rolled``), and once
    none does, how the ones brought back stand on ``to`` (the configuration gone back to;
    None: it cannot go back)."""
    failed_hash = halt.rolled
    planned = view.rollout_plan(to or failed)
    restarted = health.restarted(view.workloads, failed_hash, planned.reasons, now)
    pending = [workload for _, workload in restarted.values()]
    to_hash, to_version = rollback.returned_to(halt, failed, to)
    back = observe.rollback_pass(halt, pending, to_hash, to_version, {}, now)
    if observe.gated(back, failed_hash, halt):
        standing = health.brought_back(
            back.workloads, view.record, planned.reasons, halt.started_at or now
        )
        back = replace(
            back,
            brought_back=tuple(
                replace(s, verdict=_unchecked(s.verdict)) for s, _ in standing.values()
            ),
        )
    return observe.rollback_observed(config, halt, failed.proxy.version, now, planned, back)


@dataclass(frozen=True)
class ConfigStatus:
    """One LinkerdConfig against the cluster: its ConfigMap, its data plane, its conditions."""

    name: str
    problem: Problem | None = None
    target: str = ""
    config_format: str = ""
    linkerd_version: str = ""
    proxy_version: str = ""
    config_hash: str = ""
    drifted: tuple[str, ...] = ()
    """ConfigMaps (by name) that do not hold what the LinkerdConfig says."""
    missing: tuple[str, ...] = ()
    """Of those, the ones Linkerd's injector needs that are not there at all."""
    halted: tuple[str, ...] = ()
    """The rollout of this configuration is halted: each failed workload, and why."""
    namespaces: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    stale: tuple[WorkloadLine, ...] = ()
    conditions: tuple[Json, ...] = ()
    rollout: Json = field(default_factory=dict)
    """The last rollout: restarted and evicted counts, when the last restart was, paused."""
    anchors: Decision | None = None
    """The trust-anchor guard on the bundle still to write (None: it is written)."""
    rolled_back: str = ""
    """The failed rollout is rolling or rolled back: to which configuration, how far."""
    next_pass: NextPass | None = None
    """What the controller's next pass of the rollout decides from what the caches hold
    (``machine.step``)."""

    @property
    def failing(self) -> list[str]:
        """Everything that is not as it should be, for people; empty when all is well."""
        found = []
        if self.problem is not None:
            found.append(self.problem.message)
        if self.missing:
            found.append(f"ConfigMap(s) {', '.join(self.missing)} missing")
        if self.halted:
            what = "rollout failed, " + self.rolled_back if self.rolled_back else "rollout halted"
            found.append(f"{what}: {'; '.join(self.halted)}")
        if self.anchors is not None and self.anchors.held:
            found.append(f"trust-anchor removal held: {self.anchors.message()}")
        if set(self.drifted) - set(self.missing):
            found.append(f"ConfigMap(s) {', '.join(self.drifted)} not as configured")
        stale_pods = sum(w.pods for w in self.stale)
        if stale_pods:
            found.append(f"{stale_pods} stale pod(s) in {len(self.stale)} workload(s)")
        ready = next((c for c in self.conditions if c.get("type") == READY), None)
        if ready is None:
            found.append("no Ready condition yet: has the controller seen it?")
        elif ready.get("status") != "True":
            found.append(f"Ready is {ready.get('status')} ({ready.get('reason')})")
        return found

    def as_json(self) -> Json:
        found: Json = {"linkerdConfig": self.name, "healthy": not self.failing}
        found["failing"] = self.failing
        if self.problem is not None:
            found["error"] = {"reason": self.problem.reason, "message": self.problem.message}
        found.update(
            {
                "configMap": self.target,
                "configFormat": self.config_format,
                "linkerdVersion": self.linkerd_version,
                "proxyVersion": self.proxy_version,
                "configHash": self.config_hash,
                "drifted": list(self.drifted),
                "missing": list(self.missing),
                "halted": list(self.halted),
                "rolledBack": self.rolled_back or None,
                "namespaces": {ns: dict(c) for ns, c in sorted(self.namespaces.items())},
                "stale": [w.as_json() for w in self.stale],
                "conditions": list(self.conditions),
                "rollout": self.rollout,
                "trustAnchors": None if self.anchors is None else self.anchors.as_json(),
                "nextPass": None if self.next_pass is None else self.next_pass.as_json(),
            }
        )
        return found


def status(
    view: ClusterView, defaults: RolloutOptions, now: float | None = None
) -> list[ConfigStatus]:
    """Every LinkerdConfig in the cluster against what the cluster holds ``now`` (wall time;
    by default the clock's)."""
    at = time.time() if now is None else now
    return [
        _said_to_writer(_status_of(config, view, defaults, at), config)
        for config in sorted(view.configs, key=lambda c: str(c["metadata"]["name"]))
    ]


def _said_to_writer(found: ConfigStatus, config: Json) -> ConfigStatus:
    """``found`` naming fields as whoever wrote ``config`` does, as its status does."""
    if found.problem is None:
        return found
    message = said_to_writer(found.problem.message, config)
    return replace(found, problem=replace(found.problem, message=message))


def _vouched(config: Json, configmaps: dict[str, Json], target: Target) -> Json:
    """``config`` with its ``lastCompleted`` only if the managed ConfigMap vouches for it, as
    the controller reads it (``record.vouched``; the CLI has no memory of its own)."""
    managed, found = configmaps.get(target.name), Record.of(config).completed
    trusted = found is not None and (
        rollback.vouched_for(found, managed)
        or rollback.holds(
            config, found, held_config_hash(managed), current_data(configmaps, target)
        )
    )
    return vouched(config, trusted)[0]


def _rolled_back_to(
    config: Json, halt: Halt | None, configmaps: dict[str, Json], desired: Desired
) -> Desired | Problem | None:
    """What the ConfigMap holds while a failed rollout is rolled back (the controller's own
    choice: ``rollback.rendered_target``); None when no rollback is in force, or when what
    is installed now cannot take it (then the controller writes the spec and halts)."""
    try:
        return rollback.rendered_target(config, halt, current_data(configmaps, desired.target))
    except InstalledDataError as exc:
        return Problem("InstalledConfigUnreadable", str(exc))
    except (FormatError, VersionError):
        return None


def _rolled_back_line(halt: Halt | None, held: Desired | None) -> str:
    section = None if halt is None else halt.rollback
    if section is None or held is None:
        return ""
    phase = "rolled back" if section.phase == Phase.ROLLED_BACK else "rolling back"
    return f"{phase} to configuration {held.config_hash} (proxy {held.proxy.version})"


def _status_of(
    config: Json, view: ClusterView, defaults: RolloutOptions, now: float
) -> ConfigStatus:
    name = str(config["metadata"]["name"])
    # Read leniently, as the rest of status is: the schema types them, but an object stored
    # by another tool, or before the schema did, may hold anything.
    stored = config.get("status")
    if not isinstance(stored, Mapping):
        stored, config = {}, {**config, "status": {}}
    listed = stored.get("conditions")
    conditions = tuple(c for c in listed if isinstance(c, dict)) if isinstance(listed, list) else ()
    decided = _desired(config, validate(config, stored=True), view)
    if isinstance(decided, Problem):
        return ConfigStatus(name, decided, conditions=conditions)
    desired, configmaps = decided.desired, decided.configmaps
    desired = defaults.restricted(desired)
    config = _vouched(config, configmaps, desired.target)
    halt = health.halt_state(config, desired.config_hash).halted
    held = _rolled_back_to(config, halt, configmaps, desired)
    if isinstance(held, Problem):
        return ConfigStatus(name, held, conditions=conditions)
    try:  # the guard on what the controller writes: what a rollback returns to, or the spec
        anchors, holding = _anchors(held or desired, configmaps, config, view, config, now)
    except BundleError as exc:
        return ConfigStatus(
            name, Problem("InstalledConfigUnreadable", str(exc)), conditions=conditions
        )
    if held is not None:
        holding = None  # (the controller holds on to no bundle while it goes back)
    # While rolled back, the ConfigMap and the pods are measured against what was returned
    # to; while a trust-anchor removal is held, against the bundle held on to. The halt is
    # the attempt's, kept under the configuration the spec asks for.
    policy = RolloutPolicy.of(config, defaults)
    record = health.halt_state(config, desired.config_hash)
    if halt is not None and halt.rollback is not None:
        observed = _rollback_observation(view, config, desired, held, halt, now)
    else:
        rolled = desired if holding is None else defaults.restricted(holding)
        observed = _observation(view, rolled, config, config, now, desired.config_hash)
    upcoming = next_pass(replace(observed, anchors=_anchor_hold(anchors, holding)), record, policy)
    if held is None and holding is not None:
        held = defaults.restricted(holding)
    standing = view.standing(held or desired)  # one pass over the pods: the stale ones
    candidates = [w for w, states in sorted(standing.workloads.items()) if mesh.STALE in states]
    _, skipped = health.preflight_split(
        candidates, lambda w: w.kind, view.record, rollback.settled(config)
    )
    why_skipped = dict(skipped)
    stale = tuple(
        WorkloadLine(w, SKIPPED, {f"skipped: {why_skipped[w]}": pods})
        if w in why_skipped
        else WorkloadLine(w, mesh.STALE, standing.workloads[w][mesh.STALE])
        for w in candidates
        for pods in [sum(standing.workloads[w][mesh.STALE].values())]
    )
    records = [obj for objects in view.workloads.values() for obj in objects.values()]
    times = mesh.restart_times(records, desired.config_hash)
    last = rfc3339(max(times)) if times else None
    return ConfigStatus(
        name,
        target=str(desired.target),
        config_format=desired.config_format,
        linkerd_version=desired.linkerd_version,
        proxy_version=desired.proxy.version,
        config_hash=desired.config_hash,
        drifted=tuple(drifted(configmaps, held or desired)),
        missing=tuple(missing(configmaps, held or desired)),
        halted=() if halt is None else halt.failed,
        rolled_back=_rolled_back_line(halt, held),
        namespaces=standing.namespaces,
        stale=stale,
        conditions=conditions,
        rollout={
            "paused": policy.paused,
            "maxRestartsPerPass": policy.batch,
            "restartIntervalSeconds": policy.interval,
            "workloadsRestartedForThisConfiguration": len(times),
            "lastRestart": last,
            "restartedWorkloads": stored.get("restartedWorkloads"),
            "evictedPods": stored.get("evictedPods"),
            "statusConfigHash": stored.get("configHash"),
            "canary": canary.summary(
                policy.canary, Record.of(config).canary_of(desired.config_hash)
            ),
        },
        anchors=anchors,
        next_pass=upcoming,
    )


@dataclass(frozen=True)
class Pass:
    """One pass's restarts, as ``passes`` foresees them."""

    workloads: tuple[Workload, ...]
    canary: bool
    """Restarted as (part of) the canary, before it passed."""


MAX_PASSES = 100_000
"""``passes`` gives up after this many steps (a rollout of 100,000 passes is no plan)."""


def passes(
    observed: observe.Observed, record: health.HaltState, policy: RolloutPolicy
) -> tuple[list[Pass], actions.RolloutOutcome]:
    """The passes the rollout makes from ``observed`` when nothing else changes: the injector
    injecting, every restart healthy at once, the pace and the canary's stable time let run
    their course. Each is decided by ``step``, as the controller's are: what ``plan`` lists;
    and where the rollout then stands (``DONE``, or what it waits for)."""
    yes = observe.InjectorAnswer(True, "")
    done = Verdict("done")
    ready = list(observed.ready)
    restarted = {
        name: (replace(standing, verdict=done), workload)
        for name, (standing, workload) in observed.restarted.items()
    }
    seen = replace(
        observed, restarted=restarted, restart_times=(), last_eviction=None,
        pass_finished=None, injector=yes,
    )  # fmt: skip
    found: list[Pass] = []
    for _ in range(MAX_PASSES):
        seen = replace(seen, ready=tuple(ready))
        decided = machine.step(seen, record, policy)
        kept = [a.record for a in decided.actions if isinstance(a, actions.CanaryKept)]
        seen = replace(seen, canary_record=kept[-1] if kept else seen.canary_record)
        if (restart := decided.restart) is not None and decided.restarting is not None:
            found.append(Pass(restart.workloads, decided.restarting.canary.phase == Phase.CANARY))
            now = seen.now
            restarted = {
                **restarted,
                **{
                    str(w): (health.Restarted(str(w), now, done), w)
                    for w in restart.workloads
                    if w.kind != "Pod"
                },
            }
            ready = [w for w in ready if w not in restart.workloads]
            stale = tuple(w for w in seen.plan.workloads if w not in restart.workloads)
            seen = replace(
                seen, plan=replace(seen.plan, workloads=stale), restarted=restarted,
                now=now + max(policy.interval, 0.0), pass_finished=now,
            )  # fmt: skip
        elif decided.outcome.reason == Phase.CANARY and decided.outcome.requeue_after:
            seen = replace(seen, now=seen.now + decided.outcome.requeue_after)  # its clock
        else:
            break
    return found, decided.outcome
