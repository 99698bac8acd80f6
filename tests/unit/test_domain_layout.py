"""``linkerd/`` reads top-down: no import cycle among its modules, counting the imports made
inside functions (which import-linter's layers see too, but a cycle hidden that way still
means two modules each need the other). The floors (the longest chain of imports) are
printed for the notes: ``pytest -s tests/unit/test_domain_layout.py``."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOMAIN = ROOT / "linkerd_config" / "linkerd"


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in DOMAIN.rglob("*.py"):
        if "__pycache__" in path.parts or path.name.endswith("_pb2.py"):
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        found[name] = path
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            graph[name] |= {
                t for t in targets if t in modules and t != name and not name.startswith(f"{t}.")
            }
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, or None (depth-first, colouring modules on the current path)."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        path.append(module)
        for imported in sorted(graph[module]):
            if (found := visit(imported)) is not None:
                return found
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        if (found := visit(module)) is not None:
            return found
    return None


def test_the_domain_has_no_import_cycle() -> None:
    graph = _graph()
    assert _cycle(graph) is None

    @cache
    def floor(module: str) -> int:
        return 1 + max((floor(d) for d in graph[module]), default=0)

    arrows = sum(len(d) for d in graph.values())
    print(f"linkerd/: {len(graph)} modules, {arrows} arrows, {max(map(floor, graph))} floors")


def test_the_cycle_finder_finds_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
