"""Going back when a rollout fails (``spec.rollout.onFailure: Rollback``): pure decisions.

The state lives in the LinkerdConfig's status, so a new leader continues where the old one
stopped:

* ``lastCompleted`` names the last configuration whose rollout completed (its hash,
  generation and the spec's ``global``/``proxy`` as JSON, rendered again onto the installed
  data when going back: what we do not manage is never taken from an old copy). Until a
  configuration of the LinkerdConfig itself completes, it names the installation the
  LinkerdConfig adopted, when every opted-in pod ran it (``adoption``): the keys the format
  writes, as they were installed (``installed``, a ``formats.Snapshot``), written back when
  going back (``reconcile.restored_config``), so the first upgrade can roll back too.
* A rollback is a halt (``workload_health.halt_record``) with a ``rollback`` section: the
  configuration it returns to, its phase (``RollingBack`` until every workload the failed
  rollout restarted is back and healthy, then ``RolledBack``), and those workloads, listed
  when the rollback began so that a leader taking over mid-way knows what to wait for.

Phase machine (for one configuration hash and generation; a new generation or the resume
annotation ends it, as it ends a halt)::

    (gate failed) --onFailure: Rollback, a completed config to return to--> RollingBack
    RollingBack --every listed workload restored and healthy--> RolledBack

A Deployment is restored the way ``kubectl rollout undo`` does it: its pod template goes back
to its previous ReplicaSet's, so the controller scales that ReplicaSet up again and pods that
were admitted before come back even where no new pod can be admitted. StatefulSets and
DaemonSets (and Deployments with no previous ReplicaSet kept) are restarted onto the old
configuration instead.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeGuard

import orjson

from linkerd_config.kube import revisions
from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.formats.base import CONFIGURATION_SECTIONS, Snapshot
from linkerd_config.linkerd.halt_record import Halt, Rollback
from linkerd_config.linkerd.linkerdconfig_resource import ROLLBACK_MAX_LISTED
from linkerd_config.linkerd.reconcile import Desired, desired_config, restored_config
from linkerd_config.linkerd.rollout import (
    RESTARTED_AT_ANNOTATION,
    RESTARTED_FOR_ANNOTATION,
    Workload,
)
from linkerd_config.linkerd.validation import render_errors, validate

LAST_COMPLETED_FIELD: Final = "lastCompleted"
INSTALLED: Final = "installed"
"""``lastCompleted``'s field holding an adopted installation's snapshot."""

MAX_SPEC_CHARS: Final = 1 << 20
"""A recorded spec longer than this is not read back (status is ours, but anyone allowed to
patch status could write it)."""
MAX_SNAPSHOT_CHARS: Final = 1 << 19
"""The largest adopted installation status records (its keys' text): a LinkerdConfig is one
etcd object (1.5 MiB at most) with the rest of its status; beyond it, nothing is recorded,
and the first upgrade halts instead of rolling back, as before."""
MAX_LISTED: Final = ROLLBACK_MAX_LISTED
"""The most workloads a rollback record lists (the CRD's bound, which the resource states);
beyond them, the restart records on the workloads still say which go back, but their health
after is not waited for."""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def recorded_spec(config: Json) -> Json:
    """What ``lastCompleted`` keeps of a spec: what the configuration is rendered from."""
    return {k: v for k, v in (config.get("spec") or {}).items() if k in CONFIGURATION_SECTIONS}


@dataclass(frozen=True)
class Completed:
    """``status.lastCompleted``: the last configuration whose rollout completed, what
    ``onFailure: Rollback`` returns to. One typed value, read by ``parse`` and written by
    ``to_json``, nowhere else. It keeps what the configuration is made from: the spec's
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
    if not _strings(data) or not isinstance(companions, Mapping):
        return None
    if not all(isinstance(k, str) and _strings(v) for k, v in companions.items()):
        return None
    snapshot = Snapshot(dict(data), {k: dict(v) for k, v in companions.items()})
    return snapshot if _size(snapshot) <= MAX_SNAPSHOT_CHARS else None


def _size(snapshot: Snapshot) -> int:
    return sum(len(k) + len(v) for k, v in snapshot.data.items()) + sum(
        len(k) + len(v) for keys in snapshot.companions.values() for k, v in keys.items()
    )


def _strings(value: Any) -> TypeGuard[Mapping[str, str]]:
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


def completed_record(config: Json, config_hash: str, at: str) -> Json | None:
    """``status.lastCompleted`` now that ``config_hash``'s rollout completed; None when status
    already names it (nothing to write)."""
    current = last_completed(config)
    if current is not None and current.config_hash == config_hash:
        return None
    spec = orjson.dumps(recorded_spec(config), option=orjson.OPT_SORT_KEYS).decode()
    generation = _int((config.get("metadata") or {}).get("generation"))
    return Completed(config_hash, generation, at, spec=spec).to_json()


def adopting(config: Json) -> bool:
    """Whether ``config`` has written nothing yet, nor recorded a completed configuration:
    what is installed is not its own, and its first write replaces it."""
    status = config.get("status") or {}
    return status.get(LAST_COMPLETED_FIELD) is None and status.get("configHash") is None


def adoption(
    config: Json, installed_hash: str, snapshot: Snapshot, stale: int, at: str
) -> tuple[Json | None, str]:
    """``status.lastCompleted`` naming the installation ``config`` adopts (``snapshot``, whose
    configuration hashes to ``installed_hash``), to record before its first write replaces it;
    or None, and why not (empty: nothing to say: a LinkerdConfig that wrote before, or one
    whose status already records a completed configuration). Only a configuration every
    opted-in pod runs (``stale``: the workloads that do not) is a completed one."""
    if not adopting(config):
        return None, ""
    if stale:
        return None, (
            f"{stale} opted-in workload(s) do not run the installed configuration, so it is no "
            "completed configuration to roll back to"
        )
    size = _size(snapshot)
    if size > MAX_SNAPSHOT_CHARS:
        return None, f"the installed configuration is {size} characters, over {MAX_SNAPSHOT_CHARS}"
    return Completed(installed_hash, 0, at, installed=snapshot).to_json(), ""


def last_completed(config: Json) -> Completed | None:
    """The recorded last completed configuration, if status holds a readable one."""
    return Completed.parse((config.get("status") or {}).get(LAST_COMPLETED_FIELD))


def settled(config: Json) -> str | None:
    """The hash of the last configuration whose rollout completed, if status records one."""
    found = last_completed(config)
    return None if found is None else found.config_hash


def start(halt: Halt, target: Completed, restarted: Iterable[Workload]) -> Halt:
    """A halt record turned into a rollback to ``target`` (the last completed configuration),
    with the owners the failed rollout restarted: the ones to bring back."""
    owners = sorted(str(w) for w in restarted if w.kind != "Pod")[:MAX_LISTED]
    return halt.rolling_back(target.config_hash, target.generation, owners)


def going_back(
    config: Json, halt: Halt | None, current: Mapping[str, Mapping[str, str]]
) -> Desired | None:
    """What the ConfigMaps hold while ``halt``'s rollback is in force: its target, the last
    completed configuration, as status records it (a spec rendered again onto what is
    installed now, the spec's ``rollout`` kept as it is now; or an adopted installation
    written back); None when ``halt`` is no rollback, or its target is not what status
    records or no longer validates (then it cannot go back). Raises what
    ``reconcile.desired_config`` raises when what is installed now cannot take it."""
    target = _target_in_force(config, halt)
    if target is not None and target.installed is not None:
        return restored_config(config, target.installed, current)
    back = config_to_render(config, halt)
    return None if back is None else desired_config(back, current)


def config_to_render(config: Json, halt: Halt | None) -> Json | None:
    """The LinkerdConfig as it stood when ``halt``'s rollback target completed (its spec's
    ``rollout`` kept as it is now), to render instead of the spec; None when ``halt`` is no
    rollback, its target is not what status records or no longer validates, or is an adopted
    installation (no spec: ``going_back`` writes its snapshot back)."""
    target = _target_in_force(config, halt)
    if target is None or target.installed is not None:
        return None
    return _going_back(config, target)[0]


def rollback_of(halt: Halt | None) -> Rollback | None:
    """``halt``'s rollback, if it is one: only then has ``going_back`` anything to render."""
    return None if halt is None else halt.rollback


def returned_to(halt: Halt, failed: Desired, to: Desired | None) -> tuple[str, str]:
    """The configuration hash and proxy version a rollback pass returns to: ``to``'s, or,
    when it cannot go back (None), the failed one's (``Halt.rolled``: the configuration
    rolled out when it failed), which ``rollout_machine.going_back`` reads as nowhere to go."""
    if to is None:
        return halt.rolled, failed.proxy.version
    return to.config_hash, to.proxy.version


def _target_in_force(config: Json, halt: Halt | None) -> Completed | None:
    """The ``lastCompleted`` record ``halt``'s rollback returns to, if status still holds it."""
    back = rollback_of(halt)
    if back is None:
        return None
    target = last_completed(config)
    if target is None or target.config_hash != back.to_hash:
        return None
    return target


def _going_back(config: Json, record: Completed) -> tuple[Json | None, str]:
    """``config`` with ``record``'s spec (its ``rollout`` as it is now), or None and why not.
    The recorded spec is checked as the webhook and the reconcile check a spec: it passed
    when it was recorded, but a later release may refuse it, and anyone allowed to patch
    status may have written it. An adoption record has no spec: ``config`` as it is."""
    if record.installed is not None:
        return config, ""
    try:
        spec = orjson.loads(record.spec)
    except orjson.JSONDecodeError:
        return None, "its recorded spec is not JSON"
    if not isinstance(spec, dict):
        return None, "its recorded spec is not a JSON object"
    rollout = (config.get("spec") or {}).get("rollout")
    going_back = {**config, "spec": {**spec, **({"rollout": rollout} if rollout else {})}}
    problems = validate(going_back, stored=True)
    if problems:
        return None, f"its spec no longer validates: {render_errors(problems)}"
    return going_back, ""


def target(config: Json, failed_hash: str, asked_hash: str = "") -> tuple[Completed | None, str]:
    """Where a failed rollout of ``failed_hash`` goes back to (the ``lastCompleted`` record),
    or None and why it cannot go back. ``asked_hash``: the configuration the spec asks for,
    when ``failed_hash`` is the bundle the trust-anchor guard held on to instead (the record
    of the configuration completed before either)."""
    record = last_completed(config)
    if record is None:
        if (config.get("status") or {}).get(LAST_COMPLETED_FIELD) is not None:
            return None, "status.lastCompleted cannot be read"
        return None, "no earlier configuration of this LinkerdConfig completed its rollout"
    if record.config_hash == failed_hash:
        return None, "the last configuration that completed its rollout is the one that failed"
    if record.config_hash == asked_hash:
        return None, (
            "the last configuration that completed its rollout is the one the trust-anchor "
            "guard holds back"
        )
    why = _going_back(config, record)[1]
    if why:
        return None, f"the last completed configuration, {record.config_hash}, {why}"
    return record, ""


def parse_workload(name: str) -> Workload | None:
    """``deployment/ns/name`` (as ``str(Workload)`` writes it) back into a Workload."""
    parts = name.split("/")
    kinds = {"deployment": "Deployment", "statefulset": "StatefulSet", "daemonset": "DaemonSet"}
    if len(parts) != 3 or parts[0] not in kinds or not all(parts):
        return None
    return Workload(kinds[parts[0]], parts[1], parts[2])


def previous_template(
    deployment: Json, replicasets: Iterable[Json], failed_hash: str
) -> Json | None:
    """The pod template of the Deployment's newest ReplicaSet not made for ``failed_hash`` (as
    ``kubectl rollout undo`` takes the previous revision's), without the ReplicaSet's own
    ``pod-template-hash`` label; None when the Deployment kept none."""
    candidates = [
        rs
        for rs in revisions.owned(deployment, replicasets)
        if (((rs.get("spec") or {}).get("template") or {}).get("metadata") or {})
        .get("annotations", {})
        .get(RESTARTED_FOR_ANNOTATION)
        != failed_hash
    ]
    if not candidates:
        return None
    newest = max(candidates, key=revisions.revision)
    template = copy.deepcopy((newest.get("spec") or {}).get("template") or {})
    labels = (template.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(revisions.TEMPLATE_HASH_LABEL, None)
    return template


def _without_restart_records(template: Json) -> Json:
    found = copy.deepcopy(template)
    metadata = found.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if isinstance(metadata, dict) and isinstance(annotations, dict):
        for key in (RESTARTED_FOR_ANNOTATION, RESTARTED_AT_ANNOTATION):
            annotations.pop(key, None)
        if not annotations:
            metadata.pop("annotations")
    return found


def only_restarted_since(deployment: Json, template: Json) -> bool:
    """Whether ``deployment``'s pod template differs from ``template`` (its previous
    ReplicaSet's) in our restart records only. Otherwise someone changed it since (an image,
    an env var: a ReplicaSet of its own, recording the failed configuration still), and
    going back to ``template`` would undo their change, not ours."""
    live = (deployment.get("spec") or {}).get("template") or {}
    return _without_restart_records(live) == _without_restart_records(template)


def restores_to(template: Json, hashes: Iterable[str]) -> bool:
    """Whether restoring ``template`` (a previous ReplicaSet's) brings back one of
    ``hashes``' configurations, as far as its record tells: it records one of them, or none
    (no restart of ours made it). One recording another configuration (whose rollout never
    completed: a newer spec came first) would bring back that one's proxy, and the rollback
    would wait for ever for pods nothing restarts."""
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    recorded = annotations.get(RESTARTED_FOR_ANNOTATION)
    return recorded is None or recorded in set(hashes)
