"""An HTTPS server for admission.k8s.io/v1 AdmissionReview: plumbing only.

It knows AdmissionReview, TLS and HTTP; what to default or refuse is a plain function the
caller registers per path (``Admit``). The promises that keep a cluster writable:

* every request is answered well inside the API server's 10 s default timeout: a handler
  that overruns is cut off and the object is refused with a message that says so;
* malformed, truncated, wrong-kind or oversized bodies get a 4xx with a clear message;
  a handler's exception becomes a refusal naming the object, never a 5xx or a crash;
* the certificate and key are re-read when their files change (cert-manager rotation):
  new handshakes use the new pair, connections in flight are not disturbed.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import inspect
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from linkerd_config.kube.conversion_review import (
    BadConversionReview,
    Convert,
    answer_conversion,
    parse_conversion_review,
)
from linkerd_config.kube.metrics import ComponentMetrics
from linkerd_config.kube.resource import Json
from linkerd_config.kube.serving import ServingCertificate, expect_within_limit, serve

log = structlog.get_logger(__name__)

MAX_BODY_BYTES = 3 * 1024 * 1024  # the API server's own request limit is ~3 MiB


@dataclass(frozen=True)
class AdmissionRequest:
    """The parts of ``request`` a policy reads; ``object``/``old_object`` are plain dicts."""

    uid: str
    operation: str
    kind: Json
    namespace: str
    name: str
    object: Json | None
    old_object: Json | None
    dry_run: bool
    user: str
    raw: Json = field(repr=False)


@dataclass(frozen=True)
class AdmissionResponse:
    allowed: bool = True
    message: str = ""
    code: int = 0
    patch: list[Json] | None = None
    warnings: tuple[str, ...] = ()

    @staticmethod
    def deny(message: str, code: int = 403) -> AdmissionResponse:
        return AdmissionResponse(allowed=False, message=message, code=code)


Admit = Callable[[AdmissionRequest], AdmissionResponse | Awaitable[AdmissionResponse]]


class BadReview(ValueError):
    """The body is not an AdmissionReview we can answer; the message says what is wrong."""


def parse_review(body: bytes) -> AdmissionRequest:
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadReview(f"body is not JSON: {exc}") from None
    if not isinstance(review, dict):
        raise BadReview("body is not a JSON object")
    if review.get("apiVersion") != "admission.k8s.io/v1" or review.get("kind") != "AdmissionReview":
        raise BadReview(
            "expected apiVersion admission.k8s.io/v1, kind AdmissionReview; got "
            f"{review.get('apiVersion')!r}, {review.get('kind')!r}"
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview("AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("request.uid must be a non-empty string")
    for key in ("object", "oldObject"):
        if request.get(key) is not None and not isinstance(request[key], dict):
            raise BadReview(f"request.{key} must be an object or null")
    kind = request.get("kind")
    user = request.get("userInfo")
    return AdmissionRequest(
        uid=uid,
        operation=str(request.get("operation", "")),
        kind=kind if isinstance(kind, dict) else {},
        namespace=str(request.get("namespace") or ""),
        name=str(request.get("name") or ""),
        object=request.get("object"),
        old_object=request.get("oldObject"),
        dry_run=request.get("dryRun") is True,
        user=str(user.get("username", "")) if isinstance(user, dict) else "",
        raw=request,
    )


def render_review(uid: str, answer: AdmissionResponse) -> Json:
    response: Json = {"uid": uid, "allowed": answer.allowed}
    if not answer.allowed or answer.message:
        response["status"] = {
            "code": answer.code or (200 if answer.allowed else 403),
            "message": answer.message,
        }
        if not answer.allowed:
            response["status"]["reason"] = "Forbidden" if answer.code in (0, 403) else "Invalid"
    if answer.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(answer.patch)).decode()
    if answer.warnings:
        response["warnings"] = list(answer.warnings)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def _server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class ReloadingCertificate:
    """An SSLContext whose cert/key pair follows the files on disk.

    Each pair is loaded into a fresh context, never into one in use: loading into a live
    context sets the certificate and the key in two steps, and a handshake between them (or
    after a failed load) finds a certificate without its key. ``context`` (the one the server
    listens with, holding no pair itself) hands every handshake to the newest loaded context
    from its SNI callback, which OpenSSL calls for every ClientHello, server name or not.
    """

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.context = _server_context()
        self._current = self.context
        self._fingerprint = b""
        self.reloads = 0
        self._missing_reported = False
        self.available = asyncio.Event()
        """Set (on the event loop) once a pair has been loaded."""
        self.context.sni_callback = self._select
        if self.reload():
            self.available.set()

    @property
    def loaded(self) -> bool:
        """A pair has been loaded: only then can anything be served."""
        return self.reloads > 0

    def _select(self, connection: ssl.SSLObject, _name: str | None, _ctx: ssl.SSLContext) -> None:
        if connection.context is not self._current:
            connection.context = self._current

    def _read(self) -> bytes:
        return hashlib.sha256(self.cert_file.read_bytes() + self.key_file.read_bytes()).digest()

    def reload(self) -> bool:
        """Load the pair if it changed; True when it did. A half-written pair is retried, and
        a missing one waited for (cert-manager may not have issued it yet)."""
        try:
            fingerprint = self._read()
        except FileNotFoundError as exc:
            if not self._missing_reported:
                self._missing_reported = True
                log.warning(
                    "waiting for the serving certificate",
                    missing=exc.filename,
                    cert=str(self.cert_file),
                    key=str(self.key_file),
                )
            return False
        if fingerprint == self._fingerprint:
            return False
        fresh = _server_context()
        try:
            fresh.load_cert_chain(self.cert_file, self.key_file)
        except ssl.SSLError as exc:  # mid-rotation: cert and key do not match yet
            log.warning("serving certificate not loadable yet", error=str(exc))
            return False
        self._current = fresh
        self._fingerprint = fingerprint
        self.reloads += 1
        log.info("serving certificate loaded", cert=str(self.cert_file), loads=self.reloads)
        return True

    async def watch(self, interval: float = 2.0) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                if await asyncio.to_thread(self.reload):
                    self.available.set()
            except OSError as exc:
                log.warning("serving certificate unreadable", error=str(exc))


class WebhookMetrics(ComponentMetrics):
    """controller-runtime's webhook families (pkg/webhook/internal/metrics), by path."""

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        self.requests = Counter(
            "controller_runtime_webhook_requests_total",
            "Total number of admission requests by HTTP status code.",
            ["webhook", "code"],
            registry=registry,
        )
        self.latency = Histogram(
            "controller_runtime_webhook_latency_seconds",
            "Histogram of the latency of processing admission requests",
            ["webhook"],
            registry=registry,
        )
        self.in_flight = Gauge(
            "controller_runtime_webhook_requests_in_flight",
            "Current number of admission requests being served.",
            ["webhook"],
            registry=registry,
        )


class AdmissionServer:
    """Routes AdmissionReviews by path to ``Admit`` functions; ``run`` until cancelled."""

    def __init__(
        self,
        host: str,
        port: int,
        certificate: ServingCertificate,
        *,
        registry: CollectorRegistry | None = None,
        handler_timeout: float = 7.0,
        reload_interval: float = 2.0,
    ) -> None:
        self.host = host
        self.port = port
        self.certificate = certificate
        self.metrics = WebhookMetrics.of(registry)
        self.handler_timeout = handler_timeout
        self.reload_interval = reload_interval
        self.bound_port: int | None = None
        self.started = asyncio.Event()
        self._routes: dict[str, Admit] = {}
        self._conversions: dict[str, Convert] = {}

    def add(self, path: str, admit: Admit) -> None:
        self._routes[path] = admit
        self._count(path)

    def add_conversion(self, path: str, convert: Convert) -> None:
        """Serve a CRD's conversion webhook (ConversionReview) at ``path``."""
        self._conversions[path] = convert
        self._count(path)

    def _count(self, path: str) -> None:
        self.metrics.latency.labels(path)
        self.metrics.in_flight.labels(path).set(0)
        self.metrics.requests.labels(path, "200")

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        for path in (*self._routes, *self._conversions):
            app.router.add_post(path, self._handle, expect_handler=expect_within_limit)
        return app

    async def run(self) -> None:
        def bound(port: int) -> None:
            self.bound_port = port
            self.started.set()

        async with asyncio.TaskGroup() as group:
            group.create_task(self.certificate.watch(self.reload_interval), name="cert-reload")
            # Nothing to serve TLS with until a pair exists; ``started`` (readiness) waits too.
            await self.certificate.available.wait()
            group.create_task(
                serve(
                    self.app(),
                    self.host,
                    self.port,
                    name="admission",
                    ssl_context=self.certificate.context,
                    on_bound=bound,
                )
            )

    async def _handle(self, request: web.Request) -> web.Response:
        path = request.path
        started = time.monotonic()
        status = 500
        self.metrics.in_flight.labels(path).inc()
        try:
            response = await self._answer(request)
            status = response.status
            return response
        finally:
            self.metrics.in_flight.labels(path).dec()
            self.metrics.requests.labels(path, str(status)).inc()
            self.metrics.latency.labels(path).observe(time.monotonic() - started)

    async def _answer(self, request: web.Request) -> web.Response:
        if request.content_type != "application/json":
            return _problem(
                415, f"content type must be application/json, not {request.content_type}"
            )
        try:
            body = await asyncio.wait_for(request.read(), self.handler_timeout)
        except web.HTTPRequestEntityTooLarge:
            return _problem(413, f"AdmissionReview larger than {MAX_BODY_BYTES} bytes")
        except TimeoutError:
            return _problem(408, "request body not received in time")
        if request.path in self._conversions:
            return await self._convert(request.path, body)
        try:
            review = parse_review(body)
        except BadReview as exc:
            return _problem(400, str(exc))
        answer = await self._admit(request.path, review)
        return web.Response(body=orjson.dumps(render_review(review.uid, answer)),
                            content_type="application/json")  # fmt: skip

    async def _admit(self, path: str, review: AdmissionRequest) -> AdmissionResponse:
        where = f"{review.namespace}/" if review.namespace else ""
        what = f"{review.kind.get('kind', 'object')} {where}{review.name}"
        try:
            async with asyncio.timeout(self.handler_timeout):
                result = self._routes[path](review)
                if inspect.isawaitable(result):
                    result = await result
                return result
        except TimeoutError:
            log.error("admission handler timed out", path=path, object=what)
            return AdmissionResponse.deny(f"{what}: admission check timed out", code=500)
        except Exception as exc:
            log.exception("admission handler failed", path=path, object=what)
            return AdmissionResponse.deny(f"{what}: internal error in admission: {exc}", code=500)

    async def _convert(self, path: str, body: bytes) -> web.Response:
        try:
            review = parse_conversion_review(body)
        except BadConversionReview as exc:
            return _problem(400, str(exc))
        # Up to MAX_BODY_BYTES of objects to copy: off the loop, and cut off like admission.
        try:
            answer = await asyncio.wait_for(
                asyncio.to_thread(answer_conversion, review, self._conversions[path]),
                self.handler_timeout,
            )
        except TimeoutError:
            log.error("conversion timed out", path=path, objects=len(review.objects))
            return _problem(500, "conversion timed out")
        return web.Response(body=orjson.dumps(answer), content_type="application/json")


def _problem(status: int, message: str) -> web.Response:
    return web.Response(
        status=status,
        body=orjson.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "message": message, "code": status}),
        content_type="application/json",
    )  # fmt: skip
