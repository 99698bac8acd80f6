"""Where a LinkerdConfig's rollout of one configuration stands: its phases, one name each.

A phase is what one pass of the rollout found; it is the reason of the LinkerdConfig's
``DataPlaneUpToDate`` condition (an API: alerts, ``linkerd-config status`` and GitOps tools
read it), so each value is kept as it was first published. Every phase but ``DONE`` names in
the condition's message what it waits for (the Progress rule: each wait says why, and moves
on by itself when its cause is gone).

The phases, and what moves a rollout between them (one attempt: a configuration hash and the
resume annotation; a new configuration, or the resume annotation, starts over from
``ROLLING``; an edit of ``spec.rollout`` alone, a new generation, does not)::

    ROLLING ──every opted-in pod on it, every restart healthy──▶ DONE
    ROLLING ◀─▶ PAUSED                  spec.rollout.paused
    ROLLING ◀─▶ WAITING_FOR_INJECTOR    Linkerd's injector does not inject it (yet)
    WAITING_FOR_INJECTOR ──new pods refused for progressDeadline──▶ HALTED / ROLLING_BACK
    ROLLING ◀─▶ CANARY                  the rest wait for the canary to be stable
    ROLLING ◀─▶ CANARY_UNMATCHED        no workload to restart matches the canary
    ROLLING ──a restarted workload failed──▶ HALTED          (onFailure: Halt, or nothing
                                                              to go back to)
    ROLLING ──a restarted workload failed──▶ ROLLING_BACK    (onFailure: Rollback)
    ROLLING_BACK ──every workload back and healthy──▶ ROLLED_BACK
    ROLLING_BACK ◀─▶ ROLLBACK_STUCK     a workload not healthy on the old one either
    any but HALTED ◀─▶ ANCHOR_HELD      the trust-anchor guard holds a removal and no
                                        bundle keeping every anchor in use is rolled out

``HALTED`` and ``ROLLED_BACK`` end the attempt: only a person moves it on (a new
configuration, or the resume annotation). The halt and the rollback are kept in the
LinkerdConfig's status (``rolloutHalt``), so a new leader continues from the record alone.
"""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    """A rollout's phase; its value is the ``DataPlaneUpToDate`` reason."""

    DONE = "UpToDate"
    """Every opted-in pod runs the configuration, and every restart of it is healthy."""
    ROLLING = "RollingOut"
    """Restarting stale workloads, pass by pass, or waiting for the last pass's health."""
    PAUSED = "Paused"
    """``spec.rollout.paused``: counted, nothing restarted."""
    WAITING_FOR_INJECTOR = "WaitingForInjector"
    """Linkerd's injector does not inject the configuration yet (or injects no proxy, or
    its new pods are refused): nothing is restarted until it does. Refused new pods are no
    progress: refused for ``progressDeadline``, the attempt fails (``HALTED`` or
    ``ROLLING_BACK``)."""
    CANARY = "Canary"
    """The canary restarted; the rest wait until it is healthy for ``stableFor``."""
    CANARY_UNMATCHED = "CanaryUnmatched"
    """No workload left to restart matches the canary's selectors: nothing is restarted."""
    HALTED = "RolloutHalted"
    """A restarted workload failed: nothing more is restarted in this attempt."""
    ROLLING_BACK = "RollingBack"
    """A restarted workload failed: the ConfigMap is back on the last completed configuration
    and the workloads the attempt restarted are being brought back onto it."""
    ROLLED_BACK = "RolledBack"
    """Every workload the failed attempt restarted is back and healthy."""
    ANCHOR_HELD = "TrustAnchorRemovalHeld"
    """The trust-anchor guard holds a removal some meshed pod still needs, and what this pass
    would restart onto is not the bundle that keeps every anchor in use: nothing is
    restarted (the Trust rule). With that bundle rolled out instead, the rollout goes on."""
    ROLLBACK_STUCK = "RollbackNotHealthy"
    """Rolling back, but a workload brought back is past its deadline on the old
    configuration too; the rollback stays in force."""

    @property
    def ended(self) -> bool:
        """Whether only a person moves the attempt on (a new configuration, or a resume)."""
        return self in (Phase.HALTED, Phase.ROLLED_BACK)
