"""Protobuf's wire format read and written by hand, where the protobuf runtime would cost more
than it does: a body's envelope and a list's items as views (no copy), and serialized
descriptors read and cut without ``descriptor_pb2`` (its Python classes are 1.2 MiB and
40 ms to import, for a few fields of a few messages)."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Final


class ProtobufError(ValueError):
    """A body that is not the protobuf encoding it claims to be, or of a type not vendored."""


def varint_at(buf: bytearray | memoryview | bytes, pos: int, end: int) -> tuple[int, int] | None:
    """A varint at ``pos`` of ``buf`` (no further than ``end``) and where it ends; None while
    its last byte is still to come."""
    value = shift = 0
    while pos < end:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ProtobufError("a protobuf varint of more than 10 bytes")
    return None


def varint(view: memoryview, pos: int) -> tuple[int, int]:
    found = varint_at(view, pos, len(view))
    if found is None:
        raise ProtobufError("truncated protobuf envelope")
    return found


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def fields(view: memoryview, what: str) -> Iterator[tuple[int, memoryview, memoryview | None]]:
    """A message's top-level fields in order, read by hand: each one's number, its whole
    encoding, and its value for a length-delimited one (None for a scalar), all views into
    ``view``. ``what`` names the message in errors."""
    pos, end = 0, len(view)
    while pos < end:
        start = pos
        key, pos = varint(view, pos)
        wire = key & 7
        value = None
        if wire == 2:
            length, pos = varint(view, pos)
            if pos + length > end:
                raise ProtobufError(f"truncated protobuf {what}")
            value = view[pos : pos + length]
            pos += length
        elif wire == 0:
            _, pos = varint(view, pos)
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
            if pos > end:
                raise ProtobufError(f"truncated protobuf {what}")
        else:
            raise ProtobufError(f"unexpected wire type {wire} in a protobuf {what}")
        yield key >> 3, view[start:pos], value


def length_delimited(number: int, value: bytes) -> bytes:
    """Field ``number`` holding ``value`` (a message, a string), encoded."""
    return encode_varint(number << 3 | 2) + encode_varint(len(value)) + value


# -- descriptors (google/protobuf/descriptor.proto's field numbers) ------------------------

_FILE_PACKAGE, _FILE_MESSAGES = 2, 4
_MESSAGE_NAME, _MESSAGE_FIELDS, _MESSAGE_NESTED, _MESSAGE_OPTIONS = 1, 2, 3, 7
_FIELD_NAME = 1
_MAP_ENTRY_SET: Final = encode_varint(7 << 3 | 0) + b"\x01"
"""MessageOptions' ``map_entry`` (field 7, a varint) true, as protoc writes it."""


def _text(value: memoryview | None) -> str:
    return "" if value is None else bytes(value).decode()


def map_entries(file: memoryview | bytes) -> Iterator[str]:
    """The full names of a serialized FileDescriptorProto's map entry messages (``map_entry``
    set: what ``Descriptor.GetOptions()`` would answer, importing descriptor_pb2 to)."""
    view = memoryview(file)
    package = ""
    messages: list[tuple[str, memoryview]] = []
    for number, _, value in fields(view, "file descriptor"):
        if number == _FILE_PACKAGE:
            package = _text(value)
        elif number == _FILE_MESSAGES and value is not None:
            messages.append(("", value))
    while messages:
        scope, message = messages.pop()
        name, entry = "", False
        nested: list[memoryview] = []
        for number, _, value in fields(message, "message descriptor"):
            if number == _MESSAGE_NAME:
                name = _text(value)
            elif number == _MESSAGE_NESTED and value is not None:
                nested.append(value)
            elif number == _MESSAGE_OPTIONS and value is not None:
                entry = any(bytes(e) == _MAP_ENTRY_SET for _, e, _ in fields(value, "options"))
        full = f"{scope or package}.{name}" if (scope or package) else name
        if entry:
            yield full
        messages.extend((full, n) for n in nested)


def _named(message: memoryview, number: int, what: str) -> str:
    """A descriptor's name: its field ``number`` (every descriptor's is 1)."""
    return next((_text(v) for n, _, v in fields(message, what) if n == number), "")


def without_fields(file: bytes, absent: Collection[tuple[str, str]]) -> bytes:
    """A serialized FileDescriptorProto without the ``absent`` (top-level message, field)
    pairs: every other byte as it was, so names, numbers, types and declaration order stay."""
    out: list[bytes] = []
    for number, encoding, value in fields(memoryview(file), "file descriptor"):
        if number != _FILE_MESSAGES or value is None:
            out.append(bytes(encoding))
            continue
        message = _named(value, _MESSAGE_NAME, "message descriptor")
        kept = [
            bytes(part)
            for n, part, field in fields(value, "message descriptor")
            if n != _MESSAGE_FIELDS
            or field is None
            or (message, _named(field, _FIELD_NAME, "field descriptor")) not in absent
        ]
        out.append(length_delimited(_FILE_MESSAGES, b"".join(kept)))
    return b"".join(out)
