"""Latency of the product's two promises, with the controller running and leading:
a LinkerdConfig change reaches the ConfigMap, and a manual edit of the ConfigMap is reverted.

Prints and writes bench/results/reconcile.json. Run: make bench (or this file).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from devcluster.cluster import ControlPlaneOptions, LocalControlPlane
from linkerd_config.app import build, running
from linkerd_config.kube.client import MERGE_PATCH, KubeClient
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.resource import CONFIGMAPS
from linkerd_config.linkerd.spec.crd import LINKERD_CONFIGS_V1ALPHA1
from linkerd_config.logs import configure_logging
from tests.support import scenario
from tests.support.samples import sample
from tests.support.waiting import eventually

RESULTS = Path(__file__).parent / "results" / "reconcile.json"
ROUNDS = 20
CM = CONFIGMAPS.path("linkerd", "linkerd-config")


async def until(kube: KubeClient, done: Any, timeout: float = 30.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        cm = await kube.request("GET", CM)
        if done(cm):
            return time.monotonic() - started
        await asyncio.sleep(0.005)
    raise TimeoutError("condition not reached")


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "median_ms": round(statistics.median(ordered) * 1000, 1),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 1),
        "max_ms": round(ordered[-1] * 1000, 1),
    }


async def bench(cp: LocalControlPlane) -> dict[str, Any]:
    access = await load_access(str(cp.kubeconfig))
    async with KubeClient(access) as kube:
        await scenario.install_crd(kube)
        await scenario.install_linkerd_edge_19_12_1(kube)
        settings = scenario.local_settings(cp.kubeconfig)
        app = await build(settings)
        async with running(app):
            await eventually(lambda: asyncio.sleep(0, result=app.manager.leading), what="leading")
            obj = sample("edge_19.12.3.yaml")
            await kube.request("POST", LINKERD_CONFIGS_V1ALPHA1.path(), body=obj)
            await until(kube, lambda cm: "edge-19.12.3" in cm["data"]["proxy"])

            applies = []
            for i in range(ROUNDS):
                uid = 3000 + i
                await kube.request(
                    "PATCH",
                    LINKERD_CONFIGS_V1ALPHA1.path(name="edge-19.12.3"),
                    body={"spec": {"proxy": {"proxyUID": uid}}},
                    content_type=MERGE_PATCH,
                )
                applies.append(await until(kube, lambda cm, u=uid: f'"{u}"' in cm["data"]["proxy"]))
            good = (await kube.request("GET", CM))["data"]["proxy"]
            reverts = []
            for i in range(ROUNDS):
                await kube.request(
                    "PATCH", CM, body={"data": {"proxy": f"{{{i}}}"}}, content_type=MERGE_PATCH
                )
                reverts.append(await until(kube, lambda cm: cm["data"]["proxy"] == good))
    return {"apply_to_configmap": summary(applies), "manual_edit_to_revert": summary(reverts)}


def main() -> None:
    configure_logging("warning", "console")
    with LocalControlPlane(ControlPlaneOptions(workloads=False), progress=lambda _m: None) as cp:
        results = asyncio.run(bench(cp))
    for name, s in results.items():
        print(
            f"{name}: median {s['median_ms']} ms, p90 {s['p90_ms']} ms, max {s['max_ms']} ms "
            f"over {s['n']} rounds"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
