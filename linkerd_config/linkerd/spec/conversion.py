"""LinkerdConfig's two API versions and the hub the domain reads, converted by the field table.

* ``v1alpha1`` is 2019's shape: ``spec.global`` and ``spec.proxy`` under the protobuf's names.
* ``v1alpha2`` states Linkerd's values under Linkerd's names (``spec.values.proxy.image.version``,
  the path ``linkerd install --set`` takes), and where the configuration goes at the top
  (``spec.linkerdNamespace``, ``spec.configMap``). It is the storage version.
* The **hub** is what validation, the defaults, the formats and reconcile read: v1alpha1's shape
  plus ``spec.values`` for the fields only v1alpha2 has. Every row of the field table has one
  path in the hub and one in v1alpha2 (``ConfigField.v1alpha2_path``), so converting is
  renaming, plus the value conversion of the few rows whose v1alpha2 type is Linkerd's own
  (``ServedAs``).

Lossless both ways for every object the schemas admit: what v1alpha1 has no home for travels in
the annotation ``config.linkerd.io/v1alpha2-values`` (JSON), the way cluster-api keeps newer
fields on older versions, and comes back out of it on the way up. Total within bounds: whatever
JSON comes in, something comes out (the API server calls this for every read of an object
stored in the other version; a failure would make the object unreadable); the one refusal is a
spec nested beyond ``MAX_DEPTH``, which validation never admits. Pure.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any, Final

import orjson

from linkerd_config.kube.managed_fields import last_written_version
from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.formats.field_table import FIELDS, HUB_SECTIONS, ConfigField, Path

__all__ = [
    "GROUP",
    "MAX_ANNOTATIONS_BYTES",
    "OMITTED_ANNOTATION",
    "OMITTED_ANNOTATION_FIELD",
    "SERVED_VERSIONS",
    "STORAGE_VERSION",
    "V1ALPHA1",
    "V1ALPHA2",
    "VALUES_ANNOTATION",
    "VALUES_ANNOTATION_FIELD",
    "ValuesOmittedError",
    "convert",
    "omitted_values",
    "said_to_writer",
    "served_field",
    "served_text",
    "to_hub",
    "version_of",
    "written_version",
]

GROUP: Final = "config.linkerd.io"
V1ALPHA1: Final = "v1alpha1"
V1ALPHA2: Final = "v1alpha2"
SERVED_VERSIONS: Final = (V1ALPHA1, V1ALPHA2)
STORAGE_VERSION: Final = V1ALPHA2
VALUES_ANNOTATION: Final = f"{GROUP}/v1alpha2-values"
"""On a v1alpha1 object: the v1alpha2 values it has no field for, as JSON."""
VALUES_ANNOTATION_FIELD: Final = f"metadata.annotations[{VALUES_ANNOTATION}]"
"""The annotation as messages about a v1alpha1 object name it."""
OMITTED_ANNOTATION: Final = f"{GROUP}/v1alpha2-values-omitted"
"""On a v1alpha1 object, instead of ``VALUES_ANNOTATION`` when that would not fit the API
server's bound on annotations: how large the values are, and that the object is to be read
and written as v1alpha2. Written back as v1alpha1, it is refused (``ValuesOmittedError``):
the values are not lost."""
OMITTED_ANNOTATION_FIELD: Final = f"metadata.annotations[{OMITTED_ANNOTATION}]"
MAX_ANNOTATIONS_BYTES: Final = 256 * 1024
"""The API server's bound on one object's annotations, keys and values together
(apimachinery's ``TotalAnnotationSizeLimitB``): a converted object over it fails the whole
read it is part of (a LIST of every LinkerdConfig, issue 61, finding 5)."""

_BY_HUB: Final = {row.path: row for row in FIELDS}
_BY_V1ALPHA2: Final = {row.v1alpha2_path: row for row in FIELDS}
_V1ALPHA2_OBJECTS: Final = {path[:depth] for path in _BY_V1ALPHA2 for depth in range(1, len(path))}
# v1alpha1's objects that have one v1alpha2 object, for naming a problem with a whole object.
_OBJECT_NAMES: Final[Mapping[str, str]] = {
    "spec.global": "spec.values",
    "spec.global.identityContext": "spec.values",
    "spec.proxy": "spec.values.proxy",
    "spec.proxy.proxyImage": "spec.values.proxy.image",
    "spec.proxy.proxyInitImage": "spec.values.proxyInit.image",
    "spec.proxy.debugImage": "spec.values.debugContainer.image",
    "spec.proxy.resource": "spec.values.proxy.resources",
}


def version_of(obj: Mapping[str, Any]) -> str:
    """The version of ``apiVersion`` (``v1alpha2`` from ``config.linkerd.io/v1alpha2``);
    anything else, or none, reads as v1alpha1, the only version there was."""
    api_version = obj.get("apiVersion")
    if isinstance(api_version, str) and api_version == f"{GROUP}/{V1ALPHA2}":
        return V1ALPHA2
    return V1ALPHA1


MAX_DEPTH: Final = 64
"""How deeply nested a spec (or the annotation's values) may be to be converted: twice what
validation admits (32), so only an object stored with the webhooks off reaches it, through a
field whose schema keeps unknown fields (``proxy.inbound``). Beyond it conversion refuses
with a message instead of recursing without bound."""


class ValuesOmittedError(ValueError):
    """A v1alpha1 object whose ``spec.values`` did not fit its annotations
    (``OMITTED_ANNOTATION``): as v1alpha2 it would lose them, so it is not converted."""


class TooDeepError(ValueError):
    """A spec nested beyond ``MAX_DEPTH``: not converted (the API server then refuses the
    read or write that needed it, with this message)."""


def _check_depth(value: Any, where: str) -> None:
    """Iterative, so the check itself cannot exhaust the stack."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = (
            node.values() if isinstance(node, Mapping) else node if isinstance(node, list) else ()
        )
        for child in children:
            if isinstance(child, Mapping | list):
                if depth + 1 > MAX_DEPTH:
                    raise TooDeepError(
                        f"{where} is nested more than {MAX_DEPTH} levels deep (a valid "
                        "LinkerdConfig has at most 32): not converted"
                    )
                stack.append((child, depth + 1))


def to_hub(obj: Mapping[str, Any]) -> Json:
    """The hub form of a LinkerdConfig of either version (a new object). TooDeepError
    beyond ``MAX_DEPTH``, which no object validation admits reaches."""
    _check_depth(obj.get("spec"), "spec")
    hub: Json = copy.deepcopy(dict(obj))
    spec = hub.get("spec")
    if not isinstance(spec, dict):
        return hub
    if version_of(obj) == V1ALPHA2:
        hub["spec"] = _hub_spec(spec)
    else:
        values = _take_annotation(hub)
        _check_depth(values, f"the annotation {VALUES_ANNOTATION}")
        if values:
            spec["values"] = values
    hub["apiVersion"] = f"{GROUP}/{V1ALPHA1}"
    return hub


def convert(obj: Mapping[str, Any], version: str) -> Json:
    """``obj`` (either version, or the hub) in ``version`` (a new object). In v1alpha1 the
    values annotation says the hub's ``spec.values``, whatever the object carried: a
    v1alpha2 object's own copy of the annotation (which validation refuses, and nothing
    reads) is not shown as values it does not have."""
    spec = obj.get("spec")
    hub_form = version == V1ALPHA1 and isinstance(spec, Mapping) and "values" in spec
    if version_of(obj) == version and isinstance(obj.get("apiVersion"), str) and not hub_form:
        return copy.deepcopy(dict(obj))
    stray = version_of(obj) == V1ALPHA2
    if version == V1ALPHA2 and not stray and (omitted := omitted_values(obj)) is not None:
        raise ValuesOmittedError(f"{OMITTED_ANNOTATION_FIELD}: {omitted}")
    hub = to_hub(obj)
    spec = hub.get("spec")
    if version == V1ALPHA2:
        if isinstance(spec, dict):
            hub["spec"] = _v1alpha2_spec(spec)
    elif isinstance(spec, dict):
        values = spec.pop("values", None)
        if values is not None:
            _put_annotation(hub, values)
        elif stray:
            _drop_annotation(hub)
    hub["apiVersion"] = f"{GROUP}/{version}"
    return hub


def served_field(field: str, version: str, *, annotated: bool = False) -> str:
    """A field as the hub names it (``spec.proxy.adminPort[2]``), as ``version`` names it
    (``spec.values.proxy.ports.admin[2]``): for messages about an object of that version.
    ``annotated``: the hub's ``spec.values`` came from a v1alpha1 object's annotation, so
    named there."""
    if annotated and (field == "spec.values" or field.startswith(("spec.values.", "spec.values["))):
        return VALUES_ANNOTATION_FIELD + field.removeprefix("spec.values")
    if version != V1ALPHA2 or not field.startswith("spec."):
        return field
    path = field.removeprefix("spec.")
    best: tuple[int, str] | None = None
    for row in FIELDS:
        name = row.name
        matches = path == name or path.startswith((name + ".", name + "["))
        if matches and (best is None or len(name) > best[0]):
            best = (len(name), row.served_field(V1ALPHA2) + path[len(name) :])
    if best is not None:
        return best[1]
    for hub_name, v1alpha2_name in sorted(_OBJECT_NAMES.items(), key=lambda kv: -len(kv[0])):
        if field == hub_name or field.startswith((hub_name + ".", hub_name + "[")):
            return v1alpha2_name + field[len(hub_name) :]
    return field


_FIELD_MENTION: Final = re.compile(r"\bspec\.[A-Za-z0-9_.\-\[\]]*[A-Za-z0-9_\]]")


def served_text(text: str, version: str, *, annotated: bool = False) -> str:
    """``text`` with every field it mentions (``spec.global.version``) named as ``version``
    names it: a message about another field says it in the reader's words too."""
    if "spec." not in text:
        return text
    return _FIELD_MENTION.sub(
        lambda found: served_field(found.group(0), version, annotated=annotated), text
    )


def written_version(obj: Mapping[str, Any]) -> str:
    """The API version a stored LinkerdConfig's spec was last written in: that of the newest
    write of any ``spec`` field the API server records (``metadata.managedFields``: each
    manager's last request, in the version it was made in; the status subresource's and
    metadata-only writes are not the spec's). The storage version when none says (no
    managedFields, or a version this controller does not serve)."""
    version = last_written_version(obj, "spec", GROUP)
    return version if version in SERVED_VERSIONS else STORAGE_VERSION


def said_to_writer(text: str, obj: Mapping[str, Any]) -> str:
    """``text`` (naming fields as the hub does, or as the object's writer does already) with
    every field named as whoever wrote the stored LinkerdConfig ``obj`` names it
    (``written_version``): a v1alpha1 object's in v1alpha1's names, the v1alpha2 values it has
    no field for in its annotation. For status conditions, Events and ``status``, which no
    request of a given version asks for."""
    version = written_version(obj)
    return served_text(text, version, annotated=version == V1ALPHA1)


# -- v1alpha2 -> hub ------------------------------------------------------------------------------


def _hub_spec(spec: Mapping[str, Any]) -> Json:
    hub: Json = {}
    for key, value in spec.items():
        row = _BY_V1ALPHA2.get((key,))
        if row is not None:
            _place(hub, row.path, value)
        elif key == "values" and isinstance(value, Mapping):
            _hub_values(hub, ("values",), value)
        else:
            hub[key] = copy.deepcopy(value)
    return hub


def _hub_values(hub: Json, path: Path, node: Mapping[str, Any]) -> None:
    for key, value in node.items():
        here = (*path, str(key))
        row = _BY_V1ALPHA2.get(here)
        if row is not None:
            converted = value if row.served_as is None else row.served_as.to_v1alpha1(value)
            _place(hub, row.path, converted)
        elif here in _V1ALPHA2_OBJECTS and isinstance(value, Mapping):
            _hub_values(hub, here, value)
        else:
            # Nothing of the table's: kept where v1alpha2 had it, which the hub's ``values``
            # section mirrors (validation names it).
            _place(hub, here, value)


# -- hub -> v1alpha2 ------------------------------------------------------------------------------


def _v1alpha2_spec(spec: Mapping[str, Any]) -> Json:
    out: Json = {}
    for key, value in spec.items():
        if key in HUB_SECTIONS and isinstance(value, Mapping):
            _v1alpha2_section(out, (key,), value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _v1alpha2_section(out: Json, path: Path, node: Mapping[str, Any]) -> None:
    for key, value in node.items():
        here = (*path, str(key))
        row: ConfigField | None = _BY_HUB.get(here)
        if row is not None:
            converted = value if row.served_as is None else row.served_as.to_v1alpha2(value)
            _place(out, row.v1alpha2_path, converted)
        elif isinstance(value, Mapping) and value:
            _v1alpha2_section(out, here, value)
        elif here[0] == "values":
            _place(out, here, value)
        # else: a v1alpha1 value the table has no field for (the v1alpha1 schema prunes
        # those before anything is stored), or an empty object, which states nothing.


# -- the annotation ------------------------------------------------------------------------------


def _take_annotation(obj: Json) -> Json | None:
    """The v1alpha2 values a v1alpha1 object carries, removed from it; None (and the
    annotation left as it is) when it is not a JSON object."""
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if not isinstance(annotations, dict) or VALUES_ANNOTATION not in annotations:
        return None
    text = annotations[VALUES_ANNOTATION]
    try:
        values = orjson.loads(text) if isinstance(text, str) else None
    except orjson.JSONDecodeError:
        values = None
    if not isinstance(values, dict):
        return None
    _drop_annotation(obj)
    return values


def omitted_values(obj: Mapping[str, Any]) -> str | None:
    """Why a v1alpha1 object cannot be written as it is: it carries ``OMITTED_ANNOTATION``
    (its values did not fit) and no values; None otherwise."""
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if not isinstance(annotations, Mapping) or OMITTED_ANNOTATION not in annotations:
        return None
    if VALUES_ANNOTATION in annotations:
        return None
    return (
        "this LinkerdConfig's spec.values did not fit v1alpha1's annotations, so they are not "
        f"here; written as v1alpha1 they would be lost. Write it as {GROUP}/{V1ALPHA2}"
    )


def _drop_annotation(obj: Json) -> None:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return
    annotations = metadata.get("annotations")
    if isinstance(annotations, dict):
        annotations.pop(VALUES_ANNOTATION, None)
        annotations.pop(OMITTED_ANNOTATION, None)
        if not annotations:
            del metadata["annotations"]


def _put_annotation(obj: Json, values: Any) -> None:
    metadata = obj.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        raise ValueError(
            "metadata is not an object: spec.values cannot be carried in v1alpha1's "
            f"annotation {VALUES_ANNOTATION}"
        )
    annotations = metadata.get("annotations")
    if not isinstance(annotations, dict):
        annotations = metadata["annotations"] = {}
    annotations.pop(OMITTED_ANNOTATION, None)
    text = orjson.dumps(values, option=orjson.OPT_SORT_KEYS).decode()
    others = sum(
        len(str(k).encode()) + len(str(v).encode())
        for k, v in annotations.items()
        if k != VALUES_ANNOTATION
    )
    if others + len(VALUES_ANNOTATION) + len(text.encode()) <= MAX_ANNOTATIONS_BYTES:
        annotations[VALUES_ANNOTATION] = text
        return
    # Over the bound, the whole read this object is part of would fail: the values stay
    # where they are stored, and the object says so.
    annotations.pop(VALUES_ANNOTATION, None)
    said = (
        f"{len(text.encode())} bytes of spec.values do not fit v1alpha1's annotations "
        f"({MAX_ANNOTATIONS_BYTES} bytes in all): read and write this LinkerdConfig as "
        f"{GROUP}/{V1ALPHA2}"
    )
    if others + len(OMITTED_ANNOTATION) + len(said) <= MAX_ANNOTATIONS_BYTES:
        annotations[OMITTED_ANNOTATION] = said


def _place(root: Json, path: Path, value: Any) -> None:
    node = root
    for key in path[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    node[path[-1]] = copy.deepcopy(value)
