"""The rollout's record in a LinkerdConfig's status: one value (``Record``), read by
``Record.read`` and written by ``fields``, nowhere else. Its parts: the halt
(``status.rolloutHalt``, with a ``rollback`` section while one is in force), the last
completed configuration (``lastCompleted``: what a rollback returns to), the canary's state
(``rolloutCanary``), the workloads a resume forgave (``rolloutForgiven``) and the bare pods
evicted (``evictedPods``, for ``status.configHash``). Each is read leniently: anyone allowed to
patch status may have written it, so a field of the wrong type reads as empty, and a part that
is no object as absent.

The last completed configuration decides what a rollback writes into Linkerd, so it is
read only where the managed ConfigMap vouches for it (``vouched``): the ConfigMap holds it
(``rollback.holds``), or carries its digest (``COMPLETED_ANNOTATION``, written with the
write that moves the ConfigMap on from it), or this process recorded it. A status writer
cannot forge it (issue 61, finding 1).

A halt is kept for its attempt: the configuration the spec asks for and the resume
annotation (not the generation: an edit of ``spec.rollout`` alone bumps it, and is the same
attempt; the record's generation says which it halted in, for people). The configuration
rolled out when it failed is that one, or, while the trust-anchor guard holds a removal, the
bundle held on to (``rolled_hash``): the halt is the attempt's either way, so it outlives the
hold. A rollback is a halt with a ``rollback`` section (the configuration it returns to, its
phase, the workloads it brings back), so any leader continues from the record alone. A
record only moves forward: halted, then rolling back, then rolled back (``rank``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, TypeGuard

import orjson

from linkerd_config.kube.resource import Json, unix_time
from linkerd_config.linkerd.formats.base import Snapshot
from linkerd_config.linkerd.rollout.phase import Phase
from linkerd_config.linkerd.spec.crd import (
    CANARY_FIELD,
    EVICTED_FIELD,
    FORGIVEN_FIELD,
    HALT_FIELD,
    LAST_COMPLETED_FIELD,
)

RESUME_ANNOTATION = "config.linkerd.io/resume-rollout"
"""Set (or changed) on a LinkerdConfig to resume its halted rollout, the failed workloads
forgiven: ``kubectl annotate lc NAME config.linkerd.io/resume-rollout=$(date +%s) --overwrite``."""


def resume_token(config: Json) -> str:
    annotations = (config.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(RESUME_ANNOTATION, ""))


def generation(config: Json) -> int:
    value = (config.get("metadata") or {}).get("generation")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


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
    asks for) and resume token, in this generation; with ``rollback``, a rollback."""

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
        """Whether two records are one halt at different phases (the same attempt, its
        configuration and resume annotation, begun at the same time)."""
        mine = (self.config_hash, self.resume_token, self.at)
        return mine == (other.config_hash, other.resume_token, other.at)

    @property
    def started_at(self) -> float | None:
        """When it halted (so a rollback began), as a Unix time; None when unreadable."""
        return unix_time(self.at)

    def with_rollback(self, to_hash: str, to_generation: int, owners: Iterable[str]) -> Halt:
        """This halt turned into a rollback to ``to_hash``, bringing ``owners`` back."""
        return replace(
            self, rollback=Rollback(to_hash, to_generation, Phase.ROLLING_BACK, tuple(owners))
        )

    def rolled_back(self) -> Halt:
        """This rollback, now that every workload it lists is back and healthy."""
        if self.rollback is None:
            return self
        return replace(self, rollback=replace(self.rollback, phase=Phase.ROLLED_BACK))


INSTALLED: Final = "installed"
"""``lastCompleted``'s field holding an adopted installation's snapshot."""

MAX_SPEC_CHARS: Final = 1 << 20
"""A recorded spec longer than this is not read back (status is ours, but anyone allowed to
patch status could write it)."""
MAX_SNAPSHOT_CHARS: Final = 1 << 19
"""The largest adopted installation status records (its keys' text): a LinkerdConfig is one
etcd object (1.5 MiB at most) with the rest of its status; beyond it, nothing is recorded,
and the first upgrade halts instead of rolling back, as before."""


@dataclass(frozen=True)
class Completed:
    """``status.lastCompleted``: the last configuration whose rollout completed, what
    ``onFailure: Rollback`` returns to. It keeps what the configuration is made from: the spec's
    ``global``/``proxy`` (JSON, rendered again onto what is installed when going back), or,
    for the installation a LinkerdConfig adopted, that installation's keys (written back)."""

    config_hash: str
    generation: int
    at: str
    spec: str = ""
    installed: Snapshot | None = None

    @classmethod
    def parse(cls, value: object) -> Completed | None:
        """The record status holds, if readable and within bounds (anyone allowed to patch
        status could write it): None otherwise."""
        if not isinstance(value, Mapping) or not isinstance(value.get("configHash"), str):
            return None
        head = (str(value["configHash"]), _int(value.get("generation")), str(value.get("at") or ""))
        found = value.get(INSTALLED)
        if isinstance(found, Mapping):
            snapshot = _snapshot(found)
            return None if snapshot is None else cls(*head, installed=snapshot)
        spec = value.get("spec")
        if not isinstance(spec, str) or len(spec) > MAX_SPEC_CHARS:
            return None
        return cls(*head, spec=spec)

    def to_json(self) -> Json:
        """The record as status keeps it; written by a merge patch, so the field of the other
        kind of record is set to null (nothing of an earlier record stays)."""
        installed = None
        if self.installed is not None:
            installed = {
                "data": dict(self.installed.data),
                "companions": {n: dict(k) for n, k in self.installed.companions.items()},
            }
        return {
            "configHash": self.config_hash,
            "generation": self.generation,
            "spec": None if self.installed is not None else self.spec,
            INSTALLED: installed,
            "at": self.at,
        }


def _snapshot(found: Mapping[str, Any]) -> Snapshot | None:
    """An adoption record's snapshot, if readable and within bounds."""
    data, companions = found.get("data"), found.get("companions") or {}
    if not _string_map(data) or not isinstance(companions, Mapping):
        return None
    if not all(isinstance(k, str) and _string_map(v) for k, v in companions.items()):
        return None
    snapshot = Snapshot(dict(data), {k: dict(v) for k, v in companions.items()})
    return snapshot if snapshot_size(snapshot) <= MAX_SNAPSHOT_CHARS else None


def snapshot_size(snapshot: Snapshot) -> int:
    return sum(len(k) + len(v) for k, v in snapshot.data.items()) + sum(
        len(k) + len(v) for keys in snapshot.companions.values() for k, v in keys.items()
    )


def _string_map(value: Any) -> TypeGuard[Mapping[str, str]]:
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


@dataclass(frozen=True)
class CanaryRecord:
    """The canary's state in a LinkerdConfig's status (``status.rolloutCanary``): Kept for its
    configuration and resume annotation: the canary chosen so far, when it became healthy,
    when it passed; ``generation`` says in which it was written (for people)."""

    config_hash: str
    generation: int
    resume_token: str
    workloads: tuple[str, ...]
    healthy_since: str = ""
    passed_at: str = ""

    @classmethod
    def parse(cls, value: object) -> CanaryRecord | None:
        """The record status holds, read leniently (a field of the wrong type reads as
        empty); None when it is no object."""
        if not isinstance(value, Mapping):
            return None
        generation = value.get("generation")
        workloads = value.get("workloads")
        return cls(
            str(value.get("configHash") or ""),
            _int(generation),
            str(value.get("resumeToken") or ""),
            _strings(workloads),
            str(value.get("healthySince") or ""),
            str(value.get("passedAt") or ""),
        )

    def to_json(self) -> Json:
        """The record as status keeps it (the CRD's ``rolloutCanary`` schema)."""
        found: Json = {
            "configHash": self.config_hash,
            "generation": self.generation,
            "resumeToken": self.resume_token,
            "workloads": list(self.workloads),
        }
        if self.healthy_since:
            found["healthySince"] = self.healthy_since
        if self.passed_at:
            found["passedAt"] = self.passed_at
        return found

    @property
    def passed(self) -> bool:
        return bool(self.passed_at)


@dataclass(frozen=True)
class Forgiven:
    """``status.rolloutForgiven``: the workloads a resume forgave, for one configuration
    (another clears it; an edit of ``spec.rollout`` alone keeps them forgiven)."""

    config_hash: str
    generation: int
    workloads: tuple[str, ...]

    @classmethod
    def parse(cls, value: object) -> Forgiven | None:
        if not isinstance(value, Mapping):
            return None
        found = value.get("configHash")
        return cls(
            found if isinstance(found, str) else "",
            _int(value.get("generation")),
            _strings(value.get("workloads")),
        )

    def to_json(self) -> Json:
        return {
            "configHash": self.config_hash,
            "generation": self.generation,
            "workloads": list(self.workloads),
        }


@dataclass(frozen=True)
class Record:
    """What a LinkerdConfig's status records of its rollout (see the module's docstring)."""

    halt: Halt | None = None
    completed: Completed | None = None
    canary: CanaryRecord | None = None
    forgiven: Forgiven | None = None
    evicted: int = 0
    """Bare pods evicted for ``evicted_for``."""
    evicted_for: str = ""
    """The configuration ``status.configHash`` names: the one the evictions were for."""
    present: frozenset[str] = frozenset()
    """The parts status holds, readable or not, by their names here (``halt``, ...)."""

    @classmethod
    def read(cls, status: object) -> Record:
        """The record in ``status`` (a LinkerdConfig's, or the one a ConfigMap carries)."""
        if not isinstance(status, Mapping):
            return cls()
        evicted, evicted_for = status.get(EVICTED_FIELD), status.get("configHash")
        return cls(
            Halt.parse(status.get(HALT_FIELD)),
            Completed.parse(status.get(LAST_COMPLETED_FIELD)),
            CanaryRecord.parse(status.get(CANARY_FIELD)),
            Forgiven.parse(status.get(FORGIVEN_FIELD)),
            evicted if isinstance(evicted, int) and evicted >= 0 else 0,
            evicted_for if isinstance(evicted_for, str) else "",
            frozenset(part for part, f in _PARTS.items() if status.get(f) is not None),
        )

    @classmethod
    def of(cls, config: Json) -> Record:
        return cls.read(config.get("status"))

    def evictions(self, config_hash: str) -> int:
        """The bare pods status reports evicted for ``config_hash``: an evicted bare pod
        leaves no record on any workload, so a new leader continues from this count; a count
        for an older configuration does not carry over to a new one."""
        return self.evicted if self.evicted_for == config_hash else 0

    def canary_of(self, config_hash: str) -> CanaryRecord | None:
        """The canary's record for ``config_hash``, if status keeps one."""
        found = self.canary
        return found if found is not None and found.config_hash == config_hash else None


_PARTS: Final = {
    "halt": HALT_FIELD,
    "completed": LAST_COMPLETED_FIELD,
    "canary": CANARY_FIELD,
    "forgiven": FORGIVEN_FIELD,
    "evicted": EVICTED_FIELD,
}


Part = Halt | Completed | CanaryRecord | Forgiven | int | None
"""One part of the record as a pass decides it (None: removed), by ``Record``'s names."""


def fields(**parts: Part) -> Json:
    """The status fields that write the record's ``parts`` (by ``Record``'s names): each its
    JSON, or None to remove it (a merge patch), a count as it is."""
    return {
        _PARTS[name]: value if value is None or isinstance(value, int) else value.to_json()
        for name, value in parts.items()
    }


def digest(completed: Completed) -> str:
    """What vouches for ``completed`` (``COMPLETED_ANNOTATION``): the SHA-256 of its JSON as
    status keeps it, keys sorted."""
    text = orjson.dumps(completed.to_json(), option=orjson.OPT_SORT_KEYS)
    return f"sha256:{hashlib.sha256(text).hexdigest()}"


def vouched(config: Json, trusted: bool) -> tuple[Json, str | None]:
    """``config`` as the rollout may read it: its ``lastCompleted`` kept when ``trusted``
    (vouched for by the managed ConfigMap, or recorded by this process), removed otherwise
    (an unreadable one too: never ours); and the configuration hash the record removed
    names ("" when unreadable; None: kept, or none)."""
    status = config.get("status")
    if trusted or not isinstance(status, Mapping) or status.get(LAST_COMPLETED_FIELD) is None:
        return config, None
    found = Completed.parse(status[LAST_COMPLETED_FIELD])
    kept = {k: v for k, v in status.items() if k != LAST_COMPLETED_FIELD}
    return {**config, "status": kept}, "" if found is None else found.config_hash
