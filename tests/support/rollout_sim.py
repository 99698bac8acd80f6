"""A simulated cluster for the rollout executor's property tests: Deployments with their
ReplicaSets (numbered revisions) and pods, the Deployment controller's part (a restart makes
a new revision, except while the Deployment is paused; a new replica count scales the
running one, to zero included; admission may refuse its pods; an older revision's
ReplicaFailure lingers on the Deployment for one step, as the real controller leaves it until
that ReplicaSet is scaled down), Linkerd's injector (up and injecting some version, or down:
pods admitted without a proxy, under Linkerd's ``failurePolicy: Ignore``), and the executor's
view of it: caches that lag until synced, a writer with optimistic concurrency (a stale
resourceVersion is a conflict) and API errors on demand.

It also keeps the evidence the invariants are judged on: every restart we sent (and what
the injector did at that moment), every pod created without a proxy because of one.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from linkerd_config.kube import revisions
from linkerd_config.kube.client import ApiError
from linkerd_config.kube.resource import Json, object_key
from linkerd_config.kube.store import Store
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.rollout.executor import RolloutExecutor
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.spec.crd import HALT_FIELD
from linkerd_config.linkerd.status.view import ClusterView
from tests.support.clock import FakeClock

NAMESPACE = "ns"
OLD, NEW = "edge-1", "edge-2"


@dataclass
class Revision:
    number: int
    restarted_for: str | None
    failed: str = ""
    """Admission's refusal of its pods ("" when they were admitted)."""


@dataclass
class Workload:
    name: str
    replicas: int = 1
    generation: int = 1
    observed: int = 1
    resource_version: int = 1
    annotations: dict[str, str] = field(default_factory=dict)
    """Its pod template's (our restart record)."""
    revisions: list[Revision] = field(default_factory=lambda: [Revision(1, None)])
    pods: list[tuple[str, str | None]] = field(default_factory=list)
    """(pod name, the proxy version it runs, None: no proxy)."""
    lingering: str = ""
    """An older revision's ReplicaFailure the Deployment still shows (one step)."""
    paused: bool = False
    """``spec.paused``: the Deployment controller scales it but rolls out no new template."""
    template: int = 0
    """How many times its pod template changed (our restarts)."""
    rolled: int = 0
    """The template its newest revision was made from."""
    ours: bool = False
    """Whether the template change not rolled out yet is a write of ours."""


@dataclass(frozen=True)
class Restart:
    """One restart the API server accepted: which workload, for which configuration, and
    what the injector was injecting at that moment."""

    workload: str
    config_hash: str
    injects: str | None
    """The proxy version the injector injected at that moment (None: it was down)."""
    at: float


@dataclass(frozen=True)
class GoneBack:
    """One undo the API server accepted (a Deployment's pod template back to a previous
    revision's): whether the revision gone back to had to make pods for it, and what the
    injector was injecting at that moment."""

    workload: str
    makes_pods: bool
    injects: str | None
    at: float


class SimCluster:
    def __init__(
        self, names: list[str], clock: FakeClock, old: str = OLD, trust_root: str | None = None
    ) -> None:
        self.clock = clock
        self.workloads = {n: Workload(n) for n in names}
        self.counter = 0
        self.injector_trust_root = trust_root
        """The trust-root hash the injector stamps on the pods it injects (None: none, as
        Linkerd before edge-22.9.1 and the legacy format)."""
        self.trust_roots: dict[str, str] = {}
        """Pod name -> the trust-root hash stamped on it when it was injected."""
        for w in self.workloads.values():
            w.pods = [(self._injected(w, old), old)]
        self.injector_up = True
        self.injector_version = old
        self.refusing: set[str] = set()
        """Workloads whose new pods admission refuses (the controller's dry run included)."""
        self.refusing_real: set[str] = set()
        """Workloads whose real creates admission refuses while it admits a dry run (a quota
        at its limit, a webhook timing out under load): the refusal shows only once our
        restart's pods are created."""
        self.refused_asks: list[tuple[str, float]] = []
        """(workload, when) of each dry run admission refused."""
        self.failing_writes = 0
        """The next this many restart patches fail with 500."""
        self.restarts: list[Restart] = []
        self.gone_back: list[GoneBack] = []
        self.unmeshed_by_us: list[str] = []
        """Pods created without a proxy because of a write of ours (a restart, an undo)."""
        # the executor's caches (lag until ``sync``)
        self.pods, self.namespaces, self.replicasets = Store(), Store(), Store()
        self.deployments = Store()
        self.namespaces.put({"metadata": {"name": NAMESPACE}})
        self.sync()

    def _pod_name(self, w: Workload) -> str:
        self.counter += 1
        return f"{w.name}-{w.revisions[-1].number}-{self.counter}"

    def _injected(self, w: Workload, proxy: str | None) -> str:
        """A new pod's name; one the injector injected carries its trust-root hash."""
        name = self._pod_name(w)
        if proxy is not None and self.injector_trust_root is not None:
            self.trust_roots[name] = self.injector_trust_root
        return name

    # -- Kubernetes' side ------------------------------------------------------------------

    def controllers_act(self) -> None:
        """The Deployment controller (and admission, and the injector) act on every change:
        a new template makes a new revision (not while paused); a new replica count alone
        scales the running revision (its new pods as the injector injects them now)."""
        for w in self.workloads.values():
            w.lingering = ""
            if w.generation <= w.observed:
                continue
            if w.paused or w.template == w.rolled:
                w.observed = w.generation
                w.resource_version += 1
                self._scale(w)
                continue
            w.rolled = w.template
            previous = w.revisions[-1]
            record = w.annotations.get(mesh.RESTARTED_FOR_ANNOTATION)
            ours, w.ours = w.ours, False
            revision = Revision(previous.number + 1, record)
            w.observed = w.generation
            w.resource_version += 1
            if previous.failed:
                w.lingering = previous.failed
            running = _serving(w)
            if running is not w.revisions[-1] and running.restarted_for == record:
                # Back to the template of the revision whose pods run (an undo of a restart
                # whose pods were refused): it is the newest again, renumbered, and makes no
                # pod; the refused one is scaled down.
                w.revisions.remove(running)
                w.revisions.append(Revision(revision.number, record))
                continue
            w.revisions.append(revision)
            if w.name in self.refusing or w.name in self.refusing_real:
                revision.failed = f'pods "{w.name}-{revision.number}" is forbidden: refused'
                continue
            proxy = self.injector_version if self.injector_up else None
            made = [(self._injected(w, proxy), proxy) for _ in range(w.replicas)]
            if proxy is None and ours:
                self.unmeshed_by_us.extend(name for name, _ in made)
            w.pods = made

    def _scale(self, w: Workload) -> None:
        kept = w.pods[: w.replicas]
        proxy = self.injector_version if self.injector_up else None
        w.pods = kept + [(self._injected(w, proxy), proxy) for _ in range(w.replicas - len(kept))]

    def status_of(self, w: Workload) -> Json:
        newest = w.revisions[-1]
        conditions = []
        failure = newest.failed or w.lingering
        if failure:
            conditions.append(
                {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                 "message": failure}
            )  # fmt: skip
        unrolled = w.template != w.rolled  # paused since a restart: not rolled out yet
        updated = 0 if newest.failed or unrolled else w.replicas
        return {
            "observedGeneration": w.observed,
            "replicas": w.replicas,
            "updatedReplicas": updated,
            "availableReplicas": w.replicas,
            "conditions": conditions,
        }

    def deployment(self, w: Workload) -> Json:
        return {
            "metadata": {
                "name": w.name,
                "namespace": NAMESPACE,
                "uid": f"uid-{w.name}",
                "resourceVersion": str(w.resource_version),
                "generation": w.generation,
                "labels": {"app": w.name},
            },
            "spec": {
                "replicas": w.replicas,
                "paused": w.paused,
                "template": _template(w.name, w.annotations),
            },
            "status": self.status_of(w),
        }

    def replicaset_objects(self, w: Workload) -> list[Json]:
        """Its ReplicaSets: each revision's template (the restart record it was made with),
        and the pods it keeps (the running revision all of them, the others none)."""
        owner = {"kind": "Deployment", "name": w.name, "uid": f"uid-{w.name}", "controller": True}
        running = _serving(w)
        found = []
        for r in w.revisions:
            failure = {"type": "ReplicaFailure", "status": "True", "message": r.failed}
            meta = {
                "name": f"{w.name}-{r.number}",
                "namespace": NAMESPACE,
                "annotations": {revisions.REVISION_ANNOTATION: str(r.number)},
                "ownerReferences": [owner],
            }
            keeps = w.replicas if r is running else 0
            template = _template(w.name, {} if r.restarted_for is None else {
                mesh.RESTARTED_FOR_ANNOTATION: r.restarted_for})  # fmt: skip
            template["metadata"]["labels"][revisions.TEMPLATE_HASH_LABEL] = f"h{r.number}"
            found.append(
                {
                    "metadata": meta,
                    "spec": {"replicas": keeps, "template": template},
                    "status": {
                        "replicas": keeps,
                        "conditions": [failure] if r.failed else [],
                    },
                }
            )
        return found

    def sync(self, which: str = "all") -> None:
        """The informers catch up (``which``: one cache, or all)."""
        if which in ("all", "deployments"):
            self.deployments.replace([self.deployment(w) for w in self.workloads.values()])
        if which in ("all", "replicasets"):
            self.replicasets.replace(
                [
                    mesh.replicaset_projection(rs)
                    for w in self.workloads.values()
                    for rs in self.replicaset_objects(w)
                ]
            )
        if which in ("all", "pods"):
            found = []
            for w in self.workloads.values():
                rs = f"{w.name}-{_served(w)}"
                for name, proxy in w.pods:
                    annotations = {} if proxy is None else {mesh.PROXY_VERSION_ANNOTATION: proxy}
                    if name in self.trust_roots:
                        annotations[mesh.TRUST_ROOT_ANNOTATION] = self.trust_roots[name]
                    served = {
                        "metadata": {
                            "name": name,
                            "namespace": NAMESPACE,
                            "labels": {mesh.RECONCILE_LABEL: mesh.RECONCILE_AUTO},
                            "annotations": annotations,
                            "ownerReferences": [
                                {"kind": "ReplicaSet", "name": rs, "controller": True}
                            ],
                        }
                    }
                    # Keyed as served, as the informer keys them: the record may be unnamed.
                    found.append((object_key(served), mesh.running_pod_metadata(served)))
            self.pods.replace_keyed(dict(found))

    # -- the executor's writer ---------------------------------------------------------------

    async def get(self, _resource: Any, _namespace: str, name: str) -> Json | None:
        w = self.workloads.get(name)
        return None if w is None else self.deployment(w)

    async def list(self, _resource: Any, _namespace: str) -> list[Json]:
        return [rs for w in self.workloads.values() for rs in self.replicaset_objects(w)]

    async def dry_run_create(self, _resource: Any, namespace: str, pod: Json) -> Json:
        name = str(pod["metadata"]["name"]).removesuffix("-linkerd-config-dry-run")
        if name in self.refusing:
            self.refused_asks.append((name, self.clock()))
            message = f'pods "{pod["metadata"]["name"]}" is forbidden: refused'
            body = {"reason": "Forbidden", "message": message}
            raise ApiError(403, "POST", namespace, body, None)
        annotations = dict(pod["metadata"].get("annotations") or {})
        if self.injector_up:
            annotations[mesh.PROXY_VERSION_ANNOTATION] = self.injector_version
            if self.injector_trust_root is not None:
                annotations[mesh.TRUST_ROOT_ANNOTATION] = self.injector_trust_root
        return {**pod, "metadata": {**pod["metadata"], "annotations": annotations}}

    async def merge_patch(self, _resource: Any, _namespace: str, name: str, patch: Json) -> Json:
        w = self.workloads[name]
        if self.failing_writes:
            self.failing_writes -= 1
            raise ApiError(500, "PATCH", name, {"reason": "InternalError"}, None)
        if patch["metadata"].get("resourceVersion") != str(w.resource_version):
            raise ApiError(409, "PATCH", name, {"reason": "Conflict"}, None)
        wanted = (patch["spec"]["template"].get("metadata") or {}).get("annotations") or {}
        for key, value in wanted.items():
            if value is None:
                w.annotations.pop(key, None)
            else:
                w.annotations[key] = value
        record = w.annotations.get(mesh.RESTARTED_FOR_ANNOTATION)
        injects = self.injector_version if self.injector_up else None
        stamped = (patch["metadata"].get("annotations") or {}).get(mesh.RESTORED_AT_ANNOTATION)
        if stamped is not None:  # an undo (``mesh.restore_patch``)
            running = _serving(w)
            makes_pods = running is w.revisions[-1] or running.restarted_for != record
            self.gone_back.append(GoneBack(name, makes_pods, injects, self.clock()))
        else:
            self.restarts.append(Restart(name, str(record), injects, self.clock()))
        w.template += 1
        w.generation += 1
        w.resource_version += 1
        w.ours = True
        return self.deployment(w)

    async def evict(self, _namespace: str, name: str) -> None:
        raise AssertionError(f"no bare pod here: {name} evicted")


def _serving(w: Workload) -> Revision:
    """The newest revision whose pods were admitted (the one still running)."""
    return next(r for r in reversed(w.revisions) if not r.failed)


def _served(w: Workload) -> int:
    return _serving(w).number


def _template(name: str, annotations: Json) -> Json:
    return {
        "metadata": {"labels": {"app": name}, "annotations": dict(annotations)},
        "spec": {"containers": [{"name": "app", "image": "app"}]},
    }


class Recorder:
    """Events, kept for nothing: the invariants read the cluster and status."""

    def record(self, involved: Any, type_: str, reason: str, message: str) -> None:
        pass


def merged_status(status: Json, outcome_status: Json) -> Json:
    """The LinkerdConfig's status once the controller wrote a pass's outcome (a field set to
    None removed), as the next reconcile reads it."""
    merged = {**status, **copy.deepcopy(outcome_status)}
    return {k: v for k, v in merged.items() if v is not None}


def halted(status: Json, config_hash: str) -> bool:
    record = status.get(HALT_FIELD)
    return isinstance(record, dict) and record.get("configHash") == config_hash


def executor_on(sim: SimCluster, clock: FakeClock, options: RolloutOptions) -> RolloutExecutor:
    """A rollout executor (a leader) over ``sim``'s caches and writer, on ``clock``."""
    return RolloutExecutor(
        sim,  # type: ignore[arg-type]
        Recorder(),  # type: ignore[arg-type]
        options,
        pods=sim.pods,
        namespaces=sim.namespaces,
        replicasets=sim.replicasets,
        workloads={"Deployment": sim.deployments, "StatefulSet": Store(), "DaemonSet": Store()},
        wall=clock,
        monotonic=clock,
    )


def view_of(sim: SimCluster, configs: list[Json], configmap: Json) -> ClusterView:
    """``sim``'s caches as ``plan`` and ``status`` read them, with Linkerd's ``configmap``."""
    return ClusterView(
        configs=configs,
        configmaps={f"linkerd/{configmap['metadata']['name']}": configmap},
        pods=list(mesh.cached_pods(sim.pods.items())),
        namespaces={n["metadata"]["name"]: n for n in sim.namespaces.list()},
        replicasets=sim.replicasets.snapshot(),
        workloads={"Deployment": sim.deployments.snapshot()},
        config_namespace="linkerd",
    )
