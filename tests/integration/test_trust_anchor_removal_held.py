"""The trust-anchor guard on today's Linkerd (edge-26.8.3, its own ``linkerd install`` and its
real injector), on a control plane of this module's own: the rotation Linkerd's docs describe,
with anchors made as the docs make them (EC P-256 root CAs).

1. ``[A]`` replaces the install's anchor while nothing is meshed: nothing holds it.
2. Meshed Deployments are injected with ``[A]``: two opted in to restarts, one (vote-bot) not.
   Linkerd's injector stamps each pod with the hash the guard computes.
3. ``[A, B]`` adds an anchor: written at once; the opted-in pods restart onto it, vote-bot
   stays on ``[A]`` (nothing restarts it).
4. ``[B]`` drops ``A``, which vote-bot still needs: ``plan`` shows the hold before anything is
   applied; applied, nothing is written (the audit log shows no write to the trust roots),
   ``ConfigMapSynced=False TrustAnchorRemovalHeld`` names the pod, ``status`` too. The API
   server restarted: still held. The controller replaced by a new one, its caches empty (the
   meshed pods' only filled once the bundle change wants them): held again, nothing written.
5. vote-bot's pod deleted, its ReplicaSet recreates it with ``[A, B]``: the removal proceeds,
   the trust roots say ``[B]``, the hold leaves status and the opted-in pods move to ``[B]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.cluster import ControlPlaneOptions, LocalControlPlane
from devcluster.linkerd_install import LinkerdInstall, render_install
from linkerd_config.app import App
from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.resource import CONFIGMAPS, EVENTS, NAMESPACES, PODS, Json
from linkerd_config.linkerd.formats.helm_values import TRUST_ROOTS_CONFIGMAP, TRUST_ROOTS_KEY
from linkerd_config.linkerd.mesh import TRUST_ROOT_ANNOTATION
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from linkerd_config.linkerd.trust.guard import HELD_REASON, bundle_hash
from tests.support import commands, scenario
from tests.support.anchors import bundle, trust_anchor
from tests.support.audit import received_at, successful_writes
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

NS = "rotation"
OPTED_IN = ("web", "api")
BYSTANDER = "vote-bot"
NAME = "anchors"
A = trust_anchor("a.root.linkerd.cluster.local")
B = trust_anchor("b.root.linkerd.cluster.local")


@pytest.fixture(scope="module")
def cp() -> Iterator[LocalControlPlane]:
    with LocalControlPlane(ControlPlaneOptions(workloads=True)) as plane:
        yield plane


@pytest.fixture(scope="module")
async def world(cp: LocalControlPlane) -> AsyncIterator[KubeClient]:
    """edge-26.8.3 installed by its own CLI's rendering, its injector serving; nothing meshed."""
    install: LinkerdInstall = await asyncio.to_thread(render_install, "edge-26.8.3")
    access = await load_access(str(cp.kubeconfig))
    async with KubeClient(access, user_agent="trust-anchor-guard-tests") as kube:
        await scenario.install_crd(kube)
        await scenario.install_linkerd(kube, install)
        template = install.injector_webhook
        async with scenario.linkerd_injector(cp, "edge-26.8.3", webhook_template=template):
            yield kube


def controller(
    cp: LocalControlPlane, **options: Any
) -> contextlib.AbstractAsyncContextManager[App]:
    return scenario.controller(cp, "trust-anchor-guard", **options)


def linkerdconfig(anchors: str) -> Json:
    return {
        "apiVersion": "config.linkerd.io/v1alpha1",
        "kind": "LinkerdConfig",
        "metadata": {"name": NAME},
        "spec": {
            "global": {"identityContext": {"trustAnchorsPEM": anchors}},
            "proxy": {"proxyVersion": "edge-26.8.3"},
        },
    }


async def apply(kube: KubeClient, anchors: str) -> int:
    """Apply the LinkerdConfig with ``anchors``; its generation."""
    applied = await scenario.apply_linkerdconfig(kube, NAME, linkerdconfig(anchors)["spec"])
    return int(applied["metadata"]["generation"])


async def ready(kube: KubeClient, generation: int) -> Json | None:
    cond = await scenario.condition(kube, NAME, "Ready")
    current = cond.get("status") == "True" and cond.get("observedGeneration") == generation
    return cond if current else None


async def trust_roots(kube: KubeClient) -> str:
    cm = await kube.request("GET", CONFIGMAPS.path("linkerd", TRUST_ROOTS_CONFIGMAP))
    return str(cm["data"][TRUST_ROOTS_KEY])


async def hashes(kube: KubeClient) -> dict[str, str | None]:
    """Each running pod of the namespace (by Deployment) and the trust-root hash it carries."""
    return {
        pod["metadata"]["labels"]["app"]: (pod["metadata"].get("annotations") or {}).get(
            TRUST_ROOT_ANNOTATION
        )
        for pod in await scenario.running_pods(kube, NS)
    }


MESHED_NAMESPACE = {"metadata": {"name": NS, "annotations": {"linkerd.io/inject": "enabled"}}}


async def injects(kube: KubeClient, text: str) -> bool:
    """Whether Linkerd's injector gives a pod created now in the meshed namespace ``text``."""
    try:
        pod = await scenario.dry_run_pod(kube, NS, {})
    except ApiError:
        return False  # not admitted yet (its ServiceAccount)
    stamped = (pod["metadata"].get("annotations") or {}).get(TRUST_ROOT_ANNOTATION)
    return stamped == bundle_hash(text)


async def on_bundles(kube: KubeClient, wanted: dict[str, str]) -> dict[str, str | None] | None:
    """Once exactly one running pod per Deployment carries the hash ``wanted`` says."""
    pods = await scenario.running_pods(kube, NS)
    found = await hashes(kube)
    expected = {app: bundle_hash(text) for app, text in wanted.items()}
    return found if len(pods) == len(wanted) and found == expected else None


async def test_a_removal_is_held_while_a_pod_needs_the_anchor_then_proceeds(
    cp: LocalControlPlane, world: KubeClient, tmp_path: Path
) -> None:
    kube = world
    both, only_b = bundle(A, B), bundle(B)
    async with controller(cp, restart_interval=0.5, injector_wait=600):
        # 1. Nothing meshed yet: replacing the install's anchor holds on nothing.
        generation = await apply(kube, A)
        await eventually(lambda: ready(kube, generation), timeout=60, what="[A] written")
        assert await trust_roots(kube) == bundle(A)

        # 2. Injected by Linkerd's own injector, stamped with the hash the guard computes,
        # once its mounted trust roots (a kubelet-like copy of the ConfigMap) say [A].
        await scenario.create(kube, NAMESPACES.path(), MESHED_NAMESPACE)
        await eventually(lambda: injects(kube, bundle(A)), timeout=60, what="injector on [A]")
        await scenario.meshed_namespace(kube, NS, OPTED_IN, [BYSTANDER], replicas=1)
        everyone = (*OPTED_IN, BYSTANDER)
        assert await hashes(kube) == dict.fromkeys(everyone, bundle_hash(await trust_roots(kube)))

        # 3. An added anchor is written at once; the opted-in pods restart onto it.
        generation = await apply(kube, both)
        await eventually(lambda: ready(kube, generation), timeout=120, what="[A, B] rolled out")
        assert await trust_roots(kube) == both
        wanted = {**dict.fromkeys(OPTED_IN, both), BYSTANDER: bundle(A)}
        await eventually(lambda: on_bundles(kube, wanted), timeout=60, what="pods on [A, B]")
        await scenario.wait_settled(kube, NS, expected=len(everyone))  # the old ones gone
        (bystander,) = [
            p["metadata"]["name"]
            for p in await scenario.running_pods(kube, NS)
            if p["metadata"]["labels"]["app"] == BYSTANDER
        ]
        holder = f"{NS}/{bystander}"

        # 4. plan shows the hold before anything is applied ...
        path = tmp_path / "only-b.yaml"
        path.write_text(yaml.safe_dump(linkerdconfig(only_b)))
        code, planned = await commands.plan_json(cp.kubeconfig, path)
        assert code == 2
        anchors = planned["trustAnchors"]
        assert anchors["held"] and anchors["hold"]["pods"] == [holder]
        assert [d.split(" (")[0] for d in anchors["dropped"]] == ["CN=a.root.linkerd.cluster.local"]
        assert await trust_roots(kube) == both  # plan wrote nothing

        # ... and once applied, nothing is written while vote-bot runs with [A].
        applied = time.time()
        generation = await apply(kube, only_b)

        async def held() -> Json | None:
            cond = await scenario.condition(kube, NAME, "ConfigMapSynced")
            mine = cond.get("observedGeneration") == generation
            return cond if mine and cond.get("reason") == HELD_REASON else None

        cond = await eventually(held, timeout=60, what="the removal held")
        assert cond["status"] == "False" and holder in cond["message"]
        assert "CN=a.root.linkerd.cluster.local" in cond["message"]
        obj = await kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
        assert obj["status"]["trustAnchorHold"]["pods"] == [holder]
        assert obj["status"]["trustAnchorHold"]["podCount"] == 1
        code, reports = await commands.status_json(cp.kubeconfig)
        assert code == 2
        (report,) = [r for r in reports if r["linkerdConfig"] == NAME]
        assert report["trustAnchors"]["hold"]["pods"] == [holder]
        # The next pass, as the controller's step decides it: the opted-in pods are on the
        # bundle held on to, so nothing restarts, and it says the removal is held.
        upcoming = report["nextPass"]
        assert (upcoming["phase"], upcoming["restarts"]) == ("UpToDate", []), upcoming
        assert "a trust-anchor removal is held meanwhile" in upcoming["message"]
        events = (await kube.request("GET", EVENTS.path("default")))["items"]
        warned = [
            e for e in events if e["reason"] == HELD_REASON and e["involvedObject"]["name"] == NAME
        ]
        assert len(warned) == 1 and warned[0]["type"] == "Warning"
        await asyncio.sleep(2.0)  # several reconciles (pod events wake it): still nothing
        roots_written = [
            e
            for e in successful_writes(cp, "patch", "configmaps", "linkerd", "linkerd-config/")
            if e["objectRef"].get("name") == TRUST_ROOTS_CONFIGMAP and received_at(e) >= applied
        ]
        assert roots_written == []
        assert await trust_roots(kube) == both

        # 4b. The API server restarts under the hold (the caches' watches break and resume):
        # the removal stays held, nothing written.
        await asyncio.to_thread(cp.restart_apiserver)
        await eventually(held, timeout=60, what="the hold after the API server's restart")
        await asyncio.sleep(2.0)
        assert await trust_roots(kube) == both

    # 4c. A new controller takes over, its caches empty: the meshed pods' cache starts only
    # when a bundle change wants it, and until it has filled nothing is written; then the
    # removal is held again, by what it sees, not by what the status said.
    async with controller(cp, restart_interval=0.5, injector_wait=600) as app:
        meshed = app.controller.meshed_pods
        await eventually(
            lambda: asyncio.sleep(0, result=meshed.has_synced), timeout=60,
            what="the new controller's meshed pods' cache wanted and filled",
        )  # fmt: skip
        assert holder in meshed.store
        cond = await eventually(held, timeout=60, what="the removal held by the new controller")
        assert holder in cond["message"]
        await asyncio.sleep(2.0)
        roots_written = [
            e
            for e in successful_writes(cp, "patch", "configmaps", "linkerd", "linkerd-config/")
            if e["objectRef"].get("name") == TRUST_ROOTS_CONFIGMAP and received_at(e) >= applied
        ]
        assert roots_written == []
        assert await trust_roots(kube) == both

        # 5. vote-bot restarted (by hand: it is not opted in) comes back with [A, B] ...
        await kube.request("DELETE", PODS.path(NS, bystander))
        await eventually(lambda: ready(kube, generation), timeout=120, what="[B] rolled out")
        assert await trust_roots(kube) == only_b
        obj = await kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
        assert "trustAnchorHold" not in obj["status"]
        recorded = [b["sha256"] for b in obj["status"]["trustBundles"]]
        assert recorded[-3:] == [bundle_hash(bundle(A)), bundle_hash(both), bundle_hash(only_b)]
        wanted = {**dict.fromkeys(OPTED_IN, only_b), BYSTANDER: both}
        await eventually(lambda: on_bundles(kube, wanted), timeout=60, what="pods on [B]")
