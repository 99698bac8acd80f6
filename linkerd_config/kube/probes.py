"""The plain-HTTP endpoints a kubelet and Prometheus call: /metrics, /healthz, /readyz.

Checks are named callables, so a failing probe says which part is unhealthy
(``/readyz?verbose`` lists each one, like the API server's own).
"""

from __future__ import annotations

from collections.abc import Callable

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = structlog.get_logger(__name__)

Check = Callable[[], bool]


class Probes:
    """The handlers; ``metrics_app`` and ``health_app`` may share a port or not."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.live_checks: dict[str, Check] = {"ping": lambda: True}
        self.ready_checks: dict[str, Check] = {}

    def metrics_app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
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
