"""Status conditions as every Kubernetes controller keeps them (``metav1.Condition``): set one
(its ``lastTransitionTime`` moves only when its status does), find one."""

from __future__ import annotations

import copy
from collections.abc import Mapping

from linkerd_config.kube.resource import Json, rfc3339


def set_condition(
    conditions: list[Json],
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    generation: int,
    now: str | None = None,
) -> list[Json]:
    """A new list with ``type_`` set; lastTransitionTime moves only when status changes."""
    text = "Unknown" if status is None else ("True" if status else "False")
    result = [copy.deepcopy(c) for c in conditions if c.get("type") != type_]
    previous = next((c for c in conditions if c.get("type") == type_), None)
    if previous is not None and previous.get("status") == text:
        transition = str(previous["lastTransitionTime"])
    else:
        transition = now or rfc3339()
    result.append(
        {
            "type": type_,
            "status": text,
            "observedGeneration": generation,
            "lastTransitionTime": transition,
            "reason": reason,
            "message": message,
        }
    )
    return sorted(result, key=lambda c: str(c["type"]))


def condition(status: Json | None, type_: str) -> Json | None:
    """The condition of ``type_`` in ``status`` (a copy), None when it has none."""
    for c in (status or {}).get("conditions") or ():
        if isinstance(c, Mapping) and c.get("type") == type_:
            return dict(c)
    return None
