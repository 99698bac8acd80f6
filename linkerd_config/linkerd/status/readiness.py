"""What a LinkerdConfig's ``Ready`` means, and how tools that cannot know our reasons read it:
kstatus (so Flux's and Helm 4's waits) through ``Reconciling`` and ``Stalled``, Argo CD through
its health (``manifests/argocd/health.lua`` reads the same conditions).

``Ready=True`` means done: the ConfigMaps hold the configuration *and* every opted-in pod runs
it (the data plane converged), so a GitOps pipeline that waits for Ready waits for the
rollout. Until then, each reason of ``Ready`` is one of three kinds:

* **reconciling**: the controller gets there by itself (rolling, waiting for Linkerd's
  injector or the canary, rolling back, retrying a refused write); ``Reconciling=True``,
  ``Ready=Unknown``: kstatus reads InProgress;
* **stalled**: it cannot without a person (a halted or rolled-back rollout, a rollback not
  healthy either, a canary that matches nothing, an invalid or conflicting LinkerdConfig, an
  installed configuration it cannot read, a ConfigMap gone with nothing to restore it from, a
  trust-anchor removal held by pods no rollout of ours restarts); ``Stalled=True``,
  ``Ready=False``: kstatus reads Failed, and Flux's wait fails at once;
* **waiting**: held by a person's choice (``spec.rollout.paused``): neither, ``Ready=False``:
  kstatus reads InProgress (Argo CD: Suspended).

Pure: conditions in, a verdict out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from linkerd_config.kube.conditions import Progress
from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.configmap import decision
from linkerd_config.linkerd.rollout.phase import Phase
from linkerd_config.linkerd.spec.crd import DATA_PLANE_UP_TO_DATE, READY
from linkerd_config.linkerd.trust.guard import HELD_REASON

CONFIGMAP_MISSING: Final = "ConfigMapMissing"
WRITE_FAILED: Final = "WriteFailed"

RECONCILING_REASONS: Final = frozenset(
    {Phase.ROLLING, Phase.WAITING_FOR_INJECTOR, Phase.CANARY, Phase.ROLLING_BACK, WRITE_FAILED}
)
"""``Ready`` reasons the controller moves on from by itself."""

STALLED_REASONS: Final = frozenset(
    {
        Phase.HALTED,
        Phase.ROLLED_BACK,
        Phase.ROLLBACK_STUCK,
        Phase.CANARY_UNMATCHED,
        Phase.ANCHOR_HELD,
        decision.INVALID_CONFIG,
        decision.CONFLICT,
        decision.NAMESPACE_NOT_MANAGED,
        decision.INSTALLED_CONFIG_UNREADABLE,
        CONFIGMAP_MISSING,
    }
)
"""``Ready`` reasons only a person moves on from."""


def progress(conditions: Sequence[Json]) -> Progress:
    """Where a LinkerdConfig stands, from its conditions (see the module's docstring). A
    trust-anchor removal held while the bundle held on to still rolls out to opted-in holders
    may clear by itself (reconciling); once that is done, only the holders no rollout of
    ours restarts hold it (stalled). A reason not listed reads as waiting."""
    by_type = {str(c.get("type")): c for c in conditions if isinstance(c, Mapping)}
    ready = by_type.get(READY)
    if ready is None or ready.get("status") == "True":
        return Progress.CURRENT
    reason = str(ready.get("reason") or "")
    if reason == HELD_REASON:
        data_plane = by_type.get(DATA_PLANE_UP_TO_DATE) or {}
        rolling = data_plane.get("status") != "True"
        if rolling and data_plane.get("reason") in RECONCILING_REASONS:
            return Progress.RECONCILING
        return Progress.STALLED
    if reason in STALLED_REASONS:
        return Progress.STALLED
    if reason in RECONCILING_REASONS:
        return Progress.RECONCILING
    return Progress.WAITING
