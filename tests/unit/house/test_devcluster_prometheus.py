"""The dev Prometheus's parts that need no binary: finding it and promtool (given, cached, or
built from the pinned Go module), and the configuration it is started with. Starting and
querying it, and the rules it evaluates, are tested in tests/integration/test_dashboard.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from devcluster import binaries, pinned
from devcluster.prometheus import (
    PrometheusError,
    ScrapeJob,
    find_prometheus,
    find_promtool,
    render_config,
)


def executable(path: Path) -> Path:
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty cache and no binaries given."""
    monkeypatch.setenv("LINKERD_CONFIG_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PROMETHEUS", raising=False)
    monkeypatch.delenv("PROMTOOL", raising=False)
    return tmp_path / "cache"


def test_an_explicit_binary_comes_first(cache: Path, tmp_path: Path) -> None:
    binary = executable(tmp_path / "prometheus")
    assert find_prometheus(binary) == binary


def test_prometheus_given_brings_the_promtool_beside_it(
    cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    server, tool = executable(tmp_path / "prometheus"), executable(tmp_path / "promtool")
    monkeypatch.setenv("PROMETHEUS", str(server))
    assert find_prometheus() == server and find_promtool() == tool
    other = executable(tmp_path / "my-promtool")
    monkeypatch.setenv("PROMTOOL", str(other))
    assert find_promtool() == other


def test_what_is_cached_is_used_without_a_build(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = binaries.prometheus_bin_dir()
    folder.mkdir(parents=True)
    built = {name: executable(folder / name) for name in binaries.PROMETHEUS_BINARIES}
    monkeypatch.setattr(binaries.shutil, "which", lambda _name: None)  # no Go: no build
    assert find_prometheus() == built["prometheus"] and find_promtool() == built["promtool"]
    assert folder.parent.name == f"prometheus-v{pinned.PROMETHEUS}"  # a bump builds afresh


def test_nothing_given_or_cached_and_no_go_says_what_to_do(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(binaries.shutil, "which", lambda _name: None)
    with pytest.raises(PrometheusError, match=r"no Go toolchain.*set PROMETHEUS"):
        find_prometheus()


def test_the_module_version_of_the_pinned_release() -> None:
    assert binaries.prometheus_module_version() == "v0." + pinned.PROMETHEUS.split(".", 1)[1]


def test_prometheus_own_replace_and_exclude_directives_are_copied() -> None:
    own = """module github.com/prometheus/prometheus

go 1.21.0

require (
\tgithub.com/a/b v1.0.0
)

replace (
\tk8s.io/klog => github.com/simonpasquier/klog-gokit v0.3.0
\tk8s.io/klog/v2 => github.com/simonpasquier/klog-gokit/v3 v3.3.0
)

// Exclude linodego v1.0.0 as it is no longer published on github.
exclude github.com/linode/linodego v1.0.0

exclude (
\tgoogle.golang.org/api v0.30.0
)
"""
    assert binaries._go_mod_blocks(own, ("replace", "exclude")) == (
        "replace (\n"
        "\tk8s.io/klog => github.com/simonpasquier/klog-gokit v0.3.0\n"
        "\tk8s.io/klog/v2 => github.com/simonpasquier/klog-gokit/v3 v3.3.0\n"
        ")\n"
        "exclude github.com/linode/linodego v1.0.0\n"
        "exclude (\n"
        "\tgoogle.golang.org/api v0.30.0\n"
        ")\n"
    )


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
