"""A canary first (``spec.rollout.canary``): the first pass of a rollout restarts only the
workloads the canary selects, and the rest begin once those have been healthy, continuously,
for ``stableFor``. Off unless set. Pure decisions; the executor asks ``decide`` on each pass.

The canary:

* is the first ``count`` workloads to restart (after the pre-flight) that it selects, in the
  rollout's own sorted order: an owner (Deployment, StatefulSet, DaemonSet) whose labels match
  ``selector`` in a namespace whose labels (its name as ``kubernetes.io/metadata.name``
  included) match ``namespaceSelector``; a bare pod is never one (it leaves no restart record,
  so its health cannot be followed), it waits with the rest;
* fails the way any restarted workload fails, through the health gate (``rollout.health``):
  halted, or rolled back, as ``onFailure`` says; nothing here is special about it;
* is stable once every canary workload has been done (``health.restart_verdict``)
  continuously for ``stableFor``, as the controller saw it on each pass; one not done resets
  the clock. Then it has passed, for this configuration, once and for all: the rest roll.

When no workload to restart matches the selectors, nothing is restarted: the rollout holds
(reason ``CanaryUnmatched``) until one does or the spec changes; proceeding without the canary
that was asked for would restart everything with no canary at all. When fewer than ``count``
match, those that do are the canary.

State lives in the cluster, so a new leader continues. Which workloads are the canary is
read back from their restart records (every owner restarted for this configuration before the
canary passed is one: it is what the rest wait for) and from ``status.rolloutCanary`` (the
canary chosen, when it has been healthy since, when it passed). "Healthy since" holds only
for the same canary workloads and resume annotation: a resume (after a halt nobody watched
the canary through) starts its clock again, and so does a changed canary (a count raised, a
selector that picks another before the canary restarted). No other edit does: the clock is
a fact about those workloads' health, which no setting changes, and an edit of
``spec.rollout`` alone (paused, the pace, the deadline, ``stableFor``: a new generation, the
same attempt) restarting it made a canary wait ``stableFor`` again for nothing new (issue 58,
finding 4). A selector changed once the canary restarted changes no workload of it (every
owner restarted for the configuration before it passed is one), so it keeps the clock too.
Passing is final for the configuration; a new configuration has a canary of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from linkerd_config.kube.resource import Json, go_seconds, rfc3339, unix_time
from linkerd_config.linkerd.mesh import Workload
from linkerd_config.linkerd.rollout.health import Restarted
from linkerd_config.linkerd.rollout.phase import Phase
from linkerd_config.linkerd.rollout.record import (
    CanaryRecord,
    Part,
    Record,
    generation,
    resume_token,
)
from linkerd_config.linkerd.spec.canary_section import CanarySpec, Labels
from linkerd_config.linkerd.spec.crd import CANARY_MAX_RECORDED

SUMMARY_OFF, SUMMARY_CANARY, SUMMARY_PASSED = "off", "canary", "passed"
"""The words of ``summary``'s ``phase`` (``plan`` and ``status -o json``): what is said of
the canary, not a phase of the rollout (those are ``Phase``)."""


def labels_of(workload: Json | None, namespace: Json | None) -> Labels | None:
    """A workload's labels and its namespace's (None when the workload is not known)."""
    if workload is None:
        return None
    return (
        (workload.get("metadata") or {}).get("labels") or {},
        ((namespace or {}).get("metadata") or {}).get("labels") or {},
    )


# -- the state, read back from status --------------------------------------------------------


def passed(record: CanaryRecord | None) -> bool:
    return record is not None and record.passed


def newest(record: CanaryRecord | None, remembered: CanaryRecord | None) -> CanaryRecord | None:
    """Status's record, or the passed one this process wrote and has not read back yet (the
    rest's restarts must not look like a larger canary in between)."""
    if (
        remembered is not None
        and remembered.passed
        and not passed(record)
        and (record is None or record.config_hash == remembered.config_hash)
    ):
        return remembered
    return record


# -- choosing ------------------------------------------------------------------------------


def canaries_so_far(record: CanaryRecord | None, restarted: Iterable[str]) -> list[str]:
    """The canary as the cluster records it: the workloads status names, and every owner
    restarted for this configuration (before the canary passes, only canaries are)."""
    named = () if record is None else record.workloads
    return sorted({*named, *restarted})


def choose(
    spec: CanarySpec,
    so_far: Sequence[str],
    forgiven: frozenset[str],
    todo: Sequence[Workload],
    labels: Mapping[Workload, Labels | None],
    restarted: Iterable[str] = (),
) -> tuple[list[str], list[Workload]]:
    """The canary (names, sorted) and which of ``todo`` to restart now for it: those already
    chosen (``so_far``) or ``restarted`` for this configuration (one chosen but neither
    restarted nor in ``todo`` any more is dropped), grown to ``count`` (the forgiven not
    counting) with the first of ``todo`` it selects."""
    pending = {str(w) for w in todo}
    done = set(restarted)
    kept = [name for name in sorted({*so_far, *done}) if name in done or name in pending]
    counted = [name for name in kept if name not in forgiven]
    wanted = spec.count - len(counted)
    for workload in todo:
        if wanted <= 0:
            break
        if str(workload) not in kept and spec.selects(workload, labels.get(workload)):
            kept.append(str(workload))
            wanted -= 1
    chosen = set(kept) - forgiven
    return sorted(kept), [w for w in todo if str(w) in chosen and str(w) not in done]


# -- deciding --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Canary:
    """What the canary lets this pass do, and what status must say of it."""

    phase: Phase | None
    """``Phase.CANARY`` (the canary restarts, or the rest wait for it), or
    ``Phase.CANARY_UNMATCHED`` (no workload to restart matches it); None: it holds nothing
    (no canary, or it passed)."""
    restart: tuple[Workload, ...] = ()
    """Of the workloads the pass would restart, those it may."""
    workloads: tuple[str, ...] = ()
    """The canary."""
    message: str = ""
    record: CanaryRecord | None = None
    """The record this pass keeps in status."""
    remove: bool = False
    """No canary (any more): status's record, if any, is removed."""
    requeue_after: float | None = None
    passed_now: bool = False
    """It passed on this pass (said once: an Event)."""

    @property
    def holds(self) -> bool:
        """Nothing may be restarted now: the rest wait for the canary (or for one to match)."""
        return self.phase is not None and not self.restart

    @property
    def passed(self) -> bool:
        """It has passed, for this configuration (now or before)."""
        return self.record is not None and self.record.passed

    @property
    def parts(self) -> dict[str, Part]:
        """The record's part to write (the canary's, or its removal)."""
        if self.remove:
            return {"canary": None}
        return {} if self.record is None else {"canary": self.record}

    @property
    def note(self) -> str:
        """The message, to follow another (a leading space), or nothing."""
        return f" {self.message}" if self.message else ""


def decide(
    spec: CanarySpec | None,
    config: Json,
    config_hash: str,
    record: CanaryRecord | None,
    restarted: Iterable[Restarted],
    forgiven: frozenset[str],
    todo: Sequence[Workload] | None,
    labels: Mapping[Workload, Labels | None],
    now: float,
) -> Canary:
    """The canary's part in this pass. ``record``: status's (``stored``/``newest``);
    ``restarted``: the owners restarted for ``config_hash``, with their verdicts; ``todo``:
    what the pass would restart after the pre-flight, in order (None: not asked, as while the
    gate waits: then nothing is chosen, the clock only kept or reset)."""
    had = "canary" in Record.of(config).present
    if spec is None:
        return Canary(None, tuple(todo or ()), remove=had)
    if record is not None and record.config_hash != config_hash:
        record = None
    if record is not None and record.passed:  # kept (written, if remembered, not read back)
        return Canary(None, tuple(todo or ()), record.workloads, record=record)
    done = {r.name: r.verdict.done for r in restarted}
    so_far = canaries_so_far(record, done)
    now_restart: list[Workload] = []
    if todo is None:
        names = so_far
    else:
        names, now_restart = choose(spec, so_far, forgiven, todo, labels, done)
    counted = [n for n in names if n not in forgiven]
    base = CanaryRecord(
        config_hash, generation(config), resume_token(config), tuple(names[:CANARY_MAX_RECORDED])
    )
    if not counted:
        if todo is None:
            return Canary(Phase.CANARY, (), tuple(names))
        message = (
            f"canary: no workload to restart matches {spec.described()}; nothing is restarted "
            "until one does (or spec.rollout.canary changes)"
        )
        return Canary(Phase.CANARY_UNMATCHED, (), (), message, base)
    healthy = all(done.get(n, False) for n in counted)
    since = _since(record, base) if healthy else None
    if healthy and since is None:
        since = now
    record_now = replace(base, healthy_since=rfc3339(since, micro=True) if since else "")
    shown = _listed(counted)
    if since is not None and now - since >= spec.stable_for:
        message = (
            f"canary passed: {len(counted)} workload(s) healthy for "
            f"{go_seconds(spec.stable_for)} ({shown}); the rest roll"
        )
        record_now = replace(record_now, passed_at=rfc3339(now, micro=True))
        return Canary(None, tuple(todo or ()), tuple(names), message, record_now, passed_now=True)
    wait = f"the rest wait until it has been healthy for {go_seconds(spec.stable_for)}"
    if now_restart:
        message = f"canary: restarting {_listed([str(w) for w in now_restart])} first; {wait}"
        return Canary(Phase.CANARY, tuple(now_restart), tuple(names), message, record_now)
    if since is not None:
        message = (
            f"canary: {len(counted)} workload(s) healthy for {go_seconds(now - since)} of "
            f"{go_seconds(spec.stable_for)} ({shown}); the rest wait"
        )
        return Canary(
            Phase.CANARY, (), tuple(names), message, record_now,
            requeue_after=since + spec.stable_for - now,
        )  # fmt: skip
    waiting = [n for n in counted if not done.get(n, False)]
    message = f"canary: {_listed(waiting)} not healthy yet; {wait}"
    return Canary(Phase.CANARY, (), tuple(names), message, record_now)


def _listed(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"


def _since(record: CanaryRecord | None, now_record: CanaryRecord) -> float | None:
    """When the canary became healthy, as status keeps it, if that still holds: the same
    canary workloads and resume annotation (not the generation: see the module's
    docstring)."""
    if record is None or not record.healthy_since:
        return None
    same = record.resume_token == now_record.resume_token and sorted(record.workloads) == list(
        now_record.workloads
    )
    return unix_time(record.healthy_since) if same else None


def summary(spec: CanarySpec | None, record: CanaryRecord | None) -> Json:
    """The canary for ``plan`` and ``status`` (``-o json``): settings and state."""
    if spec is None:
        return {"phase": SUMMARY_OFF}
    found: Json = {
        "phase": SUMMARY_PASSED if passed(record) else SUMMARY_CANARY,
        "count": spec.count,
        "namespaceSelector": str(spec.namespace_selector),
        "selector": str(spec.selector),
        "stableForSeconds": spec.stable_for,
        "workloads": [] if record is None else list(record.workloads),
    }
    if record is not None and record.healthy_since:
        found["healthySince"] = record.healthy_since
    if record is not None and record.passed_at:
        found["passedAt"] = record.passed_at
    return found
