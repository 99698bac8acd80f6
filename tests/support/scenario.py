"""The original project's README scenario, set up on a real control plane.

Linkerd edge-19.12.1 "installed" (its real linkerd-config ConfigMap), a stand-in proxy
injector, a kube-system-like namespace labelled admission-webhooks=disabled, and
emojivoto-like Deployments, some opted in to automatic restarts. Shared by the integration
tests and ``make demo``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.resource import CONFIGMAPS, CRDS, DEPLOYMENTS, NAMESPACES, PODS
from linkerd_config.linkerd import rollout
from linkerd_config.linkerd.resource import LINKERD_CONFIGS, crd
from linkerd_config.settings import Settings, parse
from tests.support.samples import install_configmap
from tests.support.waiting import eventually

EMOJIVOTO = "emojivoto"
DISABLED_NS = "kube-system-like"
OPTED_IN = ("web", "emoji", "voting")
NOT_OPTED_IN = "vote-bot"


async def create(kube: KubeClient, path: str, body: dict[str, Any]) -> None:
    try:
        await kube.request("POST", path, body=body, fenced=False)
    except ApiError as exc:
        if not exc.conflict:
            raise


async def install_crd(kube: KubeClient) -> None:
    await create(kube, CRDS.path(), crd())

    async def serving() -> bool:
        await kube.request("GET", LINKERD_CONFIGS.path())
        return True

    await eventually(serving, timeout=60, what="LinkerdConfig API served")


async def install_linkerd_edge_19_12_1(kube: KubeClient) -> dict[str, Any]:
    await create(kube, NAMESPACES.path(), {"metadata": {"name": "linkerd"}})
    cm = install_configmap()
    await create(kube, CONFIGMAPS.path("linkerd"), cm)
    return cm


def deployment(name: str, opted_in: bool, replicas: int = 2) -> dict[str, Any]:
    labels = {"app": name}
    pod_labels = dict(labels)
    if opted_in:
        pod_labels[rollout.RECONCILE_LABEL] = rollout.RECONCILE_AUTO
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "containers": [{"name": name, "image": f"buoyantio/emojivoto-{name}:v8"}],
                    "terminationGracePeriodSeconds": 0,
                },
            },
        },
    }


async def install_workloads(kube: KubeClient) -> None:
    await create(
        kube,
        NAMESPACES.path(),
        {"metadata": {"name": EMOJIVOTO, "annotations": {"linkerd.io/inject": "enabled"}}},
    )
    await create(
        kube,
        NAMESPACES.path(),
        {
            "metadata": {
                "name": DISABLED_NS,
                "labels": {rollout.WEBHOOKS_LABEL: "disabled"},
                "annotations": {"linkerd.io/inject": "enabled"},
            }
        },
    )
    for name in OPTED_IN:
        await create(kube, DEPLOYMENTS.path(EMOJIVOTO), deployment(name, opted_in=True))
    await create(kube, DEPLOYMENTS.path(EMOJIVOTO), deployment(NOT_OPTED_IN, opted_in=False))
    await create(kube, DEPLOYMENTS.path(DISABLED_NS), deployment("coredns-like", opted_in=True))


async def running_pods(kube: KubeClient, namespace: str) -> list[dict[str, Any]]:
    pods = (await kube.request("GET", PODS.path(namespace)))["items"]
    return [
        p
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def proxy_versions(pods: list[dict[str, Any]]) -> dict[str, str | None]:
    return {p["metadata"]["name"]: rollout.proxy_version(p) for p in pods}


async def wait_settled(
    kube: KubeClient, namespace: str, expected: int, timeout: float = 120
) -> list[dict[str, Any]]:
    """Until exactly ``expected`` pods run (old ones of a rollout are gone)."""

    async def settled() -> list[dict[str, Any]] | None:
        all_pods = (await kube.request("GET", PODS.path(namespace)))["items"]
        running = await running_pods(kube, namespace)
        return running if len(running) == expected == len(all_pods) else None

    return await eventually(
        settled, timeout=timeout, what=f"{expected} pods settled in {namespace}"
    )


def local_settings(kubeconfig: Path, *extra: str) -> Settings:
    """``linkerd-config run`` settings for an in-process controller on loopback.

    Metrics and probes on free ports, webhooks off unless ``extra`` says otherwise (a later
    flag wins), and no environment read, so a developer's shell cannot change a test.
    """
    return parse(
        [
            "--kubeconfig",
            str(kubeconfig),
            "--metrics-bind-address",
            "127.0.0.1:0",
            "--health-probe-bind-address",
            "127.0.0.1:0",
            "--enable-webhooks",
            "false",
            *extra,
        ],
        env={},
    )
