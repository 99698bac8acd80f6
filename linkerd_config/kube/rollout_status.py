"""A workload's own rollout, as ``kubectl rollout status`` reads it (kubectl's
``rollout_status.go``, per kind): done, still waiting (and for what), or failed. Pure functions
over one object; nothing here knows who changed the workload or why."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal

from linkerd_config.kube import revisions
from linkerd_config.kube.conditions import condition
from linkerd_config.kube.resource import Json

State = Literal["done", "waiting", "failed"]

TIMED_OUT: Final = "ProgressDeadlineExceeded"
"""The reason the Deployment controller gives ``Progressing=False`` past its deadline."""


@dataclass(frozen=True)
class Verdict:
    """A workload's restart: done, still waiting (``why``: what it waits for), or failed
    (``why``: what a person reads in status and the Event)."""

    state: State
    why: str = ""
    replica_failure: bool = False
    """Failed on the Deployment's ``ReplicaFailure`` condition, which the Deployment
    controller copies from any of its ReplicaSets, the new one first, then older ones: it
    says nothing of which revision failed until the newest ReplicaSet is asked
    (``revisions.replica_failure`` of ``revisions.newest``)."""

    @property
    def done(self) -> bool:
        return self.state == "done"

    @property
    def failed(self) -> bool:
        return self.state == "failed"


EARLIER_REVISION: Final = (
    "an earlier ReplicaSet's ReplicaFailure still shows on it (the Deployment controller "
    "copies it until that ReplicaSet is scaled down); this revision's pods are being created"
)


def of_newest_revision(verdict: Verdict, deployment: Json, replicasets: Iterable[Json]) -> Verdict:
    """A Deployment's verdict once its newest revision (among ``replicasets``) is asked:
    only that ReplicaSet's own ``ReplicaFailure`` fails it; a refusal that only an earlier
    revision shows is a wait (the Deployment controller copies it until that one is scaled
    down), and so is a newest revision not listed yet."""
    if not verdict.replica_failure:
        return verdict
    found = revisions.newest(deployment, replicasets)
    refused = None if found is None else revisions.replica_failure(found)
    if refused is None:
        return Verdict("waiting", EARLIER_REVISION)
    return Verdict("failed", f"new pods refused: {refused}")


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def observed(obj: Json) -> bool:
    """The controller has seen the newest spec (for a StatefulSet, seen anything at all)."""
    generation = _int((obj.get("metadata") or {}).get("generation"))
    observed = _int((obj.get("status") or {}).get("observedGeneration"))
    return observed > 0 and generation <= observed


def rollout_status(kind: str, obj: Json) -> Verdict:
    """The owner's own rollout, as ``kubectl rollout status`` reads it."""
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    if kind == "Deployment":
        return _deployment(spec, status, observed(obj))
    if kind == "StatefulSet":
        return _statefulset(spec, status, observed(obj))
    if kind == "DaemonSet":
        return _daemonset(status, observed(obj))
    raise ValueError(f"no rollout status for kind {kind!r}")


def _deployment(spec: Json, status: Json, observed: bool) -> Verdict:
    if not observed:
        return Verdict("waiting", "the Deployment controller has not seen the restart yet")
    progressing = condition(status, "Progressing")
    if progressing is not None and progressing.get("reason") == TIMED_OUT:
        return Verdict("failed", _deadline_message(status, progressing))
    refused = revisions.replica_failure({"status": status})
    if refused is not None:
        return Verdict("failed", f"new pods refused: {refused}", replica_failure=True)
    wanted = _int(spec.get("replicas"), 1)
    updated = _int(status.get("updatedReplicas"))
    if updated < wanted:
        return Verdict("waiting", f"{updated} of {wanted} new replicas updated")
    old = _int(status.get("replicas")) - updated
    if old > 0:
        return Verdict("waiting", f"{old} old replica(s) pending termination")
    available = _int(status.get("availableReplicas"))
    if available < updated:
        return Verdict("waiting", f"{available} of {updated} updated replicas available")
    return Verdict("done")


def _deadline_message(status: Json, progressing: Json) -> str:
    available = _int(status.get("availableReplicas"))
    updated = _int(status.get("updatedReplicas"))
    detail = progressing.get("message") or "no progress"
    return f"{available} of {updated} new pod(s) available: {detail} ({TIMED_OUT})"


def _statefulset(spec: Json, status: Json, observed: bool) -> Verdict:
    strategy = spec.get("updateStrategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        # OnDelete: a restart changes nothing until someone deletes the pods, and kubectl
        # cannot tell either; ``preflight`` skips such a workload, so none of ours waits here.
        return Verdict("done")
    if not observed:
        return Verdict("waiting", "the StatefulSet controller has not seen the restart yet")
    wanted = _int(spec.get("replicas"), 1)
    ready = _int(status.get("readyReplicas"))
    if ready < wanted:
        return Verdict("waiting", f"{wanted - ready} pod(s) not ready")
    partition = _int(((strategy.get("rollingUpdate") or {}).get("partition")), -1)
    if partition >= 0:
        updated = _int(status.get("updatedReplicas"))
        if updated < wanted - partition:
            return Verdict("waiting", f"{updated} of {wanted - partition} new pods updated")
        return Verdict("done")
    if status.get("updateRevision") != status.get("currentRevision"):
        updated = _int(status.get("updatedReplicas"))
        return Verdict("waiting", f"{updated} pod(s) at revision {status.get('updateRevision')}")
    return Verdict("done")


def _daemonset(status: Json, observed: bool) -> Verdict:
    if not observed:
        return Verdict("waiting", "the DaemonSet controller has not seen the restart yet")
    desired = _int(status.get("desiredNumberScheduled"))
    updated = _int(status.get("updatedNumberScheduled"))
    if updated < desired:
        return Verdict("waiting", f"{updated} of {desired} new pods scheduled")
    available = _int(status.get("numberAvailable"))
    if available < desired:
        return Verdict("waiting", f"{available} of {desired} updated pods available")
    return Verdict("done")


ON_DELETE_KINDS: Final = frozenset({"StatefulSet", "DaemonSet"})
ON_DELETE_WHY: Final = (
    "updateStrategy OnDelete: its controller replaces a pod only when the pod is deleted, so "
    "a restart would change nothing; delete its pods (or switch to RollingUpdate) to roll it"
)


def restart_blocked(kind: str, obj: Json) -> str | None:
    """Why a change of ``obj``'s pod template (``kubectl rollout restart``) would roll none of
    its pods now: an OnDelete update strategy, or a paused Deployment. None: it would."""
    spec = obj.get("spec") or {}
    if kind in ON_DELETE_KINDS and (spec.get("updateStrategy") or {}).get("type") == "OnDelete":
        return ON_DELETE_WHY
    if kind == "Deployment" and spec.get("paused") is True:
        return "paused (spec.paused)"
    return None


@dataclass(frozen=True)
class Unsteady:
    """How a workload is not steady and healthy, and what its status says of it."""

    state: Literal["failing", "unavailable", "rolling"]
    why: str


def unsteady(kind: str, obj: Json) -> Unsteady | None:
    """How ``obj`` is not steady and healthy, as ``kubectl rollout status`` and a
    Deployment's ``Available`` condition tell it: failing, not available, or still rolling
    out a change. None: it is steady."""
    status = rollout_status(kind, obj)
    if status.failed:
        return Unsteady("failing", status.why)
    if kind == "Deployment":
        available = condition(obj.get("status") or {}, "Available")
        if available is not None and available.get("status") == "False":
            return Unsteady("unavailable", str(available.get("message") or ""))
    if not status.done:
        return Unsteady("rolling", status.why)
    return None
