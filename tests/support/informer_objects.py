"""The tests' own objects on a local control plane, for the informer integration tests: a
fresh namespace (once KCM, if it runs, has published its root CA ConfigMap there) and the body
of a ConfigMap to create in it."""

from __future__ import annotations

import uuid
from typing import Any

from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.resource import CONFIGMAPS
from tests.support.waiting import eventually

Json = dict[str, Any]

ROOT_CA = "kube-root-ca.crt"
"""The ConfigMap KCM publishes in every namespace, as in any cluster: not the tests'."""


async def make_namespace(kube: KubeClient, prefix: str, with_kcm: bool = True) -> str:
    """A fresh namespace, returned once KCM (if it runs) has published its root CA ConfigMap,
    so that ConfigMap is part of every informer's first LIST, never an event during a test."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    await kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": name}})
    if not with_kcm:
        return name

    async def published() -> bool:
        await kube.request("GET", CONFIGMAPS.path(name, ROOT_CA))
        return True

    await eventually(published, timeout=30, what=f"{ROOT_CA} in {name}")
    return name


def configmap(name: str, labels: dict[str, str] | None = None, **data: str) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}},
        "data": data,
    }
