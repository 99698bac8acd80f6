"""The whole machinery together against the real API server: informer → queue → workers,
leader election gating writes, probes and controller-runtime metrics."""

from __future__ import annotations

import asyncio
import re
import uuid
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry

from devcluster.cluster import LocalControlPlane, free_port
from linkerd_config.kube.client import MERGE_PATCH, KubeClient
from linkerd_config.kube.controller import Controller, ControllerOptions, Result
from linkerd_config.kube.events import EventRecorder
from linkerd_config.kube.informer import Informer
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.leader import (
    LeaderElectionConfig,
    LeaderElector,
    LeaderGate,
    NoElection,
)
from linkerd_config.kube.probes import Probes
from linkerd_config.kube.resource import CONFIGMAPS, EVENTS, LEASES
from linkerd_config.kube.serving import serve
from linkerd_config.manager import Manager
from tests.support.waiting import eventually

SEEN = "example.com/seen"

MIRRORED = {"labelSelector": "app=mirror"}
"""Only the test's ConfigMaps (KCM publishes kube-root-ca.crt in every namespace too)."""


class MarkSeen:
    """A toy reconciler: annotate every ConfigMap the informer knows."""

    def __init__(self, client: KubeClient, informer: Informer) -> None:
        self.client = client
        self.informer = informer

    async def reconcile(self, key: str) -> Result:
        obj = self.informer.store.get(key)
        if obj is None:
            return Result()
        if SEEN in (obj["metadata"].get("annotations") or {}):
            return Result()
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        await self.client.request(
            "PATCH",
            CONFIGMAPS.path(ns, name),
            body={"metadata": {"annotations": {SEEN: "yes"}}},
            content_type=MERGE_PATCH,
        )
        return Result()


async def metric_lines(port: int) -> dict[str, float]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/metrics", timeout=aiohttp.ClientTimeout(10)) as r,
    ):
        text = await r.text()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def one(samples: dict[str, float], pattern: str) -> float:
    matches = [v for k, v in samples.items() if re.fullmatch(pattern, k)]
    assert len(matches) == 1, (pattern, [k for k in samples if k.startswith(pattern[:20])])
    return matches[0]


async def test_manager_reconciles_under_leadership_and_serves_metrics(
    kube: KubeClient, control_plane: LocalControlPlane
) -> None:
    ns = f"mgr-{uuid.uuid4().hex[:6]}"
    await kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    for i in range(5):
        await kube.request(
            "POST",
            CONFIGMAPS.path(ns),
            body={
                "metadata": {"name": f"cm-{i}", "labels": {"app": "mirror"}},
                "data": {"i": str(i)},
            },
        )

    registry = CollectorRegistry()
    access = await load_access(str(control_plane.kubeconfig))
    client = KubeClient(access, registry=registry)
    client.open()
    elector = LeaderElector(
        client,
        LeaderElectionConfig(ns, "mgr-test", lease_duration=4, renew_deadline=3, retry_period=0.5),
        registry,
    )
    client.write_gate = LeaderGate(elector)
    informer = Informer(client, CONFIGMAPS, namespace=ns, label_selector=MIRRORED["labelSelector"])
    controller = Controller(
        "mark-seen",
        MarkSeen(client, informer),
        options=ControllerOptions(workers=3),
        registry=registry,
    )
    informer.add_handler(
        on_add=lambda o: controller.enqueue(f"{ns}/{o['metadata']['name']}"),
        on_update=lambda _old, new: controller.enqueue(f"{ns}/{new['metadata']['name']}"),
    )
    manager = Manager(elector)
    probes = Probes(registry)
    probes.ready_checks["manager"] = manager.ready
    metrics_port, health_port = free_port(), free_port()
    manager.add_server(
        "metrics", lambda: serve(probes.metrics_app(), "127.0.0.1", metrics_port, name="metrics")
    )
    manager.add_server(
        "health", lambda: serve(probes.health_app(), "127.0.0.1", health_port, name="health")
    )
    manager.add_informer(informer)
    manager.add_controller(controller, informer.store.keys)

    stop = asyncio.Event()
    running = asyncio.create_task(manager.run(stop))
    try:

        async def all_seen() -> bool:
            items = (await kube.request("GET", CONFIGMAPS.path(ns), params=MIRRORED))["items"]
            return all(SEEN in (i["metadata"].get("annotations") or {}) for i in items)

        await eventually(all_seen, timeout=60, what="every ConfigMap reconciled")

        async def ready() -> bool:
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"http://127.0.0.1:{health_port}/readyz") as r,
            ):
                return r.status == 200

        assert await eventually(ready, timeout=10, what="/readyz ok")

        samples = await metric_lines(metrics_port)
        c = 'controller="mark-seen"'
        assert one(samples, rf'controller_runtime_reconcile_total\{{{c},result="success"\}}') >= 5
        assert one(samples, rf'controller_runtime_reconcile_total\{{{c},result="error"\}}') == 0
        assert one(samples, rf"controller_runtime_reconcile_errors_total\{{{c}\}}") == 0
        assert one(samples, rf"controller_runtime_reconcile_time_seconds_count\{{{c}\}}") >= 5
        assert one(samples, rf"controller_runtime_max_concurrent_reconciles\{{{c}\}}") == 3
        assert one(samples, rf"controller_runtime_active_workers\{{{c}\}}") >= 0
        q = 'controller="mark-seen",name="mark-seen"'
        assert one(samples, rf"workqueue_adds_total\{{{q}\}}") >= 5
        assert one(samples, rf"workqueue_depth\{{{q}\}}") >= 0
        assert one(samples, rf"workqueue_queue_duration_seconds_count\{{{q}\}}") >= 5
        assert one(samples, rf"workqueue_work_duration_seconds_count\{{{q}\}}") >= 5
        assert one(samples, rf"workqueue_retries_total\{{{q}\}}") == 0
        assert one(samples, rf"workqueue_unfinished_work_seconds\{{{q}\}}") >= 0
        assert one(samples, rf"workqueue_longest_running_processor_seconds\{{{q}\}}") >= 0
        assert one(samples, r'leader_election_master_status\{name="mgr-test"\}') == 1
        host = re.escape(control_plane.server.removeprefix("https://"))
        assert (
            one(
                samples, rf'rest_client_requests_total\{{code="200",host="{host}",method="PATCH"\}}'
            )
            >= 5
        )
        assert one(samples, r'informer_cache_objects\{resource="configmaps"\}') == 5
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)
        await client.close()

    # A graceful stop releases the Lease so a successor leads at once.
    lease: dict[str, Any] = await kube.request("GET", LEASES.path(ns, "mgr-test"))
    assert not lease["spec"].get("holderIdentity")


async def test_manager_stops_when_a_component_fails(kube: KubeClient) -> None:
    async def broken_server() -> None:
        raise RuntimeError("port in use")

    manager = Manager(NoElection())
    manager.add_server("broken", broken_server)
    # Returns by itself (no stop signal): a dead component must not leave a zombie manager.
    await asyncio.wait_for(manager.run(asyncio.Event()), 10)
    assert not manager.ready()
    assert not manager.alive()


async def test_a_graceful_stop_writes_waiting_event_counts_before_the_lease_goes(
    kube: KubeClient, control_plane: LocalControlPlane
) -> None:
    """A repeat's count waits up to the series interval (5 s) to be written. At a graceful
    stop the manager's drain writes it while the replica still holds the Lease: after the
    release the write gate would refuse it, and the Event would keep its first count."""
    ns = f"mgr-{uuid.uuid4().hex[:6]}"
    await kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    cm = await kube.request(
        "POST", CONFIGMAPS.path(ns), body={"metadata": {"name": "involved"}, "data": {}}
    )
    cm |= {"apiVersion": "v1", "kind": "ConfigMap"}
    registry = CollectorRegistry()
    client = KubeClient(await load_access(str(control_plane.kubeconfig)), registry=registry)
    client.open()
    elector = LeaderElector(
        client,
        LeaderElectionConfig(
            ns, "drain-test", lease_duration=4, renew_deadline=3, retry_period=0.5
        ),
        registry,
    )
    client.write_gate = LeaderGate(elector)
    recorder = EventRecorder(client, "linkerd-config-test")
    manager = Manager(elector)
    manager.add_server("events", recorder.run)
    manager.add_drain("events", recorder.flush)
    stop = asyncio.Event()
    running = asyncio.create_task(manager.run(stop))
    try:

        async def leading() -> bool:
            return manager.leading

        await eventually(leading, timeout=30, what="the manager leads")
        for _ in range(3):
            recorder.record(cm, "Normal", "Repeated", "the same message")
        assert recorder.pending >= 1  # the repeats' count waits for its interval
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)
        await client.close()
    assert recorder.stats == {"created": 1, "patched": 1}, recorder.stats
    listed = await kube.request(
        "GET",
        EVENTS.path(ns),
        params={"fieldSelector": f"involvedObject.uid={cm['metadata']['uid']}"},
    )
    assert [(e["reason"], e["count"]) for e in listed["items"]] == [("Repeated", 3)]
    lease: dict[str, Any] = await kube.request("GET", LEASES.path(ns, "drain-test"))
    assert not lease["spec"].get("holderIdentity")
