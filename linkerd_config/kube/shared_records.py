"""One object for every cached object whose record holds an equal one: at 50,000 pods a few
label sets, owners and trust-root hashes repeat, and one of each is enough. A transform makes
records through a table here; the informer's contract (cached objects are never mutated)
makes the sharing safe. Every table is bounded: a hostile churn of distinct values never
grows one past its bound."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SharedRecords(Generic[K, V]):
    """A record per key, made once (``get``), for as long as the table keeps it.

    Full at ``bound`` entries, a table either starts again empty (``recent=False``: values
    that repeat across a whole list, such as label sets; a churn past the bound stops the
    sharing rather than grow) or lets its least recently used entry go (``recent=True``:
    records that repeat among neighbours, such as a ReplicaSet's pods, one after another in
    a list)."""

    def __init__(self, bound: int, *, recent: bool = False) -> None:
        if bound < 1:
            raise ValueError("a table of shared records holds at least one")
        self.bound = bound
        self.recent = recent
        self._table: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The record kept for ``key``; else ``make()``'s, kept from now on."""
        found = self._table.get(key)
        if found is not None:
            if self.recent:
                self._table.move_to_end(key)
            return found
        if len(self._table) >= self.bound:
            if self.recent:
                self._table.popitem(last=False)
            else:
                self._table.clear()
        made = self._table[key] = make()
        return made

    def __len__(self) -> int:
        return len(self._table)
