"""The local API server's audit log (writes at Metadata level): who wrote what, and when."""

from __future__ import annotations

import contextlib
import datetime
import json
from typing import Any

from devcluster.cluster import LocalControlPlane

Entry = dict[str, Any]


def audit_entries(cp: LocalControlPlane) -> list[Entry]:
    """Every complete entry so far (a line being written is skipped)."""
    entries = []
    for line in cp.audit_log.read_text().splitlines():
        with contextlib.suppress(ValueError):
            entries.append(json.loads(line))
    return entries


def audited_resource(entry: Entry) -> str:
    ref = entry.get("objectRef") or {}
    sub = ref.get("subresource")
    return f"{ref.get('resource')}/{sub}" if sub else str(ref.get("resource"))


def received_at(entry: Entry) -> float:
    """When the API server received the request, as a Unix time (microsecond resolution)."""
    stamp = entry["requestReceivedTimestamp"].replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(stamp).timestamp()


def successful_writes(
    cp: LocalControlPlane, verb: str, resource: str, namespace: str, user_agent: str = ""
) -> list[Entry]:
    """Successful ``verb`` requests on ``resource`` in ``namespace``, oldest first; only those
    whose User-Agent starts with ``user_agent`` when given."""
    return sorted(
        (
            e
            for e in audit_entries(cp)
            if e.get("verb") == verb
            and audited_resource(e) == resource
            and (e.get("objectRef") or {}).get("namespace") == namespace
            and str(e.get("userAgent", "")).startswith(user_agent)
            and (e.get("responseStatus") or {}).get("code", 500) < 300
        ),
        key=received_at,
    )
