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
3. **A straight swap, ``[A]`` to ``[B]``** (issue 58, finding 5), with the controller's
   admission webhooks off and on. Before, ``[B]`` was written 0.5 s later with one Warning,
   and for 9.4 s pods on ``[A]`` and on ``[B]`` ran side by side sharing no anchor (linkerd2
   #4287's outage). Now it is staged as a rotation: ``plan`` says so, the trust roots go
   ``[A]`` → ``[A, B]`` (the opted-in pods restarted onto it) → ``[B]`` once the bystander, the
   one holder not opted in, is restarted by hand as the hold says; a watch of every meshed pod
   and of the trust roots, replayed in the API server's own order, shows no moment with a pod
   on ``[A]`` beside one on ``[B]``, nor ``[B]`` written while a pod ran ``[A]``.
4. **The same swap in the legacy format** (edge-19.12.1's ``linkerd-config``, edge-19.12.3's
   injector), whose pods carry no trust-root hash: held, nothing written, the message saying
   what to apply instead; that bundle, ``[X, B]``, is then written.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from devcluster.cluster import LocalControlPlane
from devcluster.linkerd_install import render_install
from linkerd_config.kube.client import MERGE_PATCH, ApiError, KubeClient
from linkerd_config.kube.informer import Informer
from linkerd_config.kube.resource import (
    CONFIGMAPS,
    DEPLOYMENTS,
    EVENTS,
    NAMESPACES,
    PODS,
    Json,
)
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.formats.helm_values import TRUST_ROOTS_CONFIGMAP, TRUST_ROOTS_KEY
from linkerd_config.linkerd.mesh import TRUST_ROOT_ANNOTATION
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from linkerd_config.linkerd.trust.guard import (
    HELD_REASON,
    MESHED_LABEL,
    bundle_hash,
    parse_bundle,
)
from tests.support import commands, scenario, webhooks_on
from tests.support.anchors import bundle, trust_anchor
from tests.support.audit import received_at, successful_writes
from tests.support.samples import install_configmap, sample
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
        found[name] = annotations.get(mesh.RESTARTED_FOR_ANNOTATION)
    return found


async def linkerd_on_a(cp: LocalControlPlane, kube: KubeClient) -> None:
    """edge-26.8.3 installed with ``[A]`` written; the meshed namespace injected with it."""
    generation = await apply(kube, A)
    await eventually(lambda: ready(kube, generation), timeout=60, what="[A] written")
    await scenario.create(kube, NAMESPACES.path(), MESHED_NAMESPACE)
    await eventually(lambda: injects(kube, bundle(A)), timeout=60, what="injector on [A]")


@contextlib.asynccontextmanager
async def installed(
    cp: LocalControlPlane, kube: KubeClient, webhooks: bool = False, certs: Path | None = None
) -> AsyncIterator[None]:
    """edge-26.8.3 installed by its own CLI's rendering, its injector serving, and the
    controller running (with ``webhooks``, its admission webhooks in effect, served with a
    pair written to ``certs``)."""
    install = await asyncio.to_thread(render_install, "edge-26.8.3")
    await scenario.install_crd(kube)
    await scenario.install_linkerd(kube, install)
    template = install.injector_webhook
    async with (
        scenario.linkerd_injector(cp, "edge-26.8.3", webhook_template=template),
        webhooks_on.controller(cp, kube, certs or cp.workdir / "certs", webhooks, NAME),
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


# -- a straight swap, staged as a rotation (issue 58, finding 5) ----------------------------

BYSTANDER = "bystander"
SWAPPED = ("web", "api")
"""Opted in to restarts; the bystander is not."""


@dataclass
class Timeline:
    """Every meshed pod's trust-root hash and the trust roots' bundle, change by change, as
    two watches saw them. One etcd stands behind the API server: each resourceVersion is its
    revision, a single sequence for pods and ConfigMaps alike, so sorting by it interleaves
    the two watches in the order the API server made the changes."""

    changes: list[tuple[int, str, str | None]] = field(default_factory=list)
    """(resourceVersion, ``roots`` or ``pod/<uid>``, the bundle or hash; None once gone)."""

    def pod(self, pod: Json, gone: bool = False) -> None:
        meta = pod["metadata"]
        ended = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        digest = (meta.get("annotations") or {}).get(TRUST_ROOT_ANNOTATION, "<no hash>")
        value = None if gone or ended else str(digest)  # an ended pod runs no proxy
        self.changes.append((int(meta["resourceVersion"]), f"pod/{meta['uid']}", value))

    def roots(self, cm: Json, gone: bool = False) -> None:
        text = None if gone else (cm.get("data") or {}).get(TRUST_ROOTS_KEY)
        self.changes.append((int(cm["metadata"]["resourceVersion"]), "roots", text))

    def moments(self) -> Iterator[tuple[str | None, frozenset[str]]]:
        """After each change in turn: the trust roots' bundle, and the hashes meshed pods ran."""
        pods: dict[str, str] = {}
        roots: str | None = None
        for _, key, value in sorted(self.changes, key=lambda change: change[0]):
            if key == "roots":
                roots = value
            elif value is None:
                pods.pop(key, None)
            else:
                pods[key] = value
            yield roots, frozenset(pods.values())


@contextlib.asynccontextmanager
async def watched(kube: KubeClient) -> AsyncIterator[tuple[Timeline, Informer, Informer]]:
    """Every meshed pod of the cluster, and the trust roots, watched into a ``Timeline`` while
    the block runs (and their informers, to tell when they have caught up)."""
    timeline = Timeline()
    pods = Informer(kube, PODS, label_selector=f"{MESHED_LABEL}=linkerd", name="swap-meshed-pods")
    pods.add_handler(
        timeline.pod, lambda _, new: timeline.pod(new), lambda p: timeline.pod(p, True)
    )
    roots = Informer(
        kube, CONFIGMAPS, namespace="linkerd",
        field_selector=f"metadata.name={TRUST_ROOTS_CONFIGMAP}", name="swap-trust-roots",
    )  # fmt: skip
    roots.add_handler(
        timeline.roots, lambda _, new: timeline.roots(new), lambda cm: timeline.roots(cm, True)
    )
    tasks = [asyncio.create_task(i.run(), name=i.name) for i in (pods, roots)]
    try:
        await pods.wait_synced(30)
        await roots.wait_synced(30)
        yield timeline, pods, roots
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def relists(informer: Informer) -> float:
    found = informer.metrics.registry.get_sample_value(
        "informer_relists_total", {"resource": informer.name}
    )
    return found or 0.0


def distinct(values: Iterator[str | None]) -> list[str | None]:
    """``values`` with each run of one value said once."""
    runs: list[str | None] = []
    for value in values:
        if not runs or runs[-1] != value:
            runs.append(value)
    return runs


@pytest.mark.timeout(600)
@pytest.mark.parametrize("webhooks", [False, True], ids=["webhooks-off", "webhooks-on"])
async def test_a_straight_swap_is_staged_as_a_rotation_and_never_splits_the_mesh(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, tmp_path: Path, webhooks: bool
) -> None:
    cp, kube = own_control_plane, own_kube
    on_a, on_both, on_b = bundle_hash(bundle(A)), bundle_hash(BOTH), bundle_hash(ONLY_B)
    async with installed(cp, kube, webhooks, tmp_path / "certs"):
        await linkerd_on_a(cp, kube)
        await scenario.meshed_namespace(kube, NS, SWAPPED, [BYSTANDER], replicas=1)
        everyone = (*SWAPPED, BYSTANDER)
        await eventually(
            lambda: on(kube, dict.fromkeys(everyone, bundle(A))), timeout=60, what="all on [A]"
        )
        (bystander,) = [
            p["metadata"]["name"]
            for p in await scenario.running_pods(kube, NS)
            if p["metadata"]["labels"]["app"] == BYSTANDER
        ]
        holder = f"{NS}/{bystander}"

        # plan, before anything is applied: the swap is staged, not written.
        path = tmp_path / "only-b.yaml"
        kind = {"apiVersion": LINKERD_CONFIGS.api_version, "kind": "LinkerdConfig"}
        path.write_text(yaml.safe_dump({**kind, "metadata": {"name": NAME}, "spec": spec(ONLY_B)}))
        code, planned = await commands.plan_json(cp.kubeconfig, path)
        assert code == 2
        anchors = planned["trustAnchors"]
        assert anchors["swap"] and anchors["held"], anchors
        assert holder in anchors["hold"]["pods"] and anchors["hold"]["podCount"] == 3
        assert await trust_roots(kube) == bundle(A)  # plan wrote nothing

        async with watched(kube) as (timeline, pods_seen, roots_seen):
            applied = time.time()
            generation = await apply(kube, ONLY_B)
            cond = await eventually(lambda: held(kube, generation), timeout=60, what="held")
            assert cond["status"] == "False", cond
            assert "staged as a rotation" in cond["message"], cond["message"]
            assert holder in cond["message"] and "restart the others" in cond["message"]

            # Meanwhile [A, B] (exactly: A's certificate, then B's) written and rolled out to
            # the opted-in.
            await eventually(lambda: roots_are(kube, BOTH), timeout=60, what="[A, B] written")
            wanted = {**dict.fromkeys(SWAPPED, BOTH), BYSTANDER: bundle(A)}
            await eventually(lambda: on(kube, wanted), timeout=120, what="opted-in on [A, B]")

            async def held_by_the_bystander_alone() -> Json | None:
                obj = await kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
                hold = (obj.get("status") or {}).get("trustAnchorHold") or {}
                return hold if hold.get("pods") == [holder] else None

            hold = await eventually(held_by_the_bystander_alone, timeout=60, what="one holder")
            assert hold["podCount"] == 1
            assert [d.split(" (")[0] for d in hold["dropped"]] == [
                "CN=a.root.linkerd.cluster.local"
            ]
            assert [r.split(" (")[0] for r in hold["required"]] == [
                "CN=b.root.linkerd.cluster.local"
            ]
            assert (await held(kube, generation)) is not None  # still held, on [A, B]
            assert await trust_roots(kube) == BOTH
            assert await on(kube, wanted), "a pod moved"

            # The bystander restarted by hand, as the hold asks (kubectl rollout restart),
            # once the injector hands out [A, B]: then [B], and the opted-in pods onto it.
            await eventually(lambda: injects(kube, BOTH), timeout=60, what="injector on [A, B]")
            restart = {"spec": {"template": {"metadata": {"annotations": {
                "kubectl.kubernetes.io/restartedAt": "2026-12-01T00:00:00Z"
            }}}}}  # fmt: skip
            await kube.request(
                "PATCH", DEPLOYMENTS.path(NS, BYSTANDER), body=restart, content_type=MERGE_PATCH
            )
            await eventually(lambda: ready(kube, generation), timeout=180, what="[B] rolled out")
            assert await trust_roots(kube) == ONLY_B
            final = {**dict.fromkeys(SWAPPED, ONLY_B), BYSTANDER: BOTH}
            await eventually(lambda: on(kube, final), timeout=90, what="the opted-in on [B]")
            await scenario.wait_settled(kube, NS, expected=len(everyone))

            async def caught_up() -> bool:  # the watches have seen the end too
                hashes = sorted(
                    str((p["metadata"].get("annotations") or {}).get(TRUST_ROOT_ANNOTATION))
                    for p in pods_seen.store.list()
                )
                (cm,) = roots_seen.store.list()
                return hashes == sorted([on_b, on_b, on_both]) and (
                    cm["data"][TRUST_ROOTS_KEY] == ONLY_B
                )

            await eventually(caught_up, timeout=30, what="the watches caught up")
            assert relists(pods_seen) == relists(roots_seen) == 1  # no gap in either record

        moments = list(timeline.moments())
        assert distinct(r for r, _ in moments) == [bundle(A), BOTH, ONLY_B]
        split = [(r, h) for r, h in moments if on_a in h and on_b in h]
        assert split == [], "pods on [A] and on [B] at once"
        early = [h for r, h in moments if r == ONLY_B and on_a in h]
        assert early == [], "[B] written while a pod ran [A]"
        seen = set().union(*(h for _, h in moments))
        assert {on_a, on_both, on_b} <= seen  # every stage was watched

        # Restarted by the controller: each opted-in twice (onto [A, B], then onto [B]), the
        # first before [B] was written and the second after; the bystander never.
        writes = successful_writes(cp, "patch", "configmaps", "linkerd", AGENT)
        written = [
            received_at(e)
            for e in writes
            if e["objectRef"]["name"] == TRUST_ROOTS_CONFIGMAP and received_at(e) >= applied
        ]
        assert len(written) == 2, written  # [A, B], then [B]
        restarts = successful_writes(cp, "patch", "deployments", NS, AGENT)
        for name in SWAPPED:
            mine = [received_at(e) for e in restarts if e["objectRef"]["name"] == name]
            assert len(mine) == 2, (name, mine)
            assert written[0] < mine[0] < written[1] < mine[1], (name, mine, written)
        assert [e for e in restarts if e["objectRef"]["name"] == BYSTANDER] == []

        obj = await kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
        assert "trustAnchorHold" not in obj["status"]
        recorded = [b["sha256"] for b in obj["status"]["trustBundles"]]
        assert recorded[-3:] == [on_a, on_both, on_b]
        events = (await kube.request("GET", EVENTS.path("default")))["items"]
        about = [e for e in events if e["involvedObject"]["name"] == NAME]
        assert [e["type"] for e in about if e["reason"] == HELD_REASON] == ["Warning"]
        # One swap was written at once: the install's anchor to [A], with nothing meshed (a
        # Normal Event, naming the install's anchor dropped). The swap to [B], staged, raised
        # none (it would name A dropped).
        replaced = [e for e in about if e["reason"] == "TrustAnchorsReplaced"]
        assert replaced, about
        for event in replaced:
            assert event["type"] == "Normal", event
            assert "a.root.linkerd.cluster.local" not in event["message"], event["message"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("webhooks", [False, True], ids=["webhooks-off", "webhooks-on"])
async def test_a_legacy_swap_is_held_with_nothing_written_and_says_what_to_apply(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, webhooks: bool
) -> None:
    cp, kube = own_control_plane, own_kube
    name = "legacy-swap"
    new = trust_anchor("b.root.linkerd.cluster.local")
    installed_cm = install_configmap()

    def legacy_anchors(cm: Json) -> str:
        return str(json.loads(cm["data"]["global"])["identityContext"]["trustAnchorsPem"])

    old = legacy_anchors(installed_cm)
    async with scenario.readme_starting_point(cp, kube):
        await scenario.wait_settled(kube, scenario.EMOJIVOTO, expected=8)
        async with webhooks_on.controller(cp, kube, cp.workdir / "certs", webhooks, name):
            swap: Json = sample("edge_19.12.3.yaml")["spec"]
            swap["global"]["identityContext"]["trustAnchorsPEM"] = new
            applied = time.time()
            stored = await scenario.apply_linkerdconfig(kube, name, swap)
            generation = stored["metadata"]["generation"]

            async def synced(reason: str) -> Json | None:
                cond = await scenario.condition(kube, name, "ConfigMapSynced")
                mine = cond.get("observedGeneration") == generation
                return cond if mine and cond.get("reason") == reason else None

            cond = await eventually(lambda: synced(HELD_REASON), timeout=60, what="held")
            said = cond["message"]
            assert cond["status"] == "False"
            assert "stamps no trust-root hash" in said and "CN=cluster.local" in said, said
            assert (
                "Apply a bundle holding both (the old anchors, then the new) first, "
                "restart every meshed pod onto it, then this one"
            ) in said, said
            obj = await kube.request("GET", LINKERD_CONFIGS.path(name=name))
            assert obj["status"]["trustAnchorHold"]["dropped"][0].startswith("CN=cluster.local")
            # Nothing written: linkerd-config as edge-19.12.1 installed it, nothing restarted.
            cm = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
            assert cm["data"] == installed_cm["data"]
            ours = [
                e
                for verb in ("patch", "update", "create")
                for e in successful_writes(cp, verb, "configmaps", "linkerd", AGENT)
                if received_at(e) >= applied
            ]
            assert ours == []
            restarts = successful_writes(cp, "patch", "deployments", scenario.EMOJIVOTO, AGENT)
            assert restarts == []

            # What the message says to apply, the old anchor then the new: written.
            both = f"{old.strip()}\n{new.strip()}"
            swap["global"]["identityContext"]["trustAnchorsPEM"] = both
            stored = await scenario.apply_linkerdconfig(kube, name, swap)
            generation = stored["metadata"]["generation"]
            cond = await eventually(lambda: synced("Synced"), timeout=60, what="[X, B] written")
            assert cond["status"] == "True", cond
            cm = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
            assert [a.sha256 for a in parse_bundle(legacy_anchors(cm), "cm").anchors] == [
                a.sha256 for a in parse_bundle(both, "spec").anchors
            ]
            obj = await kube.request("GET", LINKERD_CONFIGS.path(name=name))
            assert "trustAnchorHold" not in obj["status"]
