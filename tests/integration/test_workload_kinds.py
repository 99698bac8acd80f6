"""Workloads a restart cannot roll (issue 37, finding 5), in both formats with their real
injectors: an OnDelete StatefulSet (its controller replaces a pod only when the pod is
deleted) and an opted-in Deployment whose pods Linkerd does not inject
(``linkerd.io/inject: disabled`` on its template, in a meshed namespace). Before, both were
restarted (the un-injected one on every change), neither could ever come up to date, and every
rollout halted at its deadline. Now the OnDelete StatefulSet is skipped in pre-flight with why
and the un-injected Deployment is excluded with why, in ``plan``, in status and in ``status``;
neither is restarted; the rollout of the rest finishes, and nothing halts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from devcluster.cluster import LocalControlPlane
from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.resource import DEPLOYMENTS, STATEFULSETS, Json
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import commands, formats, scenario
from tests.support.audit import received_at, successful_writes
from tests.support.formats import Format
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

NAME = "kinds"
NS = "kinds"


def linkerdconfig(fmt: Format) -> Json:
    return {
        "apiVersion": "config.linkerd.io/v1alpha1",
        "kind": "LinkerdConfig",
        "metadata": {"name": NAME},
        # A short deadline: a workload that could never finish would halt within it.
        "spec": fmt.spec(fmt.good, {"maxRestartsPerPass": 10, "progressDeadline": "20s"}),
    }


def on_delete_statefulset() -> Json:
    body = scenario.deployment("ondelete", opted_in=True, replicas=1)
    body["kind"] = "StatefulSet"
    body["spec"]["serviceName"] = "ondelete"
    body["spec"]["updateStrategy"] = {"type": "OnDelete"}
    return body


def uninjected_deployment() -> Json:
    body = scenario.deployment("uninjected", opted_in=True, replicas=1)
    template = body["spec"]["template"]["metadata"]
    template["annotations"] = {mesh.INJECT_ANNOTATION: "disabled"}
    return body


def restart_record(obj: Json) -> str | None:
    annotations = obj["spec"]["template"]["metadata"].get("annotations") or {}
    found = annotations.get(mesh.RESTARTED_FOR_ANNOTATION)
    return None if found is None else str(found)


@pytest.mark.parametrize("fmt", formats.FORMATS, ids=formats.IDS)
async def test_on_delete_and_uninjected_workloads_neither_restarted_nor_halting(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, fmt: Format, tmp_path: Path
) -> None:
    cp, kube = own_control_plane, own_kube
    async with formats.installed(cp, kube, fmt):
        await scenario.meshed_namespace(kube, NS, ["healthy"], replicas=1)
        await scenario.create(kube, STATEFULSETS.path(NS), on_delete_statefulset())
        await scenario.create(kube, DEPLOYMENTS.path(NS), uninjected_deployment())
        await scenario.wait_settled(kube, NS, expected=3)
        pods = {p["metadata"]["name"]: p for p in await scenario.running_pods(kube, NS)}
        assert mesh.proxy_version(pods["ondelete-0"]) is not None  # meshed
        (uninjected,) = [p for n, p in pods.items() if n.startswith("uninjected-")]
        assert mesh.proxy_version(uninjected) is None  # the injector left it alone

        code, plan = await commands.plan_object(cp.kubeconfig, linkerdconfig(fmt), tmp_path)
        assert code == 2
        assert [w["name"] for w in plan["rollout"]["restarts"]] == ["healthy"], plan["rollout"]
        listed = commands.states(plan["rollout"]["notRestarted"])
        assert listed["ondelete"][0] == "skipped", listed
        assert any("updateStrategy OnDelete" in r for r in listed["ondelete"][1]), listed

        async with scenario.controller(cp, "kinds"):
            applied = time.time()
            await kube.request("POST", LINKERD_CONFIGS.path(), body=linkerdconfig(fmt))

            async def rolled() -> Json | None:
                cond = await scenario.condition(kube, NAME, "DataPlaneUpToDate")
                healthy = await kube.request("GET", DEPLOYMENTS.path(NS, "healthy"))
                if restart_record(healthy) is None or "Skipped" not in cond.get("message", ""):
                    return None
                pods = await scenario.running_pods(kube, NS)
                on_new = [
                    p
                    for p in pods
                    if p["metadata"]["name"].startswith("healthy-")
                    and mesh.proxy_version(p) == fmt.good
                ]
                return cond if on_new else None

            cond = await eventually(rolled, timeout=180, interval=1, what="healthy rolled")
            assert f"statefulset/{NS}/ondelete: updateStrategy OnDelete" in cond["message"]
            # Past the deadline a workload that could never finish would have halted it.
            await eventually(
                lambda: _past(applied + 25), timeout=60, interval=1, what="past the deadline"
            )
            obj = await kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
            assert "rolloutHalt" not in (obj.get("status") or {}), obj["status"]
            code, reports = await commands.status_json(cp.kubeconfig)
            (mine,) = [r for r in reports if r["linkerdConfig"] == NAME]
            shown = commands.states(mine["stale"])
            assert "uninjected" not in shown, shown  # not stale: it has no proxy to update
            assert shown["ondelete"][0] == "skipped", shown

        restarted = {
            e["objectRef"]["name"]
            for resource in ("deployments", "statefulsets")
            for e in successful_writes(cp, "patch", resource, NS, "linkerd")
            if received_at(e) >= applied
        }
        assert restarted == {"healthy"}, restarted
        for resource, name in ((STATEFULSETS, "ondelete"), (DEPLOYMENTS, "uninjected")):
            assert restart_record(await kube.request("GET", resource.path(NS, name))) is None


async def _past(when: float) -> bool:
    return time.time() >= when
