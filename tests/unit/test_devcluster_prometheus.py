"""The dev Prometheus's parts that need no binary: finding it (or saying how to install it),
and the configuration it is started with. Starting and querying it is tested in
tests/integration/test_dashboard.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from linkerd_config.devcluster import prometheus
from linkerd_config.devcluster.prometheus import (
    PrometheusError,
    ScrapeJob,
    find_prometheus,
    render_config,
)


def test_a_missing_binary_says_which_package_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(prometheus.shutil, "which", lambda _name: None)
    monkeypatch.setattr(prometheus, "DEFAULT_BINARY", tmp_path / "prometheus")
    with pytest.raises(PrometheusError, match="apt-get install prometheus"):
        find_prometheus()


def test_an_explicit_binary_comes_first(tmp_path: Path) -> None:
    binary = tmp_path / "prometheus"
    binary.write_text("")
    assert find_prometheus(binary) == binary


def test_the_config_scrapes_each_static_job_at_the_interval() -> None:
    config = yaml.safe_load(
        render_config(
            [
                ScrapeJob("linkerd/linkerd-config", ["127.0.0.1:8080"], {"namespace": "linkerd"}),
                ScrapeJob("other", ["127.0.0.1:9090", "127.0.0.1:9091"], metrics_path="/m"),
            ],
            scrape_interval=1.0,
        )
    )
    assert config["global"] == {"scrape_interval": "1000ms", "scrape_timeout": "1000ms"}
    first, second = config["scrape_configs"]
    assert first == {
        "job_name": "linkerd/linkerd-config",
        "metrics_path": "/metrics",
        "static_configs": [{"targets": ["127.0.0.1:8080"], "labels": {"namespace": "linkerd"}}],
    }
    assert second["metrics_path"] == "/m"
    assert second["static_configs"][0]["targets"] == ["127.0.0.1:9090", "127.0.0.1:9091"]
