"""A canary first (``spec.rollout.canary``): the first pass of a rollout restarts only the
workloads the canary selects, and the rest begin once those have been healthy, continuously,
for ``stableFor``. Off unless set. Pure decisions; the executor asks ``decide`` on each pass.

The canary:

* is the first ``count`` workloads to restart (after the pre-flight) that it selects, in the
  rollout's own sorted order: an owner (Deployment, StatefulSet, DaemonSet) whose labels match
  ``selector`` in a namespace whose labels (its name as ``kubernetes.io/metadata.name``
  included) match ``namespaceSelector``; a bare pod is never one (it leaves no restart record,
  so its health cannot be followed), it waits with the rest;
* fails the way any restarted workload fails, through the health gate (``workload_health``):
  halted, or rolled back, as ``onFailure`` says; nothing here is special about it;
* is stable once every canary workload has been done (``workload_health.restart_verdict``)
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
for the same canary, generation and resume annotation: a changed spec or a resume (after a
halt nobody watched the canary through) starts its clock again. Passing is final for the
configuration; a new configuration has a canary of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

from linkerd_config.kube.labels import EVERYTHING, LabelSelector
from linkerd_config.kube.resource import Json, rfc3339
from linkerd_config.linkerd.formats.field_grammar import parse_go_duration
from linkerd_config.linkerd.rollout import NAMESPACE_NAME_LABEL, Workload
from linkerd_config.linkerd.workload_health import RESUME_ANNOTATION, Restarted, go_duration

FIELD: Final = "rolloutCanary"
"""The LinkerdConfig's status field that keeps the canary's state."""
DEFAULT_STABLE_FOR: Final = 300.0
"""Seconds (5m) a canary must stay healthy when ``stableFor`` is not set."""
MAX_COUNT: Final = 1000
MAX_STABLE_FOR: Final = 7 * 24 * 3600.0
"""``stableFor`` at most 168h: longer is a rollout nobody is waiting for."""
MAX_SELECTOR_CHARS: Final = 1024
MAX_RECORDED: Final = 1000
"""Canary workloads status names at most (more only when a canary is added to a rollout
under way: every workload restarted so far is one)."""

OFF, CANARY, PASSED, UNMATCHED = "off", "canary", "passed", "unmatched"

Labels = tuple[Mapping[str, str], Mapping[str, str]]
"""A workload's own labels, and its namespace's."""


def labels_of(workload: Json | None, namespace: Json | None) -> Labels | None:
    """A workload's labels and its namespace's (None when the workload is not known)."""
    if workload is None:
        return None
    return (
        (workload.get("metadata") or {}).get("labels") or {},
        ((namespace or {}).get("metadata") or {}).get("labels") or {},
    )


@dataclass(frozen=True)
class CanarySpec:
    """``spec.rollout.canary`` as the controller reads it (validated: see ``problems``)."""

    count: int = 1
    namespace_selector: LabelSelector = EVERYTHING
    selector: LabelSelector = EVERYTHING
    stable_for: float = DEFAULT_STABLE_FOR

    @classmethod
    def of(cls, section: Any) -> CanarySpec | None:
        """From an admitted ``spec.rollout.canary`` (None: no canary)."""
        if not isinstance(section, Mapping):
            return None
        stable_for = section.get("stableFor")
        return cls(
            count=int(section.get("count", 1)),
            namespace_selector=LabelSelector.parse(str(section.get("namespaceSelector", ""))),
            selector=LabelSelector.parse(str(section.get("selector", ""))),
            stable_for=DEFAULT_STABLE_FOR
            if stable_for is None
            else parse_go_duration(stable_for) / 1e9,
        )

    def selects(self, workload: Workload, labels: Labels | None) -> bool:
        """Whether ``workload`` (its labels and its namespace's; None: unknown) may be one."""
        if workload.kind == "Pod" or labels is None:
            return False
        own, namespace = labels
        return self.selector.matches(own) and self.namespace_selector.matches(
            {**namespace, NAMESPACE_NAME_LABEL: workload.namespace}
        )

    def described(self) -> str:
        """Its selectors, for people."""
        said = [
            f"{what} '{selector}'"
            for what, selector in (
                ("namespaceSelector", self.namespace_selector),
                ("selector", self.selector),
            )
            if not selector.everything
        ]
        return " and ".join(said) or "no selector (any workload)"


def problems(section: Any) -> list[tuple[str, str]]:
    """What is wrong with ``spec.rollout.canary`` (``(field, message)``; durations and string
    bounds are validation's own checks): the count, the selectors' grammar."""
    if section is None:
        return []
    where = "spec.rollout.canary"
    if not isinstance(section, Mapping):
        return [(where, "must be an object")]
    found: list[tuple[str, str]] = []
    count = section.get("count")
    if count is not None and (
        isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT
    ):
        found.append((f"{where}.count", f"{count!r} must be a whole number from 1 to {MAX_COUNT}"))
    for key in ("namespaceSelector", "selector"):
        text = section.get(key)
        if text is None:
            continue
        if not isinstance(text, str):
            found.append((f"{where}.{key}", "must be a label selector string, e.g. app=web"))
            continue
        try:
            LabelSelector.parse(text)
        except ValueError as exc:
            found.append((f"{where}.{key}", str(exc)))
    stable_for = section.get("stableFor")
    if isinstance(stable_for, str):
        try:
            seconds = parse_go_duration(stable_for) / 1e9
        except ValueError:
            seconds = 0.0  # validation's duration check says why
        if seconds > MAX_STABLE_FOR:
            found.append((f"{where}.stableFor", f"{stable_for!r} is longer than 168h"))
    return found


# -- the state, read back from status --------------------------------------------------------


def _time(value: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _generation(config: Json) -> int:
    value = (config.get("metadata") or {}).get("generation")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _resume_token(config: Json) -> str:
    annotations = (config.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(RESUME_ANNOTATION, ""))


@dataclass(frozen=True)
class CanaryRecord:
    """The canary's state in a LinkerdConfig's status (``status.rolloutCanary``): one typed
    value, read by ``parse`` and written by ``to_json``, nowhere else. Kept for its
    configuration, generation and resume annotation: the canary chosen so far, when it became
    healthy, when it passed."""

    config_hash: str
    generation: int
    resume_token: str
    workloads: tuple[str, ...]
    healthy_since: str = ""
    passed_at: str = ""

    @classmethod
    def parse(cls, value: object) -> CanaryRecord | None:
        """The record status holds, read leniently (a field of the wrong type reads as
        empty); None when it is no object."""
        if not isinstance(value, Mapping):
            return None
        generation = value.get("generation")
        workloads = value.get("workloads")
        return cls(
            str(value.get("configHash") or ""),
            generation if isinstance(generation, int) and not isinstance(generation, bool) else 0,
            str(value.get("resumeToken") or ""),
            tuple(str(w) for w in workloads) if isinstance(workloads, list | tuple) else (),
            str(value.get("healthySince") or ""),
            str(value.get("passedAt") or ""),
        )

    def to_json(self) -> Json:
        """The record as status keeps it (the CRD's ``rolloutCanary`` schema)."""
        found: Json = {
            "configHash": self.config_hash,
            "generation": self.generation,
            "resumeToken": self.resume_token,
            "workloads": list(self.workloads),
        }
        if self.healthy_since:
            found["healthySince"] = self.healthy_since
        if self.passed_at:
            found["passedAt"] = self.passed_at
        return found

    @property
    def passed(self) -> bool:
        return bool(self.passed_at)


def stored(config: Json, config_hash: str) -> CanaryRecord | None:
    """The canary's status record for ``config_hash``, if status keeps one."""
    record = CanaryRecord.parse((config.get("status") or {}).get(FIELD))
    return record if record is not None and record.config_hash == config_hash else None


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
    labels: Callable[[Workload], Labels | None],
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
        if str(workload) not in kept and spec.selects(workload, labels(workload)):
            kept.append(str(workload))
            wanted -= 1
    chosen = set(kept) - forgiven
    return sorted(kept), [w for w in todo if str(w) in chosen and str(w) not in done]


# -- deciding --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Canary:
    """What the canary lets this pass do, and what status must say of it."""

    phase: str
    """``OFF``, ``CANARY`` (the rest wait), ``PASSED`` (now or before) or ``UNMATCHED``."""
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
        return self.phase in (CANARY, UNMATCHED) and not self.restart

    @property
    def status(self) -> Json:
        """Status fields to write (``FIELD``: the record, or None to remove it)."""
        if self.remove:
            return {FIELD: None}
        return {} if self.record is None else {FIELD: self.record.to_json()}

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
    labels: Callable[[Workload], Labels | None],
    now: float,
) -> Canary:
    """The canary's part in this pass. ``record``: status's (``stored``/``newest``);
    ``restarted``: the owners restarted for ``config_hash``, with their verdicts; ``todo``:
    what the pass would restart after the pre-flight, in order (None: not asked, as while the
    gate waits: then nothing is chosen, the clock only kept or reset)."""
    had = (config.get("status") or {}).get(FIELD)
    if spec is None:
        return Canary(OFF, tuple(todo or ()), remove=had is not None)
    if record is not None and record.config_hash != config_hash:
        record = None
    if record is not None and record.passed:  # kept (written, if remembered, not read back)
        return Canary(PASSED, tuple(todo or ()), record.workloads, record=record)
    done = {r.name: r.verdict.done for r in restarted}
    so_far = canaries_so_far(record, done)
    now_restart: list[Workload] = []
    if todo is None:
        names = so_far
    else:
        names, now_restart = choose(spec, so_far, forgiven, todo, labels, done)
    counted = [n for n in names if n not in forgiven]
    base = CanaryRecord(
        config_hash, _generation(config), _resume_token(config), tuple(names[:MAX_RECORDED])
    )
    if not counted:
        if todo is None:
            return Canary(CANARY, (), tuple(names))
        message = (
            f"canary: no workload to restart matches {spec.described()}; nothing is restarted "
            "until one does (or spec.rollout.canary changes)"
        )
        return Canary(UNMATCHED, (), (), message, base)
    healthy = all(done.get(n, False) for n in counted)
    since = _since(record, base) if healthy else None
    if healthy and since is None:
        since = now
    record_now = replace(base, healthy_since=rfc3339(since, micro=True) if since else "")
    shown = _listed(counted)
    if since is not None and now - since >= spec.stable_for:
        message = (
            f"canary passed: {len(counted)} workload(s) healthy for "
            f"{go_duration(spec.stable_for)} ({shown}); the rest roll"
        )
        record_now = replace(record_now, passed_at=rfc3339(now, micro=True))
        return Canary(PASSED, tuple(todo or ()), tuple(names), message, record_now, passed_now=True)
    wait = f"the rest wait until it has been healthy for {go_duration(spec.stable_for)}"
    if now_restart:
        message = f"canary: restarting {_listed([str(w) for w in now_restart])} first; {wait}"
        return Canary(CANARY, tuple(now_restart), tuple(names), message, record_now)
    if since is not None:
        message = (
            f"canary: {len(counted)} workload(s) healthy for {go_duration(now - since)} of "
            f"{go_duration(spec.stable_for)} ({shown}); the rest wait"
        )
        return Canary(
            CANARY, (), tuple(names), message, record_now,
            requeue_after=since + spec.stable_for - now,
        )  # fmt: skip
    waiting = [n for n in counted if not done.get(n, False)]
    message = f"canary: {_listed(waiting)} not healthy yet; {wait}"
    return Canary(CANARY, (), tuple(names), message, record_now)


def _listed(names: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"


def _since(record: CanaryRecord | None, now_record: CanaryRecord) -> float | None:
    """When the canary became healthy, as status keeps it, if that still holds: the same
    canary, generation and resume annotation."""
    if record is None or not record.healthy_since:
        return None
    same = (record.generation, record.resume_token) == (
        now_record.generation,
        now_record.resume_token,
    ) and sorted(record.workloads) == list(now_record.workloads)
    return _time(record.healthy_since) if same else None


def summary(spec: CanarySpec | None, record: CanaryRecord | None) -> Json:
    """The canary for ``plan`` and ``status`` (``-o json``): settings and state."""
    if spec is None:
        return {"phase": OFF}
    found: Json = {
        "phase": PASSED if passed(record) else CANARY,
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
