"""Going back when a rollout fails (``spec.rollout.onFailure: Rollback``): pure decisions.

The state lives in the LinkerdConfig's status, so a new leader continues where the old one
stopped:

* ``lastCompleted`` names the last configuration whose rollout completed (its hash,
  generation and the spec's ``global``/``proxy`` as JSON, rendered again onto the installed
  data when going back: what we do not manage is never taken from an old copy). Until a
  configuration of the LinkerdConfig itself completes, it names the installation the
  LinkerdConfig adopted, when every opted-in pod ran it (``adoption``): the keys the format
  writes, as they were installed (``installed``, a ``formats.Snapshot``), written back when
  going back (``desired.restored_config``), so the first upgrade can roll back too.
* A rollback is a halt (``health.halt_record``) with a ``rollback`` section: the
  configuration it returns to, its phase (``RollingBack`` until every workload the failed
  rollout restarted is back and healthy, then ``RolledBack``), and those workloads, listed
  when the rollback began so that a leader taking over mid-way knows what to wait for.

Phase machine (for one attempt: a configuration hash and the resume annotation; a new
configuration or the resume annotation ends it, as it ends a halt, and an edit of
``spec.rollout`` alone, a new generation of the same configuration, does not)::

    (gate failed) --onFailure: Rollback, a completed config to return to--> RollingBack
    RollingBack --every listed workload restored and healthy--> RolledBack

A Deployment is restored the way ``kubectl rollout undo`` does it: its pod template goes back
to its previous ReplicaSet's, so the controller scales that ReplicaSet up again and pods that
were admitted before come back even where no new pod can be admitted. StatefulSets and
DaemonSets (and Deployments with no previous ReplicaSet kept) are restarted onto the old
configuration instead. Either way the workload records when (a restart's stamp on its
template, an undo's on its own metadata: ``mesh.restore_patch``), and its deadline runs
from then (``health.brought_back``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import Final

import orjson

from linkerd_config.kube import revisions
from linkerd_config.kube.resource import Json, unix_time
from linkerd_config.linkerd.admission.validation import render_errors, validate
from linkerd_config.linkerd.configmap.desired import (
    Desired,
    completed_digest,
    desired_config,
    restored_config,
)
from linkerd_config.linkerd.formats import FormatError, VersionError
from linkerd_config.linkerd.formats.base import CONFIGURATION_SECTIONS, Snapshot
from linkerd_config.linkerd.mesh import (
    RESTARTED_AT_ANNOTATION,
    RESTARTED_FOR_ANNOTATION,
    Workload,
)
from linkerd_config.linkerd.rollout.record import (
    MAX_SNAPSHOT_CHARS,
    Completed,
    Halt,
    Record,
    Rollback,
    digest,
    fields,
    generation,
    snapshot_size,
)
from linkerd_config.linkerd.spec.crd import (
    RECORD_ANNOTATION,
    ROLLBACK_MAX_LISTED,
)

MAX_LISTED: Final = ROLLBACK_MAX_LISTED
"""The most workloads a rollback record lists (the CRD's bound, which the resource states);
beyond them, the restart records on the workloads still say which go back, but their health
after is not waited for."""


def recorded_spec(config: Json) -> Json:
    """What ``lastCompleted`` keeps of a spec: what the configuration is rendered from."""
    return {k: v for k, v in (config.get("spec") or {}).items() if k in CONFIGURATION_SECTIONS}


def completed_record(
    config: Json, config_hash: str, at: str, *, again: bool = False
) -> Completed | None:
    """``status.lastCompleted`` now that ``config_hash``'s rollout completed; None when status
    already names it (nothing to write), unless it completed ``again`` (a re-mesh after its
    completion: the record's time moves on, so what was re-meshed is not judged again)."""
    current = Record.of(config).completed
    if current is not None and current.config_hash == config_hash and not again:
        return None
    spec = orjson.dumps(recorded_spec(config), option=orjson.OPT_SORT_KEYS).decode()
    return Completed(config_hash, generation(config), at, spec=spec)


def adopting(config: Json) -> bool:
    """Whether ``config`` has written nothing yet, nor recorded a completed configuration:
    what is installed is not its own, and its first write replaces it."""
    found = Record.of(config)
    status = config.get("status") or {}
    return "completed" not in found.present and status.get("configHash") is None


def adoption(
    config: Json, installed_hash: str, snapshot: Snapshot, stale: int, at: str
) -> tuple[Completed | None, str]:
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
    size = snapshot_size(snapshot)
    if size > MAX_SNAPSHOT_CHARS:
        return None, f"the installed configuration is {size} characters, over {MAX_SNAPSHOT_CHARS}"
    return Completed(installed_hash, 0, at, installed=snapshot), ""


def completed_at(config: Json, config_hash: str) -> float | None:
    """When ``config_hash``'s rollout last completed, as status records it; None when the
    last completed configuration is another (or its time cannot be read)."""
    found = Record.of(config).completed
    if found is None or found.config_hash != config_hash:
        return None
    return unix_time(found.at)


def settled(config: Json) -> str | None:
    """The hash of the last configuration whose rollout completed, if status records one."""
    found = Record.of(config).completed
    return None if found is None else found.config_hash


MAX_CARRIED_CHARS: Final = 1 << 16
"""The longest record the managed ConfigMap carries (its annotations share 256 KiB with
everyone else's); a longer one (an adopted installation's large snapshot) is not carried."""
CARRIER_NAME: Final = "linkerdConfig"


def carried(config: Json, halt: Halt | None) -> str:
    """The record a rollback in force leaves on the managed ConfigMap
    (``RECORD_ANNOTATION``): the LinkerdConfig's name, its halt with the rollback, and the
    last completed configuration it returns to, as JSON. The ConfigMap outlives the
    LinkerdConfig (a GitOps prune, a replace), so a LinkerdConfig made again under that name,
    asking for the configuration that failed, goes on going back (``carried_back``). Empty:
    no rollback in force, or a record over ``MAX_CARRIED_CHARS``."""
    if halt is None or halt.rollback is None:
        return ""
    found = Record.of(config).completed
    if found is None or found.config_hash != halt.rollback.to_hash:
        return ""
    record = {CARRIER_NAME: config["metadata"]["name"], **fields(halt=halt, completed=found)}
    text = orjson.dumps(record, option=orjson.OPT_SORT_KEYS).decode()
    return text if len(text) <= MAX_CARRIED_CHARS else ""


def carried_back(
    configmap: Json | None, config: Json, asked_hash: str
) -> tuple[Halt, Completed] | None:
    """The halt (with its rollback) and the completed configuration to give back to
    ``config`` from the record its managed ConfigMap carries (``carried``): when its status
    records neither (it was made again since), and the record is this LinkerdConfig's, of a
    rollback of the configuration its spec asks for now, to the completed one it names.
    None otherwise. Read leniently and bounded (anyone who may edit the ConfigMap may have
    written it; what it names is validated again before anything renders it)."""
    if Record.of(config).present & {"halt", "completed"}:
        return None
    annotations = ((configmap or {}).get("metadata") or {}).get("annotations") or {}
    text = annotations.get(RECORD_ANNOTATION)
    if not isinstance(text, str) or len(text) > MAX_CARRIED_CHARS:
        return None
    try:
        found = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(found, dict) or found.get(CARRIER_NAME) != config["metadata"]["name"]:
        return None
    carried = Record.read(found)
    halt, completed = carried.halt, carried.completed
    if halt is None or halt.rollback is None or completed is None:
        return None
    if halt.config_hash != asked_hash or completed.config_hash != halt.rollback.to_hash:
        return None
    return halt, completed


def start(halt: Halt, target: Completed, restarted: Iterable[Workload]) -> Halt:
    """A halt record turned into a rollback to ``target`` (the last completed configuration),
    with the owners the failed rollout restarted: the ones to bring back."""
    owners = sorted(str(w) for w in restarted if w.kind != "Pod")[:MAX_LISTED]
    return halt.with_rollback(target.config_hash, target.generation, owners)


def rendered_target(
    config: Json, halt: Halt | None, current: Mapping[str, Mapping[str, str]]
) -> Desired | None:
    """What the ConfigMaps hold while ``halt``'s rollback is in force: its target, the last
    completed configuration, as status records it (a spec rendered again onto what is
    installed now, the spec's ``rollout`` kept as it is now; or an adopted installation
    written back); None when ``halt`` is no rollback, or its target is not what status
    records or no longer validates (then it cannot go back). Raises what
    ``desired.desired_config`` raises when what is installed now cannot take it."""
    target = _target_in_force(config, halt)
    if target is not None and target.installed is not None:
        return restored_config(config, target.installed, current)
    back = config_to_render(config, halt)
    return None if back is None else desired_config(back, current)


def config_to_render(config: Json, halt: Halt | None) -> Json | None:
    """The LinkerdConfig as it stood when ``halt``'s rollback target completed (its spec's
    ``rollout`` kept as it is now), to render instead of the spec; None when ``halt`` is no
    rollback, its target is not what status records or no longer validates, or is an adopted
    installation (no spec: ``rendered_target`` writes its snapshot back)."""
    target = _target_in_force(config, halt)
    if target is None or target.installed is not None:
        return None
    return _with_recorded_spec(config, target)[0]


def vouched_for(completed: Completed, managed: Json | None, recorded: str | None = None) -> bool:
    """Whether ``completed`` is the controller's own record by what is kept of it alone: the
    managed ConfigMap carries its digest (``COMPLETED_ANNOTATION``, sent with the write that
    moved it on), or this process recorded it (``recorded``: the digest it remembers). When
    neither, only ``holds`` can tell, by rendering it again. Status alone never vouches: a
    status writer cannot write the ConfigMap (issue 61, finding 1)."""
    mine = digest(completed)
    return mine == completed_digest(managed) or mine == recorded


def holds(
    config: Json, completed: Completed, held: str | None, current: Mapping[str, Mapping[str, str]]
) -> bool:
    """Whether ``completed`` is the configuration the managed ConfigMap holds: ``held``, the
    hash we annotate it with, is its hash, and so is its record rendered again onto what is
    installed now (its spec judged as any spec is, or its adopted keys written back). Then
    the ConfigMap vouches for it: nobody who cannot write the ConfigMap can make a record
    that renders to what it holds. False when it does not render."""
    if held is None or completed.config_hash != held:
        return False
    try:
        if completed.installed is not None:
            return restored_config(config, completed.installed, current).config_hash == held
        back = _with_recorded_spec(config, completed)[0]
        return back is not None and desired_config(back, current).config_hash == held
    except (FormatError, VersionError):
        return False


def rollback_of(halt: Halt | None) -> Rollback | None:
    """``halt``'s rollback, if it is one: only then has ``rendered_target`` anything to render."""
    return None if halt is None else halt.rollback


def returned_to(halt: Halt, failed: Desired, to: Desired | None) -> tuple[str, str]:
    """The configuration hash and proxy version a rollback pass returns to: ``to``'s, or,
    when it cannot go back (None), the failed one's (``Halt.rolled``: the configuration
    rolled out when it failed), which ``observe.rollback_pass`` reads as nowhere to go."""
    if to is None:
        return halt.rolled, failed.proxy.version
    return to.config_hash, to.proxy.version


def _target_in_force(config: Json, halt: Halt | None) -> Completed | None:
    """The ``lastCompleted`` record ``halt``'s rollback returns to, if status still holds it."""
    back = rollback_of(halt)
    if back is None:
        return None
    target = Record.of(config).completed
    if target is None or target.config_hash != back.to_hash:
        return None
    return target


def _with_recorded_spec(config: Json, record: Completed) -> tuple[Json | None, str]:
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
    recorded = {**config, "spec": {**spec, **({"rollout": rollout} if rollout else {})}}
    problems = validate(recorded, stored=True)
    if problems:
        return None, f"its spec no longer validates: {render_errors(problems)}"
    return recorded, ""


def target(config: Json, failed_hash: str, asked_hash: str = "") -> tuple[Completed | None, str]:
    """Where a failed rollout of ``failed_hash`` goes back to (the ``lastCompleted`` record),
    or None and why it cannot go back. ``asked_hash``: the configuration the spec asks for,
    when ``failed_hash`` is the bundle the trust-anchor guard held on to instead (the record
    of the configuration completed before either)."""
    found = Record.of(config)
    record = found.completed
    if record is None:
        if "completed" in found.present:
            return None, "status.lastCompleted cannot be read"
        return None, "no earlier configuration of this LinkerdConfig completed its rollout"
    if record.config_hash == failed_hash:
        return None, "the last configuration that completed its rollout is the one that failed"
    if record.config_hash == asked_hash:
        return None, (
            "the last configuration that completed its rollout is the one the trust-anchor "
            "guard holds back"
        )
    why = _with_recorded_spec(config, record)[1]
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


def _not_failed(failed_hash: str) -> Callable[[Json], bool]:
    def not_failed(template: Json) -> bool:
        annotations = (template.get("metadata") or {}).get("annotations") or {}
        return bool(annotations.get(RESTARTED_FOR_ANNOTATION) != failed_hash)

    return not_failed


def previous_template(
    deployment: Json, replicasets: Iterable[Json], failed_hash: str
) -> Json | None:
    """The pod template of the Deployment's newest ReplicaSet not made for ``failed_hash`` (as
    ``kubectl rollout undo`` takes the previous revision's), without the ReplicaSet's own
    ``pod-template-hash`` label; None when the Deployment kept none."""
    return revisions.revision_template(deployment, replicasets, _not_failed(failed_hash))


def undo_makes_pods(deployment: Json, replicasets: Iterable[Json], failed_hash: str) -> bool:
    """Whether bringing the Deployment back to ``previous_template`` would create pods: that
    ReplicaSet has fewer than the Deployment's replicas (``revisions.short_of``). When it has
    them all, going back only scales the revision our restart made down (nothing is admitted,
    so nothing can come without the proxy); when it kept none, there is nothing to go to."""
    found = revisions.revision_of(deployment, replicasets, _not_failed(failed_hash))
    return found is not None and revisions.short_of(deployment, found) > 0


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
