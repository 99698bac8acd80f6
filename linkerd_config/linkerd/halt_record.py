"""The rollout's record in a LinkerdConfig's status (``status.rolloutHalt``): one typed value,
read by ``Halt.parse`` and written by ``Halt.to_json``, nowhere else.

A halt is kept for its attempt: the configuration the spec asks for, the generation and the
resume annotation. The configuration rolled out when it failed is that one, or, while the
trust-anchor guard holds a removal, the bundle held on to (``rolled_hash``): the halt is the
attempt's either way, so it outlives the hold. A rollback is a halt with a ``rollback``
section (the configuration it returns to, its phase, the workloads it brings back), so any
leader continues from the record alone. A record only moves forward: halted, then rolling
back, then rolled back (``rank``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.rollout_phase import Phase

FIELD: Final = "rolloutHalt"
"""The LinkerdConfig's status field that keeps the record."""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list | tuple) else ()


@dataclass(frozen=True)
class Rollback:
    """``onFailure: Rollback``: the configuration the ConfigMap returned to, and the owners
    brought back onto it (listed when the rollback began)."""

    to_hash: str
    to_generation: int
    phase: Phase
    """``ROLLING_BACK`` until every listed workload is back and healthy, then ``ROLLED_BACK``."""
    workloads: tuple[str, ...] = ()


@dataclass(frozen=True)
class Halt:
    """A halt of one attempt: what failed and why, for this configuration (the one the spec
    asks for), generation and resume token; with ``rollback``, a rollback."""

    config_hash: str
    generation: int
    resume_token: str
    failed: tuple[str, ...]
    at: str
    """When it halted (RFC 3339), so when a rollback began."""
    rollback: Rollback | None = None
    rolled_hash: str = ""
    """The configuration whose rollout failed (what the restarted workloads record) when it
    is not ``config_hash``: the bundle the trust-anchor guard held on to. Empty: the same."""

    @property
    def rolled(self) -> str:
        """The configuration whose rollout failed: a rollback brings its workloads back."""
        return self.rolled_hash or self.config_hash

    @classmethod
    def parse(cls, value: object) -> Halt | None:
        """The record status holds, read leniently (anyone allowed to patch status may have
        written it): a field of the wrong type reads as empty; None when it is no object."""
        if not isinstance(value, Mapping):
            return None
        section = value.get("rollback")
        back = None
        if isinstance(section, Mapping):
            phase = section.get("phase")
            back = Rollback(
                str(section.get("toHash") or ""),
                _int(section.get("toGeneration")),
                Phase.ROLLED_BACK if phase == Phase.ROLLED_BACK else Phase.ROLLING_BACK,
                _strings(section.get("workloads")),
            )
        config_hash = value.get("configHash")
        config_hash = config_hash if isinstance(config_hash, str) else ""
        rolled = value.get("rolledHash")  # absent from a record of an earlier release
        return cls(
            config_hash,
            _int(value.get("generation")),
            str(value.get("resumeToken") or ""),
            _strings(value.get("failed")),
            str(value.get("at") or ""),
            back,
            rolled if isinstance(rolled, str) and rolled != config_hash else "",
        )

    def to_json(self) -> Json:
        """The record as status keeps it (the CRD's ``rolloutHalt`` schema)."""
        found: Json = {
            "configHash": self.config_hash,
            "rolledHash": self.rolled,
            "generation": self.generation,
            "resumeToken": self.resume_token,
            "failed": list(self.failed),
            "at": self.at,
        }
        if self.rollback is not None:
            found["rollback"] = {
                "toHash": self.rollback.to_hash,
                "toGeneration": self.rollback.to_generation,
                "phase": str(self.rollback.phase),
                "workloads": list(self.rollback.workloads),
            }
        return found

    @property
    def rank(self) -> int:
        """How far it has gone (0 a plain halt, 1 rolling back, 2 rolled back)."""
        if self.rollback is None:
            return 0
        return 2 if self.rollback.phase == Phase.ROLLED_BACK else 1

    def same(self, other: Halt) -> bool:
        """Whether two records are one halt at different phases (the same configuration,
        generation and resume annotation, begun at the same time)."""
        mine = (self.config_hash, self.generation, self.resume_token, self.at)
        return mine == (other.config_hash, other.generation, other.resume_token, other.at)

    @property
    def started_at(self) -> float | None:
        """When it halted (so a rollback began), as a Unix time; None when unreadable."""
        try:
            return datetime.fromisoformat(self.at.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None

    def rolling_back(self, to_hash: str, to_generation: int, owners: Iterable[str]) -> Halt:
        """This halt turned into a rollback to ``to_hash``, bringing ``owners`` back."""
        return replace(
            self, rollback=Rollback(to_hash, to_generation, Phase.ROLLING_BACK, tuple(owners))
        )

    def rolled_back(self) -> Halt:
        """This rollback, now that every workload it lists is back and healthy."""
        if self.rollback is None:
            return self
        return replace(self, rollback=replace(self.rollback, phase=Phase.ROLLED_BACK))
