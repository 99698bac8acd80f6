"""``spec.rollout.paused``: the ConfigMap is written, nothing restarts, the status says what
would; resuming rolls the data plane. On a control plane of its own with Linkerd's real
edge-19.12.3 injector and the README's workloads."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from devcluster.cluster import LocalControlPlane
from linkerd_config.app import build, running
from linkerd_config.kube.client import MERGE_PATCH, KubeClient
from linkerd_config.kube.resource import CONFIGMAPS, DEPLOYMENTS
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import scenario
from tests.support.samples import sample
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

NAME = "edge-19.12.3"


async def restart_records(kube: KubeClient) -> dict[str, str | None]:
    records = {}
    for name in scenario.OPTED_IN:
        dep = await kube.request("GET", DEPLOYMENTS.path(scenario.EMOJIVOTO, name))
        annotations = dep["spec"]["template"]["metadata"].get("annotations") or {}
        records[name] = annotations.get(mesh.RESTARTED_FOR_ANNOTATION)
    return records


async def test_a_paused_rollout_writes_the_configmap_and_restarts_nothing_until_resumed(
    own_control_plane: LocalControlPlane, own_kube: KubeClient
) -> None:
    cp, kube = own_control_plane, own_kube
    async with scenario.readme_starting_point(cp, kube):
        before = await scenario.wait_settled(kube, scenario.EMOJIVOTO, expected=8)
        settings = scenario.local_settings(cp.kubeconfig, "--identity", "paused-test")
        app = await build(settings, RolloutOptions(restart_interval=1.0, injector_wait=30.0))
        async with running(app):
            obj = sample("edge_19.12.3.yaml")
            obj["spec"]["rollout"] = {"paused": True}
            await kube.request("POST", LINKERD_CONFIGS.path(), body=obj)

            async def written() -> bool:
                cm = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
                return '"proxyVersion":"edge-19.12.3"' in cm["data"]["proxy"]

            await eventually(written, timeout=30, what="ConfigMap written while paused")

            async def paused() -> dict[str, Any] | None:
                up = await scenario.condition(kube, NAME, "DataPlaneUpToDate")
                return up if up.get("reason") == "Paused" else None

            condition = await eventually(paused, timeout=30, what="status says Paused")
            assert condition["status"] == "False"
            assert "3 workload(s)" in condition["message"]
            assert "set spec.rollout.paused to false" in condition["message"]
            ready = await scenario.condition(kube, NAME, "Ready")
            assert (ready["status"], ready["reason"]) == ("False", "Paused")
            # Several restart intervals later: still nothing restarted.
            await asyncio.sleep(4.0)
            assert set((await restart_records(kube)).values()) == {None}
            still = await scenario.running_pods(kube, scenario.EMOJIVOTO)
            assert {p["metadata"]["uid"] for p in still} == {p["metadata"]["uid"] for p in before}

            await kube.request(
                "PATCH",
                LINKERD_CONFIGS.path(name=NAME),
                body={"spec": {"rollout": {"paused": False}}},
                content_type=MERGE_PATCH,
            )

            async def rolled() -> dict[str, Any] | None:
                up = await scenario.condition(kube, NAME, "DataPlaneUpToDate")
                return up if up.get("status") == "True" else None

            await eventually(rolled, timeout=180, what="the resumed rollout finished")
            records = await restart_records(kube)
            assert None not in records.values() and len(set(records.values())) == 1
