"""Layers a machine can check: the machinery never knows the domain, the domain never the
transport. (kopf's .importlinter, as a test.)"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "linkerd_config"


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def offenders(folder: str, forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    bad: dict[str, list[str]] = {}
    for path in sorted((PACKAGE / folder).rglob("*.py")):
        hits = sorted(m for m in imports_of(path) if m.startswith(forbidden))
        if hits:
            bad[str(path.relative_to(PACKAGE))] = hits
    return bad


def test_machinery_does_not_import_the_linkerd_domain() -> None:
    assert offenders("kube", ("linkerd_config.linkerd", "linkerd_config.devcluster")) == {}


def test_machinery_mentions_no_linkerd_names() -> None:
    mentions = {
        str(p.relative_to(PACKAGE)): n
        for p in (PACKAGE / "kube").rglob("*.py")
        if (n := p.read_text().lower().count("linkerd.io"))
    }
    assert mentions == {}


def test_domain_does_not_import_transport_or_machinery_internals() -> None:
    transport = ("aiohttp", "kubernetes_asyncio", "linkerd_config.kube.client",
                 "linkerd_config.kube.watch", "linkerd_config.kube.informer")  # fmt: skip
    # The domain's pure modules (formats, defaults, validation) must stay free of I/O.
    assert offenders("linkerd/formats", transport) == {}
    for pure in ("defaults.py", "validation.py"):
        path = PACKAGE / "linkerd" / pure
        if path.exists():
            assert not [m for m in imports_of(path) if m.startswith(transport)], pure
