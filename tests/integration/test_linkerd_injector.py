"""Linkerd's real proxy injector on the local control plane, and the promise that depends on it.

* The controller restarts nothing until the injector actually serves the new configuration:
  ConfigMap changes reach the injector's files only ``DELAY`` seconds late (as the kubelet
  delivers them), and a pod restarted before that would come back with the old proxy.
* edge-26.8.3's injector, configured from what its own ``linkerd install`` rendered, injects
  a pod as a native sidecar.
* With that modern Linkerd, the controller writes the Helm ``values`` key and the trust roots:
  a LinkerdConfig as small as a user would write (proxy version and log level) changes just
  those two values, every other key and value kept; each opted-in Deployment is restarted
  once, its new pods carrying what the injector now injects; a new trust anchor, added beside
  the installed one as the rotation's first step (a bundle that keeps none of them is staged
  as a rotation, held while a meshed pod lacks the new anchor: ``test_trust_anchor_seams``),
  goes to ``ca-bundle.crt`` and the pods whose ``trust-root-sha256`` no longer matches are
  restarted, the one not opted in left alone; applying the same LinkerdConfig again writes
  nothing.

Each test has a control plane of its own: Linkerd's names (``linkerd-config``, the webhook
configuration) exist once per cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import hashlib
import subprocess
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml

from devcluster.cluster import LocalControlPlane
from devcluster.linkerd_install import render_install
from linkerd_config.app import build, running
from linkerd_config.kube.client import APPLY_PATCH, KubeClient
from linkerd_config.kube.informer import Informer
from linkerd_config.kube.resource import CONFIGMAPS, DEPLOYMENTS, NAMESPACES, PODS
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import scenario
from tests.support.audit import received_at, successful_writes
from tests.support.samples import SECOND_TRUST_ANCHOR, sample
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
DELAY = 6.0
"""Seconds a ConfigMap change takes to reach the injector's files."""
FALLBACK = 600.0
"""The controller's blind wait when it cannot ask the injector: far beyond this test's timeouts,
so a rollout that finishes proves the dry-run probe, not the wait, released it."""
CONTROLLER_AGENT = "linkerd-config/"
OLD_PROXY, NEW_PROXY = scenario.OLD_PROXY_IMAGE, scenario.NEW_PROXY_IMAGE


@contextlib.asynccontextmanager
async def every_pod_admitted(kube: KubeClient, namespace: str) -> AsyncIterator[dict[str, Obj]]:
    """Each pod of ``namespace`` as the API server first admitted it, by uid."""
    seen: dict[str, Obj] = {}
    informer = Informer(kube, PODS, namespace=namespace, name="every-pod")
    informer.add_handler(lambda pod: seen.setdefault(pod["metadata"]["uid"], pod))
    task = asyncio.create_task(informer.run(), name="every-pod")
    try:
        await informer.wait_synced(30)
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_no_restart_until_the_injector_serves_the_new_config(
    own_control_plane: LocalControlPlane, own_kube: KubeClient
) -> None:
    cp, kube = own_control_plane, own_kube
    async with scenario.readme_starting_point(cp, kube, projection_delay=DELAY) as injector:
        before = await scenario.wait_settled(kube, scenario.EMOJIVOTO, expected=8)
        assert {scenario.readme_check(p) for p in before} == {OLD_PROXY}  # injected by real Linkerd
        settings = scenario.local_settings(cp.kubeconfig, "--identity", "no-sleep")
        app = await build(settings, RolloutOptions(restart_interval=1.0, injector_wait=FALLBACK))
        async with every_pod_admitted(kube, scenario.EMOJIVOTO) as admitted, running(app):
            await kube.request("POST", LINKERD_CONFIGS.path(), body=sample("edge_19.12.3.yaml"))

            async def waiting_for_injector() -> Obj | None:
                cond = await scenario.condition(kube, "edge-19.12.3", "DataPlaneUpToDate")
                return cond if cond.get("reason") == "WaitingForInjector" else None

            waiting = await eventually(waiting_for_injector, timeout=DELAY, what="waiting")
            # Asked per workload, in its own namespace (issue 58): each one named, with why.
            assert "the proxy injector does not inject it yet: " in waiting["message"], waiting
            for name in scenario.OPTED_IN:
                why = "proxy version edge-19.12.1 → edge-19.12.3"
                expected = f"deployment/{scenario.EMOJIVOTO}/{name}: {why}"
                assert expected in waiting["message"], waiting

            async def up_to_date() -> Obj | None:
                cond = await scenario.condition(kube, "edge-19.12.3", "DataPlaneUpToDate")
                return cond if cond.get("status") == "True" else None

            await eventually(up_to_date, timeout=120, what="data plane up to date")

    written = received_at(
        successful_writes(cp, "patch", "configmaps", "linkerd", CONTROLLER_AGENT)[-1]
    )
    projected = float(injector.projections()[-1]["projected_at"])
    restarts = successful_writes(cp, "patch", "deployments", scenario.EMOJIVOTO, CONTROLLER_AGENT)
    assert sorted(e["objectRef"]["name"] for e in restarts) == sorted(scenario.OPTED_IN)
    assert projected - written >= DELAY - 0.5  # the injector really got it late
    first = received_at(restarts[0])
    print(
        f"\nConfigMap written → injector's files updated: {projected - written:.2f}s; "
        f"→ first restart: {first - projected:.2f}s later; last restart "
        f"{received_at(restarts[-1]) - projected:.2f}s later"
    )
    assert first > projected, "a workload was restarted before the injector had the config"
    # Every pod admitted after the apply got the new proxy: one restarted early would show
    # the old one here (and the rollout would never have finished).
    old_uids = {p["metadata"]["uid"] for p in before}
    new_pods = [p for uid, p in admitted.items() if uid not in old_uids]
    assert len(new_pods) >= 2 * len(scenario.OPTED_IN)
    assert {scenario.readme_check(p) for p in new_pods} == {NEW_PROXY}


async def test_edge_26_8_3_injects_a_native_sidecar_from_its_own_install(
    own_control_plane: LocalControlPlane, own_kube: KubeClient
) -> None:
    cp, kube = own_control_plane, own_kube
    install = await asyncio.to_thread(render_install, "edge-26.8.3")
    values = yaml.safe_load(install.get("ConfigMap", "linkerd-config")["data"]["values"])
    bundle = install.get("ConfigMap", "linkerd-identity-trust-roots")["data"]["ca-bundle.crt"]
    await scenario.install_linkerd(kube, install)
    template = install.injector_webhook
    async with scenario.linkerd_injector(cp, "edge-26.8.3", webhook_template=template):
        namespace = {
            "metadata": {"name": "meshed", "annotations": {"linkerd.io/inject": "enabled"}}
        }
        await scenario.create(kube, NAMESPACES.path(), namespace)
        await scenario.wait_admits_pods(kube, "meshed", injected=True)
        started = time.monotonic()
        await scenario.create(
            kube, DEPLOYMENTS.path("meshed"), scenario.deployment("web", opted_in=True)
        )

        async def pods() -> list[Obj] | None:
            items: list[Obj] = (await kube.request("GET", PODS.path("meshed")))["items"]
            return items if len(items) == 2 else None

        created = await eventually(pods, timeout=60, what="the Deployment's pods")
        print(f"\nDeployment → 2 injected pods: {time.monotonic() - started:.2f}s")
        # kube-system is excluded by Linkerd's own namespaceSelector since 2.12.
        excluded = await scenario.dry_run_pod(kube, "kube-system", {"linkerd.io/inject": "enabled"})

    assert scenario.proxy_container(excluded) is None
    expected_image = f"{values['proxy']['image']['name']}:{values['linkerdVersion']}"
    sha = hashlib.sha256(bundle.encode()).hexdigest()
    for pod in created:
        init = {c["name"]: c for c in pod["spec"].get("initContainers") or []}
        assert "linkerd-proxy" in init, pod["spec"]  # a native sidecar, not in containers
        proxy = init["linkerd-proxy"]
        assert proxy["restartPolicy"] == "Always"
        assert "linkerd-proxy" not in {c["name"] for c in pod["spec"]["containers"]}
        assert proxy["image"] == expected_image
        env = {e["name"]: e.get("value") for e in proxy["env"]}
        # The injector appends filters of its own ("[{headers}]=off,...") to the level.
        assert env["LINKERD2_PROXY_LOG"].startswith(values["proxy"]["logLevel"] + ",")
        annotations = pod["metadata"]["annotations"]
        assert annotations["linkerd.io/proxy-version"] == values["linkerdVersion"]
        assert annotations["linkerd.io/trust-root-sha256"] == sha
        assert pod["spec"]["serviceAccountName"] == "default"


# -- a modern Linkerd end to end: the Helm values key and the trust roots -----------------

NS = "shop"
OPTED_IN = ("web", "api")
NOT_OPTED_IN = "batch"
NEW_VERSION = "edge-26.8.4"
ANCHOR = SECOND_TRUST_ANCHOR


def linkerd_config(spec: Obj) -> Obj:
    return {
        "apiVersion": "config.linkerd.io/v1alpha1",
        "kind": "LinkerdConfig",
        "metadata": {"name": "modern"},
        "spec": spec,
    }


async def apply(kube: KubeClient, obj: Obj) -> None:
    await kube.request(
        "PATCH",
        LINKERD_CONFIGS.path(name=obj["metadata"]["name"]),
        body=obj,
        content_type=APPLY_PATCH,
        params={"fieldManager": "user", "force": "true"},
    )


async def up_to_date(kube: KubeClient) -> Obj | None:
    cond = await scenario.condition(kube, "modern", "Ready")
    current = cond.get("status") == "True" and cond.get("observedGeneration") == cond["generation"]
    return cond if current else None


async def pods_of(kube: KubeClient, app: str) -> list[Obj]:
    return [
        p for p in await scenario.running_pods(kube, NS) if p["metadata"]["labels"]["app"] == app
    ]


def proxy(pod: Obj) -> Obj:
    for container in pod["spec"].get("initContainers") or []:
        if container["name"] == "linkerd-proxy":
            return dict(container)
    raise AssertionError(f"{pod['metadata']['name']} has no native-sidecar proxy")


def restarts(cp: LocalControlPlane) -> list[str]:
    writes = successful_writes(cp, "patch", "deployments", NS, CONTROLLER_AGENT)
    return sorted(e["objectRef"]["name"] for e in writes)


def configmap_writes(cp: LocalControlPlane) -> int:
    return sum(
        len(successful_writes(cp, verb, "configmaps", "linkerd", CONTROLLER_AGENT))
        for verb in ("patch", "create", "update")
    )


async def test_values_and_trust_roots_drive_the_real_injector(
    own_control_plane: LocalControlPlane, own_kube: KubeClient
) -> None:
    cp, kube = own_control_plane, own_kube
    install = await asyncio.to_thread(render_install, "edge-26.8.3")
    installed_cm = install.get("ConfigMap", "linkerd-config")
    installed = yaml.safe_load(installed_cm["data"]["values"])
    await scenario.install_crd(kube)
    await scenario.install_linkerd(kube, install)
    template = install.injector_webhook
    async with scenario.linkerd_injector(cp, "edge-26.8.3", webhook_template=template):
        before = await scenario.meshed_namespace(kube, NS, OPTED_IN, [NOT_OPTED_IN])
        assert {p["metadata"]["annotations"]["linkerd.io/proxy-version"] for p in before} == {
            "edge-26.8.3"
        }

        settings = scenario.local_settings(cp.kubeconfig, "--identity", "modern")
        app = await build(settings, RolloutOptions(restart_interval=0.5, injector_wait=600))
        async with running(app):
            # 1. Proxy version and log level, nothing else.
            small = linkerd_config({"proxy": {"proxyVersion": NEW_VERSION, "logLevel": "debug"}})
            await apply(kube, small)
            await eventually(lambda: up_to_date(kube), timeout=120, what="rolled out")
            await scenario.wait_settled(kube, NS, expected=6)
            cm = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
            values = yaml.safe_load(cm["data"]["values"])
            expected = copy.deepcopy(installed)
            expected["proxy"]["image"]["version"] = NEW_VERSION
            expected["proxy"]["logLevel"] = "debug"
            assert values == expected  # every other value kept, checked by parsing
            for key, value in installed_cm["data"].items():
                if key != "values":
                    assert cm["data"][key] == value  # other keys byte for byte
            assert restarts(cp) == sorted(OPTED_IN)  # once each
            wide = await asyncio.to_thread(
                subprocess.run,
                [str(cp.binary("kubectl")), f"--kubeconfig={cp.kubeconfig}", "get",
                 "linkerdconfig", "modern", "-o", "wide", "--no-headers"],
                capture_output=True, text=True, check=True, timeout=30,
            )  # fmt: skip
            # NAME CONFIGMAP READY AGE LINKERD FORMAT PROXY REASON
            columns = wide.stdout.split()
            assert columns[:3] == ["modern", "linkerd/linkerd-config", "True"], wide.stdout
            assert columns[4:] == [
                "edge-26.8.3", "values", NEW_VERSION, "Ready"
            ], wide.stdout  # fmt: skip
            for name in OPTED_IN:
                for pod in await pods_of(kube, name):
                    container = proxy(pod)
                    assert container["image"] == f"cr.l5d.io/linkerd/proxy:{NEW_VERSION}"
                    env = {e["name"]: e.get("value") for e in container["env"]}
                    assert env["LINKERD2_PROXY_LOG"].startswith("debug,")
                    assert pod["metadata"]["annotations"]["linkerd.io/proxy-version"] == NEW_VERSION
            untouched = {
                p["metadata"]["uid"]
                for p in before
                if p["metadata"]["labels"]["app"] == NOT_OPTED_IN
            }
            assert {p["metadata"]["uid"] for p in await pods_of(kube, NOT_OPTED_IN)} == untouched

            # 2. A new trust anchor, beside the install's (the rotation's first step: NOT_OPTED_IN
            # still runs the install's bundle, and a bundle without its anchor would be held).
            installed_bundle = install.get("ConfigMap", "linkerd-identity-trust-roots")["data"][
                "ca-bundle.crt"
            ]
            both = f"{installed_bundle.strip()}\n{ANCHOR.strip()}"
            rotated = copy.deepcopy(small)
            rotated["spec"]["global"] = {"identityContext": {"trustAnchorsPEM": both}}
            await apply(kube, rotated)
            await eventually(lambda: up_to_date(kube), timeout=120, what="rotated")
            await scenario.wait_settled(kube, NS, expected=6)
            roots = await kube.request(
                "GET", CONFIGMAPS.path("linkerd", "linkerd-identity-trust-roots")
            )
            assert roots["data"]["ca-bundle.crt"] == both
            sha = hashlib.sha256(both.encode()).hexdigest()
            assert restarts(cp) == sorted([*OPTED_IN, *OPTED_IN])  # once more each
            for name in OPTED_IN:
                for pod in await pods_of(kube, name):
                    assert pod["metadata"]["annotations"]["linkerd.io/trust-root-sha256"] == sha
            assert {p["metadata"]["uid"] for p in await pods_of(kube, NOT_OPTED_IN)} == untouched
            status = (await kube.request("GET", LINKERD_CONFIGS.path(name="modern")))["status"]
            assert status["trustAnchorSource"] == "Spec"

            # 3. The same LinkerdConfig again: a reconcile, and no write.
            writes = configmap_writes(cp)
            reconciled = (
                app.registry.get_sample_value(
                    "controller_runtime_reconcile_total",
                    {"controller": "linkerdconfig", "result": "success"},
                )
                or 0.0
            )
            await apply(kube, {**rotated, "metadata": {"name": "modern", "labels": {"again": "1"}}})

            async def reconciled_again() -> bool:
                now = app.registry.get_sample_value(
                    "controller_runtime_reconcile_total",
                    {"controller": "linkerdconfig", "result": "success"},
                )
                return (now or 0.0) > reconciled

            await eventually(reconciled_again, timeout=30, what="a reconcile of the re-apply")
            assert configmap_writes(cp) == writes
            assert restarts(cp) == sorted([*OPTED_IN, *OPTED_IN])
