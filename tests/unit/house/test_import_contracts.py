"""The import-linter contracts in pyproject.toml hold, and they catch the breaks a hand-written
list of direct imports let through: each is made in a scratch copy of the package and must
break exactly the contract that forbids it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
LAYERS = "which knows neither"
PURE = "never reach HTTP, watches, caches or events"
DEVELOPMENT = "the wheel and the image do not ship)"
ROOMS = "and rollout and trust not each other"


def lint_imports(root: Path) -> str:
    done = subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return " ".join((done.stdout + done.stderr).split())


def test_the_package_keeps_every_contract() -> None:
    out = lint_imports(REPO)
    assert "Contracts: 4 kept, 0 broken." in out, out


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        # the domain's defaults imported into the machinery's store
        (
            "kube/store.py",
            "from linkerd_config.linkerd.admission.defaults import defaulted",
            LAYERS,
        ),
        # the command's settings imported into the machinery
        ("kube/metrics.py", "from linkerd_config import settings", LAYERS),
        # a pure module reaching the HTTP client only transitively (serving -> aiohttp)
        ("linkerd/mesh.py", "from linkerd_config.kube import serving", PURE),
        # validation recording Events
        (
            "linkerd/admission/validation.py",
            "from linkerd_config.kube.events import EventRecorder",
            PURE,
        ),
        # the product reaching the development cluster (which its wheel does not ship)
        ("inspection.py", "from devcluster.addons import ADDONS", DEVELOPMENT),
        # the mesh vocabulary, at the bottom, reaching up into the rollout
        ("linkerd/mesh.py", "from linkerd_config.linkerd.rollout import phase", ROOMS),
        # the trust guard and the rollout, side by side, one importing the other
        ("linkerd/trust/guard.py", "from linkerd_config.linkerd.rollout import record", ROOMS),
    ],
    ids=[
        "domain-in-store",
        "settings-in-kube",
        "pure-reaches-http",
        "validation-events",
        "product-reaches-devcluster",
        "mesh-reaches-up",
        "trust-imports-rollout",
    ],
)
def test_a_layering_break_is_caught(tmp_path: Path, module: str, line: str, broken: str) -> None:
    for package in ("linkerd_config", "devcluster"):
        shutil.copytree(REPO / package, tmp_path / package)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "linkerd_config" / module
    source = target.read_text()
    marker = "from __future__ import annotations\n"
    assert marker in source
    target.write_text(source.replace(marker, f"{marker}{line}\n", 1))
    out = lint_imports(tmp_path)
    assert f"{broken} BROKEN" in out, out
    # Exactly that one; reaching the development cluster also breaks the layers (it is no
    # layer of the product's).
    assert (
        "Contracts: 2 kept, 2 broken." if broken == DEVELOPMENT else "Contracts: 3 kept, 1 broken."
    ) in out, out


def test_the_machinery_mentions_no_linkerd_names() -> None:
    """Imports are the contracts' job; this catches Linkerd's names pasted into kube/."""
    kube = REPO / "linkerd_config" / "kube"
    mentions = {
        str(p.relative_to(kube)): n
        for p in kube.rglob("*.py")
        if (n := p.read_text().lower().count("linkerd.io"))
    }
    assert mentions == {}
