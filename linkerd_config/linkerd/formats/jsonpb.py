"""Print a protobuf message exactly as Go's ``jsonpb.Marshaler{EmitDefaults: true}`` does.

Linkerd (golang/protobuf v1.3, Go 1.12-1.13 era) wrote its ConfigMap values with that marshaler,
and our controller compares what it writes with what is there byte for byte, so "the same
JSON" is not enough: it must be the same bytes. Python's ``json_format`` differs (unset
messages are omitted rather than ``null``, HTML characters are not escaped, spacing), hence
this small printer, driven only by the message descriptors:

- fields in declaration order (not field-number order), named by their lowerCamelCase JSON
  name (``OrigName=false``); compact, no spaces;
- every field printed (``EmitDefaults``): zero scalars, ``[]`` for empty repeated fields,
  ``{}`` for empty maps, ``null`` for unset message fields (and unset proto2 scalars); a oneof
  prints only its set member, at the position of the oneof's first member;
- 64-bit integers as quoted strings, 32-bit ones as numbers; floats as Go's encoding/json
  prints them, with ``"NaN"``/``"Infinity"``/``"-Infinity"`` quoted; enums by name (unknown
  values as numbers); bytes as padded base64, empty singular bytes as ``null`` (a Go nil slice);
- ``google.protobuf.Duration`` as ``"86400s"``/``"1.500s"`` (0, 3, 6 or 9 fractional digits),
  ``Timestamp`` as RFC 3339 in UTC, wrapper types as their bare value;
- strings with encoding/json's HTML-safe escaping: ``<``, ``>``, ``&``, U+2028 and U+2029 as
  ``\\u003c``-style escapes, control characters as ``\\n``/``\\r``/``\\t`` or ``\\u00XX``;
  everything else, non-ASCII included, as raw UTF-8.

Map fields follow golang/protobuf v1.3 too: keys sorted (numerically for integer keys,
false before true) and always printed as JSON strings.

Two choices, neither reachable from Linkerd's config messages: ``\\b`` and ``\\f`` are escaped
as ``\\u0008``/``\\u000c``, as Go did before 1.22 (Linkerd's releases were built with older Go);
``Any``, ``Struct``, ``Value``, ``ListValue`` and ``FieldMask``, extensions and groups are
refused with ``TypeError`` rather than printed approximately.

Checked against golang/protobuf v1.3.2 itself: identical bytes on tens of thousands of random
messages (see tests/unit/formats/test_jsonpb.py).
"""

from __future__ import annotations

import base64
import datetime
import math
import re
import struct
from decimal import Decimal
from functools import cache
from typing import Any

from google.protobuf.message import Message

from linkerd_config.kube.protobuf_encoding import map_entries

__all__ = ["go_json_string", "marshal"]

# A google.protobuf.descriptor.FieldDescriptor (protobuf ships no type information).
Field = Any

_NANOS_PER_SECOND = 1_000_000_000
_MAX_DURATION_SECONDS = 315_576_000_000  # 10,000 years, as in duration.proto

# Field types, as numbered in descriptor.proto (FieldDescriptor.TYPE_*).
_TYPE_DOUBLE = 1
_TYPE_FLOAT = 2
_TYPE_INT64 = 3
_TYPE_UINT64 = 4
_TYPE_INT32 = 5
_TYPE_FIXED64 = 6
_TYPE_FIXED32 = 7
_TYPE_BOOL = 8
_TYPE_STRING = 9
_TYPE_GROUP = 10
_TYPE_MESSAGE = 11
_TYPE_BYTES = 12
_TYPE_UINT32 = 13
_TYPE_ENUM = 14
_TYPE_SFIXED32 = 15
_TYPE_SFIXED64 = 16
_TYPE_SINT32 = 17
_TYPE_SINT64 = 18

# Go's int64/uint64 kinds, which jsonpb quotes.
_QUOTED_INTEGERS = frozenset(
    {_TYPE_INT64, _TYPE_UINT64, _TYPE_FIXED64, _TYPE_SFIXED64, _TYPE_SINT64}
)
_PLAIN_INTEGERS = frozenset(
    {_TYPE_INT32, _TYPE_UINT32, _TYPE_FIXED32, _TYPE_SFIXED32, _TYPE_SINT32}
)

_WRAPPERS = frozenset(
    f"google.protobuf.{name}"
    for name in (
        "DoubleValue",
        "FloatValue",
        "Int64Value",
        "UInt64Value",
        "Int32Value",
        "UInt32Value",
        "BoolValue",
        "StringValue",
        "BytesValue",
    )
)
_UNSUPPORTED = frozenset(
    f"google.protobuf.{name}" for name in ("Any", "Struct", "Value", "ListValue", "FieldMask")
)

# What encoding/json (escapeHTML=true) escapes: '"', '\\', control characters, the three HTML
# characters, the two JavaScript line terminators, and (as U+FFFD) anything that is not valid
# UTF-8, which in a Python str means a lone surrogate.
_NEEDS_ESCAPE = re.compile('["\\\\\x00-\x1f<>&\u2028\u2029\ud800-\udfff]')
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def marshal(message: Message) -> str:
    """``jsonpb.Marshaler{EmitDefaults: true}.MarshalToString(message)``, byte for byte."""
    out: list[str] = []
    _message(out, message)
    return "".join(out)


def go_json_string(value: str) -> str:
    """A JSON string literal exactly as Go's ``json.Marshal`` writes it (HTML-safe)."""
    return '"' + _NEEDS_ESCAPE.sub(_escape, value) + '"'


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    if "\ud800" <= char <= "\udfff":
        return "\ufffd"
    return f"\\u{ord(char):04x}"


def _message(out: list[str], message: Message) -> None:
    descriptor = message.DESCRIPTOR
    full_name: str = descriptor.full_name
    if full_name in _UNSUPPORTED:
        raise TypeError(f"{full_name} is not supported by this jsonpb printer")
    if full_name == "google.protobuf.Duration":
        out.append(_duration(message.seconds, message.nanos))
        return
    if full_name == "google.protobuf.Timestamp":
        out.append(_timestamp(message.seconds, message.nanos))
        return
    if full_name in _WRAPPERS:
        _singular(out, descriptor.fields_by_name["value"], message.value)
        return

    out.append("{")
    first = True
    printed_oneofs: set[str] = set()
    for declared in descriptor.fields:
        field = declared
        oneof = declared.containing_oneof
        if oneof is not None:
            # Go's struct holds one interface field per oneof, where its first member is
            # declared; it prints the member that is set, or nothing.
            if oneof.name in printed_oneofs:
                continue
            printed_oneofs.add(oneof.name)
            chosen = message.WhichOneof(oneof.name)
            if chosen is None:
                continue
            field = descriptor.fields_by_name[chosen]
        if not first:
            out.append(",")
        first = False
        out.append(f'"{field.json_name}":')
        _field(out, message, field)
    out.append("}")


def _field(out: list[str], message: Message, field: Field) -> None:
    if field.type == _TYPE_GROUP:
        raise TypeError(f"{field.full_name}: groups are not supported by this jsonpb printer")
    value = getattr(message, field.name)
    if _is_map(field):
        _map(out, field, value)
    elif field.is_repeated:
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _singular(out, field, item, in_list=True)
        out.append("]")
    elif field.has_presence and field.containing_oneof is None and not message.HasField(field.name):
        out.append("null")  # a nil pointer in Go
    else:
        _singular(out, field, value)


def _is_map(field: Field) -> bool:
    return bool(
        field.is_repeated and field.type == _TYPE_MESSAGE and _is_map_entry(field.message_type)
    )


@cache
def _is_map_entry(message: Any) -> bool:
    """Whether a message is a map's entries, read from its file's descriptor (once a message:
    upb serializes the file anew at each ``serialized_pb``): asking the message for its
    options (``GetOptions().map_entry``) would import descriptor_pb2 (1.2 MiB) to answer."""
    return message.full_name in set(map_entries(message.file.serialized_pb))


def _map(out: list[str], field: Field, value: Any) -> None:
    entry = field.message_type
    key_field = entry.fields_by_name["key"]
    value_field = entry.fields_by_name["value"]
    out.append("{")
    for index, key in enumerate(sorted(value)):  # str, int and bool keys sort as Go's mapKeys
        if index:
            out.append(",")
        if key_field.type == _TYPE_STRING:
            out.append(go_json_string(key))
        elif key_field.type == _TYPE_BOOL:
            out.append('"true"' if key else '"false"')
        else:
            out.append(f'"{int(key)}"')
        out.append(":")
        _singular(out, value_field, value[key], in_list=True)
    out.append("}")


def _singular(out: list[str], field: Field, value: Any, *, in_list: bool = False) -> None:
    """One value; ``in_list`` for list elements and map values, which Go never holds as nil."""
    kind: int = field.type
    if kind == _TYPE_MESSAGE:
        _message(out, value)
    elif kind == _TYPE_STRING:
        out.append(go_json_string(value))
    elif kind == _TYPE_BOOL:
        out.append("true" if value else "false")
    elif kind in _QUOTED_INTEGERS:
        out.append(f'"{int(value)}"')
    elif kind in _PLAIN_INTEGERS:
        out.append(str(int(value)))
    elif kind == _TYPE_ENUM:
        known = field.enum_type.values_by_number.get(int(value))
        out.append(f'"{known.name}"' if known is not None else str(int(value)))
    elif kind == _TYPE_DOUBLE:
        out.append(_go_float(float(value), 64))
    elif kind == _TYPE_FLOAT:
        out.append(_go_float(float(value), 32))
    elif kind == _TYPE_BYTES:
        data = bytes(value)
        # A Go nil slice marshals as null; an unset or empty singular bytes field is nil.
        if not data and not in_list:
            out.append("null")
        else:
            out.append('"' + base64.b64encode(data).decode("ascii") + '"')
    else:
        raise TypeError(f"{field.full_name}: unsupported field type {kind}")


def _duration(seconds: int, nanos: int) -> str:
    """Go jsonpb's Duration: seconds with 0, 3, 6 or 9 fractional digits and an ``s``."""
    if not -_MAX_DURATION_SECONDS <= seconds <= _MAX_DURATION_SECONDS:
        raise ValueError(f"Duration seconds {seconds} out of range")
    if not -_NANOS_PER_SECOND < nanos < _NANOS_PER_SECOND:
        raise ValueError(f"Duration nanos {nanos} out of range")
    if (seconds > 0 and nanos < 0) or (seconds < 0 and nanos > 0):
        raise ValueError("Duration seconds and nanos have different signs")
    sign = "-" if seconds < 0 or nanos < 0 else ""
    text = f"{abs(seconds)}.{abs(nanos):09d}"
    return f'"{sign}{_trim_fraction(text)}s"'


def _timestamp(seconds: int, nanos: int) -> str:
    """Go jsonpb's Timestamp: RFC 3339 in UTC with 0, 3, 6 or 9 fractional digits."""
    if not 0 <= nanos < _NANOS_PER_SECOND:
        raise ValueError(f"Timestamp nanos {nanos} out of range")
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    try:
        moment = epoch + datetime.timedelta(seconds=seconds)
    except OverflowError as error:
        raise ValueError(f"Timestamp seconds {seconds} out of range") from error
    text = f"{moment.year:04d}-{moment:%m-%dT%H:%M:%S}.{nanos:09d}"
    return f'"{_trim_fraction(text)}Z"'


def _trim_fraction(text: str) -> str:
    """Go's three TrimSuffix calls: ``.500000000`` → ``.500``, ``.000000000`` → nothing."""
    text = text.removesuffix("000").removesuffix("000")
    return text.removesuffix(".000")


def _go_float(value: float, bits: int) -> str:
    """A float as Go's encoding/json writes float64 (``bits=64``) or float32 (``bits=32``)."""
    if math.isnan(value):
        return '"NaN"'
    if math.isinf(value):
        return '"Infinity"' if value > 0 else '"-Infinity"'
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    shortest = repr(value) if bits == 64 else _shortest_float32(value)
    sign, digit_tuple, exponent = Decimal(shortest).normalize().as_tuple()
    assert isinstance(exponent, int)  # finite
    digits = "".join(map(str, digit_tuple))
    prefix = "-" if sign else ""
    magnitude = abs(value)
    low, high = (1e-6, 1e21) if bits == 64 else (_to_float32(1e-6), _to_float32(1e21))
    if low <= magnitude < high:
        # strconv 'f' with the shortest digits: plain notation, no exponent.
        point = len(digits) + exponent  # digits before the decimal point
        if point <= 0:
            return f"{prefix}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return f"{prefix}{digits}{'0' * (point - len(digits))}"
        return f"{prefix}{digits[:point]}.{digits[point:]}"
    # strconv 'e' with the shortest digits, then encoding/json's "e-07" → "e-7" clean-up
    # (so a negative exponent never has a leading zero; positive ones here are all ≥ 21).
    scientific = exponent + len(digits) - 1
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{prefix}{mantissa}e{'+' if scientific >= 0 else '-'}{abs(scientific)}"


def _shortest_float32(value: float) -> str:
    """The fewest significant digits that read back as the same float32."""
    for precision in range(1, 10):
        candidate = f"{value:.{precision}g}"
        try:
            if _to_float32(float(candidate)) == value:
                return candidate
        except OverflowError:
            continue
    return repr(value)


def _to_float32(value: float) -> float:
    """Round a float to the nearest float32 (as Go's ``float32(x)`` does)."""
    rounded: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return rounded
