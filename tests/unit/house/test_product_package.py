"""The product ships only the product (issue 38): the wheel built from this checkout, as the
Dockerfile builds it, holds the controller's package and nothing of the development cluster
(``devcluster/``: code that builds Kubernetes and runs a kubelet), and installs only the
product's commands."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def checkout(into: Path) -> Path:
    """The files of this checkout git would commit (tracked or new, not ignored), copied:
    a build leaves ``build/`` behind, which must not land in the working tree."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True, timeout=60,
    )  # fmt: skip
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def test_the_wheel_holds_the_controller_and_no_development_cluster(tmp_path: Path) -> None:
    source = checkout(tmp_path / "src")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
         "--wheel-dir", str(tmp_path / "wheels"), str(source)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "wheels").glob("linkerd_config-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = archive.read(
            next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        ).decode()
    tops = {name.split("/", 1)[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"linkerd_config"}, tops
    assert "linkerd_config/app.py" in names and "linkerd_config/cli.py" in names
    assert not [n for n in names if "devcluster" in n or n.endswith(".go")]
    scripts = configparser.ConfigParser()
    scripts.read_string(entry_points)
    assert set(scripts["console_scripts"]) == {
        "linkerd-config",
        "kubectl-linkerd_config",
        "kubectl_complete-linkerd_config",
    }
