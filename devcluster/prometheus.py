"""A real Prometheus on loopback, scraping given targets every second: for tests that prove a
dashboard's queries return data and alerting rules evaluate, and for looking at the
controller's metrics by hand.

The binaries are found or built like the control plane's (``binaries.ensure_prometheus``:
``$PROMETHEUS`` / ``$PROMTOOL``, else the pinned release built from its Go module and cached).
It runs as a ``ManagedProcess`` (its own session, killed with us), on a free port, with a
generated configuration (rule files, if given, are evaluated at the scrape interval) and a
data folder that ``stop`` removes.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devcluster.binaries import BinaryUnavailableError, ensure_prometheus
from devcluster.cluster import LOOPBACK, free_port
from devcluster.processes import ManagedProcess

Json = dict[str, Any]


class PrometheusError(RuntimeError):
    """Prometheus is missing, did not start, or refused a query; the message says which."""


@dataclass(frozen=True)
class ScrapeJob:
    """One ``static_configs`` scrape job: ``targets`` are ``host:port``; ``labels`` are added
    to every series scraped from them (as service discovery would add ``namespace``, ``pod``)."""

    name: str
    targets: Sequence[str]
    labels: Mapping[str, str] = field(default_factory=dict)
    metrics_path: str = "/metrics"


def find_prometheus(binary: str | Path | None = None) -> Path:
    """``binary``, else ``$PROMETHEUS``, else the pinned build; or a clear error."""
    return Path(binary) if binary else _ensure("prometheus")


def find_promtool(binary: str | Path | None = None) -> Path:
    """``promtool`` (rules checked and unit-tested by Prometheus's own rule engine):
    ``binary``, else ``$PROMTOOL`` (or the one beside ``$PROMETHEUS``), else the pinned build;
    or a clear error."""
    return Path(binary) if binary else _ensure("promtool")


def _ensure(name: str) -> Path:
    try:
        return ensure_prometheus()[name]
    except BinaryUnavailableError as exc:
        raise PrometheusError(str(exc)) from exc


def render_config(
    jobs: Sequence[ScrapeJob], scrape_interval: float, rule_files: Sequence[Path] = ()
) -> str:
    """The configuration file (JSON is YAML): one static job per ``ScrapeJob``; rules (if
    any) evaluated as often as targets are scraped."""
    interval = f"{round(scrape_interval * 1000)}ms"
    config = {
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "evaluation_interval": interval,
        },
        "rule_files": [str(Path(f).resolve()) for f in rule_files],
        "scrape_configs": [
            {
                "job_name": job.name,
                "metrics_path": job.metrics_path,
                "static_configs": [{"targets": list(job.targets), "labels": dict(job.labels)}],
            }
            for job in jobs
        ],
    }
    return json.dumps(config, indent=2)


@dataclass
class Prometheus:
    """Start with ``start()`` (or ``with``); ``query`` the HTTP API; ``stop()`` removes all."""

    jobs: Sequence[ScrapeJob]
    scrape_interval: float = 1.0
    rule_files: Sequence[Path] = ()
    """Prometheus rules files (``groups:``) to load; a file it cannot load fails ``start``."""
    binary: str | Path | None = None
    start_timeout: float = 30.0
    stop_grace: float = 10.0
    """Seconds between SIGTERM and SIGKILL."""
    port: int = field(init=False, default=0)
    workdir: Path = field(init=False)
    _process: ManagedProcess | None = field(init=False, default=None)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def __enter__(self) -> Prometheus:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        binary = find_prometheus(self.binary)
        self.workdir = Path(tempfile.mkdtemp(prefix="linkerd-config-prometheus-"))
        try:
            config = self.workdir / "prometheus.yml"
            config.write_text(render_config(self.jobs, self.scrape_interval, self.rule_files))
            self.port = free_port()
            self._process = ManagedProcess(
                "prometheus",
                [
                    str(binary),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    "--storage.tsdb.retention.time=1d",
                    f"--web.listen-address={LOOPBACK}:{self.port}",
                    "--log.level=warn",
                ],
                self.workdir / "prometheus.log",
            )
            self._process.start()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """SIGTERM, SIGKILL after ``stop_grace``; then remove the data and the config."""
        if self._process is not None:
            self._process.stop(self.stop_grace)
            self._process = None
        if hasattr(self, "workdir"):
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            if not self._process.running():
                raise PrometheusError(
                    f"prometheus exited with code {self._process.exit_code()} at start; its log "
                    f"ends:\n{self._process.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (OSError, urllib.error.URLError) as exc:
                last = str(exc)
            time.sleep(0.1)
        raise PrometheusError(
            f"prometheus not ready after {self.start_timeout:.0f}s (last error: {last}); its "
            f"log ends:\n{self._process.log_tail()}"
        )

    # -- the HTTP API ------------------------------------------------------------------------

    def api(self, path: str, params: Mapping[str, str | Sequence[str]]) -> Any:
        """GET ``/api/v1/<path>``; the ``data`` of a success, else PrometheusError with the
        server's own error (a query's parse error, say)."""
        query = urllib.parse.urlencode(
            [(k, v) for k, vs in params.items() for v in ([vs] if isinstance(vs, str) else vs)]
        )
        url = f"{self.url}/api/v1/{path}?{query}"
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            try:
                body = json.loads(exc.read())
            except ValueError:
                raise PrometheusError(f"{path}: HTTP {exc.code}") from exc
        if body.get("status") != "success":
            raise PrometheusError(
                f"{path} {dict(params)}: {body.get('errorType')}: {body.get('error')}"
            )
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[Json]:
        """An instant query (``/api/v1/query``): the result's series (vector) or a scalar's
        one-element list."""
        params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        data = self.api("query", params)
        result = data["result"]
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": result}]
        return list(result)

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Json]:
        """A range query (``/api/v1/query_range``), as a Grafana time-series panel asks."""
        data = self.api(
            "query_range",
            {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step}"},
        )
        return list(data["result"])

    def label_values(self, label: str, match: str | None = None) -> list[str]:
        """A label's values (``/api/v1/label/<label>/values``), optionally among the series
        ``match`` selects: what Grafana's ``label_values(match, label)`` variable asks."""
        params = {"match[]": match} if match else {}
        values: list[str] = self.api(f"label/{urllib.parse.quote(label)}/values", params)
        return values

    def targets(self) -> list[Json]:
        """The active scrape targets with their health and last error."""
        active: list[Json] = self.api("targets", {"state": "active"})["activeTargets"]
        return active

    def rule_groups(self) -> list[Json]:
        """The loaded rule groups (``/api/v1/rules``), each rule with its ``health``
        ("ok", "err" with ``lastError``, "unknown" before its first evaluation) and, for an
        alerting rule, its ``state`` and active ``alerts``."""
        groups: list[Json] = self.api("rules", {})["groups"]
        return groups

    def alerts(self) -> list[Json]:
        """The active alerts (``/api/v1/alerts``): pending (``for`` not yet over) or firing."""
        active: list[Json] = self.api("alerts", {})["alerts"]
        return active

    def wait_scraped(self, job: str, timeout: float = 30.0) -> None:
        """Until every target of ``job`` has been scraped successfully at least once."""
        deadline = time.monotonic() + timeout
        state: list[Json] = []
        while time.monotonic() < deadline:
            state = [t for t in self.targets() if t["labels"].get("job") == job]
            if state and all(t["health"] == "up" for t in state):
                return
            time.sleep(0.2)
        seen = [(t["scrapeUrl"], t["health"], t.get("lastError")) for t in state]
        raise PrometheusError(f"job {job} not scraped within {timeout:.0f}s: {seen}")
