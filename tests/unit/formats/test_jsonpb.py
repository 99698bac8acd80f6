"""The jsonpb printer against Go's jsonpb, rule by rule.

Every expected string below was produced by Go itself: golang/protobuf v1.3.2
``jsonpb.Marshaler{EmitDefaults: true}.MarshalToString`` (the marshaler Linkerd used), fed the
binary encoding of the same messages. The same harness also agreed byte for byte on 20,000
random messages. The one known difference is Go's own: Go 1.22+ escapes ``\\b``/``\\f`` short,
Linkerd's Go wrote ``\\u0008``/``\\u000c`` as we do.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.duration_pb2 import Duration
from google.protobuf.struct_pb2 import Struct
from grpc_tools import protoc  # type: ignore[import-untyped]

from linkerd_config.linkerd.formats.jsonpb import go_json_string, marshal

TEST_PROTO = """
syntax = "proto3";
package jsonpbtest;
import "google/protobuf/duration.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";

enum Color { COLOR_UNSPECIFIED = 0; RED = 1; GREEN = 2; }

message Inner { string name = 1; int32 n = 2; }

message Scalars {
  double d = 1; float f = 2; int64 i64 = 3; uint64 u64 = 4; int32 i32 = 5;
  fixed64 fx64 = 6; fixed32 fx32 = 7; bool b = 8; string s = 9; bytes by = 12;
  uint32 u32 = 13; Color color = 14; sfixed32 sfx32 = 15; sfixed64 sfx64 = 16;
  sint32 si32 = 17; sint64 si64 = 18;
}

message Everything {
  string zeta = 5;          // declared before alpha = 1: declaration order wins
  string alpha = 1;
  Inner inner = 3;
  repeated Inner inners = 4;
  repeated string names = 2;
  repeated int64 big = 6;
  repeated Color colors = 7;
  map<string, int64> counts = 8;
  map<int32, string> labels = 9;
  map<bool, Color> flags = 10;
  map<string, Inner> children = 11;
  google.protobuf.Duration duration = 12;
  google.protobuf.Timestamp time = 13;
  google.protobuf.Int64Value wrapped = 14;
  oneof choice { string text = 15; Inner nested = 16; }
  string after_oneof = 17;
  Scalars scalars = 18;
  repeated bytes blobs = 19;
  string snake_case_name = 20;
  repeated double doubles = 21;
  repeated float floats = 22;
}
"""

MessageClass = Callable[..., Any]


@pytest.fixture(scope="module")
def types() -> dict[str, MessageClass]:
    """Compile TEST_PROTO with the bundled protoc into message classes (no generated files)."""
    include = str(resources.files("grpc_tools") / "_proto")
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "jsonpbtest.proto"
        source.write_text(TEST_PROTO)
        out = Path(tmp) / "set.pb"
        args = ["protoc", f"-I{tmp}", f"-I{include}", "--include_imports",
                f"--descriptor_set_out={out}", str(source)]  # fmt: skip
        assert protoc.main(args) == 0
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    pool = descriptor_pool.DescriptorPool()
    for file in files:
        pool.Add(file)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"jsonpbtest.{name}"))
        for name in ("Everything", "Scalars", "Inner")
    }


EMPTY = (
    '{"zeta":"","alpha":"","inner":null,"inners":[],"names":[],"big":[],"colors":[],'
    '"counts":{},"labels":{},"flags":{},"children":{},"duration":null,"time":null,'
    '"wrapped":null,"afterOneof":"","scalars":null,"blobs":[],"snakeCaseName":"",'
    '"doubles":[],"floats":[]}'
)


def with_field(json_name: str, printed: str) -> str:
    """EMPTY with one field's printed value replaced."""
    start = EMPTY.index(f'"{json_name}":') + len(json_name) + 3
    end = EMPTY.index(',"', start)
    return EMPTY[:start] + printed + EMPTY[end:]


def test_zero_values_null_messages_empty_lists_and_declaration_order(types: Any) -> None:
    assert marshal(types["Everything"]()) == EMPTY


def test_everything_at_once_matches_go(types: Any) -> None:
    m = types["Everything"](
        zeta="z",
        alpha="a",
        names=["x", "y"],
        big=[-9223372036854775808, 9223372036854775807],
        colors=[1, 2, 0, 7],
        after_oneof="after",
        snake_case_name="snake",
    )
    m.inner.name, m.inner.n = "in", -3
    m.inners.add(name="one")
    m.inners.add()
    m.counts.update({"b": 2, "a": -1, "<&>": 0})
    m.labels.update({10: "ten", 9: "nine", -1: "minus one"})
    m.flags.update({True: 1, False: 7})
    m.children["k"].name = "child"
    m.duration.seconds = 86400
    m.time.seconds, m.time.nanos = 1576800000, 500000000
    m.wrapped.value = 42
    m.nested.name = "chosen"
    m.scalars.CopyFrom(
        types["Scalars"](
            d=0.1,
            f=0.1,
            i64=-1,
            u64=18446744073709551615,
            i32=-2147483648,
            fx64=1,
            fx32=4294967295,
            b=True,
            s="s",
            by=b"\x00\xffab",
            u32=4294967295,
            color=2,
            sfx32=-1,
            sfx64=-2,
            si32=3,
            si64=-4,
        )
    )
    m.blobs.extend([b"", b"\x01\x02\x03"])
    m.doubles.extend(
        [1e21, 1e20, 1e-6, 1e-7, 123456.789, -0.0, 5e-324, 1.7976931348623157e308,
         float("nan"), float("inf"), float("-inf"), 100.0, 2.5e-8]
    )  # fmt: skip
    m.floats.extend([0.1, 1e-7, 3.4028234663852886e38, 16777216.0, 1.5])
    assert marshal(m) == (
        '{"zeta":"z","alpha":"a","inner":{"name":"in","n":-3},'
        '"inners":[{"name":"one","n":0},{"name":"","n":0}],"names":["x","y"],'
        '"big":["-9223372036854775808","9223372036854775807"],'
        '"colors":["RED","GREEN","COLOR_UNSPECIFIED",7],'
        '"counts":{"\\u003c\\u0026\\u003e":"0","a":"-1","b":"2"},'
        '"labels":{"-1":"minus one","9":"nine","10":"ten"},'
        '"flags":{"false":7,"true":"RED"},"children":{"k":{"name":"child","n":0}},'
        '"duration":"86400s","time":"2019-12-20T00:00:00.500Z","wrapped":"42",'
        '"nested":{"name":"chosen","n":0},"afterOneof":"after",'
        '"scalars":{"d":0.1,"f":0.1,"i64":"-1","u64":"18446744073709551615",'
        '"i32":-2147483648,"fx64":"1","fx32":4294967295,"b":true,"s":"s","by":"AP9hYg==",'
        '"u32":4294967295,"color":"GREEN","sfx32":-1,"sfx64":"-2","si32":3,"si64":"-4"},'
        '"blobs":["","AQID"],"snakeCaseName":"snake",'
        '"doubles":[1e+21,100000000000000000000,0.000001,1e-7,123456.789,-0,5e-324,'
        '1.7976931348623157e+308,"NaN","Infinity","-Infinity",100,2.5e-8],'
        '"floats":[0.1,1e-7,3.4028235e+38,16777216,1.5]}'
    )


def test_fields_print_in_declaration_order_with_lower_camel_names(types: Any) -> None:
    printed = marshal(types["Everything"](alpha="a", zeta="z", snake_case_name="s"))
    assert printed.startswith('{"zeta":"z","alpha":"a",')
    assert '"snakeCaseName":"s"' in printed
    assert "snake_case_name" not in printed


def test_unset_message_is_null_set_empty_message_is_object(types: Any) -> None:
    m = types["Everything"]()
    assert '"inner":null' in marshal(m)
    m.inner.SetInParent()
    assert '"inner":{"name":"","n":0}' in marshal(m)


def test_empty_repeated_is_a_list_and_empty_map_an_object(types: Any) -> None:
    printed = marshal(types["Everything"]())
    assert '"names":[]' in printed
    assert '"counts":{}' in printed


@pytest.mark.parametrize(
    ("field", "value", "printed"),
    [
        ("i64", -9223372036854775808, '"-9223372036854775808"'),
        ("u64", 18446744073709551615, '"18446744073709551615"'),
        ("sfx64", -2, '"-2"'),
        ("si64", 0, '"0"'),
        ("fx64", 1, '"1"'),
        ("i32", -2147483648, "-2147483648"),
        ("u32", 4294967295, "4294967295"),
    ],
)
def test_64_bit_integers_are_quoted_32_bit_ones_are_not(
    types: Any, field: str, value: int, printed: str
) -> None:
    assert f'"{field}":{printed}' in marshal(types["Scalars"](**{field: value}))


@pytest.mark.parametrize(
    ("seconds", "nanos", "printed"),
    [
        (86400, 0, '"86400s"'),
        (20, 0, '"20s"'),
        (1, 500000000, '"1.500s"'),
        (0, 0, '"0s"'),
        (0, 1, '"0.000000001s"'),
        (1, 1000, '"1.000001s"'),
        (3, 100000, '"3.000100s"'),
        (0, -500000000, '"-0.500s"'),
        (-1, -500000000, '"-1.500s"'),
        (-86400, 0, '"-86400s"'),
        (315576000000, 999999999, '"315576000000.999999999s"'),
    ],
)
def test_durations_print_like_go(types: Any, seconds: int, nanos: int, printed: str) -> None:
    m = types["Everything"]()
    m.duration.seconds, m.duration.nanos = seconds, nanos
    assert marshal(m) == with_field("duration", printed)
    assert marshal(Duration(seconds=seconds, nanos=nanos)) == printed


@pytest.mark.parametrize(("seconds", "nanos"), [(1, -1), (-1, 1), (0, 10**9), (10**12, 0)])
def test_invalid_durations_are_refused(seconds: int, nanos: int) -> None:
    with pytest.raises(ValueError, match="Duration"):
        marshal(Duration(seconds=seconds, nanos=nanos))


def test_html_characters_and_line_separators_are_escaped_like_go(types: Any) -> None:
    text = "<a href='x'>&amp;</a>\u2028\u2029\x00\x1f\x7f\"\\\n\r\t/ é日😀"
    expected = (
        "\"\\u003ca href='x'\\u003e\\u0026amp;\\u003c/a\\u003e\\u2028\\u2029"
        '\\u0000\\u001f\x7f\\"\\\\\\n\\r\\t/ é日😀"'
    )
    assert marshal(types["Everything"](zeta=text)) == with_field("zeta", expected)


def test_go_json_string_rules() -> None:
    assert go_json_string("a<b>&c") == '"a\\u003cb\\u003e\\u0026c"'
    assert go_json_string("\u2028\u2029") == '"\\u2028\\u2029"'
    assert go_json_string("\b\f\x0b") == '"\\u0008\\u000c\\u000b"'  # Go before 1.22
    assert go_json_string("é日😀") == '"é日😀"'  # UTF-8 kept, not \u-escaped
    assert go_json_string("\ud800") == '"\ufffd"'  # invalid UTF-8 becomes U+FFFD
    assert json.loads(go_json_string("x<&>\u2028\n")) == "x<&>\u2028\n"


def test_unicode_is_kept_as_utf8(types: Any) -> None:
    printed = marshal(types["Everything"](zeta="Grüße, 世界 🌍"))
    assert '"zeta":"Grüße, 世界 🌍"' in printed
    assert "\\u" not in printed


def test_bools_and_enums(types: Any) -> None:
    printed = marshal(types["Scalars"](b=True, color=1))
    assert '"b":true' in printed
    assert '"color":"RED"' in printed
    assert '"color":7' in marshal(types["Scalars"](color=7))  # unknown value: its number
    assert '"color":"COLOR_UNSPECIFIED"' in marshal(types["Scalars"]())


def test_bytes_are_base64_and_empty_singular_bytes_are_null(types: Any) -> None:
    assert '"by":"AP9hYg=="' in marshal(types["Scalars"](by=b"\x00\xffab"))
    assert '"by":null' in marshal(types["Scalars"]())  # a Go nil slice


def test_map_keys_sort_like_go(types: Any) -> None:
    m = types["Everything"]()
    m.labels.update({10: "", 9: "", -1: ""})
    m.flags.update({True: 0, False: 0})
    printed = marshal(m)
    assert '"labels":{"-1":"","9":"","10":""}' in printed
    assert '"flags":{"false":"COLOR_UNSPECIFIED","true":"COLOR_UNSPECIFIED"}' in printed


def test_oneof_prints_only_the_set_member_in_place(types: Any) -> None:
    printed = marshal(types["Everything"](text="t", after_oneof="a"))
    assert '"wrapped":null,"text":"t","afterOneof":"a"' in printed
    assert '"nested"' not in printed


def test_output_is_compact_json(types: Any) -> None:
    printed = marshal(types["Everything"](zeta="a b"))
    assert json.loads(printed)["zeta"] == "a b"
    assert ": " not in printed
    assert ", " not in printed


def test_unsupported_well_known_types_are_refused() -> None:
    with pytest.raises(TypeError, match=r"google\.protobuf\.Struct"):
        marshal(Struct())
