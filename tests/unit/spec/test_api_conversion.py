"""LinkerdConfig v1alpha1 <-> v1alpha2 conversion (linkerd/conversion.py) and the
ConversionReview plumbing that serves it (kube/conversion_review.py), without an API server
(tests/integration/test_conversion.py does the same through one)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from linkerd_config.cli import main
from linkerd_config.kube.conversion_review import (
    BadConversionReview,
    ConversionRequest,
    answer_conversion,
    parse_conversion_review,
)
from linkerd_config.linkerd.admission.validation import validate
from linkerd_config.linkerd.admission.webhooks import convert_object
from linkerd_config.linkerd.formats.field_table import FIELDS, ConfigField
from linkerd_config.linkerd.spec.conversion import (
    GROUP,
    MAX_ANNOTATIONS_BYTES,
    OMITTED_ANNOTATION,
    OMITTED_ANNOTATION_FIELD,
    V1ALPHA1,
    V1ALPHA2,
    VALUES_ANNOTATION,
    TooDeepError,
    ValuesOmittedError,
    convert,
    served_field,
    served_text,
    to_hub,
    version_of,
)
from tests.support.samples import SAMPLES, load

Json = dict[str, Any]
VALID_SAMPLES = sorted(SAMPLES.glob("*.yaml"))
INVALID_SAMPLES = sorted((SAMPLES / "invalid").glob("*.yaml"))


def v1(spec: Json, annotations: dict[str, str] | None = None) -> Json:
    metadata: Json = {"name": "x"}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": f"{GROUP}/{V1ALPHA1}",
        "kind": "LinkerdConfig",
        "metadata": metadata,
        "spec": spec,
    }


def v2(spec: Json) -> Json:
    return {
        "apiVersion": f"{GROUP}/{V1ALPHA2}",
        "kind": "LinkerdConfig",
        "metadata": {"name": "x"},
        "spec": spec,
    }


@pytest.mark.parametrize("path", VALID_SAMPLES + INVALID_SAMPLES, ids=lambda p: p.name)
def test_every_sample_round_trips_unchanged(path: Path) -> None:
    """Valid or not: conversion renames, validation judges (an invalid sample must reach the
    webhook as it was written, to be refused naming its field)."""
    obj = load(path)
    up = convert(obj, V1ALPHA2)
    assert up["apiVersion"] == f"{GROUP}/{V1ALPHA2}"
    assert convert(up, V1ALPHA1) == obj


# (v1alpha1 spec, v1alpha2 spec): each direction, exactly.
RENAMED = [
    pytest.param(
        {"proxy": {"proxyImage": {"name": "ghcr.io/l/proxy"}, "proxyVersion": "edge-26.8.3"}},
        {"values": {"proxy": {"image": {"name": "ghcr.io/l/proxy", "version": "edge-26.8.3"}}}},
        id="renamed",
    ),
    pytest.param(
        {"proxy": {"ignoreInboundPorts": ["25", "4567-4570"]}},
        {"values": {"proxyInit": {"ignoreInboundPorts": "25,4567-4570"}}},
        id="ports-list-to-linkerds-string",
    ),
    pytest.param(
        {"proxy": {"disableExternalProfiles": True}},
        {"values": {"proxy": {"enableExternalProfiles": False}}},
        id="inverted-sense",
    ),
    pytest.param(
        {"global": {"linkerdNamespace": "mesh", "configMap": "cfg"}},
        {"linkerdNamespace": "mesh", "configMap": "cfg"},
        id="where-it-goes-at-the-top",
    ),
    pytest.param(
        {"proxy": {"adminPort": 4191}, "rollout": {"paused": True}},
        {"values": {"proxy": {"ports": {"admin": 4191}}}, "rollout": {"paused": True}},
        id="rollout-unchanged",
    ),
]


@pytest.mark.parametrize(("old", "new"), RENAMED)
def test_conversion_renames(old: Json, new: Json) -> None:
    assert convert(v1(old), V1ALPHA2)["spec"] == new
    assert convert(v2(new), V1ALPHA1)["spec"] == old


def test_values_v1alpha1_has_no_home_for_travel_in_the_annotation() -> None:
    up = v2({"values": {"proxy": {"nativeSidecar": True, "logLevel": "info"}}})
    down = convert(up, V1ALPHA1)
    assert down["spec"] == {"proxy": {"logLevel": "info"}}
    annotation = down["metadata"]["annotations"][VALUES_ANNOTATION]
    assert orjson.loads(annotation) == {"proxy": {"nativeSidecar": True}}
    back = convert(down, V1ALPHA2)
    assert back == up
    assert VALUES_ANNOTATION not in (back["metadata"].get("annotations") or {})


def test_values_too_large_for_v1alpha1_are_said_not_carried_and_not_lost() -> None:
    """Issue 61, finding 5: one v1alpha2 object of 1.37 MB broke every v1alpha1 GET and LIST
    (500: its annotation over the API server's 256 KiB). Over the bound, the v1alpha1 form
    says how large the values are instead; written back as v1alpha1 it is refused, by the
    conversion and by validation, naming the annotation: the values are not lost."""
    big = {"proxy": {"inbound": {"server": {f"k{i}": "x" * 1000 for i in range(300)}}}}
    up = v2({"values": big})
    up["metadata"]["annotations"] = {"team": "mesh"}
    down = convert(up, V1ALPHA1)
    annotations = down["metadata"]["annotations"]
    assert VALUES_ANNOTATION not in annotations and annotations["team"] == "mesh"
    assert "read and write this LinkerdConfig as" in annotations[OMITTED_ANNOTATION]
    assert sum(len(k) + len(v.encode()) for k, v in annotations.items()) <= MAX_ANNOTATIONS_BYTES
    with pytest.raises(ValuesOmittedError, match=OMITTED_ANNOTATION):
        convert(down, V1ALPHA2)
    (error,) = validate(down)
    assert error.field == OMITTED_ANNOTATION_FIELD and "would be lost" in error.message
    # Within the bound, carried as before; and a smaller one put back drops the notice.
    small = convert(v2({"values": {"proxy": {"nativeSidecar": True}}}), V1ALPHA1)
    assert OMITTED_ANNOTATION not in small["metadata"]["annotations"]
    edited = {**down, "metadata": {**down["metadata"], "annotations": {
        **annotations, VALUES_ANNOTATION: '{"proxy": {"nativeSidecar": true}}'}}}  # fmt: skip
    assert convert(edited, V1ALPHA2)["spec"]["values"] == {"proxy": {"nativeSidecar": True}}


def test_other_annotations_survive_and_an_unneeded_annotation_is_not_added() -> None:
    old = v1({"proxy": {"logLevel": "info"}}, {"team": "mesh"})
    up = convert(old, V1ALPHA2)
    assert up["metadata"]["annotations"] == {"team": "mesh"}
    assert convert(up, V1ALPHA1) == old


def test_the_hub_is_v1alpha1_plus_values() -> None:
    hub = to_hub(v2({"values": {"proxy": {"nativeSidecar": True, "logLevel": "info"}}}))
    assert hub["apiVersion"] == f"{GROUP}/{V1ALPHA1}"
    assert hub["spec"] == {
        "proxy": {"logLevel": "info"},
        "values": {"proxy": {"nativeSidecar": True}},
    }
    annotated = v1({}, {VALUES_ANNOTATION: '{"proxy": {"await": false}}'})
    assert to_hub(annotated)["spec"] == {"values": {"proxy": {"await": False}}}
    assert VALUES_ANNOTATION not in to_hub(annotated)["metadata"].get("annotations", {})


def stating(rows: Sequence[ConfigField]) -> Json:
    """A v1alpha2 spec stating each of ``rows``, with its example."""
    spec: Json = {}
    for row in rows:
        node = spec
        for key in row.v1alpha2_path[:-1]:
            node = node.setdefault(key, {})
        node[row.v1alpha2_path[-1]] = row.v1alpha2_grammar.example
    return spec


def test_every_row_round_trips_from_v1alpha2() -> None:
    obj = v2(stating(FIELDS))
    down = convert(obj, V1ALPHA1)
    assert convert(down, V1ALPHA2) == obj
    assert len(FIELDS) > 100  # every row, not a handful


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_subset_of_rows_round_trips_both_ways(data: st.DataObject) -> None:
    rows = data.draw(st.lists(st.sampled_from(FIELDS), unique_by=lambda r: r.path))
    obj = v2(stating(rows))
    assert convert(convert(obj, V1ALPHA1), V1ALPHA2) == obj
    old = convert(obj, V1ALPHA1)
    assert convert(convert(old, V1ALPHA2), V1ALPHA1) == old


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=20,
)
NAMES = st.sampled_from(
    ["global", "proxy", "values", "rollout", "linkerdNamespace", "configMap", "proxyInit", "x"]
)
SPECS = st.recursive(JSON, lambda inner: st.dictionaries(NAMES, inner, max_size=4), max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(
    spec=SPECS,
    api_version=st.sampled_from([f"{GROUP}/{V1ALPHA1}", f"{GROUP}/{V1ALPHA2}", None, 7]),
    annotation=st.none() | st.text(max_size=20) | JSON.map(lambda j: orjson.dumps(j).decode()),
    to=st.sampled_from([V1ALPHA1, V1ALPHA2]),
)
def test_conversion_is_total(spec: Any, api_version: Any, annotation: Any, to: str) -> None:
    """Whatever is stored, a read never fails for conversion's sake (validation, not
    conversion, says what is wrong), and the input is never changed."""
    obj: Json = {"kind": "LinkerdConfig", "metadata": {"name": "x"}, "spec": spec}
    if api_version is not None:
        obj["apiVersion"] = api_version
    if annotation is not None:
        obj["metadata"]["annotations"] = {VALUES_ANNOTATION: annotation}
    before = copy.deepcopy(obj)
    out = convert(obj, to)
    assert out["apiVersion"] == f"{GROUP}/{to}"
    assert obj == before
    to_hub(obj)
    assert obj == before


@pytest.mark.parametrize(
    ("obj", "version"),
    [
        ({"apiVersion": f"{GROUP}/{V1ALPHA2}"}, V1ALPHA2),
        ({"apiVersion": f"{GROUP}/{V1ALPHA1}"}, V1ALPHA1),
        ({}, V1ALPHA1),  # plan -f of a file without one: the only version there was
        ({"apiVersion": "other.io/v1alpha2"}, V1ALPHA1),
        ({"apiVersion": ["x"]}, V1ALPHA1),
    ],
)
def test_version_of(obj: Json, version: str) -> None:
    assert version_of(obj) == version


@pytest.mark.parametrize(
    ("field", "version", "served"),
    [
        ("spec.proxy.adminPort", V1ALPHA2, "spec.values.proxy.ports.admin"),
        (
            "spec.proxy.ignoreInboundPorts[1]",
            V1ALPHA2,
            "spec.values.proxyInit.ignoreInboundPorts[1]",
        ),
        ("spec.global.version", V1ALPHA2, "spec.values.linkerdVersion"),
        ("spec.global.linkerdNamespace", V1ALPHA2, "spec.linkerdNamespace"),
        ("spec.proxy.proxyImage", V1ALPHA2, "spec.values.proxy.image"),
        ("spec.values.proxy.nativeSidecar", V1ALPHA2, "spec.values.proxy.nativeSidecar"),
        ("spec.rollout.paused", V1ALPHA2, "spec.rollout.paused"),
        ("spec.proxy.adminPort", V1ALPHA1, "spec.proxy.adminPort"),
        ("metadata.name", V1ALPHA2, "metadata.name"),
    ],
)
def test_served_field(field: str, version: str, served: str) -> None:
    assert served_field(field, version) == served


def test_served_text_renames_every_field_a_message_mentions() -> None:
    text = (
        "must be edge-20.10.2 or later (the Linkerd version when spec.global.version is not "
        "set); see spec.proxy.proxyVersion."
    )
    assert served_text(text, V1ALPHA2) == (
        "must be edge-20.10.2 or later (the Linkerd version when spec.values.linkerdVersion "
        "is not set); see spec.values.proxy.image.version."
    )
    assert served_text(text, V1ALPHA1) == text
    assert served_text("nothing to rename", V1ALPHA2) == "nothing to rename"
    renamed = served_text(text, V1ALPHA2)
    assert served_text(renamed, V1ALPHA2) == renamed  # idempotent: status may be mapped twice


def review(objects: list[Json], desired: str = f"{GROUP}/{V1ALPHA2}") -> bytes:
    return orjson.dumps(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "ConversionReview",
            "request": {"uid": "u-1", "desiredAPIVersion": desired, "objects": objects},
        }
    )


def test_a_review_is_answered_in_order_with_its_uid() -> None:
    objects = [v1({"proxy": {"logLevel": "info"}}), v1({"global": {"cniEnabled": True}})]
    answer = answer_conversion(parse_conversion_review(review(objects)), convert_object)
    response = answer["response"]
    assert response["uid"] == "u-1"
    assert response["result"] == {"status": "Success"}
    assert {o["apiVersion"] for o in response["convertedObjects"]} == {f"{GROUP}/{V1ALPHA2}"}
    assert [o["spec"] for o in response["convertedObjects"]] == [
        {"values": {"proxy": {"logLevel": "info"}}},
        {"values": {"cniEnabled": True}},
    ]


def test_a_version_not_served_is_a_failure() -> None:
    request = parse_conversion_review(review([v1({})], desired=f"{GROUP}/v1"))
    result = answer_conversion(request, convert_object)["response"]["result"]
    assert result["status"] == "Failure"
    assert "config.linkerd.io/v1 is not a served version of LinkerdConfig" in result["message"]


def test_a_converter_that_raises_is_a_failure_naming_the_object() -> None:
    def broken(obj: Json, version: str) -> Json:
        raise RuntimeError("boom")

    request = ConversionRequest("u-2", f"{GROUP}/{V1ALPHA2}", [v1({})])
    response = answer_conversion(request, broken)["response"]
    assert response["convertedObjects"] == []
    assert response["result"]["status"] == "Failure"
    assert "LinkerdConfig x" in response["result"]["message"]
    assert "boom" in response["result"]["message"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"{", "not JSON"),
        (b"[]", "not a ConversionReview"),
        (b'{"kind": "ConversionReview", "apiVersion": "v1"}', "apiextensions.k8s.io/v1"),
        (
            b'{"kind": "ConversionReview", "apiVersion": "apiextensions.k8s.io/v1"}',
            "no request",
        ),
        (review([], desired="v1alpha2"), "group/version"),
        (
            orjson.dumps(
                {
                    "kind": "ConversionReview",
                    "apiVersion": "apiextensions.k8s.io/v1",
                    "request": {"uid": "u", "desiredAPIVersion": "a/b", "objects": [1]},
                }
            ),
            "list of objects",
        ),
    ],
)
def test_a_bad_review_is_refused_saying_why(body: bytes, says: str) -> None:
    with pytest.raises(BadConversionReview, match=says):
        parse_conversion_review(body)


@pytest.mark.parametrize("path", VALID_SAMPLES, ids=lambda p: p.name)
def test_the_convert_command_converts_as_the_webhook_does(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``linkerd-config convert``: for a cluster that cannot call the webhook (webhooks off),
    where only v1alpha2 can be written."""
    assert main(["convert", "-f", str(path)]) == 0
    up = yaml.safe_load(capsys.readouterr().out)
    assert up == convert(load(path), V1ALPHA2)
    converted = tmp_path / "v1alpha2.yaml"
    converted.write_text(yaml.safe_dump(up))
    assert main(["convert", "-f", str(converted), "--to", "v1alpha1"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == load(path)


def test_the_convert_command_refuses_what_is_not_one_linkerdconfig(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    two = tmp_path / "two.yaml"
    text = (VALID_SAMPLES[0]).read_text()
    two.write_text(text + "\n---\n" + text)
    assert main(["convert", "-f", str(two)]) == 1
    err = capsys.readouterr().err
    assert "holds 2 LinkerdConfig object(s)" in err and "convert takes exactly one" in err


def nested(depth: int) -> Json:
    node: Json = {}
    for _ in range(depth):
        node = {"a": node}
    return node


@pytest.mark.parametrize("depth", [61, 500, 5000])  # 61 + spec.values.proxy.inbound > 64
def test_a_spec_nested_beyond_the_bound_is_refused_with_a_message_not_a_recursion_error(
    depth: int,
) -> None:
    """Only an object stored with the webhooks off can be this deep (``proxy.inbound`` keeps
    unknown fields); converting it must answer, not exhaust the stack."""
    deep = v2({"values": {"proxy": {"inbound": nested(depth)}}})
    request = ConversionRequest("u-3", f"{GROUP}/{V1ALPHA1}", [deep])
    result = answer_conversion(request, convert_object)["response"]["result"]
    assert result["status"] == "Failure"
    assert "spec is nested more than 64 levels deep" in result["message"]


def test_a_deep_annotation_is_refused_too_and_a_shallow_one_converts() -> None:
    deep = v1({}, {VALUES_ANNOTATION: orjson.dumps(nested(100)).decode()})
    with pytest.raises(TooDeepError, match=f"the annotation {VALUES_ANNOTATION} is nested"):
        convert(deep, V1ALPHA2)
    shallow = v1({}, {VALUES_ANNOTATION: orjson.dumps(nested(20)).decode()})
    assert convert(shallow, V1ALPHA2)["spec"] == {"values": nested(20)}
    within = v2({"values": {"proxy": {"inbound": nested(55)}}})
    assert convert(convert(within, V1ALPHA1), V1ALPHA2) == within


def test_the_v1alpha2_sample_is_the_seed_converted() -> None:
    """manifests/samples/v1alpha2/ is written by make generate; stale, this fails."""
    root = Path(__file__).resolve().parents[3]
    written = yaml.safe_load((root / "manifests/samples/v1alpha2/edge_19.12.3.yaml").read_text())
    assert written == convert(load(SAMPLES / "edge_19.12.3.yaml"), V1ALPHA2)


def test_in_v1alpha1_the_annotation_says_the_values_the_object_has() -> None:
    """A v1alpha2 object's own copy of the annotation (refused by validation, read by
    nothing) is not shown in v1alpha1 as values it does not have; values it has are."""
    stray = v2({"values": {"proxy": {"logLevel": "info"}}})
    stray["metadata"]["annotations"] = {VALUES_ANNOTATION: '{"proxy": {"await": false}}'}
    assert "annotations" not in convert(stray, V1ALPHA1)["metadata"]
    stray["spec"]["values"]["proxy"]["nativeSidecar"] = True
    annotations = convert(stray, V1ALPHA1)["metadata"]["annotations"]
    assert orjson.loads(annotations[VALUES_ANNOTATION]) == {"proxy": {"nativeSidecar": True}}


def test_the_hub_in_v1alpha1_carries_its_values_in_the_annotation() -> None:
    """The hub's apiVersion is v1alpha1's, its spec.values is not: ``convert`` to v1alpha1
    moves them (the mutating webhook's patch, built from the hub, added /spec/values, a
    field v1alpha1 does not have)."""
    hub = to_hub(v2({"values": {"proxy": {"nativeSidecar": True, "logLevel": "info"}}}))
    down = convert(hub, V1ALPHA1)
    assert down["spec"] == {"proxy": {"logLevel": "info"}}
    assert orjson.loads(down["metadata"]["annotations"][VALUES_ANNOTATION]) == {
        "proxy": {"nativeSidecar": True}
    }


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"apiVersion": f"{GROUP}/v9"}, "apiVersion 'config.linkerd.io/v9' is not a served"),
        ({"apiVersion": "apps/v1", "kind": "Deployment"}, "apiVersion 'apps/v1' is not a served"),
        ({"apiVersion": None}, "apiVersion None is not a served"),
        ({"kind": "Other"}, "kind 'Other' is not LinkerdConfig"),
        (
            {"metadata": "x", "spec": {"values": {"proxy": {"nativeSidecar": True}}}},
            "metadata is not an object",
        ),
    ],
)
def test_an_object_conversion_cannot_read_as_served_is_a_failure_not_a_success(
    changes: Json, says: str
) -> None:
    """An older webhook (a rollback) handed objects of a newer stored version copied their
    spec under the new version's name and said Success; a v1alpha2-only value with nowhere
    to go was dropped."""
    obj = {**v2({"values": {"proxy": {"logLevel": "info"}}}), **changes}
    request = ConversionRequest("u-3", f"{GROUP}/{V1ALPHA1}", [v1({}), obj])
    response = answer_conversion(request, convert_object)["response"]
    assert response["convertedObjects"] == []
    assert response["result"]["status"] == "Failure"
    assert says in response["result"]["message"]
