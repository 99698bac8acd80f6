"""What an object's ``metadata.managedFields`` say about who wrote it: the API server records,
for each manager, its last request's fields, API version and time."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def last_written_version(obj: Mapping[str, Any], field: str, group: str) -> str | None:
    """The version (of API group ``group``) of the newest request that wrote top-level
    ``field`` (say ``spec``) of ``obj``: subresource writes (status) and writes that did not
    touch it left out, a tie going to the later entry; None when no entry says."""
    metadata = obj.get("metadata")
    entries = metadata.get("managedFields") if isinstance(metadata, Mapping) else None
    newest: tuple[str, str] | None = None
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, Mapping) or entry.get("subresource"):
            continue
        fields = entry.get("fieldsV1")
        api_version, at = entry.get("apiVersion"), entry.get("time")
        if not (isinstance(fields, Mapping) and f"f:{field}" in fields):
            continue
        if not isinstance(api_version, str) or not api_version.startswith(f"{group}/"):
            continue
        when = at if isinstance(at, str) else ""
        if newest is None or when >= newest[0]:
            newest = (when, api_version.removeprefix(f"{group}/"))
    return None if newest is None else newest[1]
