"""Linkerd's two configuration formats as an integration test drives them: each installed
as its release installs it, with its real proxy injector, a LinkerdConfig spec for a proxy
version, and the proxy version the written ``linkerd-config`` says.

* ``legacy``: Linkerd edge-19.12.1's own ``linkerd-config`` (protobuf-JSON ``global`` and
  ``proxy``) with edge-19.12.3's injector;
* ``values``: edge-26.8.3's ``linkerd install`` output (Helm ``values``, the trust roots)
  with its injector.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import yaml

from devcluster.cluster import LocalControlPlane
from devcluster.linkerd_install import render_install
from devcluster.proxy_injector import ProxyInjector
from linkerd_config.kube.client import KubeClient
from tests.support import scenario
from tests.support.samples import sample

Json = dict[str, Any]


@dataclass(frozen=True)
class Format:
    """One of Linkerd's two configuration formats."""

    name: str
    good: str
    """A proxy version a test rolls out and completes."""
    broken: str
    """Another, which a test makes fail."""
    spec: Callable[[str, Json], Json]
    """A LinkerdConfig spec for a proxy version, with a ``rollout`` section."""
    written: Callable[[Json], str]
    """The proxy version a ``linkerd-config`` ConfigMap says."""


def _legacy_spec(version: str, rollout: Json) -> Json:
    spec: Json = sample("edge_19.12.3.yaml")["spec"]
    spec["proxy"]["proxyVersion"] = version
    return {**spec, "rollout": rollout}


def _legacy_written(cm: Json) -> str:
    return str(json.loads(cm["data"]["proxy"])["proxyVersion"])


def _values_spec(version: str, rollout: Json) -> Json:
    return {"proxy": {"proxyVersion": version}, "rollout": rollout}


def _values_written(cm: Json) -> str:
    return str(yaml.safe_load(cm["data"]["values"])["proxy"]["image"]["version"])


LEGACY = Format("legacy", "edge-19.12.3", "edge-19.12.9", _legacy_spec, _legacy_written)
VALUES = Format("values", "edge-26.8.5", "edge-26.8.9", _values_spec, _values_written)
FORMATS = (LEGACY, VALUES)
IDS = [f.name for f in FORMATS]


@contextlib.asynccontextmanager
async def installed(
    cp: LocalControlPlane, kube: KubeClient, fmt: Format, **injector_options: Any
) -> AsyncIterator[ProxyInjector]:
    """The CRD and the format's Linkerd installed, its real injector serving while the block
    runs (``injector_options``: ``ProxyInjector``'s)."""
    await scenario.install_crd(kube)
    if fmt is LEGACY:
        await scenario.install_linkerd_edge_19_12_1(kube)
        injector = scenario.linkerd_injector(cp, **injector_options)
    else:
        install = await asyncio.to_thread(render_install, "edge-26.8.3")
        await scenario.install_linkerd(kube, install)
        injector = scenario.linkerd_injector(
            cp, "edge-26.8.3", webhook_template=install.injector_webhook, **injector_options
        )
    async with injector as running:
        yield running
