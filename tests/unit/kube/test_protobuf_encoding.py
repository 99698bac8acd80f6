"""Serialized descriptors read and cut by hand (``kube.protobuf_encoding``), judged by
protobuf's own ``descriptor_pb2``: what the controller does without importing it."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, duration_pb2, struct_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from linkerd_config.kube.protobuf_encoding import (
    ProtobufError,
    encode_varint,
    fields,
    map_entries,
    varint_at,
    without_fields,
)
from linkerd_config.linkerd.formats.legacy import config_pb2

CONFIG = config_pb2.DESCRIPTOR.serialized_pb
PAIRS = sorted(
    (message.name, field.name)
    for message in descriptor_pb2.FileDescriptorProto.FromString(CONFIG).message_type
    for field in message.field
)


def by_descriptor_pb2(file: bytes, absent: set[tuple[str, str]]) -> Any:
    """The cut as protobuf's own classes make it."""
    proto = descriptor_pb2.FileDescriptorProto.FromString(file)
    for message in proto.message_type:
        kept = [f for f in message.field if (message.name, f.name) not in absent]
        del message.field[:]
        message.field.extend(kept)
    return proto


@given(absent=st.sets(st.sampled_from(PAIRS)))
@settings(max_examples=100, deadline=None)
def test_a_cut_descriptor_is_what_descriptor_pb2_would_make(absent: set[tuple[str, str]]) -> None:
    cut = without_fields(CONFIG, absent)
    assert descriptor_pb2.FileDescriptorProto.FromString(cut) == by_descriptor_pb2(CONFIG, absent)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(duration_pb2.DESCRIPTOR.serialized_pb)
    file = pool.AddSerializedFile(cut)
    for name, message in file.message_types_by_name.items():
        gone = {f for m, f in absent if m == name}
        assert not gone & set(message.fields_by_name)


def test_nothing_absent_is_the_descriptor_byte_for_byte() -> None:
    assert without_fields(CONFIG, set()) == CONFIG


def every_message(file: Any) -> list[Any]:
    stack, found = list(file.message_types_by_name.values()), []
    while stack:
        message = stack.pop()
        found.append(message)
        stack.extend(message.nested_types)
    return found


@pytest.mark.parametrize("module", [config_pb2, struct_pb2, descriptor_pb2])
def test_map_entries_are_those_protobuf_names(module: Any) -> None:
    named = {m.full_name for m in every_message(module.DESCRIPTOR) if m.GetOptions().map_entry}
    assert set(map_entries(module.DESCRIPTOR.serialized_pb)) == named
    if module is struct_pb2:
        assert named == {"google.protobuf.Struct.FieldsEntry"}  # nested, in a package


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**32, 2**63 - 1])
def test_varints_read_as_written(value: int) -> None:
    encoded = encode_varint(value)
    assert varint_at(encoded, 0, len(encoded)) == (value, len(encoded))
    assert varint_at(encoded, 0, len(encoded) - 1) is None  # its last byte still to come


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"\x0a\x05abc", "truncated protobuf thing"),
        (b"\x0b", "unexpected wire type 3"),
        (b"\x80" * 11, "more than 10 bytes"),
    ],
)
def test_a_broken_message_is_a_protobuf_error(data: bytes, error: str) -> None:
    with pytest.raises(ProtobufError, match=error):
        list(fields(memoryview(data), "thing"))
