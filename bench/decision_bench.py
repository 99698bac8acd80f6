"""CPU time of the pure decisions over many pods: the controller's rollout plan (its hot path:
once per cache change), and the ``plan`` / ``status`` commands' decisions once the cluster
is read. No API server: pods as the controller caches them (metadata projections), half of
them stale, two per Deployment, 2,000 namespaces at most.

    .venv/bin/python bench/decision_bench.py [--pods 1000,10000,50000] [--repeats 5]

Prints a table and writes ``bench/results/decisions.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.configmap.desired import desired_config
from linkerd_config.linkerd.spec.crd import target_of
from linkerd_config.linkerd.status.plan import RolloutDefaults, plan, status
from linkerd_config.linkerd.status.view import ClusterView
from tests.support.samples import install_configmap, sample

RESULTS = Path(__file__).parent / "results" / "decisions.json"
OLD, NEW = "edge-19.12.1", "edge-19.12.3"


def cluster(pods: int) -> ClusterView:
    """``pods`` opted-in Running pods, two per Deployment; odd Deployments on the old proxy."""
    objects, replicasets = [], {}
    for i in range(pods):
        ns, deployment = f"ns{(i // 2) % 2000}", f"app{i // 2}"
        version = OLD if (i // 2) % 2 else NEW
        objects.append(
            mesh.running_pod_metadata(
                {
                    "metadata": {
                        "name": f"{deployment}-{i}",
                        "namespace": ns,
                        "uid": f"uid-{i}",
                        "labels": {mesh.RECONCILE_LABEL: mesh.RECONCILE_AUTO},
                        "annotations": {mesh.PROXY_VERSION_ANNOTATION: version},
                        "ownerReferences": [
                            {"kind": "ReplicaSet", "name": f"{deployment}-rs", "controller": True}
                        ],
                    }
                }
            )
        )
        replicasets[f"{ns}/{deployment}-rs"] = mesh.replicaset_projection(
            {
                "metadata": {
                    "name": f"{deployment}-rs",
                    "namespace": ns,
                    "ownerReferences": [
                        {"kind": "Deployment", "name": deployment, "controller": True}
                    ],
                }
            }
        )
    cm = install_configmap()
    return ClusterView(
        configs=[],
        configmaps={f"linkerd/{cm['metadata']['name']}": cm},
        pods=objects,
        namespaces={},
        replicasets=replicasets,
        workloads={"Deployment": {}},
        config_namespace="linkerd",
    )


def timed(fn: Callable[[], object], repeats: int) -> dict[str, float]:
    fn()  # warm
    samples = []
    for _ in range(repeats):
        started = time.process_time()
        fn()
        samples.append(time.process_time() - started)
    return {"median_ms": round(statistics.median(samples) * 1000, 1)}


def bench(pods: int, repeats: int) -> dict[str, Any]:
    view = cluster(pods)
    config = sample("edge_19.12.3.yaml")
    config["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    target = target_of(config)
    desired = desired_config(config, {target.name: install_configmap()["data"]})
    defaults = RolloutDefaults()
    applied = ClusterView(**{**vars(view), "configs": [config]})
    planned = plan(config, view, defaults)
    assert len(planned.restarts) == pods // 4, len(planned.restarts)  # half the Deployments
    return {
        "pods": pods,
        "controller_plan_rollout": timed(lambda: view.rollout_plan(desired), repeats),
        "standing": timed(lambda: view.standing(desired), repeats),
        "plan_command": timed(lambda: plan(config, view, defaults), repeats),
        "status_command": timed(lambda: status(applied, defaults), repeats),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", default="1000,10000,50000")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows = [bench(int(n), args.repeats) for n in args.pods.split(",")]
    columns = ("controller_plan_rollout", "standing", "plan_command", "status_command")
    print(f"{'pods':>8} " + " ".join(f"{c:>24}" for c in columns) + "   (CPU ms, median)")
    for row in rows:
        print(f"{row['pods']:>8} " + " ".join(f"{row[c]['median_ms']:>24}" for c in columns))
    RESULTS.write_text(
        json.dumps(
            {
                "command": f"bench/decision_bench.py --pods {args.pods} --repeats {args.repeats}",
                "python": platform.python_version(),
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
