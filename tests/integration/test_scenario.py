"""The original README scenario end to end, on the real control plane with KCM, the
scheduler and kwok: edge-19.12.1 installed → apply the edge-19.12.3 LinkerdConfig → the
ConfigMap says edge-19.12.3, the opted-in workloads are rolled onto the new proxy, nothing
else is touched; then drift, idempotence, deletion and conflicts."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from devcluster.cluster import LocalControlPlane
from linkerd_config.app import App, build, running
from linkerd_config.kube.client import MERGE_PATCH, ApiError, KubeClient
from linkerd_config.kube.resource import CONFIGMAPS, DEPLOYMENTS, EVENTS
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.admission.defaults import defaulted
from linkerd_config.linkerd.formats import format_for
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import scenario
from tests.support.samples import install_configmap, sample
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def controller_app(
    kube: KubeClient, control_plane: LocalControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[App]:
    """Starting point of the original README, plus our controller running (webhooks off)."""
    async with scenario.readme_starting_point(control_plane, kube):
        await scenario.wait_settled(kube, scenario.EMOJIVOTO, expected=8)
        await scenario.wait_settled(kube, scenario.DISABLED_NS, expected=2)
        settings = scenario.local_settings(
            control_plane.kubeconfig, "--identity", "scenario-controller"
        )
        app = await build(settings, RolloutOptions(restart_interval=1.0, injector_wait=30.0))
        async with running(app):
            yield app


def uids(pods: list[dict[str, Any]]) -> set[str]:
    return {p["metadata"]["uid"] for p in pods}


async def cr_ready(kube: KubeClient, name: str) -> dict[str, Any] | None:
    obj = await kube.request("GET", LINKERD_CONFIGS.path(name=name))
    conditions = {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}
    ready = conditions.get("Ready", {})
    observed = obj.get("status", {}).get("observedGeneration")
    if ready.get("status") == "True" and observed == obj["metadata"]["generation"]:
        return obj
    return None


async def test_original_readme_scenario(kube: KubeClient, controller_app: App) -> None:
    before = await scenario.running_pods(kube, scenario.EMOJIVOTO)
    assert set(scenario.proxy_versions(before).values()) == {"edge-19.12.1"}
    # Injected by Linkerd's real injector from edge-19.12.1's config, owners' pods unchanged.
    assert {scenario.readme_check(p) for p in before} == {scenario.OLD_PROXY_IMAGE}
    assert {p["spec"]["serviceAccountName"] for p in before} == {"default"}
    disabled = await scenario.running_pods(kube, scenario.DISABLED_NS)
    assert {scenario.readme_check(p) for p in disabled} == {"<not injected>"}
    bot_before = uids(
        [p for p in before if p["metadata"]["labels"]["app"] == scenario.NOT_OPTED_IN]
    )
    disabled_before = uids(await scenario.running_pods(kube, scenario.DISABLED_NS))
    install_before = install_configmap()["data"]["install"]

    obj = sample("edge_19.12.3.yaml")
    applied = time.monotonic()
    await kube.request("POST", LINKERD_CONFIGS.path(), body=obj)

    async def configmap_written() -> dict[str, Any] | None:
        cm = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
        return cm if '"proxyVersion":"edge-19.12.3"' in cm["data"]["proxy"] else None

    cm = await eventually(configmap_written, timeout=30, what="ConfigMap written")
    print(f"\napply → ConfigMap written: {time.monotonic() - applied:.3f}s")
    expected = format_for("edge-19.12.3").render(defaulted(obj["spec"]))
    assert cm["data"]["global"] == expected["global"]
    assert cm["data"]["proxy"] == expected["proxy"]
    assert cm["data"]["install"] == install_before  # unmanaged key untouched
    assert cm["metadata"]["labels"]["linkerd.io/control-plane-ns"] == "linkerd"  # kept
    assert cm["metadata"]["annotations"]["config.linkerd.io/linkerdconfig"] == "edge-19.12.3"
    proxy = orjson.loads(cm["data"]["proxy"])
    assert proxy["resource"] == {
        "requestCpu": "100m",
        "requestMemory": "20Mi",
        "limitCpu": "1",
        "limitMemory": "250Mi",
    }

    ready = await eventually(lambda: cr_ready(kube, "edge-19.12.3"), timeout=180, what="Ready")
    print(f"apply → Ready (data plane rolled): {time.monotonic() - applied:.3f}s")
    assert ready["status"]["outdatedWorkloads"] == 0
    assert ready["status"]["restartedWorkloads"] == 3
    assert ready["status"]["trustAnchorSource"] == "Spec"

    after = await scenario.wait_settled(kube, scenario.EMOJIVOTO, expected=8)
    versions = {p["metadata"]["labels"]["app"]: mesh.proxy_version(p) for p in after}
    for name in scenario.OPTED_IN:
        assert versions[name] == "edge-19.12.3", versions
    images = {p["metadata"]["labels"]["app"]: scenario.readme_check(p) for p in after}
    for name in scenario.OPTED_IN:
        assert images[name] == scenario.NEW_PROXY_IMAGE, images
    assert images[scenario.NOT_OPTED_IN] == scenario.OLD_PROXY_IMAGE
    opted_in_after = [p for p in after if p["metadata"]["labels"]["app"] in scenario.OPTED_IN]
    assert not uids(opted_in_after) & uids(before)  # every opted-in pod was replaced
    # Not opted in: same pods, still the old proxy. Disabled namespace: same pods.
    bot_after = [p for p in after if p["metadata"]["labels"]["app"] == scenario.NOT_OPTED_IN]
    assert uids(bot_after) == bot_before
    assert {mesh.proxy_version(p) for p in bot_after} == {"edge-19.12.1"}
    assert uids(await scenario.running_pods(kube, scenario.DISABLED_NS)) == disabled_before

    for name in scenario.OPTED_IN:
        dep = await kube.request("GET", DEPLOYMENTS.path(scenario.EMOJIVOTO, name))
        annotations = dep["spec"]["template"]["metadata"]["annotations"]
        assert annotations[mesh.RESTARTED_FOR_ANNOTATION] == ready["status"]["configHash"]

    events = (await kube.request("GET", EVENTS.path("default")))["items"]
    reasons = {e["reason"] for e in events if e["involvedObject"]["name"] == "edge-19.12.3"}
    assert {"ConfigMapUpdated", "WorkloadsRestarted"} <= reasons  # one a pass
    # And one on each workload restarted, where `kubectl describe deployment` shows it.
    on_workloads = (await kube.request("GET", EVENTS.path(scenario.EMOJIVOTO)))["items"]
    restarted = {
        e["involvedObject"]["name"]
        for e in on_workloads
        if e["reason"] == "WorkloadRestarted" and e["involvedObject"]["kind"] == "Deployment"
    }
    assert restarted == set(scenario.OPTED_IN)


async def test_applying_the_same_config_again_restarts_nothing(
    kube: KubeClient, controller_app: App
) -> None:
    await eventually(lambda: cr_ready(kube, "edge-19.12.3"), timeout=180, what="Ready")
    pods = uids(await scenario.wait_settled(kube, scenario.EMOJIVOTO, expected=8))
    current = await kube.request("GET", LINKERD_CONFIGS.path(name="edge-19.12.3"))
    await kube.request("PUT", LINKERD_CONFIGS.path(name="edge-19.12.3"), body=current)
    # A label change bumps nothing in the spec: the reconcile must be a no-op.
    await kube.request(
        "PATCH",
        LINKERD_CONFIGS.path(name="edge-19.12.3"),
        body={"metadata": {"labels": {"touched": "yes"}}},
        content_type=MERGE_PATCH,
    )
    await asyncio.sleep(3)
    assert uids(await scenario.running_pods(kube, scenario.EMOJIVOTO)) == pods
    restarted = controller_app.registry.get_sample_value(
        "controller_runtime_reconcile_total", {"controller": "linkerdconfig", "result": "success"}
    )
    assert restarted is not None and restarted > 0


async def test_manual_edit_of_proxy_is_reverted(kube: KubeClient, controller_app: App) -> None:
    await eventually(lambda: cr_ready(kube, "edge-19.12.3"), timeout=180, what="Ready")
    path = CONFIGMAPS.path("linkerd", "linkerd-config")
    good = (await kube.request("GET", path))["data"]["proxy"]
    edited = good.replace("edge-19.12.3", "edge-19.12.1")
    started = time.monotonic()
    await kube.request(
        "PATCH", path, body={"data": {"proxy": edited, "extra": "mine"}}, content_type=MERGE_PATCH
    )

    async def reverted() -> dict[str, Any] | None:
        cm = await kube.request("GET", path)
        return cm if cm["data"]["proxy"] == good else None

    cm = await eventually(reverted, timeout=10, interval=0.02, what="manual edit reverted")
    print(f"\nmanual edit → reverted: {time.monotonic() - started:.3f}s")
    assert cm["data"]["extra"] == "mine"  # an unmanaged key is left alone


async def test_deleted_configmap_is_recreated(kube: KubeClient, controller_app: App) -> None:
    await eventually(lambda: cr_ready(kube, "edge-19.12.3"), timeout=180, what="Ready")
    path = CONFIGMAPS.path("linkerd", "linkerd-config")
    good = await kube.request("GET", path)
    await kube.request("DELETE", path)

    async def recreated() -> dict[str, Any] | None:
        try:
            cm = await kube.request("GET", path)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise
        return cm if cm["metadata"]["uid"] != good["metadata"]["uid"] else None

    cm = await eventually(recreated, timeout=15, what="ConfigMap recreated")
    assert cm["data"]["global"] == good["data"]["global"]
    assert cm["data"]["proxy"] == good["data"]["proxy"]


async def test_second_config_gets_conflict_and_changes_nothing(
    kube: KubeClient, controller_app: App
) -> None:
    await eventually(lambda: cr_ready(kube, "edge-19.12.3"), timeout=180, what="Ready")
    path = CONFIGMAPS.path("linkerd", "linkerd-config")
    before = (await kube.request("GET", path))["data"]
    rival = copy.deepcopy(sample("edge_19.12.3.yaml"))
    rival["metadata"]["name"] = "a-rival"  # sorts first by name; must lose on age
    rival["spec"]["proxy"]["logLevel"] = "debug"
    await kube.request("POST", LINKERD_CONFIGS.path(), body=rival)
    try:

        async def conflicted() -> dict[str, Any] | None:
            obj = await kube.request("GET", LINKERD_CONFIGS.path(name="a-rival"))
            conds = {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}
            return (
                conds.get("Conflict") if conds.get("Conflict", {}).get("status") == "True" else None
            )

        conflict = await eventually(conflicted, timeout=20, what="Conflict=True")
        assert "edge-19.12.3" in conflict["message"]
        await asyncio.sleep(1)
        assert (await kube.request("GET", path))["data"] == before
        events = (await kube.request("GET", EVENTS.path("default")))["items"]
        assert any(
            e["reason"] == "Conflict" and e["involvedObject"]["name"] == "a-rival" for e in events
        )
    finally:
        await kube.request("DELETE", LINKERD_CONFIGS.path(name="a-rival"))


async def test_deleting_the_config_leaves_the_configmap(
    kube: KubeClient, controller_app: App
) -> None:
    await eventually(lambda: cr_ready(kube, "edge-19.12.3"), timeout=180, what="Ready")
    path = CONFIGMAPS.path("linkerd", "linkerd-config")
    before = await kube.request("GET", path)
    await kube.request("DELETE", LINKERD_CONFIGS.path(name="edge-19.12.3"))

    async def gone() -> bool:
        try:
            await kube.request("GET", LINKERD_CONFIGS.path(name="edge-19.12.3"))
        except ApiError as exc:
            return exc.not_found
        return False

    await eventually(gone, timeout=20, what="LinkerdConfig deleted")
    await asyncio.sleep(2)  # give the garbage collector and the controller their chance
    after = await kube.request("GET", path)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["data"] == before["data"]
    assert after["metadata"]["annotations"]["config.linkerd.io/linkerdconfig"] == "edge-19.12.3"
