"""How much of a response the API client holds at once (``client.READ_BUFFER``): a LIST page
arrives gzipped, and a page of like objects inflates many times over."""

from __future__ import annotations

import gzip
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from linkerd_config.kube import protobuf_wire
from linkerd_config.kube.client import READ_BUFFER, KubeClient
from linkerd_config.kube.kubeconfig import ClusterAccess
from linkerd_config.kube.resource import PODS
from linkerd_config.linkerd import mesh

META = "k8s.io.apimachinery.pkg.apis.meta.v1"


def pod_list(count: int) -> bytes:
    """A metadata-only page of ``count`` like pods, as the API server frames it."""
    listed = protobuf_wire.types().message(f"{META}.PartialObjectMetadataList")()
    listed.metadata.resourceVersion = "7"
    for i in range(count):
        meta = listed.items.add().metadata
        meta.name, meta.namespace = f"web-{i:06d}", "shop"
        meta.labels[mesh.RECONCILE_LABEL] = mesh.RECONCILE_AUTO
        meta.annotations["kubectl.kubernetes.io/last-applied-configuration"] = "x" * 900
    unknown = protobuf_wire.types().message("k8s.io.apimachinery.pkg.runtime.Unknown")()
    unknown.typeMeta.apiVersion = "meta.k8s.io/v1"
    unknown.typeMeta.kind = "PartialObjectMetadataList"
    unknown.raw = listed.SerializeToString()
    return protobuf_wire.MAGIC + unknown.SerializeToString()


async def test_a_gzipped_page_is_read_a_buffer_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    body = pod_list(3000)
    packed = gzip.compress(body)
    assert len(body) > 40 * len(packed) and len(body) > 16 * READ_BUFFER  # inflates a lot

    async def page(_: web.Request) -> web.Response:
        return web.Response(
            body=packed,
            headers={"Content-Type": protobuf_wire.PROTOBUF, "Content-Encoding": "gzip"},
        )

    fed: list[int] = []
    feed = protobuf_wire.ListReader.feed

    def recording(self: Any, chunk: bytes) -> None:
        fed.append(len(chunk))
        feed(self, chunk)

    monkeypatch.setattr(protobuf_wire.ListReader, "feed", recording)
    app = web.Application()
    app.router.add_get(PODS.path(), page)
    async with TestServer(app) as server:

        async def bearer() -> str:
            return "Bearer controller"

        access = ClusterAccess(str(server.make_url("")).rstrip("/"), False, bearer, "test")
        async with KubeClient(access) as client:
            listed = await client.list_page(
                PODS.path(), params={}, metadata_only=True, fields=None, timeout=10
            )
    assert len(listed["items"]) == 3000
    assert sum(fed) == len(body)
    # Read as it arrives: at most what is buffered before reading stops (twice the buffer)
    # and one inflation more; with aiohttp's default buffer, 768 KiB.
    assert max(fed) <= 3 * READ_BUFFER, max(fed)
