"""Which meshed pods run an outdated proxy, and how to restart them safely.

Pure decisions over cached metadata; the controller executes them. The policy:

* a candidate is a Running pod labelled ``config.linkerd.io/reconcile: auto`` outside any
  namespace labelled ``config.linkerd.io/admission-webhooks: disabled``;
* it is stale when its proxy version (the injector's ``linkerd.io/proxy-version``
  annotation, else the ``linkerd-proxy`` container's image tag) differs from the desired one;
* a pod or namespace that pins ``config.linkerd.io/proxy-version`` is never stale:
  restarting it would give it the pinned version again, forever;
* the owner is restarted, not the pod (Deployment via its ReplicaSet, StatefulSet,
  DaemonSet: a pod-template annotation, as ``kubectl rollout restart``); a pod with no such
  owner is evicted, so PodDisruptionBudgets hold;
* each workload is restarted once per configuration: the template annotation carries the
  configuration's hash, so a controller restart or a new leader never restarts it again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]

RECONCILE_LABEL = "config.linkerd.io/reconcile"
RECONCILE_AUTO = "auto"
WEBHOOKS_LABEL = "config.linkerd.io/admission-webhooks"
PIN_ANNOTATION = "config.linkerd.io/proxy-version"
PROXY_VERSION_ANNOTATION = "linkerd.io/proxy-version"
RESTARTED_FOR_ANNOTATION = "config.linkerd.io/restarted-for"
PROXY_CONTAINER = "linkerd-proxy"

CANDIDATE_LABEL_SELECTOR = f"{RECONCILE_LABEL}={RECONCILE_AUTO}"
RUNNING_FIELD_SELECTOR = "status.phase=Running"

RESTARTABLE_KINDS = ("Deployment", "StatefulSet", "DaemonSet")


def pod_projection(pod: Json) -> Json:
    """The only parts of a pod the decision reads: ~2 KiB instead of ~28 KiB per pod."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    proxy = [
        {"name": c.get("name"), "image": c.get("image")}
        for c in spec.get("containers") or []
        if c.get("name") == PROXY_CONTAINER
    ]
    return {
        "metadata": {
            k: meta[k]
            for k in (
                "name",
                "namespace",
                "uid",
                "labels",
                "annotations",
                "ownerReferences",
                "resourceVersion",
                "deletionTimestamp",
            )
            if k in meta
        },
        "spec": {"containers": proxy},
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }


def proxy_version(pod: Json) -> str | None:
    annotations = pod["metadata"].get("annotations") or {}
    if annotations.get(PROXY_VERSION_ANNOTATION):
        return str(annotations[PROXY_VERSION_ANNOTATION])
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == PROXY_CONTAINER and ":" in str(container.get("image", "")):
            return str(container["image"]).rsplit(":", 1)[1]
    return None


def is_candidate(pod: Json, namespace: Json | None) -> bool:
    meta = pod["metadata"]
    if (meta.get("labels") or {}).get(RECONCILE_LABEL) != RECONCILE_AUTO:
        return False
    if meta.get("deletionTimestamp"):
        return False
    if (pod.get("status") or {}).get("phase") != "Running":
        return False
    ns_labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    return ns_labels.get(WEBHOOKS_LABEL) != "disabled"


def is_pinned(pod: Json, namespace: Json | None) -> bool:
    pod_annotations = pod["metadata"].get("annotations") or {}
    ns_annotations = ((namespace or {}).get("metadata") or {}).get("annotations") or {}
    return PIN_ANNOTATION in pod_annotations or PIN_ANNOTATION in ns_annotations


def is_stale(pod: Json, namespace: Json | None, desired_version: str) -> bool:
    if not is_candidate(pod, namespace) or is_pinned(pod, namespace):
        return False
    return proxy_version(pod) != desired_version


@dataclass(frozen=True, order=True)
class Workload:
    """What to restart: an owner (kind Deployment/StatefulSet/DaemonSet) or a bare ``Pod``."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind.lower()}/{self.namespace}/{self.name}"


def _controller_of(obj: Json) -> Json | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def owning_workload(pod: Json, replicaset: Callable[[str, str], Json | None]) -> Workload:
    """Follow controller references up to a restartable workload; else the pod itself."""
    ns = pod["metadata"]["namespace"]
    ref = _controller_of(pod)
    if ref is not None and ref.get("kind") == "ReplicaSet":
        rs = replicaset(ns, ref["name"])
        parent = _controller_of(rs) if rs is not None else None
        if parent is not None and parent.get("kind") == "Deployment":
            return Workload("Deployment", ns, parent["name"])
    elif ref is not None and ref.get("kind") in ("StatefulSet", "DaemonSet"):
        return Workload(str(ref["kind"]), ns, ref["name"])
    return Workload("Pod", ns, pod["metadata"]["name"])


@dataclass(frozen=True)
class RolloutPlan:
    stale_pods: int
    workloads: tuple[Workload, ...]
    """Distinct owners of stale pods, sorted for a stable order across passes."""


def plan_rollout(
    pods: Iterable[Json],
    namespaces: Mapping[str, Json],
    desired_version: str,
    replicaset: Callable[[str, str], Json | None],
) -> RolloutPlan:
    stale = [
        p for p in pods if is_stale(p, namespaces.get(p["metadata"]["namespace"]), desired_version)
    ]
    workloads = sorted({owning_workload(p, replicaset) for p in stale})
    return RolloutPlan(len(stale), tuple(workloads))


def restart_patch(config_hash: str) -> Json:
    """A merge patch of the pod template, like ``kubectl rollout restart`` but keyed by the
    configuration: applying it twice for one hash is a no-op, so it never restarts twice."""
    return {
        "spec": {"template": {"metadata": {"annotations": {RESTARTED_FOR_ANNOTATION: config_hash}}}}
    }


def already_restarted(workload_obj: Json, config_hash: str) -> bool:
    template = (workload_obj.get("spec") or {}).get("template") or {}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    return annotations.get(RESTARTED_FOR_ANNOTATION) == config_hash
