"""What one pass of the rollout decides, the output of ``machine.step``: the actions the
executor carries out (ask the injector, restart, restore, undo, say, record), the outcome
status reports, and how its messages list things."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.mesh import Workload
from linkerd_config.linkerd.rollout import canary, health
from linkerd_config.linkerd.rollout.phase import Phase
from linkerd_config.linkerd.rollout.record import CanaryRecord, Halt, Part, fields


@dataclass(frozen=True)
class AskInjector:
    """Ask Linkerd's injector (a dry-run create of one of these workloads' pods) whether it
    injects the configuration; decide the pass again with its answer."""

    workloads: tuple[Workload, ...]


@dataclass(frozen=True)
class Restart:
    """Restart these owners (evict these bare pods) onto the configuration, once each."""

    workloads: tuple[Workload, ...]


@dataclass(frozen=True)
class Restore:
    """Bring these owners back from the failed configuration onto ``to_hash`` (a Deployment
    to its previous ReplicaSet's template when only our restart changed it, else a restart)."""

    workloads: tuple[Workload, ...]
    to_hash: str


@dataclass(frozen=True)
class Undo:
    """A halt stops what its restarts started: each of these Deployments still on the
    revision our restart made for ``config_hash`` goes back to its previous ReplicaSet's pod
    template (``kubectl rollout undo``), so the Deployment controller scales that revision to
    nothing and it makes no more pods: refused ones that an injector gone down would admit
    unmeshed, or more pods without the proxy. Pausing the Deployment would not do: its new
    ReplicaSet keeps creating the replicas it was given. Asked on every pass of a halt (a new
    leader included); the executor acts only where the workload still records our restart
    and nothing but our restart changed its template."""

    workloads: tuple[Workload, ...]
    config_hash: str


@dataclass(frozen=True)
class Emit:
    """An Event: on ``involved`` (a workload), or on the LinkerdConfig when None."""

    type: str
    reason: str
    message: str
    involved: Workload | None = None
    once: bool = False
    """Said once per configuration and reason by this process (not on every pass)."""


@dataclass(frozen=True)
class Halted:
    """The attempt halted (or, with ``rolling_back_to``, began to roll back): ``record`` is
    the status record, to remember until status holds it."""

    record: Halt
    failed: str
    """The failed workloads, as listed in messages."""
    rolling_back_to: str | None = None


@dataclass(frozen=True)
class RolledBack:
    """Every workload the failed attempt restarted is back and healthy: ``record`` is the
    status record, to remember until status holds it."""

    record: Halt
    to_hash: str


@dataclass(frozen=True)
class CanaryKept:
    """The canary's record decided this pass (to remember until status holds it), and
    whether it passed now."""

    record: CanaryRecord
    passed_now: bool = False


Action = AskInjector | Restart | Restore | Undo | Emit | Halted | RolledBack | CanaryKept


@dataclass(frozen=True)
class RolloutOutcome:
    """What one pass found and did, for the status conditions and the requeue."""

    outdated: int
    restarted_total: int
    evicted: int
    reason: Phase
    message: str
    requeue_after: float | None = None
    parts: Mapping[str, Part] = field(default_factory=dict)
    """The parts of the rollout's record this pass changes (its halt, its canary, the last
    completed configuration), to write with the rest."""

    @property
    def status(self) -> Json:
        """``parts`` as status fields."""
        return fields(**self.parts)

    @property
    def up_to_date(self) -> bool:
        return self.reason == Phase.DONE


@dataclass(frozen=True)
class RestartPass:
    """A pass that restarts: what ``after_restarts`` needs to say how it went."""

    why: str
    """What the injector's answer says, and what the pre-flight skipped."""
    canary: canary.Canary


@dataclass(frozen=True)
class Step:
    """One pass decided: its outcome and the actions that carry it out."""

    outcome: RolloutOutcome
    actions: tuple[Action, ...] = ()
    restarting: RestartPass | None = None
    head: str = ""
    """A rollback pass that restores: its message before what the restores say."""

    @property
    def ask(self) -> AskInjector | None:
        return next((a for a in self.actions if isinstance(a, AskInjector)), None)

    @property
    def restart(self) -> Restart | None:
        return next((a for a in self.actions if isinstance(a, Restart)), None)

    @property
    def restore(self) -> Restore | None:
        return next((a for a in self.actions if isinstance(a, Restore)), None)


@dataclass(frozen=True)
class RestartResult:
    """How one restart of a pass went (``Restart``'s result, as the executor reports it)."""

    workload: Workload
    done: bool = False
    refused: str = ""


def waiting_message(waiting: tuple[tuple[str, str], ...], version: str) -> str:
    shown = [f"{w}: {why}" for w, why in waiting]
    return (
        f"{len(waiting)} restarted workload(s) not healthy on proxy {version} yet, the next "
        f"pass waits for them: {listed(shown, 5)}"
    )


def skipped_message(skipped: list[tuple[Workload, str]]) -> str:
    if not skipped:
        return ""
    shown = [f"{w}: {why}" for w, why in skipped]
    return f"Skipped, not restarted: {listed(shown, 5)}."


def failures(failed: Iterable[object]) -> str:
    """Failed workloads and why, as messages list them: a few, each cut short, the rest
    counted (a condition's message is at most 32768 characters, and a pass may fail
    thousands of workloads at once, each with the API server's reason)."""
    items = [health.cut(str(f), 1024) for f in failed]
    shown = "; ".join(items[:5])
    return shown if len(items) <= 5 else f"{shown}; and {len(items) - 5} more"


def listed(items: list[str], limit: int = 10) -> str:
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown} and {len(items) - limit} more"
