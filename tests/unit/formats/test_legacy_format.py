"""The legacy format writes what Linkerd wrote, byte for byte, and refuses what it cannot write."""

from __future__ import annotations

import copy
import hashlib
import json
import re
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
    Installed,
    LegacyFormat,
    LinkerdVersion,
    VersionError,
    format_for,
    parse_version,
)
from linkerd_config.linkerd.formats.field_grammar import parse_go_duration
from linkerd_config.linkerd.formats.legacy import field_releases

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


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


def at(data: dict[str, str]) -> Installed:
    """``data`` as reconcile hands it over: the data of ConfigMap linkerd/linkerd-config."""
    return Installed("linkerd/linkerd-config", data)


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


@pytest.mark.parametrize("version", ["edge-20.1.1", "edge-20.10.1", "stable-2.7.0", "stable-2.8.1"])
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
        "spec.proxy.proxyImage.name",
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
    "version",
    ["stable-2.5.0", "stable-2.9.0", "stable-3.0.0", "edge-19.11.3", "edge-20.10.2", "edge-21.1.1"],
)
def test_versions_outside_the_legacy_range_are_refused(version: str) -> None:
    with pytest.raises(FormatError) as raised:
        LegacyFormat.for_version(version)
    [(path, message)] = raised.value.errors
    assert path == "spec.global.version"
    assert f"Linkerd {version} is not supported by the legacy config format" in message


@pytest.mark.parametrize(
    ("version", "covered"),
    [
        ("edge-20.10.2", "it covers edge-19.12.1 up to (not including) edge-20.10.2"),
        ("stable-2.9.0", "it covers stable-2.6.0 up to (not including) stable-2.9.0"),
    ],
)
def test_the_first_releases_that_read_helm_values_are_refused(version: str, covered: str) -> None:
    """edge-20.10.2 (linkerd2 PR #5036) and stable-2.9.0 inject from the `values` key."""
    with pytest.raises(FormatError) as raised:
        LegacyFormat(parse_version(version))
    assert raised.value.errors == [
        (
            "spec.global.version",
            f"Linkerd {version} is not supported by the legacy config format: {covered}",
        )
    ]
    assert LegacyFormat.supports(parse_version("edge-20.10.1"))
    assert LegacyFormat.supports(parse_version("stable-2.8.1"))


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
    pem = format_for("edge-19.12.1").trust_anchors(at(installed))
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
    assert format_for("edge-19.12.3").trust_anchors(at(data)) is None


def test_trust_anchors_under_the_original_field_names() -> None:
    data = {"global": '{"identity_context":{"trust_anchors_pem":"PEM"}}'}
    assert format_for("edge-19.12.3").trust_anchors(at(data)) == "PEM"


def test_an_unreadable_global_is_an_error_naming_the_configmap() -> None:
    with pytest.raises(FormatError) as raised:
        format_for("edge-19.12.3").trust_anchors(at({"global": "{not json"}))
    assert raised.value.errors[0][0] == "ConfigMap linkerd/linkerd-config, key global"
    assert "line 1, column 2: is not JSON" in raised.value.errors[0][1]


def test_trust_anchors_round_trip_through_render(sample: dict[str, Any]) -> None:
    legacy = format_for("edge-19.12.3")
    assert (
        legacy.trust_anchors(at(legacy.render(sample)))
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
    "edge-20.7.3",
    "edge-20.10.1",
    "stable-2.6.1",
    "stable-2.7.1",
    "stable-2.8.1",
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
    legacy = LegacyFormat(parse_version(version))
    has_scheme = legacy.has_field("IdentityContext", "scheme")
    scheme = draw(TEXT if has_scheme else st.sampled_from(["", "linkerd.io/tls"]))
    optional: dict[str, Any] = {}
    for key, (message, field) in OPTIONAL.items():
        if legacy.has_field(message, field) and draw(st.booleans()):
            if key == "debugImage":
                optional[key] = {"name": draw(TEXT), "pullPolicy": draw(TEXT)}
            elif key == "endpointSliceEnabled":
                optional[key] = draw(st.booleans())
            else:
                optional[key] = draw(TEXT)
    spec = {
        "global": {
            "linkerdNamespace": draw(TEXT),
            "cniEnabled": draw(st.booleans()),
            "version": version,
            "identityContext": {
                "trustDomain": draw(TEXT),
                "trustAnchorsPEM": draw(TEXT),
                "issuanceLifeTime": draw(durations()),
                "clockSkewAllowance": draw(durations()),
                "scheme": scheme,
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
    for key, value in optional.items():
        spec["global" if key == "endpointSliceEnabled" else "proxy"][key] = value
    return spec


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


# --- (g) every release gets exactly its own config.proto ---------------------------------------
#
# tests/fixtures/linkerd-legacy/ holds Linkerd's config.proto as each release in the range has
# it (index.yaml maps release to copy) and, for one release per change, the `global`/`proxy`
# that Go's jsonpb wrote in linkerd2's install golden file.

LEGACY = FIXTURES / "linkerd-legacy"
INDEX: dict[str, Any] = load("linkerd-legacy/index.yaml")
GOLDENS = sorted(path.stem for path in (LEGACY / "install_default").glob("*.yaml"))

# The spec keys of fields only some releases have: (config_pb2 message, field).
OPTIONAL = {
    "debugImage": ("ProxyWithPortRanges", "debug_image"),
    "debugImageVersion": ("ProxyWithPortRanges", "debug_image_version"),
    "destinationGetNetworks": ("ProxyWithPortRanges", "destination_get_networks"),
    "logFormat": ("ProxyWithPortRanges", "log_format"),
    "outboundConnectTimeout": ("ProxyWithPortRanges", "outbound_connect_timeout"),
    "inboundConnectTimeout": ("ProxyWithPortRanges", "inbound_connect_timeout"),
    "endpointSliceEnabled": ("Global", "endpoint_slice_enabled"),
}
OPTIONAL_VALUES: dict[str, Any] = {
    "debugImage": {"name": "gcr.io/linkerd-io/debug", "pullPolicy": "IfNotPresent"},
    "debugImageVersion": "stable-2.7.0",
    "destinationGetNetworks": "10.0.0.0/8",
    "logFormat": "json",
    "outboundConnectTimeout": "1000ms",
    "inboundConnectTimeout": "100ms",
    "endpointSliceEnabled": True,
}

# What a .proto file of Linkerd's says, as far as the JSON goes: message (dotted when nested)
# → its fields in declaration order as (name, number, type, json_name option or None).
ProtoFields = dict[str, list[tuple[str, int, str, str | None]]]
_PROTO_TOKENS = re.compile(
    r"\bmessage\s+(?P<message>\w+)\s*\{"
    r"|(?P<close>\})"
    r"|(?:\brepeated\s+)?(?P<type>[\w.]+)\s+(?P<field>\w+)\s*=\s*(?P<number>\d+)\s*"
    r"(?:\[(?P<options>[^\]]*)\])?\s*;"
)
_JSON_NAME_OPTION = re.compile(r'\bjson_name\s*=\s*"([^"]*)"')


def read_proto(text: str) -> ProtoFields:
    """A tiny reader for the plain proto3 Linkerd wrote: messages, nested messages, fields."""
    text = re.sub(r"//[^\n]*", "", text)
    messages: ProtoFields = {}
    open_messages: list[str] = []
    for token in _PROTO_TOKENS.finditer(text):
        if token["message"]:
            open_messages.append(token["message"])
            messages[".".join(open_messages)] = []
        elif token["close"]:
            open_messages.pop()
        elif open_messages:
            option = _JSON_NAME_OPTION.search(token["options"] or "")
            messages[".".join(open_messages)].append(
                (token["field"], int(token["number"]), token["type"], option and option[1])
            )
    assert not open_messages, "unbalanced braces"
    return messages


def go_json_name(field: str) -> str:
    """protoc's default JSON name, which Go's jsonpb prints: each ``_x`` becomes ``X``."""
    return re.sub(r"_([a-z0-9]?)", lambda match: match[1].upper(), field)


def linkerd_messages(release: str) -> ProtoFields:
    return read_proto((LEGACY / INDEX["releases"][release] / "config.proto").read_text())


def json_fields(messages: ProtoFields, message: str) -> list[str]:
    return [json_name or go_json_name(name) for name, _, _, json_name in messages[message]]


def test_the_proto_reader() -> None:
    messages = read_proto(
        """
        message A { option deprecated = true; }
        message B {
          reserved 1;
          string some_name = 2; // comment = 3;
          repeated Port ports = 4 [deprecated=true];
          int64 renamed = 5 [json_name = "other"];
          message C { bool x_y_z = 1; }
          google.protobuf.Duration d = 6;
        }
        """
    )
    assert messages == {
        "A": [],
        "B": [
            ("some_name", 2, "string", None),
            ("ports", 4, "Port", None),
            ("renamed", 5, "int64", "other"),
            ("d", 6, "google.protobuf.Duration", None),
        ],
        "B.C": [("x_y_z", 1, "bool", None)],
    }
    assert json_fields(messages, "B") == ["someName", "ports", "other", "d"]
    assert go_json_name("omitWebhookSideEffects") == "omitWebhookSideEffects"
    assert go_json_name("trust_anchors_pem") == "trustAnchorsPem"


def test_the_index_covers_every_boundary_and_only_supported_releases() -> None:
    releases = [parse_version(release) for release in INDEX["releases"]]
    assert all(LegacyFormat.supports(release) for release in releases)
    assert set(INDEX["releases"].values()) == set(INDEX["protos"])
    assert set(INDEX["protos"]) == {path.parent.name for path in LEGACY.glob("*/config.proto")}
    assert set(BOUNDARIES) <= set(INDEX["releases"])


def test_the_proto_copies_are_linkerds_files_unchanged() -> None:
    """Each copy hashes to the git blob id index.yaml records for it."""
    for directory, blob in INDEX["protos"].items():
        data = (LEGACY / directory / "config.proto").read_bytes()
        assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == blob, directory


BOUNDARIES = [
    "stable-2.6.1",
    "edge-19.12.3",
    "edge-20.1.1",
    "stable-2.7.0",
    "stable-2.8.0",
    "stable-2.8.1",
    "edge-20.7.1",
    "edge-20.7.3",
    "edge-20.7.5",
    "edge-20.8.4",
    "edge-20.10.1",
]


def release_spec(sample: dict[str, Any], release: str, *, optional: bool) -> dict[str, Any]:
    """The sample for ``release``; with ``optional``, every optional field the release has."""
    spec = with_version(sample, release)
    spec["proxy"]["proxyVersion"] = release
    legacy = LegacyFormat(parse_version(release))
    for key, (message, field) in OPTIONAL.items():
        if optional and legacy.has_field(message, field):
            spec["global" if message == "Global" else "proxy"][key] = OPTIONAL_VALUES[key]
    return spec


def assert_shape(value: Any, message: str, messages: ProtoFields, where: str) -> None:
    """``value`` (parsed JSON) has exactly ``message``'s fields in order, all the way down."""
    assert list(value) == json_fields(messages, message), where
    for (name, _, kind, _), (key, item) in zip(messages[message], value.items(), strict=True):
        nested = kind.removeprefix("linkerd2.config.")
        if nested not in messages or item is None:
            continue
        for index, element in enumerate(item if isinstance(item, list) else [item]):
            assert_shape(element, nested, messages, f"{where}.{key}[{index}] ({name})")


@pytest.mark.parametrize("optional", [False, True], ids=["defaults", "all-set"])
@pytest.mark.parametrize("release", sorted(load("linkerd-legacy/index.yaml")["releases"]))
def test_each_release_gets_exactly_its_config_proto(
    sample: dict[str, Any], release: str, optional: bool
) -> None:
    """The keys of global, proxy, identityContext (and everything inside), in order."""
    messages = linkerd_messages(release)
    rendered = format_for(release).render(release_spec(sample, release, optional=optional))
    global_ = json.loads(rendered["global"])
    proxy = json.loads(rendered["proxy"])
    assert list(global_) == json_fields(messages, "Global")
    assert list(proxy) == json_fields(messages, "Proxy")
    assert list(global_["identityContext"]) == json_fields(messages, "IdentityContext")
    assert proxy["ignoreInboundPorts"]  # so that the element shape is checked too
    assert_shape(global_, "Global", messages, "global")
    assert_shape(proxy, "Proxy", messages, "proxy")


def test_field_releases_agree_with_every_copy_of_config_proto() -> None:
    names = {"ProxyWithPortRanges": "Proxy"}  # ours → Linkerd's message name
    for release in INDEX["releases"]:
        messages = linkerd_messages(release)
        for (message, field), releases in field_releases().items():
            linkerd = [name for name, *_ in messages[names.get(message, message)]]
            assert releases.include(parse_version(release)) == (field in linkerd), (
                release,
                message,
                field,
            )


def spec_from_config(data: dict[str, str], release: str) -> dict[str, Any]:
    """The LinkerdConfig spec that describes a `global`/`proxy` pair Linkerd wrote."""
    global_, proxy = json.loads(data["global"]), json.loads(data["proxy"])
    identity = global_["identityContext"]
    spec_identity = {
        "trustDomain": identity["trustDomain"],
        "trustAnchorsPEM": identity["trustAnchorsPem"],
        "issuanceLifeTime": identity["issuanceLifetime"],
        "clockSkewAllowance": identity["clockSkewAllowance"],
    }
    if "scheme" in identity:
        spec_identity["scheme"] = identity["scheme"]
    spec_global = {
        "linkerdNamespace": global_["linkerdNamespace"],
        "cniEnabled": global_["cniEnabled"],
        "version": release,
        "identityContext": spec_identity,
        "omitWebhookSideEffects": global_["omitWebhookSideEffects"],
        "clusterDomain": global_["clusterDomain"],
    }
    if "endpointSliceEnabled" in global_:
        spec_global["endpointSliceEnabled"] = global_["endpointSliceEnabled"]

    def image(value: dict[str, str]) -> dict[str, str]:
        return {"name": value["imageName"], "pullPolicy": value["pullPolicy"]}

    def ignored(entries: list[dict[str, Any]]) -> list[str]:
        return [str(entry.get("port", entry.get("portRange"))) for entry in entries]

    resource = proxy["resource"]
    spec_proxy = {
        "proxyImage": image(proxy["proxyImage"]),
        "proxyInitImage": image(proxy["proxyInitImage"]),
        "controlPort": proxy["controlPort"]["port"],
        "ignoreInboundPorts": ignored(proxy["ignoreInboundPorts"]),
        "ignoreOutboundPorts": ignored(proxy["ignoreOutboundPorts"]),
        "inboundPort": proxy["inboundPort"]["port"],
        "adminPort": proxy["adminPort"]["port"],
        "outboundPort": proxy["outboundPort"]["port"],
        "resource": {
            kind: {
                name: resource[f"{prefix}{name.capitalize()}"]
                for name in ("cpu", "memory")
                if resource[f"{prefix}{name.capitalize()}"]
            }
            for kind, prefix in (("requests", "request"), ("limits", "limit"))
        },
        "proxyUID": int(proxy["proxyUid"]),
        "logLevel": proxy["logLevel"]["level"],
        "disableExternalProfiles": proxy["disableExternalProfiles"],
        "proxyVersion": proxy["proxyVersion"],
        "proxyInitImageVersion": proxy["proxyInitImageVersion"],
    }
    for key in OPTIONAL:
        if proxy.get(key) is not None:
            spec_proxy[key] = image(proxy[key]) if key == "debugImage" else proxy[key]
    return {"global": spec_global, "proxy": spec_proxy}


@pytest.mark.parametrize("release", GOLDENS)
def test_renders_linkerds_own_install_byte_for_byte(release: str) -> None:
    """Go's jsonpb output from linkerd2's install golden file at each change in the range.

    The golden holds the CLI's placeholder control-plane version, which the format refuses
    (it writes its own release there); everything else is compared as is.
    """
    golden: dict[str, str] = load(f"linkerd-legacy/install_default/{release}.yaml")
    rendered = format_for(release).render(spec_from_config(golden, release))
    placeholder = '"version":"install-control-plane-version"'
    assert placeholder in golden["global"]
    assert rendered["global"] == golden["global"].replace(placeholder, f'"version":"{release}"')
    assert rendered["proxy"] == golden["proxy"]


def test_stable_2_7_writes_an_absent_debug_image_as_linkerd_does(sample: dict[str, Any]) -> None:
    """The issue: Linkerd writes these from edge-20.1.3 / stable-2.7.0 on."""
    for release in ("stable-2.7.0", "stable-2.8.0", "edge-20.1.3"):
        proxy = format_for(release).render(release_spec(sample, release, optional=False))["proxy"]
        assert proxy.endswith(f'"proxyVersion":"{release}","proxyInitImageVersion":"v1.2.0",'
                              '"debugImage":null,"debugImageVersion":""}\n')  # fmt: skip


def test_optional_fields_reach_the_config(sample: dict[str, Any]) -> None:
    rendered = format_for("edge-20.7.5").render(release_spec(sample, "edge-20.7.5", optional=True))
    assert rendered["proxy"].endswith(
        '"debugImage":{"imageName":"gcr.io/linkerd-io/debug","pullPolicy":"IfNotPresent"},'
        '"debugImageVersion":"stable-2.7.0","destinationGetNetworks":"10.0.0.0/8",'
        '"logFormat":"json","outboundConnectTimeout":"1000ms","inboundConnectTimeout":"100ms"}\n'
    )
    assert rendered["global"].endswith(
        '"clusterDomain":"cluster.local","endpointSliceEnabled":true}\n'
    )


@pytest.mark.parametrize(
    ("release", "key", "message"),
    [
        ("stable-2.6.1", "debugImage", "needs Linkerd stable-2.7.0 or later"),
        ("edge-20.1.1", "debugImage", "needs Linkerd edge-20.1.3 or later"),
        ("edge-19.12.3", "debugImageVersion", "needs Linkerd edge-20.1.3 or later"),
        ("stable-2.8.0", "destinationGetNetworks", "needs Linkerd stable-2.8.1 or later"),
        ("edge-20.6.2", "destinationGetNetworks", "needs Linkerd edge-20.6.3 or later"),
        ("edge-20.6.4", "logFormat", "needs Linkerd edge-20.7.1 or later"),
        ("stable-2.8.1", "logFormat", "needs Linkerd stable-2.9.0 or later"),
        ("edge-20.7.4", "outboundConnectTimeout", "needs Linkerd edge-20.7.5 or later"),
        ("edge-20.7.4", "inboundConnectTimeout", "needs Linkerd edge-20.7.5 or later"),
        ("stable-2.8.1", "inboundConnectTimeout", "needs Linkerd stable-2.9.0 or later"),
        ("edge-20.7.2", "endpointSliceEnabled",
         "is only in Linkerd edge-20.7.3 up to (not including) edge-20.8.4"),
        ("edge-20.8.4", "endpointSliceEnabled",
         "is only in Linkerd edge-20.7.3 up to (not including) edge-20.8.4"),
        ("stable-2.8.1", "endpointSliceEnabled",
         "is only in Linkerd edge-20.7.3 up to (not including) edge-20.8.4, in no stable release"),
    ],
)  # fmt: skip
def test_a_field_the_release_lacks_is_refused_naming_the_first_that_has_it(
    sample: dict[str, Any], release: str, key: str, message: str
) -> None:
    spec = release_spec(sample, release, optional=False)
    section = "global" if key == "endpointSliceEnabled" else "proxy"
    spec[section][key] = OPTIONAL_VALUES[key]
    with pytest.raises(FormatError) as raised:
        format_for(release).render(spec)
    assert raised.value.errors == [(f"spec.{section}.{key}", message)]


@pytest.mark.parametrize("value", [False, "", {"name": "", "pullPolicy": ""}])
def test_even_a_default_value_is_refused_where_the_release_lacks_the_field(
    sample: dict[str, Any], value: Any
) -> None:
    spec = release_spec(sample, "edge-19.12.3", optional=False)
    spec["global"]["endpointSliceEnabled"] = spec["proxy"]["logFormat"] = value
    spec["proxy"]["debugImage"] = value
    with pytest.raises(FormatError) as raised:
        format_for("edge-19.12.3").render(spec)
    assert sorted(path for path, _ in raised.value.errors) == [
        "spec.global.endpointSliceEnabled",
        "spec.proxy.debugImage",
        "spec.proxy.logFormat",
    ]


def test_null_is_absent(sample: dict[str, Any]) -> None:
    spec = release_spec(sample, "stable-2.6.1", optional=False)
    plain = format_for("stable-2.6.1").render(spec)
    for key in OPTIONAL:
        spec["global" if key == "endpointSliceEnabled" else "proxy"][key] = None
    assert format_for("stable-2.6.1").render(spec) == plain


@pytest.mark.parametrize("scheme", [None, "", "linkerd.io/tls"])
def test_stable_2_6_has_no_scheme_and_takes_only_its_own(
    sample: dict[str, Any], scheme: str | None
) -> None:
    spec = release_spec(sample, "stable-2.6.1", optional=False)
    spec["global"]["identityContext"]["scheme"] = scheme
    identity = json.loads(format_for("stable-2.6.1").render(spec)["global"])["identityContext"]
    assert "scheme" not in identity
    assert list(identity)[-1] == "clockSkewAllowance"


def test_stable_2_6_refuses_another_scheme(sample: dict[str, Any]) -> None:
    spec = release_spec(sample, "stable-2.6.1", optional=False)
    spec["global"]["identityContext"]["scheme"] = "kubernetes.io/tls"
    with pytest.raises(FormatError) as raised:
        format_for("stable-2.6.1").render(spec)
    assert raised.value.errors == [
        (
            "spec.global.identityContext.scheme",
            "needs Linkerd stable-2.7.0 or later; stable-2.6.1 always uses linkerd.io/tls",
        )
    ]


def test_the_messages_are_the_releases_own(sample: dict[str, Any]) -> None:
    """messages() hands out messages without the fields the release lacks."""
    old = LegacyFormat(parse_version("stable-2.6.1")).messages(
        release_spec(sample, "stable-2.6.1", optional=False)
    )
    new = LegacyFormat(parse_version("edge-20.7.5")).messages(
        release_spec(sample, "edge-20.7.5", optional=True)
    )
    identity = old["global"].DESCRIPTOR.fields_by_name["identity_context"].message_type
    assert "scheme" not in identity.fields_by_name
    assert "endpoint_slice_enabled" not in old["global"].DESCRIPTOR.fields_by_name
    assert "endpoint_slice_enabled" in new["global"].DESCRIPTOR.fields_by_name
    assert new["proxy"].log_format == "json"


def test_ephemeral_storage_is_refused_naming_the_values_releases(
    sample: dict[str, Any],
) -> None:
    """No legacy config.proto has it (its ResourceRequirements holds cpu and memory only):
    refused, never dropped, naming the values releases whose chart reads it."""
    spec = copy.deepcopy(sample)
    spec["proxy"]["resource"] = {"limits": {"ephemeral-storage": "1Gi", "memory": "250Mi"}}
    with pytest.raises(FormatError) as raised:
        format_for("edge-19.12.3").render(spec)
    assert raised.value.errors == [
        (
            "spec.proxy.resource.limits.ephemeral-storage",
            "is not in Linkerd's legacy config format; only the values format has it "
            "(Linkerd edge-21.11.1 or later, stable-2.12.0 or later)",
        )
    ]
