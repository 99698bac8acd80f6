"""Whether a restarted workload came back: pure verdicts over a workload's cached state.

A restart is complete when the owner's own rollout is, decided the way ``kubectl rollout
status`` decides (kubectl ``pkg/polymorphichelpers/rollout_status.go``), and when the pods it
runs now carry the proxy the configuration asks for (a pod the injector missed is a failure,
not a success: linkerd2 #13702). A workload that is paused or already unhealthy before its
restart is not restarted at all (``preflight``): its trouble is not the new configuration's.

Everything here reads plain JSON (a cached owner, its pods' metadata) and returns a
``Verdict``; nothing waits, nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

from linkerd_config.kube import revisions
from linkerd_config.kube.conditions import condition
from linkerd_config.kube.resource import Json
from linkerd_config.kube.rollout_status import Verdict, observed, rollout_status
from linkerd_config.linkerd.halt_record import FIELD, Halt
from linkerd_config.linkerd.rollout import (
    RESTARTED_FOR_ANNOTATION,
    Workload,
    already_restarted,
    restart_time,
    unknown_owner,
)

W = TypeVar("W")


ON_DELETE_KINDS = frozenset({"StatefulSet", "DaemonSet"})
ON_DELETE_WHY = (
    "updateStrategy OnDelete: its controller replaces a pod only when the pod is deleted, so "
    "a restart would change nothing; delete its pods (or switch to RollingUpdate) to roll it"
)
"""Skipped, never restarted (issue 37, finding 5: an OnDelete StatefulSet or DaemonSet was
patched, nothing replaced its pods, and every rollout halted at its deadline). Restarting it
pod by pod under the gate would be deleting pods the owner chose to replace by hand."""


def preflight(kind: str, obj: Json, settled: str | None = None) -> str | None:
    """Why a workload must not be restarted now (None: it may be): paused, or already
    unhealthy, so a restart would not tell the new configuration's health from its own.

    An unhealthy workload whose pod template records our restart for a configuration other
    than ``settled`` (the last one whose rollout completed) is unhealthy because of an
    earlier attempt of ours, halted or rolled back short of it: restarting it onto the new
    configuration is what repairs it, so it is not skipped (else it would be, for ever)."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if kind in ON_DELETE_KINDS and (spec.get("updateStrategy") or {}).get("type") == "OnDelete":
        return ON_DELETE_WHY
    if kind == "Deployment" and spec.get("paused") is True:
        return "paused (spec.paused)"
    if not observed(obj):
        return None  # a change of its own in flight: its rollout status says more later
    template = ((spec.get("template") or {}).get("metadata") or {}).get("annotations") or {}
    ours = template.get(RESTARTED_FOR_ANNOTATION)
    if isinstance(ours, str) and ours and ours != settled:
        return None
    before = rollout_status(kind, obj)
    if before.failed:
        return f"already failing before its restart: {before.why}"
    if kind == "Deployment":
        available = condition(status, "Available")
        if available is not None and available.get("status") == "False":
            return f"not available before its restart: {available.get('message') or ''}".strip()
    if not before.done:
        return f"still rolling out a change of its own: {before.why}"
    return None


def preflight_split(
    workloads: Iterable[W],
    kind_of: Callable[[W], str],
    record: Callable[[W], Json | None],
    settled: str | None = None,
) -> tuple[list[W], list[tuple[W, str]]]:
    """Of the workloads a pass would restart, those that may be (one with no record, a bare
    pod, always may), and the others with why not. The executor and ``plan`` both ask;
    ``settled``: the last completed configuration's hash (``preflight``)."""
    ready: list[W] = []
    skipped: list[tuple[W, str]] = []
    for workload in workloads:
        kind = kind_of(workload)
        unknown = unknown_owner(kind)
        if unknown is not None:
            skipped.append((workload, unknown))
            continue
        obj = record(workload)
        why = None if obj is None else preflight(kind, obj, settled)
        if why is None:
            ready.append(workload)
        else:
            skipped.append((workload, why))
    return ready, skipped


def restart_verdict(kind: str, obj: Json, stale: Mapping[str, int]) -> Verdict:
    """A restarted workload's verdict: its own rollout's, and, once that is done, whether its
    running pods carry the desired proxy (``stale``: its pods that do not, counted by why).

    A finished rollout whose pods are not all on the desired proxy yet is still waiting, not
    failed: the pod cache may lag the workload's (they are separate watches), and old pods
    linger while they terminate. A pod the injector really missed stays so, and the deadline
    (``gate``) fails it."""
    own = rollout_status(kind, obj)
    if not own.done:
        return own
    left = sum(stale.values())
    if left:
        reasons = "; ".join(f"{why} ({n})" for why, n in sorted(stale.items()))
        return Verdict("waiting", f"{left} pod(s) not on the desired proxy yet: {reasons}")
    return Verdict("done")


EARLIER_REVISION = (
    "an earlier ReplicaSet's ReplicaFailure still shows on it (the Deployment controller "
    "copies it until that ReplicaSet is scaled down); this revision's pods are being created"
)


def revision_refusal(deployment: Json, replicasets: Iterable[Json]) -> str | None:
    """Why the newest revision of ``deployment`` (its ReplicaSets among those listed) has its
    pods refused (its own ``ReplicaFailure``), or None: no refusal of this revision, or no
    ReplicaSet of it listed (then nothing says this revision failed; the deadline still
    holds)."""
    found = revisions.newest(deployment, replicasets)
    refused = None if found is None else revisions.replica_failure(found)
    return None if refused is None else f"new pods refused: {refused}"


def of_this_revision(verdict: Verdict, refusal: str | None) -> Verdict:
    """A restart's verdict once the newest revision's own ``ReplicaFailure`` is known
    (``revision_refusal``): a refusal only of an earlier revision is a wait, not a failure."""
    if not verdict.replica_failure:
        return verdict
    if refusal is None:
        return Verdict("waiting", EARLIER_REVISION)
    return Verdict("failed", refusal)


@dataclass(frozen=True)
class Restarted:
    """A workload restarted for the configuration being rolled out, and how it stands."""

    name: str
    """How status and Events name it (``deployment/ns/name``)."""
    restarted_at: float
    verdict: Verdict


def restarted(
    records: Mapping[str, Mapping[str, Json]],
    config_hash: str,
    stale: Mapping[Workload, Mapping[str, int]],
    now: float,
) -> dict[str, tuple[Restarted, Workload]]:
    """The owners whose record says they were restarted for ``config_hash`` (``records``:
    kind -> ``namespace/name`` -> the cached owner), by name: how each stands
    (``restart_verdict``; ``stale``: each workload's pods not on the configuration yet, by
    why) and which it is. A record without a readable time starts its deadline ``now``. What
    the controller's pass and ``status`` both read."""
    found: dict[str, tuple[Restarted, Workload]] = {}
    for kind, objects in records.items():
        for key, obj in objects.items():
            if not already_restarted(obj, config_hash):
                continue
            workload = Workload(kind, *key.split("/", 1))
            verdict = restart_verdict(kind, obj, stale.get(workload) or {})
            at = restart_time(obj)
            standing = Restarted(str(workload), now if at is None else at, verdict)
            found[str(workload)] = (standing, workload)
    return found


def brought_back(
    workloads: Iterable[Workload],
    record: Callable[[Workload], Json | None],
    stale: Mapping[Workload, Mapping[str, int]],
    started: float,
) -> dict[str, tuple[Restarted, Workload]]:
    """How each workload a rollback brings back stands on the configuration gone back to
    (``record``: its cached owner; ``stale`` as for ``restarted``), its deadline from the
    rollback's start (``started``)."""
    found: dict[str, tuple[Restarted, Workload]] = {}
    for workload in workloads:
        obj = record(workload)
        if obj is not None:
            verdict = restart_verdict(workload.kind, obj, stale.get(workload) or {})
            found[str(workload)] = (Restarted(str(workload), started, verdict), workload)
    return found


@dataclass(frozen=True)
class Gate:
    """Whether the next pass may start: only when every workload restarted so far is done."""

    waiting: tuple[tuple[str, str], ...] = ()
    """(workload, what it waits for), not past its deadline."""
    failed: tuple[tuple[str, str], ...] = ()
    """(workload, why it failed): its own failure, or its deadline passed while waiting."""

    @property
    def open(self) -> bool:
        return not self.waiting and not self.failed


def gate(
    restarted: Iterable[Restarted],
    now: float,
    deadline: float,
    forgiven: frozenset[str] = frozenset(),
) -> Gate:
    """The rollout's gate over what it has restarted: a workload that failed, or is not done
    ``deadline`` seconds after its restart, fails the rollout; one still within it holds the
    next pass. ``forgiven`` workloads (failed before an explicit resume) hold nothing."""
    waiting: list[tuple[str, str]] = []
    failed: list[tuple[str, str]] = []
    for item in sorted(restarted, key=lambda r: r.name):
        if item.name in forgiven or item.verdict.done:
            continue
        if item.verdict.failed:
            failed.append((item.name, item.verdict.why))
        elif now - item.restarted_at >= deadline:
            failed.append(
                (item.name, f"not complete {go_duration(deadline)} after its restart: "
                 f"{item.verdict.why}")
            )  # fmt: skip
        else:
            waiting.append((item.name, item.verdict.why))
    return Gate(tuple(waiting), tuple(failed))


def go_duration(seconds: float) -> str:
    """As Go prints a time.Duration of whole seconds (10m0s, 1h0m0s, 30s)."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


# -- the halt: a small state kept in the LinkerdConfig's status, so any leader reads it -----

RESUME_ANNOTATION = "config.linkerd.io/resume-rollout"
"""Set (or changed) on a LinkerdConfig to resume its halted rollout, the failed workloads
forgiven: ``kubectl annotate lc NAME config.linkerd.io/resume-rollout=$(date +%s) --overwrite``."""
HALT_FIELD = FIELD
FORGIVEN_FIELD = "rolloutForgiven"


def _resume_token(config: Json) -> str:
    annotations = (config.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(RESUME_ANNOTATION, ""))


def _generation(config: Json) -> int:
    value = (config.get("metadata") or {}).get("generation")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass(frozen=True)
class HaltState:
    """Where a LinkerdConfig's rollout of ``config_hash`` stands as to halting."""

    halted: Halt | None
    """The halt in force (the status record as it stands), None if none."""
    forgiven: frozenset[str]
    """Workloads an explicit resume forgave: the gate holds nothing for them."""
    status: Json
    """What the status must say of it (a field set to None is removed)."""


def halt_state(config: Json, config_hash: str) -> HaltState:
    """Read the halt back from status. A halt holds for its configuration (``config_hash``:
    the one the spec asks for, whichever is rolled out meanwhile) and generation until the
    resume annotation changes (then its failed workloads are forgiven); a new generation or
    configuration is a new attempt, with nothing forgiven."""
    status = config.get("status") or {}
    stored = status.get(HALT_FIELD)
    record = Halt.parse(stored)
    generation = _generation(config)
    forgiven_record = status.get(FORGIVEN_FIELD)
    forgiven: frozenset[str] = frozenset()
    # Forgiven for this configuration and generation only: the resume's attempt. Kept by
    # hash alone, a workload forgiven once was forgiven in every later attempt of the hash
    # (the spec back to it, or only its rollout settings changed), and a rollout failing
    # on it again neither halted nor completed.
    if (
        isinstance(forgiven_record, Mapping)
        and forgiven_record.get("configHash") == config_hash
        and forgiven_record.get("generation") == generation
    ):
        forgiven = frozenset(str(w) for w in forgiven_record.get("workloads") or ())
    stale = {FORGIVEN_FIELD: None} if forgiven_record is not None and not forgiven else {}
    if record is None:
        return HaltState(
            None, forgiven, {HALT_FIELD: None, **stale} if stored is not None else stale
        )
    same = record.config_hash == config_hash and record.generation == generation
    if not same:
        return HaltState(None, frozenset(), {HALT_FIELD: None, FORGIVEN_FIELD: None})
    if record.resume_token == _resume_token(config):
        return HaltState(record, forgiven, stale)
    resumed = forgiven | {w.split(":", 1)[0] for w in record.failed}
    return HaltState(
        None,
        resumed,
        {
            HALT_FIELD: None,
            FORGIVEN_FIELD: {
                "configHash": config_hash,
                "generation": generation,
                "workloads": sorted(resumed)[:MAX_LISTED],
            },
        },
    )


MAX_LISTED: Final = 1000
"""The most failed (and forgiven) workloads status lists: the CRD's maxItems. A pass may
restart up to 10000, and a refusal fails all of them at once; the rest are counted in the
messages, and fail again after a resume that could not name them."""
MAX_FAILURE_CHARS: Final = 4096
"""The longest failure status keeps (the CRD's maxLength): the API server's reason for
refusing a pod is as long as the admission policy or webhook made it."""


def cut(text: str, limit: int) -> str:
    """``text``, or its first ``limit`` characters ending in an ellipsis."""
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def halt_record(
    config: Json, config_hash: str, failed: Iterable[tuple[str, str]], at: str, rolled: str = ""
) -> Halt:
    """The record of a new halt: what failed and why, for this configuration (the one the
    spec asks for), generation and resume token (within the CRD's bounds: else the API server
    refuses the status write, and the halt is never recorded); ``rolled``: the configuration
    whose rollout failed, when another (the bundle the trust-anchor guard held on to)."""
    listed = [cut(f"{name}: {why}", MAX_FAILURE_CHARS) for name, why in failed]
    return Halt(
        config_hash, _generation(config), _resume_token(config), tuple(listed[:MAX_LISTED]), at,
        rolled_hash="" if rolled == config_hash else rolled,
    )  # fmt: skip
