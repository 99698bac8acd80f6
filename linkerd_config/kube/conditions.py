"""Status conditions as every Kubernetes controller keeps them (``metav1.Condition``): set one
(its ``lastTransitionTime`` moves only when its status does), find one; and the two that
kstatus (``sigs.k8s.io/cli-utils`` ``pkg/kstatus/status``, so Flux's and Helm 4's waits) reads
besides ``Ready``."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final

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
    # A condition's fields are scalars (metav1.Condition): a shallow copy is a whole one.
    result = [dict(c) for c in conditions if c.get("type") != type_]
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


RECONCILING: Final = "Reconciling"
STALLED: Final = "Stalled"


class Progress(StrEnum):
    """Where an object stands, as kstatus computes it from its conditions."""

    CURRENT = "Current"
    """Ready=True: done."""
    RECONCILING = "InProgress"
    """The controller is getting there by itself: Reconciling=True, Ready=Unknown."""
    STALLED = "Failed"
    """It cannot get there without a person: Stalled=True, Ready=False."""
    WAITING = "Waiting"
    """Ready=False and neither (a hold a person chose, such as a pause): kstatus reads it
    InProgress."""


def with_progress(
    conditions: list[Json],
    progress: Progress,
    ready: str,
    generation: int,
    stored: list[Json] | None = None,
) -> list[Json]:
    """``conditions`` with kstatus's abnormal-true conditions for ``progress``: Reconciling or
    Stalled set True with ``ready``'s reason and message (and ``ready`` made Unknown while
    reconciling, False when stalled), each absent otherwise, as kstatus asks of abnormal-true
    conditions. ``stored``: the conditions as written before, whose ``lastTransitionTime``
    each keeps while its status does not change."""
    said = next((c for c in conditions if c.get("type") == ready), None)
    if said is None or progress in (Progress.CURRENT, Progress.WAITING):
        found = [dict(c) for c in conditions if c.get("type") not in (RECONCILING, STALLED)]
    else:
        reason, message = str(said.get("reason") or ""), str(said.get("message") or "")
        reconciling = progress == Progress.RECONCILING
        kind, other = (RECONCILING, STALLED) if reconciling else (STALLED, RECONCILING)
        found = [c for c in conditions if c.get("type") != other]
        found = set_condition(
            found, ready, None if reconciling else False, reason, message, generation
        )
        found = set_condition(found, kind, True, reason, message, generation)
    before = {str(c.get("type")): c for c in stored or () if isinstance(c, Mapping)}
    for c in found:
        was = before.get(str(c.get("type")))
        if (
            was is not None
            and was.get("status") == c.get("status")
            and was.get("lastTransitionTime")
        ):
            c["lastTransitionTime"] = was["lastTransitionTime"]
    return found
