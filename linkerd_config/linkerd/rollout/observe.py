"""What one pass of the rollout reads, the input of ``machine.step``: the injector's answer,
a rollback in force, the trust-anchor guard's hold, and ``Observed``, all plain values, built
by ``observed`` (and ``rollback_observed``) alike for the executor, ``plan`` and ``status``
from what each reads (``Caches``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from math import inf
from typing import Protocol

from linkerd_config.kube.resource import Json
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.mesh import RolloutPlan, Workload
from linkerd_config.linkerd.rollout import canary, health, rollback
from linkerd_config.linkerd.rollout.health import Restarted
from linkerd_config.linkerd.rollout.phase import Phase
from linkerd_config.linkerd.rollout.record import CanaryRecord, Completed, Halt
from linkerd_config.linkerd.spec import canary_section
from linkerd_config.linkerd.spec.crd import RolloutSpec

HEALTH_RECHECK = 5.0
"""While restarted workloads come back, look again at least this often (their informers
wake the reconcile on every change; this bounds the wait for a deadline to pass)."""


@dataclass(frozen=True)
class InjectorAnswer:
    """What a question to the injector found: whether it injects the configuration, what
    status says, and, when it was not asked, why (the fallback wait applies), or, when it
    answered that restarts must wait without end, the Warning's reason for that."""

    injects: bool
    """Whether it injects the configuration into ``admitted`` (at least one workload)."""
    why: str
    cause: str = ""
    held: str = ""
    retry_after: float = 2.0
    """When it does not inject: seconds until it is asked again."""
    admitted: tuple[Workload, ...] | None = None
    """Of the workloads asked for, those whose own pod, created (dry run) in their own
    namespace, came back with the configuration: only they may restart this pass. None: all
    of those asked (the fallback wait passed, or a question answered for all)."""
    refused: tuple[tuple[Workload, str], ...] = ()
    """Of the workloads asked for, those whose dry-run pod admission refused in their own
    namespace, and why: their new pods would be refused too. No progress, so a failure once
    refused for ``progressDeadline`` (``Observed.refused_since``, its own clock)."""


@dataclass(frozen=True)
class GoingBack:
    """What a rollback in force reads (``onFailure: Rollback``): the configuration the
    ConfigMap went back to, and the workloads to bring back onto it."""

    to_hash: str
    """The configuration the ConfigMap holds now (the failed one's own hash when it cannot
    go back: status no longer records the target, or it no longer renders)."""
    to_version: str
    pending: tuple[Workload, ...]
    """Owners still recording the failed configuration: to bring back, listed or not."""
    workloads: tuple[Workload, ...]
    """Those and the ones the rollback record lists: health-gated once none is pending."""
    due: tuple[Workload, ...] = ()
    """Of ``pending``, those not tried in the last ``HEALTH_RECHECK`` seconds."""
    next_try: float = HEALTH_RECHECK
    """Seconds until the first of the others is due."""
    brought_back: tuple[Restarted, ...] = ()
    """How ``workloads`` stand on the configuration gone back to (read once none is
    pending), each one's deadline from its own restore."""
    since_restores: float = float("inf")
    """Seconds since this process last tried a restore of this rollback (the pace's clock:
    a rollback restores no faster than the rollout restarts)."""


@dataclass(frozen=True)
class AnchorHold:
    """The trust-anchor guard's answer this pass (``guard.evaluate``) when it
    holds a removal some meshed pod still needs."""

    waits_for: str
    """The hold, as ``ConfigMapSynced`` says it: what it drops, the pods that still need it."""
    holding_hash: str | None
    """The configuration that keeps every anchor in use (the spec with the bundle held on
    to), written and rolled out meanwhile; None when there is none: nothing may restart."""


@dataclass(frozen=True)
class Observed:
    """What one pass of one configuration's rollout read (the caches, and what it asked the
    API server and the injector): plain values, built by ``observed``."""

    config: Json
    """The LinkerdConfig as cached."""
    config_hash: str
    version: str
    """The proxy version the configuration gives a pod."""
    now: float
    """Wall time."""
    plan: RolloutPlan
    """The stale opted-in workloads."""
    restarted: Mapping[str, tuple[Restarted, Workload]] = field(default_factory=dict)
    """The owners restarted for this configuration, by name: how each stands (its
    ``ReplicaFailure`` checked against the revision our restart made)."""
    restart_times: tuple[float, ...] = ()
    """When each owner restarted for this configuration was restarted."""
    evicted: int = 0
    """Bare pods evicted for this configuration."""
    last_eviction: float | None = None
    pass_finished: float | None = None
    """When this process's last pass finished sending its restarts."""
    ready: tuple[Workload, ...] = ()
    """The stale workloads not restarted yet that the pre-flight lets restart, in order ..."""
    skipped: tuple[tuple[Workload, str], ...] = ()
    """... and the others, with why not."""
    labels: Mapping[Workload, canary_section.Labels | None] = field(default_factory=dict)
    """Of ``ready``, each one's labels and its namespace's (the canary's selectors; read
    only when the spec has a canary)."""
    canary_record: CanaryRecord | None = None
    """The canary's record: status's, or the one this process wrote and has not read back."""
    injector: InjectorAnswer | None = None
    """The injector's answer this pass; None: not asked yet."""
    going_back: GoingBack | None = None
    """While a rollback is in force: what it reads (``config_hash`` and ``version`` are the
    failed configuration's, ``plan`` the stale workloads of the one gone back to)."""
    anchors: AnchorHold | None = None
    """The trust-anchor guard's hold, when it holds a removal (None: it does not)."""
    asked_hash: str = ""
    """The configuration the spec asks for, when ``config_hash`` is another: the bundle the
    trust-anchor guard holds on to meanwhile (empty: ``config_hash`` itself)."""
    refused_since: Mapping[str, float] = field(default_factory=dict)
    """By workload: since when (wall time) the answers about it have refused its new pods
    without a break (absent: the last answer about it did not). Each workload's own clock:
    one refused a minute says nothing of another refused only now."""
    completed_at: float | None = None
    """When this configuration's rollout last completed (``status.lastCompleted``), None
    while it has not: what was restarted before is no evidence after it, and a workload
    stale again since is re-meshed (``mesh.due``)."""
    halted_revisions: Mapping[Workload, bool] = field(default_factory=dict)
    """While a halt is in force: its failed Deployments, and those with pods without the
    proxy, still on the revision our restart made, each with whether going back from it
    would create pods (``rollback.undo_makes_pods``): those come back without the proxy
    unless the injector injects, so the injector is asked first (the Mesh rule); the others
    only scale down."""
    back_to: tuple[Completed | None, str] = field(kw_only=True)
    """Where a failure of this attempt rolls back to (``rollback.target``: the last
    completed configuration, its recorded spec checked as the webhook checks one), or None
    and why it cannot: read by the observer, so the step judges no spec itself."""

    @property
    def attempt(self) -> str:
        """The configuration the attempt's halt is kept under: the one the spec asks for,
        whichever is rolled out (a halt on the bundle held on to outlives the hold)."""
        return self.asked_hash or self.config_hash

    @property
    def held_on_to(self) -> str:
        """How messages say the configuration rolled out is the bundle held on to ("")."""
        return rolled_instead(self.config_hash, self.attempt)

    @property
    def onto(self) -> str:
        """The configuration this pass would restart (or bring back) workloads onto."""
        return self.config_hash if self.going_back is None else self.going_back.to_hash

    @property
    def counts(self) -> tuple[int, int, int]:
        """Stale workloads, restarts for this configuration (owners and bare pods), bare pods."""
        return (len(self.plan.workloads), len(self.restart_times) + self.evicted, self.evicted)


def rollback_pass(
    halt: Halt,
    pending: Iterable[Workload],
    to_hash: str,
    to_version: str,
    tried: Mapping[str, float],
    now: float,
) -> GoingBack:
    """What a rollback pass reads, but how the workloads brought back stand (the caller
    reads that when ``gated``): every owner still recording the failed configuration
    (``pending``) goes back, listed or not (the record's list is bounded; the owners' records
    are the truth); the listed ones and those are health-gated. ``tried``: when each was last
    tried (on ``now``'s clock): tried again ``HEALTH_RECHECK`` later at the soonest."""
    section = halt.rollback
    named = () if section is None else section.workloads
    listed = [w for w in map(rollback.parse_workload, named) if w]
    waiting = sorted(pending)
    due = [w for w in waiting if now - tried.get(str(w), float("-inf")) >= HEALTH_RECHECK]
    waits = [tried[str(w)] + HEALTH_RECHECK - now for w in waiting if str(w) in tried]
    return GoingBack(
        to_hash, to_version, tuple(waiting), tuple(sorted({*listed, *waiting})), tuple(due),
        min(waits, default=HEALTH_RECHECK), since_restores=now - max(tried.values(), default=-inf),
    )  # fmt: skip


def gated(back: GoingBack, failed_hash: str, halt: Halt) -> bool:
    """Whether a rollback pass health-gates the workloads brought back (``brought_back``):
    none is pending, there is a configuration to go back to, and it is not rolled back yet."""
    section = halt.rollback
    return (
        not back.pending
        and back.to_hash != failed_hash
        and (section is None or section.phase != Phase.ROLLED_BACK)
    )


def rollback_observed(
    config: Json, halt: Halt, failed_version: str, now: float, plan: RolloutPlan, back: GoingBack
) -> Observed:
    """A rollback pass's observation: ``config_hash`` and ``version`` are the failed
    configuration's (``halt``'s: the one rolled out when it failed), ``plan`` the stale
    workloads of the one gone back to."""
    return Observed(
        config, halt.rolled, failed_version, now, plan, going_back=back,
        asked_hash=halt.config_hash, back_to=(None, "a rollback is in force"),
    )  # fmt: skip


class Caches(Protocol):
    """What a pass reads of owners and namespaces: the executor's informers, or the view
    ``plan`` and ``status`` read once."""

    def record(self, workload: Workload) -> Json | None: ...
    def namespace(self, name: str) -> Json | None: ...


def observed(
    caches: Caches,
    config: Json,
    config_hash: str,
    version: str,
    now: float,
    plan: RolloutPlan,
    *,
    restarted: Mapping[str, tuple[Restarted, Workload]],
    restart_times: Iterable[float],
    evicted: int,
    last_eviction: float | None = None,
    pass_finished: float | None = None,
    canary_record: CanaryRecord | None,
    back_to: tuple[Completed | None, str],
    asked: str = "",
) -> Observed:
    """What a pass of ``config_hash``'s rollout reads, from ``caches`` and what the caller
    read or remembers besides: the workloads still to restart (``mesh.pending``) split by
    the pre-flight, and their labels when the spec has a canary."""
    completed_at = rollback.completed_at(config, config_hash)
    pending = mesh.pending(plan.workloads, caches.record, config_hash, completed_at)
    ready, skipped = health.preflight_split(
        pending, lambda w: w.kind, caches.record, rollback.settled(config)
    )
    labels = {}
    if RolloutSpec.of(config).canary is not None:
        labels = {
            w: canary.labels_of(caches.record(w), caches.namespace(w.namespace)) for w in ready
        }
    return Observed(
        config, config_hash, version, now, plan, restarted, tuple(restart_times), evicted,
        last_eviction, pass_finished, tuple(ready), tuple(skipped),
        labels, canary_record, completed_at=completed_at, asked_hash=asked, back_to=back_to,
    )  # fmt: skip


def rolled_instead(rolled: str, asked: str) -> str:
    """What messages add when the configuration rolled out (``rolled``) is not the one the
    spec asks for (``asked``): it is the bundle the trust-anchor guard holds on to."""
    if rolled == asked:
        return ""
    return f" (configuration {rolled}, the trust bundle held on to)"
