"""The controller's admission webhooks in effect on a local control plane: a serving pair for
127.0.0.1, the flags that serve them from a controller on loopback, and our webhook
configurations registered with the API server (and removed after: a Fail-policy webhook must
not outlive its server)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from devcluster.cluster import LocalControlPlane, free_port
from linkerd_config.app import App
from linkerd_config.kube.certs import write_serving_pair
from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.linkerd.admission.webhooks import webhook_configurations
from tests.support import formats, scenario
from tests.support.waiting import eventually
from tests.support.webhook_probe import webhook_in_effect


@contextlib.asynccontextmanager
async def registered(kube: KubeClient, ca_pem: bytes, port: int) -> AsyncIterator[None]:
    """Our webhook configurations, calling ``https://127.0.0.1:port``, while the block runs."""
    paths = []
    for config in webhook_configurations(ca_pem, f"https://127.0.0.1:{port}"):
        kind = config["kind"].lower() + "s"
        path = f"/apis/admissionregistration.k8s.io/v1/{kind}"
        await scenario.create(kube, path, config)
        paths.append(f"{path}/{config['metadata']['name']}")
    try:
        yield
    finally:
        for path in paths:
            with contextlib.suppress(ApiError):
                await kube.request("DELETE", path, fenced=False)


def serving(certs: Path) -> tuple[tuple[str, ...], bytes, int]:
    """A serving pair for 127.0.0.1 written to ``certs``: the flags that make a controller
    serve the webhooks with it on a free port, its CA, and the port."""
    ca_pem = write_serving_pair(certs, ["localhost"], ["127.0.0.1"])
    port = free_port()
    flags = (
        "--enable-webhooks", "true",
        "--webhook-cert-dir", str(certs),
        "--webhook-bind-address", f"127.0.0.1:{port}",
    )  # fmt: skip
    return flags, ca_pem, port


@contextlib.asynccontextmanager
async def in_effect(kube: KubeClient, ca_pem: bytes, port: int) -> AsyncIterator[None]:
    """``registered``, once the API server calls them (a controller serving on ``port``)."""
    async with registered(kube, ca_pem, port):
        await eventually(lambda: webhook_in_effect(kube), timeout=60, what="webhooks in effect")
        yield


FORMAT_CASES = [
    pytest.param(fmt, webhooks, id=f"{fmt.name}-webhooks-{'on' if webhooks else 'off'}")
    for fmt in formats.FORMATS
    for webhooks in (False, True)
]
"""``(fmt, webhooks)``: every format, with the webhooks off and on."""


@contextlib.asynccontextmanager
async def controller(
    cp: LocalControlPlane,
    kube: KubeClient,
    certs: Path,
    webhooks: bool,
    identity: str,
    **options: Any,
) -> AsyncIterator[App]:
    """The controller in this process, its admission webhooks in effect (served with a pair
    written to ``certs``) or not; ``options``: its rollout's (``scenario.controller``)."""
    if not webhooks:
        async with scenario.controller(cp, identity, **options) as app:
            yield app
        return
    flags, ca_pem, port = serving(certs)
    async with (
        scenario.controller(cp, identity, *flags, **options) as app,
        in_effect(kube, ca_pem, port),
    ):
        yield app
