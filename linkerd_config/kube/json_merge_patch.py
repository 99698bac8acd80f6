"""JSON merge patches (RFC 7386), as ``kubectl`` and the API server read them."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def merge_patch(current: Any, wanted: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns ``current`` into ``wanted``: a key that
    ``wanted`` lacks is set to null, objects are patched key by key, anything else replaced."""
    if not isinstance(current, Mapping) or not isinstance(wanted, Mapping):
        return copy.deepcopy(wanted)
    patch: dict[str, Any] = {key: None for key in current if key not in wanted}
    for key, value in wanted.items():
        if key not in current:
            patch[key] = copy.deepcopy(value)
        elif current[key] != value:
            patch[key] = merge_patch(current[key], value)
    return patch
