"""Metric families with controller-runtime's names, labels and buckets.

Dashboards and alerts written for Go controllers work unchanged. Every family lives in one
registry we own (not the process-global default), so tests can run several managers side by
side; each component pre-creates its label values at start-up so every series exists from
the first scrape instead of appearing on first use.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# controller-runtime pkg/internal/controller/metrics: reconcile time buckets.
RECONCILE_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7,
    0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15,
    20, 25, 30, 40, 50, 60,
)  # fmt: skip
# controller-runtime pkg/metrics/workqueue.go: ExponentialBuckets(10e-9, 10, 12).
WORKQUEUE_BUCKETS = tuple(1e-8 * 10**i for i in range(12))
# client-go/component-base rest client latency buckets.
REST_LATENCY_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

RECONCILE_RESULTS = ("success", "error", "requeue", "requeue_after")


@dataclass
class Metrics:
    """Every family the machinery reports; one instance per manager."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ["controller", "result"],
            registry=r,
        )
        self.reconcile_errors = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            ["controller"],
            registry=r,
        )
        self.reconcile_panics = Counter(
            "controller_runtime_reconcile_panics_total",
            "Total number of reconciliation panics per controller",
            ["controller"],
            registry=r,
        )
        self.reconcile_time = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            ["controller"],
            buckets=RECONCILE_BUCKETS,
            registry=r,
        )
        self.max_concurrent_reconciles = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            ["controller"],
            registry=r,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            ["controller"],
            registry=r,
        )
        self.workqueue_depth = Gauge(
            "workqueue_depth", "Current depth of workqueue", ["name", "controller"], registry=r
        )
        self.workqueue_adds = Counter(
            "workqueue_adds_total",
            "Total number of adds handled by workqueue",
            ["name", "controller"],
            registry=r,
        )
        self.workqueue_queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            ["name", "controller"],
            buckets=WORKQUEUE_BUCKETS,
            registry=r,
        )
        self.workqueue_work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            ["name", "controller"],
            buckets=WORKQUEUE_BUCKETS,
            registry=r,
        )
        self.workqueue_unfinished_work = Gauge(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been "
            "observed by work_duration",
            ["name", "controller"],
            registry=r,
        )
        self.workqueue_longest_running = Gauge(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running",
            ["name", "controller"],
            registry=r,
        )
        self.workqueue_retries = Counter(
            "workqueue_retries_total",
            "Total number of retries handled by workqueue",
            ["name", "controller"],
            registry=r,
        )
        self.leader_status = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
            "backup, 1 indicates master. 'name' is the string used to identify the lease.",
            ["name"],
            registry=r,
        )
        self.rest_requests = Counter(
            "rest_client_requests_total",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            ["code", "method", "host"],
            registry=r,
        )
        self.rest_latency = Histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            ["verb", "host"],
            buckets=REST_LATENCY_BUCKETS,
            registry=r,
        )
        self.informer_cache_objects = Gauge(
            "informer_cache_objects",
            "Number of objects in an informer's local cache",
            ["resource"],
            registry=r,
        )
        self.informer_events = Counter(
            "informer_watch_events_total",
            "Watch events received by an informer, by type",
            ["resource", "type"],
            registry=r,
        )
        self.informer_relists = Counter(
            "informer_relists_total",
            "Full relists of an informer (start-up, 410 Gone, or unrecoverable watch errors)",
            ["resource"],
            registry=r,
        )

        # controller-runtime pkg/webhook/internal/metrics.
        self.webhook_requests = Counter(
            "controller_runtime_webhook_requests_total",
            "Total number of admission requests by HTTP status code.",
            ["webhook", "code"],
            registry=r,
        )
        self.webhook_latency = Histogram(
            "controller_runtime_webhook_latency_seconds",
            "Histogram of the latency of processing admission requests",
            ["webhook"],
            registry=r,
        )
        self.webhook_in_flight = Gauge(
            "controller_runtime_webhook_requests_in_flight",
            "Current number of admission requests being served.",
            ["webhook"],
            registry=r,
        )

    def register_webhook(self, path: str) -> None:
        self.webhook_latency.labels(path)
        self.webhook_in_flight.labels(path).set(0)
        self.webhook_requests.labels(path, "200")

    def register_controller(self, controller: str, workers: int) -> None:
        """Create every per-controller series now, so the first scrape already shows them."""
        for result in RECONCILE_RESULTS:
            self.reconcile_total.labels(controller, result)
        self.reconcile_errors.labels(controller)
        self.reconcile_panics.labels(controller)
        self.reconcile_time.labels(controller)
        self.max_concurrent_reconciles.labels(controller).set(workers)
        self.active_workers.labels(controller).set(0)
        self.register_queue(controller)

    def register_queue(self, name: str) -> None:
        for family in (
            self.workqueue_depth,
            self.workqueue_adds,
            self.workqueue_queue_duration,
            self.workqueue_work_duration,
            self.workqueue_unfinished_work,
            self.workqueue_longest_running,
            self.workqueue_retries,
        ):
            family.labels(name, name)
