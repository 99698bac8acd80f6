"""Informer benchmark: cache memory per 1,000 pods, and LIST / WATCH throughput.

Starts its own etcd + kube-apiserver (no scheduler: the pods stay Pending, which is all an
informer cares about), creates N realistic pods (~6 KB of JSON each: labels, annotations,
two containers with env vars), and measures an informer on them twice: caching whole
objects (minus managedFields, the default), and with a ``keep_fields`` transform that keeps
only name/namespace/uid/labels/annotations/ownerReferences/resourceVersion.

    .venv/bin/python bench/informer_bench.py [--pods 2000] [--updates 1000]

Prints a summary and writes ``bench/results/informer.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import structlog
from prometheus_client import CollectorRegistry

from devcluster import pinned
from devcluster.cluster import ControlPlaneOptions, LocalControlPlane
from linkerd_config.kube.client import MERGE_PATCH, KubeClient
from linkerd_config.kube.informer import Informer, Transform, keep_fields, strip_managed_fields
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.resource import PODS

Json = dict[str, Any]
RESULTS = Path(__file__).resolve().parent / "results" / "informer.json"
NAMESPACE = "bench"
MODES: dict[str, Transform | None] = {
    "none": None,  # no transform: the whole object as served, managedFields included
    "strip_managed_fields": strip_managed_fields,  # the Informer's default
    "keep_fields": keep_fields(  # + name/namespace/uid/resourceVersion, always kept
        "metadata.labels", "metadata.annotations", "metadata.ownerReferences"
    ),
}


def pod_manifest(i: int) -> Json:
    """A pod shaped like a typical meshed workload: ~6 KB of JSON stored, managedFields aside."""
    app = f"svc-{i % 40:02d}"
    env: list[Json] = [
        {"name": f"SETTING_{k:02d}", "value": f"value-{k}-{'x' * 24}"} for k in range(18)
    ]
    env.append(
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    )

    def container(name: str, image: str, port: int) -> Json:
        return {
            "name": name,
            "image": image,
            "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
            "env": env,
            "resources": {
                "requests": {"cpu": "100m", "memory": "128Mi"},
                "limits": {"cpu": "500m", "memory": "256Mi"},
            },
            "readinessProbe": {"httpGet": {"path": "/ready", "port": port}, "periodSeconds": 5},
            "volumeMounts": [{"name": "config", "mountPath": "/etc/config", "readOnly": True}],
        }

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{app}-{i:05d}",
            "labels": {
                "app.kubernetes.io/name": app,
                "app.kubernetes.io/part-of": "shop",
                "app.kubernetes.io/version": "1.4.2",
                "pod-template-hash": f"{i % 40:08x}",
                "team": ["payments", "search", "checkout"][i % 3],
            },
            "annotations": {
                "linkerd.io/inject": "enabled",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9090",
                "kubectl.kubernetes.io/last-applied-configuration": "{" + "a" * 900 + "}",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{app}-rs",
                    "uid": f"00000000-0000-0000-0000-{i % 40:012d}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "containers": [
                container("app", f"registry.example.com/shop/{app}:1.4.2", 8080),
                container("sidecar", "registry.example.com/proxy:2.1.0", 4143),
            ],
            "volumes": [{"name": "config", "configMap": {"name": f"{app}-config"}}],
        },
    }


async def bounded(limit: int, jobs: list[Callable[[], Awaitable[object]]]) -> float:
    """Run jobs ``limit`` at a time; returns the wall time taken."""
    gate = asyncio.Semaphore(limit)

    async def one(job: Callable[[], Awaitable[object]]) -> None:
        async with gate:
            await job()

    started = time.perf_counter()
    await asyncio.gather(*(one(j) for j in jobs))
    return time.perf_counter() - started


def deep_size(obj: Any, seen: set[int] | None = None) -> int:
    """sys.getsizeof over a JSON-shaped tree, each distinct object counted once."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, list):
        size += sum(deep_size(v, seen) for v in obj)
    return size


class Counter:
    """Counts MODIFIED deliveries and wakes the waiter at a target."""

    def __init__(self) -> None:
        self.updates = 0
        self.target = 0
        self.reached = asyncio.Event()
        self.last_at = 0.0

    def on_update(self, old: Json, new: Json) -> None:
        self.updates += 1
        self.last_at = time.perf_counter()
        if self.target and self.updates >= self.target:
            self.reached.set()

    def expect(self, n: int) -> None:
        self.updates, self.target = 0, n
        self.reached.clear()


def informer(client: KubeClient, mode: str) -> Informer:
    """Its metrics go to the client's registry (one per bench run)."""
    return Informer(client, PODS, namespace=NAMESPACE, transform=MODES[mode], name=mode)


def relists(client: KubeClient, mode: str) -> float:
    assert client.registry is not None
    value = client.registry.get_sample_value("informer_relists_total", {"resource": mode})
    return value or 0.0


async def list_seconds(client: KubeClient, mode: str) -> float:
    """Start-to-synced time of a fresh informer (paginated LIST, decode, transform, cache)."""
    inf = informer(client, mode)
    started = time.perf_counter()
    task = asyncio.create_task(inf.run())
    try:
        await inf.wait_synced(120)
        return time.perf_counter() - started
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def cache_bytes(client: KubeClient, mode: str) -> tuple[int, int]:
    """(tracemalloc growth, deep sizeof) of a synced informer's cache."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    inf = informer(client, mode)
    task = asyncio.create_task(inf.run())
    try:
        await inf.wait_synced(300)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return traced, deep_size(inf.store.snapshot())


async def watch_rates(
    client: KubeClient, mode: str, names: list[str], updates: int, round_no: int
) -> Json:
    """Two watch measurements on a running informer of ``mode``.

    backlog: the informer is stopped, ``updates`` pods change, the informer resumes from its
    resourceVersion and drains the backlog -- decode/apply speed, not write speed.
    live: updates are written while it runs -- end-to-end, bounded by the API server's writes.
    """
    relists_before = relists(client, mode)
    inf = informer(client, mode)
    counter = Counter()
    inf.add_handler(on_update=counter.on_update)
    path = PODS.path(NAMESPACE)
    targets = names[:updates]

    def patches(tag: str) -> list[Callable[[], Awaitable[object]]]:
        body = {"metadata": {"labels": {"bench-round": tag}}}
        return [
            partial(client.request, "PATCH", f"{path}/{n}", body=body, content_type=MERGE_PATCH)
            for n in targets
        ]

    task = asyncio.create_task(inf.run())
    await inf.wait_synced(120)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    write_seconds = await bounded(50, patches(f"{mode}-{round_no}-backlog"))
    counter.expect(len(targets))
    started = time.perf_counter()
    task = asyncio.create_task(inf.run())
    try:
        await asyncio.wait_for(counter.reached.wait(), 120)
        backlog_seconds = counter.last_at - started
        relisted = relists(client, mode) - relists_before

        counter.expect(len(targets))
        live_started = time.perf_counter()
        live_write = await bounded(50, patches(f"{mode}-{round_no}-live"))
        await asyncio.wait_for(counter.reached.wait(), 120)
        live_seconds = counter.last_at - live_started
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return {
        "events": len(targets),
        "backlog_seconds": round(backlog_seconds, 3),
        "backlog_events_per_s": round(len(targets) / backlog_seconds),
        "backlog_relisted": relisted > 1,  # 410: the watch cache dropped the backlog
        "backlog_write_seconds": round(write_seconds, 3),
        "live_seconds": round(live_seconds, 3),
        "live_events_per_s": round(len(targets) / live_seconds),
        "live_write_seconds": round(live_write, 3),
    }


async def bench(cp: LocalControlPlane, pods: int, updates: int, rounds: int) -> Json:
    access = await load_access(str(cp.kubeconfig))
    registry = CollectorRegistry()
    async with KubeClient(
        access, user_agent="informer-bench", pool_size=64, registry=registry
    ) as client:
        await client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})
        manifests = [pod_manifest(i) for i in range(pods)]
        path = PODS.path(NAMESPACE)
        create_seconds = await bounded(
            50, [partial(client.request, "POST", path, body=m) for m in manifests]
        )
        print(f"created {pods} pods in {create_seconds:.1f}s")
        listing = await client.request("GET", path, params={"limit": 50})
        sample = listing["items"]
        stored = statistics.mean(len(orjson.dumps(p)) for p in sample)
        stored_no_mf = statistics.mean(
            len(orjson.dumps(strip_managed_fields(orjson.loads(orjson.dumps(p))))) for p in sample
        )
        names = [m["metadata"]["name"] for m in manifests]

        await list_seconds(client, "keep_fields")  # warm-up: connections, imports, first-use caches
        result: Json = {
            "pods": pods,
            "pod_json_bytes_as_submitted": round(
                statistics.mean(len(orjson.dumps(m)) for m in manifests[:50])
            ),
            "pod_json_bytes_as_stored": round(stored),
            "pod_json_bytes_without_managed_fields": round(stored_no_mf),
            "create_seconds": round(create_seconds, 2),
            "modes": {},
        }
        for mode in MODES:
            traced, deep = await cache_bytes(client, mode)
            seconds = [await list_seconds(client, mode) for _ in range(rounds)]
            best = min(seconds)
            watch = await watch_rates(client, mode, names, updates, 0)
            result["modes"][mode] = {
                "cache_kib_per_1000_pods_tracemalloc": round(traced / pods * 1000 / 1024),
                "cache_kib_per_1000_pods_deep_sizeof": round(deep / pods * 1000 / 1024),
                "list_sync_seconds": [round(s, 3) for s in seconds],
                "list_events_per_s": round(pods / best),
                "watch": watch,
            }
            print(mode, json.dumps(result["modes"][mode]))
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--updates", type=int, default=1000, help="MODIFIED events per run")
    parser.add_argument("--rounds", type=int, default=3, help="LIST timings per mode")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.updates > args.pods:
        parser.error("--updates cannot exceed --pods")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))  # warnings+

    started = time.perf_counter()
    with LocalControlPlane(ControlPlaneOptions(workloads=False)) as cp:
        result = asyncio.run(bench(cp, args.pods, args.updates, args.rounds))
    result["environment"] = {
        "python": platform.python_version(),
        "kubernetes": pinned.KUBERNETES,
        "etcd": pinned.ETCD,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }
    result["total_seconds"] = round(time.perf_counter() - started, 1)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")

    print()
    print(
        f"{'transform':21} {'KiB/1000 pods (tracemalloc / sizeof)':>37} {'LIST ev/s':>10} "
        f"{'WATCH backlog ev/s':>19} {'WATCH live ev/s':>16}"
    )
    for mode, m in result["modes"].items():
        mem = (
            f"{m['cache_kib_per_1000_pods_tracemalloc']} / "
            f"{m['cache_kib_per_1000_pods_deep_sizeof']}"
        )
        w = m["watch"]
        print(
            f"{mode:21} {mem:>37} {m['list_events_per_s']:>10} "
            f"{w['backlog_events_per_s']:>19} {w['live_events_per_s']:>16}"
        )
    print(f"wrote {args.output} ({result['total_seconds']}s total)")


if __name__ == "__main__":
    main()
