"""Kubernetes' protobuf against the real API server: what the decoder makes of it is what the
server's JSON says, object for object and event for event; the informers' caches are the same
whichever way they were filled (protobuf streamed, protobuf paged, JSON); and a proxy that
refuses protobuf, or streaming lists, costs nothing but a warning."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from structlog.testing import capture_logs

from devcluster.cluster import LocalControlPlane
from linkerd_config.kube import protobuf_wire as pw
from linkerd_config.kube.client import APPLICATION_JSON, MERGE_PATCH, KubeClient
from linkerd_config.kube.informer import Informer
from linkerd_config.kube.kubeconfig import ClusterAccess, load_access
from linkerd_config.kube.resource import (
    CONFIGMAPS,
    DAEMONSETS,
    DEPLOYMENTS,
    LEASES,
    NAMESPACES,
    PODS,
    REPLICASETS,
    STATEFULSETS,
    ApiResource,
)
from linkerd_config.kube.watch import WatchStream
from linkerd_config.linkerd.caches import LinkerdCaches
from linkerd_config.linkerd.mesh import RECONCILE_AUTO, RECONCILE_LABEL
from tests.support import scenario
from tests.support.waiting import eventually

Json = dict[str, Any]
AS_LIST = ";as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
AS_OBJECT = ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


async def fresh_namespace(kube: KubeClient) -> str:
    name = f"wire-{uuid.uuid4().hex[:6]}"
    await kube.request(
        "POST", NAMESPACES.path(), body={"metadata": {"name": name, "labels": {"team": "wire"}}}
    )
    return name


def pod(name: str, **meta: Any) -> Json:
    return {
        "metadata": {
            "name": name,
            "labels": {RECONCILE_LABEL: RECONCILE_AUTO, "app": name},
            "annotations": {"linkerd.io/proxy-version": "edge-26.8.3", "note": "\u00e9\u2028x"},
            **meta,
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "nginx:1",
                    "ports": [{"containerPort": 80, "name": "http"}],
                    "resources": {"limits": {"cpu": "250m", "memory": "64Mi"}},
                    "readinessProbe": {"httpGet": {"path": "/", "port": "http"}},
                    "env": [
                        {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
                    ],
                }
            ],
            "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "1Gi"}}],
            "nodeName": "no-such-node",
            "terminationGracePeriodSeconds": 0,
        },
    }


async def populate(kube: KubeClient, ns: str) -> None:
    """One object of every built-in kind the controller caches, with the fields JSON writes
    in unusual ways: quantities, int-or-strings, times, bytes, pointers set to zero; and
    the LinkerdConfig CRD, which the caches list too (in JSON)."""
    await scenario.install_crd(kube)
    await scenario.create(
        kube,
        CONFIGMAPS.path(ns),
        {
            "metadata": {"name": "bin"},
            "data": {"text": "a\u0000b \U0001f600"},
            "binaryData": {"raw": base64.b64encode(b"\x00\xff\x10").decode()},
            "immutable": True,
        },
    )
    await scenario.create(
        kube, DEPLOYMENTS.path(ns), scenario.deployment("web", opted_in=True, replicas=0)
    )
    template = {"metadata": {"labels": {"app": "s"}}, "spec": pod("x")["spec"]}
    await scenario.create(
        kube,
        STATEFULSETS.path(ns),
        {
            "metadata": {"name": "s"},
            "spec": {
                "replicas": 0,
                "serviceName": "s",
                "selector": {"matchLabels": {"app": "s"}},
                "template": template,
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            },
        },
    )
    await scenario.create(
        kube,
        DAEMONSETS.path(ns),
        {
            "metadata": {"name": "d"},
            "spec": {
                "selector": {"matchLabels": {"app": "s"}},
                "template": template,
                "updateStrategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": "10%", "maxSurge": 0},
                },
            },
        },
    )
    await scenario.create(
        kube,
        LEASES.path(ns),
        {
            "metadata": {"name": "l"},
            "spec": {
                "holderIdentity": "me",
                "leaseDurationSeconds": 15,
                "renewTime": "2026-01-02T03:04:05.678901Z",
            },
        },
    )
    for i in range(3):
        await scenario.create(kube, PODS.path(ns), pod(f"p{i}"))
        await kube.request(
            "PATCH",
            PODS.path(ns, f"p{i}", "status"),
            body={"status": {"phase": "Running"}},
            content_type=MERGE_PATCH,
        )


RESOURCES: list[tuple[ApiResource, bool]] = [
    (CONFIGMAPS, False),
    (DEPLOYMENTS, False),
    (REPLICASETS, False),
    (STATEFULSETS, False),
    (DAEMONSETS, False),
    (LEASES, False),
    (PODS, False),
    (PODS, True),
    (NAMESPACES, True),
]


async def both_encodings(
    kube: KubeClient, path: str, metadata_only: bool, rv: str
) -> tuple[Json, Json]:
    """The same list, at the same resourceVersion, in protobuf and in JSON."""
    params = {"resourceVersion": rv, "resourceVersionMatch": "Exact"}
    suffix = AS_LIST if metadata_only else ""
    answer, raw = await kube.request_raw(
        "GET", path, params=params, accept=f"{pw.PROTOBUF}{suffix}"
    )
    assert answer.startswith(pw.PROTOBUF), answer
    as_json = await kube.request("GET", path, params=params, accept=f"{APPLICATION_JSON}{suffix}")
    return pw.decode_object(raw, None), as_json


async def test_every_cached_kind_reads_as_the_servers_json(kube: KubeClient) -> None:
    ns = await fresh_namespace(kube)
    await populate(kube, ns)
    rv = (await kube.request("GET", CONFIGMAPS.path(ns)))["metadata"]["resourceVersion"]
    compared = 0
    for resource, metadata_only in RESOURCES:
        path = resource.path(ns if resource.namespaced else None)
        decoded, as_json = await both_encodings(kube, path, metadata_only, rv)
        assert decoded["kind"] == as_json["kind"]
        assert decoded["items"] == as_json["items"], f"{resource} metadata_only={metadata_only}"
        assert decoded["metadata"]["resourceVersion"] == as_json["metadata"]["resourceVersion"]
        compared += len(as_json["items"])
    assert compared >= 12


async def collect(stream: WatchStream, count: int) -> list[tuple[str, Json]]:
    events = []
    async with asyncio.timeout(30):
        async for event in stream:
            if event.type != "BOOKMARK":
                events.append((event.type, event.object))
            if len(events) == count:
                return events
    raise AssertionError(f"the watch ended after {len(events)} events")


async def test_a_protobuf_watch_tells_what_a_json_watch_tells(kube: KubeClient) -> None:
    ns = await fresh_namespace(kube)
    rv = (await kube.request("GET", CONFIGMAPS.path(ns)))["metadata"]["resourceVersion"]
    params: dict[str, str | int | bool] = {"watch": True, "resourceVersion": rv}
    path = CONFIGMAPS.path(ns)
    async with (
        kube.stream(path, params=params, accept=pw.PROTOBUF, total_timeout=60, read_timeout=30)
        as pb_body,
        kube.stream(path, params=params, total_timeout=60, read_timeout=30) as json_body,
    ):  # fmt: skip
        await scenario.create(kube, path, {"metadata": {"name": "c"}, "data": {"k": "1"}})
        await kube.request(
            "PATCH", CONFIGMAPS.path(ns, "c"), body={"data": {"k": "2"}}, content_type=MERGE_PATCH
        )
        await kube.request("DELETE", CONFIGMAPS.path(ns, "c"))
        decode = pw.watch_event_decoder(None)
        from_pb = await collect(
            WatchStream(pb_body, inactivity_timeout=30, framed=True, decode=decode), 3
        )
        from_json = await collect(WatchStream(json_body, inactivity_timeout=30), 3)
    assert [t for t, _ in from_pb] == ["ADDED", "MODIFIED", "DELETED"]
    assert from_pb == from_json


def snapshots(caches: LinkerdCaches) -> dict[str, dict[str, Json]]:
    return {i.name: i.store.snapshot() for i in caches.informers}


async def test_caches_are_the_same_streamed_paged_or_in_json(
    control_plane: LocalControlPlane, kube: KubeClient
) -> None:
    ns = await fresh_namespace(kube)
    await populate(kube, ns)
    access = await load_access(str(control_plane.kubeconfig))
    filled: dict[str, dict[str, dict[str, Json]]] = {}
    for label, content_type, watch_list in [
        ("protobuf streamed", pw.PROTOBUF, True),
        ("protobuf paged", pw.PROTOBUF, False),
        ("json paged", APPLICATION_JSON, False),
    ]:
        async with KubeClient(access, content_type=content_type, watch_list=watch_list) as client:
            caches = LinkerdCaches(client, "linkerd")
            await caches.list_once()
            filled[label] = snapshots(caches)
            assert client.protobuf == (content_type == pw.PROTOBUF)
    assert filled["protobuf streamed"]["pods"], "no opted-in Running pod was cached"
    assert any(key.startswith(f"{ns}/") for key in filled["protobuf streamed"]["pods"])
    for informer in filled["json paged"]:
        expected = filled["json paged"][informer]
        for label in ("protobuf streamed", "protobuf paged"):
            got = filled[label][informer]
            # Only this test's namespace is stable: other tests share the control plane.
            mine = {k: v for k, v in got.items() if k.startswith(f"{ns}/") or k == ns}
            want = {k: v for k, v in expected.items() if k.startswith(f"{ns}/") or k == ns}
            assert mine == want, f"{informer}: {label} differs from JSON"


# -- a proxy in the way -------------------------------------------------------------------


@contextlib.asynccontextmanager
async def refusing_proxy(
    access: ClusterAccess, *, protobuf: bool, streaming_lists: bool
) -> AsyncIterator[tuple[ClusterAccess, list[str]]]:
    """A plain-HTTP proxy to the API server (as its admin) that answers 406 to requests that
    accept protobuf (``protobuf``) and 422 to streaming lists (``streaming_lists``), as a
    proxy or an older server would; the rest it passes through, streams included."""
    refused: list[str] = []
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=access.ssl_context))

    async def handle(request: web.Request) -> web.StreamResponse:
        accept = request.headers.get("Accept", "")
        if protobuf and "protobuf" in accept:
            refused.append(f"protobuf {request.path}")
            return web.json_response({"kind": "Status", "code": 406}, status=406)
        if streaming_lists and request.query.get("sendInitialEvents") == "true":
            refused.append(f"stream {request.path}")
            return web.json_response({"kind": "Status", "code": 422}, status=422)
        headers = {"Accept": accept}
        if request.headers.get("Content-Type"):
            headers["Content-Type"] = request.headers["Content-Type"]
        token = await access.bearer()
        if token:
            headers["Authorization"] = token
        async with session.request(
            request.method,
            access.server + request.path_qs,
            data=await request.read() if request.can_read_body else None,
            headers=headers,
        ) as upstream:
            response = web.StreamResponse(status=upstream.status)
            response.content_type = upstream.content_type
            await response.prepare(request)
            with contextlib.suppress(ConnectionResetError):  # a watch the client ended
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def no_token() -> str | None:
        return None

    try:
        yield ClusterAccess(f"http://127.0.0.1:{port}", False, no_token, "proxy"), refused
    finally:
        await runner.cleanup()
        await session.close()


async def test_a_proxy_refusing_protobuf_turns_the_client_to_json(
    control_plane: LocalControlPlane, kube: KubeClient
) -> None:
    ns = await fresh_namespace(kube)
    await populate(kube, ns)
    access = await load_access(str(control_plane.kubeconfig))
    async with KubeClient(access, watch_list=False) as direct:
        expected = LinkerdCaches(direct, "linkerd")
        await expected.list_once()
    async with refusing_proxy(access, protobuf=True, streaming_lists=False) as (proxied, refused):
        with capture_logs() as logs:
            async with KubeClient(proxied) as client:
                caches = LinkerdCaches(client, "linkerd")
                await caches.list_once()
                assert client.protobuf is False
                # And a running informer's watch follows changes through the proxy, in JSON.
                informer = Informer(client, CONFIGMAPS, namespace=ns, name="through-proxy")
                task = asyncio.create_task(informer.run())
                try:
                    await informer.wait_synced(30)
                    await scenario.create(kube, CONFIGMAPS.path(ns), {"metadata": {"name": "new"}})

                    async def seen() -> bool:
                        return f"{ns}/new" in informer.store

                    await eventually(seen, timeout=30, what="the change through the proxy")
                finally:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
    assert refused, "the proxy was never asked for protobuf"
    warnings = [e for e in logs if e["event"].startswith("protobuf refused")]
    assert len(warnings) == 1 and warnings[0]["status"] == 406
    want = snapshots(expected)
    for name, got in snapshots(caches).items():
        mine = {k: v for k, v in got.items() if k.startswith(f"{ns}/")}
        assert mine == {k: v for k, v in want[name].items() if k.startswith(f"{ns}/")}, name


async def test_a_server_refusing_streaming_lists_is_listed_in_pages(
    control_plane: LocalControlPlane, kube: KubeClient
) -> None:
    ns = await fresh_namespace(kube)
    await populate(kube, ns)
    access = await load_access(str(control_plane.kubeconfig))
    async with refusing_proxy(access, protobuf=False, streaming_lists=True) as (proxied, refused):
        with capture_logs() as logs:
            async with KubeClient(proxied) as client:
                caches = LinkerdCaches(client, "linkerd")
                await caches.list_once()
                assert client.protobuf is True  # protobuf still: only the stream was refused
    assert any(r.startswith("stream") for r in refused)
    assert any(e["event"].startswith("streaming list refused") for e in logs)
    pods = caches.pods.store.snapshot()
    assert {f"{ns}/p{i}" for i in range(3)} <= set(pods)
    assert orjson.dumps(pods[f"{ns}/p0"]["metadata"]["labels"]) == orjson.dumps(
        {RECONCILE_LABEL: RECONCILE_AUTO}
    )
