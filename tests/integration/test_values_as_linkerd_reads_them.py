"""What Linkerd reads is what was stated (issue 39, finding 2): every string the values format
writes is read back as the same string by Linkerd's own reader, edge-26.8.3's
``l5dcharts.Values`` through ``sigs.k8s.io/yaml`` (``strict-values``, built in its vendored
tree, as ``test_every_injector_value`` runs it). Before, ``identityTrustDomain: 1e3`` was
written plain and read "1000", ``proxy.image.name: 0o17`` read "15".

Hypothesis draws strings a YAML reader may take for something else (YAML 1.1 and 1.2
numbers, exponents, octal/hex/binary forms, booleans, nulls, timestamps, base 60) and any
text, places them in string fields of ``values`` and writes them with the format's own
writer (``dump_values``).

What the controller reads is what Linkerd reads, too: an installed ``values`` holding values
no LinkerdConfig manages (kept, and written back with every rendering) is read by Go's rules
(``formats.go_yaml``), against edge-26.8.3's own ``sigs.k8s.io/yaml`` (``yaml-to-json``: its
``YAMLToJSON``, ``YAMLToJSONStrict``'s refusal, whether making keys strings merged two, and
each value's Go type). Hypothesis draws documents of unmanaged keys and values of every
ambiguous form (YAML 1.1 and 1.2 integers, octal ``017``/``0o17``, hex, binary, underscores,
floats and exponents, ``.inf``/``.nan``, booleans with ``y``/``n``/``on``/``off``, nulls,
timestamps, base 60, quoted twins of each) and keys that collide; for each: (a) where Go reads
it, the controller holds the same JSON value, each of the same Go type; (b) where Go refuses
it or merges two keys, the controller refuses it; (c) the format's rendering of it (a spec
applied, everything else kept) is read by Go with every unmanaged value as Go read it in the
original, the same value of the same type (a timestamp the same string).

The legacy format needs none of this: its keys are protobuf JSON, read by Linkerd with
``jsonpb`` and by the controller as strict JSON (``bounded.json_value``: no NaN, no key
twice), where a string is always quoted and a number is always a number.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devcluster.linkerd_binaries import ensure_linkerd
from linkerd_config.linkerd.formats import FormatError, HelmValuesFormat, Installed, format_for
from linkerd_config.linkerd.formats.helm_values import VALUES_KEY, dump_values, parse_values
from tests.support.samples import modern_install

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

FIELDS = (("identityTrustDomain",), ("clusterDomain",), ("clusterNetworks",),
          ("controllerImage",), ("proxy", "image", "name"), ("proxy", "image", "version"),
          ("proxy", "logLevel"), ("proxy", "logFormat"))  # fmt: skip
"""String fields of ``l5dcharts.Values`` (each read into a Go string)."""

AMBIGUOUS = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.sampled_from(["1e3", "1E3", "+1e3", "-1e-3", "1e+3", "0o17", "0O17", "0x1F", "0b101",
                     "017", "1_000", "1:30", "190:20:30", ".5", "5.", "+.5", ".inf", "-.Inf",
                     ".NaN", "1.0", "6.8523015e+5", "yes", "No", "on", "OFF", "y", "n",
                     "true", "False", "null", "~", "Null", "2001-12-14", "2001-12-14t21:59:43",
                     "2001-12-14 21:59:43.10 -5", "<<", "=", "0", "-0", "00", "1.2.3",
                     # beyond ASCII, written as UTF-8; YAML's own line breaks escaped
                     "中文", "\U0001f600", "é1", "a\u2028b", "a\x85b", "a\u2029",
                     "\ufeffa", "a\u00a0b", "a\nb\x85c"]),
    st.from_regex(r"[-+]?[0-9]{1,4}(\.[0-9]{0,3})?([eE][-+]?[0-9]{1,2})?", fullmatch=True),
    st.from_regex(r"[-+]?0[oxb][-+]?[0-9a-f_]{1,6}", fullmatch=True),  # 0b-101 is -5 to Go
    st.text(st.characters(codec="ascii", exclude_categories=["Cc"]), max_size=12),
)  # fmt: skip


def stated(path: tuple[str, ...], value: str) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    return root


def read_back(reader: Path, folder: Path, text: str, path: tuple[str, ...]) -> Any:
    file = folder / "values.yaml"
    file.write_text(text)
    done = subprocess.run(
        [str(reader), str(file)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, (text, done.stderr)
    # Linkerd's Go writes back what it read; read every scalar of that as text (BaseLoader):
    # the question is which string Linkerd holds, not what PyYAML would make of it.
    node: Any = yaml.load(done.stdout, Loader=yaml.BaseLoader)
    for key in path:
        node = node[key]
    return node


@pytest.fixture(scope="module")
def reader() -> Path:
    return ensure_linkerd("edge-26.8.3", "strict-values")


def test_every_string_written_is_the_string_linkerd_reads(
    reader: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("values")
    seen: list[tuple[str, str]] = []

    @settings(
        max_examples=150, deadline=None, derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )  # fmt: skip
    @given(value=AMBIGUOUS, path=st.sampled_from(FIELDS))
    def one(value: str, path: tuple[str, ...]) -> None:
        text = dump_values(stated(path, value))
        got = read_back(reader, folder, text, path)
        seen.append((value, text))
        assert got == value, f"{'.'.join(path)}: stated {value!r}, written {text!r}, read {got!r}"

    one()
    assert len(seen) >= 100
    assert any(v in ("1e3", "0o17") for v, _ in seen)  # the finding's own cases were tried


@pytest.mark.parametrize(("value", "was"), [("1e3", "1000"), ("0o17", "15")])
def test_the_finding_s_cases(reader: Path, tmp_path: Path, value: str, was: str) -> None:
    """Written plain, Linkerd read these as other strings (the finding): now as stated."""
    plain = f"identityTrustDomain: {value}\n"
    assert read_back(reader, tmp_path, plain, ("identityTrustDomain",)) == was
    ours = dump_values({"identityTrustDomain": value})
    assert read_back(reader, tmp_path, ours, ("identityTrustDomain",)) == value
    assert ours != plain  # written quoted


# -- unmanaged values, read as Linkerd reads them ------------------------------------------------

FMT = HelmValuesFormat(format_for("edge-26.8.3").version)
SPEC = {"proxy": {"proxyVersion": "edge-26.8.4", "logLevel": "debug"}}
MANAGED = (("proxy", "image", "version"), ("proxy", "logLevel"))


def _plain(text: str) -> bool:
    """Whether ``text`` is one plain scalar, as a value and as a key (no indicator, no ': ')."""
    try:
        as_value = yaml.load(f"k: {text}\n", Loader=yaml.BaseLoader)
        as_key = yaml.load(f"{text}: k\n", Loader=yaml.BaseLoader)
    except yaml.YAMLError:
        return False
    return bool(as_value == {"k": text} and as_key == {text: "k"})


FORMS = st.one_of(
    st.sampled_from(["0o17", "0O17", "017", "08", "09.5", "0x1F", "-0x1f", "0b101", "0B11",
                     "0b-101", "1_000", "+_1", "._5", ".5_0", "1e3", "1E3", "-1e-3", "1e400",
                     "6.8523015e+5", "1.0", "5.", ".5", "+.5", ".inf", "-.Inf", "+.INF",
                     ".nan", ".NaN", "y", "Y", "n", "N", "yes", "No", "on", "Off", "true",
                     "False", "TRUE", "null", "Null", "~", "2001-12-14", "2001-12-14T21:59:43Z",
                     "2001-12-14t21:59:43.10-05:00", "2001-12-14 21:59:43.10 -5", "1:30",
                     "190:20:30", "=", "0", "-0", "00", "1.2.3", "18446744073709551615",
                     "9223372036854775808", "-9223372036854775809", "1e39", "0.000244140625",
                     "16777217.0", "tRUE", "é1", "0x", "infinity"]),
    st.integers(-(2**66), 2**66).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.from_regex(r"[-+]?[0-9_]{1,6}(\.[0-9_]{0,3})?([eE][-+]?[0-9]{1,3})?", fullmatch=True),
    st.from_regex(r"[-+]?0[oOxXbB][-+]?[0-9a-fA-F_]{0,8}", fullmatch=True),
    st.from_regex(r"\.[0-9_]{1,4}([eE][-+]?[0-9_]{1,3})?", fullmatch=True),
    st.from_regex(r"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}([Tt ][0-9]{1,2}:[0-9]{2}:[0-9]{2}"
                  r"(\.[0-9]{1,3})?(Z|[-+][0-9]{1,2}(:[0-9]{2})?)?)?", fullmatch=True),
    st.from_regex(r"[-+]?[0-9]{1,3}(:[0-5]?[0-9]){1,2}(\.[0-9]*)?", fullmatch=True),
).filter(_plain)  # fmt: skip
"""Plain scalars a YAML reader may take for a number, a boolean, a null or a timestamp."""


def _quoted(text: str) -> st.SearchStrategy[str]:
    return st.sampled_from([text, f"'{text}'", json.dumps(text)])


SCALARS = FORMS.flatmap(_quoted)
"""Each form plain, single- or double-quoted (a string, to every reader)."""
TWINS = [["1", "'1'", '"1"', "1.0", "01", "0o1", "0x1", "1e0", "+1"],
         ["true", "'true'", "yes", "y", "on", "TRUE"], ["false", "off", "n", "'false'", "No"],
         ["1000", "1e3", "'1000'", "1_000", "0x3E8"], ["15", "0o17", "017", "'15'", "0xF"],
         [".nan", ".NaN", "'.nan'"], [".inf", "1e39", "'.inf'", "+.inf"],
         ["a", "'a'", '"a"'], ["2001-12-14", "'2001-12-14'"], ["~", "null", "''"]]  # fmt: skip
"""Keys Go takes for one, in groups (and null keys, which it refuses)."""
KEYS = st.one_of(st.sampled_from([key for group in TWINS for key in group]), SCALARS)


@st.composite
def unmanaged(draw: st.DrawFn) -> str:
    """An ``unmanaged:`` block: scalar values, a flow list of them, a nested mapping."""
    lines = ["unmanaged:"]
    keys = draw(st.lists(KEYS, min_size=1, max_size=5))
    if draw(st.booleans()):  # two or three keys of one group
        keys += draw(
            st.lists(st.sampled_from(draw(st.sampled_from(TWINS))), min_size=2, max_size=3)
        )
    for key in draw(st.permutations(keys)):
        shape = draw(st.sampled_from(["scalar", "scalar", "list", "mapping"]))
        if shape == "scalar":
            lines.append(f"  {key}: {draw(SCALARS)}")
        elif shape == "list":
            lines.append(f"  {key}: [{', '.join(draw(st.lists(SCALARS, max_size=3)))}]")
        else:
            lines.append(f"  {key}:")
            lines.extend(f"    {k}: {draw(SCALARS)}" for k in draw(st.lists(KEYS, max_size=3)))
    return "\n".join(lines) + "\n"


def go_reads(binary: Path, texts: list[str]) -> list[dict[str, Any]]:
    """What edge-26.8.3's sigs.k8s.io/yaml makes of each text (yaml-to-json)."""
    done = subprocess.run(
        [str(binary)], input=json.dumps(texts), capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answers: list[dict[str, Any]] = json.loads(done.stdout)
    return answers


def typed(value: Any) -> Any:
    """``value`` with each scalar beside the Go type that holds it."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("uint64" if value > 2**63 - 1 else "int", value)
    if isinstance(value, float):
        return ("float64", value)
    assert isinstance(value, str), value
    return ("string", value)


def go_typed(tree: Any) -> Any:
    """yaml-to-json's typed tree in ``typed``'s terms (a leaf is ``[type, text]``)."""
    if isinstance(tree, dict):
        return {k: go_typed(v) for k, v in tree.items()}
    if tree and isinstance(tree[0], str):
        kind, text = tree
        read = {"null": lambda _: None, "bool": lambda t: t == "true", "int": int,
                "uint64": int, "float64": float, "string": str}[kind]  # fmt: skip
        return (kind, int(text)) if kind == "uint64" else typed(read(text))
    return [go_typed(v) for v in tree]


def json_is(json_value: Any, tree: Any) -> bool:
    """Whether YAMLToJSON's JSON is the ``typed`` tree's values (its float -9.2e18 printed
    -9223372036854776000, which reads back as that float)."""
    if isinstance(tree, dict):
        return (
            isinstance(json_value, dict)
            and json_value.keys() == tree.keys()
            and all(json_is(json_value[k], tree[k]) for k in tree)
        )
    if isinstance(tree, list):
        return (
            isinstance(json_value, list)
            and len(json_value) == len(tree)
            and all(json_is(j, t) for j, t in zip(json_value, tree, strict=True))
        )
    if tree[0] == "float64":
        return isinstance(json_value, int | float) and float(json_value) == tree[1]
    return bool(json_value == (tree[1] if len(tree) == 2 else None))


def without_managed(tree: dict[str, Any]) -> dict[str, Any]:
    kept = json.loads(json.dumps(tree))
    for path in MANAGED:
        node = kept
        for key in path[:-1]:
            node = node.get(key, {})
        node.pop(path[-1], None)
    return kept


def go_refuses(answer: dict[str, Any]) -> str | None:
    """Why Go does not read a text as one value: its error, strict's, or a merge."""
    if answer.get("error") or answer.get("strictError"):
        return str(answer.get("error") or answer.get("strictError"))
    return "two keys made one string" if answer["merged"] else None


@pytest.fixture(scope="module")
def yaml_to_json() -> Path:
    return ensure_linkerd("edge-26.8.3", "yaml-to-json")


BEYOND_ASCII = ["中文", "\U0001f600", "é1", "a\u2028b", "a\x85b", "a\u2029", "\ufeffa",
                "a\u00a0b", "a\nb\x85c\n"]  # fmt: skip


def test_text_beyond_ascii_is_read_as_stated(yaml_to_json: Path) -> None:
    """Written as UTF-8 (no longer escaped, which doubled a values text past the bound), and
    YAML's own line breaks beyond ASCII (NEL, LS, PS) and the BOM escaped: written as they
    are, a reader would fold them. Judged by Linkerd's reader's JSON (a ``strict-values``
    round trip writes a NEL back raw, and PyYAML then folds it)."""
    written = [dump_values({"identityTrustDomain": value}) for value in BEYOND_ASCII]
    for value, text, go in zip(BEYOND_ASCII, written, go_reads(yaml_to_json, written), strict=True):
        assert go_refuses(go) is None, (text, go)
        assert go["json"] == {"identityTrustDomain": value}, text
    assert "中文" in written[0] and "\U0001f600" in written[1]  # as they are, not escaped


def installation(values: str) -> Installed:
    data = {d["metadata"]["name"]: dict(d["data"]) for d in modern_install()}
    data["linkerd-config"] = {VALUES_KEY: values}
    return Installed("linkerd/linkerd-config", data["linkerd-config"], data)


def test_unmanaged_values_are_read_and_written_back_as_linkerd_reads_them(
    yaml_to_json: Path,
) -> None:
    base = str(modern_install()[0]["data"][VALUES_KEY])
    seen = {"read": 0, "refused": 0, "error": 0, "strict": 0, "merged": 0}

    @settings(
        max_examples=500, deadline=None, derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )  # fmt: skip
    @given(block=unmanaged())
    def one(block: str) -> None:
        text = base + block
        (go,) = go_reads(yaml_to_json, [text])
        refused = go_refuses(go)
        try:
            ours = parse_values(text, VALUES_KEY)
        except FormatError as error:
            # (b), and its converse: the controller refuses what Go refuses or merges, only
            assert refused is not None, f"refused what Go reads: {error}\n{block}"
            seen["refused"] += 1
            seen["merged" if go["merged"] else "error" if go.get("error") else "strict"] += 1
            return
        assert refused is None, f"read what Go does not ({refused}):\n{block}"
        seen["read"] += 1
        # the typed tree's keys are sigs.k8s.io/yaml's own: its JSON says so
        assert json_is(go["json"], go_typed(go["typed"]))
        # (a) the same JSON value, each scalar of the same Go type
        assert typed(ours) == go_typed(go["typed"]), block
        # (c) the rendering: every value but the two the spec sets reads as it did
        rendered = FMT.rendering(SPEC, installation(text)).data[VALUES_KEY]
        (again,) = go_reads(yaml_to_json, [rendered])
        assert go_refuses(again) is None, (rendered, again)
        assert without_managed(go_typed(again["typed"])) == without_managed(
            go_typed(go["typed"])
        ), f"{block}\nwritten:\n{rendered[rendered.index('unmanaged:') :]}"

    one()
    print(seen)
    assert seen["read"] >= 200, seen
    assert min(seen["merged"], seen["strict"], seen["error"]) >= 10, seen


FINDING = [
    ("x: 0o17\n", {"x": 15}),
    ("word: y\n", {"word": True}),  # and key y would be "true"
    ("t: 2001-12-14T21:59:43Z\n", {"t": "2001-12-14T21:59:43Z"}),
    ("u: 1_000\n", {"u": 1000}),
    ("f: 1e3\n", {"f": 1000.0}),
    ("b: '0b-101'\n", {"b": "0b-101"}),
]


@pytest.mark.parametrize(("block", "read"), FINDING, ids=[b.strip() for b, _ in FINDING])
def test_the_finding_s_values(yaml_to_json: Path, block: str, read: dict[str, Any]) -> None:
    """The finding's own cases: read as Go reads them, and so written back."""
    text = str(modern_install()[0]["data"][VALUES_KEY]) + block
    (go,) = go_reads(yaml_to_json, [text])
    (key,) = read
    assert go_typed(go["typed"])[key] == typed(read[key])  # what Linkerd reads
    assert typed(parse_values(text, VALUES_KEY)[key]) == typed(read[key])  # what we hold
    rendered = FMT.rendering(SPEC, installation(text)).data[VALUES_KEY]
    (again,) = go_reads(yaml_to_json, [rendered])
    assert go_typed(again["typed"])[key] == typed(read[key])  # what Linkerd reads after


@pytest.mark.parametrize(
    "keys", ["1: a\n'1': b\n", "true: a\nyes: b\n", "1.0: a\n1: b\n", "0.0: a\n-0.0: b\n"]
)
def test_keys_go_takes_for_one_are_refused(yaml_to_json: Path, keys: str) -> None:
    text = str(modern_install()[0]["data"][VALUES_KEY]) + keys
    (go,) = go_reads(yaml_to_json, [text])
    assert go["merged"] or go.get("strictError")  # Go keeps one, silently or strictly not
    with pytest.raises(FormatError, match="which one counts would be a guess"):
        parse_values(text, VALUES_KEY)
