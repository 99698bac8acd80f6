"""Kubernetes' protobuf decoded into the JSON the API server would have sent.

The messages are built with the vendored types and encoded as the API server frames them
(magic, ``runtime.Unknown``; watch frames with a length). What Go's encoding/json writes for
each case (omitempty, omitzero, pointers, nil slices, inline structs, custom marshalers) is
stated by hand here, from the struct tags; ``tests/integration/test_protobuf_wire.py``
compares the decoder with the real API server's JSON for the same objects.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import tracemalloc
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkerd_config.kube import protobuf_wire as pw
from linkerd_config.kube.field_tree import DROP, OTHERS, fields_read, project, tree_of
from linkerd_config.kube.informer import keep_fields, strip_managed_fields
from linkerd_config.kube.resource import Prepare
from linkerd_config.kube.watch import (
    FrameReader,
    GoneError,
    WatchProtocolError,
    WatchStream,
)
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.trust.guard import meshed_pod_projection

Json = dict[str, Any]
META = "k8s.io.apimachinery.pkg.apis.meta.v1"
CORE = "k8s.io.api.core.v1"
APPS = "k8s.io.api.apps.v1"


def message(name: str) -> Any:
    return pw.types().message(name)()


def wrapped(api_version: str, kind: str, msg: Any) -> bytes:
    """A body as the API server writes it: magic, then runtime.Unknown around the object."""
    unknown = message("k8s.io.apimachinery.pkg.runtime.Unknown")
    unknown.typeMeta.apiVersion = api_version
    unknown.typeMeta.kind = kind
    unknown.raw = msg.SerializeToString()
    return pw.MAGIC + unknown.SerializeToString()


def framed(event_type: str, body: bytes) -> bytes:
    event = message(f"{META}.WatchEvent")
    event.type = event_type
    event.object.raw = body
    data = event.SerializeToString()
    return len(data).to_bytes(4, "big") + data


def deployment() -> Any:
    """A Deployment touching every rule: pointers, omitempty zeros, maps, lists, inline
    structs, Time, Quantity, IntOrString."""
    d = message(f"{APPS}.Deployment")
    meta = d.metadata
    meta.name = "web"
    meta.namespace = "shop"
    meta.uid = "0b8e0c1e-0000-4000-8000-000000000001"
    meta.resourceVersion = "42"
    meta.generation = 3
    meta.creationTimestamp.seconds = 1_700_000_000
    meta.labels["app"] = "web"
    meta.labels["config.linkerd.io/reconcile"] = "auto"
    meta.annotations["linkerd.io/proxy-version"] = "edge-26.8.3"
    owner = meta.ownerReferences.add()
    owner.apiVersion, owner.kind, owner.name, owner.uid = "v1", "Thing", "t", "u-1"
    owner.controller = True
    d.spec.replicas = 0  # a pointer set to zero: written
    d.spec.selector.matchLabels["app"] = "web"
    d.spec.strategy.type = "RollingUpdate"
    d.spec.strategy.rollingUpdate.maxSurge.type = 1
    d.spec.strategy.rollingUpdate.maxSurge.strVal = "25%"
    d.spec.strategy.rollingUpdate.maxUnavailable.intVal = 1
    pod = d.spec.template
    pod.metadata.labels["app"] = "web"
    container = pod.spec.containers.add()
    container.name = "app"
    container.image = "nginx:1"
    container.resources.limits["cpu"].string = "500m"
    volume = pod.spec.volumes.add()
    volume.name = "scratch"
    volume.volumeSource.emptyDir.sizeLimit.string = "1Gi"
    d.status.observedGeneration = 3
    condition = d.status.conditions.add()
    condition.type, condition.status = "Available", "True"
    condition.lastUpdateTime.seconds = 1_700_000_060
    return d


DEPLOYMENT_JSON: Json = {
    "kind": "Deployment",
    "apiVersion": "apps/v1",
    "metadata": {
        "name": "web",
        "namespace": "shop",
        "uid": "0b8e0c1e-0000-4000-8000-000000000001",
        "resourceVersion": "42",
        "generation": 3,
        "creationTimestamp": "2023-11-14T22:13:20Z",
        "labels": {"app": "web", "config.linkerd.io/reconcile": "auto"},
        "annotations": {"linkerd.io/proxy-version": "edge-26.8.3"},
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Thing", "name": "t", "uid": "u-1", "controller": True}
        ],
    },
    "spec": {
        "replicas": 0,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            # A pod template's zero creationTimestamp is left out (omitzero, from 1.33).
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "containers": [
                    {"name": "app", "image": "nginx:1", "resources": {"limits": {"cpu": "500m"}}}
                ],
                # An inline struct's fields are its parent's; a Quantity is its string.
                "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}],
            },
        },
        "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 1, "maxSurge": "25%"},
        },
    },
    "status": {
        "observedGeneration": 3,
        "conditions": [
            {
                "type": "Available",
                "status": "True",
                "lastUpdateTime": "2023-11-14T22:14:20Z",
                # lastTransitionTime is a non-pointer Time without omitzero: null when zero.
                "lastTransitionTime": None,
            }
        ],
    },
}


def test_a_deployment_reads_as_the_api_servers_json() -> None:
    assert pw.decode_object(wrapped("apps/v1", "Deployment", deployment()), None) == (
        DEPLOYMENT_JSON
    )


@pytest.mark.parametrize(
    ("kind", "build", "expected"),
    [
        # A non-omitempty int is written when zero; a nil non-omitempty slice is null.
        (
            f"{APPS}.StatefulSetStatus",
            lambda m: None,
            {"replicas": 0, "availableReplicas": 0},
        ),
        # An omitempty zero is left out, a nil pointer too (selector); a struct never is.
        (
            f"{APPS}.DeploymentSpec",
            lambda m: setattr(m, "paused", False),
            {"template": {"metadata": {}, "spec": {"containers": None}}, "strategy": {}},
        ),
        (f"{CORE}.PodSpec", lambda m: None, {"containers": None}),
        # bytes are base64, a pointer bool set to false is written.
        (
            f"{CORE}.ConfigMap",
            lambda m: (
                m.binaryData.__setitem__("b", b"\x00\x01\x02"),
                setattr(m, "immutable", False),
            ),
            {"metadata": {}, "binaryData": {"b": "AAEC"}, "immutable": False},
        ),
        # MicroTime keeps microseconds.
        (
            "k8s.io.api.coordination.v1.LeaseSpec",
            lambda m: (
                setattr(m.renewTime, "seconds", 1_700_000_000),
                setattr(m.renewTime, "nanos", 123_456_789),
            ),
            {"renewTime": "2023-11-14T22:13:20.123456Z"},
        ),
    ],
)
def test_go_json_rules(kind: str, build: Any, expected: Json) -> None:
    msg = message(kind)
    build(msg)
    convert = pw.converter(msg.DESCRIPTOR, None)
    assert convert(msg) == expected


@pytest.mark.parametrize(
    ("nanos", "text"),
    [
        (0, "0s"),
        (1, "1ns"),
        (1_500, "1.5µs"),
        (2_000_000, "2ms"),
        (1_500_000_000, "1.5s"),
        (90_000_000_000, "1m30s"),
        (3_600_000_000_000, "1h0m0s"),
        (-5_000_000_000, "-5s"),
    ],
)
def test_durations_read_as_go_prints_them(nanos: int, text: str) -> None:
    duration = message(f"{META}.Duration")
    duration.duration = nanos
    assert pw.converter(duration.DESCRIPTOR, None)(duration) == text


TREES = [
    tree_of("metadata.labels"),
    tree_of(("metadata", "labels", "app"), ("metadata", "annotations", "absent")),
    tree_of("metadata.ownerReferences.kind", "spec.replicas", "status.conditions.type"),
    tree_of("spec.template.metadata.labels", "spec.template.spec.volumes.emptyDir"),
    {OTHERS: None, "metadata": {OTHERS: None, "ownerReferences": DROP}},
]


@pytest.mark.parametrize("tree", TREES)
def test_a_tree_builds_what_cutting_the_whole_object_would(tree: Json) -> None:
    body = wrapped("apps/v1", "Deployment", deployment())
    assert pw.decode_object(body, tree) == project(pw.decode_object(body, None), tree)


def read_in_chunks(
    body: bytes,
    tree: Any,
    cuts: list[int],
    on_metadata: Callable[[Json], None] | None = None,
    prepare: Prepare | None = None,
) -> Json:
    """``body`` fed to a ListReader cut at ``cuts``."""
    reader = pw.ListReader(tree, on_metadata, prepare)
    at = 0
    for cut in [*sorted({min(c, len(body)) for c in cuts}), len(body)]:
        reader.feed(body[at:cut])
        at = cut
    return reader.result()


def pod_metadata_page(names: list[str], resource_version: str = "7", token: str = "") -> Any:
    listed = message(f"{META}.PartialObjectMetadataList")
    listed.metadata.resourceVersion = resource_version
    setattr(listed.metadata, "continue", token)
    for i, name in enumerate(names):
        item = listed.items.add()
        item.metadata.name = name
        item.metadata.generation = i  # a varint inside an item
        item.metadata.labels["config.linkerd.io/reconcile"] = "auto"
        item.metadata.labels["noise"] = "x"
    return listed


def test_the_metadata_is_told_before_the_items_are_read() -> None:
    body = wrapped(
        "meta.k8s.io/v1", "PartialObjectMetadataList", pod_metadata_page(["a", "b"], token="n")
    )
    told: list[Json] = []
    reader = pw.ListReader(None, told.append)
    first_item = body.index(b"\x0a\x01a")  # the first item's name
    reader.feed(body[:first_item])
    assert told == [{"resourceVersion": "7", "continue": "n"}]
    reader.feed(body[first_item:])
    assert len(told) == 1
    assert [i["metadata"]["name"] for i in reader.result()["items"]] == ["a", "b"]


def test_a_list_keeps_its_metadata_and_its_items_cut_to_the_tree() -> None:
    body = wrapped(
        "meta.k8s.io/v1", "PartialObjectMetadataList", pod_metadata_page(["a", "b"], token="next")
    )
    tree = mesh.running_pod_metadata.fields_read  # type: ignore[attr-defined]
    for page in (pw.decode_object(body, tree), read_in_chunks(body, tree, [5, 9, 30])):
        assert page["metadata"] == {"resourceVersion": "7", "continue": "next"}
        assert [i["metadata"] for i in page["items"]] == [
            {"name": n, "labels": {"config.linkerd.io/reconcile": "auto"}} for n in ("a", "b")
        ]
    # A PartialObjectMetadataList's items carry their TypeMeta in JSON (kept whole here).
    for whole in (pw.decode_object(body, None), read_in_chunks(body, None, [])):
        assert {(i["kind"], i["apiVersion"]) for i in whole["items"]} == {
            ("PartialObjectMetadata", "meta.k8s.io/v1")
        }
    empty = wrapped("apps/v1", "ReplicaSetList", message(f"{APPS}.ReplicaSetList"))
    assert pw.decode_object(empty, None)["items"] == []
    assert read_in_chunks(empty, None, [1, 2, 3])["items"] == []
    assert pw.ListReader(None).result() == {}  # no body at all, as for a whole read


@settings(max_examples=80, deadline=None)
@given(
    names=st.lists(st.text(min_size=1, max_size=12), max_size=6),
    resource_version=st.text(max_size=8),
    token=st.text(max_size=8),
    remaining=st.none() | st.integers(min_value=0, max_value=2**40),
    cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=12),
    trailer=st.booleans(),
)
def test_a_list_read_in_any_chunks_reads_as_the_whole_list_parsed_at_once(
    names: list[str],
    resource_version: str,
    token: str,
    remaining: int | None,
    cuts: list[int],
    trailer: bool,
) -> None:
    listed = pod_metadata_page(names, resource_version, token)
    if remaining is not None:  # a varint field beside the items
        listed.metadata.remainingItemCount = remaining
    unknown = message("k8s.io.apimachinery.pkg.runtime.Unknown")
    unknown.typeMeta.apiVersion = "meta.k8s.io/v1"
    unknown.typeMeta.kind = "PartialObjectMetadataList"
    unknown.raw = listed.SerializeToString()
    if trailer:  # the envelope's fields after the object, as the API server writes them
        unknown.contentType = "application/vnd.kubernetes.protobuf"
    body = pw.MAGIC + unknown.SerializeToString()
    whole = pw.converter(listed.DESCRIPTOR, None)(listed)
    for item in whole["items"] or []:
        item |= {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1"}
    for tree in (None, mesh.running_pod_metadata.fields_read):  # type: ignore[attr-defined]
        page = read_in_chunks(body, tree, cuts)
        assert page == pw.decode_object(body, tree)
    page = read_in_chunks(body, None, cuts)
    told: list[Json] = []
    assert read_in_chunks(body, None, cuts, told.append) == page
    # The metadata once, before the items; a list without items is read whole anyway.
    assert told == ([page["metadata"]] if names else [])
    page = read_in_chunks(body, None, cuts)
    assert page["metadata"] == whole["metadata"]
    assert page["items"] == (whole["items"] or [])
    # Each item prepared once, as read (a whole read's item, and its list's type), in order.
    for tree in (None, mesh.running_pod_metadata.fields_read):  # type: ignore[attr-defined]
        seen: list[tuple[Json, str, str]] = []
        prepared = read_in_chunks(body, tree, cuts, prepare=Recorded(seen))
        expected = pw.decode_object(body, tree)
        assert [item for item, _, _ in seen] == expected["items"]
        assert {(k, v) for _, k, v in seen} <= {("PartialObjectMetadataList", "meta.k8s.io/v1")}
        assert prepared == expected | {"items": [("kept", i) for i in range(len(names))]}


@pytest.mark.parametrize(
    "body",
    [
        wrapped("apps/v1", "Deployment", deployment()),  # an object, not a list
        wrapped("apps/v1", "ReplicaSetList", message(f"{APPS}.ReplicaSetList")),
        pw.MAGIC + b"\x12\x00",  # an object and no type
        pw.MAGIC + b"\x0a\x00",  # a type and no kind
        b'{"kind": "Status"}',
    ],
    ids=["object", "empty-list", "no-type", "no-kind", "not-protobuf"],
)
def test_what_is_not_a_list_read_as_it_comes_is_read_whole(body: bytes) -> None:
    try:
        expected: Any = pw.decode_object(body, None)
    except pw.ProtobufError as exc:
        expected = type(exc)
    for cuts in ([], [1], list(range(len(body)))):
        try:
            got: Any = read_in_chunks(body, None, cuts)
        except pw.ProtobufError as exc:
            got = type(exc)
        assert got == expected
        try:  # prepared, a whole read's list has its items prepared all the same
            got = read_in_chunks(body, None, cuts, prepare=Recorded([]))
        except pw.ProtobufError as exc:
            got = type(exc)
        assert got == expected


def test_a_list_read_whole_has_its_items_prepared() -> None:
    """The list before its type: read whole, then each item prepared with the list's type."""
    listed = pod_metadata_page(["a", "b"])
    unknown = message("k8s.io.apimachinery.pkg.runtime.Unknown")
    unknown.typeMeta.apiVersion, unknown.typeMeta.kind = "meta.k8s.io/v1", listed.DESCRIPTOR.name
    raw, type_meta = listed.SerializeToString(), unknown.typeMeta.SerializeToString()
    body = pw.MAGIC + field_of(2, raw) + field_of(1, type_meta)
    seen: list[tuple[Json, str, str]] = []
    page = read_in_chunks(body, None, [3, 10], prepare=Recorded(seen))
    assert page["items"] == [("kept", 0), ("kept", 1)]
    assert [item for item, _, _ in seen] == pw.decode_object(body, None)["items"]
    assert {(k, v) for _, k, v in seen} == {("PartialObjectMetadataList", "meta.k8s.io/v1")}


class Recorded:
    """A ``prepare`` that records what it is given and keeps ``("kept", n)``."""

    def __init__(self, seen: list[tuple[Json, str, str]]) -> None:
        self.seen = seen

    def __call__(self, item: Json, kind: str, api_version: str) -> Any:
        self.seen.append((copy.deepcopy(item), kind, api_version))
        return ("kept", len(self.seen) - 1)


def field_of(number: int, value: bytes) -> bytes:
    """A length-delimited protobuf field, its length a varint."""
    return pw_varint(number << 3 | 2) + pw_varint(len(value)) + value


def pw_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def test_an_object_before_its_type_is_read_whole() -> None:
    listed = pod_metadata_page(["a"])
    unknown = message("k8s.io.apimachinery.pkg.runtime.Unknown")
    unknown.typeMeta.apiVersion, unknown.typeMeta.kind = "meta.k8s.io/v1", listed.DESCRIPTOR.name
    raw = listed.SerializeToString()
    type_meta = unknown.typeMeta.SerializeToString()
    # Field 2 (raw) first, then field 1 (typeMeta): legal protobuf, never the server's order.
    body = (
        pw.MAGIC
        + b"\x12"
        + len(raw).to_bytes(1, "big")
        + raw
        + b"\x0a"
        + len(type_meta).to_bytes(1, "big")
        + type_meta
    )
    assert read_in_chunks(body, None, [3, 10]) == pw.decode_object(body, None)
    assert read_in_chunks(body, None, [])["items"][0]["metadata"]["name"] == "a"


def test_a_type_or_object_after_the_list_is_refused() -> None:
    body = wrapped("meta.k8s.io/v1", "PartialObjectMetadataList", pod_metadata_page(["a"]))
    for extra in (b"\x12\x00", b"\x0a\x00"):
        with pytest.raises(pw.ProtobufError, match="given twice"):
            read_in_chunks(body + extra, None, [])


def test_a_broken_item_is_named_and_a_cut_list_refused() -> None:
    listed = pod_metadata_page(["fine"])
    encoded = listed.SerializeToString() + b"\x12\x03\x0a\xff\xff"  # an item cut short
    unknown = message("k8s.io.apimachinery.pkg.runtime.Unknown")
    unknown.typeMeta.apiVersion, unknown.typeMeta.kind = (
        "meta.k8s.io/v1",
        "PartialObjectMetadataList",
    )
    unknown.raw = encoded
    body = pw.MAGIC + unknown.SerializeToString()
    for read in (lambda b: pw.decode_object(b, None), lambda b: read_in_chunks(b, None, [7])):
        with pytest.raises(
            pw.ProtobufError, match="undecodable item of a PartialObjectMetadataList"
        ):
            read(body)
    for cut in (b"\x12\x09\x0a", b"\x0b", b"\x09\x00"):  # past the end; bad wire; short
        unknown.raw = listed.SerializeToString() + cut
        body = pw.MAGIC + unknown.SerializeToString()
        with pytest.raises(pw.ProtobufError, match="protobuf list"):
            pw.decode_object(body, None)
        with pytest.raises(pw.ProtobufError, match="protobuf list"):
            read_in_chunks(body, None, [5])


def outcome(read: Any, body: bytes) -> Any:
    try:
        return read(body)
    except pw.ProtobufError:
        return pw.ProtobufError


def test_every_truncation_of_a_list_reads_as_a_whole_read_reads_it() -> None:
    """Refused, or (cut between the envelope's fields, where protobuf cannot tell) read alike."""
    body = wrapped("meta.k8s.io/v1", "PartialObjectMetadataList", pod_metadata_page(["a", "bc"]))
    refused = 0
    for end in range(1, len(body)):
        whole = outcome(lambda b: pw.decode_object(b, None), body[:end])
        cut = [end // 2]
        assert outcome(lambda b: read_in_chunks(b, None, cut), body[:end]) == whole  # noqa: B023
        refused += whole is pw.ProtobufError
    assert refused >= len(body) - 3


def test_a_page_read_as_it_comes_never_holds_the_page() -> None:
    """500 pods' metadata with their managedFields (what a page weighs), fed as a socket
    gives it: the reader's peak allocation stays a small part of the page."""
    listed = message(f"{META}.PartialObjectMetadataList")
    for i in range(500):
        meta = listed.items.add().metadata
        meta.name, meta.namespace = f"pod-{i}", "ns"
        meta.labels["config.linkerd.io/reconcile"] = "auto"
        entry = meta.managedFields.add()
        entry.manager, entry.operation = "kubectl", "Update"
        entry.fieldsV1.Raw = b"{" + b'"f:spec":{},' * 500 + b"}"
    body = wrapped("meta.k8s.io/v1", "PartialObjectMetadataList", listed)
    assert len(body) > 3_000_000
    tree = mesh.running_pod_metadata.fields_read  # type: ignore[attr-defined]
    tracemalloc.start()
    try:
        reader = pw.ListReader(tree)
        for at in range(0, len(body), 16 * 1024):
            reader.feed(body[at : at + 16 * 1024])
        page = reader.result()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(page["items"]) == 500
    assert peak < len(body) // 5, (peak, len(body))


def test_a_page_read_with_prepare_holds_what_prepare_keeps_not_the_converted_items() -> None:
    """Each converted item is dropped as soon as ``prepare`` has it: 500 items whose
    converted form is large (many labels kept) are never held together."""
    listed = message(f"{META}.PartialObjectMetadataList")
    for i in range(500):
        meta = listed.items.add().metadata
        meta.name, meta.namespace = f"pod-{i}", "ns"
        for k in range(40):
            meta.labels[f"label-{k}"] = f"value-{i}-{k}"
    body = wrapped("meta.k8s.io/v1", "PartialObjectMetadataList", listed)

    def peak_of(prepare: Prepare | None) -> int:
        tracemalloc.start()
        try:
            reader = pw.ListReader(None, None, prepare)
            for at in range(0, len(body), 16 * 1024):
                reader.feed(body[at : at + 16 * 1024])
            assert len(reader.result()["items"]) == 500
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    held = peak_of(None)
    prepared = peak_of(lambda item, kind, api_version: {"name": item["metadata"]["name"]})
    assert prepared < held // 4, (prepared, held)


def field(number: int, value: bytes) -> bytes:
    """A length-delimited protobuf field (numbers and lengths under 128)."""
    return bytes([number << 3 | 2, len(value)]) + value


def pod_list_of(item_meta: bytes) -> bytes:
    """A PartialObjectMetadataList body of one item, its ObjectMeta encoded by hand."""
    unknown = message("k8s.io.apimachinery.pkg.runtime.Unknown")
    unknown.typeMeta.apiVersion = "meta.k8s.io/v1"
    unknown.typeMeta.kind = "PartialObjectMetadataList"
    unknown.raw = field(2, field(1, item_meta))
    return pw.MAGIC + unknown.SerializeToString()


# What Go's encoding/json writes for strings that are not UTF-8 (each invalid byte a
# U+FFFD), as printed by json.Marshal (go1.26) for these bytes.
GO_STRINGS = [
    (b"a\xffb", "a\ufffdb"),
    (b"k\xe2\x82", "k\ufffd\ufffd"),
    (b"\xed\xa0\x80", "\ufffd\ufffd\ufffd"),
    (b"ok\xf0\x9f\x98", "ok\ufffd\ufffd\ufffd"),
    (b"\xc0\x80x", "\ufffd\ufffdx"),
]


@pytest.mark.parametrize(("raw", "written"), GO_STRINGS)
def test_a_string_that_is_not_utf8_reads_as_go_writes_it(raw: bytes, written: str) -> None:
    """A string stored through protobuf may be any bytes; the protobuf runtime hands those
    that are not UTF-8 over as bytes, which must never reach the cache."""
    annotation = field(1, mesh.PROXY_VERSION_ANNOTATION.encode()) + field(2, raw)
    body = pod_list_of(field(1, raw) + field(12, annotation))
    tree = mesh.running_pod_metadata.fields_read  # type: ignore[attr-defined]
    for page in (
        pw.decode_object(body, None),  # the whole map
        read_in_chunks(body, None, [9, 20]),
        read_in_chunks(body, tree, []),  # the key looked up
    ):
        (item,) = page["items"]
        assert item["metadata"]["name"] == written
        assert item["metadata"]["annotations"] == {mesh.PROXY_VERSION_ANNOTATION: written}
    # A map key cannot be read back from the runtime: refused (the API server validates
    # every key, so none is stored).
    body = pod_list_of(field(11, field(1, raw) + field(2, b"v")))
    with pytest.raises(pw.ProtobufError, match="unconvertible"):
        read_in_chunks(body, None, [])


def test_a_value_go_would_not_write_is_a_protobuf_error_read_either_way() -> None:
    """A time past year 9999, FieldsV1 that is not JSON, a kind that is not UTF-8: refused
    as undecodable (ProtobufError), never another exception, however the body is read."""
    far = message(f"{META}.PartialObjectMetadataList")
    far.items.add().metadata.creationTimestamp.seconds = 2**62
    bad_json = message(f"{META}.PartialObjectMetadataList")
    bad_json.items.add().metadata.managedFields.add().fieldsV1.Raw = b"\xff"
    type_meta = field(1, b"v1") + field(2, b"Pod\xffList")
    bodies = [
        wrapped("meta.k8s.io/v1", "PartialObjectMetadataList", far),
        wrapped("meta.k8s.io/v1", "PartialObjectMetadataList", bad_json),
        # A bad item, then a field cut short: a whole read sees the cut first.
        wrapped("meta.k8s.io/v1", "PartialObjectMetadataList", far) + b"\x22",
        pw.MAGIC + field(1, type_meta) + field(2, b""),
    ]
    for body in bodies:
        with pytest.raises(pw.ProtobufError):
            pw.decode_object(body, None)
        for cuts in ([], [3], list(range(0, len(body), 5))):
            with pytest.raises(pw.ProtobufError):
                read_in_chunks(body, None, cuts)


def test_large_and_small_envelopes_read_alike() -> None:
    d = deployment()
    d.metadata.annotations["big"] = "x" * (pw.SMALL_BODY + 10)
    big = pw.decode_object(wrapped("apps/v1", "Deployment", d), None)
    assert big["metadata"]["annotations"]["big"] == "x" * (pw.SMALL_BODY + 10)
    del big["metadata"]["annotations"]["big"]
    assert big == DEPLOYMENT_JSON


@pytest.mark.parametrize("small", [True, False], ids=["parsed-by-upb", "parsed-by-hand"])
@pytest.mark.parametrize(
    "body",
    [
        b'{"kind": "Status"}',
        pw.MAGIC + b"\x0a\xff",  # a length past the end
        pw.MAGIC + b"\x12\x00",  # raw, but no type
        pw.MAGIC + b"\x0b",  # a wire type no envelope uses
    ],
)
def test_a_broken_envelope_is_a_protobuf_error(
    body: bytes, small: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pw, "SMALL_BODY", 1 << 20 if small else 0)
    with pytest.raises(pw.ProtobufError, match="protobuf"):
        pw.decode_object(body, None)


def test_a_type_not_vendored_or_a_broken_object_is_named() -> None:
    with pytest.raises(pw.ProtobufError, match="batch/v1"):
        pw.decode_object(wrapped("batch/v1", "Job", message(f"{CORE}.ConfigMap")), None)
    unknown = message("k8s.io.apimachinery.pkg.runtime.Unknown")
    unknown.typeMeta.apiVersion, unknown.typeMeta.kind = "v1", "ConfigMap"
    unknown.raw = b"\x0a\xff\xff"
    with pytest.raises(pw.ProtobufError, match="undecodable ConfigMap"):
        pw.decode_object(pw.MAGIC + unknown.SerializeToString(), None)


# -- watch frames --------------------------------------------------------------------------


class Chunks:
    """A watch body delivered in the chunks given (then the end)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = deque(chunks)

    async def readany(self) -> bytes:
        return self.chunks.popleft() if self.chunks else b""

    def set_exception(self, exc: BaseException) -> None:
        raise exc


def cut(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@given(size=st.integers(min_value=1, max_value=200))
@settings(max_examples=40, deadline=None)
def test_frames_are_whole_however_the_body_is_cut(size: int) -> None:
    frames = [b"", b"a", b"x" * 300, b"\n\n"]
    data = b"".join(len(f).to_bytes(4, "big") + f for f in frames)

    async def read() -> list[bytes]:
        reader = FrameReader(Chunks(cut(data, size)))
        out = []
        while (frame := await reader.readline()) is not None:
            out.append(frame)
        return out

    assert asyncio.run(read()) == frames


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ((1000).to_bytes(4, "big") + b"x" * 10, "ends inside a frame"),
        ((2**31).to_bytes(4, "big"), "over"),
    ],
)
async def test_a_broken_frame_is_a_protocol_error(data: bytes, error: str) -> None:
    reader = FrameReader(Chunks([data]), max_line=1024)
    with pytest.raises(WatchProtocolError, match=error):
        await reader.readline()


async def test_a_protobuf_watch_reads_events_and_raises_410() -> None:
    pod = message(f"{META}.PartialObjectMetadata")
    pod.metadata.name = "p"
    pod.metadata.resourceVersion = "5"
    pod.metadata.annotations["linkerd.io/proxy-version"] = "v1"
    pod.metadata.annotations["noise"] = "n"
    bookmark = message(f"{META}.PartialObjectMetadata")
    bookmark.metadata.resourceVersion = "9"
    bookmark.metadata.annotations["k8s.io/initial-events-end"] = "true"
    status = message(f"{META}.Status")
    status.code, status.reason, status.message = 410, "Expired", "too old"
    data = b"".join(
        [
            framed("ADDED", wrapped("meta.k8s.io/v1", "PartialObjectMetadata", pod)),
            framed("BOOKMARK", wrapped("meta.k8s.io/v1", "PartialObjectMetadata", bookmark)),
            framed("ERROR", wrapped("v1", "Status", status)),
        ]
    )
    tree = meshed_pod_projection.fields_read  # type: ignore[attr-defined]
    stream = WatchStream(
        Chunks(cut(data, 7)),
        inactivity_timeout=5,
        framed=True,
        decode=pw.watch_event_decoder(tree),
    )
    added = await anext(stream)
    assert added.type == "ADDED"
    assert added.object["metadata"] == {"name": "p", "resourceVersion": "5", "annotations": {}}
    marker = await anext(stream)
    # A bookmark is decoded whole: its annotation ends a streaming list's initial events.
    assert marker.object["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert marker.resource_version == "9"
    with pytest.raises(GoneError, match="too old"):
        await anext(stream)


async def test_an_unknown_event_type_is_a_protocol_error() -> None:
    data = framed("SOMETHING", wrapped("v1", "ConfigMap", message(f"{CORE}.ConfigMap")))
    stream = WatchStream(
        Chunks([data]), inactivity_timeout=5, framed=True, decode=pw.watch_event_decoder(None)
    )
    with pytest.raises(WatchProtocolError, match="SOMETHING"):
        await anext(stream)


# -- the transforms read no more than they declare ----------------------------------------

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
kinds = st.sampled_from(["ReplicaSet", "StatefulSet", "DaemonSet", "Job", "Node"])
KNOWN_KEYS = [*mesh.POD_LABELS, *mesh.POD_ANNOTATIONS, "linkerd.io/trust-root-sha256"]
maps = st.dictionaries(st.one_of(st.sampled_from(KNOWN_KEYS), names), names, max_size=6)
owners = st.lists(
    st.fixed_dictionaries(
        {"kind": kinds, "name": names, "uid": names, "apiVersion": names},
        optional={"controller": st.booleans(), "blockOwnerDeletion": st.booleans()},
    ),
    max_size=3,
)
containers = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["linkerd-proxy", "app"]), "image": names},
        optional={"ports": st.just([{"containerPort": 80}])},
    ),
    max_size=3,
)
objects = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"name": names, "namespace": names, "uid": names, "resourceVersion": names},
            optional={
                "labels": maps,
                "annotations": maps,
                "ownerReferences": owners,
                "deletionTimestamp": st.just("2026-01-01T00:00:00Z"),
                "generation": st.integers(0, 9),
                "managedFields": st.just([{"manager": "kubectl"}]),
            },
        )
    },
    optional={
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "containers": containers,
                "initContainers": containers,
                "replicas": st.integers(0, 3),
                "paused": st.booleans(),
                "template": st.fixed_dictionaries(
                    {"metadata": st.fixed_dictionaries({}, optional={"annotations": maps})}
                ),
            },
        ),
        "status": st.fixed_dictionaries(
            {},
            optional={
                "phase": st.sampled_from(["Running", "Pending"]),
                "replicas": st.integers(0, 3),
            },
        ),
    },
)

TRANSFORMS = {
    "pods": mesh.running_pod_metadata,
    "pod_projection": mesh.pod_projection,
    "replicasets": mesh.replicaset_projection,
    "meshed-pods": meshed_pod_projection,
    "workloads": keep_fields(*mesh.WORKLOAD_FIELDS),
    "default": strip_managed_fields,
}


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
@given(obj=objects)
@settings(max_examples=150, deadline=None)
def test_each_transform_gives_the_same_on_what_it_declares_it_reads(name: str, obj: Json) -> None:
    transform = TRANSFORMS[name]
    tree = fields_read(transform)
    assert tree is not None, f"{name} declares nothing: a decoder would build everything"
    import copy  # noqa: PLC0415

    assert transform(project(copy.deepcopy(obj), tree)) == transform(copy.deepcopy(obj))


def test_the_converter_cache_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pw, "MAX_CONVERTERS", 8)
    monkeypatch.setattr(pw, "_CONVERTERS", {})
    body = wrapped("apps/v1", "Deployment", deployment())
    for _ in range(40):
        pw.decode_object(body, tree_of("metadata.labels"))  # a new tree each time
    assert len(pw._CONVERTERS) <= 8


def test_the_map_entries_read_from_the_descriptor_set_are_those_protobuf_names() -> None:
    pool = pw.types().pool
    every: list[Any] = []
    for symbol in (f"{META}.ObjectMeta", f"{CORE}.Pod", f"{APPS}.Deployment"):
        stack = list(pool.FindFileContainingSymbol(symbol).message_types_by_name.values())
        while stack:
            found = stack.pop()
            every.append(found)
            stack.extend(found.nested_types)
    named = {m.full_name for m in every if m.GetOptions().map_entry}
    assert f"{META}.ObjectMeta.LabelsEntry" in named
    assert {m.full_name for m in every} & pw.types().map_entries == named


def test_a_messages_shapes_are_parsed_when_first_read_and_as_the_file_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fresh = pw._Types()
    monkeypatch.setattr(pw, "types", lambda: fresh)
    monkeypatch.setattr(pw, "_CONVERTERS", {})
    assert fresh._shapes == {}
    pw.decode_object(wrapped("apps/v1", "Deployment", deployment()), tree_of("metadata.labels"))
    read = set(fresh._shapes)
    assert f"{APPS}.Deployment" in read and f"{META}.ObjectMeta" in read
    assert f"{CORE}.PodSpec" not in read  # outside the tree: never parsed
    assert len(read) < len(fresh._fields) / 10
    packed = json.loads((Path(pw.__file__).with_name("k8s_api") / "json_shapes.json").read_text())
    for name, text in packed["messages"].items():
        assert {f: list(dataclasses.astuple(s)) for f, s in fresh.fields_of(name).items()} == (
            json.loads(text)
        ), name
    assert fresh.fields_of(f"{META}.NoSuchMessage") == {}
