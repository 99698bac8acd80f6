"""Readiness tells the truth after an API server outage: not ready while any cache is stale,
ready again only once every cache holds what was written while it was away.

Issue 37 (finding 7): after a 20 s outage ``/readyz`` said true while the caches were stale.
A watch resumed on the restarted API server is answered 200, then 410 (its resourceVersion
predates the new watch cache): the informer counted the 200 as health, and stayed "healthy"
through the relist that followed, however long that took.

The informers here wait out their backoff until told to retry, so every object the test
writes after the restart is on the server before any informer reconnects: from then on a
cache without it is stale, and the manager must not say ready. Both ways of relisting are
covered (a streaming list in protobuf, paged LISTs in JSON), with a cluster-scoped informer.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from devcluster.cluster import LocalControlPlane
from linkerd_config.kube.client import CONTENT_TYPES, KubeClient
from linkerd_config.kube.informer import Informer
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.leader import NoElection
from linkerd_config.kube.ratelimit import JitteredBackoff
from linkerd_config.kube.resource import CONFIGMAPS, LEASES, NAMESPACES
from linkerd_config.manager import Manager
from tests.support.informer_objects import configmap, make_namespace
from tests.support.waiting import eventually

UNTIL_TOLD = 3600.0
"""The informers' backoff: they reconnect when the test says so (as the app's watch-path
health tells them when the API server answers again), never on their own."""


@dataclass(frozen=True)
class Sample:
    at: float
    ready: bool
    alive: bool
    missing: tuple[str, ...]
    """Informers whose cache lacks the object written for it after the restart."""


async def test_not_ready_while_any_cache_is_stale_after_an_api_server_restart(
    private_control_plane: LocalControlPlane,
) -> None:
    cp = private_control_plane
    access = await load_access(str(cp.kubeconfig))
    registry = CollectorRegistry()
    protobuf = KubeClient(access, registry=registry, user_agent="readiness-tests")
    json = KubeClient(
        access,
        registry=registry,
        user_agent="readiness-tests",
        content_type=CONTENT_TYPES["json"],
        watch_list=False,
    )
    for client in (protobuf, json):
        client.open()
    try:
        ns = await make_namespace(protobuf, "outage", with_kcm=False)
        await protobuf.request("POST", CONFIGMAPS.path(ns), body=configmap("before"))

        def backoff() -> JitteredBackoff:
            return JitteredBackoff(initial=UNTIL_TOLD, maximum=UNTIL_TOLD)

        marker = f"{ns}/marker"
        watched = [
            (Informer(protobuf, CONFIGMAPS, namespace=ns, backoff=backoff()), marker),
            (
                Informer(json, CONFIGMAPS, namespace=ns, backoff=backoff(), name="configmaps-json"),
                marker,
            ),
            (Informer(protobuf, LEASES, namespace=ns, backoff=backoff()), marker),
            (
                Informer(protobuf, NAMESPACES, metadata_only=True, backoff=backoff()),
                f"{ns}-marker",
            ),
        ]
        manager = Manager(NoElection(), sync_timeout=60)
        for inf, _ in watched:
            manager.add_informer(inf)
        stop = asyncio.Event()
        running = asyncio.create_task(manager.run(stop))
        try:
            await eventually(
                lambda: asyncio.sleep(0, result=manager.ready()), timeout=60, what="ready"
            )
            await asyncio.to_thread(cp.restart_apiserver)  # returns once /readyz says ok
            assert not manager.ready()
            assert manager.alive()
            assert not [inf.name for inf, _ in watched if inf.healthy]

            # Written while every informer waits out its backoff: each cache is stale now.
            await protobuf.request("POST", CONFIGMAPS.path(ns), body=configmap("marker"))
            await protobuf.request(
                "POST", LEASES.path(ns), body={"metadata": {"name": "marker"}, "spec": {}}
            )
            await protobuf.request(
                "POST", NAMESPACES.path(), body={"metadata": {"name": f"{ns}-marker"}}
            )

            def sample(started: float) -> Sample:
                missing = tuple(inf.name for inf, key in watched if inf.store.get(key) is None)
                return Sample(time.monotonic() - started, manager.ready(), manager.alive(), missing)

            started = time.monotonic()
            samples = [sample(started)]
            manager.retry_informers()
            # Every turn of the loop, so no moment of the informers' reconnection is missed.
            while not (samples[-1].ready and not samples[-1].missing):
                assert samples[-1].at < 120, f"not ready and current within 120 s: {samples[-1]}"
                await asyncio.sleep(0)
                samples.append(sample(started))
        finally:
            stop.set()
            await asyncio.wait_for(running, 30)
    finally:
        for client in (protobuf, json):
            await client.close()

    first_ready = next(s for s in samples if s.ready)
    print(
        f"\nafter the restart: {len(samples)} samples; ready again {first_ready.at:.3f} s "
        f"after the informers were told to retry; stale-while-ready samples: "
        f"{sum(1 for s in samples if s.ready and s.missing)}"
    )
    assert first_ready.missing == (), f"ready while stale: {first_ready}"
    assert [s for s in samples if s.ready and s.missing] == []
    assert all(s.alive for s in samples)
