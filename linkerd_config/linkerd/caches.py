"""The informers a LinkerdConfig's reconcile reads, and which of their changes wake which
LinkerdConfigs: the controller runs them; ``plan`` and ``status`` fill them once."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.concurrently import all_of
from linkerd_config.kube.informer import Informer, keep_fields
from linkerd_config.kube.resource import (
    CONFIGMAPS,
    NAMESPACES,
    PODS,
    REPLICASETS,
    WORKLOAD_RESOURCES,
    ApiResource,
    Json,
)
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.spec.conversion import to_hub
from linkerd_config.linkerd.spec.crd import LINKERD_CONFIGS, target_of
from linkerd_config.linkerd.status.view import ClusterView
from linkerd_config.linkerd.trust.guard import (
    LIVE_FIELD_SELECTOR,
    meshed_pod_projection,
    meshed_selector,
)


class LinkerdCaches:
    """The informers a LinkerdConfig's reconcile reads, as the controller runs them. The
    ``plan`` and ``status`` commands fill the same ones once (``list_once``) and decide over
    ``view()``: exactly what the controller would see."""

    def __init__(self, client: KubeClient, config_namespace: str) -> None:
        self.config_namespace = config_namespace
        self.configs = Informer(
            client,
            LINKERD_CONFIGS,
            name="linkerdconfigs",
            # Read in the storage version, cached as the hub the domain reads.
            transform=to_hub,
            not_served_hint="install the LinkerdConfig CRD: kubectl apply -k manifests/crd "
            "(or make install, or the Helm chart)",
        )
        self.configmaps = Informer(
            client, CONFIGMAPS, namespace=config_namespace, name="configmaps"
        )
        self.pods = Informer(
            client,
            PODS,
            label_selector=mesh.CANDIDATE_LABEL_SELECTOR,
            field_selector=mesh.RUNNING_FIELD_SELECTOR,
            metadata_only=True,
            transform=mesh.running_pod_metadata,
            name="pods",
        )
        # Every meshed pod, opted in or not, reduced to its trust-root hash: the trust-anchor
        # guard's view of which bundle each runs (its key, and one record per hash).
        self.meshed_pods = Informer(
            client,
            PODS,
            label_selector=meshed_selector(config_namespace),
            field_selector=LIVE_FIELD_SELECTOR,
            metadata_only=True,
            transform=meshed_pod_projection,
            name="meshed-pods",
        )
        self.namespaces = Informer(client, NAMESPACES, metadata_only=True, name="namespaces")
        self.replicasets = Informer(
            client,
            REPLICASETS,
            metadata_only=True,
            transform=mesh.replicaset_projection,
            name="replicasets",
        )
        # Restartable owners, reduced to their restart record: which configuration their pod
        # template was last restarted for, and when. Counting and pacing read these caches.
        self.workloads = {
            kind: Informer(
                client,
                resource,
                transform=keep_fields(*mesh.WORKLOAD_FIELDS),
                name=resource.plural,
            )
            for kind, resource in WORKLOAD_RESOURCES.items()
        }

    @property
    def informers(self) -> list[Informer]:
        return [
            self.configs,
            self.configmaps,
            self.pods,
            self.meshed_pods,
            self.namespaces,
            self.replicasets,
            *self.workloads.values(),
        ]

    async def list_once(self) -> None:
        """Fill every cache from one LIST each, concurrently; no watch stays open."""
        await all_of(*(informer.list_once() for informer in self.informers))

    def view(self) -> ClusterView:
        """The caches' contents as plain data, for ``preview``'s pure decisions."""
        return ClusterView(
            configs=self.configs.store.list(),
            configmaps=self.configmaps.store.snapshot(),
            pods=list(mesh.cached_pods(self.pods.store.items())),
            namespaces={n["metadata"]["name"]: n for n in self.namespaces.store.list()},
            replicasets=self.replicasets.store.snapshot(),
            workloads={kind: i.store.snapshot() for kind, i in self.workloads.items()},
            config_namespace=self.config_namespace,
            meshed=self.meshed_pods.store.items(),
        )

    def config_names(self) -> list[str]:
        return sorted(self.configs.store.keys())

    def wake(
        self,
        enqueue: Callable[[str], None],
        enqueue_all: Callable[[Iterable[str]], None],
        anchor_held: Callable[[], Iterable[str]],
        unless_echo: Callable[[ApiResource, Json, Callable[[], None]], None],
    ) -> None:
        """Map every cache's changes to the LinkerdConfigs they concern: ``enqueue`` one
        by name, ``enqueue_all`` several; ``anchor_held``: those whose last reconcile held a
        trust-anchor removal; ``unless_echo``: wakes unless an object is as our own last write
        left it (``Writer.unless_echo``): the reconcile that wrote it went on from what it
        wrote. Only ConfigMaps are judged so (a reverted drift's second reconcile); every
        other change still wakes."""

        def by_name(obj: Json) -> None:
            enqueue(obj["metadata"]["name"])

        self.configs.add_handler(by_name, lambda _o, n: by_name(n), by_name)

        def owners_of_configmap(obj: Json) -> None:
            # Every ConfigMap of the target's namespace counts, not only the target: the
            # trust roots (written, or depended on), the preserved copies. Linkerd keeps a
            # handful there, so a spare reconcile costs little, and a missed one a lot.
            namespace = obj["metadata"]["namespace"]
            for name in self.config_names():
                cfg = self.configs.store.get(name)
                if cfg is not None and target_of(cfg).namespace == namespace:
                    enqueue(name)

        def changed_configmap(obj: Json) -> None:
            unless_echo(CONFIGMAPS, obj, lambda: owners_of_configmap(obj))

        self.configmaps.add_handler(
            changed_configmap, lambda _o, n: changed_configmap(n), owners_of_configmap
        )

        def everyone(_obj: Json) -> None:
            enqueue_all(self.config_names())

        # Restarted workloads' status is the rollout's health gate: their changes wake it too.
        for informer in (self.pods, self.namespaces, *self.workloads.values()):
            informer.add_handler(everyone, lambda _o, n: everyone(n), everyone)

        def held(_obj: Json) -> None:
            # Only a held removal waits on meshed pods (one restarted lets it proceed).
            enqueue_all(sorted(anchor_held()))

        self.meshed_pods.add_handler(held, lambda _o, n: held(n), held)
