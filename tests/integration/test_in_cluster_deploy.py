"""The controller as users run it: the image built with ``make docker-build-local``, loaded
into the real node of a local control plane, installed with ``make deploy`` (kustomize, the
default overlay with the real cert-manager) and ``make helm-deploy``, running as two pods.

Each install is checked from outside, as an operator would: Ready through its probes, the
in-cluster configuration, no 403 in its logs, one Lease holder and a handover when the
leader's pod is deleted, no write by a non-holder (the audit log), the webhooks reached
through their Service, ``/metrics`` scraped on the pod IP by the real Prometheus, a scenario
with Linkerd's real injector reconciled from inside the cluster (the seed scenario, legacy
format, under kustomize; edge-26.8.3's values format under Helm), a crash of the leader's
process, and a clean uninstall.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from devcluster.cluster import LocalControlPlane
from devcluster.prometheus import Prometheus, ScrapeJob
from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.resource import CONFIGMAPS
from linkerd_config.linkerd.spec.conversion import GROUP, SERVED_VERSIONS, convert
from linkerd_config.linkerd.spec.crd import LINKERD_CONFIGS, LINKERD_CONFIGS_V1ALPHA1
from linkerd_config.settings import parse
from tests.support import formats, in_cluster, scenario
from tests.support.in_cluster import IMAGE, kubectl, make
from tests.support.local_run import (
    Shell,
    guide_commands,
    interrupt,
    started,
    stopped_gracefully,
)
from tests.support.samples import SAMPLES, load
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration
Json = dict[str, Any]

SETTINGS = parse([])
HANDOVER_LIMIT = SETTINGS.lease_duration + SETTINGS.retry_period
"""A follower takes over at the latest one lease duration after the last renewal, noticing
within one retry period."""
NOT_OBJECTS = frozenset({"events", "events.events.k8s.io"})
"""Listed but not installed: what happened, not what exists."""


def snapshot(cp: LocalControlPlane) -> set[str]:
    """Every object of every listable kind the API server serves, in namespace linkerd and
    cluster-wide: an uninstall is judged by the difference, not by a list of kinds."""
    names: list[str] = []
    for namespaced, where in (("true", ["-n", in_cluster.NAMESPACE]), ("false", [])):
        kinds = kubectl(
            cp, "api-resources", "--verbs=list", f"--namespaced={namespaced}", "-o", "name"
        ).split()
        kinds = [k for k in kinds if k not in NOT_OBJECTS]
        names += kubectl(cp, "get", ",".join(kinds), *where, "-o", "name").split()
    return set(names)


async def check_install(
    cp: LocalControlPlane,
    kube: KubeClient,
    deployed_at: float,
    before: set[str],
    reconciles: Callable[[LocalControlPlane, KubeClient], Awaitable[None]],
) -> set[str]:
    """Checks a running install from outside; returns what the install made (every object
    that appeared from ``before`` to its pods being Ready)."""
    pods = await in_cluster.running_install(cp)
    installed = snapshot(cp) - before
    names = sorted(p["metadata"]["name"] for p in pods)

    # In-cluster configuration, as its own ServiceAccount, with no 403 anywhere.
    for name in names:
        logs = in_cluster.pod_logs(cp, name)
        assert '"cluster": "in-cluster"' in logs, logs[-2000:]
        assert " 403" not in logs and "Forbidden" not in logs and "forbidden" not in logs, logs[
            -3000:
        ]

    # One leader.
    holder = await eventually(
        lambda: _async(in_cluster.lease_holder(cp)), timeout=60, what="a Lease holder"
    )
    assert holder in names

    # The webhooks, called by the API server through their Service (kube-proxy routes it).
    for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        configs = json.loads(kubectl(cp, "get", kind, "-o", "json"))["items"]
        ours = [c for c in configs if c["metadata"]["name"].startswith("linkerd-config")]
        assert ours and all(
            w["clientConfig"]["service"]["namespace"] == in_cluster.NAMESPACE
            and "url" not in w["clientConfig"]
            for c in ours
            for w in c["webhooks"]
        ), ours
    garbage = str(SAMPLES / "invalid" / "garbage_pem.yaml")

    async def answered() -> str | None:
        """The webhook's answer, once the Service routes to it: kube-proxy programs a new
        Service's rules a moment after its endpoints are ready (connection refused before)."""
        out = kubectl(cp, "apply", "-f", garbage, check=False)
        return None if "failed calling webhook" in out else out

    refused = await eventually(answered, timeout=60, interval=1, what="the webhooks answering")
    assert "denied the request" in refused and "trustAnchorsPEM" in refused, refused
    minimal = SAMPLES / "edge_19.12.3_use_webhook_defaults.yaml"
    defaulted = json.loads(
        kubectl(cp, "apply", "--dry-run=server", "-o", "json", "-f", str(minimal))
    )
    assert defaulted["spec"]["global"].get("version"), defaulted["spec"]

    # /metrics on each pod IP, scraped by the real Prometheus.
    ips = [p["status"]["podIP"] for p in pods]
    with Prometheus([ScrapeJob("in-cluster", [f"{ip}:8080" for ip in ips])]) as prom:
        prom.wait_scraped("in-cluster", timeout=60)
        up = prom.query('up{job="in-cluster"}')
        assert sorted(r["value"][1] for r in up) == ["1", "1"], up
        ours = prom.query('count by (instance) ({job="in-cluster",__name__=~"linkerd_config_.+"})')
        assert sorted(r["metric"]["instance"] for r in ours) == sorted(f"{ip}:8080" for ip in ips)

    # The seed scenario, reconciled from inside the cluster.
    await reconciles(cp, kube)

    # Handover: delete the leader's pod; another (the other replica, or the one the
    # ReplicaSet starts in its place: whichever asks first) takes the Lease within the
    # lease timings.
    started = time.monotonic()
    kubectl(cp, "-n", in_cluster.NAMESPACE, "delete", "pod", holder, "--wait=false")

    async def new_holder() -> str | None:
        now = in_cluster.lease_holder(cp)
        live = {p["metadata"]["name"] for p in in_cluster.controller_pods(cp)}
        return now if now and now != holder and now in live else None

    successor = await eventually(
        new_holder, timeout=HANDOVER_LIMIT + 30, interval=0.2, what="a new Lease holder"
    )
    took = time.monotonic() - started
    print(f"handover from {holder} to {successor} took {took:.1f}s")
    assert took <= HANDOVER_LIMIT, f"handover took {took:.1f}s (limit {HANDOVER_LIMIT:.0f}s)"

    # A crash: the new leader's process killed (SIGKILL, no release). The kubelet restarts
    # the container; the Lease is renewed by a live replica (the restarted one under the
    # same identity, or the other after the lease expires) within the lease timings.
    before = in_cluster.lease_renewed(cp)
    assert before is not None

    async def container_of_successor() -> str | None:
        """Its container's ID, once the kubelet has reported it: a pod new from the
        ReplicaSet can take the Lease before its status names the container."""
        for pod in in_cluster.controller_pods(cp):
            if pod["metadata"]["name"] == successor:
                statuses = pod["status"].get("containerStatuses") or [{}]
                found = statuses[0].get("containerID")
                return str(found).split("//", 1)[1] if found else None
        return None

    container = await eventually(container_of_successor, timeout=60, interval=0.2,
                                 what=f"{successor}'s container ID")  # fmt: skip
    started = time.monotonic()
    cp.node.ctr("tasks", "kill", "--signal", "SIGKILL", container)

    async def renewed_after_crash() -> tuple[str, str] | None:
        now = in_cluster.lease_renewed(cp)
        live = {
            p["metadata"]["name"]: p for p in in_cluster.controller_pods(cp) if in_cluster.ready(p)
        }
        if now is None or now[1] <= before[1] or now[0] not in live:
            return None
        restarts = live[now[0]]["status"]["containerStatuses"][0]["restartCount"]
        return now if now[0] != successor or restarts > 0 else None

    after = await eventually(
        renewed_after_crash, timeout=HANDOVER_LIMIT + 60, interval=0.2, what="a live leader"
    )
    took = time.monotonic() - started
    print(f"after SIGKILL of {successor}: {after[0]} leads, {took:.1f}s")
    assert took <= HANDOVER_LIMIT + 10, f"leaderless for {took:.1f}s after a crash"

    # No write by a non-holder, in the API server's own record.
    writes = in_cluster.controller_writes(cp, deployed_at)
    assert any(w.get("verb") in ("update", "patch", "create") for w in writes)
    assert in_cluster.writes_by_non_holders(writes) == []
    return installed


async def seed_scenario(cp: LocalControlPlane, kube: KubeClient) -> None:
    """edge-19.12.1 installed, Linkerd's real edge-19.12.3 injector, the README's workloads
    on kwok's node; the edge-19.12.3 LinkerdConfig applied with kubectl."""
    async with scenario.readme_starting_point(cp, kube):
        kubectl(cp, "apply", "-f", str(SAMPLES / "edge_19.12.3.yaml"))

        async def reconciled() -> bool:
            cm = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
            if "edge-19.12.3" not in cm["data"]["global"]:
                return False
            pods = await scenario.running_pods(kube, scenario.EMOJIVOTO)
            images = {p["metadata"]["labels"]["app"]: scenario.readme_check(p) for p in pods}
            return all(images.get(a) == scenario.NEW_PROXY_IMAGE for a in scenario.OPTED_IN)

        await eventually(reconciled, timeout=240, interval=1, what="the seed scenario rolled")


async def modern_scenario(cp: LocalControlPlane, kube: KubeClient) -> None:
    """The other format: edge-26.8.3 as its own `linkerd install` renders it (Helm values,
    trust roots), its real injector, a meshed namespace; a LinkerdConfig for another proxy
    version applied with kubectl."""
    fmt = formats.VALUES
    async with formats.installed(cp, kube, fmt):
        await scenario.meshed_namespace(kube, "modern", ["web", "emoji"], replicas=1)
        manifest = cp.workdir / "modern-linkerdconfig.json"
        manifest.write_text(
            json.dumps(
                {
                    "apiVersion": "config.linkerd.io/v1alpha1",
                    "kind": "LinkerdConfig",
                    "metadata": {"name": "modern"},
                    "spec": fmt.spec(fmt.good, {}),
                }
            )
        )
        kubectl(cp, "apply", "-f", str(manifest))

        async def rolled() -> bool:
            cm = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
            pods = await scenario.running_pods(kube, "modern")
            versions = set(scenario.proxy_versions(pods).values())
            return fmt.written(cm) == fmt.good and len(pods) == 2 and versions == {fmt.good}

        await eventually(rolled, timeout=240, interval=1, what="the values-format rollout")


async def _async(value: object) -> object:
    return value


async def undeployed(cp: LocalControlPlane, installed: set[str], allowed: set[str]) -> None:
    """Every object the install made is gone but ``allowed`` (namespaces take a while)."""

    async def gone() -> bool:
        return not (snapshot(cp) & installed) - allowed

    await eventually(gone, timeout=180, interval=2, what="the install's objects deleted")
    assert (snapshot(cp) & installed) - allowed == set()


KEPT = {
    # The CRD (deleting it deletes every LinkerdConfig) and the API versions it serves.
    "customresourcedefinition.apiextensions.k8s.io/linkerdconfigs.config.linkerd.io",
    *(f"apiservice.apiregistration.k8s.io/{v}.{GROUP}" for v in SERVED_VERSIONS),
    # Written by the controller, not the install: who led last.
    f"lease.coordination.k8s.io/{in_cluster.LEASE}",
}


async def test_make_deploy_with_cert_manager(
    node_cluster: LocalControlPlane, node_kube: KubeClient, node_image: str
) -> None:
    from devcluster.cert_manager import start_cert_manager  # noqa: PLC0415

    start_cert_manager(node_cluster)
    before = snapshot(node_cluster)
    deployed_at = time.time()
    make(node_cluster, "deploy", f"IMG={node_image}")
    installed = await check_install(node_cluster, node_kube, deployed_at, before, seed_scenario)
    make(node_cluster, "undeploy", f"IMG={node_image}")
    # The Secret cert-manager issued goes too (undeploy deletes it: cert-manager would not).
    await undeployed(node_cluster, installed, KEPT)


async def test_make_helm_deploy(
    node_cluster: LocalControlPlane, node_kube: KubeClient, node_image: str
) -> None:
    before = snapshot(node_cluster)
    deployed_at = time.time()
    make(node_cluster, "helm-deploy", f"IMG={node_image}")
    # The other configuration format than the kustomize install's seed scenario.
    installed = await check_install(node_cluster, node_kube, deployed_at, before, modern_scenario)
    make(node_cluster, "helm-undeploy")
    await undeployed(node_cluster, installed, KEPT)


def _lc(version: str, name: str, target: str) -> Json:
    """A LinkerdConfig in ``version`` from the seed, managing ConfigMap ``target`` (each its
    own, so the validating webhook, when on, admits them all)."""
    seed = convert(load(SAMPLES / "edge_19.12.3.yaml"), version)
    seed["metadata"] = {"name": name, "labels": {"stored-in": name}}
    if version == "v1alpha1":
        seed["spec"]["global"]["configMap"] = target
    else:
        seed["spec"]["configMap"] = target
    return seed


async def _read_all(node_kube: KubeClient, names: list[str]) -> dict[tuple[str, str], Json]:
    """Every object in both versions: its spec, labels and annotations (status is the
    controller's and moves on)."""
    seen: dict[tuple[str, str], Json] = {}
    for name in names:
        for resource in (LINKERD_CONFIGS_V1ALPHA1, LINKERD_CONFIGS):
            obj = await node_kube.request("GET", resource.path(name=name))
            meta = obj["metadata"]
            seen[(name, resource.version)] = {
                "apiVersion": obj["apiVersion"],
                "spec": obj["spec"],
                "labels": meta.get("labels"),
                "annotations": meta.get("annotations"),
            }
    return seen


async def _readable(node_kube: KubeClient, names: list[str]) -> dict[tuple[str, str], Json]:
    async def read() -> dict[tuple[str, str], Json] | None:
        try:
            return await _read_all(node_kube, names)
        except ApiError as exc:
            if "conversion webhook" in exc.message:
                return None  # the CA not yet injected, the Service's endpoints not yet ready
            raise

    return await eventually(read, timeout=180, interval=1, what="every object read both ways")


SWITCHES = {
    # how the webhooks go on, and off again (the CRD and the objects kept)
    "kustomize": (("deploy", f"IMG={IMAGE}"), ("undeploy", f"IMG={IMAGE}")),
    "helm": (("helm-deploy", f"IMG={IMAGE}"), ("helm-undeploy",)),
}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("tool", sorted(SWITCHES))
async def test_switching_webhooks_off_on_off_keeps_every_object(
    node_cluster: LocalControlPlane, node_kube: KubeClient, node_image: str, tool: str
) -> None:
    """`make install` + `ENABLE_WEBHOOKS=false make run` → `make deploy` or `make helm-deploy`
    (webhooks on) → `make undeploy` or `make helm-undeploy`, then `make install` + `make run`
    again, objects of both versions stored along the way: after each switch every object
    reads, unchanged, in both versions."""
    from devcluster.cert_manager import start_cert_manager  # noqa: PLC0415

    on, off = SWITCHES[tool]
    if tool == "kustomize":
        start_cert_manager(node_cluster)
    shell = Shell(node_cluster)
    install, run, *_ = guide_commands()
    names: list[str] = []

    async def store(version: str, name: str) -> None:
        resource = LINKERD_CONFIGS_V1ALPHA1 if version == "v1alpha1" else LINKERD_CONFIGS
        await node_kube.request(
            "POST", resource.path(), body=_lc(version, name, f"cm-{name}"), fenced=False
        )
        names.append(name)

    # Off: the local controller converts.
    shell.run(install)
    local = await started(shell, run)
    try:
        await store("v1alpha1", "off-v1")
        await store("v1alpha2", "off-v2")
        before_on = await _read_all(node_kube, names)
    finally:
        interrupt(local)
    for name, version in (("off-v1", "v1alpha1"), ("off-v2", "v1alpha2")):
        assert before_on[(name, version)]["spec"] == _lc(version, name, f"cm-{name}")["spec"]

    # On: the in-cluster webhook converts; nothing stored changed.
    make(node_cluster, *on)
    await in_cluster.running_install(node_cluster)
    assert await _readable(node_kube, names) == before_on
    await store("v1alpha1", "on-v1")
    await store("v1alpha2", "on-v2")
    before_off = await _read_all(node_kube, names)

    # Off again: the CRD and the objects kept; install brings the local converter back.
    make(node_cluster, *off)
    shell.run(install)
    local = await started(shell, run)
    try:
        assert await _readable(node_kube, names) == before_off
    finally:
        code, out = interrupt(local)
    stopped_gracefully(code, out)
