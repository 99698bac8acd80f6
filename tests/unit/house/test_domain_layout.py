"""``linkerd/`` reads top-down, at two scales. Its modules have no import cycle, counting the
imports made inside functions (which import-linter's layers see too, but a cycle hidden that
way still means two modules each need the other). Its rooms (a package, or a module at the
top: ``mesh``, ``caches``, ``reconciler``) have none either, and stand on at most 9 floors
(the longest chain of imports between rooms); import-linter's layers contract
(``pyproject.toml``) pins their order. The counts are printed for the notes:
``pytest -s tests/unit/house/test_domain_layout.py``."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
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


MAX_FLOORS = 9


def _floors(graph: dict[str, set[str]]) -> int:
    @cache
    def floor(node: str) -> int:
        return 1 + max((floor(d) for d in graph[node]), default=0)

    return max(map(floor, graph))


def _rooms(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph at package scale: each module stands for its room, the first name
    under ``linkerd/`` (``__init__`` stands apart: it is the house's own door)."""
    prefix = "linkerd_config.linkerd."

    def room(module: str) -> str:
        return module.removeprefix(prefix).split(".")[0] if module.startswith(prefix) else ""

    rooms: dict[str, set[str]] = {}
    for module, imported in graph.items():
        if (here := room(module)) == "":
            continue
        rooms.setdefault(here, set()).update(
            there for there in map(room, imported) if there not in ("", here)
        )
    return rooms


def test_the_domain_has_no_import_cycle() -> None:
    graph = _graph()
    assert _cycle(graph) is None
    arrows = sum(len(d) for d in graph.values())
    print(f"linkerd/: {len(graph)} modules, {arrows} arrows, {_floors(graph)} floors")


def test_the_rooms_stand_on_at_most_nine_floors_with_no_cycle() -> None:
    rooms = _rooms(_graph())
    assert _cycle(rooms) is None
    floors = _floors(rooms)
    arrows = sum(len(d) for d in rooms.values())
    print(f"linkerd/ rooms: {len(rooms)} rooms, {arrows} arrows, {floors} floors")
    assert floors <= MAX_FLOORS, rooms


def test_the_room_scale_counts_what_it_should() -> None:
    graph = {
        "linkerd_config.linkerd.a.x": {"linkerd_config.linkerd.a.y", "linkerd_config.linkerd.b"},
        "linkerd_config.linkerd.a.y": set(),
        "linkerd_config.linkerd.b": {"linkerd_config.linkerd.c.z"},
        "linkerd_config.linkerd.c.z": set(),
    }
    assert _rooms(graph) == {"a": {"b"}, "b": {"c"}, "c": set()}
    assert _floors(_rooms(graph)) == 3


def test_the_cycle_finder_finds_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
