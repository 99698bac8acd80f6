"""Which fields of an object a transform reads: a tree of JSON names, so a decoder can build
only those (``protobuf_wire``) and a test can check the transform needs nothing else.

A tree node is ``None`` (the whole value), ``DROP`` (left out), or a mapping from JSON name to
node: only the named fields. In a mapping, ``"*"`` stands for every field not named. Under an
object's map field (labels, annotations) the names are keys of the map.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

Json = dict[str, Any]


class _Drop:
    def __repr__(self) -> str:
        return "DROP"


DROP: Final = _Drop()
OTHERS: Final = "*"

Node = Mapping[str, Any] | None | _Drop
"""``Mapping[str, Node]``; mypy cannot spell the recursion."""

FieldTree = Mapping[str, Any]

EVERYTHING_BUT_MANAGED_FIELDS: FieldTree = {
    OTHERS: None,
    "metadata": {OTHERS: None, "managedFields": DROP},
}
"""What the informers' default transform keeps: managedFields is often half an object."""

IDENTITY_FIELDS: tuple[tuple[str, ...], ...] = (
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "uid"),
    ("metadata", "resourceVersion"),
)
"""Every informer needs these, for keys and change detection."""


def tree_of(*paths: str | Sequence[str]) -> dict[str, Any]:
    """A tree keeping each path (dotted, or a sequence of names for names holding dots)
    whole, plus ``IDENTITY_FIELDS``; a path under one kept whole adds nothing."""
    tree: dict[str, Any] = {}
    for path in (*IDENTITY_FIELDS, *paths):
        steps = tuple(path.split(".")) if isinstance(path, str) else tuple(path)
        if not steps or any(not s for s in steps):
            raise ValueError(f"bad field path {path!r}")
        node = tree
        for step in steps[:-1]:
            child = node.setdefault(step, {})
            if child is None:  # an ancestor is already kept whole
                break
            node = child
        else:
            node[steps[-1]] = None  # keep whole; replaces any narrower selection
    return tree


def project(value: Any, node: Node) -> Any:
    """``value`` (decoded JSON) cut to ``node``: what a decoder guided by the tree yields.
    A list of objects is cut item by item; a scalar under a narrower node is kept as is."""
    if node is None or isinstance(node, _Drop):
        return value
    if isinstance(value, list):
        return [project(item, node) for item in value]
    if not isinstance(value, dict):
        return value
    others = node.get(OTHERS, DROP)
    out: Json = {}
    for key, child in value.items():
        sub = node.get(key, others)
        if not isinstance(sub, _Drop):
            out[key] = project(child, sub)
    return out


Transform = Callable[[Json], Json]


def reads(*paths: str | Sequence[str]) -> Callable[[Transform], Transform]:
    """Declare the fields a transform reads (``field_tree.tree_of`` of ``paths``): a decoder
    may then build only those. The transform must give the same answer on the object cut to
    them as on the whole object; tests check each against real objects."""
    tree = tree_of(*paths)

    def declare(transform: Transform) -> Transform:
        transform.fields_read = tree  # type: ignore[attr-defined]
        return transform

    return declare


def fields_read(transform: Transform | None) -> FieldTree | None:
    """The tree a transform declared, or None: the whole object (no transform, or one that
    declared nothing, reads everything)."""
    if transform is None:
        return None
    tree = getattr(transform, "fields_read", None)
    return tree if isinstance(tree, Mapping) else None
