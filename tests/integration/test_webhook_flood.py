"""One pod cannot starve the webhooks (issue 39, finding 1).

The controller as users install it (``make helm-deploy``: two replicas, the chart's
resources and probes) on the real node (kubelet + containerd), and an ordinary pod on the
same node, in a tenant's namespace, running ``tests/support/flood.py`` with the controller's
own image: from its one pod IP it floods both replicas' webhook, health and metrics ports,
with requests on kept-alive connections and a new connection (a TLS handshake) per request.

While it floods, the API server's calls and the kubelet's must be answered as if it did not:

* 100 dry-run creates of a LinkerdConfig through the API server, each reviewed by both
  webhooks (the mutating webhook's defaults come back; a refusal is the validating
  webhook's). Before, 4 of 100 failed with ``failed calling webhook``.
* the kubelet's probes: no ``Unhealthy`` Event for either pod, no restart. Before, the
  kubelet failed readiness 3 times (EOF, timeouts) and liveness twice in a row.
* each replica's memory stays under three quarters of its limit (VmHWM of the process, read
  on the node). Before, 63 → 148 MB against 256 Mi.
* the leader keeps its Lease and rolls the mesh (issue 61, finding 3): a LinkerdConfig is
  applied through the flooded webhooks once the flood runs, and Linkerd edge-26.8.3's mesh
  (its real injector, four opted-in Deployments) is rolled to its proxy; read every second,
  the Lease has one holder throughout, its renewals never further apart than its renew
  deadline. Before, a flooded leader's probes timed out for 53 s and it lost its Lease.

The flood's own report shows it was one: thousands of requests answered or refused.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from devcluster import real_node
from devcluster.cluster import LocalControlPlane
from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.resource import CONFIGMAPS
from linkerd_config.linkerd.admission.defaults import defaulted
from linkerd_config.linkerd.admission.webhooks import MUTATE_PATH, VALIDATE_PATH
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import formats, in_cluster, scenario
from tests.support.in_cluster import IMAGE, kubectl, make
from tests.support.samples import SAMPLES, load, sample
from tests.support.waiting import eventually
from tests.support.webhook_probe import DENIED

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
Json = dict[str, Any]

FLOOD = Path(__file__).resolve().parents[1] / "support" / "flood.py"
TENANT = "tenant"
FLOOD_SECONDS = 75
REVIEWS = 100
MEMORY_SHARE = 0.75
"""Of the chart's memory limit, at most, at the peak of each replica."""
MINIMAL = "edge_19.12.3_use_webhook_defaults.yaml"
MESHED, ROLLED = "mesh", ["web", "emoji", "voting", "vote-bot"]
"""The meshed namespace the leader rolls while it is flooded, and its Deployments."""
RENEW_DEADLINE = 10.0
"""``kube.leader``'s default: a leader that has not renewed for this long stops leading."""


def review_body() -> bytes:
    """An AdmissionReview as the API server sends one for a LinkerdConfig create."""
    obj = sample(MINIMAL)
    obj["metadata"] = {"name": "flood"}
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {
                    "group": "config.linkerd.io",
                    "version": "v1alpha1",
                    "kind": "LinkerdConfig",
                },
                "resource": {
                    "group": "config.linkerd.io",
                    "version": "v1alpha1",
                    "resource": "linkerdconfigs",
                },
                "name": "flood",
                "operation": "CREATE",
                "userInfo": {"username": "system:serviceaccount:tenant:default"},
                "object": obj,
                "dryRun": True,
            },
        }
    ).encode()


def flood_pod(targets: list[str]) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "flood", "namespace": TENANT},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "flood",
                    "image": IMAGE,
                    "imagePullPolicy": "Never",
                    "command": [
                        "python",
                        "/flood/flood.py",
                        "--seconds",
                        str(FLOOD_SECONDS),
                        "--keep-alive",
                        "48",
                        "--churn",
                        "16",
                        *targets,
                    ],
                    "volumeMounts": [{"name": "flood", "mountPath": "/flood"}],
                }
            ],
            "volumes": [{"name": "flood", "configMap": {"name": "flood"}}],
        },
    }


def tenant_namespace() -> Json:
    """A tenant's namespace, its pods on the real node (as ``linkerd``'s are)."""
    selector = f"{real_node.NODE_LABEL}={real_node.NODE_LABEL_VALUE}"
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": TENANT,
            "annotations": {"scheduler.alpha.kubernetes.io/node-selector": selector},
        },
    }


def container_pid(cp: LocalControlPlane, pod: Json) -> int:
    """The controller process's PID on the node (its container's task)."""
    container = pod["status"]["containerStatuses"][0]["containerID"].split("//", 1)[1]
    for line in cp.node.ctr("tasks", "ls").splitlines()[1:]:
        task, pid, *_ = line.split()
        if task == container:
            return int(pid)
    raise AssertionError(f"no task for {pod['metadata']['name']}")


def proc_status(pid: int) -> dict[str, int] | None:
    """``VmHWM`` and ``VmRSS`` in bytes, and the CPU time used (user + system) in clock
    ticks; None if the process is gone (its container restarted)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    fields = {}
    for line in status.splitlines():
        name, _, value = line.partition(":")
        if name in ("VmHWM", "VmRSS"):
            fields[name] = int(value.split()[0]) * 1024
    after_name = stat.rsplit(")", 1)[1].split()
    fields["cpu_ticks"] = int(after_name[11]) + int(after_name[12])
    return fields


def memory_limit(pod: Json) -> int:
    limit = pod["spec"]["containers"][0]["resources"]["limits"]["memory"]
    assert limit.endswith("Mi"), limit
    return int(limit[:-2]) * 2**20


async def dry_run_create(kube: KubeClient, i: int) -> str | None:
    """A dry-run create through the API server; None if both webhooks answered as they
    should, else what went wrong."""
    valid = sample(MINIMAL)
    valid["metadata"] = {"name": f"flood-{i}"}
    valid["spec"]["global"]["configMap"] = "flood-review"  # not the one the mesh's manages
    try:
        created = await kube.request(
            "POST", LINKERD_CONFIGS.path(), body=valid, params={"dryRun": "All"}, fenced=False
        )
    except ApiError as exc:
        return exc.message
    if created["spec"] != defaulted(valid["spec"]):
        return "the mutating webhook's defaults are missing"
    if i % 10 == 0:  # and the validating webhook refuses what it must
        invalid = load(SAMPLES / "invalid" / "expired_trust_anchor.yaml")
        invalid["metadata"] = {"name": f"flood-refused-{i}"}
        invalid["spec"]["global"]["configMap"] = "flood-review"
        try:
            await kube.request(
                "POST", LINKERD_CONFIGS.path(), body=invalid, params={"dryRun": "All"},
                fenced=False,
            )  # fmt: skip
        except ApiError as exc:
            return None if DENIED in exc.message else exc.message
        return "an expired trust anchor was admitted"
    return None


def unhealthy_events(cp: LocalControlPlane, names: list[str]) -> list[str]:
    events = json.loads(kubectl(cp, "-n", in_cluster.NAMESPACE, "get", "events", "-o", "json"))
    return [
        f"{e['involvedObject']['name']}: {e.get('message', '')} (x{e.get('count', 1)})"
        for e in events["items"]
        if e.get("reason") in ("Unhealthy", "Killing", "BackOff")
        and e["involvedObject"]["name"] in names
    ]


async def test_one_pod_flooding_starves_neither_reviews_nor_probes(
    node_cluster: LocalControlPlane, node_kube: KubeClient, node_image: str, tmp_path: Path
) -> None:
    cp = node_cluster
    make(cp, "helm-deploy", f"IMG={node_image}")
    pods = await in_cluster.running_install(cp)
    names = sorted(p["metadata"]["name"] for p in pods)
    pids = {p["metadata"]["name"]: container_pid(cp, p) for p in pods}
    limit = memory_limit(pods[0])
    before = {name: proc_status(pid) for name, pid in pids.items()}

    # The webhooks answer through their Service before the flood starts.
    assert await eventually(
        lambda: _none_failed(node_kube, 0), timeout=60, interval=1, what="the webhooks answering"
    )
    assert unhealthy_events(cp, names) == []

    # A mesh to roll while it floods: Linkerd edge-26.8.3 (its real injector) and three
    # opted-in Deployments.
    async with formats.installed(cp, node_kube, formats.VALUES):
        await scenario.meshed_namespace(node_kube, MESHED, ROLLED, replicas=1)
        # The flooder: an ordinary pod in a tenant's namespace, the controller's image.
        body = tmp_path / "review.json"
        body.write_bytes(review_body())
        tenant = tmp_path / "tenant.json"
        tenant.write_text(json.dumps(tenant_namespace()))
        kubectl(cp, "apply", "-f", str(tenant))
        kubectl(cp, "-n", TENANT, "create", "configmap", "flood",
                f"--from-file=flood.py={FLOOD}", f"--from-file=review.json={body}")  # fmt: skip
        targets = []
        for pod in pods:
            ip = pod["status"]["podIP"]
            targets += [
                f"https://{ip}:9443{MUTATE_PATH}=@/flood/review.json",
                f"https://{ip}:9443{VALIDATE_PATH}=@/flood/review.json",
                f"http://{ip}:8081/readyz",
                f"http://{ip}:8081/healthz",
                f"http://{ip}:8080/metrics",
            ]
        manifest = tmp_path / "flood.json"
        manifest.write_text(json.dumps(flood_pod(targets)))
        kubectl(cp, "apply", "-f", str(manifest))

        async def flooding() -> bool:
            logs = kubectl(cp, "-n", TENANT, "logs", "flood", check=False)
            if '"flooding"' in logs:
                return True
            pod = kubectl(cp, "-n", TENANT, "get", "pod", "flood", "-o", "json", check=False)
            raise AssertionError(f"not flooding yet: {logs[-500:]} {pod[-1500:]}")

        leases: list[tuple[float, tuple[str, str] | None]] = []

        async def watch_lease() -> None:
            while True:
                leases.append(
                    (time.monotonic(), await asyncio.to_thread(in_cluster.lease_renewed, cp))
                )
                await asyncio.sleep(1.0)

        lease_task = asyncio.create_task(watch_lease())
        await eventually(flooding, timeout=120, interval=0.5, what="the flood started")
        started = time.monotonic()
        await asyncio.sleep(5)  # in full flow

        # The rollout starts while it floods: the LinkerdConfig applied through the flooded
        # webhooks, the leader restarting the mesh's Deployments meanwhile.
        fmt = formats.VALUES
        manifest = tmp_path / "linkerdconfig.json"
        manifest.write_text(json.dumps({"apiVersion": "config.linkerd.io/v1alpha1",
                                        "kind": "LinkerdConfig", "metadata": {"name": "mesh"},
                                        "spec": fmt.spec(fmt.good, {})}))  # fmt: skip
        kubectl(cp, "apply", "-f", str(manifest))

        async def rolled() -> float | None:
            cm = await node_kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
            running = await scenario.running_pods(node_kube, MESHED)
            versions = set(scenario.proxy_versions(running).values())
            done = fmt.written(cm) == fmt.good and len(running) == len(ROLLED)
            return time.monotonic() if done and versions == {fmt.good} else None

        rolled_task = asyncio.create_task(
            eventually(rolled, timeout=FLOOD_SECONDS + 120, interval=1, what="the rollout")
        )

        # The API server's reviews, one every half second while it floods.
        failures: list[str] = []
        for i in range(REVIEWS):
            failed = await dry_run_create(node_kube, i)
            if failed is not None:
                failures.append(failed)
            await asyncio.sleep(0.5)
        reviewed_in = time.monotonic() - started
        during = {name: proc_status(pid) for name, pid in pids.items()}

        async def flood_done() -> list[Json] | None:
            phase = kubectl(cp, "-n", TENANT, "get", "pod", "flood", "-o",
                            "jsonpath={.status.phase}")  # fmt: skip
            if phase not in ("Succeeded", "Failed"):
                return None
            lines = kubectl(cp, "-n", TENANT, "logs", "flood").splitlines()
            return [json.loads(line) for line in lines if line.startswith("{")]

        try:
            report = await eventually(flood_done, timeout=FLOOD_SECONDS + 60, interval=1,
                                      what="the flood's report")  # fmt: skip
            rolled_at = await rolled_task
        finally:
            lease_task.cancel()
            rolled_task.cancel()
        after = {name: proc_status(pid) for name, pid in pids.items()}
        per_target = [r for r in report if "target" in r]
        answered = sum(int(r["answered"]) for r in per_target)
        opened = sum(int(r["opened"]) for r in per_target)
        print(
            f"flood: {answered} requests answered, {opened} connections opened in "
            f"{FLOOD_SECONDS}s; reviews through the API server took {reviewed_in:.0f}s"
        )
        for r in per_target:
            print(json.dumps(r))
        gone = sorted(name for name in names if after[name] is None)
        for name in names:
            was, mid, end = before[name], during[name], after[name]
            if was is None or mid is None or end is None:
                print(f"{name}: its process is gone (restarted)")
                continue
            cpu = (mid["cpu_ticks"] - was["cpu_ticks"]) / 100 / reviewed_in
            print(f"{name}: RSS {was['VmRSS'] >> 20} -> peak {end['VmHWM'] >> 20} MiB "
                  f"(limit {limit >> 20} MiB), CPU {cpu:.2f} cores while reviewed")  # fmt: skip
        unhealthy = unhealthy_events(cp, names)
        holders = {lease[0] for _, lease in leases if lease is not None}
        renewals = [at for (at, lease), (_, before) in zip(leases[1:], leases, strict=False)
                    if lease is not None and lease != before]  # fmt: skip
        gaps = [b - a for a, b in zip([leases[0][0], *renewals], renewals, strict=False)]
        print(f"lease: holders {holders}, {len(renewals)} renewals seen in {len(leases)} reads, "
              f"longest gap {max(gaps, default=0):.1f}s")  # fmt: skip
        print(f"rollout of {len(ROLLED)} Deployments done {rolled_at - started:.0f}s into the "
              f"flood ({FLOOD_SECONDS}s)")  # fmt: skip
        print(f"{len(failures)} of {REVIEWS} reviews failed: {failures[:3]}")
        print(f"kubelet: {unhealthy}")

        # It was a flood: thousands of requests from the one pod, against every port.
        assert answered > 2000, report
        assert all(int(r["answered"]) + int(r["refused"]) + int(r["closed_by_server"]) > 0
                   for r in per_target), report  # fmt: skip
        # The API server's calls were answered, every one.
        assert failures == [], f"{len(failures)} of {REVIEWS} reviews failed: {failures[:3]}"
        # So were the kubelet's probes: no failure, no restart.
        assert unhealthy == []
        assert gone == []
        now = {p["metadata"]["name"]: p for p in in_cluster.controller_pods(cp)}
        assert sorted(now) == names
        assert all(now[n]["status"]["containerStatuses"][0]["restartCount"] == 0 for n in names)
        assert all(in_cluster.ready(now[n]) for n in names)
        # The mesh was rolled while it flooded.
        assert rolled_at - started < FLOOD_SECONDS - 10, rolled_at - started
        # The leader led throughout: one holder, renewed within its deadline every time.
        assert None not in (lease for _, lease in leases), leases
        assert len(holders) == 1, leases
        assert len(renewals) >= FLOOD_SECONDS / RENEW_DEADLINE, leases
        assert max(gaps) < RENEW_DEADLINE, leases
        # Memory held well inside the limit.
        for name in names:
            end = after[name]
            assert end is not None and end["VmHWM"] <= MEMORY_SHARE * limit, (name, end, limit)


async def _none_failed(kube: KubeClient, i: int) -> bool:
    return await dry_run_create(kube, i) is None
