"""The last few answers of a pure function, keyed by the JSON it reads.

A reconcile is woken by many changes that do not change what a step of it computes (a pod, a
status write, the echo of its own write); a step that costs (rendering a configuration) asks
a ``Memo`` first. The key is a digest of what the step reads, as JSON with sorted keys, so
equal inputs hit whatever objects carry them; what is not JSON is never remembered. Errors
are not remembered either. Thread-safe: steps run on worker threads."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import orjson

V = TypeVar("V")


def json_digest(read: Any) -> bytes | None:
    """A 128-bit digest of ``read`` as sorted-key JSON; None when it is not JSON. (orjson
    writes NaN and the infinities as null: only what was decoded from JSON, which holds
    none, is keyed here.)"""
    try:
        encoded = orjson.dumps(read, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, TypeError):
        return None
    return hashlib.blake2b(encoded, digest_size=16).digest()


class Memo(Generic[V]):
    """At most ``kept`` answers, the least recently used forgotten first."""

    def __init__(self, kept: int) -> None:
        self.kept = kept
        self._answers: OrderedDict[bytes, V] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_make(self, read: Any, make: Callable[[], V]) -> V:
        """The answer remembered for ``read``, else ``make()``'s (remembered)."""
        key = json_digest(read)
        if key is None:
            return make()
        with self._lock:
            found = self._answers.get(key)
            if found is not None:
                self._answers.move_to_end(key)
                return found
        made = make()
        with self._lock:
            self._answers[key] = made
            while len(self._answers) > self.kept:
                self._answers.popitem(last=False)
        return made

    def __len__(self) -> int:
        return len(self._answers)
