"""Which meshed pods run an outdated proxy, and how to restart them safely.

Pure decisions over cached metadata; the controller executes them. The policy:

* a candidate is a Running pod labelled ``config.linkerd.io/reconcile: auto`` outside any
  namespace labelled ``config.linkerd.io/admission-webhooks: disabled``;
* it is stale when its proxy version (the injector's ``linkerd.io/proxy-version``
  annotation, else the ``linkerd-proxy`` container's image tag, in ``containers`` or, as a
  native sidecar, ``initContainers``) differs from the desired one, or, where Linkerd stamps
  pods with it, when its ``linkerd.io/trust-root-sha256`` differs from the trust bundle's;
  what "desired" is belongs to the config format (:class:`DesiredProxy`);
* a pod or namespace that pins ``config.linkerd.io/proxy-version`` is never stale by version:
  restarting it would give it the pinned version again, forever;
* namespaces Linkerd's injector never injects (``kube-system``, ``cert-manager`` from 2.12)
  hold no candidates;
* neither does a pod without a proxy that the injector would not inject if it were created
  again (``linkerd.io/inject`` disabled on it, or enabled on neither it nor its namespace, as
  Linkerd's ``pkg/inject`` decides): a restart would bring it no proxy, so it could never be
  up to date (before, it counted stale, was restarted on every change, and halted every
  rollout at its deadline). An unmeshed pod the injector *would* mesh (one created while the
  injector was down) stays stale: its restart meshes it;
* with ``--restart-namespace-selector``, neither do namespaces it does not select (a
  platform team keeps the controller out of namespaces it never manages; RBAC then grants
  the restart only in those it does, see manifests/components/restart-namespaces);
* the owner is restarted, not the pod (Deployment via its ReplicaSet, StatefulSet,
  DaemonSet: a pod-template annotation, as ``kubectl rollout restart``); a pod with no owner
  at all is evicted, so PodDisruptionBudgets hold; a pod whose owner is of any other kind (an
  Argo Rollouts ``Rollout``'s ReplicaSet, a Job) is skipped with why (``unknown_owner``):
  evicting it would replace it outside the health gate;
* each workload is restarted once per configuration: the template annotation carries the
  configuration's hash, so a controller restart or a new leader never restarts it again;
* the record on the workloads is the truth about a rollout: how many were restarted for a
  configuration, and when the last pass was (``restarted-at``), so the batch size and the
  interval between passes hold under any event traffic and across leaders.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from linkerd_config.kube import revisions
from linkerd_config.kube.field_tree import reads
from linkerd_config.kube.labels import EVERYTHING, LabelSelector
from linkerd_config.kube.resource import Json, Keyed, rfc3339, split_key, unix_time
from linkerd_config.kube.shared_records import SharedRecords

RECONCILE_LABEL = "config.linkerd.io/reconcile"
RECONCILE_AUTO = "auto"
WEBHOOKS_LABEL = "config.linkerd.io/admission-webhooks"
PIN_ANNOTATION = "config.linkerd.io/proxy-version"
PROXY_VERSION_ANNOTATION = "linkerd.io/proxy-version"
RESTARTED_FOR_ANNOTATION = "config.linkerd.io/restarted-for"
RESTARTED_AT_ANNOTATION = "config.linkerd.io/restarted-at"
RESTORED_AT_ANNOTATION = "config.linkerd.io/restored-at"
"""When a rollback last brought a Deployment back to a previous revision's pod template
(``restore_patch``), on the Deployment's own metadata: the template must stay that
revision's exactly (else the Deployment controller makes a new ReplicaSet, whose pods must
be admitted anew, instead of scaling the old one up), so no stamp can go on it."""
TRUST_ROOT_ANNOTATION = "linkerd.io/trust-root-sha256"
INJECT_ANNOTATION = "linkerd.io/inject"
"""Linkerd's opt-in to injection, on a pod (its template) or its namespace."""
INJECT_ENABLING = frozenset({"enabled", "ingress"})
INJECT_VALID = INJECT_ENABLING | {"disabled"}
PROXY_CONTAINER = "linkerd-proxy"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The API server sets it on every namespace to the namespace's name (immutable, from
Kubernetes 1.21): a selector over it lists namespaces by name."""
RESTART_SELECTOR_FLAG = "--restart-namespace-selector"

CANDIDATE_LABEL_SELECTOR = f"{RECONCILE_LABEL}={RECONCILE_AUTO}"
RUNNING_FIELD_SELECTOR = "status.phase=Running"

RESTARTABLE_KINDS = ("Deployment", "StatefulSet", "DaemonSet")


@dataclass(frozen=True)
class DesiredProxy:
    """What an up-to-date meshed pod carries, as the cluster's Linkerd decides it.

    The config format builds it from what it wrote (see ``formats``); this module only
    compares pods against it.
    """

    version: str
    """The proxy version the injector gives a pod that pins none."""
    trust_root_sha256: str | None = None
    """SHA-256 (hex) of the trust bundle the injector stamps on pods; None where Linkerd
    does not stamp it (before edge-22.9.1 / stable-2.12.1)."""
    excluded_namespaces: frozenset[str] = frozenset()
    """Namespaces the injector's webhook never sees: their pods are never candidates."""
    restart_namespaces: LabelSelector = EVERYTHING
    """Not Linkerd's but the controller's (``--restart-namespace-selector``): pods in a
    namespace it does not select are never candidates either."""

    def restarting_in(self, selector: LabelSelector) -> DesiredProxy:
        """The same configuration, restarting only in the namespaces ``selector`` selects."""
        return replace(self, restart_namespaces=selector)

    def verdict(self, pod: Json, namespace: Json | None) -> PodState | None:
        """Where a pod stands against this configuration, and why; None for a pod that is no
        candidate at all (not opted in, not Running, going away). The controller restarts
        the owners of ``STALE`` pods; ``plan`` and ``status`` report the rest."""
        if not _candidate(pod):
            return None
        excluded = self.excluded_why(pod, namespace) or not_meshable(pod, namespace)
        if excluded is not None:
            return PodState(EXCLUDED, excluded)
        mismatch = self.mismatch(pod, namespace)
        if mismatch is not None:
            return PodState(STALE, mismatch)
        pinned = pinned_by(pod, namespace)
        if pinned is not None:
            return PodState(PINNED, pinned)
        return PodState(UP_TO_DATE, f"proxy version {self.version}")

    def stale_reason(self, pod: Json, namespace: Json | None) -> str | None:
        """``verdict``'s reason when it is ``STALE``, else None; the controller's hot path
        (every pod, every change), so it builds no verdict for the others."""
        if not _candidate(pod) or self.excluded_why(pod, namespace) is not None:
            return None
        if not_meshable(pod, namespace) is not None:
            return None
        return self.mismatch(pod, namespace)

    def excluded_why(self, pod: Json, namespace: Json | None) -> str | None:
        """Why a pod's namespace is out of every rollout, or None."""
        ns = pod["metadata"]["namespace"]
        ns_labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
        if ns_labels.get(WEBHOOKS_LABEL) == "disabled":
            return f"namespace {ns} is labelled {WEBHOOKS_LABEL}=disabled"
        if ns in self.excluded_namespaces:
            return f"Linkerd's proxy injector never sees namespace {ns}"
        if not selected_for_restarts(ns, namespace, self.restart_namespaces):
            return (
                f"namespace {ns} is not selected by {RESTART_SELECTOR_FLAG} "
                f"'{self.restart_namespaces}'"
            )
        return None

    def mismatch(self, pod: Json, namespace: Json | None) -> str | None:
        """How an injected pod differs from what it should carry ("proxy version edge-1 →
        edge-2", "trust root changed"), or None."""
        if pinned_by(pod, namespace) is None:
            running = proxy_version(pod)
            if running != self.version:
                return f"proxy version {running or 'unknown'} → {self.version}"
        if self.trust_root_sha256 is not None:
            annotations = pod["metadata"].get("annotations") or {}
            if annotations.get(TRUST_ROOT_ANNOTATION) != self.trust_root_sha256:
                return "trust root changed"
        return None


UP_TO_DATE, STALE, PINNED, EXCLUDED = "up-to-date", "stale", "pinned", "excluded"
PROXY_STATES = (UP_TO_DATE, STALE, PINNED, EXCLUDED)
"""Where an opted-in, Running pod stands: only a stale one is ever restarted."""


@dataclass(frozen=True)
class PodState:
    state: str
    """One of ``PROXY_STATES``."""
    reason: str
    """Why, for people: "proxy version edge-1 → edge-2", "trust root changed", "pinned by
    config.linkerd.io/proxy-version on its namespace", ..."""


POD_LABELS = (RECONCILE_LABEL,)
POD_ANNOTATIONS = (
    PROXY_VERSION_ANNOTATION,
    TRUST_ROOT_ANNOTATION,
    PIN_ANNOTATION,
    INJECT_ANNOTATION,
)
"""The only labels and annotations of a pod any decision here reads."""


_SHARED: SharedRecords[tuple[object, ...], Any] = SharedRecords(4096)
"""Distinct label sets, annotation sets and controller references shared among cached pods."""


def _kept(mapping: Json | None, keys: tuple[str, ...]) -> Json:
    """The listed entries, values interned, the dict itself shared (``_SHARED``)."""
    entries = tuple((k, str(mapping[k])) for k in keys if k in mapping) if mapping else ()
    kept: Json = _SHARED.get(entries, lambda: {k: sys.intern(v) for k, v in entries})
    return kept


_CONTAINERS = ("initContainers", "containers")
_PROXY = ("name", "image")

POD_FIELDS: tuple[str | tuple[str, ...], ...] = (
    "metadata.deletionTimestamp",
    "metadata.ownerReferences.controller",
    "metadata.ownerReferences.kind",
    "metadata.ownerReferences.name",
    *(("metadata", "labels", key) for key in POD_LABELS),
    *(("metadata", "annotations", key) for key in POD_ANNOTATIONS),
    *(("spec", kind, part) for kind in _CONTAINERS for part in _PROXY),
    "status.phase",
)
"""What ``pod_projection`` reads besides the name and namespace: all a protobuf decoder
builds of a pod."""


@reads(*POD_FIELDS)
def pod_projection(pod: Json) -> Json:
    """The only parts of a pod the decisions read (a few hundred bytes instead of ~28 KiB):
    name and namespace, the opt-in label, the proxy annotations, the controller reference,
    and, from a whole pod (the injector's dry-run answer), its proxy containers and phase.
    No uid or resourceVersion: no decision reads them, and at 50,000 pods they are 7 MiB (the
    informer tells changes apart by content then; see its contract on recreated objects)."""
    meta = pod.get("metadata") or {}
    kept: Json = {k: meta[k] for k in ("name", "deletionTimestamp") if k in meta}
    if "namespace" in meta:
        kept["namespace"] = sys.intern(meta["namespace"])
    kept["labels"] = _kept(meta.get("labels"), POD_LABELS)
    kept["annotations"] = _kept(meta.get("annotations"), POD_ANNOTATIONS)
    owner = revisions.controller_ref(pod)
    if owner is not None:
        kind, name = str(owner.get("kind")), str(owner.get("name"))
        kept["ownerReferences"] = _SHARED.get(
            ("ownerReferences", kind, name),
            lambda: [{"kind": sys.intern(kind), "name": sys.intern(name), "controller": True}],
        )
    projected: Json = {"metadata": kept}
    spec = pod.get("spec") or {}
    proxy = {
        kind: [
            {"name": c.get("name"), "image": c.get("image")}
            for c in spec.get(kind) or []
            if c.get("name") == PROXY_CONTAINER
        ]
        for kind in _CONTAINERS
    }
    if any(proxy.values()):
        projected["spec"] = {kind: found for kind, found in proxy.items() if found}
    if "status" in pod:
        projected["status"] = {"phase": (pod.get("status") or {}).get("phase")}
    return projected


RUNNING: Json = {"phase": "Running"}
"""Shared by every cached pod (never mutated)."""


@reads(*POD_FIELDS)
def running_pod_metadata(pod: Json) -> Json:
    """A pod served as metadata only (PartialObjectMetadata) by an informer whose field
    selector is ``status.phase=Running``: the API server lists and watches only Running pods
    (one that stops running arrives as deleted), so Running is what its phase is. Every
    decision is made from metadata: Linkerd's injector stamps ``linkerd.io/proxy-version``
    on every pod it injects (pkg/inject, edge-19.12 to edge-26).

    A pod with a controller is cached without its name and namespace, which its key holds
    (the informer keys what it lists and watches as served), and shares its record with the
    pods transformed just before it that agree on all the rest (``_RECENT``, the last 256): the
    replicas of one ReplicaSet, and the pods of like workloads in other namespaces. Only a
    pod that is its own workload (``owning_workload``), or one being deleted, keeps its name
    and namespace and a record of its own. ``cached_pods`` reads each whole again."""
    projected = pod_projection(pod)  # a new dict each time: ours to finish
    projected["status"] = RUNNING
    meta = projected["metadata"]
    if "ownerReferences" not in meta or "deletionTimestamp" in meta:
        return projected
    del meta["name"]
    meta.pop("namespace", None)
    (owner,) = meta["ownerReferences"]
    spec = projected.get("spec") or {}
    same = (
        owner["kind"],
        owner["name"],
        tuple(meta["labels"].items()),
        tuple(meta["annotations"].items()),
        tuple((kind, c["name"], c["image"]) for kind in _CONTAINERS for c in spec.get(kind, ())),
    )
    shared: Json = _RECENT.get(same, lambda: projected)
    return shared


_RECENT: SharedRecords[tuple[object, ...], Json] = SharedRecords(256, recent=True)
"""Records of the opted-in pods transformed last, by what they hold, for the pods after them
to share: a list gives a ReplicaSet's pods one after another (their names begin with its
name), and a rollout restarts them together. Bounded small, so a cluster of one pod per
owner (nothing to share) pays a few KiB for it, not a table entry per pod."""


def cached_pods(items: Iterable[Keyed]) -> Iterator[Json]:
    """The opted-in pods as the decisions read them, from the cache's (key, record) pairs:
    a shared record (``running_pod_metadata``) with the name and namespace its key holds,
    made as it is read, so a decision that iterates once (the controller's plan) never holds
    them all (at 50,000 pods, the 20 MiB the sharing saves); a record of a pod's own as it
    is. ``plan`` and ``status`` (``LinkerdCaches.view``) make them all, once a command."""
    for key, record in items:
        meta = record["metadata"]
        if "namespace" in meta:
            yield record
            continue
        namespace, name = split_key(key)
        yield {**record, "metadata": {**meta, "namespace": namespace, "name": name}}


@reads(*(f for f in POD_FIELDS if isinstance(f, tuple) or f.startswith("metadata.")))
def replicaset_projection(rs: Json) -> Json:
    """A ReplicaSet as ``owning_workload`` reads it: identity and its controller reference."""
    return pod_projection({"metadata": rs.get("metadata") or {}})


def proxy_version(pod: Json) -> str | None:
    annotations = pod["metadata"].get("annotations") or {}
    if annotations.get(PROXY_VERSION_ANNOTATION):
        return str(annotations[PROXY_VERSION_ANNOTATION])
    spec = pod.get("spec") or {}
    # Linkerd's own order (pkg/k8s GetProxyVersion): a native sidecar first.
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        image = str(container.get("image", ""))
        if container.get("name") == PROXY_CONTAINER and ":" in image.rsplit("/", 1)[-1]:
            return image.rsplit(":", 1)[1]
    return None


def injection_refused(pod: Json, namespace: Json | None) -> str | None:
    """Why Linkerd's injector would not inject ``pod`` if it were created now, by its
    ``linkerd.io/inject`` annotations, or None: the webhook's rule in ``pkg/inject``
    (``report.go``, edge-19.12.3 to edge-26.8.3; ``ingress`` enables from 2.9, an invalid
    value disables)."""
    on_pod = (pod["metadata"].get("annotations") or {}).get(INJECT_ANNOTATION, "")
    ns_meta = (namespace or {}).get("metadata") or {}
    on_ns = (ns_meta.get("annotations") or {}).get(INJECT_ANNOTATION, "")
    for where, value in (("its namespace", on_ns), ("the pod", on_pod)):
        if value and value not in INJECT_VALID:
            return f"{INJECT_ANNOTATION}={value!r} on {where} is not a value Linkerd accepts"
    if on_ns in INJECT_ENABLING:
        if on_pod == "disabled":
            return f"{INJECT_ANNOTATION}=disabled on the pod"
        return None
    if on_pod not in INJECT_ENABLING:
        return f"{INJECT_ANNOTATION} enabled on neither the pod nor its namespace"
    return None


def not_meshable(pod: Json, namespace: Json | None) -> str | None:
    """Why an opted-in pod is out of every rollout because it has no proxy and a restart
    would bring it none, or None (it is meshed, or its restart would mesh it)."""
    if proxy_version(pod) is not None:
        return None
    refused = injection_refused(pod, namespace)
    if refused is None:
        return None
    return (
        f"not meshed, and Linkerd's injector would not mesh it ({refused}): a restart adds no proxy"
    )


def _candidate(pod: Json) -> bool:
    """Opted in, Running, not going away (its namespace aside)."""
    meta = pod["metadata"]
    return (
        (meta.get("labels") or {}).get(RECONCILE_LABEL) == RECONCILE_AUTO
        and not meta.get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") == "Running"
    )


def selected_for_restarts(name: str, namespace: Json | None, selector: LabelSelector) -> bool:
    """May the controller restart workloads in namespace ``name`` (its object ``namespace``,
    None when not cached)? Its labels, and its name as the API server labels it, against
    ``selector``."""
    if selector.everything:
        return True
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    return selector.matches({**labels, NAMESPACE_NAME_LABEL: name})


def pinned_by(pod: Json, namespace: Json | None) -> str | None:
    """Where ``config.linkerd.io/proxy-version`` pins a pod's proxy (the pod, else its
    namespace), or None when nothing pins it."""
    pod_annotations = pod["metadata"].get("annotations") or {}
    ns_annotations = ((namespace or {}).get("metadata") or {}).get("annotations") or {}
    for where, found in (("the pod", pod_annotations), ("its namespace", ns_annotations)):
        if PIN_ANNOTATION in found:
            return f"pinned to {found[PIN_ANNOTATION]} by {PIN_ANNOTATION} on {where}"
    return None


@dataclass(frozen=True, order=True)
class Workload:
    """What to restart: an owner (kind Deployment/StatefulSet/DaemonSet) or a bare ``Pod``."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind.lower()}/{self.namespace}/{self.name}"


def owning_workload(pod: Json, replicaset: Callable[[str, str], Json | None]) -> Workload:
    """Follow controller references up to the pod's workload: a Deployment (through its
    ReplicaSet), a StatefulSet or a DaemonSet, which the rollout restarts; a pod with no
    controller at all is its own workload (``Pod``: evicted). Any other controller (a
    ReplicaSet of no Deployment, or of an Argo Rollouts ``Rollout``; a Job; a CloneSet) is
    named as the workload, of its kind, and never restarted (``unknown_owner``); so is a
    ReplicaSet the cache does not hold yet, until it does (its pod is not evicted on a guess)."""
    ns = pod["metadata"]["namespace"]
    ref = revisions.controller_ref(pod)
    if ref is None:
        return Workload("Pod", ns, pod["metadata"]["name"])
    kind, name = str(ref.get("kind")), str(ref.get("name"))
    if kind == "ReplicaSet":
        rs = replicaset(ns, name)
        parent = revisions.controller_ref(rs) if rs is not None else None
        if parent is not None:
            return Workload(str(parent.get("kind")), ns, str(parent.get("name")))
    return Workload(kind, ns, name)


def unknown_owner(kind: str) -> str | None:
    """Why the rollout never restarts the pods of a workload of ``kind``, or None when it
    does: a kind it cannot restart and watch come back (evicting the pods would replace them
    outside the health gate, the replacements never checked)."""
    if kind in RESTARTABLE_KINDS or kind == "Pod":
        return None
    return (
        f"owned by a {kind}, which linkerd-config does not restart: evicting its pods would "
        "replace them outside the health gate; restart it with its own tool"
    )


@dataclass(frozen=True)
class RolloutPlan:
    stale_pods: int
    workloads: tuple[Workload, ...]
    """Distinct owners of stale pods, sorted for a stable order across passes."""
    reasons: Mapping[Workload, Mapping[str, int]] = field(default_factory=dict)
    """Why each is restarted: its stale pods, counted by reason."""
    unmeshed: Mapping[Workload, Mapping[str, int]] = field(default_factory=dict)
    """Opted-in workloads with Running pods that carry no proxy at all (outside the
    namespaces no rollout touches), their pods counted by controller (a Deployment's by
    ReplicaSet): of a workload restarted for the configuration, the evidence that a restart
    took it out of the mesh (``health.out_of_mesh``)."""


def plan_rollout(
    pods: Iterable[Json],
    namespaces: Mapping[str, Json],
    desired: DesiredProxy,
    replicaset: Callable[[str, str], Json | None],
) -> RolloutPlan:
    reasons: dict[Workload, dict[str, int]] = {}
    unmeshed: dict[Workload, dict[str, int]] = {}
    stale = 0
    for pod in pods:
        namespace = namespaces.get(pod["metadata"]["namespace"])
        if proxy_version(pod) is None and _unmeshed_candidate(pod, namespace, desired):
            owner = revisions.controller_ref(pod) or {}
            by_owner = unmeshed.setdefault(owning_workload(pod, replicaset), {})
            name = str(owner.get("name") or pod["metadata"]["name"])
            by_owner[name] = by_owner.get(name, 0) + 1
        why = desired.stale_reason(pod, namespace)
        if why is None:
            continue
        stale += 1
        counted = reasons.setdefault(owning_workload(pod, replicaset), {})
        counted[why] = counted.get(why, 0) + 1
    return RolloutPlan(stale, tuple(sorted(reasons)), reasons, unmeshed)


def _unmeshed_candidate(pod: Json, namespace: Json | None, desired: DesiredProxy) -> bool:
    """Whether a pod without a proxy is one a rollout would answer for: an opted-in, Running
    candidate outside the namespaces no rollout touches."""
    return _candidate(pod) and desired.excluded_why(pod, namespace) is None


def pending(
    workloads: Iterable[Workload],
    record: Callable[[Workload], Json | None],
    config_hash: str,
    completed_at: float | None = None,
) -> list[Workload]:
    """Of the stale workloads, those still to restart for ``config_hash``: a bare pod (it
    keeps no record), or an owner whose pod template (``record``, None when unknown) does not
    record this configuration yet (``due``); the others' pods are rolling already."""
    return [
        w for w in workloads if w.kind == "Pod" or due(record(w) or {}, config_hash, completed_at)
    ]


def due(workload_obj: Json, config_hash: str, completed_at: float | None = None) -> bool:
    """Whether an owner is still to restart for ``config_hash``: its template does not record
    it yet, or (a re-mesh) records a restart no later than ``completed_at``, when the
    configuration's rollout last completed, though it is stale again (a pod created since
    without the proxy, while the injector was down): restarted once more, under the same
    gate and pace, its new restart time making it not due again (the Once rule, per
    completion)."""
    if not already_restarted(workload_obj, config_hash):
        return True
    if completed_at is None:
        return False
    at = restart_time(workload_obj)
    return at is not None and at <= completed_at


@dataclass(frozen=True)
class Standing:
    """Where every opted-in, Running pod stands, by namespace and by workload."""

    namespaces: Mapping[str, Mapping[str, int]]
    """Namespace -> state (``PROXY_STATES``) -> pods."""
    workloads: Mapping[Workload, Mapping[str, Mapping[str, int]]]
    """Workload -> state -> reason -> pods."""


def standing(
    pods: Iterable[Json],
    namespaces: Mapping[str, Json],
    desired: DesiredProxy,
    replicaset: Callable[[str, str], Json | None],
) -> Standing:
    """Every candidate pod's verdict, counted (``plan_rollout`` keeps only the stale)."""
    by_namespace: dict[str, dict[str, int]] = {}
    by_workload: dict[Workload, dict[str, dict[str, int]]] = {}
    for pod in pods:
        ns = pod["metadata"]["namespace"]
        verdict = desired.verdict(pod, namespaces.get(ns))
        if verdict is None:
            continue
        counts = by_namespace.setdefault(ns, dict.fromkeys(PROXY_STATES, 0))
        counts[verdict.state] += 1
        states = by_workload.setdefault(owning_workload(pod, replicaset), {})
        reasons = states.setdefault(verdict.state, {})
        reasons[verdict.reason] = reasons.get(verdict.reason, 0) + 1
    return Standing(by_namespace, by_workload)


INJECTED_CONTAINERS = frozenset(
    {PROXY_CONTAINER, "linkerd-init", "linkerd-network-validator", "linkerd-debug"}
)
"""What Linkerd's injector adds to a pod's containers and init containers (``charts/partials``,
edge-19.12.3 to edge-26.8.3). A pod still holding one of them is not injected again: the
injector skips any pod with ``linkerd-proxy`` or ``linkerd-init`` (``HasExistingSidecars``), so
a bare pod asked about with its ``linkerd-init`` kept came back without a proxy, and its
rollout waited for ever."""
INJECTED_VOLUMES = frozenset(
    {
        "linkerd-identity-end-entity",
        "linkerd-identity-token",
        "linkerd-podinfo",
        "linkerd-proxy-init-xtables-lock",
    }
)
"""The volumes it adds beside them (the same partials): added again when it injects."""


def candidate_pod(workload: Workload, source: Json) -> Json:
    """The pod to ask the injector about (by dry-run create): the workload's pod template, or
    a bare pod's own spec without what the injector and the scheduler added."""
    if workload.kind == "Pod":
        meta, spec = source["metadata"], dict(source["spec"])
        for kind in ("initContainers", "containers"):
            if kind in spec:
                spec[kind] = [c for c in spec[kind] if c.get("name") not in INJECTED_CONTAINERS]
        if "volumes" in spec:
            spec["volumes"] = [v for v in spec["volumes"] if v.get("name") not in INJECTED_VOLUMES]
        spec.pop("nodeName", None)
        annotations = {
            k: v
            for k, v in (meta.get("annotations") or {}).items()
            if k not in (PROXY_VERSION_ANNOTATION, TRUST_ROOT_ANNOTATION)
        }
        template = {
            "metadata": {"labels": meta.get("labels") or {}, "annotations": annotations},
            "spec": spec,
        }
    else:
        template = source["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{workload.name[:40]}-linkerd-config-dry-run",
            "namespace": workload.namespace,
            "labels": template["metadata"].get("labels") or {},
            "annotations": template["metadata"].get("annotations") or {},
        },
        "spec": template["spec"],
    }


WORKLOAD_FIELDS: tuple[str | tuple[str, ...], ...] = (
    "spec.template.metadata.annotations",
    ("metadata", "annotations", RESTORED_AT_ANNOTATION),
    "metadata.generation",
    "metadata.labels",
    "spec.replicas",
    "spec.paused",
    "spec.updateStrategy",
    "status",
)
"""All a workload cache needs (besides name, namespace, uid, resourceVersion): the restart
record and a rollback's restore time, what ``rollout.health`` reads to tell a finished
rollout from a stuck one, and the labels a canary's selector matches (``canary``)."""


def restart_patch(config_hash: str, resource_version: str, at: float) -> Json:
    """A merge patch of the pod template, like ``kubectl rollout restart`` but keyed by the
    configuration. It carries the resourceVersion it was decided on: if the workload changed
    since (another leader restarted it, say), the API server refuses it with a conflict."""
    stamp = rfc3339(at, micro=True)
    return {
        "metadata": {"resourceVersion": resource_version},
        "spec": {
            "template": {
                "metadata": {
                    "annotations": {
                        RESTARTED_FOR_ANNOTATION: config_hash,
                        RESTARTED_AT_ANNOTATION: stamp,
                    }
                }
            }
        },
    }


def restore_patch(deployment: Json, template: Json, at: float) -> Json:
    """``revisions.undo_patch`` (``deployment``'s pod template back to ``template``, a
    previous revision's, as ``kubectl rollout undo`` does it), stamped with when it was sent
    (``RESTORED_AT_ANNOTATION``), so that any leader counts the restore's deadline from it."""
    patch = revisions.undo_patch(deployment, template)
    stamp = {RESTORED_AT_ANNOTATION: rfc3339(at, micro=True)}
    return {**patch, "metadata": {**patch["metadata"], "annotations": stamp}}


def _template_annotations(workload_obj: Json) -> Json:
    template = (workload_obj.get("spec") or {}).get("template") or {}
    return (template.get("metadata") or {}).get("annotations") or {}


def already_restarted(workload_obj: Json, config_hash: str) -> bool:
    return _template_annotations(workload_obj).get(RESTARTED_FOR_ANNOTATION) == config_hash


def restart_time(workload_obj: Json) -> float | None:
    """When the workload's record says it was last restarted (None: no readable time)."""
    return unix_time(_template_annotations(workload_obj).get(RESTARTED_AT_ANNOTATION))


def restore_time(workload_obj: Json) -> float | None:
    """When a rollback last brought the workload back, as far as its records tell: the later
    of its restart's time (a restore that restarts it stamps that) and its undo's
    (``restore_patch``); None when neither is readable."""
    annotations = (workload_obj.get("metadata") or {}).get("annotations") or {}
    found = [restart_time(workload_obj), unix_time(annotations.get(RESTORED_AT_ANNOTATION))]
    return max((at for at in found if at is not None), default=None)


def restart_times(workload_objs: Iterable[Json], config_hash: str) -> list[float]:
    """When each workload recorded as restarted for ``config_hash`` was restarted (a record
    without a readable time counts, at time 0)."""
    return [
        restart_time(obj) or 0.0 for obj in workload_objs if already_restarted(obj, config_hash)
    ]


@dataclass(frozen=True)
class Pace:
    """This pass's share of a rollout: how many may restart now, or how long to wait."""

    allowed: int
    wait: float


def pace(last_restart: float | None, now: float, batch: int, interval: float) -> Pace:
    """A pass restarts at most ``batch`` workloads, and only ``interval`` seconds after the
    previous pass's last restart: restarts never come faster, whatever wakes the reconciler."""
    if last_restart is not None and now < last_restart + interval:
        return Pace(0, last_restart + interval - now)
    return Pace(batch, 0.0)
