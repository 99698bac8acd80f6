"""The informer's cache: objects by key, plus named secondary indexes kept exact on every write.

Modelled on client-go's ``threadSafeMap`` + ``storeIndex``: an index maps an *index value*
(a namespace, an owner's uid, a phase, ...) to the set of object keys filed under it, so
"every pod owned by X" is a dictionary lookup instead of a scan. Everything here runs on one
asyncio event loop, so there are no locks; no method awaits, so no caller ever observes a
half-applied write.

Cached dicts are shared with every reader and handler: treat them as read-only. The store
remembers which values it filed each key under, so even an object mutated in place by a
careless reader is un-filed correctly on its next update or delete.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from linkerd_config.kube.resource import Json, object_key

IndexFunc = Callable[[Json], Iterable[str]]
KeyFunc = Callable[[Json], str]


class Store:
    """Objects by ``namespace/name`` with any number of named indexes."""

    def __init__(self, key_fn: KeyFunc = object_key) -> None:
        self._key_fn = key_fn
        self._items: dict[str, Json] = {}
        """key -> object. The one source of truth: every other field is derived from it."""
        self._indexers: dict[str, IndexFunc] = {}
        """index name -> function giving the values an object is filed under. Fixed per name."""
        self._indices: dict[str, dict[str, set[str]]] = {}
        """index name -> value -> keys. ``k in _indices[n][v]`` iff ``k in _items`` and ``v``
        is in ``_filed[n][k]``; a value whose key set would become empty is removed."""
        self._filed: dict[str, dict[str, tuple[str, ...]]] = {}
        """index name -> key -> the distinct values that key is filed under, computed when the
        object was stored. Only keys with at least one value appear. Lets an update or delete
        un-file the old object without re-running the index function on it."""

    # -- indexes -------------------------------------------------------------------------

    def add_index(self, name: str, fn: IndexFunc) -> None:
        """Register an index; objects already cached are filed at once."""
        if name in self._indexers:
            raise ValueError(f"index {name!r} already exists")
        self._indexers[name] = fn
        self._indices[name] = {}
        self._filed[name] = {}
        for key, obj in self._items.items():
            self._file(name, key, obj)

    def by_index(self, name: str, value: str) -> builtins.list[Json]:
        """Every cached object filed under ``value`` in index ``name``."""
        keys = self._index(name).get(value, ())
        return [self._items[k] for k in sorted(keys)]

    def keys_by_index(self, name: str, value: str) -> builtins.list[str]:
        """The keys of the objects ``by_index`` would return."""
        return sorted(self._index(name).get(value, ()))

    def index_keys(self, name: str) -> builtins.list[str]:
        """The index values in use (client-go's ``ListIndexFuncValues``), e.g. every namespace."""
        return sorted(self._index(name))

    def index_names(self) -> builtins.list[str]:
        return list(self._indexers)

    # -- reads ---------------------------------------------------------------------------

    def get(self, key: str) -> Json | None:
        return self._items.get(key)

    def list(self) -> builtins.list[Json]:
        return list(self._items.values())

    def keys(self) -> builtins.list[str]:
        return list(self._items)

    def items(self) -> builtins.list[tuple[str, Json]]:
        return list(self._items.items())

    def snapshot(self) -> dict[str, Json]:
        """A shallow copy of the key -> object map: cheap, and unaffected by later writes."""
        return dict(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._items))

    # -- writes --------------------------------------------------------------------------

    def key_of(self, obj: Json) -> str:
        return self._key_fn(obj)

    def put(self, obj: Json) -> Json | None:
        """Add or replace ``obj``; returns what was cached under its key before, if anything."""
        key = self._key_fn(obj)
        old = self._items.get(key)
        if old is not None:
            self._unfile_all(key)
        self._items[key] = obj
        for name in self._indexers:
            self._file(name, key, obj)
        return old

    def delete(self, key: str) -> Json | None:
        """Remove ``key``; returns the object that was cached, if any."""
        old = self._items.pop(key, None)
        if old is not None:
            self._unfile_all(key)
        return old

    def replace(self, objects: Iterable[Json]) -> builtins.list[str]:
        """Make the cache hold exactly ``objects`` (a relist); returns the keys that vanished.

        Indexes are rebuilt from scratch, which is both simpler and faster than diffing when
        most objects changed resourceVersion anyway.
        """
        items: dict[str, Json] = {}
        for obj in objects:
            items[self._key_fn(obj)] = obj
        vanished = [k for k in self._items if k not in items]
        self._items = items
        for name in self._indexers:
            self._indices[name] = {}
            self._filed[name] = {}
            for key, obj in items.items():
                self._file(name, key, obj)
        return vanished

    # -- internals -----------------------------------------------------------------------

    def _index(self, name: str) -> dict[str, set[str]]:
        try:
            return self._indices[name]
        except KeyError:
            raise KeyError(f"no index named {name!r}") from None

    def _file(self, name: str, key: str, obj: Json) -> None:
        values = tuple(dict.fromkeys(self._indexers[name](obj)))
        if not values:
            return
        self._filed[name][key] = values
        index = self._indices[name]
        for value in values:
            index.setdefault(value, set()).add(key)

    def _unfile_all(self, key: str) -> None:
        for name in self._indexers:
            values = self._filed[name].pop(key, ())
            index = self._indices[name]
            for value in values:
                keys = index.get(value)
                if keys is None:
                    continue
                keys.discard(key)
                if not keys:
                    del index[value]


# -- ready-made index functions ----------------------------------------------------------


def by_namespace(obj: Json) -> list[str]:
    """Index by ``metadata.namespace``; cluster-scoped objects are not filed."""
    ns = (obj.get("metadata") or {}).get("namespace")
    return [ns] if isinstance(ns, str) and ns else []


def by_owner_uid(obj: Json) -> list[str]:
    """Index by the uid of every owner reference, to find an owner's dependents."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return [r["uid"] for r in refs if isinstance(r, dict) and isinstance(r.get("uid"), str)]


def by_field(path: Sequence[str]) -> IndexFunc:
    """Index by the value at ``path`` (e.g. ``("status", "phase")``).

    Strings, numbers and booleans are filed under their string form; a list of such values
    files the object under each of them; a missing field or any other type files nothing.
    ``path`` is a sequence of keys, not a dotted string, because keys may contain dots
    (``metadata.labels["app.kubernetes.io/name"]``).
    """
    steps: tuple[str, ...] = (path,) if isinstance(path, str) else tuple(path)
    if not steps:
        raise ValueError("by_field needs a non-empty path")

    def index(obj: Json) -> list[str]:
        value: Any = obj
        for step in steps:
            if not isinstance(value, dict):
                return []
            value = value.get(step)
        if isinstance(value, list):
            return [s for v in value if (s := _scalar(v)) is not None]
        s = _scalar(value)
        return [] if s is None else [s]

    return index


def by_label(name: str) -> IndexFunc:
    """Index by the value of one label."""
    return by_field(("metadata", "labels", name))


def _scalar(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    return None
