"""What the ConfigMap should say, who may say it, and how status reports it. Pure functions.

* **Ownership**: of several LinkerdConfigs targeting one ConfigMap the oldest wins
  (creationTimestamp, then name): deterministic on every replica and across restarts. The
  others get ``Conflict=True`` and change nothing.
* **Managed keys only**: the desired ConfigMap carries only the keys the format manages
  (``global``/``proxy``), our labels and annotations. Written by server-side apply with our
  field manager, it never removes or changes ``install`` or any other key.
* **Trust anchor**: a spec without one keeps the anchor already in the cluster's ConfigMap;
  with neither, nothing is written (Linkerd cannot run without a trust anchor).
* **Nothing we did not write is lost**: the rest of the ConfigMap (other keys such as
  ``install``, foreign labels and annotations such as ``linkerd.io/created-by``) is copied into
  a companion ConfigMap ``<name>-preserved`` whenever it changes; if the ConfigMap is deleted,
  it is recreated from that copy, even by a controller started after the deletion.
* **Deleting the CR never deletes the ConfigMap**: no ownerReference is set (cluster-scoped
  owner, namespaced object, and a mesh must outlive its manager); the annotation says who
  manages it.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import orjson

from linkerd_config.kube.resource import Json, rfc3339
from linkerd_config.linkerd.defaults import defaulted
from linkerd_config.linkerd.formats import format_for
from linkerd_config.linkerd.linkerdconfig_resource import (
    HASH_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    OWNER_ANNOTATION,
    Target,
)

TRUST_ANCHOR_FIELD = "spec.global.identityContext.trustAnchorsPEM"


class ConfigError(ValueError):
    """The object cannot be turned into a config; each problem names its field."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{f}: {m}" for f, m in problems))


def target_of(config: Json) -> Target:
    spec = defaulted(config.get("spec") or {})
    return Target(spec["global"]["linkerdNamespace"], spec["global"]["configMap"])


def owner_among(configs: Iterable[Json], target: Target) -> Json | None:
    """The LinkerdConfig that manages ``target``: the oldest, ties broken by name."""
    rivals = [c for c in configs if target_of(c) == target and not _deleting(c)]
    if not rivals:
        return None
    return min(
        rivals, key=lambda c: (c["metadata"].get("creationTimestamp", ""), c["metadata"]["name"])
    )


def _deleting(config: Json) -> bool:
    return bool(config["metadata"].get("deletionTimestamp"))


@dataclass(frozen=True)
class Desired:
    target: Target
    data: dict[str, str]
    config_hash: str
    trust_anchor_source: str  # "Spec" or "Cluster"
    proxy_version: str


def desired_config(config: Json, current_data: Mapping[str, str] | None) -> Desired:
    """Render the managed keys for ``config``; raises ConfigError naming fields."""
    spec = defaulted(config.get("spec") or {})
    target = Target(spec["global"]["linkerdNamespace"], spec["global"]["configMap"])
    fmt = format_for(spec["global"]["version"])
    identity = spec["global"].setdefault("identityContext", {})
    source = "Spec"
    if not (identity.get("trustAnchorsPEM") or "").strip():
        existing = fmt.trust_anchors(current_data or {})
        if not existing:
            raise ConfigError(
                [(TRUST_ANCHOR_FIELD, f"not set, and ConfigMap {target} holds none to keep")]
            )
        identity["trustAnchorsPEM"] = existing
        source = "Cluster"
    data = fmt.render(spec)
    digest = hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
    return Desired(target, data, digest, source, spec["proxy"]["proxyVersion"])


def drifted(configmap: Json | None, desired: Desired) -> bool:
    if configmap is None:
        return True
    data = configmap.get("data") or {}
    annotations = configmap["metadata"].get("annotations") or {}
    return (
        any(data.get(k) != v for k, v in desired.data.items())
        or annotations.get(HASH_ANNOTATION) != desired.config_hash
    )


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
    """The server-side apply body: only the fields we own."""
    return _configmap(
        desired.target,
        {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
        {OWNER_ANNOTATION: owner_name, HASH_ANNOTATION: desired.config_hash},
        desired.data,
    )


# -- what we did not write --------------------------------------------------------------------

PRESERVED_SUFFIX = "-preserved"
PRESERVED_LABELS = "config.linkerd.io/preserved-labels"
PRESERVED_ANNOTATIONS = "config.linkerd.io/preserved-annotations"
_OUR_ANNOTATIONS = frozenset({OWNER_ANNOTATION, HASH_ANNOTATION})


@dataclass(frozen=True)
class Unmanaged:
    """The part of a managed ConfigMap that is not ours: it must survive anything we do."""

    data: dict[str, str]
    binary_data: dict[str, str]
    labels: dict[str, str]
    annotations: dict[str, str]


def preserved_name(target: Target) -> str:
    return f"{target.name}{PRESERVED_SUFFIX}"


def unmanaged_part(configmap: Json, managed_keys: Iterable[str]) -> Unmanaged:
    managed = set(managed_keys)
    meta = configmap.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    return Unmanaged(
        {k: v for k, v in (configmap.get("data") or {}).items() if k not in managed},
        dict(configmap.get("binaryData") or {}),
        {k: v for k, v in labels.items() if k != MANAGED_BY_LABEL},
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


def from_preserved(copy_: Json | None) -> Unmanaged | None:
    """What ``preserved_copy`` stored; None without a (readable) copy."""
    if copy_ is None:
        return None
    annotations = (copy_.get("metadata") or {}).get("annotations") or {}
    try:
        labels = orjson.loads(annotations.get(PRESERVED_LABELS, "{}"))
        foreign = orjson.loads(annotations.get(PRESERVED_ANNOTATIONS, "{}"))
    except orjson.JSONDecodeError:
        return None
    return Unmanaged(
        dict(copy_.get("data") or {}), dict(copy_.get("binaryData") or {}), labels, foreign
    )


def restored(desired: Desired, part: Unmanaged, owner_name: str) -> Json:
    """A deleted ConfigMap whole again: what we did not write, and what we do. Created in one
    step, so no reader (the kubelet copying it to the injector) ever sees half of it."""
    ours = apply_body(desired, owner_name)
    return _configmap(
        desired.target,
        {**part.labels, **ours["metadata"]["labels"]},
        {**part.annotations, **ours["metadata"]["annotations"]},
        {**part.data, **ours["data"]},
        part.binary_data,
    )


# -- status ---------------------------------------------------------------------------------


def now_rfc3339() -> str:
    return rfc3339()


def set_condition(
    conditions: list[Json],
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    generation: int,
    now: str | None = None,
) -> list[Json]:
    """A new list with ``type_`` set; lastTransitionTime moves only when status changes."""
    text = "Unknown" if status is None else ("True" if status else "False")
    result = [copy.deepcopy(c) for c in conditions if c.get("type") != type_]
    previous = next((c for c in conditions if c.get("type") == type_), None)
    if previous is not None and previous.get("status") == text:
        transition = str(previous["lastTransitionTime"])
    else:
        transition = now or now_rfc3339()
    result.append(
        {
            "type": type_,
            "status": text,
            "observedGeneration": generation,
            "lastTransitionTime": transition,
            "reason": reason,
            "message": message,
        }
    )
    return sorted(result, key=lambda c: str(c["type"]))


def condition(status: Json | None, type_: str) -> Json | None:
    for c in (status or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None
