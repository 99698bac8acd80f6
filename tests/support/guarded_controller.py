"""The LinkerdConfig controller's whole reconcile over the simulated cluster of the rollout's
property tests (``rollout_sim``), on Linkerd edge-26.8.3's own install (the values format,
whose pods carry the trust-root hash the trust-anchor guard reads): the controller's decision
(a rollback's ``_rendered_target``, the guard, what it writes) and its rollout executor, together.

A trust-anchor rotation half done: the trust roots hold the install's anchor X and a second
one B (``BOTH``), and so do the opted-in workloads; a meshed bystander still runs X alone. The
LinkerdConfig first completes configuration O (proxy edge-26.8.3, ``BOTH``: its
``lastCompleted``), then asks for A (proxy edge-26.8.4, B alone): the guard holds the drop
of X while the bystander runs it, and the controller writes and rolls out H instead (A with
``BOTH``, the bundle held on to).

What the controller writes lands as the API server would land it (status merge patches,
ConfigMap applies, each a new resourceVersion); Linkerd's injector reads the ConfigMap when
told (``injector_reads``).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
from typing import Any

from linkerd_config.kube.resource import Json
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.configmap.desired import Desired, current_data, desired_config
from linkerd_config.linkerd.mesh import TRUST_ROOT_ANNOTATION
from linkerd_config.linkerd.rollout import rollback
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.rollout.record import RESUME_ANNOTATION
from linkerd_config.linkerd.spec.crd import HALT_FIELD, HASH_ANNOTATION, target_of
from linkerd_config.linkerd.status.view import ClusterView
from linkerd_config.linkerd.trust import guard
from tests.support.clock import FakeClock
from tests.support.controller_fakes import FakeRecorder, FakeWriter, controller
from tests.support.merge_patch import apply_merge_patch
from tests.support.rollout_sim import SimCluster, executor_on
from tests.support.samples import SECOND_TRUST_ANCHOR, modern_install

NAME = "modern"
INSTALLED, ASKED = "edge-26.8.3", "edge-26.8.4"
X = modern_install()[1]["data"]["ca-bundle.crt"]
"""The anchor edge-26.8.3's install holds."""
BOTH = f"{X.strip()}\n{SECOND_TRUST_ANCHOR.strip()}"
"""X and B: the bundle the trust roots hold, and the guard holds on to."""
ONLY_B = SECOND_TRUST_ANCHOR.strip()
ROLLOUT: Json = {"maxRestartsPerPass": 2, "restartInterval": "5s", "progressDeadline": "60s"}


def root_hash(text: str) -> str:
    """``linkerd.io/trust-root-sha256`` of a pod injected with ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()


def spec(version: str, anchors: str, on_failure: str) -> Json:
    return {
        "proxy": {"proxyVersion": version},
        "global": {"identityContext": {"trustAnchorsPEM": anchors}},
        "rollout": {**ROLLOUT, "onFailure": on_failure},
    }


class GuardedWorld:
    """The controller (its fakes: ``controller_fakes``) with its rollout executor on
    ``SimCluster`` workloads ``names``, configuration O completed."""

    def __init__(self, names: list[str], on_failure: str = "Halt") -> None:
        self.clock = FakeClock(1_700_000_000.0)
        self.on_failure = on_failure
        self.sim = SimCluster(names, self.clock, old=INSTALLED, trust_root=root_hash(BOTH))
        config_cm, roots = copy.deepcopy(modern_install())
        roots["data"]["ca-bundle.crt"] = BOTH
        self.version = 1
        self.config: Json = {
            "apiVersion": "config.linkerd.io/v1alpha1",
            "kind": "LinkerdConfig",
            "metadata": {
                "name": NAME,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "generation": 1,
                "resourceVersion": "1",
            },
            "spec": spec(INSTALLED, BOTH, on_failure),
            "status": {},
        }
        self.ctl, self.writer, self.recorder = self._controller(config_cm, roots)
        self.bystander(X)
        self.desired: dict[str, Desired] = {}
        """Every configuration rendered here (O, A, H), by hash: what the injector reads."""
        self.o = self.render(self.config)
        self.a = self.render({**self.config, "spec": spec(ASKED, ONLY_B, on_failure)})
        self.h = self.render({**self.config, "spec": spec(ASKED, BOTH, on_failure)})
        self.loop = asyncio.new_event_loop()
        self.reconcile()
        self.injector_reads()
        assert rollback.settled(self.config) == self.o.config_hash, self.config["status"]

    def _controller(self, config_cm: Json, roots: Json) -> tuple[Any, FakeWriter, FakeRecorder]:
        ctl, writer, recorder = controller(self.config, configmap=config_cm)
        ctl.configmaps.store.put(roots)
        ctl.outcomes.monotonic = self.clock
        ctl.rollout = executor_on(self.sim, self.clock, RolloutOptions(injector_wait=30.0))
        return ctl, writer, recorder

    def close(self) -> None:
        self.loop.close()

    def render(self, config: Json) -> Desired:
        configmaps = {cm["metadata"]["name"]: cm for cm in self.ctl.configmaps.store.list()}
        found = desired_config(config, current_data(configmaps, target_of(config)))
        self.desired[found.config_hash] = found
        return found

    # -- the cluster ---------------------------------------------------------------------------

    def bystander(self, bundle: str) -> None:
        """The meshed pod outside the rollout, injected with ``bundle``."""
        pod = {
            "metadata": {
                "name": "bystander-1",
                "namespace": "shop",
                "annotations": {TRUST_ROOT_ANNOTATION: root_hash(bundle)},
            }
        }
        self.ctl.meshed_pods.store.put(guard.meshed_pod_projection(pod), "shop/bystander-1")

    def injector_reads(self) -> None:
        """Linkerd's injector serves what the ConfigMap holds now."""
        cm = self.ctl.configmaps.store.get("linkerd/linkerd-config")
        written = self.desired[cm["metadata"]["annotations"][HASH_ANNOTATION]]
        self.sim.injector_version = written.proxy.version
        self.sim.injector_trust_root = written.proxy.trust_root_sha256

    def in_configmap(self) -> str:
        """The hash of the configuration the ConfigMap holds."""
        cm = self.ctl.configmaps.store.get("linkerd/linkerd-config")
        return str(cm["metadata"]["annotations"][HASH_ANNOTATION])

    def view(self) -> ClusterView:
        """The caches as ``plan`` and ``status`` read them, the LinkerdConfig as stored."""
        return ClusterView(
            configs=[copy.deepcopy(self.config)],
            configmaps={
                f"{cm['metadata']['namespace']}/{cm['metadata']['name']}": cm
                for cm in self.ctl.configmaps.store.list()
            },
            pods=list(mesh.cached_pods(self.sim.pods.items())),
            namespaces={n["metadata"]["name"]: n for n in self.sim.namespaces.list()},
            replicasets=self.sim.replicasets.snapshot(),
            workloads={"Deployment": self.sim.deployments.snapshot()},
            config_namespace="linkerd",
            meshed=self.ctl.meshed_pods.store.items(),
        )

    def a_pass_later(self, seconds: float = 5.0) -> Json:
        """Kubernetes acts on what we did, the caches catch up, the controller reconciles."""
        self.clock.now += seconds
        self.sim.controllers_act()
        self.sim.sync()
        return self.reconcile()

    # -- the LinkerdConfig ---------------------------------------------------------------------

    def apply(self, version: str, anchors: str) -> None:
        """A new spec: a new generation."""
        meta = self.config["metadata"]
        meta["generation"] += 1
        self.config["spec"] = spec(version, anchors, self.on_failure)
        self._stored()

    def edit_rollout(self, **changes: Any) -> None:
        """An edit of ``spec.rollout`` alone (``paused``, the pace, the deadline): a new
        generation, the same configuration."""
        self.config["metadata"]["generation"] += 1
        self.config["spec"]["rollout"] = {**self.config["spec"]["rollout"], **changes}
        self._stored()

    def made_again(self) -> None:
        """The LinkerdConfig deleted and made again from the same manifest (a GitOps prune
        and sync, ``kubectl replace --force``): a new object, generation 1, no status; the
        ConfigMaps stay as they are (deleting a LinkerdConfig never deletes them)."""
        meta = self.config["metadata"]
        meta["generation"], meta["uid"] = 1, f"uid-{self.version}"
        meta.pop("annotations", None)
        self.config["status"] = {}
        self.ctl.configs.store.delete(NAME)
        self.loop.run_until_complete(self.ctl.reconcile(NAME))  # gone: nothing written
        self._stored()

    def resume(self, token: str) -> None:
        annotations = self.config["metadata"].setdefault("annotations", {})
        annotations[RESUME_ANNOTATION] = token
        self._stored()

    def _stored(self) -> None:
        self.version += 1
        self.config["metadata"]["resourceVersion"] = str(self.version)
        self.ctl.configs.store.put(copy.deepcopy(self.config))

    @property
    def halt(self) -> Json | None:
        found = self.config["status"].get(HALT_FIELD)
        return found if isinstance(found, dict) else None

    def reconcile(self) -> Json:
        """One reconcile; what it wrote lands. The DataPlaneUpToDate condition it left."""
        statuses, applied, created = (
            len(self.writer.statuses), len(self.writer.applied), len(self.writer.created),
        )  # fmt: skip
        self.ctl.configs.store.put(copy.deepcopy(self.config))
        self.loop.run_until_complete(self.ctl.reconcile(NAME))
        for patch in self.writer.statuses[statuses:]:
            self.config["status"] = apply_merge_patch(self.config["status"], patch)
        for obj in [*self.writer.applied[applied:], *self.writer.created[created:]]:
            self._landed(obj)
        self._stored()
        conditions = self.config["status"].get("conditions") or []
        return next((c for c in conditions if c["type"] == "DataPlaneUpToDate"), {})

    def _landed(self, obj: Json) -> None:
        """A ConfigMap apply, as server-side apply merges it (the keys it names)."""
        meta = obj["metadata"]
        key = f"{meta.get('namespace', 'linkerd')}/{meta['name']}"
        cached = self.ctl.configmaps.store.get(key) or {"metadata": dict(meta), "data": {}}
        merged = copy.deepcopy(cached)
        for field in ("labels", "annotations"):
            merged["metadata"][field] = {
                **(cached["metadata"].get(field) or {}),
                **(meta.get(field) or {}),
            }
        merged["data"] = {**(cached.get("data") or {}), **(obj.get("data") or {})}
        self.ctl.configmaps.store.put(merged)

    def leader_changes(self) -> None:
        """A new leader: a new controller and executor over the same cluster and status."""
        configmaps = {cm["metadata"]["name"]: cm for cm in self.ctl.configmaps.store.list()}
        meshed = self.ctl.meshed_pods.store.items()
        ctl, writer, recorder = self._controller(
            configmaps["linkerd-config"], configmaps["linkerd-identity-trust-roots"]
        )
        for name, cm in configmaps.items():
            if name not in ("linkerd-config", "linkerd-identity-trust-roots"):
                ctl.configmaps.store.put(cm)
        for key, pod in meshed:
            ctl.meshed_pods.store.put(pod, key)
        self.ctl, self.writer, self.recorder = ctl, writer, recorder
