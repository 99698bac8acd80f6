"""The composition root: Settings in, a running Manager out. The only place that knows
both the machinery and the domain, so neither has to know the other."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import gc
import ipaddress
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import structlog
from prometheus_client import CollectorRegistry, ProcessCollector, disable_created_metrics

from linkerd_config.kube.client import CONTENT_TYPES, KubeClient
from linkerd_config.kube.events import EventRecorder
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.leader import (
    LeaderElectionConfig,
    LeaderElector,
    LeaderGate,
    NoElection,
    default_identity,
)
from linkerd_config.kube.probes import Probes
from linkerd_config.kube.serving import (
    LIMITS,
    InMemoryCertificate,
    ServingCertificate,
    serve,
    serve_tls,
)
from linkerd_config.kube.watch_health import WatchHealth
from linkerd_config.linkerd.reconciler import LinkerdConfigController
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.spec.crd import (
    CONVERSION_PROBE,
    CONVERSION_REFUSAL,
    CONVERT_PATH,
    LINKERD_CONFIGS_V1ALPHA1,
    LOCAL_CONVERTER,
)
from linkerd_config.manager import Manager
from linkerd_config.settings import Settings

if TYPE_CHECKING:
    from linkerd_config.kube.admission import AdmissionServer
    from linkerd_config.kube.local_conversion import LocalConversion

log = structlog.get_logger(__name__)

COMPONENT = "linkerd-config"


@dataclass
class App:
    """Everything one replica runs, built but not started."""

    settings: Settings
    client: KubeClient
    registry: CollectorRegistry
    """Every metric this replica serves on /metrics."""
    manager: Manager
    controller: LinkerdConfigController
    recorder: EventRecorder
    admission: AdmissionServer | None = None
    watch_health: WatchHealth | None = None
    local_conversion: LocalConversion | None = None


def new_registry() -> CollectorRegistry:
    """The replica's registry: every component's families plus the process's CPU, memory and
    file descriptors (what kubebuilder's dashboards chart), and no ``_created`` series
    (controller-runtime has none; prometheus_client would add one per counter and histogram)."""
    disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus_client
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    return registry


async def build(settings: Settings, rollout: RolloutOptions | None = None) -> App:
    registry = new_registry()
    access = await load_access(settings.kubeconfig, settings.context)
    identity = settings.identity or default_identity()
    client = KubeClient(
        access,
        registry=registry,
        user_agent=f"{COMPONENT}/{identity}",
        content_type=CONTENT_TYPES[settings.kube_api_content_type],
        watch_list=settings.watch_list,
    )
    client.open()
    try:
        return _assemble(settings, rollout, registry, client, identity)
    except BaseException:
        await client.close()  # nothing else owns it yet
        raise


def _assemble(
    settings: Settings,
    rollout: RolloutOptions | None,
    registry: CollectorRegistry,
    client: KubeClient,
    identity: str,
) -> App:
    leadership: LeaderElector | NoElection
    if settings.leader_elect:
        leadership = LeaderElector(
            client,
            LeaderElectionConfig(
                lease_namespace=settings.namespace,
                lease_name=settings.lease_name,
                identity=identity,
                lease_duration=settings.lease_duration,
                renew_deadline=settings.renew_deadline,
                retry_period=settings.retry_period,
            ),
            registry,
        )
    else:
        leadership = NoElection(settings.lease_name, registry, identity=identity)
    client.write_gate = LeaderGate(leadership)
    recorder = EventRecorder(client, COMPONENT, instance=identity)
    controller = LinkerdConfigController(
        client,
        recorder,
        config_namespace=settings.config_namespace,
        options=rollout or RolloutOptions.of(settings),
        workers=settings.workers,
    )
    manager = Manager(leadership)
    probes = Probes(registry)
    probes.ready_checks["informers-synced"] = manager.ready
    probes.live_checks["components"] = manager.alive
    app = App(settings, client, registry, manager, controller, recorder)
    if settings.metrics_address[1]:
        manager.add_server("metrics", _metrics_server(settings, client, probes))
    hhost, hport = settings.health_address
    if hport:
        manager.add_server(
            "health", lambda: serve(probes.health_app(), hhost, hport, name="health")
        )
    manager.add_server("events", recorder.run)
    # Counts waiting for their series interval, and Events queued, are written at a graceful
    # stop while this replica still leads (its writes allowed), before the Lease goes.
    manager.add_drain("events", recorder.flush)
    # Under election the elector's Lease requests and the Lease's renewals are the signs of
    # a live path; without it, a heartbeat request of the same period is.
    health = WatchHealth(
        client,
        settings.namespace,
        settings.lease_name,
        silence=settings.lease_duration + 2 * settings.retry_period,
        on_silence=client.renew_connections,
        heartbeat=None if settings.leader_elect else settings.retry_period,
        heartbeat_timeout=min(5.0, settings.lease_duration / 2),
        on_recovered=manager.retry_informers,
    )
    if health.informer is not None:
        manager.add_informer(health.informer)
    manager.add_server("watch-health", health.run)
    probes.ready_checks["watch-path"] = health.healthy
    app.watch_health = health
    if isinstance(leadership, LeaderElector):
        leadership.on_unreachable = lambda: health.suspect("a Lease request got no answer")
        # Refused (no `linkerd` namespace yet, say): no Lease to watch, but the path answers.
        leadership.on_answered = health.heard
    if settings.enable_webhooks:
        app.admission = _admission(settings, controller, registry)
        manager.add_server("webhooks", app.admission.run)
        probes.ready_checks["webhooks"] = app.admission.started.is_set
    elif _serves_conversion(settings, client):
        local = _local_conversion(settings, client, leadership, manager, registry)
        app.local_conversion = local
        # Ready once the leader's registration has an outcome; a follower (another process
        # leads, and registers) does not wait for one.
        probes.ready_checks["conversion"] = lambda: (
            local.settled.is_set() or (leadership.leader not in ("", leadership.identity))
        )
    on_demand = controller.informers_on_demand
    for informer in controller.informers:
        manager.add_informer(informer, on_demand=informer in on_demand)
    manager.add_controller(controller.controller, controller.config_names, controller.new_term)
    return app


SCRAPE_LIMITS = dataclasses.replace(
    LIMITS, per_source_rate=5.0, per_source_burst=10, pace_alone=True
)
"""``/metrics`` answers cost the most (about 5 ms of the one event loop each): past a burst of
10, one source gets 5 a second, alone or not (a flood of scrapes alone on this port would take
the loop from the other servers). A scraper asks every 15 s or so."""


def _metrics_server(
    settings: Settings, client: KubeClient, probes: Probes
) -> Callable[[], Awaitable[None]]:
    """Plain HTTP, or (``--metrics-secure``) HTTPS for callers the API server authenticates
    and RBAC allows, as kubebuilder v4 serves it."""
    host, port = settings.metrics_address
    if not settings.metrics_secure:
        return lambda: serve(probes.metrics_app(), host, port, name="metrics", limits=SCRAPE_LIMITS)
    # What serves only with HTTPS metrics, the webhooks or local conversion is imported when
    # asked for: a plain local run starts without it (cryptography alone is 17 ms, 8 MiB).
    from linkerd_config.kube.admission import ReloadingCertificate  # noqa: PLC0415
    from linkerd_config.kube.certs import self_signed_serving_pair  # noqa: PLC0415
    from linkerd_config.kube.delegated_auth import DelegatedAuth  # noqa: PLC0415

    certificate: ServingCertificate
    if settings.metrics_cert_dir:
        cert_dir = Path(settings.metrics_cert_dir)
        certificate = ReloadingCertificate(cert_dir / "tls.crt", cert_dir / "tls.key")
    else:
        pair = self_signed_serving_pair()
        certificate = InMemoryCertificate(pair.cert_pem, pair.key_pem)
    auth = DelegatedAuth(client)
    return lambda: serve_tls(
        probes.metrics_app(auth), host, port, certificate, name="metrics", limits=SCRAPE_LIMITS
    )


def _admission(
    settings: Settings, controller: LinkerdConfigController, registry: CollectorRegistry
) -> AdmissionServer:
    from linkerd_config.kube.admission import AdmissionServer, ReloadingCertificate  # noqa: PLC0415
    from linkerd_config.linkerd.admission.webhooks import register  # noqa: PLC0415

    cert_dir = Path(settings.webhook_cert_dir)
    host, port = settings.webhook_address
    server = AdmissionServer(
        host,
        port,
        ReloadingCertificate(cert_dir / "tls.crt", cert_dir / "tls.key"),
        registry=registry,
    )
    register(server, controller)
    return server


def _serves_conversion(settings: Settings, client: KubeClient) -> bool:
    if settings.serve_conversion == "auto":
        return client.access.source != "in-cluster"
    return settings.serve_conversion == "true"


def _local_conversion(
    settings: Settings,
    client: KubeClient,
    leadership: LeaderElector | NoElection,
    manager: Manager,
    registry: CollectorRegistry,
) -> LocalConversion:
    """With the webhooks off, outside the cluster: the CRD's conversion webhook served here,
    with a certificate made now, and registered on the CRD once this process leads (a CRD
    write); see ``kube/local_conversion.py``."""
    from linkerd_config.kube.admission import AdmissionServer  # noqa: PLC0415
    from linkerd_config.kube.certs import TinyCA  # noqa: PLC0415
    from linkerd_config.kube.local_conversion import (  # noqa: PLC0415
        LocalConversion,
        Refusal,
        Registration,
    )
    from linkerd_config.linkerd.admission.webhooks import convert_object  # noqa: PLC0415

    host, port = settings.webhook_address
    origin = settings.conversion_url
    # ":9443" (every interface) is for a pod; on a laptop, loopback unless a URL says where
    # the API server reaches us from.
    host = host or ("" if origin else "127.0.0.1")
    url_host = (origin.partition("://")[2].rpartition(":")[0] if origin else "127.0.0.1").strip(
        "[]"
    )
    # Valid as long as a local run may last (the default, a week, is the test CA's).
    ca = TinyCA("linkerd-config-local-conversion", datetime.timedelta(days=365))
    ips = ["127.0.0.1", "::1"]
    dns = ["localhost"]
    if url_host not in ips + dns:
        (ips if _is_ip(url_host) else dns).append(url_host)
    pair = ca.serving(dns, ips)
    server = AdmissionServer(
        host, port, InMemoryCertificate(pair.cert_pem, pair.key_pem), registry=registry
    )
    server.add_conversion(CONVERT_PATH, convert_object)
    local = LocalConversion(client)

    async def run() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(server.run(), name="conversion-server")
            await server.started.wait()
            base = origin or f"https://127.0.0.1:{server.bound_port}"
            registration = Registration(
                crd=str(LINKERD_CONFIGS_V1ALPHA1),  # the CRD's name: plural.group
                url=base + CONVERT_PATH,
                ca_pem=ca.cert_pem,
                refusal=Refusal(LINKERD_CONFIGS_V1ALPHA1.version, CONVERSION_REFUSAL),
                probe=CONVERSION_PROBE,
                probe_path=LINKERD_CONFIGS_V1ALPHA1.path(),
                marker=LOCAL_CONVERTER,
                unreachable_hint="set --conversion-url to an address the API server reaches, "
                "or install the controller in the cluster",
            )
            group.create_task(local.run(registration, leadership), name="registration")

    manager.add_server("conversion", run)
    return local


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


@contextlib.asynccontextmanager
async def running(app: App) -> AsyncIterator[asyncio.Event]:
    """Run the app in the background (tests, the demo); stop it on exit. A stop that
    outlasts the grace by far is cancelled and raises ``TimeoutError``; the client is
    closed either way."""
    stop = asyncio.Event()
    task = asyncio.create_task(app.manager.run(stop), name="manager")
    try:
        yield stop
    finally:
        stop.set()
        try:
            await asyncio.wait_for(task, app.manager.shutdown_grace + 10)
        finally:
            await app.client.close()


async def run(settings: Settings) -> int:
    """``linkerd-config run``: until SIGTERM or SIGINT, then a graceful stop."""
    app = await build(settings)
    # What importing and building made lives as long as the process: out of every garbage
    # collection from now on (a full one would otherwise walk it again and again while the
    # caches fill). Collection is off until here (``cli.main``): imports make no garbage.
    gc.freeze()
    gc.enable()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "starting",
        identity=settings.identity,
        cluster=app.client.access.source,
        webhooks=settings.enable_webhooks,
        leader_elect=settings.leader_elect,
        metrics_secure=settings.metrics_secure,
    )
    try:
        await app.manager.run(stop)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await app.client.close()
    return 0 if stop.is_set() else 1
