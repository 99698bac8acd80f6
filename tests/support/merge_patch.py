"""RFC 7386's algorithm, as the API server applies a JSON merge patch: for tests that must
see what a patch the controller sends makes of an object."""

from __future__ import annotations

from typing import Any


def apply_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result
