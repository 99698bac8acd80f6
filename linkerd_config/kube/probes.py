"""The endpoints a kubelet and Prometheus call: /metrics, /healthz, /readyz.

Checks are named callables, so a failing probe says which part is unhealthy
(``/readyz?verbose`` lists each one, like the API server's own).

/metrics may be guarded (``metrics_app(auth)``), as controller-runtime's
``filters.WithAuthenticationAndAuthorization`` guards it: the caller's bearer token must pass
a TokenReview (else 401) and the request a SubjectAccessReview (else 403); when either
review cannot be made the answer is 500, never the metrics.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from linkerd_config.kube.delegated_auth import (
    DelegatedAuth,
    ReviewError,
    ReviewLimited,
    bearer_token,
)
from linkerd_config.kube.serving import Handler

log = structlog.get_logger(__name__)

Check = Callable[[], bool]


class Probes:
    """The handlers; ``metrics_app`` and ``health_app`` may share a port or not."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.live_checks: dict[str, Check] = {"ping": lambda: True}
        self.ready_checks: dict[str, Check] = {}

    def metrics_app(self, auth: DelegatedAuth | None = None) -> web.Application:
        """/metrics, open or (with ``auth``) only to callers RBAC lets ``get`` it."""
        app = web.Application()
        handler: Handler = self._metrics
        app.router.add_get("/metrics", handler if auth is None else guarded(auth, handler))
        return app

    def health_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self._live)
        app.router.add_get("/readyz", self._ready)
        return app

    async def _metrics(self, _request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _live(self, request: web.Request) -> web.Response:
        return _report(self.live_checks, request)

    async def _ready(self, request: web.Request) -> web.Response:
        return _report(self.ready_checks, request)


def _report(checks: dict[str, Check], request: web.Request) -> web.Response:
    results: dict[str, bool] = {}
    for name, check in checks.items():
        try:
            results[name] = bool(check())
        except Exception:  # a probe that raises is a failing probe, not a 500
            log.exception("probe check raised", check=name)
            results[name] = False
    healthy = all(results.values())
    if "verbose" in request.query or not healthy:
        lines = [
            f"[{'+' if ok else '-'}]{name} {'ok' if ok else 'failed'}"
            for name, ok in results.items()
        ]
        text = "\n".join(lines) + ("\nok\n" if healthy else "\nfailed\n")
    else:
        text = "ok"
    return web.Response(text=text, status=200 if healthy else 500)


def _limited(exc: ReviewLimited) -> web.Response:
    return web.Response(
        status=429,
        headers={"Retry-After": str(max(1, math.ceil(exc.retry_after)))},
        text="Too many requests to review; retry later\n",
    )


def guarded(auth: DelegatedAuth, handler: Handler) -> Handler:
    """``handler`` behind authentication (401) and authorization (403) by the API server;
    the verb is the request's method in lower case and the path its URL path, as in
    controller-runtime. Denials are logged at debug with the user's name, never the token."""

    async def guard(request: web.Request) -> web.StreamResponse:
        token = bearer_token(request.headers.get("Authorization", ""))
        if token is None:
            log.debug("no bearer token", path=request.path, remote=request.remote)
            return _unauthorized()
        try:
            user = await auth.authenticate(token, request.remote)
        except ReviewLimited as exc:
            log.debug("token review limited", path=request.path, remote=request.remote)
            return _limited(exc)
        except ReviewError as exc:
            log.error("authentication failed", path=request.path, error=str(exc))
            return web.Response(status=500, text="Authentication failed\n")
        if user is None:
            log.debug("token not authenticated", path=request.path, remote=request.remote)
            return _unauthorized()
        verb = request.method.lower()
        try:
            decision = await auth.authorize(user, verb, request.path, request.remote)
        except ReviewLimited as exc:
            log.debug("access review limited", user=user.name, path=request.path)
            return _limited(exc)
        except ReviewError as exc:
            log.error("authorization failed", user=user.name, path=request.path, error=str(exc))
            return web.Response(status=500, text=f"Authorization for user {user.name} failed\n")
        if not decision.allowed:
            log.debug(
                "authorization denied",
                user=user.name,
                verb=verb,
                path=request.path,
                reason=decision.reason,
            )
            return web.Response(status=403, text=f"Authorization denied for user {user.name}\n")
        return await handler(request)

    return guard


def _unauthorized() -> web.Response:
    return web.Response(status=401, text="Unauthorized\n", headers={"WWW-Authenticate": "Bearer"})
