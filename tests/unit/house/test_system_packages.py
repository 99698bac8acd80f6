"""make test's own installation of the Debian packages it needs (what .ci/run did alone)."""

from __future__ import annotations

import pytest

from devcluster import system_packages
from devcluster.system_packages import PACKAGES, ensure, install_command, missing


def test_what_is_missing_is_what_is_not_installed() -> None:
    assert missing(lambda name: name != "podman") == ["podman"]
    assert missing(lambda _name: True) == []


def test_the_image_and_the_real_node_parts_are_listed() -> None:
    assert {"podman", "buildah", "mmdebstrap", "containerd", "runc", "iptables"} <= set(PACKAGES)
    assert "prometheus" not in PACKAGES  # built from its Go module


@pytest.mark.parametrize(("root", "prefix"), [(True, []), (False, ["sudo", "-n"])])
def test_apt_get_as_root_or_through_sudo(root: bool, prefix: list[str]) -> None:
    update, install = install_command(["podman", "runc"], root=root)
    env = ["env", "DEBIAN_FRONTEND=noninteractive"]
    assert update == [*prefix, *env, "apt-get", "update", "-qq"]
    assert install == [*prefix, *env, "apt-get", "install", "-y", "-qq",
                       "--no-install-recommends", "podman", "runc"]  # fmt: skip


def test_not_debian_says_so_and_installs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    monkeypatch.setattr(system_packages.shutil, "which", lambda _name: None)
    assert ensure(said.append) == list(PACKAGES)
    assert said and "not a Debian machine" in said[0]


def test_nothing_missing_runs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(system_packages.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(system_packages, "_installed", lambda _name: True)

    def no_run(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("nothing to install, nothing run")

    monkeypatch.setattr(system_packages.subprocess, "run", no_run)
    assert ensure(lambda _line: None) == []
