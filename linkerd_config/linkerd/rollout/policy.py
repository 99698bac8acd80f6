"""The rollout's settings in one place: the controller's flags (``RolloutOptions``, with their
defaults) and, for one LinkerdConfig, its ``spec.rollout`` over them (``RolloutPolicy``).

Every decision of the rollout reads a ``RolloutPolicy``: the controller's passes, and what
``plan`` and ``status`` say of them, so the three cannot disagree on a setting.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from linkerd_config.kube.labels import EVERYTHING, LabelSelector
from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.configmap.desired import Desired
from linkerd_config.linkerd.spec.canary_section import CanarySpec
from linkerd_config.linkerd.spec.crd import DEFAULT_PROGRESS_DEADLINE, RolloutSpec


class RolloutFlags(Protocol):
    """Where the flags are read from (the command line's ``Settings``)."""

    @property
    def max_restarts_per_pass(self) -> int: ...
    @property
    def restart_interval(self) -> float: ...
    @property
    def injector_wait(self) -> float: ...
    @property
    def restart_namespaces(self) -> LabelSelector: ...


@dataclass(frozen=True)
class RolloutOptions:
    """The controller's rollout settings (its flags); the first two a spec may override."""

    max_restarts_per_pass: int = 10
    """At most this many workloads restarted per pass, so a cluster is not restarted at once."""
    restart_interval: float = 5.0
    """Seconds between passes while workloads are outdated."""
    injector_wait: float = 60.0
    """When the injector's version cannot be confirmed by dry-run, wait this long after
    writing the config before restarting (the original project's fixed sleep, as a fallback)."""
    restart_namespaces: LabelSelector = EVERYTHING
    """Restart only in the namespaces this selects (``--restart-namespace-selector``)."""

    @classmethod
    def of(cls, flags: RolloutFlags) -> RolloutOptions:
        """The flags as the controller, ``plan`` and ``status`` alike read them."""
        return cls(
            max_restarts_per_pass=flags.max_restarts_per_pass,
            restart_interval=flags.restart_interval,
            injector_wait=flags.injector_wait,
            restart_namespaces=flags.restart_namespaces,
        )

    def restricted(self, desired: Desired) -> Desired:
        """``desired`` as the controller rolls it out: only where it may restart."""
        return replace(desired, proxy=desired.proxy.restarting_in(self.restart_namespaces))


@dataclass(frozen=True)
class RolloutPolicy:
    """One LinkerdConfig's rollout settings: its ``spec.rollout`` over the controller's."""

    batch: int = RolloutOptions.max_restarts_per_pass
    """Workloads restarted per pass."""
    interval: float = RolloutOptions.restart_interval
    """Seconds between passes (0 is a value: no pacing)."""
    progress_deadline: float = DEFAULT_PROGRESS_DEADLINE
    """Seconds a restarted workload has to be healthy before it fails the rollout."""
    paused: bool = False
    rollback: bool = False
    """``onFailure: Rollback``: a failed rollout returns to the last completed configuration."""
    canary: CanarySpec | None = None
    """The first passes restart only the canary; None: no canary."""
    controller_interval: float = RolloutOptions.restart_interval
    """The controller's own interval: how soon a rollout under way looks again when nothing
    else says when (a spec's interval of 0 included)."""

    @classmethod
    def of(cls, config: Json, options: RolloutOptions) -> RolloutPolicy:
        """``config``'s settings (an admitted object: validation checked the types)."""
        spec = RolloutSpec.of(config)
        return cls(
            batch=spec.max_restarts_per_pass or options.max_restarts_per_pass,
            interval=options.restart_interval
            if spec.restart_interval is None
            else spec.restart_interval,
            progress_deadline=spec.progress_deadline,
            paused=spec.paused,
            rollback=spec.rollback,
            canary=spec.canary,
            controller_interval=options.restart_interval,
        )
