"""The dev Prometheus's parts that need no binary: finding it and promtool (or saying how to
install them), and the configuration it is started with. Starting and querying it, and the
rules it evaluates, are tested in tests/integration/test_dashboard.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from linkerd_config.devcluster import prometheus
from linkerd_config.devcluster.prometheus import (
    PrometheusError,
    ScrapeJob,
    find_prometheus,
    find_promtool,
    render_config,
)


def test_a_missing_binary_says_which_package_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(prometheus.shutil, "which", lambda _name: None)
    monkeypatch.setattr(prometheus, "DEFAULT_BINARY", tmp_path / "prometheus")
    with pytest.raises(PrometheusError, match="apt-get install prometheus"):
        find_prometheus()


def test_a_missing_promtool_says_which_package_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(prometheus.shutil, "which", lambda _name: None)
    monkeypatch.setattr(prometheus, "DEFAULT_PROMTOOL", tmp_path / "promtool")
    with pytest.raises(PrometheusError, match=r"no promtool binary.*apt-get install prometheus"):
        find_promtool()


def test_promtool_is_looked_up_by_its_own_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("prometheus", "promtool"):
        (tmp_path / name).write_text("")
    monkeypatch.setattr(prometheus.shutil, "which", lambda name: str(tmp_path / name))
    assert find_promtool() == tmp_path / "promtool"
    assert find_prometheus() == tmp_path / "prometheus"


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
    assert config["global"] == {
        "scrape_interval": "1000ms",
        "scrape_timeout": "1000ms",
        "evaluation_interval": "1000ms",
    }
    assert config["rule_files"] == []
    first, second = config["scrape_configs"]
    assert first == {
        "job_name": "linkerd/linkerd-config",
        "metrics_path": "/metrics",
        "static_configs": [{"targets": ["127.0.0.1:8080"], "labels": {"namespace": "linkerd"}}],
    }
    assert second["metrics_path"] == "/m"
    assert second["static_configs"][0]["targets"] == ["127.0.0.1:9090", "127.0.0.1:9091"]


def test_rule_files_are_loaded_by_absolute_path_and_evaluated_at_the_scrape_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prometheus resolves a relative rule file against its config's folder, a temporary one:
    the path must be absolute, whatever the caller's working directory."""
    (tmp_path / "alerts.yml").write_text("groups: []\n")
    monkeypatch.chdir(tmp_path)
    config = yaml.safe_load(
        render_config([ScrapeJob("x", ["127.0.0.1:1"])], 0.5, [Path("alerts.yml")])
    )
    assert config["rule_files"] == [str(tmp_path / "alerts.yml")]
    assert config["global"]["evaluation_interval"] == "500ms"
