"""What the cluster holds is read within bounds and never guessed at (issue 22, findings 1
and 4): the installed ``linkerd-config`` may have been written by anyone with edit rights on
it. An alias bomb, a key stated twice, a version no format reads: refused, each naming the
ConfigMap and key (never a spec field the LinkerdConfig did not set), nothing written."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from linkerd_config.linkerd.configmap.desired import current_data, desired_config
from linkerd_config.linkerd.formats import FormatError, InstalledDataError, bounded
from linkerd_config.linkerd.formats.config_diff import key_diff, readable
from linkerd_config.linkerd.formats.helm_values import parse_values
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.spec.crd import target_of
from linkerd_config.linkerd.status.plan import plan, status
from linkerd_config.linkerd.status.view import ClusterView
from tests.support.controller_fakes import conditions, controller
from tests.support.hostile import (
    alias_bomb,
    bombed_values,
    installed_values,
    with_values,
)
from tests.support.linkerdconfigs import config as legacy_config
from tests.support.linkerdconfigs import small
from tests.support.samples import SECOND_TRUST_ANCHOR, install_configmap, modern_install

VALUES_AT = "ConfigMap linkerd/linkerd-config, key values"
GLOBAL_AT = "ConfigMap linkerd/linkerd-config, key global"


def render(configmap: dict[str, Any], config: dict[str, Any] | None = None) -> Any:
    config = config or small()
    target = target_of(config)
    return desired_config(config, current_data({target.name: configmap}, target))


def refusal(configmap: dict[str, Any], config: dict[str, Any] | None = None) -> str:
    """The one error a rendering onto ``configmap`` raises, as ``field: message``."""
    with pytest.raises(InstalledDataError) as raised:
        render(configmap, config)
    (error,) = raised.value.errors
    return str(error)


# -- what Linkerd writes passes ---------------------------------------------------------------


def test_what_linkerd_itself_wrote_is_read_as_before() -> None:
    """Linkerd renders ``values`` with Helm's toYaml (Go's marshaller: no anchors, no
    aliases, no key twice), and ``global`` with jsonpb: both read exactly as PyYAML and
    Python's JSON read them."""
    text = installed_values()
    assert bounded.yaml_value(text) == yaml.safe_load(text)
    legacy = install_configmap()["data"]
    for key in ("global", "proxy", "install"):
        assert bounded.json_value(legacy[key]) == json.loads(legacy[key])


# -- finding 1: the alias bomb ------------------------------------------------------------------


@pytest.mark.parametrize("levels", [4, 10, 11])
def test_an_alias_bomb_in_values_is_refused_at_its_first_anchor(levels: int) -> None:
    bombed = with_values(modern_install()[0], bombed_values(levels))
    first_anchor = installed_values().count("\n") + 1  # the line after Linkerd's values
    assert refusal(bombed) == (
        f"{VALUES_AT}: line {first_anchor}, column 9: a YAML anchor (&l0); "
        "Linkerd never writes anchors or aliases"
    )


def test_an_alias_alone_is_refused_too() -> None:
    """An alias without an anchor is not YAML; one with an anchor is caught at the anchor:
    either way no alias is ever expanded."""
    text = installed_values() + "laugh: *nowhere\n"
    message = refusal(with_values(modern_install()[0], text))
    assert message.startswith(f"{VALUES_AT}: line ")
    assert "nowhere" in message


async def test_reconcile_of_a_bomb_writes_nothing_and_says_which_configmap() -> None:
    config_cm, roots = modern_install()
    bombed = with_values(config_cm, bombed_values(10))
    ctl, writer, recorder = controller(small(), configmap=bombed)
    ctl.configmaps.store.put(roots)
    await ctl.reconcile("modern")
    assert writer.applied == []  # neither the ConfigMap (the bomb written back) nor a copy
    (status_,) = writer.statuses
    assert conditions(status_)["Ready"] == ("False", "InstalledConfigUnreadable")
    assert conditions(status_)["ConfigMapSynced"] == ("False", "InstalledConfigUnreadable")
    ready = next(c for c in status_["conditions"] if c["type"] == "Ready")
    assert ready["message"].startswith(f"{VALUES_AT}: line ")
    assert "nothing is written until the ConfigMap is corrected" in ready["message"]
    assert recorder.events == [("Warning", "InstalledConfigUnreadable")]


def test_plan_and_status_refuse_the_bomb_naming_the_configmap() -> None:
    config_cm, roots = modern_install()
    bombed = with_values(config_cm, bombed_values(11))
    stored = {**small(), "status": {}}
    configmaps = {f"linkerd/{cm['metadata']['name']}": cm for cm in (bombed, roots)}
    cluster = ClusterView(
        configs=[stored], configmaps=configmaps, pods=[], namespaces={}, replicasets={},
        workloads={}, config_namespace="linkerd",
    )  # fmt: skip
    defaults = RolloutOptions(max_restarts_per_pass=1, restart_interval=1.0)
    planned = plan(small(), cluster, defaults)
    assert planned.problem is not None
    assert planned.problem.reason == "InstalledConfigUnreadable"
    assert planned.problem.message.startswith(f"{VALUES_AT}: line ")
    (reported,) = status(cluster, defaults)
    assert reported.problem == planned.problem


def test_the_readable_diff_never_expands_a_bomb() -> None:
    """``plan`` diffs any key it would change, the trust roots too: a refused text is
    compared as the text it is."""
    text = alias_bomb(11)
    assert readable(text) == text


# -- finding 4: a key twice, a version no format reads ------------------------------------------


def test_a_key_twice_in_values_is_refused_not_resolved() -> None:
    text = installed_values() + "linkerdVersion: edge-1.0.0\n"
    first = next(
        number
        for number, line in enumerate(installed_values().splitlines(), start=1)
        if line.startswith("linkerdVersion:")
    )
    message = refusal(with_values(modern_install()[0], text))
    assert message == (
        f"{VALUES_AT}: line {text.count(chr(10))}, column 1: key 'linkerdVersion' appears "
        f"twice in one mapping (first at line {first}); which one counts would be a guess"
    )
    assert "spec.global.version" not in message


def test_an_unusable_installed_version_is_the_configmaps_problem() -> None:
    values = installed_values().replace("linkerdVersion: edge-26.8.3", "linkerdVersion: edge-1.0.0")
    assert values != installed_values()
    message = refusal(with_values(modern_install()[0], values))
    assert message.startswith(
        f"{VALUES_AT}: declares the Linkerd version, and 'edge-1.0.0' is not a Linkerd version"
    )
    assert message.endswith("state spec.global.version, or correct the ConfigMap")


def test_a_key_twice_in_the_legacy_global_is_refused() -> None:
    cm = install_configmap()
    global_ = cm["data"]["global"].rstrip().rstrip("}") + ',"version":"edge-1.0.0"}'
    bad = {**cm, "data": {**cm["data"], "global": global_}}
    assert refusal(bad, legacy_config()) == (
        f"{GLOBAL_AT}: key 'version' appears twice in one object; which one counts would be a guess"
    )


# -- the bounds, each refused with a reason ------------------------------------------------------

DEEP = 100_000


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("a: " + "[" * (bounded.MAX_DEPTH + 1) + "]" * (bounded.MAX_DEPTH + 1), "levels deep"),
        ("a: " + "[" * DEEP + "]" * DEEP, "levels deep"),
        ("a: [" + ", ".join(["1"] * bounded.MAX_NODES) + "]", "values"),
        ("a: " + "x" * bounded.MAX_BYTES, f"larger than {bounded.MAX_BYTES} bytes"),
        ("a: " + "9" * 5000, "is not usable YAML"),
        ("a: &x 1\nb: 2\n", "a YAML anchor (&x)"),
        ("a: 1\n---\nb: 2\n", "is not YAML"),
        ("{a: 1, a: 2}", "appears twice"),
        ("? [1, 2]\n: 3\n", "a mapping key that is itself a mapping or list"),
    ],
    ids=[
        "depth",
        "very-deep",
        "values",
        "bytes",
        "huge-int",
        "anchor",
        "two-documents",
        "flow-key-twice",
        "list-key",
    ],
)
def test_yaml_beyond_the_bounds_is_refused(text: str, reason: str) -> None:
    with pytest.raises(bounded.Unreadable, match=re.escape(reason)):
        bounded.yaml_value(text)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[" * (bounded.MAX_DEPTH + 1) + "]" * (bounded.MAX_DEPTH + 1), "levels deep"),
        ("[" * DEEP + "]" * DEEP, "levels deep"),
        ("[" + ",".join(["1"] * (bounded.MAX_NODES + 1)) + "]", "values"),
        ('"' + "x" * bounded.MAX_BYTES + '"', "larger than"),
        ("9" * 5000, "is not usable JSON"),
        ('{"a": NaN}', "NaN is not JSON"),
        ('{"a": 1, "a": 2}', "appears twice"),
        ("{not json", "line 1, column 2: is not JSON"),
    ],
    ids=["depth", "very-deep", "values", "bytes", "huge-int", "nan", "key-twice", "syntax"],
)
def test_json_beyond_the_bounds_is_refused(text: str, reason: str) -> None:
    with pytest.raises(bounded.Unreadable, match=re.escape(reason)):
        bounded.json_value(text)


# -- values as Linkerd's Go reads them (issue 39, finding 2) -------------------------------------
# Linkerd reads `values` with sigs.k8s.io/yaml (go.yaml.in/yaml/v2 into interface{}, keys made
# strings, then JSON); so does the controller now (formats.go_yaml). Each expectation below is
# what edge-26.8.3's own sigs.k8s.io/yaml made of it (devcluster's yaml-to-json binary, its
# YAMLToJSON plus each value's Go type): an int is a Python int, a float a float.

U64 = 2**64 - 1

GO_READS: list[tuple[str, Any]] = [
    # YAML 1.1 and Go integer forms (strconv.ParseInt, base 0, every underscore dropped first)
    ("0o17", 15), ("0O17", 15), ("017", 15), ("0x1F", 31), ("-0x1f", -31), ("0b101", 5),
    ("0B11", 3), ("0b-101", -5), ("1_000", 1000), ("1__0_", 10), ("+_1", 1), ("0", 0),
    ("-0", 0), ("00", 0),
    ("9223372036854775807", 2**63 - 1), ("9223372036854775808", 2**63),
    ("18446744073709551615", U64), ("-9223372036854775808", -(2**63)),
    # floats (yamlStyleFloat, or ParseFloat after a leading "."): 08 is not octal, so a float
    ("08", 8.0), ("09.5", 9.5), ("1e3", 1000.0), ("1E3", 1000.0), ("-1e-3", -0.001),
    ("6.8523015e+5", 685230.15), ("1.0", 1.0), ("5.", 5.0), (".5", 0.5), ("+.5", 0.5),
    (".5_0", 0.5), (".5e1_0", 5e9),
    ("18446744073709551616", 1.8446744073709552e19),
    ("-9223372036854775809", -9.223372036854776e18),
    # booleans and nulls: YAML 1.1's words, in three cases each
    ("y", True), ("Y", True), ("yes", True), ("on", True), ("TRUE", True), ("n", False),
    ("NO", False), ("Off", False), ("False", False), ("~", None), ("null", None),
    ("NULL", None), ("", None),
    # strings: timestamps stay their text, base 60 is gone, the rest is not a number to Go
    ("2001-12-14", "2001-12-14"), ("2001-12-14T21:59:43Z", "2001-12-14T21:59:43Z"),
    ("2001-12-14 21:59:43.10 -5", "2001-12-14 21:59:43.10 -5"), ("1:30", "1:30"),
    ("190:20:30", "190:20:30"), ("<<", "<<"), ("=", "="), ("1e400", "1e400"),
    ("-1e400", "-1e400"), ("0x10000000000000000", "0x10000000000000000"), ("._5", "._5"),
    ("tRUE", "tRUE"), ("nULL", "nULL"), ("1.2.3", "1.2.3"), ("0x", "0x"), ("0b", "0b"),
    ("+", "+"), (".", "."), ("1e", "1e"), ("0x1p3", "0x1p3"), ("infinity", "infinity"),
    ("-inf", "-inf"), ("NaN", "NaN"), ("é1", "é1"),
]  # fmt: skip


def same(got: Any, expected: Any) -> bool:
    """Equal and of one type (True is not 1, 1.0 is not 1: Go tells them apart)."""
    return type(got) is type(expected) and got == expected


@pytest.mark.parametrize(("text", "expected"), GO_READS, ids=[repr(t) for t, _ in GO_READS])
def test_a_plain_value_is_what_linkerd_s_go_reads(text: str, expected: Any) -> None:
    got = parse_values(f"unmanaged: {text}\n", "values")["unmanaged"]
    assert same(got, expected), f"{text!r}: read {got!r}, Go reads {expected!r}"


@pytest.mark.parametrize("text", ["'0o17'", '"y"', "'1e3'", "|\n  08\n", "'2001-12-14'"])
def test_a_quoted_or_block_value_is_a_string(text: str) -> None:
    got = parse_values(f"unmanaged: {text}\n", "values")["unmanaged"]
    assert isinstance(got, str)
    assert got.strip() == yaml.safe_load(f"v: {text}\n")["v"].strip()


GO_KEYS: list[tuple[str, str]] = [
    ("1", "1"), ("0o17", "15"), ("1_000", "1000"), ("y", "true"), ("off", "false"),
    ("1.0", "1"), ("0.1", "0.1"), ("1e3", "1000"), ("1e6", "1e+06"), ("-0.0", "-0"),
    ("123456789.0", "1.2345679e+08"), ("16777217.0", "1.6777216e+07"), (".5e-10", "5e-11"),
    ("1e39", ".inf"), (".inf", ".inf"), ("-.Inf", "-.inf"), (".NaN", ".nan"),
    ("3.4028235e38", "3.4028235e+38"), ("0.000244140625", "0.00024414063"),
    ("2001-12-14", "2001-12-14"), ("'1'", "1"), ('"yes"', "yes"),
]  # fmt: skip
"""A key is the string sigs.k8s.io/yaml makes of it: a float by Go's FormatFloat(k, 'g', -1,
32), rounded to float32 first (0.000244140625 is Go's own rounding of a tie)."""


@pytest.mark.parametrize(("text", "key"), GO_KEYS, ids=[t for t, _ in GO_KEYS])
def test_a_key_is_the_string_linkerd_s_go_makes_of_it(text: str, key: str) -> None:
    assert parse_values(f"{text}: v\n", "values") == {key: "v"}


GO_MERGES: list[tuple[str, str]] = [
    ("1: a\n'1': b\n", "key '1' and key 1 (first at line 1) are one key, '1'"),
    ('"true": a\nyes: b\n', "key yes and key \"true\" (first at line 1) are one key, 'true'"),
    ("true: a\nyes: b\n", "key yes and key true (first at line 1) are one key, 'true'"),
    ("1.0: a\n1: b\n", "key 1 and key 1.0 (first at line 1) are one key, '1'"),
    ("1e3: a\n1000: b\n", "key 1000 and key 1e3 (first at line 1) are one key, '1000'"),
    ("0.0: a\n-0.0: b\n", "key -0.0 and key 0.0 (first at line 1) are one key, '0'"),
    ("-0.0: a\n0e5: b\n", "key 0e5 and key -0.0 (first at line 1) are one key, '-0'"),
    ("0o17: a\n15: b\n", "key 15 and key 0o17 (first at line 1) are one key, '15'"),
    (".nan: a\n.NaN: b\n", "key .NaN and key .nan (first at line 1) are one key, '.nan'"),
    ("16777217.0: a\n16777216.0: b\n", "key 16777216.0 and key 16777217.0 (first at line 1)"),
    ("a: 1\n'a': 2\n", "key 'a' appears twice in one mapping (first at line 1)"),
    ("1: a\n1: b\n", "key '1' appears twice in one mapping (first at line 1)"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "said"), GO_MERGES, ids=[t for t, _ in GO_MERGES])
def test_keys_linkerd_s_go_takes_for_one_are_refused(text: str, said: str) -> None:
    """Go keeps one of them, silently (yaml.v2 the last of equal keys, sigs.k8s.io/yaml
    either of two that make one string): the ConfigMap is refused, naming both."""
    body = "unmanaged:\n" + "".join(f"  {line}\n" for line in text.splitlines())
    message = refusal(with_values(modern_install()[0], installed_values() + body))
    second = installed_values().count("\n") + 3
    first = second - 1
    said = said.replace("(first at line 1)", f"(first at line {first})")
    assert message.startswith(f"{VALUES_AT}: line {second}, column 3: {said}"), message
    assert message.endswith("; which one counts would be a guess")


GO_REFUSES: list[tuple[str, str]] = [
    ("v: .inf\n", "line 1, column 4: .inf is a float JSON cannot hold"),
    ("v: [1, -.Inf]\n", "line 1, column 8: -.Inf is a float JSON cannot hold"),
    ("v: .nan\n", "line 1, column 4: .nan is a float JSON cannot hold"),
    ("~: v\n", "line 1, column 1: key ~ is null"),
    ("? ''\n: v\nnull: w\n", "line 3, column 1: key null is null"),
    ("18446744073709551615: v\n", "key 18446744073709551615 is an integer beyond int64"),
    ("v: !!str 1\n", "line 1, column 4: a YAML tag (!!str)"),
    ("v: !!binary aGk=\n", "a YAML tag (!!binary)"),
    ("v: ! 1\n", "a YAML tag (!)"),
    ("v: !!set {a}\n", "a YAML tag (!!set)"),
    ("<<: {a: 1}\n", "line 1, column 1: a YAML merge key (<<)"),
    ("a: 1\n---\nb: 2\n", "line 2, column 1: a second YAML document"),
    ("%YAML 1.2\n---\na: 1\n", "a %YAML 1.2 directive"),
    ("? [1, 2]\n: 3\n", "a mapping key that is itself a mapping or list"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "said"), GO_REFUSES, ids=[t for t, _ in GO_REFUSES])
def test_what_linkerd_s_go_refuses_or_linkerd_never_writes_is_refused(text: str, said: str) -> None:
    """A float JSON cannot hold, a null or uint64 key: sigs.k8s.io/yaml refuses the whole
    text (Linkerd could not read its own config). A tag, a merge key, a second document:
    never written by Linkerd, read differently by different readers."""
    with pytest.raises(FormatError) as raised:
        parse_values(text, "values")
    (error,) = raised.value.errors
    assert said in error.message


def test_what_linkerd_wrote_reads_the_same_by_go_s_rules() -> None:
    """Linkerd's own values (Go's marshaller quotes every ambiguous string) read by Go's rules
    as PyYAML reads them: nothing in them changes."""
    assert parse_values(installed_values(), "values") == yaml.safe_load(installed_values())


def test_plan_s_diff_of_values_lists_only_what_linkerd_reads_differently() -> None:
    """``plan`` diffs ``values`` by Go's rules too: an unmanaged value the rendering writes
    back in another form (0o17 as 15, a timestamp quoted) is no change, and no PyYAML-only
    value (a datetime) reaches ``-o json``."""
    text = installed_values() + "u:\n  x: 0o17\n  t: 2001-12-14T21:59:43Z\n  w: y\n"
    configmap = with_values(modern_install()[0], text)
    after = render(configmap).data["values"]
    changes = key_diff(text, after)
    assert {c.path for c in changes} == {"proxy.image.version", "proxy.logLevel"}
    json.dumps([c.as_json() for c in changes])


# -- hostile text a review found (lone surrogates, a rendering past the bound) -------------------


@pytest.mark.parametrize(
    "text",
    ['{"a": "x\\udc00"}', '{"x\\ud800": 1}', '["fine", {"b": ["\\udfff"]}]'],
    ids=["value", "key", "nested"],
)
def test_json_with_an_escaped_lone_surrogate_is_refused_naming_it(text: str) -> None:
    with pytest.raises(bounded.Unreadable, match=r"an escaped lone surrogate \(U\+D[89A-F]"):
        bounded.json_value(text)


@pytest.mark.parametrize("text", ['a: "x\\udc00"\n', '"\\ud800": 1\n'], ids=["value", "key"])
def test_yaml_with_an_escaped_lone_surrogate_is_refused_too(text: str) -> None:
    """The values format's reader: libyaml refuses the escape itself."""
    with pytest.raises(bounded.Unreadable, match=r"line 1, column \d+: is not YAML: .*escape"):
        bounded.yaml_value(text)


def test_an_escaped_surrogate_pair_is_one_character_and_read() -> None:
    assert bounded.json_value('{"a": "\\ud83d\\ude00"}') == {"a": "\U0001f600"}


def test_a_lone_surrogate_in_the_legacy_global_is_the_configmaps_problem() -> None:
    """It parsed in Python and crashed every reconcile when set on a protobuf string field
    (UnicodeEncodeError, retried for ever, no status); now the ConfigMap and key are named."""
    cm = install_configmap()
    global_ = json.loads(cm["data"]["global"])
    global_["identityContext"]["trustAnchorsPem"] = "x\udc00"
    text = json.dumps(global_)  # escapes it: \udc00, as someone could write it
    assert "\\udc00" in text
    bad = {**cm, "data": {**cm["data"], "global": text}}
    stated = legacy_config()
    del stated["spec"]["global"]["identityContext"]["trustAnchorsPEM"]  # the cluster's is read
    message = refusal(bad, stated)
    assert message.startswith(f"{GLOBAL_AT}: the string 'x\\udc00' holds an escaped lone")


def test_a_rendering_the_readers_would_refuse_is_not_written() -> None:
    """Installed values just within the bound, and a spec that adds a second trust anchor
    (a rotation's bundle): written, the values would be past the bound, and the next
    reconcile would refuse its own write. The spec is refused instead, naming the key."""
    config_cm, roots = modern_install()
    values = config_cm["data"]["values"]
    filler = "x" * (bounded.MAX_BYTES - len(values.encode()) - len("filler: \n") - 8)
    near = with_values(config_cm, values + f"filler: {filler}\n")
    bounded.check_size(near["data"]["values"])  # what is installed reads
    stated = small()
    bundle = parse_values(values, "installed")["identityTrustAnchorsPEM"] + SECOND_TRUST_ANCHOR
    stated["spec"]["global"] = {"identityContext": {"trustAnchorsPEM": bundle}}
    target = target_of(stated)
    current = current_data({target.name: near, roots["metadata"]["name"]: roots}, target)
    with pytest.raises(FormatError) as raised:
        desired_config(stated, current)
    (error,) = raised.value.errors
    assert error.field == VALUES_AT
    assert error.message.startswith(f"as written it is larger than {bounded.MAX_BYTES} bytes")
    # Without the anchor it fits, and is written.
    assert f"\nfiller: {filler}\n" in desired_config(small(), current).data["values"]
