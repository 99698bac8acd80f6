"""A modern Linkerd end to end: edge-26.8.3's real proxy injector, configured from what its own
``linkerd install --ignore-cluster`` rendered, and the controller writing the Helm ``values``
key and the trust-roots ConfigMap.

One story on one control plane (Linkerd's names exist once per cluster):

1. a LinkerdConfig as small as a user would write (proxy version and log level) changes just
   those two values, every other key and value kept; each opted-in Deployment is restarted
   once, and its new pods carry what the injector now injects;
2. a new trust anchor goes to ``ca-bundle.crt``; the pods whose ``trust-root-sha256`` no
   longer matches are restarted, and come back stamped with the new bundle;
3. applying the same LinkerdConfig again writes nothing.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import yaml

from linkerd_config.app import build, running
from linkerd_config.devcluster.cluster import ControlPlaneOptions, LocalControlPlane
from linkerd_config.devcluster.linkerd_install import render_install
from linkerd_config.kube.client import APPLY_PATCH, KubeClient, load_access
from linkerd_config.kube.resource import CONFIGMAPS, DEPLOYMENTS, NAMESPACES
from linkerd_config.linkerd.linkerdconfig_resource import LINKERD_CONFIGS
from linkerd_config.linkerd.rollout_executor import RolloutOptions
from tests.support import scenario
from tests.support.audit import successful_writes
from tests.support.samples import SAMPLES
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
NS = "shop"
OPTED_IN = ("web", "api")
NOT_OPTED_IN = "batch"
NEW_VERSION = "edge-26.8.4"
CONTROLLER = "linkerd-config/"
ANCHOR = (SAMPLES / "second_trust_anchor.pem").read_text()


@pytest.fixture
def cp() -> Iterator[LocalControlPlane]:
    with LocalControlPlane(ControlPlaneOptions(workloads=True)) as plane:
        yield plane


@pytest.fixture
async def kube(cp: LocalControlPlane) -> AsyncIterator[KubeClient]:
    access = await load_access(str(cp.kubeconfig))
    async with KubeClient(access, user_agent="helm-values-tests") as client:
        yield client


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
    writes = successful_writes(cp, "patch", "deployments", NS, CONTROLLER)
    return sorted(e["objectRef"]["name"] for e in writes)


def configmap_writes(cp: LocalControlPlane) -> int:
    return sum(
        len(successful_writes(cp, verb, "configmaps", "linkerd", CONTROLLER))
        for verb in ("patch", "create", "update")
    )


async def test_values_and_trust_roots_drive_the_real_injector(
    cp: LocalControlPlane, kube: KubeClient
) -> None:
    install = await asyncio.to_thread(render_install, "edge-26.8.3")
    installed_cm = install.get("ConfigMap", "linkerd-config")
    installed = yaml.safe_load(installed_cm["data"]["values"])
    await scenario.install_crd(kube)
    await scenario.create(kube, NAMESPACES.path(), install.namespace)
    for configmap in install.configmaps:
        await scenario.create(kube, CONFIGMAPS.path("linkerd"), configmap)
    template = install.injector_webhook
    async with scenario.linkerd_injector(cp, "edge-26.8.3", webhook_template=template):
        meshed = {"metadata": {"name": NS, "annotations": {"linkerd.io/inject": "enabled"}}}
        await scenario.create(kube, NAMESPACES.path(), meshed)
        await scenario.wait_admits_pods(kube, NS, injected=True)
        for name in OPTED_IN:
            await scenario.create(kube, DEPLOYMENTS.path(NS), scenario.deployment(name, True))
        await scenario.create(kube, DEPLOYMENTS.path(NS), scenario.deployment(NOT_OPTED_IN, False))
        before = await scenario.wait_settled(kube, NS, expected=6)
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

            # 2. A new trust anchor.
            rotated = copy.deepcopy(small)
            rotated["spec"]["global"] = {"identityContext": {"trustAnchorsPEM": ANCHOR}}
            await apply(kube, rotated)
            await eventually(lambda: up_to_date(kube), timeout=120, what="rotated")
            await scenario.wait_settled(kube, NS, expected=6)
            roots = await kube.request(
                "GET", CONFIGMAPS.path("linkerd", "linkerd-identity-trust-roots")
            )
            assert roots["data"]["ca-bundle.crt"] == ANCHOR.strip()
            sha = hashlib.sha256(ANCHOR.strip().encode()).hexdigest()
            assert restarts(cp) == sorted([*OPTED_IN, *OPTED_IN])  # once more each
            for name in OPTED_IN:
                for pod in await pods_of(kube, name):
                    assert pod["metadata"]["annotations"]["linkerd.io/trust-root-sha256"] == sha
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
