"""The legacy format writes what Linkerd wrote, byte for byte, and refuses what it cannot write."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from linkerd_config.linkerd.formats import (
    ConfigFormat,
    FormatError,
    LegacyFormat,
    LinkerdVersion,
    VersionError,
    format_for,
    parse_version,
)
from linkerd_config.linkerd.formats.legacy import parse_go_duration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def load(relative: str) -> Any:
    return yaml.safe_load((FIXTURES / relative).read_text())


@pytest.fixture
def sample() -> dict[str, Any]:
    """The original project's edge-19.12.3 LinkerdConfig spec."""
    spec: dict[str, Any] = load("samples/edge_19.12.3.yaml")["spec"]
    return spec


@pytest.fixture
def installed() -> dict[str, str]:
    """linkerd-config as `linkerd install` of edge-19.12.1 wrote it."""
    data: dict[str, str] = load("linkerd-config_edge-19.12.1.yaml")["data"]
    return data


def with_version(spec: dict[str, Any], version: str) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    spec["global"]["version"] = version
    return spec


def fixture_equivalent(sample: dict[str, Any]) -> dict[str, Any]:
    """The spec that describes the edge-19.12.1 install in the fixture."""
    spec = with_version(sample, "edge-19.12.1")
    spec["global"]["omitWebhookSideEffects"] = False
    spec["proxy"]["proxyVersion"] = "edge-19.12.1"
    del spec["proxy"]["ignoreInboundPorts"], spec["proxy"]["ignoreOutboundPorts"]
    spec["proxy"]["resource"] = {}
    return spec


# --- (a) byte for byte -------------------------------------------------------------------


def test_renders_the_edge_19_12_1_install_byte_for_byte(
    sample: dict[str, Any], installed: dict[str, str]
) -> None:
    rendered = format_for("edge-19.12.1").render(fixture_equivalent(sample))
    assert rendered["global"] == installed["global"]
    assert rendered["proxy"] == installed["proxy"]
    assert set(rendered) == {"global", "proxy"}  # `install` stays Linkerd's


def test_the_fixture_in_the_repo_is_the_shared_reference(installed: dict[str, str]) -> None:
    shared = Path("/work/shared/fixtures/linkerd-config_edge-19.12.1.yaml")
    if not shared.exists():
        pytest.skip("shared reference not present on this machine")
    assert yaml.safe_load(shared.read_text())["data"] == installed


def test_explicit_empty_lists_and_resources_render_the_same(
    sample: dict[str, Any], installed: dict[str, str]
) -> None:
    spec = fixture_equivalent(sample)
    spec["proxy"].update(
        ignoreInboundPorts=[],
        ignoreOutboundPorts=[],
        resource={"requests": {}, "limits": {}},
    )
    assert format_for("edge-19.12.1").render(spec)["proxy"] == installed["proxy"]


# --- (b) the edge-19.12.3 sample -----------------------------------------------------------


def test_renders_the_edge_19_12_3_sample(sample: dict[str, Any]) -> None:
    rendered = format_for("edge-19.12.3").render(sample)
    proxy = json.loads(rendered["proxy"])
    assert rendered["proxy"].endswith("}\n")
    assert proxy["ignoreInboundPorts"] == [{"port": 8888}, {"port": 9999}]
    assert proxy["ignoreOutboundPorts"] == [{"port": 8888}, {"port": 9999}]
    assert '"ignoreInboundPorts":[{"port":8888},{"port":9999}]' in rendered["proxy"]
    assert proxy["resource"] == {
        "requestCpu": "100m",
        "requestMemory": "20Mi",
        "limitCpu": "1",
        "limitMemory": "250Mi",
    }
    assert proxy["proxyVersion"] == "edge-19.12.3"
    global_ = json.loads(rendered["global"])
    assert global_["version"] == "edge-19.12.3"
    assert global_["omitWebhookSideEffects"] is True
    assert global_["autoInjectContext"] is None


def test_every_field_of_the_spec_reaches_the_config(sample: dict[str, Any]) -> None:
    """Change any one leaf of the spec (but the ConfigMap's name): the output changes."""
    legacy = format_for("edge-19.12.3")
    baseline = legacy.render(sample)
    for path in leaf_paths(sample):
        if path in (("global", "configMap"), ("global", "version")):
            continue
        changed = copy.deepcopy(sample)
        set_leaf(changed, path, mutate(get_leaf(sample, path)))
        assert legacy.render(changed) != baseline, f"spec.{'.'.join(map(str, path))} is lost"


def leaf_paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaf_paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from leaf_paths(value, (*prefix, index))
    else:
        yield prefix


def get_leaf(node: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        node = node[step]
    return node


def set_leaf(node: Any, path: tuple[Any, ...], value: Any) -> None:
    get_leaf(node, path[:-1])[path[-1]] = value


def mutate(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if value.isdigit():
        return str(int(value) + 1)
    if value.endswith("s") and value[:-1].isdigit():
        return f"{int(value[:-1]) + 1}s"
    return value + "x"


def test_the_config_map_name_is_not_part_of_the_data(sample: dict[str, Any]) -> None:
    renamed = copy.deepcopy(sample)
    renamed["global"]["configMap"] = "elsewhere"
    legacy = format_for("edge-19.12.3")
    assert legacy.render(renamed) == legacy.render(sample)


def test_durations_in_any_go_spelling(sample: dict[str, Any]) -> None:
    spec = copy.deepcopy(sample)
    spec["global"]["identityContext"].update(issuanceLifeTime="24h", clockSkewAllowance="1.5s")
    identity = json.loads(format_for("edge-19.12.3").render(spec)["global"])["identityContext"]
    assert identity["issuanceLifetime"] == "86400s"
    assert identity["clockSkewAllowance"] == "1.500s"


def test_the_format_satisfies_the_protocol() -> None:
    chosen: ConfigFormat = format_for("stable-2.6.1")
    assert isinstance(chosen, LegacyFormat)
    assert chosen.managed_keys == frozenset({"global", "proxy"})
    assert chosen.version == parse_version("stable-2.6.1")


# --- (c) edge-20.1.1 and later: port ranges ------------------------------------------------


@pytest.mark.parametrize("version", ["edge-20.1.1", "edge-20.12.1", "stable-2.7.0", "stable-2.8.1"])
def test_from_edge_20_1_1_ignored_ports_are_port_ranges(
    sample: dict[str, Any], version: str
) -> None:
    spec = with_version(sample, version)
    spec["proxy"]["ignoreOutboundPorts"] = ["8888", "1000-2000"]
    rendered = format_for(version).render(spec)
    assert '"ignoreInboundPorts":[{"portRange":"8888"},{"portRange":"9999"}]' in rendered["proxy"]
    assert (
        '"ignoreOutboundPorts":[{"portRange":"8888"},{"portRange":"1000-2000"}]'
        in (rendered["proxy"])
    )
    assert '"port":8888' not in rendered["proxy"]


@pytest.mark.parametrize(
    "version", ["edge-19.12.1", "edge-19.12.3", "stable-2.6.0", "stable-2.6.1"]
)
def test_up_to_edge_19_12_ignored_ports_are_ports(sample: dict[str, Any], version: str) -> None:
    rendered = format_for(version).render(with_version(sample, version))
    assert '"ignoreInboundPorts":[{"port":8888},{"port":9999}]' in rendered["proxy"]


# --- (d) what a version cannot express is an error, never dropped ---------------------------


def test_a_port_range_for_edge_19_12_names_the_entry(sample: dict[str, Any]) -> None:
    spec = copy.deepcopy(sample)
    spec["proxy"]["ignoreInboundPorts"] = ["25", "1000-2000", "3000-4000"]
    with pytest.raises(FormatError) as raised:
        format_for("edge-19.12.3").render(spec)
    assert raised.value.errors == [
        ("spec.proxy.ignoreInboundPorts[1]", "port ranges need Linkerd edge-20.1.1 or later"),
        ("spec.proxy.ignoreInboundPorts[2]", "port ranges need Linkerd edge-20.1.1 or later"),
    ]
    assert isinstance(raised.value, ValueError)
    assert "spec.proxy.ignoreInboundPorts[1]: port ranges need" in str(raised.value)


def test_a_port_range_for_stable_2_6_names_the_stable_release(sample: dict[str, Any]) -> None:
    spec = with_version(sample, "stable-2.6.1")
    spec["proxy"]["ignoreOutboundPorts"] = ["1000-2000"]
    with pytest.raises(FormatError) as raised:
        format_for("stable-2.6.1").render(spec)
    assert raised.value.errors == [
        ("spec.proxy.ignoreOutboundPorts[0]", "port ranges need Linkerd stable-2.7.0 or later")
    ]


def test_every_problem_is_reported_at_once(sample: dict[str, Any]) -> None:
    spec = with_version(sample, "edge-20.1.1")
    spec["proxy"].update(
        inboundPort=70000,
        adminPort="4191",
        ignoreInboundPorts=["25", "9000-80", "http", 8080, "0"],
        proxyUID=-1,
        resource={"requests": {"cpu": 0.5, "ephemeral-storage": "1Gi"}},
        extra=True,
    )
    spec["global"]["identityContext"]["issuanceLifeTime"] = "one day"
    spec["global"]["identityContext"]["clockSkewAllowance"] = "-20s"
    spec["global"]["cniEnabled"] = "false"
    with pytest.raises(FormatError) as raised:
        format_for("edge-20.1.1").render(spec)
    paths = [path for path, _ in raised.value.errors]
    assert sorted(paths) == sorted(
        [
            "spec.global.cniEnabled",
            "spec.global.identityContext.issuanceLifeTime",
            "spec.global.identityContext.clockSkewAllowance",
            "spec.proxy.extra",
            "spec.proxy.ignoreInboundPorts[1]",
            "spec.proxy.ignoreInboundPorts[2]",
            "spec.proxy.ignoreInboundPorts[3]",
            "spec.proxy.ignoreInboundPorts[4]",
            "spec.proxy.inboundPort",
            "spec.proxy.adminPort",
            "spec.proxy.proxyUID",
            "spec.proxy.resource.requests.cpu",
            "spec.proxy.resource.requests.ephemeral-storage",
        ]
    )
    messages = dict(raised.value.errors)
    assert (
        messages["spec.proxy.inboundPort"] == "70000 is out of range: must be between 1 and 65535"
    )
    assert messages["spec.proxy.ignoreInboundPorts[1]"] == (
        "is not a port range: 9000 is greater than 80"
    )
    assert "not a duration" in messages["spec.global.identityContext.issuanceLifeTime"]
    assert messages["spec.global.identityContext.clockSkewAllowance"] == "-20s is negative"


def test_missing_fields_are_errors_not_defaults() -> None:
    """The webhook fills defaults; the format never invents them."""
    spec = load("samples/edge_19.12.3_use_webhook_defaults.yaml")["spec"]
    with pytest.raises(FormatError) as raised:
        LegacyFormat(parse_version("edge-19.12.3")).render(spec)
    paths = {path for path, message in raised.value.errors if message == "is required"}
    assert {
        "spec.global.version",
        "spec.global.linkerdNamespace",
        "spec.global.identityContext.trustDomain",
        "spec.global.identityContext.issuanceLifeTime",
        "spec.proxy.proxyImage",
        "spec.proxy.adminPort",
        "spec.proxy.proxyUID",
        "spec.proxy.logLevel",
    } <= paths
    assert "spec.global.identityContext.trustAnchorsPEM" not in paths
    assert "spec.proxy.proxyVersion" not in paths


def test_the_spec_version_must_be_the_formats_version(sample: dict[str, Any]) -> None:
    with pytest.raises(FormatError) as raised:
        format_for("edge-20.1.1").render(sample)
    assert raised.value.errors == [
        ("spec.global.version", "is edge-19.12.3, but this format writes edge-20.1.1")
    ]


@pytest.mark.parametrize(
    "version", ["stable-2.5.0", "stable-2.9.0", "stable-3.0.0", "edge-19.11.3", "edge-21.1.1"]
)
def test_versions_outside_the_legacy_range_are_refused(version: str) -> None:
    with pytest.raises(FormatError) as raised:
        format_for(version)
    [(path, message)] = raised.value.errors
    assert path == "spec.global.version"
    assert f"Linkerd {version} is not supported by the legacy config format" in message


@pytest.mark.parametrize(
    "version", ["edge-19.12", "19.12.3", "edge-19.13.1", "stable-2.6", "", "v2"]
)
def test_malformed_versions_are_refused_clearly(version: str) -> None:
    with pytest.raises(FormatError) as raised:
        format_for(version)
    [(path, message)] = raised.value.errors
    assert path == "spec.global.version"
    assert message.startswith(f"{version!r} is not a Linkerd version: expected edge-YY.M.N")


# --- (e) trust anchors from an existing ConfigMap -------------------------------------------


def test_reads_the_trust_anchors_of_the_installed_config(
    installed: dict[str, str], sample: dict[str, Any]
) -> None:
    pem = format_for("edge-19.12.1").trust_anchors(installed)
    assert pem == sample["global"]["identityContext"]["trustAnchorsPEM"]
    assert pem is not None
    assert pem.startswith("-----BEGIN CERTIFICATE-----\nMIIBYDCCAQegAwIBAgIBATAKBggqhkjOPQQDAjAY")
    assert pem.endswith("-----END CERTIFICATE-----\n")


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"global": ""},
        {"global": "{}"},
        {"global": '{"identityContext":null}'},
        {"global": '{"identityContext":{"trustAnchorsPem":""}}'},
    ],
)
def test_no_trust_anchors_is_none(data: dict[str, str]) -> None:
    assert format_for("edge-19.12.3").trust_anchors(data) is None


def test_trust_anchors_under_the_original_field_names() -> None:
    data = {"global": '{"identity_context":{"trust_anchors_pem":"PEM"}}'}
    assert format_for("edge-19.12.3").trust_anchors(data) == "PEM"


def test_an_unreadable_global_is_an_error() -> None:
    with pytest.raises(FormatError) as raised:
        format_for("edge-19.12.3").trust_anchors({"global": "{not json"})
    assert raised.value.errors[0][0] == "data.global"


def test_trust_anchors_round_trip_through_render(sample: dict[str, Any]) -> None:
    legacy = format_for("edge-19.12.3")
    assert (
        legacy.trust_anchors(legacy.render(sample))
        == (sample["global"]["identityContext"]["trustAnchorsPEM"])
    )


# --- versions and durations -----------------------------------------------------------------


def test_versions_compare_within_a_channel_only() -> None:
    assert parse_version("edge-19.12.3") < parse_version("edge-20.1.1")
    assert parse_version("edge-20.1.1") > parse_version("edge-19.12.10")
    assert parse_version("stable-2.10.0") > parse_version("stable-2.9.1")
    assert parse_version("stable-2.6.1") == LinkerdVersion("stable", (2, 6, 1))
    assert str(parse_version("edge-20.1.1")) == "edge-20.1.1"
    with pytest.raises(TypeError, match="different release channels"):
        _ = parse_version("edge-19.12.3") < parse_version("stable-2.6.1")
    with pytest.raises(VersionError):
        parse_version("edge-19.12.3-rc1")


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        ("86400s", 86400 * 10**9),
        ("24h", 86400 * 10**9),
        ("1h30m", 5400 * 10**9),
        ("1.5s", 1_500_000_000),
        ("300ms", 300_000_000),
        ("1us", 1_000),
        ("1µs", 1_000),
        ("1μs", 1_000),
        (".5s", 500_000_000),
        ("1.s", 10**9),
        ("0", 0),
        ("+5s", 5 * 10**9),
        ("-5s", -5 * 10**9),
        ("1.0000000009s", 10**9),  # below a nanosecond: truncated, as in Go
    ],
)
def test_go_durations(text: str, nanos: int) -> None:
    assert parse_go_duration(text) == nanos


@pytest.mark.parametrize("text", ["", "10", "s", ".s", "1d", "one day", "1 s", "1s ", "--1s"])
def test_not_go_durations(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_go_duration(text)


def test_a_duration_beyond_int64_nanoseconds_is_refused() -> None:
    with pytest.raises(ValueError, match="out of range"):
        parse_go_duration("2562048h")


# --- (f) the printed JSON is the message ------------------------------------------------------

TEXT = st.text(
    alphabet=st.one_of(st.characters(codec="utf-8"), st.sampled_from('<>&\u2028\u2029"\\\n')),
    max_size=20,
)
PORT = st.integers(min_value=1, max_value=65535)
VERSIONS = [
    "edge-19.12.1",
    "edge-19.12.3",
    "edge-20.1.1",
    "edge-20.6.2",
    "stable-2.6.1",
    "stable-2.7.1",
]


@st.composite
def durations(draw: st.DrawFn) -> str:
    seconds = draw(st.integers(min_value=0, max_value=10**8))
    nanos = draw(st.integers(min_value=0, max_value=999_999_999))
    spelling = draw(st.sampled_from(["seconds", "fraction", "hours"]))
    if spelling == "seconds":
        return f"{seconds}s"
    if spelling == "fraction":
        return f"{seconds}.{nanos:09d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60}m{seconds % 60}s{nanos}ns"


@st.composite
def ignored(draw: st.DrawFn, ranges: bool) -> list[str]:
    single = PORT.map(str)
    if not ranges:
        return draw(st.lists(single, max_size=4))
    pair = st.tuples(PORT, PORT).map(lambda p: f"{min(p)}-{max(p)}")
    return draw(st.lists(st.one_of(single, pair), max_size=4))


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    version = draw(st.sampled_from(VERSIONS))
    ranges = parse_version(version).at_least(
        parse_version("edge-20.1.1"), parse_version("stable-2.7.0")
    )
    quantity = st.one_of(TEXT, st.integers(min_value=0, max_value=10**6))
    amounts = st.fixed_dictionaries({}, optional={"cpu": quantity, "memory": quantity})
    return {
        "global": {
            "linkerdNamespace": draw(TEXT),
            "cniEnabled": draw(st.booleans()),
            "version": version,
            "identityContext": {
                "trustDomain": draw(TEXT),
                "trustAnchorsPEM": draw(TEXT),
                "issuanceLifeTime": draw(durations()),
                "clockSkewAllowance": draw(durations()),
                "scheme": draw(TEXT),
            },
            "omitWebhookSideEffects": draw(st.booleans()),
            "clusterDomain": draw(TEXT),
            "configMap": draw(TEXT),
        },
        "proxy": {
            "proxyImage": {"name": draw(TEXT), "pullPolicy": draw(TEXT)},
            "proxyInitImage": {"name": draw(TEXT), "pullPolicy": draw(TEXT)},
            "adminPort": draw(PORT),
            "controlPort": draw(PORT),
            "inboundPort": draw(PORT),
            "outboundPort": draw(PORT),
            "ignoreInboundPorts": draw(ignored(ranges)),
            "ignoreOutboundPorts": draw(ignored(ranges)),
            "logLevel": draw(TEXT),
            "disableExternalProfiles": draw(st.booleans()),
            "proxyVersion": draw(TEXT),
            "proxyInitImageVersion": draw(TEXT),
            "proxyUID": draw(st.integers(min_value=0, max_value=2**31 - 1)),
            "resource": {"requests": draw(amounts), "limits": draw(amounts)},
        },
    }


def without_nulls(value: Any) -> Any:
    """json_format omits unset messages where Go's jsonpb prints null."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs())
def test_printed_json_parses_back_into_the_same_message(spec: dict[str, Any]) -> None:
    legacy = LegacyFormat.for_version(spec["global"]["version"])
    rendered = legacy.render(spec)
    messages = legacy.messages(spec)
    assert set(rendered) == set(messages) == legacy.managed_keys
    for key, printed in rendered.items():
        assert printed.endswith("\n")
        assert "\n" not in printed[:-1]
        assert not any(c in printed for c in "<>&\u2028\u2029")
        parsed = json.loads(printed)
        message = messages[key]
        reread = type(message)()
        json_format.Parse(printed, reread)
        assert reread == message
        theirs = json_format.MessageToJson(message, always_print_fields_with_no_presence=True)
        assert without_nulls(parsed) == json.loads(theirs)
