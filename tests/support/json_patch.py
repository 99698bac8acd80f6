"""RFC 6902 JSON patch, as the API server applies it (add, remove, replace, test), for unit
tests of patches the product computes: a failed ``test`` raises, as the server answers 422."""

from __future__ import annotations

import copy
from typing import Any


class PatchTestFailed(ValueError):
    pass


def _parent(doc: Any, pointer: str) -> tuple[Any, str]:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]
    node = doc
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node, parts[-1]


def _get(doc: Any, pointer: str) -> Any:
    node, last = _parent(doc, pointer)
    return node[int(last)] if isinstance(node, list) else node[last]


def apply(doc: Any, ops: list[dict[str, Any]]) -> Any:
    doc = copy.deepcopy(doc)
    for op in ops:
        kind, path = op["op"], op["path"]
        if kind == "test":
            try:
                found = _get(doc, path)
            except (KeyError, IndexError) as exc:
                raise PatchTestFailed(f"{path}: absent") from exc
            if found != op["value"]:
                raise PatchTestFailed(f"{path}: {found!r} != {op['value']!r}")
            continue
        node, last = _parent(doc, path)
        if kind == "remove":
            del node[int(last) if isinstance(node, list) else last]
        elif kind == "replace":
            _get(doc, path)  # must exist
            node[int(last) if isinstance(node, list) else last] = copy.deepcopy(op["value"])
        elif kind == "add":
            if isinstance(node, list):
                node.insert(len(node) if last == "-" else int(last), copy.deepcopy(op["value"]))
            else:
                node[last] = copy.deepcopy(op["value"])
        else:
            raise ValueError(f"unsupported op {kind}")
    return doc
