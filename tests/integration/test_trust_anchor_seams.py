"""The trust-anchor guard where it meets the rest (issue 37, findings 1 and 2), on edge-26.8.3
(its own ``linkerd install`` and its real injector: the guard applies where Linkerd stamps
pods with their bundle's hash, the values format only).

1. **A deleted or edited trust-roots ConfigMap.** ``[A, B]`` rolled out to the opted-in
   Deployments, a bystander (not opted in) on ``[A]``, ``[B]`` applied and held. Before, a
   ``kubectl delete`` of ``linkerd-identity-trust-roots`` had it re-created holding ``[B]``
   within seconds, the hold gone, while the bystander still trusted only ``A`` (linkerd2
   #4287's outage); an edit to ``[B]`` by someone else (as a ``helm upgrade`` does) lifted the
   hold the same way. Now both come back to ``[A, B]``, the hold stays, and nothing restarts
   onto ``[B]`` until the bystander is on a bundle with ``B``.
2. **A rotation applied while the previous one is half done.** ``[A, B]`` rolling one
   workload per pass, ``[B]`` applied after the first: before, the hold stopped the very
   rollout that would bring the other opted-in workload onto ``[A, B]``, and nothing moved
   again (a deadlock). Now the held removal keeps ``[A, B]`` written and rolled out; the
   last holder comes onto it, the removal proceeds by itself, and every pod ends on ``[B]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest

from devcluster.cluster import LocalControlPlane
from devcluster.linkerd_install import render_install
from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.resource import CONFIGMAPS, DEPLOYMENTS, NAMESPACES, PODS, Json
from linkerd_config.linkerd import rollout
from linkerd_config.linkerd.formats.helm_values import TRUST_ROOTS_CONFIGMAP, TRUST_ROOTS_KEY
from linkerd_config.linkerd.rollout import TRUST_ROOT_ANNOTATION
from linkerd_config.linkerd.trust_anchor_guard import HELD_REASON, bundle_hash
from tests.support import scenario
from tests.support.anchors import bundle, trust_anchor
from tests.support.audit import received_at, successful_writes
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

NS = "rotation"
NAME = "anchors"
AGENT = "linkerd-config/"
A = trust_anchor("a.root.linkerd.cluster.local")
B = trust_anchor("b.root.linkerd.cluster.local")
BOTH, ONLY_B = bundle(A, B), bundle(B)
MESHED_NAMESPACE = {"metadata": {"name": NS, "annotations": {"linkerd.io/inject": "enabled"}}}


def spec(anchors: str, **rollout_options: object) -> Json:
    return {
        "global": {"identityContext": {"trustAnchorsPEM": anchors}},
        "proxy": {"proxyVersion": "edge-26.8.3"},
        "rollout": {"maxRestartsPerPass": 10, **rollout_options},
    }


async def apply(kube: KubeClient, anchors: str, **rollout_options: object) -> int:
    applied = await scenario.apply_linkerdconfig(kube, NAME, spec(anchors, **rollout_options))
    return int(applied["metadata"]["generation"])


async def ready(kube: KubeClient, generation: int) -> Json | None:
    cond = await scenario.condition(kube, NAME, "Ready")
    current = cond.get("status") == "True" and cond.get("observedGeneration") == generation
    return cond if current else None


async def held(kube: KubeClient, generation: int) -> Json | None:
    cond = await scenario.condition(kube, NAME, "ConfigMapSynced")
    mine = cond.get("observedGeneration") == generation
    return cond if mine and cond.get("reason") == HELD_REASON else None


async def trust_roots(kube: KubeClient) -> str | None:
    try:
        cm = await kube.request("GET", CONFIGMAPS.path("linkerd", TRUST_ROOTS_CONFIGMAP))
    except ApiError as exc:
        if exc.not_found:
            return None
        raise
    return str((cm.get("data") or {}).get(TRUST_ROOTS_KEY))


async def roots_are(kube: KubeClient, text: str) -> bool:
    return await trust_roots(kube) == text


async def bundles(kube: KubeClient) -> dict[str, set[str | None]]:
    """Each Deployment's running pods and the trust-root hashes they carry."""
    found: dict[str, set[str | None]] = {}
    for pod in await scenario.running_pods(kube, NS):
        annotations = pod["metadata"].get("annotations") or {}
        found.setdefault(pod["metadata"]["labels"]["app"], set()).add(
            annotations.get(TRUST_ROOT_ANNOTATION)
        )
    return found


async def on(kube: KubeClient, wanted: dict[str, str]) -> dict[str, set[str | None]] | None:
    found = await bundles(kube)
    expected = {app: {bundle_hash(text)} for app, text in wanted.items()}
    return found if found == expected else None


async def injects(kube: KubeClient, text: str) -> bool:
    try:
        pod = await scenario.dry_run_pod(kube, NS, {})
    except ApiError:
        return False
    stamped = (pod["metadata"].get("annotations") or {}).get(TRUST_ROOT_ANNOTATION)
    return stamped == bundle_hash(text)


async def restart_records(kube: KubeClient, names: list[str]) -> dict[str, str | None]:
    found = {}
    for name in names:
        dep = await kube.request("GET", DEPLOYMENTS.path(NS, name))
        annotations = dep["spec"]["template"]["metadata"].get("annotations") or {}
        found[name] = annotations.get(rollout.RESTARTED_FOR_ANNOTATION)
    return found


async def linkerd_on_a(cp: LocalControlPlane, kube: KubeClient) -> None:
    """edge-26.8.3 installed with ``[A]`` written; the meshed namespace injected with it."""
    generation = await apply(kube, A)
    await eventually(lambda: ready(kube, generation), timeout=60, what="[A] written")
    await scenario.create(kube, NAMESPACES.path(), MESHED_NAMESPACE)
    await eventually(lambda: injects(kube, bundle(A)), timeout=60, what="injector on [A]")


@contextlib.asynccontextmanager
async def installed(cp: LocalControlPlane, kube: KubeClient) -> AsyncIterator[None]:
    """edge-26.8.3 installed by its own CLI's rendering, its injector serving, and the
    controller running."""
    install = await asyncio.to_thread(render_install, "edge-26.8.3")
    await scenario.install_crd(kube)
    await scenario.install_linkerd(kube, install)
    template = install.injector_webhook
    async with (
        scenario.linkerd_injector(cp, "edge-26.8.3", webhook_template=template),
        scenario.controller(cp, NAME),
    ):
        yield


@pytest.mark.timeout(600)
async def test_a_deleted_or_edited_trust_roots_configmap_keeps_the_removal_held(
    own_control_plane: LocalControlPlane, own_kube: KubeClient
) -> None:
    cp, kube = own_control_plane, own_kube
    async with installed(cp, kube):
        await linkerd_on_a(cp, kube)
        await scenario.meshed_namespace(kube, NS, ["web"], ["bystander"], replicas=1)
        generation = await apply(kube, BOTH)
        await eventually(lambda: ready(kube, generation), timeout=120, what="[A, B] rolled out")
        wanted = {"web": BOTH, "bystander": bundle(A)}
        await eventually(lambda: on(kube, wanted), timeout=60, what="web on [A, B]")

        generation = await apply(kube, ONLY_B)
        await eventually(lambda: held(kube, generation), timeout=60, what="the removal held")
        assert await trust_roots(kube) == BOTH

        # Deleted: restored with the bundle that keeps both anchors, the hold kept.
        deleted = time.time()
        await kube.request("DELETE", CONFIGMAPS.path("linkerd", TRUST_ROOTS_CONFIGMAP))
        await eventually(lambda: roots_are(kube, BOTH), timeout=60, what="the trust roots restored")
        # Edited to [B] by someone else (a helm upgrade would): put back to [A, B].
        edit = {"data": {TRUST_ROOTS_KEY: ONLY_B}}
        await kube.request(
            "PATCH", CONFIGMAPS.path("linkerd", TRUST_ROOTS_CONFIGMAP), body=edit,
            content_type="application/merge-patch+json",
        )  # fmt: skip
        await eventually(lambda: roots_are(kube, BOTH), timeout=60, what="the edit reverted")
        await asyncio.sleep(5.0)  # several reconciles: the hold stands, nothing restarts
        assert await held(kube, generation), "the hold was lifted"
        assert await trust_roots(kube) == BOTH
        restarts = successful_writes(cp, "patch", "deployments", NS, AGENT)
        assert [e for e in restarts if received_at(e) >= deleted] == []
        assert await on(kube, wanted), "a pod moved"

        # The bystander restarted by hand onto [A, B]: the removal proceeds by itself.
        (bystander,) = [
            p["metadata"]["name"]
            for p in await scenario.running_pods(kube, NS)
            if p["metadata"]["labels"]["app"] == "bystander"
        ]
        await kube.request("DELETE", PODS.path(NS, bystander))
        await eventually(lambda: ready(kube, generation), timeout=180, what="[B] rolled out")
        assert await trust_roots(kube) == ONLY_B
        await eventually(
            lambda: on(kube, {"web": ONLY_B, "bystander": BOTH}), timeout=60, what="web on [B]"
        )


@pytest.mark.timeout(600)
async def test_a_removal_applied_mid_rotation_finishes_the_rotation_first(
    own_control_plane: LocalControlPlane, own_kube: KubeClient
) -> None:
    cp, kube = own_control_plane, own_kube
    names = ["api", "web"]  # restarted in this order, one per pass
    async with installed(cp, kube):
        await linkerd_on_a(cp, kube)
        await scenario.meshed_namespace(kube, NS, names, replicas=1)
        slow = {"maxRestartsPerPass": 1, "restartInterval": "20s"}
        await apply(kube, BOTH, **slow)

        async def first_restarted() -> dict[str, str | None] | None:
            found = await restart_records(kube, names)
            return found if found["api"] and not found["web"] else None

        await eventually(first_restarted, timeout=120, interval=0.2, what="api restarted")
        generation = await apply(kube, ONLY_B, **slow)  # web still on [A]
        cond = await eventually(lambda: held(kube, generation), timeout=60, what="held")
        assert f"{NS}/web-" in cond["message"]
        # The rotation goes on: web comes onto [A, B], then [B] is written and rolled out.
        await eventually(lambda: ready(kube, generation), timeout=300, what="[B] rolled out")
        assert await trust_roots(kube) == ONLY_B
        await eventually(
            lambda: on(kube, {"api": ONLY_B, "web": ONLY_B}), timeout=90, what="all on [B]"
        )
        # [B] was written only after web's restart onto [A, B].
        writes = successful_writes(cp, "patch", "configmaps", "linkerd", AGENT)
        roots = [received_at(e) for e in writes if e["objectRef"]["name"] == TRUST_ROOTS_CONFIGMAP]
        web = [
            received_at(e)
            for e in successful_writes(cp, "patch", "deployments", NS, AGENT)
            if e["objectRef"]["name"] == "web"
        ]
        assert len(web) == 2  # onto [A, B], then onto [B]
        assert web[0] < roots[-1] < web[1]
