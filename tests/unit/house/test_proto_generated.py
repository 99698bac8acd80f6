"""The checked-in protobuf code is what proto/generate.py makes of the checked-in .proto,
and that .proto still has Linkerd's field names, numbers and order."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from linkerd_config.linkerd.formats.legacy import config_pb2
from tests.support.scripts import load_script

REPO = Path(__file__).resolve().parents[3]
GENERATED = REPO / "linkerd_config" / "linkerd" / "formats" / "legacy"


def load_generator() -> ModuleType:
    return load_script("proto/generate.py")


def test_checked_in_code_matches_a_fresh_generation(tmp_path: Path) -> None:
    written = load_generator().generate(tmp_path)
    assert sorted(p.name for p in written) == ["config_pb2.py", "config_pb2.pyi"]
    for fresh in written:
        checked_in = GENERATED / fresh.name
        assert checked_in.read_text() == fresh.read_text(), (
            f"{checked_in.relative_to(REPO)} is stale: run `.venv/bin/python proto/generate.py`"
        )


# Linkerd's messages (linkerd2 proto/config/config.proto, stable-2.6.0 to edge-20.10.1), in
# declaration order: (field name, number, JSON name). Each message holds every field any
# release in that range has; which release has which is test_legacy_format.py's business
# (against copies of each release's config.proto in tests/fixtures/linkerd-legacy/).
PROXY_FIELDS = [
    ("proxy_image", 1, "proxyImage"),
    ("proxy_init_image", 2, "proxyInitImage"),
    ("control_port", 3, "controlPort"),
    ("ignore_inbound_ports", 4, "ignoreInboundPorts"),
    ("ignore_outbound_ports", 5, "ignoreOutboundPorts"),
    ("inbound_port", 6, "inboundPort"),
    ("admin_port", 7, "adminPort"),
    ("outbound_port", 8, "outboundPort"),
    ("resource", 9, "resource"),
    ("proxy_uid", 10, "proxyUid"),
    ("log_level", 11, "logLevel"),
    ("disable_external_profiles", 12, "disableExternalProfiles"),
    ("proxy_version", 13, "proxyVersion"),
    ("proxy_init_image_version", 14, "proxyInitImageVersion"),
]
# From edge-20.1.3 / stable-2.7.0 on (ignored ports are ranges by then).
LATER_PROXY_FIELDS = [
    ("debug_image", 15, "debugImage"),
    ("debug_image_version", 16, "debugImageVersion"),
    ("destination_get_networks", 17, "destinationGetNetworks"),
    ("log_format", 18, "logFormat"),
    ("outbound_connect_timeout", 19, "outboundConnectTimeout"),
    ("inbound_connect_timeout", 20, "inboundConnectTimeout"),
]
LINKERD = {
    "Global": [
        ("linkerd_namespace", 1, "linkerdNamespace"),
        ("cni_enabled", 2, "cniEnabled"),
        ("version", 3, "version"),
        ("identity_context", 4, "identityContext"),
        ("auto_inject_context", 6, "autoInjectContext"),
        ("omitWebhookSideEffects", 7, "omitWebhookSideEffects"),
        ("cluster_domain", 8, "clusterDomain"),
        ("endpoint_slice_enabled", 9, "endpointSliceEnabled"),
    ],
    "Proxy": PROXY_FIELDS,
    "ProxyWithPortRanges": PROXY_FIELDS + LATER_PROXY_FIELDS,
    "IdentityContext": [
        ("trust_domain", 1, "trustDomain"),
        ("trust_anchors_pem", 2, "trustAnchorsPem"),
        ("issuance_lifetime", 3, "issuanceLifetime"),
        ("clock_skew_allowance", 4, "clockSkewAllowance"),
        ("scheme", 5, "scheme"),
    ],
    "Image": [("image_name", 1, "imageName"), ("pull_policy", 2, "pullPolicy")],
    "Port": [("port", 1, "port")],
    "PortRange": [("port_range", 1, "portRange")],
    "ResourceRequirements": [
        ("request_cpu", 1, "requestCpu"),
        ("request_memory", 2, "requestMemory"),
        ("limit_cpu", 3, "limitCpu"),
        ("limit_memory", 4, "limitMemory"),
    ],
    "LogLevel": [("level", 1, "level")],
    "AutoInjectContext": [],
    "Install": [("cli_version", 2, "cliVersion"), ("flags", 3, "flags")],
    "All": [("global", 1, "global"), ("proxy", 2, "proxy"), ("install", 3, "install")],
}


@pytest.mark.parametrize("message", sorted(LINKERD))
def test_messages_have_linkerds_fields_in_linkerds_order(message: str) -> None:
    descriptor = getattr(config_pb2, message).DESCRIPTOR
    fields = [(f.name, f.number, f.json_name) for f in descriptor.fields]
    assert fields == LINKERD[message]


def test_ignore_port_shapes_differ_only_in_element_type() -> None:
    old = config_pb2.Proxy.DESCRIPTOR.fields_by_name
    new = config_pb2.ProxyWithPortRanges.DESCRIPTOR.fields_by_name
    for name in ("ignore_inbound_ports", "ignore_outbound_ports"):
        assert old[name].is_repeated
        assert new[name].is_repeated
        assert old[name].message_type.full_name == "linkerd.config.Port"
        assert new[name].message_type.full_name == "linkerd.config.PortRange"


def test_scalar_types_match_linkerds() -> None:
    proxy = config_pb2.ProxyWithPortRanges.DESCRIPTOR.fields_by_name
    assert proxy["proxy_uid"].type == proxy["proxy_uid"].TYPE_INT64  # printed quoted
    assert proxy["debug_image"].message_type.full_name == "linkerd.config.Image"
    for name in [n for n, _, _ in LATER_PROXY_FIELDS if n != "debug_image"]:
        assert proxy[name].type == proxy[name].TYPE_STRING, name
    endpoint_slices = config_pb2.Global.DESCRIPTOR.fields_by_name["endpoint_slice_enabled"]
    assert endpoint_slices.type == endpoint_slices.TYPE_BOOL
    assert config_pb2.Port.DESCRIPTOR.fields_by_name["port"].type == proxy["proxy_uid"].TYPE_UINT32
    identity = config_pb2.IdentityContext.DESCRIPTOR.fields_by_name
    for name in ("issuance_lifetime", "clock_skew_allowance"):
        assert identity[name].message_type.full_name == "google.protobuf.Duration"


def test_the_kubernetes_descriptor_set_matches_a_fresh_generation(tmp_path: Path) -> None:
    fresh = load_generator().generate_k8s(tmp_path)
    checked_in = REPO / "linkerd_config" / "kube" / "k8s_api" / fresh.name
    assert checked_in.read_bytes() == fresh.read_bytes(), (
        f"{checked_in.relative_to(REPO)} is stale: run `.venv/bin/python proto/generate.py`"
    )


def load_vendor() -> ModuleType:
    return load_script("proto/k8s_vendor.py")


@pytest.mark.parametrize(
    ("go_type", "tags", "shape"),
    [
        # [protobuf name, JSON name, pointer, list/map, omitempty, omitzero, inline]
        ("*int32", 'json:"replicas,omitempty" protobuf:"varint,1,opt,name=replicas"',
         ["replicas", "replicas", True, False, True, False, False]),
        ("int32", 'json:"replicas" protobuf:"varint,2,opt,name=replicas"',
         ["replicas", "replicas", False, False, False, False, False]),
        ("Time", 'json:"created,omitempty,omitzero" protobuf:"bytes,8,opt,name=created"',
         ["created", "created", False, False, True, True, False]),
        ("map[string]string", 'json:"labels,omitempty" protobuf:"bytes,11,rep,name=labels"',
         ["labels", "labels", False, True, True, False, False]),
        ("VolumeSource", 'json:",inline" protobuf:"bytes,2,opt,name=volumeSource"',
         ["volumeSource", "", False, False, False, False, True]),
        ("TypeMeta", 'json:",inline"', None),  # not on the wire
        ("string", 'json:"-" protobuf:"bytes,3,opt,name=hidden"', None),  # not in JSON
    ],
)  # fmt: skip
def test_a_go_struct_tag_reads_as_its_json_shape(
    go_type: str, tags: str, shape: list[object] | None
) -> None:
    vendor = load_vendor()
    parsed = dict(vendor._TAG.findall(tags))
    assert vendor.field_shape(go_type, parsed) == shape


def test_the_vendored_shapes_cover_the_types_informers_decode() -> None:
    import json  # noqa: PLC0415

    shapes = json.loads((REPO / "linkerd_config/kube/k8s_api/json_shapes.json").read_text())
    for message in (
        "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "k8s.io.apimachinery.pkg.apis.meta.v1.PartialObjectMetadataList",
        "k8s.io.api.core.v1.ConfigMap",
        "k8s.io.api.core.v1.Namespace",
        "k8s.io.api.apps.v1.ReplicaSet",
        "k8s.io.api.apps.v1.DeploymentStatus",
        "k8s.io.api.apps.v1.StatefulSetStatus",
        "k8s.io.api.apps.v1.DaemonSetStatus",
        "k8s.io.api.coordination.v1.LeaseSpec",
    ):
        assert json.loads(shapes["messages"].get(message) or "{}"), message
