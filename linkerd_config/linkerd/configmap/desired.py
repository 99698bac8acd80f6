"""What the ConfigMap should say, who may say it, and how status reports it. Pure functions.

* **Ownership**: of several LinkerdConfigs targeting one ConfigMap the oldest wins
  (creationTimestamp, then name): deterministic on every replica and across restarts. The
  others get ``Conflict=True`` and change nothing.
* **Managed keys only**: the desired ConfigMap carries only the keys the format manages
  (legacy ``global``/``proxy``; ``values``, rewritten in place with every value we do not
  manage kept), our labels and annotations. Written by server-side apply with our field
  manager, it never removes or changes ``install`` or any other key. The values format also
  writes ``ca-bundle.crt`` of ``linkerd-identity-trust-roots`` (a companion ConfigMap).
* **Trust anchor**: a spec without one keeps the anchor already in the cluster; in the legacy
  format, with neither, nothing is written (Linkerd cannot run without a trust anchor).
* **The configuration's identity** (its hash, recorded on every restarted workload) covers
  only what the spec sets: a Helm setting we do not manage changing restarts nothing.
* **Nothing we did not write is lost**: the rest of the ConfigMap (other keys such as
  ``install``, foreign labels and annotations such as ``linkerd.io/created-by``) is copied into
  a companion ConfigMap ``<name>-preserved`` whenever it changes; if the ConfigMap is deleted,
  it is recreated from that copy, even by a controller started after the deletion.
* **Deleting the CR never deletes the ConfigMap**: no ownerReference is set (cluster-scoped
  owner, namespaced object, and a mesh must outlive its manager); the annotation says who
  manages it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import orjson

from linkerd_config.kube.memo import Memo
from linkerd_config.kube.resource import Json, rfc3339
from linkerd_config.linkerd.admission.defaults import defaulted
from linkerd_config.linkerd.formats import (
    FormatError,
    Installed,
    Rendering,
    Snapshot,
    bounded,
    format_of,
)
from linkerd_config.linkerd.mesh import DesiredProxy
from linkerd_config.linkerd.spec.crd import (
    COMPLETED_ANNOTATION,
    HASH_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    OWNER_ANNOTATION,
    RECORD_ANNOTATION,
    Target,
    target_of,
)


@dataclass(frozen=True)
class Desired:
    target: Target
    data: dict[str, str]
    config_hash: str
    trust_anchor_source: str  # "Spec" or "Cluster"
    proxy: DesiredProxy
    companions: dict[str, dict[str, str]] = field(default_factory=dict)
    """Other ConfigMaps in the target's namespace, by name: the keys we write there."""
    preserve_keys: frozenset[str] = frozenset()
    """Keys we rewrite in place (``values``): kept whole in the preserved copy as well."""
    linkerd_version: str = ""
    config_format: str = ""
    depends_on: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Other ConfigMaps in the target's namespace the installation cannot do without (the
    trust roots), with the keys it cannot do without: copied while they hold them, restored
    whole from the copy when deleted, a key put back from it when deleted."""
    carried: str = ""
    """The rollout's record carried on the target (``RECORD_ANNOTATION``, written by
    ``rollback.carried``) while a rollback is in force: what going back needs outlives the
    LinkerdConfig. Empty: none (not rendered: the controller sets it from status)."""
    vouches: str = ""
    """The digest of the ``lastCompleted`` record the target vouches for
    (``COMPLETED_ANNOTATION``), sent with each write of it, never a write of its own: the
    configuration it names is the one the target held before, or one this process recorded.
    Empty: none (not rendered: the controller sets it)."""

    @property
    def anchors_stated(self) -> bool:
        """The spec states the trust anchors (False: the cluster's are kept, its to write)."""
        return self.trust_anchor_source == "Spec"

    def ours_in(self, name: str) -> dict[str, str]:
        """The keys we write in ConfigMap ``name`` of the target's namespace."""
        return self.data if name == self.target.name else self.companions.get(name, {})


def desired_config(config: Json, current: Mapping[str, Mapping[str, str]]) -> Desired:
    """What the cluster should hold for ``config``, given the data of the ConfigMaps in the
    target's namespace by name (the target's own may come from its preserved copy); raises
    FormatError naming fields, InstalledDataError naming the ConfigMap and key whose data
    cannot be used (read within ``formats.bounded``'s limits).

    A function of the spec and ``current`` alone, so the last few answers are remembered:
    most reconciles (woken by a pod, a status write) render what they rendered before."""
    return _RENDERED.get_or_make(
        [config.get("spec"), current], lambda: _desired(config, current, None)
    )


_RENDERED: Memo[Desired] = Memo(8)
"""desired_config's last answers: a LinkerdConfig or two, each rendered onto a few states of
its namespace."""


def restored_config(
    config: Json, snapshot: Snapshot, current: Mapping[str, Mapping[str, str]]
) -> Desired:
    """What the cluster should hold to go back to ``snapshot`` (the installation ``config``
    adopted): ``desired_config``'s, with every field the spec sets as it was installed then
    (``ConfigFormat.restoring``). The same snapshot gives the same hash whatever else is
    installed since."""
    return _desired(config, current, snapshot)


def adopted_snapshot(config: Json, current: Mapping[str, Mapping[str, str]]) -> Snapshot:
    """What is installed now of the keys ``config``'s format writes (``ConfigFormat.snapshot``)."""
    target = target_of(config)
    installed = Installed(str(target), current.get(target.name) or {}, current)
    return format_of(config.get("spec") or {}, installed).snapshot(installed)


def _desired(
    config: Json, current: Mapping[str, Mapping[str, str]], snapshot: Snapshot | None
) -> Desired:
    target = target_of(config)
    raw = config.get("spec") or {}
    installed = Installed(str(target), current.get(target.name) or {}, current)
    fmt = format_of(raw, installed)
    spec = defaulted(raw, fmt)
    rendering = (
        fmt.rendering(spec, installed)
        if snapshot is None
        else fmt.restoring(snapshot, spec, installed)
    )
    _readable_back(rendering, target)
    identity = {"managed": rendering.managed, "companions": rendering.companions}
    if not rendering.companions:
        identity = dict(rendering.managed)  # the legacy format's hash, unchanged since v1
    digest = hashlib.sha256(orjson.dumps(identity, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return Desired(
        target,
        rendering.data,
        digest[:16],
        rendering.trust_anchor_source,
        rendering.proxy,
        rendering.companions,
        fmt.managed_keys - fmt.owned_keys,
        str(fmt.version),
        fmt.name,
        rendering.depends_on,
    )


def _readable_back(rendering: Rendering, target: Target) -> None:
    """FormatError naming the key when a rendering would write more than the readers read
    back (``bounded.MAX_BYTES``): written, it would refuse its own write at the next
    reconcile (installed values near the bound, and a spec adding a trust anchor)."""
    places = [(str(target), rendering.data)] + [
        (f"{target.namespace}/{name}", data) for name, data in rendering.companions.items()
    ]
    for where, data in places:
        for key, text in data.items():
            try:
                bounded.check_size(text)
            except bounded.Unreadable as error:
                raise FormatError(
                    [
                        (
                            f"ConfigMap {where}, key {key}",
                            f"as written it {error}, more than is read back: the spec's "
                            "fields and what is installed there, together",
                        )
                    ]
                ) from None


def in_namespace(objects: Iterable[tuple[str, Json]], namespace: str) -> dict[str, Json]:
    """Of cached ``(namespace/name, object)`` pairs, those in ``namespace``, by name."""
    prefix = f"{namespace}/"
    return {key[len(prefix) :]: obj for key, obj in objects if key.startswith(prefix)}


def current_data(configmaps: Mapping[str, Json], target: Target) -> dict[str, dict[str, str]]:
    """What a rendering reads: the data of the ConfigMaps in the target's namespace, by name.
    A deleted ConfigMap (the target, the trust roots) is rendered onto what it held, kept in
    its preserved copy; so is a key deleted from one that its copy keeps (the ``values`` we
    rewrite in place, which also says the release: the rendering writes it back as it was,
    rather than asking the spec for the version the deleted key declared)."""
    current = {name: dict(cm.get("data") or {}) for name, cm in configmaps.items()}
    for name, copy_ in configmaps.items():
        original = name.removesuffix(PRESERVED_SUFFIX)
        if original == name or not _ours(copy_):
            continue
        part = from_preserved(copy_)
        if part is None:
            continue
        if original not in configmaps:
            current[original] = part.data
        else:  # only what it lacks: what it holds is the truth, whoever wrote it
            current[original] = {**part.data, **current[original]}
    return current


def _ours(configmap: Json) -> bool:
    labels = (configmap.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE)


def held_config_hash(configmap: Json | None) -> str | None:
    """The configuration a ConfigMap holds, by the hash we annotate it with (None: none)."""
    annotations = ((configmap or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(HASH_ANNOTATION)
    return value if isinstance(value, str) else None


def completed_digest(configmap: Json | None) -> str | None:
    """The digest of the completed configuration a ConfigMap vouches for
    (``COMPLETED_ANNOTATION``; None: none)."""
    annotations = ((configmap or {}).get("metadata") or {}).get("annotations") or {}
    value = annotations.get(COMPLETED_ANNOTATION)
    return value if isinstance(value, str) else None


def drifted(configmaps: Mapping[str, Json], desired: Desired) -> list[str]:
    """The ConfigMaps (by name) whose managed keys or our hash differ from ``desired``."""
    found = []
    configmap = configmaps.get(desired.target.name)
    if configmap is None:
        found.append(desired.target.name)
    else:
        data = configmap.get("data") or {}
        annotations = (configmap.get("metadata") or {}).get("annotations") or {}
        if (
            any(data.get(k) != v for k, v in desired.data.items())
            or held_config_hash(configmap) != desired.config_hash
            or (desired.carried and annotations.get(RECORD_ANNOTATION) != desired.carried)
        ):
            found.append(desired.target.name)
    for name, keys in desired.companions.items():
        data = (configmaps.get(name) or {}).get("data") or {}
        if any(data.get(k) != v for k, v in keys.items()):
            found.append(name)
    found.extend(sorted(n for n in missing(configmaps, desired) if n not in found))
    return found


def missing(configmaps: Mapping[str, Json], desired: Desired) -> list[str]:
    """The ConfigMaps the installation depends on that are not in the cluster, or lack a
    key it cannot do without (``missing_keys``)."""
    return sorted(name for name in desired.depends_on if missing_keys(configmaps, desired, name))


def missing_keys(configmaps: Mapping[str, Json], desired: Desired, name: str) -> list[str]:
    """The keys the installation cannot do without that dependency ``name`` lacks (all of
    them when it is not in the cluster)."""
    needed = sorted(desired.depends_on.get(name, ()))
    if name not in configmaps:
        return needed
    data = configmaps[name].get("data") or {}
    return [key for key in needed if key not in data]


def unrestorable(configmaps: Mapping[str, Json], desired: Desired) -> list[str]:
    """Missing ConfigMaps (or keys) we can neither restore (no copy of them was kept) nor
    write (the spec puts nothing there)."""
    lost = []
    for name in missing(configmaps, desired):
        copy_ = from_preserved(configmaps.get(preserved_name(name)))
        ours = desired.companions.get(name, {})
        needed = missing_keys(configmaps, desired, name)
        if any(k not in ours and (copy_ is None or k not in copy_.data) for k in needed):
            lost.append(name)
    return lost


def _configmap(
    target: Target,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    data: Mapping[str, str],
    binary_data: Mapping[str, str] | None = None,
) -> Json:
    body: Json = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": target.name,
            "namespace": target.namespace,
            "labels": dict(labels),
            "annotations": dict(annotations),
        },
        "data": dict(data),
    }
    if binary_data is not None:
        body["binaryData"] = dict(binary_data)
    return body


def apply_body(desired: Desired, owner_name: str) -> Json:
    """The server-side apply body: only the fields we own (a record no longer carried is no
    longer sent, so server-side apply removes it). No label: ``app.kubernetes.io/managed-by``
    is its installer's (Helm's ``Helm``, which Helm checks before an upgrade), and the
    annotations say which LinkerdConfig manages the keys (issue 61, finding 9: a Helm
    install's label was rewritten to ``linkerd-config``)."""
    annotations = {OWNER_ANNOTATION: owner_name, HASH_ANNOTATION: desired.config_hash}
    if desired.carried:
        annotations[RECORD_ANNOTATION] = desired.carried
    if desired.vouches:
        annotations[COMPLETED_ANNOTATION] = desired.vouches
    return _configmap(desired.target, {}, annotations, desired.data)


def companion_body(desired: Desired, name: str, owner_name: str) -> Json:
    """The server-side apply body for a companion ConfigMap: our keys there, nothing else
    (no label or annotation where we write no key: a restored dependency stays its own)."""
    keys = desired.companions.get(name, {})
    return _configmap(
        Target(desired.target.namespace, name), {}, {OWNER_ANNOTATION: owner_name} if keys else {},
        keys,
    )  # fmt: skip


# -- what we did not write --------------------------------------------------------------------

PRESERVED_SUFFIX = "-preserved"
PRESERVED_LABELS = "config.linkerd.io/preserved-labels"
PRESERVED_ANNOTATIONS = "config.linkerd.io/preserved-annotations"
_OUR_ANNOTATIONS = frozenset({OWNER_ANNOTATION, HASH_ANNOTATION, COMPLETED_ANNOTATION})


@dataclass(frozen=True)
class Unmanaged:
    """The part of a managed ConfigMap that is not ours: it must survive anything we do."""

    data: dict[str, str]
    binary_data: dict[str, str]
    labels: dict[str, str]
    annotations: dict[str, str]


def preserved_name(target: Target | str) -> str:
    """Where the copy of a ConfigMap's unmanaged part is kept (the same namespace)."""
    name = target.name if isinstance(target, Target) else target
    return f"{name}{PRESERVED_SUFFIX}"


def unmanaged_part(configmap: Json, managed_keys: Iterable[str]) -> Unmanaged:
    managed = set(managed_keys)
    meta = configmap.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    return Unmanaged(
        {k: v for k, v in (configmap.get("data") or {}).items() if k not in managed},
        dict(configmap.get("binaryData") or {}),
        {k: v for k, v in labels.items() if (k, v) != (MANAGED_BY_LABEL, MANAGED_BY_VALUE)},
        {k: v for k, v in annotations.items() if k not in _OUR_ANNOTATIONS},
    )


def preserved_copy(target: Target, part: Unmanaged, owner_name: str) -> Json:
    """The companion ConfigMap holding ``part`` (its metadata as JSON annotations)."""

    def as_json(value: dict[str, str]) -> str:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()

    return _configmap(
        Target(target.namespace, preserved_name(target)),
        {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
        {
            OWNER_ANNOTATION: owner_name,
            PRESERVED_LABELS: as_json(part.labels),
            PRESERVED_ANNOTATIONS: as_json(part.annotations),
        },
        part.data,
        part.binary_data,
    )


def foreign_in_copy(existing: Json, wanted: Json) -> Json | None:
    """A merge patch removing what a preserved copy holds beyond ``wanted`` (the copy we
    write): keys or metadata someone else added, which our server-side apply cannot remove
    (they are another field manager's) and a restore would carry back. None if there is
    nothing."""
    patch: Json = {}
    for section in ("data", "binaryData"):
        extra = set(existing.get(section) or {}) - set(wanted.get(section) or {})
        if extra:
            patch[section] = dict.fromkeys(sorted(extra))
    meta = existing.get("metadata") or {}
    for meta_field in ("labels", "annotations"):
        extra = set(meta.get(meta_field) or {}) - set(wanted["metadata"].get(meta_field) or {})
        if extra:
            patch.setdefault("metadata", {})[meta_field] = dict.fromkeys(sorted(extra))
    return patch or None


def from_preserved(copy_: Json | None) -> Unmanaged | None:
    """What ``preserved_copy`` stored; None without a readable copy. Anyone who may edit
    ConfigMaps in Linkerd's namespace may edit the copy too: metadata that is not a JSON
    object of strings makes it unreadable, never a crash (nor a restore of half of it)."""
    if copy_ is None:
        return None
    annotations = (copy_.get("metadata") or {}).get("annotations") or {}
    try:
        labels = orjson.loads(annotations.get(PRESERVED_LABELS, "{}"))
        foreign = orjson.loads(annotations.get(PRESERVED_ANNOTATIONS, "{}"))
    except (orjson.JSONDecodeError, TypeError):
        return None
    if not (_strings(labels) and _strings(foreign)):
        return None
    return Unmanaged(
        dict(copy_.get("data") or {}), dict(copy_.get("binaryData") or {}), labels, foreign
    )


def _strings(value: object) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )


def restored(desired: Desired, part: Unmanaged, owner_name: str, name: str = "") -> Json:
    """A deleted ConfigMap (the target, or ``name`` among those it depends on) whole again:
    what we did not write, and what we do. Created in one step, so no reader (the kubelet
    copying it to the injector) ever sees half of it."""
    name = name or desired.target.name
    ours = (
        apply_body(desired, owner_name)
        if name == desired.target.name
        else companion_body(desired, name, owner_name)
    )
    return _configmap(
        Target(desired.target.namespace, name),
        {**part.labels, **ours["metadata"]["labels"]},
        {**part.annotations, **ours["metadata"]["annotations"]},
        {**part.data, **ours["data"]},
        part.binary_data,
    )


# -- status ---------------------------------------------------------------------------------


def now_rfc3339() -> str:
    return rfc3339()


PROGRESS_FIELDS = frozenset({"outdatedWorkloads"})
"""Status fields that move with every pod of a rollout; the condition messages quote them."""


def progress_only(current: Json, new: Json) -> bool:
    """Whether ``new`` differs from ``current`` status only in a rollout's progress: the
    outdated count and condition messages, with every condition's status and reason, every
    other field (the restarted count included) the same. Such a write may wait for the next
    pass instead of following every pod that starts or stops (a write per pod event would
    cost more API requests than the restarts themselves)."""

    def shape(status: Json) -> tuple[object, ...]:
        fields = {k: v for k, v in status.items() if k not in PROGRESS_FIELDS | {"conditions"}}
        conditions = sorted(
            (str(c.get("type")), str(c.get("status")), str(c.get("reason")))
            for c in status.get("conditions") or []
        )
        return (sorted(fields.items(), key=lambda kv: kv[0]), conditions)

    return current != new and shape({**current, **new}) == shape(current)
