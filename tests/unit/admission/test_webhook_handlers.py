"""The webhook handlers as plain functions, the configurations they are registered with, and
the checked-in manifests being what the generator produces."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from linkerd_config.kube.admission import AdmissionRequest, AdmissionResponse, render_review
from linkerd_config.linkerd.admission.defaults import defaulted
from linkerd_config.linkerd.admission.webhooks import (
    CERTIFICATE_ANNOTATION,
    MUTATE_PATH,
    SERVICE,
    VALIDATE_PATH,
    main,
    mutate,
    validator,
    webhook_configurations,
    webhooks_yaml,
)
from linkerd_config.linkerd.spec.conversion import MAX_DEPTH, VALUES_ANNOTATION
from tests.support.samples import INVALID, SAMPLES, load, sample

Json = dict[str, Any]
MANIFESTS = Path(__file__).resolve().parents[3] / "manifests" / "webhook"


def review(obj: Any, old: Json | None = None, operation: str = "CREATE") -> AdmissionRequest:
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    name = metadata.get("name", "") if isinstance(metadata, dict) else ""
    return AdmissionRequest(
        uid="u-1",
        operation=operation,
        kind={"group": "config.linkerd.io", "version": "v1alpha1", "kind": "LinkerdConfig"},
        namespace="",
        name=name,
        object=obj,
        old_object=old,
        dry_run=False,
        user="test",
        raw={},
    )


def cache(*configs: Json) -> Any:
    return SimpleNamespace(configs=SimpleNamespace(store=SimpleNamespace(list=lambda: configs)))


# -- manifests -------------------------------------------------------------------------------------


def test_checked_in_webhooks_are_current() -> None:
    expected = webhooks_yaml()
    assert (MANIFESTS / "webhooks.yaml").read_text() == expected, (
        "run `python -m linkerd_config.linkerd.admission.webhooks`"
        " > manifests/webhook/webhooks.yaml"
    )


def test_entry_point_prints_the_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert capsys.readouterr().out == webhooks_yaml()


def test_entry_point_for_a_local_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ca.pem").write_bytes(b"PEM")
    assert (
        main(["--url-base", "https://127.0.0.1:9443", "--ca-file", str(tmp_path / "ca.pem")]) == 0
    )
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    client = documents[0]["webhooks"][0]["clientConfig"]
    assert client == {"url": f"https://127.0.0.1:9443{MUTATE_PATH}", "caBundle": "UEVN"}


def test_kustomization_and_certificate_line_up_with_the_webhooks() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["webhooks.yaml"]
    # The certificate is the cert-manager component's (optional: see manifests/own-certs).
    component = MANIFESTS.parent / "components" / "cert-manager"
    assert yaml.safe_load((component / "kustomization.yaml").read_text())["resources"] == [
        "certificate.yaml"
    ]
    issuer, certificate = yaml.safe_load_all((component / "certificate.yaml").read_text())
    assert issuer["kind"] == "Issuer" and "selfSigned" in issuer["spec"]
    assert certificate["kind"] == "Certificate"
    assert certificate["spec"]["issuerRef"] == {
        "name": issuer["metadata"]["name"],
        "kind": "Issuer",
    }
    assert certificate["spec"]["secretName"] == "linkerd-config-webhook-cert"
    namespace, service = SERVICE
    assert certificate["spec"]["dnsNames"] == [
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]
    injected = f"{certificate['metadata']['namespace']}/{certificate['metadata']['name']}"
    for configuration in yaml.safe_load_all((MANIFESTS / "webhooks.yaml").read_text()):
        assert configuration["metadata"]["annotations"] == {CERTIFICATE_ANNOTATION: injected}


# -- configurations --------------------------------------------------------------------------------


def test_configurations_for_a_local_server() -> None:
    mutating, validating = webhook_configurations(b"CA", url_base="https://127.0.0.1:8443/")
    assert (mutating["kind"], mutating["metadata"]["name"]) == (
        "MutatingWebhookConfiguration",
        "linkerd-config-mutating",
    )
    assert (validating["kind"], validating["metadata"]["name"]) == (
        "ValidatingWebhookConfiguration",
        "linkerd-config-validating",
    )
    for configuration, name, path in (
        (mutating, "mlinkerdconfig.config.linkerd.io", MUTATE_PATH),
        (validating, "vlinkerdconfig.config.linkerd.io", VALIDATE_PATH),
    ):
        (webhook,) = configuration["webhooks"]
        assert webhook["name"] == name
        assert webhook["clientConfig"] == {
            "url": f"https://127.0.0.1:8443{path}",
            "caBundle": base64.b64encode(b"CA").decode(),
        }
        assert webhook["rules"] == [
            {
                "apiGroups": ["config.linkerd.io"],
                "apiVersions": ["v1alpha1", "v1alpha2"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["linkerdconfigs"],
                "scope": "Cluster",
            }
        ]
        assert webhook["sideEffects"] == "None"
        assert webhook["admissionReviewVersions"] == ["v1"]
        assert webhook["failurePolicy"] == "Fail"
        assert webhook["timeoutSeconds"] == 10
        assert webhook["matchPolicy"] == "Equivalent"
        assert "annotations" not in configuration["metadata"]
    assert MUTATE_PATH == "/mutate-config-linkerd-io-v1alpha1-linkerdconfig"
    assert VALIDATE_PATH == "/validate-config-linkerd-io-v1alpha1-linkerdconfig"


def test_configurations_for_a_service() -> None:
    for configuration in webhook_configurations(service=("linkerd", "linkerd-config-webhook")):
        client = configuration["webhooks"][0]["clientConfig"]
        assert client["service"]["namespace"] == "linkerd"
        assert client["service"]["name"] == "linkerd-config-webhook"
        assert client["service"]["port"] == 443
        assert "caBundle" not in client
        assert configuration["metadata"]["annotations"] == {
            CERTIFICATE_ANNOTATION: "linkerd/linkerd-config-serving-cert"
        }


def test_exactly_one_destination() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        webhook_configurations(b"CA")
    with pytest.raises(ValueError, match="exactly one"):
        webhook_configurations(b"CA", url_base="https://x", service=SERVICE)


# -- handlers --------------------------------------------------------------------------------------


def test_mutate_patches_the_minimal_sample_and_nothing_else() -> None:
    minimal = sample("edge_19.12.3_use_webhook_defaults.yaml")
    answer = mutate(review(minimal))
    assert answer.allowed and answer.patch
    assert all(op["path"].startswith("/spec/") for op in answer.patch)
    complete = copy.deepcopy(minimal)
    complete["spec"] = defaulted(minimal["spec"])
    assert mutate(review(complete, operation="UPDATE")) == AdmissionResponse()


def test_mutate_never_adds_spec_values_to_a_v1alpha1_object_with_the_annotation() -> None:
    """Its patch was built in the hub's form, whose apiVersion is v1alpha1's: every
    admission of a v1alpha1 object carrying the values annotation added /spec/values, a
    field v1alpha1 does not have. A complete one is not patched at all."""
    obj = sample("edge_19.12.3.yaml")
    obj["spec"] = defaulted(obj["spec"])
    obj["metadata"].setdefault("annotations", {})[VALUES_ANNOTATION] = (
        '{"proxy":{"nativeSidecar":true}}'
    )
    assert mutate(review(obj)) == AdmissionResponse()
    del obj["spec"]["proxy"]
    patch = mutate(review(obj)).patch
    assert patch and all(not op["path"].startswith("/spec/values") for op in patch)


@pytest.mark.parametrize(
    "obj",
    [None, {}, {"spec": None}, {"spec": "x"}, {"spec": {"global": [1]}}, {"spec": {"proxy": 1}}],
)
def test_mutate_lets_malformed_specs_through_unpatched(obj: Any) -> None:
    assert mutate(review(obj)) == AdmissionResponse()


def test_mutate_lets_a_too_deep_values_annotation_through_for_the_validator_to_name() -> None:
    """The annotation's values nested past conversion's bound: the mutating webhook answered
    500 ("internal error in admission"); it lets the object through unpatched, and the
    validating webhook refuses it with a 422 naming the annotation."""
    deep: Any = "x"
    for _ in range(MAX_DEPTH + 2):
        deep = {"a": deep}
    obj = sample("edge_19.12.3.yaml")
    obj["metadata"].setdefault("annotations", {})[VALUES_ANNOTATION] = orjson.dumps(
        {"proxy": deep}
    ).decode()
    assert mutate(review(obj)) == AdmissionResponse()
    denied = validator(cache())(review(obj))
    assert not denied.allowed and denied.code == 422
    assert VALUES_ANNOTATION in denied.message


def test_validate_accepts_the_full_sample() -> None:
    assert validator(cache())(review(sample("edge_19.12.3.yaml"))) == AdmissionResponse()


def test_validate_warns_when_the_anchor_is_absent() -> None:
    obj = sample("edge_19.12.3.yaml")
    del obj["spec"]["global"]["identityContext"]["trustAnchorsPEM"]
    answer = validator(cache())(review(obj))
    assert answer.allowed
    assert len(answer.warnings) == 1 and "trustAnchorsPEM is not set" in answer.warnings[0]


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_validate_denies_invalid_samples_with_422_naming_the_object(path: Path) -> None:
    obj = load(path)
    answer = validator(cache())(review(obj))
    assert not answer.allowed
    assert answer.code == 422
    assert answer.message.startswith(f'LinkerdConfig "{obj["metadata"]["name"]}" is invalid: ')
    rendered = render_review("u-1", answer)["response"]
    assert rendered["status"]["code"] == 422 and rendered["status"]["reason"] == "Invalid"


def test_validate_lists_every_field_in_the_message() -> None:
    answer = validator(cache())(review(load(SAMPLES / "invalid" / "bad_ports.yaml")))
    assert answer.message.startswith('LinkerdConfig "bad-ports" is invalid: ')
    for field in ("spec.proxy.controlPort: ", "spec.proxy.inboundPort: must be 1-65535",
                  "spec.proxy.ignoreInboundPorts[1]: "):  # fmt: skip
        assert field in answer.message
    assert answer.message.count("; ") == 2


def test_validate_reads_the_cache_and_skips_the_object_itself() -> None:
    first = sample("edge_19.12.3.yaml")
    first["metadata"] = {"name": "first", "creationTimestamp": "2026-01-01T00:00:00Z"}
    second = sample("edge_19.12.3.yaml")
    second["metadata"] = {"name": "second"}
    answer = validator(cache(first))(review(second))
    assert not answer.allowed and "'first'" in answer.message
    assert validator(cache(first))(review({**first, "metadata": {"name": "first"}})).allowed


def test_validate_checks_updates_against_the_old_object() -> None:
    old = sample("edge_19.12.3.yaml")
    new = copy.deepcopy(old)
    new["spec"]["global"]["configMap"] = "another"
    answer = validator(cache(old))(review(new, old=old, operation="UPDATE"))
    assert not answer.allowed and "spec.global.configMap: is immutable" in answer.message
    # the old object only counts on UPDATE
    assert validator(cache())(review(new, old=old, operation="CREATE")).allowed


def test_answers_serialise() -> None:
    minimal = sample("edge_19.12.3_use_webhook_defaults.yaml")
    rendered = render_review("u-1", mutate(review(minimal)))["response"]
    assert rendered["patchType"] == "JSONPatch"
    assert orjson.loads(base64.b64decode(rendered["patch"])) == mutate(review(minimal)).patch


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10), _containers, max_leaves=12
)
_objects = st.none() | st.dictionaries(
    st.sampled_from(["metadata", "spec", "kind"]), _json, max_size=3
)


@settings(max_examples=300, deadline=None)
@given(
    obj=_objects,
    old=_objects,
    operation=st.sampled_from(["CREATE", "UPDATE", "DELETE", ""]),
    cached=st.lists(st.dictionaries(st.sampled_from(["metadata", "spec"]), _json), max_size=2),
)
def test_handlers_never_raise(obj: Any, old: Any, operation: str, cached: list[Json]) -> None:
    """The AdmissionServer turns an exception into a 500 refusal: there must be none."""
    request = review(obj, old, operation)
    for answer in (mutate(request), validator(cache(*cached))(request)):
        assert isinstance(answer, AdmissionResponse)
        assert answer.allowed or (answer.code == 422 and answer.message)
