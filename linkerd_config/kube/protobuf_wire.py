"""Kubernetes' protobuf encoding, decoded into the JSON shape the rest of the code reads.

The API server serves every built-in type in protobuf (``application/vnd.kubernetes.protobuf``):
a body is the magic ``k8s\\0`` and a ``runtime.Unknown`` whose ``raw`` is the object; a watch
is a stream of ``metav1.WatchEvent`` frames, each a 4-byte big-endian length and the event,
whose ``object.raw`` is again magic + ``Unknown``. It costs the server a fraction of JSON and
the client a C parser (the ``protobuf`` runtime, upb) instead of building every field.

What comes out is exactly what the JSON encoding would have given, cut to a field tree
(``field_tree``): the messages come from Kubernetes' own ``.proto`` files and the JSON names,
omissions and ``null`` s from its Go struct tags, both vendored at the pinned version
(``proto/k8s_vendor.py``). Only the fields the tree names become Python objects; the rest of
each message stays in the parser's arena and is dropped with it.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any, Final

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from linkerd_config.kube.field_tree import DROP, OTHERS, FieldTree, Node
from linkerd_config.kube.protobuf_encoding import (
    ProtobufError,
    fields,
    map_entries,
    varint_at,
)
from linkerd_config.kube.resource import Json, Prepare, go_duration, rfc3339
from linkerd_config.kube.watch import WATCH_EVENT_TYPES, WatchEvent, WatchProtocolError

PROTOBUF: Final = "application/vnd.kubernetes.protobuf"
MAGIC: Final = b"k8s\x00"

_META = "k8s.io.apimachinery.pkg.apis.meta.v1"
_PACKAGES: Final = {
    "": "k8s.io.api.core.v1",
    "v1": "k8s.io.api.core.v1",
    "apps/v1": "k8s.io.api.apps.v1",
    "coordination.k8s.io/v1": "k8s.io.api.coordination.v1",
    "meta.k8s.io/v1": _META,
}
"""apiVersion -> protobuf package, for the groups this client decodes."""

_PATH_PREFIXES: Final = ("/api/v1/", "/apis/apps/v1/", "/apis/coordination.k8s.io/v1/")


def decodes(path: str, metadata_only: bool) -> bool:
    """Whether a LIST or WATCH of ``path`` can be asked for in protobuf: a vendored group,
    or metadata only (PartialObjectMetadata is meta/v1's, custom resources included)."""
    return metadata_only or path.startswith(_PATH_PREFIXES)


# -- the vendored types --------------------------------------------------------------------


@dataclass(frozen=True)
class _Shape:
    """One field as Go's encoding/json writes it (from its struct tag)."""

    json_name: str
    pointer: bool
    collection: bool
    omitempty: bool
    omitzero: bool
    inline: bool


class _Types:
    """The descriptor pool and the JSON shapes, loaded once on first use (about 1 MiB)."""

    def __init__(self) -> None:
        folder = Path(__file__).with_name("k8s_api")
        self.pool = descriptor_pool.DescriptorPool()
        # A FileDescriptorSet is its files (field 1), each a serialized FileDescriptorProto,
        # in dependency order: handed to the pool as they are, without descriptor_pb2's
        # Python classes (2.3 MiB imported for this one read).
        files = memoryview((folder / "descriptors.binpb").read_bytes())
        entries: set[str] = set()
        for field, _, value in fields(files, "descriptor set"):
            if field == 1 and value is not None:
                self.pool.AddSerializedFile(bytes(value))
                entries.update(map_entries(value))
        self.map_entries = frozenset(entries)
        """The messages that are a map's entries (``map_entry`` set), read here: asking a
        descriptor (``GetOptions``) imports descriptor_pb2 for it."""
        shapes = json.loads((folder / "json_shapes.json").read_text())
        self._fields: dict[str, str] = shapes["messages"]
        """Each message's fields as JSON text, parsed on first use (``fields_of``): the
        informers decode a few dozen messages of about 300, and all of them parsed cost
        0.7 MiB of a 10,000-pod controller's peak."""
        self._shapes: dict[str, dict[str, _Shape]] = {}
        self.lists = frozenset(shapes["lists"])

    def message(self, full_name: str) -> type[Message]:
        try:
            found: type[Message] = message_factory.GetMessageClass(
                self.pool.FindMessageTypeByName(full_name)
            )
            return found
        except KeyError:
            raise ProtobufError(f"no vendored protobuf message {full_name}") from None

    def shape(self, message: str, field: str) -> _Shape:
        """A field of a message no Go struct describes (a type with its own JSON, say) is
        written under its protobuf name, never omitted."""
        found = self.fields_of(message).get(field)
        return found if found is not None else _Shape(field, False, False, False, False, False)

    def fields_of(self, message: str) -> dict[str, _Shape]:
        """A message's fields by protobuf name (none for a message no Go struct describes)."""
        shapes = self._shapes.get(message)
        if shapes is None:
            text = self._fields.get(message)  # kept: a thread decoding at once parses it too
            fields = json.loads(text) if text is not None else {}
            shapes = {name: _Shape(*shape) for name, shape in fields.items()}
            self._shapes[message] = shapes
        return shapes


@cache
def types() -> _Types:
    return _Types()


def message_name(api_version: str, kind: str) -> str:
    """The protobuf message of a kind (``apps/v1``, ``ReplicaSetList`` ->
    ``k8s.io.api.apps.v1.ReplicaSetList``); Status is meta/v1's whatever the group."""
    if kind == "Status":
        return f"{_META}.Status"
    package = _PACKAGES.get(api_version)
    if package is None:
        raise ProtobufError(f"no vendored protobuf types for {api_version}")
    return f"{package}.{kind}"


# -- JSON conversion -----------------------------------------------------------------------


def _time(msg: Any) -> Any:
    return None if not (msg.seconds or msg.nanos) else rfc3339(msg.seconds)


def _micro_time(msg: Any) -> Any:
    return (
        None
        if not (msg.seconds or msg.nanos)
        else rfc3339(
            datetime.fromtimestamp(msg.seconds, UTC).replace(microsecond=msg.nanos // 1000),
            micro=True,
        )
    )


def _raw_json(raw: bytes) -> Any:
    return json.loads(raw) if raw else None


_SPECIAL: Final[dict[str, Callable[[Any], Any]]] = {
    f"{_META}.Time": _time,
    f"{_META}.MicroTime": _micro_time,
    f"{_META}.Duration": lambda m: go_duration(m.duration),
    f"{_META}.FieldsV1": lambda m: _raw_json(m.Raw),
    "k8s.io.apimachinery.pkg.api.resource.Quantity": lambda m: m.string,
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": lambda m: (
        m.strVal if m.type == 1 else m.intVal
    ),
    "k8s.io.apimachinery.pkg.runtime.RawExtension": lambda m: _raw_json(m.raw),
}
"""Types whose Go JSON is not their fields (custom MarshalJSON)."""


def _is_zero_message(msg: Any, full_name: str) -> bool:
    if full_name in (f"{_META}.Time", f"{_META}.MicroTime"):
        return not (msg.seconds or msg.nanos)
    return bool(msg.ByteSize() == 0)


Converter = Callable[[Any], Any]


def _as_is(value: Any) -> Any:
    """A scalar JSON writes as protobuf decoded it (strings, ints, bools): the steps check
    for this converter and skip the call."""
    return value


_NOT_UTF8: Final = re.compile("[\udc80-\udcff]")


def _go_string(value: str | bytes) -> str:
    """A string as Go's encoding/json writes it. A string field is bytes to Go: one that is
    not UTF-8 (stored through protobuf; JSON input is made valid first) comes out of the
    protobuf runtime as ``bytes``, and Go writes each of its invalid bytes as U+FFFD."""
    if isinstance(value, str):
        return value
    text = value.decode("utf-8", "surrogateescape")  # one escape per invalid byte
    return _NOT_UTF8.sub("\ufffd", text)


def _scalar(field: FieldDescriptor) -> Converter:
    if field.type == FieldDescriptor.TYPE_STRING:
        return _go_string
    if field.type == FieldDescriptor.TYPE_BYTES:
        return lambda v: base64.b64encode(v).decode()
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        # Go writes 2.0 as 2, which a JSON decoder reads back as an int.
        return lambda v: int(v) if float(v).is_integer() else v
    return _as_is


Step = Callable[[Any, Json], None]
"""Writes one field of a message into its JSON object (or leaves it out, as Go would)."""

MAX_CONVERTERS = 4096
_CONVERTERS: dict[tuple[str, int], tuple[Node, Converter]] = {}
# Invariant: each entry holds its node, so the node's id cannot be reused while cached.


def converter(descriptor: Descriptor, node: Node) -> Converter:
    """A function from a message of ``descriptor``'s type to its JSON cut to ``node``; built
    once per (type, node) and cached (the trees are the transforms', made once)."""
    key = (descriptor.full_name, id(node))
    cached = _CONVERTERS.get(key)
    if cached is not None and cached[0] is node:
        return cached[1]
    built = _build(descriptor, node)
    if len(_CONVERTERS) >= MAX_CONVERTERS:
        _CONVERTERS.clear()  # a caller making a new tree per call: stay bounded, if slower
    _CONVERTERS[key] = (node, built)
    return built


def _build(descriptor: Descriptor, node: Node) -> Converter:
    name = descriptor.full_name
    if name in _SPECIAL:
        return _SPECIAL[name]
    if name in types().lists:
        items = descriptor.fields[0]
        inner = _value_converter(items, node)
        return lambda msg: [inner(v) for v in getattr(msg, items.name)]
    tree: Mapping[str, Any] = {OTHERS: None} if not isinstance(node, Mapping) else node
    others = tree.get(OTHERS, DROP)
    steps: list[Step] = []
    for field in descriptor.fields:
        shape = types().shape(name, field.name)
        if shape.inline:
            sub: Node = tree  # an inline struct's fields are its parent's in JSON
        else:
            json_name = shape.json_name or field.name
            sub = tree.get(json_name, others)
            if sub is DROP:
                continue
        steps.append(_field_step(field, shape, sub))

    def convert(msg: Any) -> Json:
        out: Json = {}
        for step in steps:
            step(msg, out)
        return out

    return convert


def _value_converter(field: FieldDescriptor, node: Node) -> Converter:
    """One value of ``field`` (an item, for a repeated field) as JSON."""
    if field.message_type is None:
        return _scalar(field)
    return converter(field.message_type, node)


def _field_step(field: FieldDescriptor, shape: _Shape, node: Node) -> Step:
    """Go's encoding/json on the field as protobuf decoding left it: a pointer is nil when
    the field is absent; a nil slice or map is ``null`` unless omitempty; a struct is always
    written (``omitzero`` aside); a scalar is left out when zero and omitempty."""
    attr = field.name
    key = shape.json_name or field.name
    if field.message_type is not None and field.message_type.full_name in types().map_entries:
        return _map_step(field, shape, node)
    if field.is_repeated:
        item = _value_converter(field, node)
        omitempty = shape.omitempty
        as_is = item is _as_is

        def repeated(msg: Any, out: Json) -> None:
            values = getattr(msg, attr)
            if values:
                out[key] = list(values) if as_is else [item(v) for v in values]
            elif not omitempty:
                out[key] = None

        return repeated
    # Each step is specialised here, once per (type, tree), not decided per message: a
    # page of 500 pods runs these a few thousand times.
    pointer = shape.pointer
    if field.message_type is not None:
        convert = _value_converter(field, node)
        full = field.message_type.full_name
        omitzero, inline = shape.omitzero, shape.inline

        def message(msg: Any, out: Json) -> None:
            if pointer and not msg.HasField(attr):
                return
            value = getattr(msg, attr)
            if omitzero and _is_zero_message(value, full):
                return
            converted = convert(value)
            if not inline:
                out[key] = converted
            elif isinstance(converted, dict):
                out.update(converted)

        return message
    scalar = _scalar(field)
    as_is = scalar is _as_is
    if pointer:

        def present(msg: Any, out: Json) -> None:
            if msg.HasField(attr):
                value = getattr(msg, attr)
                out[key] = value if as_is else scalar(value)

        return present
    if shape.omitempty or shape.omitzero:

        def unless_zero(msg: Any, out: Json) -> None:
            value = getattr(msg, attr)
            if value:
                out[key] = value if as_is else scalar(value)

        return unless_zero

    def always(msg: Any, out: Json) -> None:
        value = getattr(msg, attr)
        out[key] = value if as_is else scalar(value)

    return always


def _map_step(field: FieldDescriptor, shape: _Shape, node: Node) -> Step:
    """A map, whole or only the keys ``node`` names (looked up, never iterated)."""
    attr = field.name
    key = shape.json_name or field.name
    value = _value_converter(field.message_type.fields_by_name["value"], None)
    selected: tuple[str, ...] | None = None
    if isinstance(node, Mapping) and OTHERS not in node:
        selected = tuple(k for k, v in node.items() if v is not DROP)

    omitempty = shape.omitempty

    def mapping(msg: Any, out: Json) -> None:
        entries = getattr(msg, attr)
        if not entries:
            if not omitempty:
                out[key] = None
        elif selected is None:
            # A key that is not UTF-8 cannot be read back from the runtime's map (its
            # items raise): refused as unconvertible. The API server validates every map
            # key this client reads (labels, annotations, data), so none is stored.
            out[key] = {k: value(v) for k, v in entries.items()}
        else:
            out[key] = {k: value(entries[k]) for k in selected if k in entries}

    return mapping


# -- bodies --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Envelope:
    """A decoded ``runtime.Unknown``: the object's type and its encoding (a view into the
    body, not a copy: a page of 500 pods is megabytes)."""

    api_version: str
    kind: str
    raw: memoryview


SMALL_BODY = 64 * 1024
"""Up to this, a body's envelope is parsed by the protobuf runtime (C), copy and all; above,
field by field in Python, so that ``raw`` is a view of the body, not a copy of it."""


@cache
def _unknown() -> type[Message]:
    return types().message("k8s.io.apimachinery.pkg.runtime.Unknown")


@cache
def _type_meta() -> type[Message]:
    return types().message("k8s.io.apimachinery.pkg.runtime.TypeMeta")


def envelope(body: bytes | memoryview) -> Envelope:
    """The magic and ``runtime.Unknown`` read field by field, so that ``raw`` stays a view of
    ``body`` (the protobuf runtime would copy it)."""
    view = memoryview(body)
    if bytes(view[:4]) != MAGIC:
        raise ProtobufError(f"not Kubernetes protobuf: starts {bytes(view[:8])!r}")
    if len(view) <= SMALL_BODY:  # a watch event's object: the runtime's copy costs nothing
        try:
            unknown: Any = _unknown().FromString(view[4:])
        except DecodeError as exc:
            raise ProtobufError(f"undecodable protobuf envelope: {exc}") from exc
        if not unknown.typeMeta.kind:
            raise ProtobufError("a protobuf envelope without its type")
        return Envelope(unknown.typeMeta.apiVersion, unknown.typeMeta.kind, memoryview(unknown.raw))
    type_meta: Any = None
    raw = view[0:0]
    for field, _, value in fields(view[4:], "envelope"):
        if field == 1 and value is not None:
            try:
                type_meta = _type_meta().FromString(value)
            except DecodeError as exc:
                raise ProtobufError(f"undecodable protobuf envelope: {exc}") from exc
        elif field == 2 and value is not None:
            raw = value
    if type_meta is None or not type_meta.kind:
        raise ProtobufError("a protobuf envelope without its type")
    return Envelope(type_meta.apiVersion, type_meta.kind, raw)


_LIST_REST: Final = {OTHERS: None, "items": DROP}
"""A list but its items: its metadata (resourceVersion, continue) whole."""


def decode_object(body: bytes | memoryview, fields: FieldTree | None) -> Json:
    """One object (or list, or Status) as JSON cut to ``fields`` (a list's items cut to
    them), with its kind and apiVersion as the JSON encoding writes them. A body read as it
    arrives is ``ListReader``'s."""
    env = envelope(body)
    cls = types().message(message_name(env.api_version, env.kind))
    items_field = cls.DESCRIPTOR.fields_by_name.get("items")
    if env.kind.endswith("List") and items_field is not None:
        # Each item is parsed on its own as it is reached: parsing the whole list at once
        # would hold every item's message (more than the body: 3.3 MiB for a page of 500
        # pods' metadata) until the last one is converted.
        rest, spans = _split_repeated(env.raw, items_field.number)
        items = _items(spans, items_field.message_type, fields, env.kind)
        listed = _listed(cls, rest, env.kind)
        as_listed = _as_listed(env.kind, env.api_version, fields)
        return _with_items(listed, map(as_listed, items), env.kind, env.api_version)
    node: Node = None if env.kind == "Status" else fields
    out = _object(cls, env.raw, env.kind, node)
    if _keeps_type_meta(node):
        out["kind"] = env.kind
        out["apiVersion"] = env.api_version
    return out


def _object(cls: type[Message], raw: bytes | memoryview, kind: str, node: Node) -> Json:
    """``raw``, a message of ``cls``, as JSON cut to ``node``."""
    try:
        msg: Any = cls.FromString(raw)
    except DecodeError as exc:
        raise ProtobufError(f"undecodable {kind}: {exc}") from exc
    out = _convert(converter(msg.DESCRIPTOR, node), msg, kind)
    if not isinstance(out, dict):
        raise ProtobufError(f"{kind} is not an object")
    return out


def _listed(cls: type[Message], rest: bytes, kind: str) -> Json:
    """A list's fields but its items (``rest``), as JSON: its metadata whole."""
    return _object(cls, rest, kind, _LIST_REST)


def _with_items(listed: Json, items: Iterable[Json], kind: str, api_version: str) -> Json:
    """A list's JSON from its other fields and its items (as ``_as_listed`` makes them)."""
    listed["items"] = list(items)  # the server writes an empty list as [], never Go's nil
    listed["kind"] = kind
    listed["apiVersion"] = api_version
    return listed


def _convert(convert: Converter, msg: Any, what: str) -> Any:
    """``convert(msg)``, a value Go's encoding/json would not write (a time past year 9999,
    FieldsV1 that is not JSON) refused as undecodable like any other."""
    try:
        return convert(msg)
    except ProtobufError:
        raise
    except (ValueError, OverflowError, OSError) as exc:
        raise ProtobufError(f"unconvertible {what}: {exc}") from exc


def _split_repeated(raw: memoryview, number: int) -> tuple[bytes, list[memoryview]]:
    """A message's encoding without field ``number`` (its other fields, for the protobuf
    runtime) and that field's values (views into ``raw``)."""
    rest: list[memoryview] = []
    spans: list[memoryview] = []
    for field, encoding, value in fields(raw, "list"):
        if field == number and value is not None:
            spans.append(value)
        else:
            rest.append(encoding)
    return b"".join(rest), spans


def _items(
    spans: list[memoryview], descriptor: Descriptor, fields: FieldTree | None, kind: str
) -> Iterator[Json]:
    """A list's items, each parsed and converted when reached (its message dropped after)."""
    cls = types().message(descriptor.full_name)
    convert = converter(descriptor, fields)
    for span in spans:
        try:
            msg: Any = cls.FromString(span)
        except DecodeError as exc:
            raise ProtobufError(f"undecodable item of a {kind}: {exc}") from exc
        yield _convert(convert, msg, f"item of a {kind}")


def _keeps_type_meta(node: Node) -> bool:
    """Whether a tree keeps ``kind`` and ``apiVersion`` (which JSON writes in the object)."""
    return not isinstance(node, Mapping) or OTHERS in node or "kind" in node


def _as_listed(kind: str, api_version: str, fields: FieldTree | None) -> Callable[[Json], Json]:
    """A converted item of a ``kind`` list as its list's JSON writes it: a
    PartialObjectMetadataList's items carry their TypeMeta in JSON (not on the wire), other
    lists' items none."""
    if kind != "PartialObjectMetadataList" or not _keeps_type_meta(fields):
        return _same

    def typed(item: Json) -> Json:
        item["kind"] = "PartialObjectMetadata"
        item["apiVersion"] = api_version
        return item

    return typed


def _same(item: Json) -> Json:
    return item


def _header(buf: bytearray, pos: int, end: int) -> tuple[int, int, int, int] | None:
    """The field starting at ``pos`` of ``buf`` (read no further than ``end``): its number,
    wire type, where its value starts and where the field ends; None while the bytes that say
    so are still to come. A length-delimited field's value may end past the bytes received."""
    key = varint_at(buf, pos, end)
    if key is None:
        return None
    number, wire, start = key[0] >> 3, key[0] & 7, key[1]
    if wire == 2:
        length = varint_at(buf, start, end)
        return None if length is None else (number, wire, length[1], length[1] + length[0])
    if wire == 0:
        value = varint_at(buf, start, end)
        return None if value is None else (number, wire, start, value[1])
    if wire in (1, 5):
        return number, wire, start, start + (8 if wire == 1 else 4)
    raise ProtobufError(f"unexpected wire type {wire} in a protobuf list")


def _copy(buf: bytearray, start: int, end: int) -> bytes:
    """``buf[start:end]`` copied once (a bytearray slice is a copy already)."""
    return bytes(memoryview(buf)[start:end])


class ListReader:
    """A protobuf LIST body decoded as it arrives: ``feed`` each chunk, then ``result``.

    Each item is parsed and converted (cut to ``fields``) as soon as its bytes are in and its
    bytes dropped, so what is held is the converted items (or what ``prepare`` keeps of
    them), one item's bytes and the chunk: never the page, which a whole-body read holds
    twice while it joins its chunks (3 MiB each for a page of 500 pods' metadata, most of it
    the managedFields the tree drops).

    ``on_metadata`` is called once with the list's metadata (its continue token) when the
    first item begins to arrive, the fields before it read: an API server writes the
    metadata first, so a caller can ask for the next page while this one's items are still
    on the way.

    ``prepare``, if given, is called with each item as soon as it is converted (as the list's
    JSON writes it) and the list's kind and apiVersion; what it returns is kept in the item's
    place. A caller that keeps a projection of each item (an informer's transform) so never
    holds a page of converted items.

    ``result`` is what ``decode_object(body, fields)`` gives for the same body (its items
    through ``prepare``), whatever the chunks, or both raise ``ProtobufError``; a body this
    reader does not expect (an object that is not a list, the list before its type) is kept
    whole and handed to ``decode_object``. Three differences, none from an API server: an
    empty body is ``{}`` (as the client reads an empty answer); a type or object given again
    after the list is refused; and the envelope is read by hand whatever its size, where
    ``decode_object`` hands one of up to ``SMALL_BODY`` to the protobuf runtime, which also
    takes an empty group or merges a type given twice, and refuses a field numbered 0
    (helper-15's differential search: no other difference in 50,000 bodies)."""

    def __init__(
        self,
        fields: FieldTree | None,
        on_metadata: Callable[[Json], None] | None = None,
        prepare: Prepare | None = None,
    ) -> None:
        self._fields = fields
        self._on_metadata = on_metadata
        self._prepare = prepare
        self._as_listed: Callable[[Json], Json] = _same
        self._buf = bytearray()
        self._pos = 0
        self._head = bytearray()  # the envelope's bytes before the list: kept for a fallback
        self._whole: bytearray | None = None
        self._type_meta: Any = None
        self._raw_left = -1  # bytes of the list still to read; -1 before the list
        self._list_done = False
        self._rest: list[bytes] = []  # the list's fields but its items
        self._items: list[Json] = []
        self._list: type[Message] | None = None
        self._item: Converter | None = None
        self._item_cls: type[Message] | None = None
        self._items_number = 0
        self._seen = False

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        self._seen = True
        if self._whole is not None:
            self._whole += chunk
            return
        self._buf += chunk
        self._parse()
        if self._pos and (self._pos >= SMALL_BODY or self._pos * 2 >= len(self._buf)):
            del self._buf[: self._pos]
            self._pos = 0

    @property
    def items_read(self) -> int:
        """The items converted so far."""
        return len(self._items)

    def result(self) -> Json:
        if not self._seen:
            return {}
        if self._whole is None and self._raw_left < 0 and not self._list_done:
            self._keep_whole()  # no list came (an empty one, or a truncated body)
        if self._whole is not None:
            whole = decode_object(bytes(self._whole), self._fields)
            if self._prepare is not None and isinstance(whole.get("items"), list):
                kind, api_version = str(whole.get("kind")), str(whole.get("apiVersion"))
                whole["items"] = [self._prepare(i, kind, api_version) for i in whole["items"]]
            return whole
        if self._raw_left >= 0 or self._pos != len(self._buf):
            raise ProtobufError("truncated protobuf list")
        kind, api_version = self._type_meta.kind, self._type_meta.apiVersion
        assert self._list is not None
        listed = _listed(self._list, b"".join(self._rest), kind)
        return _with_items(listed, self._items, kind, api_version)

    def _keep_whole(self) -> None:
        self._whole = self._head + self._buf[self._pos :]
        self._buf = bytearray()
        self._pos = 0

    def _parse(self) -> None:
        buf = self._buf
        while self._whole is None:
            pos = self._pos
            if not self._head:
                if len(buf) - pos < len(MAGIC):
                    return
                if bytes(buf[pos : pos + len(MAGIC)]) != MAGIC:
                    raise ProtobufError(f"not Kubernetes protobuf: starts {bytes(buf[:8])!r}")
                self._head += MAGIC
                self._pos = pos + len(MAGIC)
            elif self._raw_left >= 0:
                if not self._list_field(buf, pos):
                    return
            elif not self._envelope_field(buf, pos):
                return

    def _envelope_field(self, buf: bytearray, pos: int) -> bool:
        """One field of the ``runtime.Unknown``: its type (kept), its ``raw`` (entered:
        read field by field after), or another (skipped)."""
        header = _header(buf, pos, len(buf))
        if header is None:
            return False
        number, wire, start, end = header
        if self._list_done and number in (1, 2) and wire == 2:
            # Protobuf's last value wins: a second type or object would replace the list
            # read. No API server writes one; refused rather than read two ways.
            raise ProtobufError("a protobuf envelope with its type or object given twice")
        if number == 2 and wire == 2:
            if not self._start_list():
                self._keep_whole()
                return True
            self._raw_left = end - start
            self._head += buf[pos:start]
            self._pos = start
            return True
        if end > len(buf):
            return False
        if number == 1 and wire == 2:
            try:
                self._type_meta = _type_meta().FromString(_copy(buf, start, end))
            except DecodeError as exc:
                raise ProtobufError(f"undecodable protobuf envelope: {exc}") from exc
        if not self._list_done:
            self._head += buf[pos:end]
        self._pos = end
        return True

    def _start_list(self) -> bool:
        """Whether the envelope's type, read before its ``raw``, is a list of a vendored
        type (else the body is decoded whole)."""
        kind = None if self._type_meta is None else self._type_meta.kind
        if not isinstance(kind, str) or not kind.endswith("List"):
            return False  # not UTF-8 (bytes), or not a list: decode_object says why
        cls = types().message(message_name(self._type_meta.apiVersion, self._type_meta.kind))
        items = cls.DESCRIPTOR.fields_by_name.get("items")
        if items is None or items.message_type is None:
            return False
        self._list = cls
        self._items_number = items.number
        self._item_cls = types().message(items.message_type.full_name)
        self._item = converter(items.message_type, self._fields)
        self._as_listed = _as_listed(self._type_meta.kind, self._type_meta.apiVersion, self._fields)
        return True

    def _list_field(self, buf: bytearray, pos: int) -> bool:
        """One field of the list: an item (parsed and converted now) or another (kept, for
        the list's own parse at the end)."""
        if self._raw_left == 0:
            self._raw_left = -1
            self._list_done = True
            return True
        limit = min(len(buf), pos + self._raw_left)
        header = _header(buf, pos, limit)
        if header is None:
            if len(buf) >= pos + self._raw_left:
                raise ProtobufError("truncated protobuf list")
            return False
        number, wire, start, end = header
        if end > pos + self._raw_left:
            raise ProtobufError("truncated protobuf list")
        is_item = number == self._items_number and wire == 2
        if is_item and self._on_metadata is not None:
            self._tell_metadata()
        if end > len(buf):
            return False
        if is_item:
            assert self._item_cls is not None and self._item is not None
            kind = self._type_meta.kind
            try:
                msg: Any = self._item_cls.FromString(_copy(buf, start, end))
            except DecodeError as exc:
                raise ProtobufError(f"undecodable item of a {kind}: {exc}") from exc
            item = self._as_listed(_convert(self._item, msg, f"item of a {kind}"))
            if self._prepare is not None:
                item = self._prepare(item, kind, self._type_meta.apiVersion)
            self._items.append(item)
        else:
            self._rest.append(_copy(buf, pos, end))
        self._raw_left -= end - pos
        self._pos = end
        return True

    def _tell_metadata(self) -> None:
        """``on_metadata`` with the list's fields read so far (once; nothing if they do not
        parse: ``result`` says why)."""
        tell, self._on_metadata = self._on_metadata, None
        assert tell is not None and self._list is not None
        try:
            listed = _listed(self._list, b"".join(self._rest), self._type_meta.kind)
        except ProtobufError:
            return
        tell(listed.get("metadata") or {})


@cache
def _watch_event() -> type[Message]:
    return types().message(f"{_META}.WatchEvent")


def watch_event_decoder(fields: FieldTree | None) -> Callable[[bytes], WatchEvent]:
    """A decoder of one watch frame into its event, objects cut to ``fields``; what cannot
    be decoded is a ``WatchProtocolError``, as for JSON."""

    def decode(frame: bytes) -> WatchEvent:
        try:
            event: Any = _watch_event().FromString(frame)
            kind = event.type
            if kind not in WATCH_EVENT_TYPES:
                raise WatchProtocolError(f"unknown watch event type {kind!r}")
            # An ERROR's Status and a BOOKMARK (a few bytes; its annotations say whether it
            # ends a streaming list's initial events) are decoded whole.
            whole = kind in ("ERROR", "BOOKMARK")
            obj = decode_object(event.object.raw, None if whole else fields)
        except (DecodeError, ProtobufError) as exc:
            raise WatchProtocolError(f"undecodable protobuf watch frame: {exc}") from exc
        return WatchEvent(kind, obj)

    return decode
