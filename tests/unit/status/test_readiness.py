"""What Ready means and how kstatus reads a LinkerdConfig, from tables: each Ready reason's
kind (``readiness.progress``) and the conditions written for it (``as_kstatus_reads``):
kstatus's rules (``sigs.k8s.io/cli-utils`` ``pkg/kstatus/status``: Reconciling=True →
InProgress, Stalled=True → Failed, Ready=True → Current, Ready=False/Unknown → InProgress)
are applied here to what is written, as a check of the table, not of kstatus (the integration
test runs kstatus itself)."""

from __future__ import annotations

import pytest

from linkerd_config.kube.conditions import RECONCILING, STALLED, Progress, set_condition
from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.status import readiness
from linkerd_config.linkerd.status.report import as_kstatus_reads

GENERATION = 7


def conditions(
    ready: tuple[str, str], data_plane: tuple[str, str] = ("True", "UpToDate")
) -> list[Json]:
    found: list[Json] = []
    for type_, (status, reason) in (("Ready", ready), ("DataPlaneUpToDate", data_plane)):
        value = {"True": True, "False": False}.get(status)
        found = set_condition(found, type_, value, reason, f"{reason} said", GENERATION, "t0")
    return found


def kstatus(status: Json, generation: int = GENERATION) -> str:
    """kstatus's generic rules, as its README states them, over what is written."""
    if status.get("observedGeneration") != generation:
        return "InProgress"
    by_type = {c["type"]: c for c in status["conditions"]}
    if by_type.get(RECONCILING, {}).get("status") == "True":
        return "InProgress"
    if by_type.get(STALLED, {}).get("status") == "True":
        return "Failed"
    ready = by_type.get("Ready")
    if ready is not None and ready["status"] == "True":
        return "Current"
    return "InProgress" if ready is not None else "Current"


CASES = [
    (("True", "Ready"), ("True", "UpToDate"), Progress.CURRENT, "Current"),
    (("False", "RollingOut"), ("False", "RollingOut"), Progress.RECONCILING, "InProgress"),
    (
        ("False", "WaitingForInjector"),
        ("False", "WaitingForInjector"),
        Progress.RECONCILING,
        "InProgress",
    ),
    (("False", "Canary"), ("False", "Canary"), Progress.RECONCILING, "InProgress"),
    (("False", "RollingBack"), ("False", "RollingBack"), Progress.RECONCILING, "InProgress"),
    (("False", "Paused"), ("False", "Paused"), Progress.WAITING, "InProgress"),
    (("False", "RolloutHalted"), ("False", "RolloutHalted"), Progress.STALLED, "Failed"),
    (("False", "RolledBack"), ("False", "RolledBack"), Progress.STALLED, "Failed"),
    (("False", "RollbackNotHealthy"), ("False", "RollbackNotHealthy"), Progress.STALLED, "Failed"),
    (("False", "CanaryUnmatched"), ("False", "CanaryUnmatched"), Progress.STALLED, "Failed"),
    (("False", "InvalidConfig"), ("True", "UpToDate"), Progress.STALLED, "Failed"),
    (("False", "Conflict"), ("True", "UpToDate"), Progress.STALLED, "Failed"),
    (("False", "NamespaceNotManaged"), ("True", "UpToDate"), Progress.STALLED, "Failed"),
    (("False", "InstalledConfigUnreadable"), ("True", "UpToDate"), Progress.STALLED, "Failed"),
    (("False", "ConfigMapMissing"), ("True", "UpToDate"), Progress.STALLED, "Failed"),
    # a held removal: the bundle held on to still rolling to opted-in holders, or done
    (
        ("False", "TrustAnchorRemovalHeld"),
        ("False", "RollingOut"),
        Progress.RECONCILING,
        "InProgress",
    ),
    (("False", "TrustAnchorRemovalHeld"), ("True", "UpToDate"), Progress.STALLED, "Failed"),
]


@pytest.mark.parametrize(
    ("ready", "data_plane", "kind", "read"),
    CASES,
    ids=[f"{r[1]}-{d[1]}" for r, d, *_ in CASES],
)
def test_each_ready_reason_is_read_as_its_kind(
    ready: tuple[str, str], data_plane: tuple[str, str], kind: Progress, read: str
) -> None:
    written = conditions(ready, data_plane)
    assert readiness.progress(written) == kind
    config = {"metadata": {"generation": GENERATION}, "status": {}}
    status = as_kstatus_reads(config, {"observedGeneration": GENERATION, "conditions": written})
    by_type = {c["type"]: c for c in status["conditions"]}
    assert kstatus(status) == read
    ready_now = by_type["Ready"]
    if kind == Progress.RECONCILING:
        assert (ready_now["status"], by_type[RECONCILING]["status"]) == ("Unknown", "True")
        assert by_type[RECONCILING]["reason"] == ready[1] and STALLED not in by_type
    elif kind == Progress.STALLED:
        assert (ready_now["status"], by_type[STALLED]["status"]) == ("False", "True")
        assert by_type[STALLED]["reason"] == ready[1] and RECONCILING not in by_type
    else:
        assert RECONCILING not in by_type and STALLED not in by_type
    assert ready_now["reason"] == ready[1]  # the reason users script against, kept


def test_a_spec_change_not_yet_observed_is_in_progress() -> None:
    written = conditions(("True", "Ready"))
    status = as_kstatus_reads(
        {"metadata": {"generation": GENERATION + 1}, "status": {}},
        {"observedGeneration": GENERATION, "conditions": written},
    )
    assert kstatus(status, GENERATION + 1) == "InProgress"


def test_a_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    """Rewritten every pass, Ready (Unknown) and Reconciling (True) keep when they began."""
    config: Json = {"metadata": {"generation": GENERATION}, "status": {}}
    first = as_kstatus_reads(config, {"conditions": conditions(("False", "RollingOut"))})
    config["status"] = first
    again = as_kstatus_reads(config, {"conditions": conditions(("False", "RollingOut"))})
    times = {c["type"]: c["lastTransitionTime"] for c in first["conditions"]}
    assert {c["type"]: c["lastTransitionTime"] for c in again["conditions"]} == times
    done = as_kstatus_reads(
        {**config, "status": again}, {"conditions": conditions(("True", "Ready"))}
    )
    assert {c["type"] for c in done["conditions"]} == {"Ready", "DataPlaneUpToDate"}


def test_a_status_without_conditions_is_left_alone() -> None:
    """The guard's record alone: observedGeneration does not move without conditions."""
    patch = {"trustBundles": [{"sha256": "x"}]}
    assert as_kstatus_reads({"metadata": {"generation": 3}}, patch) == patch
