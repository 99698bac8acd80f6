"""STAND-IN for Linkerd's proxy injector, for tests and the demo only (no real Linkerd here).

Like Linkerd's injector it is a mutating admission webhook on pod CREATE that reads the
``linkerd-config`` ConfigMap on every request, and for pods whose namespace or own
annotations say ``linkerd.io/inject: enabled`` adds a ``linkerd-proxy`` container of the
configured image and version plus the ``linkerd.io/proxy-version`` annotation. It has no side
effects, so it declares ``sideEffects: None`` and answers dry-run requests too, which is what
lets the controller confirm the injector's version with a server-side dry-run create.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson

from linkerd_config.kube.admission import (
    AdmissionRequest,
    AdmissionResponse,
    AdmissionServer,
    ReloadingCertificate,
)
from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.resource import CONFIGMAPS, MUTATING_WEBHOOK_CONFIGURATIONS, NAMESPACES

INJECT_ANNOTATION = "linkerd.io/inject"
VERSION_ANNOTATION = "linkerd.io/proxy-version"
PATH = "/inject-pods"
WEBHOOK_NAME = "standin-proxy-injector.linkerd.io"


class StandInInjector:
    def __init__(
        self, kube: KubeClient, namespace: str = "linkerd", configmap: str = "linkerd-config"
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.configmap = configmap
        self.injected = 0

    async def _proxy(self) -> dict[str, Any] | None:
        try:
            cm = await self.kube.request("GET", CONFIGMAPS.path(self.namespace, self.configmap))
        except ApiError as exc:
            if exc.not_found:
                return None
            raise
        proxy: dict[str, Any] = orjson.loads(cm["data"]["proxy"])
        return proxy

    async def _wants_injection(self, review: AdmissionRequest, pod: dict[str, Any]) -> bool:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        if annotations.get(INJECT_ANNOTATION) == "disabled":
            return False
        if annotations.get(INJECT_ANNOTATION) == "enabled":
            return True
        ns = await self.kube.request("GET", NAMESPACES.path(name=review.namespace))
        ns_annotations = ns["metadata"].get("annotations") or {}
        return bool(ns_annotations.get(INJECT_ANNOTATION) == "enabled")

    async def admit(self, review: AdmissionRequest) -> AdmissionResponse:
        pod = review.object or {}
        containers = (pod.get("spec") or {}).get("containers") or []
        if any(c.get("name") == "linkerd-proxy" for c in containers):
            return AdmissionResponse()
        if not await self._wants_injection(review, pod):
            return AdmissionResponse()
        proxy = await self._proxy()
        if proxy is None:
            return AdmissionResponse(warnings=("linkerd-config not found; not injected",))
        version = proxy["proxyVersion"]
        image = f"{proxy['proxyImage']['imageName']}:{version}"
        patch: list[dict[str, Any]] = []
        if not (pod.get("metadata") or {}).get("annotations"):
            patch.append({"op": "add", "path": "/metadata/annotations", "value": {}})
        patch.append(
            {
                "op": "add",
                "path": "/metadata/annotations/linkerd.io~1proxy-version",
                "value": version,
            }
        )
        patch.append(
            {
                "op": "add",
                "path": "/spec/containers/-",
                "value": {
                    "name": "linkerd-proxy",
                    "image": image,
                    "imagePullPolicy": proxy["proxyImage"].get("pullPolicy", "IfNotPresent"),
                    "env": [{"name": "LINKERD2_PROXY_LOG", "value": proxy["logLevel"]["level"]}],
                },
            }
        )
        if not review.dry_run:
            self.injected += 1
        return AdmissionResponse(patch=patch)


def webhook_configuration(url: str, ca_pem: bytes) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "standin-linkerd-proxy-injector"},
        "webhooks": [
            {
                "name": WEBHOOK_NAME,
                "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ],
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "config.linkerd.io/admission-webhooks",
                            "operator": "NotIn",
                            "values": ["disabled"],
                        }
                    ]
                },
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }
        ],
    }


@contextlib.asynccontextmanager
async def running_injector(
    kube: KubeClient, certificate: ReloadingCertificate, ca_pem: bytes
) -> AsyncIterator[StandInInjector]:
    """Serve the stand-in on a free loopback port and register it; remove both on exit."""
    injector = StandInInjector(kube)
    server = AdmissionServer("127.0.0.1", 0, certificate)
    server.add(PATH, injector.admit)
    task = asyncio.create_task(server.run(), name="standin-injector")
    path = MUTATING_WEBHOOK_CONFIGURATIONS.path()
    try:
        await asyncio.wait_for(server.started.wait(), 10)
        config = webhook_configuration(f"https://127.0.0.1:{server.bound_port}{PATH}", ca_pem)
        with contextlib.suppress(ApiError):
            await kube.request("DELETE", f"{path}/{config['metadata']['name']}", fenced=False)
        await kube.request("POST", path, body=config, fenced=False)
        yield injector
    finally:
        with contextlib.suppress(ApiError):
            await kube.request("DELETE", f"{path}/standin-linkerd-proxy-injector", fenced=False)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
