"""``spec.rollout.canary`` on a control plane of each test's own, with Linkerd's real injector,
in both formats (edge-26.8.3's Helm ``values``, edge-19.12.3's legacy ``global``/``proxy``):
four opted-in Deployments in two namespaces, a canary of one selected by a namespace selector
and a workload selector, ``stableFor: 15s``.

* the first pass restarts only the canary: the audit log and the restart records show no
  other restart while the status says the rest wait (reason ``Canary``), naming it;
* ``linkerd-config status`` says the canary and since when it is healthy;
* the controller stopped and started again (a new leader) continues from status: the rest
  are restarted only once the canary has been healthy for ``stableFor`` (its
  ``healthySince`` and ``passedAt`` in status, the rest's ``restarted-at`` records and their
  PATCHes in the audit log all come after), and the passing is one Event.

Nothing is timed: each step waits for the cluster to say it, then the order is read back
from the cluster's own records.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import pytest

from devcluster.cluster import LocalControlPlane
from devcluster.linkerd_install import render_install
from linkerd_config.app import App
from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.resource import DEPLOYMENTS, EVENTS, Json
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.rollout.phase import Phase
from linkerd_config.linkerd.spec.crd import CANARY_FIELD
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import scenario
from tests.support.audit import received_at, successful_writes
from tests.support.samples import sample
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

AGENT = "linkerd-config/"
APPS = {"shop": ("api", "web"), "cart": ("api", "web")}
CANARY = {
    "count": 1,
    "namespaceSelector": "kubernetes.io/metadata.name=cart",
    "selector": "app=web",
    "stableFor": "15s",
}
STABLE_FOR = 15.0
THE_CANARY = "deployment/cart/web"
MODERN_TAG = "edge-26.8.3"


def controller(cp: LocalControlPlane, identity: str) -> contextlib.AbstractAsyncContextManager[App]:
    return scenario.controller(cp, identity)


async def workloads_meshed(kube: KubeClient) -> None:
    for namespace, names in APPS.items():
        await scenario.meshed_namespace(kube, namespace, names, replicas=1)


def when(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


async def records(kube: KubeClient) -> dict[str, tuple[str | None, float | None]]:
    """Each Deployment's restart record: the configuration and when."""
    found = {}
    for namespace, names in APPS.items():
        for name in names:
            dep = await kube.request("GET", DEPLOYMENTS.path(namespace, name))
            annotations = dep["spec"]["template"]["metadata"].get("annotations") or {}
            at = annotations.get(mesh.RESTARTED_AT_ANNOTATION)
            found[f"deployment/{namespace}/{name}"] = (
                annotations.get(mesh.RESTARTED_FOR_ANNOTATION),
                None if at is None else when(at),
            )
    return found


def patches(cp: LocalControlPlane) -> dict[str, list[float]]:
    """The controller's successful PATCHes of each Deployment, by when the API server got them."""
    found: dict[str, list[float]] = {}
    for namespace in APPS:
        for entry in successful_writes(cp, "patch", "deployments", namespace, AGENT):
            name = f"deployment/{namespace}/{entry['objectRef']['name']}"
            found.setdefault(name, []).append(received_at(entry))
    return found


async def status_command(cp: LocalControlPlane) -> list[Json]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "linkerd_config", "status", "-o", "json",
        "--kubeconfig", str(cp.kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 2, (proc.returncode, err.decode())  # stale workloads
    found: list[Json] = json.loads(out)
    return found


async def canary_first(
    cp: LocalControlPlane, kube: KubeClient, name: str, apply: Callable[[], Awaitable[None]]
) -> None:
    """The scenario, whatever the format: ``apply`` creates LinkerdConfig ``name`` with the
    canary; the workloads are meshed and the injector serves."""

    async def stored() -> Json:
        found: Json = await kube.request("GET", LINKERD_CONFIGS.path(name=name))
        return found

    async with controller(cp, "canary-first"):
        await apply()

        async def holding() -> Json | None:
            obj = await stored()
            status = obj.get("status") or {}
            up = {c["type"]: c for c in status.get("conditions") or []}.get("DataPlaneUpToDate")
            record = status.get(CANARY_FIELD) or {}
            held = (
                up is not None and up["reason"] == Phase.CANARY and "healthy for" in (up["message"])
            )
            return obj if held and record.get("healthySince") else None

        obj = await eventually(holding, timeout=180, what="the rest held for a healthy canary")
        message = {c["type"]: c for c in obj["status"]["conditions"]}["DataPlaneUpToDate"]
        assert "canary: 1 workload(s) healthy for" in message["message"]
        assert THE_CANARY in message["message"] and "the rest wait" in message["message"]
        held_record = obj["status"][CANARY_FIELD]
        assert held_record["workloads"] == [THE_CANARY]
        assert not held_record.get("passedAt")
    config_hash = obj["status"]["configHash"]

    # The controller stopped: the cluster shows only the canary restarted.
    before = await records(kube)
    assert {w for w, (for_, _) in before.items() if for_ == config_hash} == {THE_CANARY}
    assert set(patches(cp)) == {THE_CANARY}
    (report,) = [r for r in await status_command(cp) if r["linkerdConfig"] == name]
    said = report["rollout"]["canary"]
    assert said["phase"] == "canary" and said["workloads"] == [THE_CANARY]
    assert said["healthySince"] == held_record["healthySince"]
    assert said["stableForSeconds"] == STABLE_FOR

    # Another controller (a new leader) continues: the rest once it has been healthy enough.
    async with controller(cp, "canary-successor"):

        async def ready() -> Json | None:
            obj = await stored()
            conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
            good = conds.get("Ready", {}).get("status") == "True"
            current = (
                conds.get("Ready", {}).get("observedGeneration") == obj["metadata"]["generation"]
            )
            return obj if good and current else None

        done = await eventually(ready, timeout=240, what="the rest rolled out")
    passed = done["status"][CANARY_FIELD]
    assert passed["workloads"] == [THE_CANARY]
    healthy_since, passed_at = when(passed["healthySince"]), when(passed["passedAt"])
    assert passed["healthySince"] == held_record["healthySince"]  # the clock kept across leaders
    assert passed_at - healthy_since >= STABLE_FOR

    after = await records(kube)
    assert {for_ for for_, _ in after.values()} == {config_hash}
    canary_at = after[THE_CANARY][1]
    assert canary_at is not None and canary_at < healthy_since
    rest = {w: at for w, (_, at) in after.items() if w != THE_CANARY}
    assert len(rest) == 3
    assert all(at is not None and at >= passed_at for at in rest.values()), (rest, passed_at)

    written = patches(cp)
    assert {w: len(times) for w, times in written.items()} == dict.fromkeys(after, 1)
    first = written[THE_CANARY][0]
    assert all(times[0] - first >= STABLE_FOR for w, times in written.items() if w != THE_CANARY)

    events = (await kube.request("GET", EVENTS.path("default")))["items"]
    said_passed = [
        e for e in events if e["reason"] == "CanaryPassed" and e["involvedObject"]["name"] == name
    ]
    assert len(said_passed) == 1 and said_passed[0]["count"] == 1, said_passed
    assert THE_CANARY in said_passed[0]["message"]


async def test_values_format_restarts_the_canary_first_then_the_rest(
    own_control_plane: LocalControlPlane, own_kube: KubeClient
) -> None:
    cp, kube = own_control_plane, own_kube
    install = await asyncio.to_thread(render_install, MODERN_TAG)
    await scenario.install_crd(kube)
    await scenario.install_linkerd(kube, install)
    async with scenario.linkerd_injector(cp, MODERN_TAG, webhook_template=install.injector_webhook):
        await workloads_meshed(kube)

        async def apply() -> None:
            obj = {
                "apiVersion": "config.linkerd.io/v1alpha1",
                "kind": "LinkerdConfig",
                "metadata": {"name": "canary"},
                "spec": {
                    "proxy": {"proxyVersion": "edge-26.8.4"},
                    "rollout": {"canary": dict(CANARY)},
                },
            }
            await kube.request("POST", LINKERD_CONFIGS.path(), body=obj)

        await canary_first(cp, kube, "canary", apply)
        pods = [p for ns in APPS for p in await scenario.running_pods(kube, ns)]
        assert {mesh.proxy_version(p) for p in pods} == {"edge-26.8.4"}


async def test_legacy_format_restarts_the_canary_first_then_the_rest(
    own_control_plane: LocalControlPlane, own_kube: KubeClient
) -> None:
    cp, kube = own_control_plane, own_kube
    await scenario.install_crd(kube)
    await scenario.install_linkerd_edge_19_12_1(kube)
    async with scenario.linkerd_injector(cp, "edge-19.12.3"):
        await workloads_meshed(kube)

        async def apply() -> None:
            obj: dict[str, Any] = sample("edge_19.12.3.yaml")
            obj["spec"]["rollout"] = {"canary": dict(CANARY)}
            await kube.request("POST", LINKERD_CONFIGS.path(), body=obj)

        await canary_first(cp, kube, "edge-19.12.3", apply)
        pods = [p for ns in APPS for p in await scenario.running_pods(kube, ns)]
        assert {mesh.proxy_version(p) for p in pods} == {"edge-19.12.3"}
