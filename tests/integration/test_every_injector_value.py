"""One v1alpha2 LinkerdConfig stating every value edge-26.8.3's injector reads for a pod
(tests/fixtures/injector_values_edge-26.8.3.json), at once, on Linkerd edge-26.8.3's own
install: the controller writes them all, Linkerd's own type reads the result strictly
(``l5dcharts.Values`` with unknown keys and wrong types refused, built from Linkerd's module),
nothing the spec leaves out moves, and Linkerd's real injector builds pods that carry them.
"""

from __future__ import annotations

import asyncio
import copy
import subprocess
from typing import Any

import yaml

from devcluster.cluster import LocalControlPlane
from devcluster.linkerd_binaries import ensure_linkerd
from devcluster.linkerd_install import render_install
from linkerd_config.app import build, running
from linkerd_config.kube.client import APPLY_PATCH, KubeClient
from linkerd_config.kube.resource import CONFIGMAPS, PODS
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.spec.crd import LINKERD_CONFIGS
from tests.support import scenario
from tests.support.injector_values import INJECTOR_VALUES, every_injector_value
from tests.support.waiting import eventually

Obj = dict[str, Any]
NS = "shop"
OPTED_IN = ("web", "api")
MODERN = "edge-26.8.3"


def at(root: Any, path: str) -> Any:
    for key in path.split("."):
        root = root.get(key) if isinstance(root, dict) else None
    return root


def without(values: Obj, paths: list[str]) -> Obj:
    """``values`` with each of ``paths`` removed, and each object above them that holds
    nothing else (empty, or null as an install leaves ``proxy.capabilities``) removed too:
    what remains is what the spec does not state."""
    values = copy.deepcopy(values)
    for path in paths:
        keys = path.split(".")
        for depth in range(len(keys), 0, -1):
            parent = values
            for key in keys[: depth - 1]:
                parent = parent.get(key) if isinstance(parent, dict) else None
            if not isinstance(parent, dict):
                continue
            if depth == len(keys) or parent.get(keys[depth - 1]) in ({}, None):
                parent.pop(keys[depth - 1], None)
    return values


def the_spec(installed_values: Obj) -> Obj:
    """Every fixture value, but kept within this cluster: its release, its trust anchor (a
    new one is a rotation, another test's subject)."""
    obj = every_injector_value()
    obj["metadata"] = {"name": "every-value"}
    values = obj["spec"]["values"]
    values["linkerdVersion"] = MODERN
    values["identityTrustAnchorsPEM"] = installed_values["identityTrustAnchorsPEM"]
    return obj


def proxy_container(pod: Obj) -> tuple[str, Obj]:
    for where in ("initContainers", "containers"):
        for container in pod["spec"].get(where) or []:
            if container["name"] == "linkerd-proxy":
                return where, container
    raise AssertionError(f"{pod['metadata']['name']} has no linkerd-proxy")


async def test_every_value_the_injector_reads_at_once(
    own_control_plane: LocalControlPlane, own_kube: KubeClient
) -> None:
    cp, kube = own_control_plane, own_kube
    install = await asyncio.to_thread(render_install, MODERN)
    installed = yaml.safe_load(install.get("ConfigMap", "linkerd-config")["data"]["values"])
    strict = await asyncio.to_thread(ensure_linkerd, MODERN, "strict-values")
    await scenario.install_crd(kube)
    await scenario.install_linkerd(kube, install)
    obj = the_spec(installed)
    stated = {e["path"]: at(obj["spec"]["values"], e["path"]) for e in INJECTOR_VALUES["paths"]}
    async with scenario.linkerd_injector(cp, MODERN, webhook_template=install.injector_webhook):
        await scenario.meshed_namespace(kube, NS, OPTED_IN, [])
        settings = scenario.local_settings(cp.kubeconfig, "--identity", "every-value")
        app = await build(settings, RolloutOptions(restart_interval=0.5, injector_wait=600))
        async with running(app):
            await kube.request(
                "PATCH",
                LINKERD_CONFIGS.path(name="every-value"),
                body=obj,
                content_type=APPLY_PATCH,
                params={"fieldManager": "user", "force": "true"},
            )

            async def up_to_date() -> Obj | None:
                cond = await scenario.condition(kube, "every-value", "DataPlaneUpToDate")
                return cond if cond.get("status") == "True" else None

            try:
                await eventually(up_to_date, timeout=180, what="every value rolled out")
            except AssertionError:
                status = await kube.request("GET", LINKERD_CONFIGS.path(name="every-value"))
                pods = (await kube.request("GET", PODS.path(NS)))["items"]
                why = {
                    p["metadata"]["name"]: [
                        c.get("message") for c in p["status"].get("conditions") or []
                    ]
                    for p in pods
                }
                raise AssertionError(f"{status.get('status')}; pods: {why}") from None
            await scenario.wait_settled(kube, NS, expected=4)
            cm = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
            text = cm["data"]["values"]
            values = yaml.safe_load(text)

            # Every stated value written as stated; nothing unstated moved.
            assert {p: at(values, p) for p in stated} == stated
            assert without(values, list(stated)) == without(installed, list(stated))

            # Linkerd's own type reads it, strictly.
            path = cp.workdir / "every-value.yaml"
            path.write_text(text)
            done = await asyncio.to_thread(
                subprocess.run,
                [str(strict), str(path)],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert done.returncode == 0, done.stderr

            # The real injector's pods carry them.
            pods = [p for p in await scenario.running_pods(kube, NS)]
            assert pods
            for pod in pods:
                where, proxy = proxy_container(pod)
                # nativeSidecar false: an ordinary container, not a native sidecar.
                assert (where == "initContainers") is stated["proxy.nativeSidecar"]
                env = {e["name"]: e.get("value") for e in proxy.get("env") or []}
                assert (
                    env["LINKERD2_PROXY_INBOUND_DEFAULT_POLICY"]
                    == (stated["proxy.defaultInboundPolicy"])
                )
                assert env["LINKERD2_PROXY_ACCESS_LOG"] == stated["proxy.accessLog"]
                # await false: no linkerd-await hook holding the application back.
                assert ("postStart" in (proxy.get("lifecycle") or {})) is stated["proxy.await"]
                assert proxy["image"] == (
                    f"{stated['proxy.image.name']}:{stated['proxy.image.version']}"
                )
                annotations = pod["metadata"]["annotations"]
                assert annotations["linkerd.io/proxy-version"] == stated["proxy.image.version"]
