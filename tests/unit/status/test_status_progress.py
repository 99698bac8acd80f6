"""Which status writes may wait for the next rollout pass: only a rollout's moving counts."""

from __future__ import annotations

from linkerd_config.kube.conditions import set_condition
from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.configmap.desired import progress_only

NOW = "2026-11-23T00:00:00Z"


def status(outdated: int, restarted: int, reason: str = "RollingOut", ready: bool = False) -> Json:
    message = f"{outdated} workload(s) not yet on proxy edge-2; restarted {restarted}"
    conditions = set_condition([], "DataPlaneUpToDate", ready, reason, message, 3, NOW)
    conditions = set_condition(conditions, "Ready", ready, reason, message, 3, NOW)
    return {
        "observedGeneration": 3,
        "conditions": conditions,
        "configHash": "h1",
        "outdatedWorkloads": outdated,
        "restartedWorkloads": restarted,
    }


def test_pods_rolling_between_passes_is_progress_only() -> None:
    assert progress_only(status(40, 20), status(37, 20))


def test_a_pass_a_reason_a_done_rollout_or_a_new_config_is_written_at_once() -> None:
    assert not progress_only(status(40, 20), status(40, 30))  # a pass restarted more
    assert not progress_only(status(40, 20), status(40, 20, reason="WaitingForInjector"))
    assert not progress_only(status(1, 50), status(0, 50, reason="UpToDate", ready=True))
    assert not progress_only(status(40, 20), {**status(40, 20), "configHash": "h2"})
    assert not progress_only({}, status(40, 20))  # the first status


def test_nothing_changed_is_not_a_write_at_all() -> None:
    assert not progress_only(status(40, 20), status(40, 20))
