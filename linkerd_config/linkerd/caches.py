"""The informers a LinkerdConfig's reconcile reads, and which of their changes wake which
LinkerdConfigs: the controller runs them; ``plan`` and ``status`` fill them once."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.concurrently import all_of
from linkerd_config.kube.informer import Informer, keep_fields
from linkerd_config.kube.resource import (
    CONFIGMAPS,
    EVENTS,
    NAMESPACES,
    PODS,
    REPLICASETS,
    WORKLOAD_RESOURCES,
    ApiResource,
    Json,
)
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.spec.conversion import to_hub
from linkerd_config.linkerd.spec.crd import LINKERD_CONFIGS, Owners
from linkerd_config.linkerd.status.view import ClusterView
from linkerd_config.linkerd.trust.guard import (
    ISSUER_EVENT_FIELDS,
    ISSUER_EVENTS_SELECTOR,
    LIVE_FIELD_SELECTOR,
    issuer_event_time,
    meshed_pod_projection,
    meshed_selector,
)

OWN_CHANGE = 1
"""The priority of a LinkerdConfig's wake by a change of its own: its object, or the
ConfigMap it manages. Every other wake (a pod, a workload, a neighbour's ConfigMap, a rival,
a resync) is 0: one object's drift is reverted ahead of a thousand others' work."""


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
        # Every meshed pod, opted in or not, reduced to its trust-root hash and the minute it
        # was created: the trust-anchor guard's view of which bundle each runs, and whether
        # it may predate the issuer (its key, and one record per hash and minute).
        self.meshed_pods = Informer(
            client,
            PODS,
            label_selector=meshed_selector(config_namespace),
            field_selector=LIVE_FIELD_SELECTOR,
            metadata_only=True,
            transform=meshed_pod_projection,
            name="meshed-pods",
        )
        # Linkerd's identity saying it took up a new issuer: a removal of the anchor that
        # signed the one before waits for the proxies that started before (trust.guard).
        self.issuer_events = Informer(
            client,
            EVENTS,
            namespace=config_namespace,
            field_selector=ISSUER_EVENTS_SELECTOR,
            transform=keep_fields(*ISSUER_EVENT_FIELDS),
            name="issuer-events",
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
            self.issuer_events,
            self.namespaces,
            self.replicasets,
            *self.workloads.values(),
        ]

    async def list_once(self) -> None:
        """Fill every cache from one LIST each, concurrently; no watch stays open. Not the
        issuer's Events: ``plan`` and ``status`` read the update the controller keeps in
        status (``identityIssuerUpdated``), so they need no more than the README grants."""
        once = (i for i in self.informers if i is not self.issuer_events)
        await all_of(*(informer.list_once() for informer in once))

    def view(self) -> ClusterView:
        """The caches' contents as plain data, for ``status.plan``'s pure decisions."""
        return ClusterView(
            configs=self.configs.store.list(),
            configmaps=self.configmaps.store.snapshot(),
            pods=list(mesh.cached_pods(self.pods.store.items())),
            namespaces={n["metadata"]["name"]: n for n in self.namespaces.store.list()},
            replicasets=self.replicasets.store.snapshot(),
            workloads={kind: i.store.snapshot() for kind, i in self.workloads.items()},
            config_namespace=self.config_namespace,
            meshed=self.meshed_pods.store.items(),
            issuer_updated=self.issuer_updated(),
        )

    def config_names(self) -> list[str]:
        return sorted(self.configs.store.keys())

    def wake(
        self,
        enqueue: Callable[[str, int], None],
        anchor_held: Callable[[], Iterable[str]],
        unless_echo: Callable[[ApiResource, Json, Callable[[], None]], None],
    ) -> None:
        """Map every cache's changes to the LinkerdConfigs they concern: ``enqueue`` one by
        name, at a priority (``OWN_CHANGE`` or 0); ``anchor_held``: those whose last
        reconcile held a trust-anchor removal; ``unless_echo``: wakes unless an object is as
        our own last write left it (``Writer.unless_echo``): the reconcile that wrote it went
        on from what it wrote. Only ConfigMaps are judged so (a reverted drift's second
        reconcile); every other change still wakes.

        Only a ConfigMap's managing LinkerdConfig (``crd.Owners``) is woken by anything but
        its own object: a rival's reconcile is its Conflict, which only the LinkerdConfigs
        decide (it is woken when its target's owner changes). A thousand rivals cost one
        reconcile each when they come, not one each per pod or ConfigMap change."""
        managing = Owners()

        def config_changed(old: Json | None, new: Json, gone: bool = False) -> None:
            name = str(new["metadata"]["name"])
            if old is not None and old["metadata"].get("resourceVersion") == new["metadata"].get(
                "resourceVersion"
            ):
                enqueue(name, 0)  # a resync: nothing changed
                return
            enqueue(name, OWN_CHANGE)
            # It came, went or moved: who manages its target(s) may have changed.
            for target in managing.remove(name) if gone else managing.put(new):
                if (owner := managing.of(target)) is not None:
                    enqueue(owner, 0)

        self.configs.add_handler(
            lambda new: config_changed(None, new),
            config_changed,
            lambda gone: config_changed(None, gone, gone=True),
        )

        def owners_of_configmap(obj: Json) -> None:
            # Every ConfigMap of the target's namespace counts, not only the target: the
            # trust roots (written, or depended on), the preserved copies. Linkerd keeps a
            # handful there, so a spare reconcile costs little, and a missed one a lot; the
            # target's own owner goes first.
            namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
            for target in managing.targets():
                if target.namespace == namespace and (owner := managing.of(target)):
                    enqueue(owner, OWN_CHANGE if target.name == name else 0)

        def changed_configmap(obj: Json) -> None:
            unless_echo(CONFIGMAPS, obj, lambda: owners_of_configmap(obj))

        self.configmaps.add_handler(
            changed_configmap, lambda _o, n: changed_configmap(n), owners_of_configmap
        )

        def every_owner(_obj: Json) -> None:
            owners = {owner for target in managing.targets() if (owner := managing.of(target))}
            for owner in sorted(owners):
                enqueue(owner, 0)

        # Restarted workloads' status is the rollout's health gate: their changes wake it too.
        for informer in (self.pods, self.namespaces, *self.workloads.values()):
            informer.add_handler(every_owner, lambda _o, n: every_owner(n), every_owner)

        def held(_obj: Json) -> None:
            # Only a held removal waits on meshed pods (one restarted lets it proceed).
            for name in sorted(anchor_held()):
                enqueue(name, 0)

        self.meshed_pods.add_handler(held, lambda _o, n: held(n), held)
        # Kept in status when it comes (its Event expires within the hour).
        self.issuer_events.add_handler(
            owners_of_configmap, lambda _o, n: owners_of_configmap(n), lambda _g: None
        )

    def issuer_updated(self) -> float | None:
        """When Linkerd's identity last took up a new issuer, as its cached Events say."""
        times = [t for e in self.issuer_events.store.list() if (t := issuer_event_time(e))]
        return max(times, default=None)
