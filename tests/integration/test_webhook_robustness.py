"""The webhook server under hostile input and under certificate rotation, over real HTTPS.

(a) Thousands of malformed and random AdmissionReviews: the server never answers 5xx, never
drops a connection, never takes 10 s (the API server's timeout), and a handler never crashes
(an internal error would come back as a refusal with code 500). An oversized body is a 413,
and the server keeps answering.
(b) A new certificate from a new CA written while clients keep calling: new handshakes
present it, and not one request fails on the way.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import hashlib
import ssl
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from linkerd_config.kube.admission import MAX_BODY_BYTES, AdmissionServer, ReloadingCertificate
from linkerd_config.kube.certs import TinyCA, write_serving_pair
from linkerd_config.linkerd.admission.webhooks import MUTATE_PATH, VALIDATE_PATH, register
from tests.support.samples import INVALID, load, sample

Json = dict[str, Any]
PATHS = (MUTATE_PATH, VALIDATE_PATH)
API_SERVER_TIMEOUT = 10.0
ROTATIONS = 30


@dataclass
class Running:
    server: AdmissionServer
    cert_dir: Path
    ca_pem: bytes

    @property
    def base(self) -> str:
        return f"https://127.0.0.1:{self.server.bound_port}"


def envelope(request: Json) -> Json:
    """An AdmissionReview around ``request``, as the API server sends it."""
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def sample_review(uid: str) -> bytes:
    """A well-formed review of the edge-19.12.3 sample: the request that must always work."""
    return orjson.dumps(envelope({"uid": uid, "object": sample("edge_19.12.3.yaml")}))


def client_context(*ca_pems: bytes) -> ssl.SSLContext:
    return ssl.create_default_context(cadata="".join(p.decode() for p in ca_pems))


def stored_owner() -> Json:
    owner = sample("edge_19.12.3.yaml")
    owner["metadata"] = {"name": "owner", "creationTimestamp": "2026-01-01T00:00:00Z"}
    return owner


@contextlib.asynccontextmanager
async def running_server(cert_dir: Path) -> AsyncIterator[Running]:
    ca_pem = write_serving_pair(cert_dir, ["localhost"], ["127.0.0.1"])
    certificate = ReloadingCertificate(cert_dir / "tls.crt", cert_dir / "tls.key")
    server = AdmissionServer("127.0.0.1", 0, certificate, reload_interval=0.1)
    store = SimpleNamespace(list=lambda: [stored_owner()])
    register(server, SimpleNamespace(configs=SimpleNamespace(store=store)))
    task = asyncio.create_task(server.run(), name="robustness-webhooks")
    try:
        await asyncio.wait_for(server.started.wait(), 10)
        yield Running(server, cert_dir, ca_pem)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture(scope="module")
async def webhooks(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    async with running_server(tmp_path_factory.mktemp("fuzz-certs")) as running:
        yield running


@pytest.fixture(scope="module")
async def session(webhooks: Running) -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(ssl=client_context(webhooks.ca_pem), limit=32)
    timeout = aiohttp.ClientTimeout(total=API_SERVER_TIMEOUT)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:
        yield client


# -- (a) hostile input -----------------------------------------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)


_json = st.recursive(_scalars, _containers, max_leaves=16)
_SAMPLES = [sample("edge_19.12.3.yaml"), sample("edge_19.12.3_use_webhook_defaults.yaml")]
_SAMPLES += [load(p) for p in INVALID]
_SPEC_PATHS = [
    ("global",), ("proxy",), ("global", "version"), ("global", "identityContext"),
    ("global", "identityContext", "trustAnchorsPEM"), ("global", "configMap"),
    ("global", "identityContext", "clockSkewAllowance"), ("proxy", "inboundPort"),
    ("proxy", "ignoreOutboundPorts"), ("proxy", "logLevel"), ("proxy", "resource"),
    ("proxy", "proxyVersion"), ("proxy", "proxyInitImage"), ("proxy", "proxyUID"),
]  # fmt: skip


@st.composite
def specs(draw: st.DrawFn) -> Any:
    """Mostly a sample with a few fields replaced by anything; sometimes anything at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(_json)
    spec = copy.deepcopy(draw(st.sampled_from(_SAMPLES))["spec"]) or {}
    for path in draw(st.lists(st.sampled_from(_SPEC_PATHS), max_size=3)):
        node = spec
        for key in path[:-1]:
            child = node.get(key) if isinstance(node, dict) else None
            if not isinstance(child, dict):
                break
            node = child
        else:
            if isinstance(node, dict):
                node[path[-1]] = draw(_json)
    return spec


@st.composite
def reviews(draw: st.DrawFn) -> Json:
    """A well-formed AdmissionReview for a LinkerdConfig with a random spec."""
    operation = draw(st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", ""]))
    name = draw(st.sampled_from(["owner", "other", ""]) | st.text(max_size=20))
    obj = {"apiVersion": "config.linkerd.io/v1alpha1", "kind": "LinkerdConfig",
           "metadata": {"name": name}, "spec": draw(specs())}  # fmt: skip
    request: Json = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "config.linkerd.io", "version": "v1alpha1", "kind": "LinkerdConfig"},
        "resource": {"group": "config.linkerd.io", "version": "v1alpha1",
                     "resource": "linkerdconfigs"},
        "name": name,
        "operation": operation,
        "userInfo": {"username": "fuzz"},
        "object": obj,
        "oldObject": None,
        "dryRun": draw(st.booleans()),
    }  # fmt: skip
    if operation == "UPDATE":
        old = copy.deepcopy(obj)
        old["spec"] = draw(st.just(obj["spec"]) | specs())
        request["oldObject"] = old
    return envelope(request)


def _nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"a": value}
    return value


@st.composite
def broken_reviews(draw: st.DrawFn) -> Json:
    """A review with one part replaced by the wrong type, removed, or made absurd."""
    review = draw(reviews())
    damage = draw(st.sampled_from(
        ["apiVersion", "kind", "uid", "no-uid", "request", "object", "oldObject", "name",
         "operation", "userInfo", "kind-type", "metadata", "deep", "long-string", "many-keys",
         "pem-bomb"]
    ))  # fmt: skip
    request = review["request"]
    junk = draw(_json)
    if damage == "apiVersion":
        review["apiVersion"] = draw(st.sampled_from(["admission.k8s.io/v1beta1", "v1", junk]))
    elif damage == "kind":
        review["kind"] = draw(st.sampled_from(["AdmissionResponse", "Status", junk]))
    elif damage == "uid":
        request["uid"] = draw(st.sampled_from(["", 0, None, [], {}]) | _json)
    elif damage == "no-uid":
        del request["uid"]
    elif damage == "request":
        review["request"] = junk
    elif damage in ("object", "oldObject", "name", "operation", "userInfo"):
        request[damage] = junk
    elif damage == "kind-type":
        request["kind"] = junk
    elif damage == "metadata":
        request["object"]["metadata"] = junk
    elif damage == "deep":
        depth = draw(st.integers(30, 1100))  # orjson reads up to 1024 levels
        request["object"]["spec"] = _nested(depth, junk)
    elif damage == "long-string":
        size = draw(st.integers(10_000, 1_000_000))
        field = draw(st.sampled_from(_SPEC_PATHS))
        node = request["object"]["spec"] = copy.deepcopy(_SAMPLES[0]["spec"])
        for key in field[:-1]:
            node = node[key]
        node[field[-1]] = draw(st.sampled_from("x9-,=\n")) * size
    elif damage == "pem-bomb":
        marker = draw(st.sampled_from(["-----BEGIN X-----", "-----END X-----\n", "-----BEGIN "]))
        spec = request["object"]["spec"] = copy.deepcopy(_SAMPLES[0]["spec"])
        spec["global"]["identityContext"]["trustAnchorsPEM"] = marker * (65000 // len(marker))
    else:
        count = draw(st.integers(1_000, 20_000))
        request["object"]["spec"]["proxy"] = {f"k{i}": i for i in range(count)}
    return review


@st.composite
def bodies(draw: st.DrawFn) -> tuple[bytes, str, str | None]:
    """(body, content type, the uid an answer must carry if it is an AdmissionReview)."""
    kind = draw(st.sampled_from(["review", "broken", "bytes", "truncated", "json", "type"]))
    content_type = "application/json"
    uid = None
    if kind == "review":
        review = draw(reviews())
        uid = review["request"]["uid"]
        body = orjson.dumps(review)
    elif kind == "broken":
        try:
            body = orjson.dumps(draw(broken_reviews()))
        except orjson.JSONEncodeError:  # nested past orjson's limit: send it as text anyway
            body = b"[" * 2000 + b"]" * 2000
    elif kind == "bytes":
        body = draw(st.binary(max_size=4096))
    elif kind == "truncated":
        whole = orjson.dumps(draw(reviews()))
        body = whole[: draw(st.integers(0, len(whole) - 1))]
    elif kind == "json":
        body = orjson.dumps(draw(_json))
    else:
        body = orjson.dumps(draw(reviews()))
        content_type = draw(st.sampled_from(["text/plain", "application/yaml", ""]))
    return body, content_type, uid


async def post(
    session: aiohttp.ClientSession, url: str, body: bytes, content_type: str
) -> tuple[int, bytes, float]:
    started = time.monotonic()
    headers = {"Content-Type": content_type} if content_type else {"Content-Type": ""}
    async with session.post(url, data=body, headers=headers) as response:
        payload = await response.read()
        return response.status, payload, time.monotonic() - started


def check_answer(status: int, payload: bytes, elapsed: float, uid: str | None) -> None:
    assert status < 500, (status, payload[:500])
    assert elapsed < API_SERVER_TIMEOUT, elapsed
    answer = orjson.loads(payload)
    if status != 200:
        assert 400 <= status < 500
        assert answer["kind"] == "Status" and answer["code"] == status and answer["message"]
        return
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert isinstance(response["allowed"], bool)
    if uid is not None:
        assert response["uid"] == uid
    if not response["allowed"]:
        assert response["status"]["code"] != 500, response  # a handler crashed or hung
        assert response["status"]["message"]
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        patch = orjson.loads(base64.b64decode(response["patch"]))
        assert patch and all(op["op"] == "add" for op in patch)


@settings(
    max_examples=130,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    # No shrinking: an example is a batch of HTTPS requests, shrinking one would outlast the
    # test timeout, and the failing batch is in the report as it is.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(batch=st.lists(st.tuples(bodies(), st.sampled_from(PATHS)), min_size=14, max_size=20))
async def test_hostile_reviews_never_break_the_server(
    webhooks: Running, session: aiohttp.ClientSession, batch: list[Any]
) -> None:
    answers = await asyncio.gather(
        *(post(session, webhooks.base + path, body, ctype) for (body, ctype, _), path in batch)
    )
    for ((_, _, uid), _), (status, payload, elapsed) in zip(batch, answers, strict=True):
        check_answer(status, payload, elapsed, uid)


async def test_the_samples_get_the_expected_answers(
    webhooks: Running, session: aiohttp.ClientSession
) -> None:
    """A sanity check that the fuzzed server is the real thing, not one that refuses all."""
    for obj, allowed in [(sample("edge_19.12.3_use_webhook_defaults.yaml"), True)] + [
        (load(p), False) for p in INVALID
    ]:
        obj["metadata"]["name"] = "other"
        obj["spec"].setdefault("global", {})["configMap"] = "not-the-owners"
        review = envelope({"uid": "u", "name": "other", "operation": "CREATE", "object": obj})
        status, payload, _ = await post(
            session, webhooks.base + VALIDATE_PATH, orjson.dumps(review), "application/json"
        )
        assert status == 200
        assert orjson.loads(payload)["response"]["allowed"] is allowed, payload


async def test_an_oversized_body_is_413_and_the_server_carries_on(
    webhooks: Running, session: aiohttp.ClientSession
) -> None:
    spec = {"x": "y" * (MAX_BODY_BYTES + 1024)}
    review = envelope({"uid": "big", "object": {"spec": spec}})
    body = orjson.dumps(review)
    assert len(body) > 3 * 1024 * 1024
    status, payload, _ = await post(
        session, webhooks.base + VALIDATE_PATH, body, "application/json"
    )
    assert status == 413, payload[:200]
    assert b"larger than" in payload
    ok = sample_review("after")
    status, payload, elapsed = await post(
        session, webhooks.base + MUTATE_PATH, ok, "application/json"
    )
    check_answer(status, payload, elapsed, "after")


async def test_slow_and_aborted_clients_do_not_hold_up_others(
    webhooks: Running, session: aiohttp.ClientSession
) -> None:
    """A client that sends half a body and stalls, or hangs up, costs others nothing."""
    context = client_context(webhooks.ca_pem)
    port = webhooks.server.bound_port
    stalled = []
    for _ in range(5):
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        writer.write(
            f"POST {VALIDATE_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            'Content-Length: 1000\r\n\r\n{"apiVersion":'.encode()
        )
        await writer.drain()
        stalled.append(writer)
    stalled[0].transport.abort()
    review = sample_review("meanwhile")
    status, payload, elapsed = await post(
        session, webhooks.base + VALIDATE_PATH, review, "application/json"
    )
    check_answer(status, payload, elapsed, "meanwhile")
    assert elapsed < 2
    for writer in stalled[1:]:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()


# -- (b) certificate rotation ----------------------------------------------------------------------


def fingerprint(pem: bytes) -> str:
    cert = x509.load_pem_x509_certificate(pem)
    return hashlib.sha256(cert.public_bytes(Encoding.DER)).hexdigest()


async def call_once(port: int, context: ssl.SSLContext) -> tuple[int, str]:
    """One request on a new connection (so a new handshake); the fingerprint of the
    certificate the server presented, read from the connection's SSL object."""
    body = sample_review("rot")
    async with asyncio.timeout(API_SERVER_TIMEOUT):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        try:
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            head = (
                f"POST {MUTATE_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Content-Type: application/json\r\nConnection: close\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
            answer = await reader.read()
        finally:
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.wait_closed()
    status = int(answer.split(b" ", 2)[1])
    assert b'"allowed":true' in answer, answer[-300:]
    return status, hashlib.sha256(der).hexdigest()


async def test_certificate_rotation_under_load(tmp_path: Path) -> None:
    async with running_server(tmp_path) as running:
        old_cert = fingerprint((tmp_path / "tls.crt").read_bytes())
        new_ca = TinyCA("rotated-ca")
        # Clients trust both CAs throughout, as an API server does once cert-manager has put
        # both in the caBundle: what is tested is the server, not a trust race.
        trust = client_context(running.ca_pem, new_ca.cert_pem)
        url = running.base + MUTATE_PATH
        port = running.server.bound_port
        assert port is not None
        seen: list[tuple[float, float, str]] = []  # (handshake began, answer read, cert shown)
        failures: list[BaseException] = []
        stop = asyncio.Event()

        async def new_connections() -> None:
            while not stop.is_set():
                began = time.monotonic()
                try:
                    status, shown = await call_once(port, trust)
                    assert status == 200
                    seen.append((began, time.monotonic(), shown))
                except Exception as exc:
                    failures.append(exc)

        async def kept_alive() -> None:
            """One long-lived connection keeps working across the rotation."""
            connector = aiohttp.TCPConnector(ssl=trust, limit=1)
            async with aiohttp.ClientSession(connector=connector) as client:
                while not stop.is_set():
                    try:
                        status, payload, elapsed = await post(
                            client, url, sample_review("ka"), "application/json"
                        )
                        check_answer(status, payload, elapsed, "ka")
                    except Exception as exc:
                        failures.append(exc)
                    await asyncio.sleep(0.01)

        async def shown_from_now_on(cert: str) -> None:
            """Wait for a handshake showing ``cert``; then every handshake begun after that
            one ended must show it too."""
            deadline = time.monotonic() + 10
            while not any(shown == cert for _, _, shown in seen):
                assert time.monotonic() < deadline, "new certificate never presented"
                await asyncio.sleep(0.05)
            first_done = min(done for _, done, shown in seen if shown == cert)
            await asyncio.sleep(1.0)
            later = {shown for began, _, shown in seen if began > first_done}
            assert later == {cert}

        clients = [asyncio.create_task(new_connections()) for _ in range(8)]
        clients.append(asyncio.create_task(kept_alive()))
        try:
            await asyncio.sleep(0.5)
            assert seen and {shown for _, _, shown in seen} == {old_cert}
            # A pair from the new CA lands in the cert dir (key first, each file replaced
            # whole, as write_serving_pair does).
            await asyncio.to_thread(
                write_serving_pair, tmp_path, ["localhost"], ["127.0.0.1"], new_ca
            )
            await shown_from_now_on(fingerprint((tmp_path / "tls.crt").read_bytes()))
            # Many more rotations under the same load: a swap that is not atomic shows up
            # here as failed handshakes.
            for _ in range(ROTATIONS):
                await asyncio.to_thread(
                    write_serving_pair, tmp_path, ["localhost"], ["127.0.0.1"], new_ca
                )
                await asyncio.sleep(0.15)
            await shown_from_now_on(fingerprint((tmp_path / "tls.crt").read_bytes()))
            assert running.server.certificate.reloads >= 3
        finally:
            stop.set()
            await asyncio.gather(*clients)
        assert failures == []
        assert len(seen) > 20


async def test_a_torn_pair_is_not_loaded_and_the_old_one_keeps_serving(tmp_path: Path) -> None:
    """Cert written, key not yet (the reverse of write_serving_pair's order): the server
    keeps presenting the old pair until the key matches, then switches."""
    async with running_server(tmp_path) as running:
        port = running.server.bound_port
        assert port is not None
        old_cert = fingerprint((tmp_path / "tls.crt").read_bytes())
        staging = tmp_path / "staging"
        new_ca = write_serving_pair(staging, ["localhost"], ["127.0.0.1"])
        context = client_context(running.ca_pem, new_ca)
        new_cert = fingerprint((staging / "tls.crt").read_bytes())
        (staging / "tls.crt").replace(tmp_path / "tls.crt")
        for _ in range(10):  # several reload intervals with the torn pair on disk
            assert await call_once(port, context) == (200, old_cert)
            await asyncio.sleep(0.05)
        (staging / "tls.key").replace(tmp_path / "tls.key")
        deadline = time.monotonic() + 10
        while (await call_once(port, context))[1] != new_cert:
            assert time.monotonic() < deadline, "new certificate never presented"
            await asyncio.sleep(0.05)
        assert running.server.certificate.reloads == 2
