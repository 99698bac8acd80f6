"""Every string field of a LinkerdConfig is validated (issue 22, finding 3): control characters
and over-long values are refused, each naming the field, in both formats.

The fields are enumerated from the generated CRD schema, so a field added to the schema is
covered here at once: without an example below the test says so, and without validation it
fails. Hypothesis places the control character and picks the value.
"""

from __future__ import annotations

import copy
import unicodedata
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkerd_config.linkerd.admission.validation import validate
from linkerd_config.linkerd.formats import FieldError, VersionError, field_table, parse_version
from linkerd_config.linkerd.spec.crd import crd
from tests.support.samples import sample

Json = dict[str, Any]

# A valid value of each string field: the hostile values are built around it, so only the
# control character (or the length) makes them wrong. The configuration fields' come from the
# field table (each grammar's example); the version fields depend on the format (``base``).
EXAMPLES: dict[str, str] = {
    **{
        row.field + ("[]" if row.grammar.items else ""): str(
            (row.grammar.items or row.grammar).example
        )
        for row in field_table.FIELDS
        if row.grammar.json_type in ("string", "int-or-string")
        or (row.grammar.items is not None and row.grammar.items.json_type == "string")
    },
    "spec.global.version": "",  # per format: see ``base``
    "spec.global.identityContext.trustAnchorsPEM": "",  # the sample's own anchor
    "spec.proxy.proxyVersion": "",  # per format
    "spec.rollout.restartInterval": "30s",
    "spec.rollout.progressDeadline": "10m",
    "spec.rollout.onFailure": "Rollback",
    "spec.rollout.canary.namespaceSelector": "kubernetes.io/metadata.name in (shop,cart)",
    "spec.rollout.canary.selector": "app=web",
    "spec.rollout.canary.stableFor": "5m",
}

MULTILINE = frozenset({"spec.global.identityContext.trustAnchorsPEM"})
"""Fields whose values span lines: tab, line feed and carriage return are theirs."""


def string_fields(schema: Json, path: str = "spec") -> Iterator[tuple[str, Json]]:
    """Every field of ``schema`` that holds a string: ``(path, its schema)``; a list of
    strings as ``path[]``."""
    if schema.get("type") == "string" or schema.get("x-kubernetes-int-or-string"):
        yield path, schema
    elif schema.get("type") == "array":
        yield from string_fields(schema["items"], f"{path}[]")
    for key, child in (schema.get("properties") or {}).items():
        yield from string_fields(child, f"{path}.{key}")


VERSIONS = {v["name"]: v for v in crd()["spec"]["versions"]}
SPEC_SCHEMA = VERSIONS["v1alpha1"]["schema"]["openAPIV3Schema"]["properties"]["spec"]
V1ALPHA2_SPEC = VERSIONS["v1alpha2"]["schema"]["openAPIV3Schema"]["properties"]["spec"]
# v1alpha1's string fields, and the string fields only v1alpha2 has, at their hub paths
# (``spec.values.*``, the same as v1alpha2's): validation reads the hub.
VALUES_ONLY = {row.field for row in field_table.FIELDS if not row.in_v1alpha1}
FIELDS = dict(string_fields(SPEC_SCHEMA)) | {
    path: schema
    for path, schema in string_fields(V1ALPHA2_SPEC)
    if path.removesuffix("[]") in VALUES_ONLY
}


def base(fmt: str) -> Json:
    """A complete, valid LinkerdConfig: the edge-19.12.3 sample (legacy format), or the same
    for Linkerd edge-26.8.3 (values format; no proxy-init version, which it cannot carry)."""
    obj = copy.deepcopy(sample("edge_19.12.3.yaml"))
    obj["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    if fmt == "values":
        obj["spec"]["global"]["version"] = "edge-26.8.3"
        obj["spec"]["proxy"]["proxyVersion"] = "edge-26.8.4"
        for key in ("proxyInitImageVersion", "proxyInitImage", "omitWebhookSideEffects"):
            obj["spec"]["proxy"].pop(key, None)
        obj["spec"]["global"].pop("omitWebhookSideEffects", None)
    assert validate(obj) == [], validate(obj)
    return obj


def example(obj: Json, path: str) -> str:
    current = at(obj, path)
    if isinstance(current, str) and current:
        return current
    return EXAMPLES[path]


def at(obj: Json, path: str) -> Any:
    node: Any = obj
    for key in path.removesuffix("[]").split("."):
        node = node.get(key) if isinstance(node, dict) else None
    if path.endswith("[]"):
        return node[0] if isinstance(node, list) and node else None
    return node


def with_value(obj: Json, path: str, value: str) -> Json:
    changed = copy.deepcopy(obj)
    keys = path.removesuffix("[]").split(".")
    node = changed
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = [value] if path.endswith("[]") else value
    return changed


def named(errors: list[Any], path: str) -> bool:
    """Whether an error names ``path`` (a list's entry as ``path[0]``)."""
    wanted = path.replace("[]", "[0]")
    return any(e.field in (wanted, path.removesuffix("[]")) for e in errors)


FORMAT = st.sampled_from(
    ["\u00ad", "\u200b", "\u200d", "\u200e", "\u2028", "\u2029", "\u202e", "\u2060", "\ufeff"]
)
"""Format characters (Cf) and the line and paragraph separators: invisible, or line breaks
to YAML 1.1 readers (issue 39, finding 3)."""
CONTROL = st.characters(categories=["Cc"]) | FORMAT
NOT_LINE_CONTROL = CONTROL.filter(lambda c: c not in "\t\n\r")


def test_every_string_field_has_an_example_and_a_bound() -> None:
    """A new string field needs an example above; and a maximum length (or a closed set of
    values) in the schema, which the API server enforces and validation repeats."""
    assert set(FIELDS) == set(EXAMPLES)
    unbounded = [p for p, s in FIELDS.items() if "maxLength" not in s and "enum" not in s]
    assert unbounded == []


@pytest.mark.parametrize("fmt", ["legacy", "values"])
@pytest.mark.parametrize("path", sorted(FIELDS))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_string_field_refuses_control_and_format_characters(
    fmt: str, path: str, data: st.DataObject
) -> None:
    obj = base(fmt)
    valid = example(obj, path)
    char = data.draw(NOT_LINE_CONTROL if path in MULTILINE else CONTROL, label="control")
    where = data.draw(st.integers(0, len(valid)), label="where")
    hostile = valid[:where] + char + valid[where:]
    errors = validate(with_value(obj, path, hostile))
    assert named(errors, path), (unicodedata.name(char, hex(ord(char))), errors)


@pytest.mark.parametrize("fmt", ["legacy", "values"])
@pytest.mark.parametrize("path", sorted(FIELDS))
@settings(max_examples=10, deadline=None)
@given(extra=st.integers(1, 100))
def test_every_string_field_refuses_over_long_values(fmt: str, path: str, extra: int) -> None:
    obj = base(fmt)
    valid = example(obj, path)
    limit = FIELDS[path].get("maxLength", 64)  # an enum's longest value is far shorter
    filler = "0" if valid[-1:].isdigit() else "a"
    hostile = valid + filler * (limit - len(valid) + extra)
    errors = validate(with_value(obj, path, hostile))
    assert named(errors, path), errors


@pytest.mark.parametrize("fmt", ["legacy", "values"])
@pytest.mark.parametrize(
    "name", ["gcr.io/linkerd-io/debug\n", "gcr.io/linkerd-io/\x00debug", "a" * 200_000]
)
def test_the_debug_image_name_is_checked_like_the_proxy_image_name(fmt: str, name: str) -> None:
    """The issue's own examples: a newline, a NUL, 200 KB."""
    errors = validate(with_value(base(fmt), "spec.proxy.debugImage.name", name))
    assert named(errors, "spec.proxy.debugImage.name"), errors


@pytest.mark.parametrize("fmt", ["legacy", "values"])
@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("spec.proxy.debugImage.name", "Not An Image", "is not an image name"),
        ("spec.proxy.debugImage.pullPolicy", "Sometimes", "must be one of Always, IfNotPresent"),
        ("spec.proxy.debugImageVersion", "no tag!", "is not an image tag"),
        ("spec.proxy.destinationGetNetworks", "10.0.0.0/8,10.0.0.0/33", "network 2, '10.0.0.0/33'"),
        ("spec.proxy.destinationGetNetworks", "10.0.0.0/8,,", "network 2, ''"),
        # Python's str.strip() removes U+2028 (Go's net.ParseCIDR would not): refused, as
        # the line separator it is to YAML 1.1 readers.
        ("spec.proxy.destinationGetNetworks", "10.0.0.0/8,fd00::/8\u2028", "U+2028"),
        ("spec.rollout.onFailure", "Retry", "must be one of Halt, Rollback"),
        ("spec.rollout.canary.selector", "app=web!", "is not a label value"),
        ("spec.rollout.canary.namespaceSelector", "env in ()", "in needs at least one value"),
        ("spec.rollout.canary.stableFor", "0s", "must be a positive duration"),
        ("spec.rollout.canary.stableFor", "169h", "is longer than 168h"),
        ("spec.proxy.logFormat", "xml", "must be one of plain, json"),
        ("spec.global.identityContext.scheme", "spiffe", "must be one of linkerd.io/tls"),
        ("spec.proxy.outboundConnectTimeout", "soon", "is not a duration"),
        ("spec.proxy.inboundConnectTimeout", "0s", "must be a positive duration"),
        ("spec.global.version", "stable-1234567890.0.0", "is not a Linkerd version"),
    ],
)
def test_each_grammar_refuses_what_it_does_not_describe(
    fmt: str, path: str, value: str, message: str
) -> None:
    errors = validate(with_value(base(fmt), path, value))
    assert [e.field for e in errors if message in e.message] == [path], errors


@pytest.mark.parametrize("fmt", ["legacy", "values"])
def test_a_version_of_five_thousand_digits_is_an_answer_not_a_crash(fmt: str) -> None:
    """Python refuses int() of more than 4300 digits with a ValueError, which validation
    (and the webhook) would not have caught: a version's numbers are at most nine digits."""
    huge = "stable-" + "1" * 5000 + ".0.0"
    with pytest.raises(VersionError):
        parse_version(huge)
    errors = validate(with_value(base(fmt), "spec.global.version", huge))
    assert FieldError("spec.global.version", "is longer than 64 characters") in errors


ENV_NAMES_REFUSED = [
    "A\nB", "A\x00B", "A\tB", "A\u2028B", "\ufeffA", "{{ .Values.x }}", "1ABC", "A=B", "A B",
    "\u00e9t\u00e9", "",
]  # fmt: skip
ENV_NAMES_ADMITTED = ["FOO", "foo_bar", "_X", "A.B-1", "-dash", "LINKERD2_PROXY_LOG"]


@pytest.mark.parametrize("field", ["additionalEnv", "experimentalEnv"])
@pytest.mark.parametrize("name", ENV_NAMES_REFUSED)
def test_an_env_var_name_kubernetes_refuses_is_refused(field: str, name: str) -> None:
    """Issue 39, finding 3: admitted, every injected pod would be refused (Kubernetes'
    ``IsEnvVarName``); the error names the entry."""
    obj = base("values")  # a values-only field: at its hub path, spec.values.*
    proxy = obj["spec"].setdefault("values", {}).setdefault("proxy", {})
    proxy[field] = [{"name": "OK", "value": "1"}, {"name": name, "value": "x"}]
    errors = validate(obj)
    assert [e.field for e in errors] == [f"spec.values.proxy.{field}[1]"], errors


@pytest.mark.parametrize("field", ["additionalEnv", "experimentalEnv"])
def test_env_var_names_kubernetes_admits_are_admitted(field: str) -> None:
    obj = base("values")
    proxy = obj["spec"].setdefault("values", {}).setdefault("proxy", {})
    proxy[field] = [{"name": n, "value": "x"} for n in ENV_NAMES_ADMITTED]
    assert validate(obj) == []


FREE_FORM_REFUSED = [
    ({"server": {"http2": {"keepAliveInterval": "10s\x00"}}}, "U+0000"),
    ({"server": {"http2": {"keepAliveInterval": "10\u2028s"}}}, "U+2028"),
    ({"server": {"http2": {"keepAliveInterval": "\ufeff10s"}}}, "U+FEFF"),
    ({"server": {"http2\n": {"keepAliveInterval": "10s"}}}, "key 'server.http2\\n'"),
    ({"server": {"http2": {"keepAliveIntervals": ["10s", "1\x7fs"]}}}, "U+007F"),
]


@pytest.mark.parametrize(("inbound", "says"), FREE_FORM_REFUSED)
def test_a_free_form_field_refuses_control_and_format_characters(inbound: Json, says: str) -> None:
    """Issue 61, finding 6: ``proxy.inbound`` (its leaves become the proxy's environment)
    admitted NUL, U+2028, a BOM and a key with a newline; every key and string of a
    free-form object is checked as every other string field is."""
    obj = base("values")
    obj["spec"].setdefault("values", {}).setdefault("proxy", {})["inbound"] = inbound
    errors = validate(obj)
    assert [e.field for e in errors] == ["spec.values.proxy.inbound"], errors
    assert says in errors[0].message, errors


def test_a_free_form_field_keeps_a_multi_line_string_and_plain_keys() -> None:
    obj = base("values")
    proxy = obj["spec"].setdefault("values", {}).setdefault("proxy", {})
    proxy["inbound"] = {"server": {"http2": {"keepAliveInterval": "10s"}}}
    proxy["tracing"] = {"labels": {"note": "line one\nline two"}}  # multi-line: a value's
    assert validate(obj) == []
