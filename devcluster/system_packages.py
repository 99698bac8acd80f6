"""The Debian packages the tests need beside what is built from Go modules: the container
tools for the image tests, and a real node's parts (containerd, runc, iptables, the CNI
plugins). ``make binaries`` (so ``make test``) installs the missing ones with apt-get, as root
or through sudo, so that on a fresh Debian machine Python and Go are all the set-up there is;
elsewhere it says what is missing and the tests that need it fail saying so too."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from typing import Final

PACKAGES: Final = (
    # the image: build, run, and a Python base without a registry
    "podman", "buildah", "runc", "mmdebstrap", "fuse-overlayfs", "uidmap", "slirp4netns",
    "catatonit",
    # the real node
    "containernetworking-plugins", "containerd", "iptables", "conntrack", "gcc", "libc6-dev",
)  # fmt: skip
APT_TIMEOUT: Final = 1800.0


def missing(installed: Callable[[str], bool] | None = None) -> list[str]:
    check = installed or _installed
    return [name for name in PACKAGES if not check(name)]


def _installed(package: str) -> bool:
    done = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode == 0 and "install ok installed" in done.stdout


def install_command(packages: list[str], *, root: bool) -> list[list[str]]:
    """apt-get update, then install without recommends; through sudo unless root."""
    sudo = [] if root else ["sudo", "-n"]
    env = ["env", "DEBIAN_FRONTEND=noninteractive"]
    return [
        [*sudo, *env, "apt-get", "update", "-qq"],
        [*sudo, *env, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
    ]


def ensure(progress: Callable[[str], None] = print) -> list[str]:
    """Install what is missing; what is still missing afterwards (empty when all is there)."""
    if shutil.which("dpkg-query") is None or shutil.which("apt-get") is None:
        progress(f"not a Debian machine: the image and real-node tests need {', '.join(PACKAGES)}")
        return list(PACKAGES)
    wanted = missing()
    if not wanted:
        return []
    root = os.geteuid() == 0
    if not root and shutil.which("sudo") is None:
        progress(f"missing Debian packages (install them as root): {' '.join(wanted)}")
        return wanted
    progress(f"installing Debian packages: {' '.join(wanted)}")
    for command in install_command(wanted, root=root):
        done = subprocess.run(command, timeout=APT_TIMEOUT, check=False)
        if done.returncode != 0:
            progress(f"{' '.join(command)} failed (exit code {done.returncode})")
            break
    return missing()
