"""How much of a response the API client holds at once (``client.READ_BUFFER``): a LIST page
arrives gzipped, and a page of like objects inflates many times over."""

from __future__ import annotations

import gzip
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from linkerd_config.kube import client as client_module
from linkerd_config.kube import protobuf_wire
from linkerd_config.kube.client import READ_BUFFER, ApiError, KubeClient
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


async def test_a_429_whose_status_says_when_is_retried_as_client_go_retries_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 61, finding 9: right after an install, ``plan`` gave up on ``429
    TooManyRequests: storage is (re)initializing``. The delay may be in the Status alone
    (``details.retryAfterSeconds``), as apimachinery's ``SuggestsClientDelay`` reads it; it
    is retried up to client-go's ten attempts. An answer that says no delay is not."""
    monkeypatch.setattr(client_module, "_MAX_RETRY_AFTER_SECONDS", 0.01)  # the test's pace
    asked: list[str] = []

    async def listing(request: web.Request) -> web.Response:
        asked.append(request.path)
        if request.path == "/never" or len(asked) < 10:
            details = {} if request.path == "/never" else {"retryAfterSeconds": 1}
            status = {"kind": "Status", "code": 429, "reason": "TooManyRequests",
                      "message": "storage is (re)initializing", "details": details}  # fmt: skip
            return web.json_response(status, status=429)
        return web.json_response({"kind": "List", "items": []})

    app = web.Application()
    app.router.add_get("/ready", listing)
    app.router.add_get("/never", listing)
    async with TestServer(app) as server:

        async def bearer() -> str | None:
            return None

        access = ClusterAccess(str(server.make_url("")).rstrip("/"), False, bearer, "test")
        async with KubeClient(access) as kube:
            assert (await kube.request("GET", "/ready"))["kind"] == "List"
            assert len(asked) == 10
            with pytest.raises(ApiError) as refused:
                await kube.request("GET", "/never")
            assert refused.value.status == 429 and len(asked) == 11
