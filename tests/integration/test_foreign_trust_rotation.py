"""A trust-anchor rotation by someone else (``helm upgrade``, ``linkerd upgrade``) of a bundle
the LinkerdConfig leaves to the cluster (its spec states no anchor), on a control plane of the
test's own, the controller in this process:

``[X]`` → ``[X, B]`` → ``[B]`` while a meshed pod still runs ``X`` alone. The removal is held
(ConfigMapSynced=False, TrustAnchorRemovalHeld, naming the pod) with nothing written: the
trust roots stay ``[B]`` as their owner wrote them, carrying no label or field of ours. Once
the pod is gone, the removal proceeds by itself: Ready, ``[B]`` untouched.

Before the fix the controller wrote ``[X, B]`` back to hold on to it, and the next pass,
reading ``[X, B]`` as the cluster's bundle, lifted the hold: ``[B]`` lost for good, Ready.
"""

from __future__ import annotations

import hashlib

import pytest

from devcluster.cluster import LocalControlPlane
from linkerd_config.kube.client import MERGE_PATCH, KubeClient
from linkerd_config.kube.resource import CONFIGMAPS, NAMESPACES, PODS, Json
from linkerd_config.linkerd.formats.helm_values import TRUST_ROOTS_CONFIGMAP, TRUST_ROOTS_KEY
from linkerd_config.linkerd.mesh import TRUST_ROOT_ANNOTATION
from linkerd_config.linkerd.trust.guard import HELD_REASON
from tests.support import scenario
from tests.support.samples import SECOND_TRUST_ANCHOR, modern_install
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

NAME = "cluster-anchors"
ROOTS = CONFIGMAPS.path("linkerd", TRUST_ROOTS_CONFIGMAP)


def meshed(name: str, bundle: str) -> Json:
    digest = hashlib.sha256(bundle.encode()).hexdigest()
    return {
        "metadata": {
            "name": name,
            "namespace": "shop",
            "labels": {"linkerd.io/control-plane-ns": "linkerd"},
            "annotations": {TRUST_ROOT_ANNOTATION: digest},
        },
        "spec": {"containers": [{"name": "app", "image": "app"}]},
    }


async def set_roots(kube: KubeClient, bundle: str) -> None:
    body = {"data": {TRUST_ROOTS_KEY: bundle}}
    await kube.request("PATCH", ROOTS, body=body, content_type=MERGE_PATCH, fenced=False)


async def synced(kube: KubeClient) -> Json:
    return await scenario.condition(kube, NAME, "ConfigMapSynced")


async def test_a_removal_in_a_bundle_left_to_the_cluster_is_held_and_never_written_over(
    own_control_plane: LocalControlPlane, own_kube: KubeClient
) -> None:
    cp, kube = own_control_plane, own_kube
    config_cm, roots = modern_install()
    x, b = roots["data"][TRUST_ROOTS_KEY], SECOND_TRUST_ANCHOR.strip()
    both = f"{x.strip()}\n{b}"
    await scenario.install_crd(kube)
    for namespace in ("linkerd", "shop"):
        await scenario.create(kube, NAMESPACES.path(), {"metadata": {"name": namespace}})
    for configmap in (config_cm, roots):
        await scenario.create(kube, CONFIGMAPS.path("linkerd"), configmap)
    async with scenario.controller(cp, NAME):
        await scenario.apply_linkerdconfig(kube, NAME, {"proxy": {"proxyVersion": "edge-26.8.3"}})

        async def ready() -> bool:
            return (await scenario.condition(kube, NAME, "Ready")).get("status") == "True"

        await eventually(ready, timeout=60, what="Ready")
        await set_roots(kube, both)  # the rotation's first step: B added

        async def copied() -> bool:
            path = CONFIGMAPS.path("linkerd", f"{TRUST_ROOTS_CONFIGMAP}-preserved")
            return (await kube.request("GET", path))["data"].get(TRUST_ROOTS_KEY) == both

        await eventually(copied, timeout=30, what="the copy keeps [X, B]")
        await scenario.create(kube, PODS.path("shop"), meshed("on-x", x))
        await set_roots(kube, b)  # the second step, while on-x runs X alone

        async def held() -> Json | None:
            condition = await synced(kube)
            return condition if condition.get("reason") == HELD_REASON else None

        said = (await eventually(held, timeout=30, what="the removal held"))["message"]
        assert "shop/on-x" in said and "someone else wrote" in said, said
        for _ in range(10):  # and it stays so, the bundle as its owner wrote it
            assert (await kube.request("GET", ROOTS))["data"][TRUST_ROOTS_KEY] == b
            assert (await synced(kube)).get("reason") == HELD_REASON
        await kube.request(
            "DELETE", PODS.path("shop", "on-x"), params={"gracePeriodSeconds": "0"}, fenced=False
        )
        await eventually(ready, timeout=60, what="Ready once no pod needs X")
        now = await kube.request("GET", ROOTS)
        assert now["data"][TRUST_ROOTS_KEY] == b
        assert now["metadata"].get("labels") == roots["metadata"].get("labels")
        managers = {m["manager"] for m in now["metadata"].get("managedFields", [])}
        assert "linkerd-config" not in managers, managers
