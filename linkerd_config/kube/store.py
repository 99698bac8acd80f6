"""The informer's cache: objects by key.

Modelled on client-go's ``threadSafeMap`` without its secondary indexes (nothing here needs
them: the controller's caches are small or already filtered server-side by label and field
selectors). Everything runs on one asyncio event loop, so there are no locks; no method awaits,
so no caller ever observes a half-applied write.

Cached dicts are shared with every reader and handler: treat them as read-only.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator

from linkerd_config.kube.resource import Json, object_key

KeyFunc = Callable[[Json], str]


class Store:
    """Objects by ``namespace/name`` (or whatever ``key_fn`` says)."""

    def __init__(self, key_fn: KeyFunc = object_key) -> None:
        self._key_fn = key_fn
        self._items: dict[str, Json] = {}
        self.revision = 0
        """Grows with every write: a reader may keep what it derived from the cache for as
        long as the revision it derived it at is current."""

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

    def put(self, obj: Json, key: str | None = None) -> Json | None:
        """Add or replace ``obj`` under ``key`` (default: its own); returns what was cached
        there before, if anything."""
        if key is None:
            key = self._key_fn(obj)
        old = self._items.get(key)
        self._items[key] = obj
        self.revision += 1
        return old

    def delete(self, key: str) -> Json | None:
        """Remove ``key``; returns the object that was cached, if any."""
        self.revision += 1
        return self._items.pop(key, None)

    def replace(self, objects: Iterable[Json]) -> builtins.list[str]:
        """Make the cache hold exactly ``objects`` (a relist); returns the keys that vanished."""
        return self.replace_keyed({self._key_fn(obj): obj for obj in objects})

    def replace_keyed(self, items: dict[str, Json]) -> builtins.list[str]:
        """``replace``, each object under the key given with it. The store keeps ``items``
        itself (no copy of a relist's every object): the caller gives it up."""
        vanished = [k for k in self._items if k not in items]
        self._items = items
        self.revision += 1
        return vanished
