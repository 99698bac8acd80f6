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

from linkerd_config.kube.resource import Json, go_seconds
from linkerd_config.kube.rollout_status import (
    Verdict,
    observed,
    restart_blocked,
    rollout_status,
    unsteady,
)
from linkerd_config.linkerd.mesh import (
    RESTARTED_FOR_ANNOTATION,
    Workload,
    already_restarted,
    restart_time,
    restore_time,
    unknown_owner,
)
from linkerd_config.linkerd.rollout.record import (
    Forgiven,
    Halt,
    Part,
    Record,
    fields,
    generation,
    resume_token,
)

W = TypeVar("W")


def preflight(kind: str, obj: Json, settled: str | None = None) -> str | None:
    """Why a workload must not be restarted now (None: it may be): paused, or already
    unhealthy, so a restart would not tell the new configuration's health from its own.

    An unhealthy workload whose pod template records our restart for a configuration other
    than ``settled`` (the last one whose rollout completed) is unhealthy because of an
    earlier attempt of ours, halted or rolled back short of it: restarting it onto the new
    configuration is what repairs it, so it is not skipped (else it would be, for ever).

    An OnDelete StatefulSet or DaemonSet is skipped, never restarted (issue 37, finding 5: one
    was patched, nothing replaced its pods, and every rollout halted at its deadline);
    restarting it pod by pod would be deleting pods the owner chose to replace by hand."""
    blocked = restart_blocked(kind, obj)
    if blocked is not None:
        return blocked
    if not observed(obj):
        return None  # a change of its own in flight: its rollout status says more later
    spec = obj.get("spec") or {}
    template = ((spec.get("template") or {}).get("metadata") or {}).get("annotations") or {}
    ours = template.get(RESTARTED_FOR_ANNOTATION)
    if isinstance(ours, str) and ours and ours != settled:
        return None
    found = unsteady(kind, obj)
    if found is None:
        return None
    said = {
        "failing": f"already failing before its restart: {found.why}",
        "unavailable": f"not available before its restart: {found.why}".strip(),
        "rolling": f"still rolling out a change of its own: {found.why}",
    }
    return said[found.state]


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


OUT_OF_MESH = "out of the mesh"
"""How a restart's failure begins when the pods it made run without Linkerd's proxy."""


def out_of_mesh(
    kind: str, obj: Json, verdict: Verdict, unmeshed: Mapping[str, int], newest: str | None
) -> Verdict:
    """A restarted workload's verdict once its pods without a proxy are counted (``unmeshed``:
    by controller, a Deployment's by ReplicaSet): the pods its restart made (the newest
    ReplicaSet's, ``newest``, when it was read; else, once its own rollout is done, all of
    them) running without the proxy are this attempt's evidence that the restart took it out
    of the mesh, a failure at once, not a wait for the deadline. A pod of an earlier revision
    without a proxy (created while the injector was down, before our restart) is not."""
    if verdict.failed or not unmeshed:
        return verdict
    if kind == "Deployment" and newest is not None:
        count = unmeshed.get(newest, 0)
    elif rollout_status(kind, obj).done:
        count = sum(unmeshed.values())
    else:
        return verdict
    if not count:
        return verdict
    return Verdict(
        "failed",
        f"{OUT_OF_MESH}: {count} pod(s) its restart made run without Linkerd's proxy (the "
        "injector did not inject them: down, timed out or not injecting in its namespace "
        "when they were created)",
    )


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
    unmeshed: Mapping[Workload, Mapping[str, int]] | None = None,
) -> dict[str, tuple[Restarted, Workload]]:
    """The owners whose record says they were restarted for ``config_hash`` (``records``:
    kind -> ``namespace/name`` -> the cached owner), by name: how each stands
    (``restart_verdict``; ``stale``: each workload's pods not on the configuration yet, by
    why; ``unmeshed``: its pods without a proxy, ``out_of_mesh``, a Deployment's counted once
    its rollout is done: the executor asks its newest ReplicaSet before) and which it is. A
    record without a readable time starts its deadline ``now``. What the controller's pass
    and ``status`` both read."""
    found: dict[str, tuple[Restarted, Workload]] = {}
    for kind, objects in records.items():
        for key, obj in objects.items():
            if not already_restarted(obj, config_hash):
                continue
            workload = Workload(kind, *key.split("/", 1))
            verdict = restart_verdict(kind, obj, stale.get(workload) or {})
            verdict = out_of_mesh(kind, obj, verdict, (unmeshed or {}).get(workload) or {}, None)
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
    (``record``: its cached owner; ``stale`` as for ``restarted``), its deadline from its own
    restore as the workload records it (``mesh.restore_time``), never from before the
    rollback's start (``started``; nor when no time is readable: then from the start). Issue
    58, finding 7: counted from the start, a workload restored once the injector injected
    the old proxy again, 40 s later, was past a 30 s deadline half a second after its
    restore (a false ``RollbackNotHealthy`` Warning)."""
    found: dict[str, tuple[Restarted, Workload]] = {}
    for workload in workloads:
        obj = record(workload)
        if obj is not None:
            verdict = restart_verdict(workload.kind, obj, stale.get(workload) or {})
            at = max(restore_time(obj) or started, started)
            found[str(workload)] = (Restarted(str(workload), at, verdict), workload)
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
                (item.name, f"not complete {go_seconds(deadline)} after its restart: "
                 f"{item.verdict.why}")
            )  # fmt: skip
        else:
            waiting.append((item.name, item.verdict.why))
    return Gate(tuple(waiting), tuple(failed))


# -- the halt: a small state kept in the LinkerdConfig's status, so any leader reads it -----


@dataclass(frozen=True)
class HaltState:
    """Where a LinkerdConfig's rollout of ``config_hash`` stands as to halting."""

    halted: Halt | None
    """The halt in force (the status record as it stands), None if none."""
    forgiven: frozenset[str]
    """Workloads an explicit resume forgave: the gate holds nothing for them."""
    parts: Mapping[str, Part]
    """What the record must say of it (a part set to None is removed)."""

    @property
    def status(self) -> Json:
        return fields(**self.parts)


def halt_state(config: Json, config_hash: str) -> HaltState:
    """Read the halt back from status. A halt holds for its attempt: its configuration
    (``config_hash``: the one the spec asks for, whichever is rolled out meanwhile) and the
    resume annotation; when the annotation changes, its failed workloads are forgiven; a new
    configuration is a new attempt, with nothing forgiven. The generation is no part of the
    attempt: an edit of ``spec.rollout`` alone (paused, the pace, the deadline) bumps it but
    not the configuration hash, and ends no halt nor rollback (issue 58, finding 4: read as
    a new attempt, ``paused: true`` dropped a rollback, and the ConfigMap went back to the
    failed proxy). A record's generation says when it was written, for people."""
    found = Record.of(config)
    halt, kept = found.halt, found.forgiven
    forgiven: frozenset[str] = frozenset()
    # Forgiven for this configuration only: another one clears the record (``stale``), so
    # the spec back to this one later forgives nothing, while an edit of spec.rollout alone
    # keeps them forgiven (the resume's attempt goes on).
    if kept is not None and kept.config_hash == config_hash:
        forgiven = frozenset(kept.workloads)
    stale: dict[str, Part] = (
        {"forgiven": None} if "forgiven" in found.present and not forgiven else {}
    )
    if halt is None:
        cleared: dict[str, Part] = {"halt": None} if "halt" in found.present else {}
        return HaltState(None, forgiven, {**cleared, **stale})
    if halt.config_hash != config_hash:
        return HaltState(None, frozenset(), {"halt": None, "forgiven": None})
    if halt.resume_token == resume_token(config):
        return HaltState(halt, forgiven, stale)
    resumed = forgiven | {w.split(":", 1)[0] for w in halt.failed}
    listed = tuple(sorted(resumed)[:MAX_LISTED])
    return HaltState(
        None,
        resumed,
        {"halt": None, "forgiven": Forgiven(config_hash, generation(config), listed)},
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
        config_hash, generation(config), resume_token(config), tuple(listed[:MAX_LISTED]), at,
        rolled_hash="" if rolled == config_hash else rolled,
    )  # fmt: skip
