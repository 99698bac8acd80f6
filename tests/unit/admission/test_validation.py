"""validate(): every rule from both sides, every error at once with its field path, the
samples, and never an exception whatever JSON arrives."""

from __future__ import annotations

import copy
import datetime
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from linkerd_config.linkerd.admission.defaults import defaulted
from linkerd_config.linkerd.admission.validation import (
    TRUST_ANCHOR,
    FieldError,
    Judgements,
    defaultable,
    render_errors,
    validate,
    warnings_for,
)
from linkerd_config.linkerd.spec.conversion import convert
from tests.support.samples import INVALID, SAMPLES, SECOND_TRUST_ANCHOR, load, sample, why_invalid

Json = dict[str, Any]
NOW = datetime.datetime.now(datetime.UTC)
FULL = "edge_19.12.3.yaml"
MINIMAL = "edge_19.12.3_use_webhook_defaults.yaml"


def full(name: str = "full", **metadata: Any) -> Json:
    obj = copy.deepcopy(sample(FULL))
    obj["metadata"] = {"name": name, **metadata}
    return obj


def fields(errors: list[FieldError]) -> list[str]:
    return [e.field for e in errors]


def with_spec(change: Callable[[Json], object], base: str = FULL) -> list[FieldError]:
    obj = copy.deepcopy(sample(base))
    change(obj["spec"])
    return validate(obj)


# -- certificates made on the fly --------------------------------------------------------------

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey


def make_cert(
    key: PrivateKey | None = None,
    *,
    ca: bool | None = True,
    key_cert_sign: bool | None = True,
    not_before: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None,
    cn: str = "root.linkerd.cluster.local",
) -> str:
    """A self-signed certificate; ``None`` for ``ca``/``key_cert_sign`` omits the extension."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before or NOW - datetime.timedelta(days=1))
        .not_valid_after(not_after or NOW + datetime.timedelta(days=365))
    )
    if ca is not None:
        builder = builder.add_extension(x509.BasicConstraints(ca=ca, path_length=None), True)
    if key_cert_sign is not None:
        usage = x509.KeyUsage(
            digital_signature=True,
            content_commitment=False,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            key_cert_sign=key_cert_sign,
            crl_sign=key_cert_sign,
            encipher_only=False,
            decipher_only=False,
        )
        builder = builder.add_extension(usage, critical=True)
    algorithm = None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    cert = builder.sign(key, algorithm)
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def anchor_errors(pem: Any) -> list[FieldError]:
    def change(spec: Json) -> None:
        spec["global"]["identityContext"]["trustAnchorsPEM"] = pem

    return with_spec(change)


# -- the samples -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_each_invalid_sample_is_refused_naming_its_fields(path: Path) -> None:
    errors = validate(load(path))
    named = re.findall(r"spec\.[A-Za-z0-9_.\[\]]*[A-Za-z0-9_\]]", why_invalid(path))
    assert named, f"{path.name}'s first line names no field"
    for field in named:
        assert field in fields(errors), (field, errors)


def test_bad_ports_sample_also_reports_the_collision() -> None:
    errors = validate(load(SAMPLES / "invalid" / "bad_ports.yaml"))
    assert FieldError("spec.proxy.controlPort", "must differ from adminPort (both are 4190)") in (
        errors
    )
    assert FieldError("spec.proxy.inboundPort", "must be 1-65535, got 70000") in errors


@pytest.mark.parametrize("name", [FULL, MINIMAL])
def test_valid_samples_pass_as_is_and_defaulted(name: str) -> None:
    obj = sample(name)
    assert validate(obj) == []
    obj["spec"] = defaulted(obj["spec"])
    assert validate(obj) == []


def test_a_bundle_of_two_anchors_is_accepted() -> None:
    second = SECOND_TRUST_ANCHOR
    assert (
        anchor_errors(full()["spec"]["global"]["identityContext"]["trustAnchorsPEM"] + second) == []
    )


# -- trust anchor ----------------------------------------------------------------------------


def test_absent_or_empty_anchor_is_allowed_with_a_warning() -> None:
    for pem in (None, "", "  \n"):
        obj = full()
        if pem is None:
            del obj["spec"]["global"]["identityContext"]["trustAnchorsPEM"]
        else:
            obj["spec"]["global"]["identityContext"]["trustAnchorsPEM"] = pem
        assert validate(obj) == []
        (warning,) = warnings_for(obj)
        assert TRUST_ANCHOR in warning and "kept" in warning
    assert warnings_for(full()) == []


@pytest.mark.parametrize(
    "key",
    [
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP384R1()),
        rsa.generate_private_key(65537, 2048),
        ed25519.Ed25519PrivateKey.generate(),
    ],
    ids=["p256", "p384", "rsa2048", "ed25519"],
)
def test_supported_key_types_are_accepted(key: PrivateKey) -> None:
    assert anchor_errors(make_cert(key)) == []


def test_a_ca_without_key_usage_is_accepted() -> None:
    assert anchor_errors(make_cert(key_cert_sign=None)) == []


@pytest.mark.parametrize(
    ("pem", "phrase"),
    [
        (make_cert(not_after=NOW - datetime.timedelta(days=1)), "expired on"),
        (make_cert(not_before=NOW + datetime.timedelta(days=1)), "is not valid before"),
        (make_cert(ca=False), "is not a CA"),
        (make_cert(ca=None), "is not a CA"),
        (make_cert(key_cert_sign=False), "keyCertSign"),
        (make_cert(rsa.generate_private_key(65537, 1024)), "1024-bit RSA key"),
        (make_cert(ec.generate_private_key(ec.SECP521R1())), "curve secp521r1"),
        (make_cert(ec.generate_private_key(ec.SECP256K1())), "curve secp256k1"),
        ("not a pem at all", "no -----BEGIN CERTIFICATE----- block"),
        ("-----BEGIN CERTIFICATE-----\nbm90\n-----END CERTIFICATE-----\n", "not parse as X.509"),
        ("-----BEGIN CERTIFICATE-----\nMIIB\n", "do not pair up"),
        (
            ec.generate_private_key(ec.SECP256R1())
            .private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            .decode(),
            "is a PRIVATE KEY PEM block, not a CERTIFICATE",
        ),
        (42, "must be a string"),
        ("x" * 70000, "is longer than"),
    ],
    ids=["expired", "not-yet-valid", "leaf", "no-basic-constraints", "no-cert-sign",
         "rsa1024", "p521", "secp256k1", "no-pem", "garbage", "unterminated", "private-key",
         "not-a-string", "huge"],
)  # fmt: skip
def test_unusable_anchors_are_refused(pem: Any, phrase: str) -> None:
    errors = anchor_errors(pem)
    assert fields(errors) == [TRUST_ANCHOR], errors
    assert phrase in errors[0].message


def test_every_certificate_of_a_bundle_is_checked() -> None:
    good = make_cert()
    expired = make_cert(not_after=NOW - datetime.timedelta(days=1), cn="old")
    leaf = make_cert(ca=False, cn="leaf")
    errors = anchor_errors(good + expired + leaf)
    messages = [e.message for e in errors]
    assert fields(errors) == [TRUST_ANCHOR, TRUST_ANCHOR]
    assert messages[0].startswith("certificate 2 of 3 'CN=old' expired on ")
    assert messages[1].startswith("certificate 3 of 3 'CN=leaf' is not a CA")


def test_unterminated_second_block_is_refused() -> None:
    errors = anchor_errors(make_cert() + "-----BEGIN CERTIFICATE-----\nMIIB\n")
    assert [e.message for e in errors] == [
        "is not PEM: its -----BEGIN and -----END lines do not pair up"
    ]


def test_mismatched_markers_and_oversized_bundles_are_refused() -> None:
    pem = make_cert()
    errors = anchor_errors(pem.replace("-----END CERTIFICATE-----", "-----END KEY-----"))
    assert [e.message for e in errors] == ["the certificate begins as CERTIFICATE but ends as KEY"]
    errors = anchor_errors("-----END CERTIFICATE-----\n" + pem)
    assert "do not pair up" in errors[0].message
    errors = anchor_errors("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n" * 101)
    assert [e.message for e in errors] == ["holds more than 100 PEM blocks"]


@pytest.mark.parametrize(
    "junk",
    ["-----BEGIN X-----", "-----BEGIN ", "-----END CERTIFICATE-----", "-----BEGIN A-----\n-"],
)
def test_hostile_pem_is_checked_in_linear_time(junk: str) -> None:
    """One pattern spanning BEGIN..END took seconds on 64 KiB of unmatched BEGINs."""
    started = time.monotonic()
    errors = anchor_errors(junk * (65000 // len(junk)))
    assert time.monotonic() - started < 0.5
    assert fields(errors) == [TRUST_ANCHOR]


def test_an_anchor_expiring_soon_is_accepted_with_a_warning() -> None:
    obj = full()
    soon = make_cert(not_after=NOW + datetime.timedelta(days=3))
    obj["spec"]["global"]["identityContext"]["trustAnchorsPEM"] = soon
    assert validate(obj) == []
    (warning,) = warnings_for(obj)
    assert "expires soon" in warning


def test_now_can_be_given() -> None:
    obj = full()
    in_2030 = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
    assert "expired on 2029-02-28" in render_errors(validate(obj, now=in_2030))
    in_2018 = datetime.datetime(2018, 1, 1, tzinfo=datetime.UTC)
    assert "is not valid before 2019-03-03" in render_errors(validate(obj, now=in_2018))


# -- versions ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field", "phrase"),
    [
        (lambda s: s["proxy"].pop("proxyVersion"), "spec.proxy.proxyVersion", "is required"),
        (lambda s: s["proxy"].update(proxyVersion=""), "spec.proxy.proxyVersion", "is required"),
        (lambda s: s["proxy"].update(proxyVersion=19), "spec.proxy.proxyVersion", "a string"),
        (lambda s: s["proxy"].update(proxyVersion="edge 19"), "spec.proxy.proxyVersion",
         "not an image tag"),
        (lambda s: s["proxy"].pop("proxyInitImageVersion"), "spec.proxy.proxyInitImageVersion",
         "is required"),
        (lambda s: s["proxy"].update(proxyInitImageVersion="v1.2.0:latest"),
         "spec.proxy.proxyInitImageVersion", "not an image tag"),
        (lambda s: s["global"].update(version="19.12.3"), "spec.global.version",
         "not a Linkerd version"),
        (lambda s: s["global"].update(version="edge-19.13.1"), "spec.global.version",
         "not a Linkerd version"),
        (lambda s: s["global"].update(version=["edge-19.12.3"]), "spec.global.version",
         "must be a string"),
        (lambda s: s["global"].update(version="stable-2.5.0"), "spec.global.version",
         "not supported"),
        (lambda s: s["global"].update(version="edge-19.12.2"), "spec.global.version", None),
    ],
    ids=["no-proxy-version", "empty-proxy-version", "int-proxy-version", "spaced-proxy-version",
         "no-init-version", "bad-init-version", "no-channel", "month-13", "list-version",
         "unsupported-version", "version-not-proxy-version"],
)  # fmt: skip
def test_version_rules(change: Any, field: str, phrase: str | None) -> None:
    errors = with_spec(change)
    if field == "spec.global.version" and phrase is None:
        assert errors == []  # control plane and proxy may differ
        return
    assert fields(errors) == [field], errors
    assert phrase in errors[0].message


def test_proxy_version_stands_in_for_a_missing_global_version() -> None:
    def change(spec: Json) -> None:
        del spec["global"]["version"]
        spec["proxy"]["proxyVersion"] = "git-0a1b2c3"

    errors = with_spec(change)
    assert fields(errors) == ["spec.proxy.proxyVersion"]
    assert "spec.global.version is not set" in errors[0].message

    def unsupported(spec: Json) -> None:
        del spec["global"]["version"]
        spec["proxy"]["proxyVersion"] = "stable-2.5.0"

    errors = with_spec(unsupported)
    assert fields(errors) == ["spec.proxy.proxyVersion"]
    assert "not supported" in errors[0].message


def test_a_values_format_version_is_checked_by_that_format() -> None:
    # stable-2.9 reads the Helm values: everything the full legacy sample says has a place.
    assert with_spec(lambda s: s["global"].update(version="stable-2.9.0")) == []
    # From the unified proxy image on there is no proxy-init image to set.
    errors = with_spec(lambda s: s["global"].update(version="edge-26.8.3"))
    assert "spec.proxy.proxyInitImageVersion" in fields(errors)
    assert "spec.global.omitWebhookSideEffects" in fields(errors)  # gone since edge-21.9.4
    # As small as a LinkerdConfig gets for a modern Linkerd: accepted as it is.
    small = {"metadata": {"name": "small"}, "spec": {"proxy": {"proxyVersion": "edge-26.8.3"}}}
    assert validate(small) == []


def test_a_development_proxy_build_is_fine_with_an_explicit_version() -> None:
    assert with_spec(lambda s: s["proxy"].update(proxyVersion="git-0a1b2c3")) == []


def test_stable_versions_are_accepted() -> None:
    def change(spec: Json) -> None:
        spec["global"]["version"] = spec["proxy"]["proxyVersion"] = "stable-2.6.0"

    assert with_spec(change) == []


# -- durations ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["86400s", "1h30m", "1.5s", "300ms", "24h", "20s"])
@pytest.mark.parametrize("key", ["issuanceLifeTime", "clockSkewAllowance"])
def test_go_durations_are_accepted(key: str, value: str) -> None:
    assert with_spec(lambda s: s["global"]["identityContext"].update({key: value})) == []


@pytest.mark.parametrize(
    ("value", "phrase"),
    [("one day", "not a duration"), ("86400", "not a duration"), ("5d", "unknown unit"),
     ("0s", "positive"), ("0", "positive"), ("-5s", "positive"), (86400, "must be a string"),
     ("", "not a duration")],
)  # fmt: skip
@pytest.mark.parametrize("key", ["issuanceLifeTime", "clockSkewAllowance"])
def test_bad_durations_are_refused(key: str, value: Any, phrase: str) -> None:
    errors = with_spec(lambda s: s["global"]["identityContext"].update({key: value}))
    assert fields(errors) == [f"spec.global.identityContext.{key}"], errors
    assert phrase in errors[0].message


# -- ports -----------------------------------------------------------------------------------


def test_custom_distinct_ports_are_accepted() -> None:
    ports = {"adminPort": 1, "controlPort": 2, "inboundPort": 65535, "outboundPort": 4}
    assert with_spec(lambda s: s["proxy"].update(ports)) == []


@pytest.mark.parametrize(
    ("value", "phrase"),
    [(0, "must be 1-65535, got 0"), (65536, "must be 1-65535, got 65536"),
     ("4143", "must be an integer"), (True, "must be an integer"), (41.5, "must be an integer")],
)  # fmt: skip
@pytest.mark.parametrize("key", ["adminPort", "controlPort", "inboundPort", "outboundPort"])
def test_ports_out_of_range_or_of_the_wrong_type_are_refused(
    key: str, value: Any, phrase: str
) -> None:
    errors = with_spec(lambda s: s["proxy"].update({key: value}))
    assert fields(errors) == [f"spec.proxy.{key}"], errors
    assert phrase in errors[0].message


def test_colliding_ports_are_refused_naming_the_later_one() -> None:
    errors = with_spec(lambda s: s["proxy"].update(inboundPort=4140))
    assert errors == [
        FieldError("spec.proxy.outboundPort", "must differ from inboundPort (both are 4140)")
    ]


def test_a_port_colliding_with_a_default_is_refused() -> None:
    def change(spec: Json) -> None:
        spec["proxy"]["controlPort"] = 4191  # the default adminPort

    errors = with_spec(change, base=MINIMAL)
    assert errors == [
        FieldError("spec.proxy.controlPort", "must differ from adminPort (both are 4191)")
    ]


@pytest.mark.parametrize("key", ["ignoreInboundPorts", "ignoreOutboundPorts"])
def test_ignore_port_entries(key: str) -> None:
    assert with_spec(lambda s: s["proxy"].update({key: ["1", "25", "65535"]})) == []
    assert with_spec(lambda s: s["proxy"].update({key: []})) == []
    cases: list[tuple[Any, str]] = [
        ("0", "ports must be 1-65535"),
        ("65536", "ports must be 1-65535"),
        ("99999999", "is not a port"),
        ("9000-80", "9000 is greater than 80"),
        ("0-10", "ports must be 1-65535"),
        ("025", "is not a port"),
        ("1-2-3", "is not a port"),
        (" 25", "is not a port"),
        (25, "must be a string"),
        ("25", "duplicates"),
    ]
    entries = ["25", *(entry for entry, _ in cases)]
    errors = with_spec(lambda s: s["proxy"].update({key: entries}))
    assert fields(errors) == [f"spec.proxy.{key}[{i}]" for i in range(1, len(entries))]
    for error, (_, phrase) in zip(errors, cases, strict=True):
        assert phrase in error.message, error
    assert errors[-1].message == "'25' duplicates entry [0]"


def test_ignore_ports_must_be_a_short_list() -> None:
    errors = with_spec(lambda s: s["proxy"].update(ignoreInboundPorts="25"))
    assert fields(errors) == ["spec.proxy.ignoreInboundPorts"]
    errors = with_spec(lambda s: s["proxy"].update(ignoreInboundPorts=["25"] * 257))
    assert errors == [FieldError("spec.proxy.ignoreInboundPorts", "must have at most 256 entries")]


def test_port_ranges_need_a_release_that_reads_them() -> None:
    errors = with_spec(lambda s: s["proxy"].update(ignoreOutboundPorts=["8888", "1000-2000"]))
    assert errors == [
        FieldError(
            "spec.proxy.ignoreOutboundPorts[1]", "port ranges need Linkerd edge-20.1.1 or later"
        )
    ]

    def on_edge_20_1_1(spec: Json) -> None:
        spec["global"]["version"] = spec["proxy"]["proxyVersion"] = "edge-20.1.1"
        spec["proxy"]["ignoreOutboundPorts"] = ["8888", "1000-2000"]

    assert with_spec(on_edge_20_1_1) == []

    def duplicate_range(spec: Json) -> None:
        on_edge_20_1_1(spec)
        spec["proxy"]["ignoreOutboundPorts"] = ["1000-2000", "1000-2000"]

    assert fields(with_spec(duplicate_range)) == ["spec.proxy.ignoreOutboundPorts[1]"]


# -- log level ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "level",
    ["warn", "off", "WARN", "warn,linkerd2_proxy=info", "info,linkerd2_proxy::app::inbound=trace",
     "error,h2=off,_private::x9=debug"],
)  # fmt: skip
def test_log_levels_are_accepted(level: str) -> None:
    assert with_spec(lambda s: s["proxy"].update(logLevel=level)) == []


@pytest.mark.parametrize(
    ("level", "phrase"),
    [("verbose", "the level must be one of"), ("warn,", "stray comma"),
     (",warn", "stray comma"), ("", "must name a level"),
     ("linkerd2-proxy=info", "Rust module path"), ("=info", "Rust module path"),
     ("a::=info", "Rust module path"), ("9x=info", "Rust module path"),
     ("warn, linkerd2_proxy=info", "Rust module path"), ("linkerd2_proxy=", "the level"),
     (7, "must be a string"), ("warn," * 300, "is longer than")],
)  # fmt: skip
def test_bad_log_levels_are_refused(level: Any, phrase: str) -> None:
    errors = with_spec(lambda s: s["proxy"].update(logLevel=level))
    assert set(fields(errors)) == {"spec.proxy.logLevel"}, errors
    assert phrase in errors[0].message


# -- resources ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "resource",
    [{"requests": {"cpu": "100m", "memory": "20Mi"}, "limits": {"cpu": "1", "memory": "250Mi"}},
     {"requests": {"cpu": 1}, "limits": {"cpu": "1000m"}},
     {"requests": {"memory": "1Gi"}, "limits": {"memory": "1024Mi"}},
     {"requests": {"memory": "1e3"}, "limits": {"memory": "1k"}},
     {"requests": {"cpu": ".5", "memory": "1.5Gi"}},
     {"limits": {"cpu": "+2", "memory": "0"}},
     {"requests": {"cpu": "2E"}, "limits": {"cpu": "3e18"}}],
)  # fmt: skip
def test_resource_quantities_are_accepted(resource: Json) -> None:
    assert with_spec(lambda s: s["proxy"].update(resource=resource)) == []


@pytest.mark.parametrize(
    ("quantity", "phrase"),
    [("lots", "not a quantity"), ("1e2.5", "not a quantity"), ("1Qi", "not a quantity"),
     ("1 Gi", "not a quantity"), ("-1", "must not be negative"), (-1, "must not be negative"),
     (True, "must be a quantity"), (1.5, "must be a quantity"),
     ("1e99999", "out of range"), ("1" * 200, "is longer than 64 characters")],
)  # fmt: skip
def test_bad_quantities_are_refused(quantity: Any, phrase: str) -> None:
    errors = with_spec(lambda s: s["proxy"].update(resource={"limits": {"memory": quantity}}))
    assert fields(errors) == ["spec.proxy.resource.limits.memory"], errors
    assert phrase in errors[0].message


def test_limits_below_requests_are_refused_comparing_values() -> None:
    resource = {
        "requests": {"cpu": "1", "memory": "1Gi"},
        "limits": {"cpu": "500m", "memory": "1000Mi"},
    }
    errors = with_spec(lambda s: s["proxy"].update(resource=resource))
    assert errors == [
        FieldError("spec.proxy.resource.limits.cpu", "must be at least the request ('1')"),
        FieldError("spec.proxy.resource.limits.memory", "must be at least the request ('1Gi')"),
    ]


def test_resource_sections_must_be_objects() -> None:
    errors = with_spec(lambda s: s["proxy"].update(resource={"limits": ["1"]}))
    assert fields(errors) == ["spec.proxy.resource.limits"]
    errors = with_spec(lambda s: s["proxy"].update(resource="lots"))
    assert fields(errors) == ["spec.proxy.resource"]


def test_the_format_refuses_resources_it_cannot_carry() -> None:
    errors = with_spec(lambda s: s["proxy"].update(resource={"limits": {"gpu": "1"}}))
    assert fields(errors) == ["spec.proxy.resource.limits.gpu"]


# -- other fields --------------------------------------------------------------------------------


def test_names_and_pull_policies() -> None:
    def change(spec: Json) -> None:
        spec["global"]["linkerdNamespace"] = "Linkerd"
        spec["global"]["configMap"] = "bad_name"
        spec["proxy"]["proxyImage"]["pullPolicy"] = "Sometimes"
        spec["proxy"]["proxyInitImage"] = "gcr.io/linkerd-io/proxy-init"

    assert fields(with_spec(change)) == [  # in the spec's order
        "spec.global.configMap",
        "spec.global.linkerdNamespace",
        "spec.proxy.proxyImage.pullPolicy",
        "spec.proxy.proxyInitImage",
    ]


def test_spec_and_its_sections_must_be_objects() -> None:
    assert validate({"metadata": {"name": "x"}}) == [FieldError("spec", "is required")]
    assert validate({"spec": []}) == [FieldError("spec", "must be an object")]
    assert validate([]) == [FieldError("object", "must be a JSON object")]  # type: ignore[arg-type]
    errors = validate({"spec": {"global": "x", "proxy": []}})
    assert fields(errors)[:2] == ["spec.global", "spec.proxy"]
    assert "spec.proxy.proxyVersion" in fields(errors)


def test_absurd_sizes_are_refused_up_front() -> None:
    """Nothing a LinkerdConfig holds comes near these; checking them first keeps every other
    rule (and the webhook's answer) quick whatever arrives."""
    spec = sample(FULL)["spec"]
    spec["proxy"]["extra"] = {f"k{i}": i for i in range(10_001)}
    assert validate({"spec": spec}) == [FieldError("spec", "holds more than 10000 values")]
    assert not defaultable(spec)
    spec = sample(FULL)["spec"]
    spec["global"]["identityContext"]["trustDomain"] = "x" * 70_000
    spec["proxy"]["ignoreInboundPorts"] = ["1", "y" * 70_000]
    assert validate({"spec": spec}) == [
        FieldError("spec.global.identityContext.trustDomain", "is longer than 65536 characters"),
        FieldError("spec.proxy.ignoreInboundPorts[1]", "is longer than 65536 characters"),
    ]
    assert defaultable(spec)  # long strings do not make defaulting expensive


def test_deep_nesting_is_refused_without_recursion() -> None:
    deep: Any = "x"
    for _ in range(5000):
        deep = {"a": deep}
    spec = {"proxy": {"proxyVersion": "edge-19.12.3", "extra": deep}}
    assert validate({"spec": spec}) == [FieldError("spec", "is nested more than 32 levels deep")]
    assert not defaultable(spec)


# -- all at once -------------------------------------------------------------------------------


def test_every_error_is_reported_at_once_with_its_path() -> None:
    def change(spec: Json) -> None:
        identity = spec["global"]["identityContext"]
        identity["trustAnchorsPEM"] = make_cert(ca=False)
        identity["issuanceLifeTime"] = "forever"
        identity["clockSkewAllowance"] = "-1s"
        spec["global"]["version"] = "edge-19"
        proxy = spec["proxy"]
        proxy["inboundPort"] = 0
        proxy["adminPort"] = 4140
        proxy["ignoreInboundPorts"] = ["8888", "x"]
        proxy["ignoreOutboundPorts"] = ["1-0"]
        proxy["logLevel"] = "loud"
        proxy["proxyInitImageVersion"] = ""
        proxy["resource"] = {"requests": {"cpu": "2"}, "limits": {"cpu": "1", "memory": "?"}}

    errors = with_spec(change)
    assert sorted(fields(errors)) == sorted(
        [
            TRUST_ANCHOR,
            "spec.proxy.proxyInitImageVersion",
            "spec.global.version",
            "spec.global.identityContext.issuanceLifeTime",
            "spec.global.identityContext.clockSkewAllowance",
            "spec.proxy.inboundPort",
            "spec.proxy.outboundPort",
            "spec.proxy.ignoreInboundPorts[1]",
            "spec.proxy.ignoreOutboundPorts[0]",
            "spec.proxy.logLevel",
            "spec.proxy.resource.limits.memory",
            "spec.proxy.resource.limits.cpu",
        ]
    )
    assert len(set(errors)) == len(errors)


def test_messages_about_huge_input_are_short() -> None:
    errors = with_spec(lambda s: s["global"].update(version="edge-" + "9" * 60_000))
    assert errors == [FieldError("spec.global.version", "is longer than 64 characters")]
    identity = "spec.global.identityContext"
    errors = with_spec(
        lambda s: s["global"]["identityContext"].update(clockSkewAllowance="1s" * 10**4)
    )
    assert errors == [FieldError(f"{identity}.clockSkewAllowance", "is longer than 64 characters")]


def test_render_errors_is_bounded() -> None:
    errors = [FieldError(f"spec.f{i}", "bad") for i in range(60)]
    text = render_errors(errors)
    assert text.startswith("spec.f0: bad; spec.f1: bad")
    assert text.endswith("spec.f49: bad; and 10 more")
    assert render_errors(errors[:2]) == "spec.f0: bad; spec.f1: bad"


# -- one LinkerdConfig per ConfigMap -------------------------------------------------------------


def stored(name: str, created: str, **spec_global: Any) -> Json:
    obj = full(name, creationTimestamp=created)
    obj["spec"]["global"].update(spec_global)
    return obj


def test_a_second_config_for_the_same_configmap_is_refused_naming_the_owner() -> None:
    first = stored("first", "2026-01-01T00:00:00Z")
    errors = validate(full("second"), others=[first])
    assert fields(errors) == ["spec.global.configMap"]
    assert "'first'" in errors[0].message and "linkerd/linkerd-config" in errors[0].message


def test_the_defaulted_target_counts() -> None:
    first = stored("first", "2026-01-01T00:00:00Z")
    minimal = sample(MINIMAL)
    minimal["metadata"]["name"] = "second"
    assert fields(validate(minimal, others=[first])) == ["spec.global.configMap"]


def test_the_owner_is_the_oldest_of_the_others() -> None:
    older = stored("zz-older", "2025-01-01T00:00:00Z")
    newer = stored("aa-newer", "2026-01-01T00:00:00Z")
    errors = validate(full("third"), others=[newer, older])
    assert "'zz-older'" in errors[0].message


def test_another_configmap_or_a_deleting_owner_is_no_conflict() -> None:
    other_cm = stored("first", "2026-01-01T00:00:00Z", configMap="linkerd-config-2")
    other_ns = stored("first", "2026-01-01T00:00:00Z", linkerdNamespace="linkerd2")
    deleting = stored("gone", "2026-01-01T00:00:00Z")
    deleting["metadata"]["deletionTimestamp"] = "2026-02-01T00:00:00Z"
    assert validate(full("second"), others=[other_cm, other_ns, deleting]) == []


def test_the_object_itself_among_the_others_is_ignored() -> None:
    me = stored("me", "2026-01-01T00:00:00Z")
    assert validate(full("me"), others=[me]) == []


def test_junk_among_the_others_is_ignored() -> None:
    junk: list[Any] = [{}, {"metadata": None}, {"metadata": {"name": 3}}, "x", {"metadata":
            {"name": "j"}, "spec": {"global": []}}]  # fmt: skip
    assert validate(full("second"), others=junk) == []


def test_on_update_the_owner_stays_accepted_and_a_rival_stays_refused() -> None:
    owner = stored("owner", "2025-01-01T00:00:00Z")
    rival = stored("rival", "2026-01-01T00:00:00Z")  # stored while the webhook was down
    changed_owner = copy.deepcopy(owner)
    changed_owner["spec"]["proxy"]["logLevel"] = "info"
    assert validate(changed_owner, old=owner, others=[rival]) == []
    changed_rival = copy.deepcopy(rival)
    changed_rival["spec"]["proxy"]["logLevel"] = "info"
    errors = validate(changed_rival, old=rival, others=[owner])
    assert fields(errors) == ["spec.global.configMap"] and "'owner'" in errors[0].message


# -- updates -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "value"), [("configMap", "other"), ("linkerdNamespace", "mesh")])
def test_the_target_is_immutable(key: str, value: str) -> None:
    old = full("me", creationTimestamp="2026-01-01T00:00:00Z")
    new = copy.deepcopy(old)
    new["spec"]["global"][key] = value
    errors = validate(new, old=old)
    assert fields(errors) == [f"spec.global.{key}"]
    assert errors[0].message.startswith("is immutable: it was ")


def test_immutability_compares_defaulted_specs() -> None:
    old = sample(MINIMAL)  # configMap unset: linkerd-config by default
    new = copy.deepcopy(old)
    new["spec"]["global"]["configMap"] = "linkerd-config"
    new["spec"]["global"]["linkerdNamespace"] = "linkerd"
    new["spec"]["proxy"]["logLevel"] = "info"
    assert validate(new, old=old) == []
    new["spec"]["global"]["configMap"] = "elsewhere"
    assert fields(validate(new, old=old)) == ["spec.global.configMap"]


def test_an_update_that_keeps_the_spec_is_not_rechecked() -> None:
    expired = load(SAMPLES / "invalid" / "expired_trust_anchor.yaml")
    assert validate(expired) != []
    relabelled = copy.deepcopy(expired)
    relabelled["metadata"]["labels"] = {"team": "mesh"}
    assert validate(relabelled, old=expired) == []
    relabelled["spec"] = defaulted(relabelled["spec"])  # the mutating webhook's doing
    assert validate(relabelled, old=expired) == []
    relabelled["spec"]["proxy"]["logLevel"] = "info"
    assert fields(validate(relabelled, old=expired)) == [TRUST_ANCHOR]


def test_an_object_being_deleted_is_let_go() -> None:
    expired = load(SAMPLES / "invalid" / "expired_trust_anchor.yaml")
    leaving = copy.deepcopy(expired)
    leaving["metadata"]["deletionTimestamp"] = "2026-11-22T00:00:00Z"
    leaving["spec"]["proxy"]["logLevel"] = "info"
    assert validate(leaving, old=expired) == []


# -- never an exception ---------------------------------------------------------------------------

_json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from(
        ["edge-19.12.3", "edge-20.1.1", "stable-2.6.0", "86400s", "1000-2000", "8888", "100m",
         "-----BEGIN CERTIFICATE-----\nbm90\n-----END CERTIFICATE-----", "warn", "linkerd",
         "linkerd-config", "", "0", "1e9999"]
    ),
)  # fmt: skip


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)


_json = st.recursive(_json_scalars, _containers, max_leaves=20)
_PATHS = [
    ("global",), ("proxy",), ("global", "version"), ("global", "identityContext"),
    ("global", "identityContext", "trustAnchorsPEM"),
    ("global", "identityContext", "issuanceLifeTime"), ("global", "configMap"),
    ("global", "linkerdNamespace"), ("proxy", "adminPort"), ("proxy", "ignoreInboundPorts"),
    ("proxy", "ignoreOutboundPorts"), ("proxy", "logLevel"), ("proxy", "resource"),
    ("proxy", "resource", "limits"), ("proxy", "resource", "requests", "cpu"),
    ("proxy", "proxyVersion"), ("proxy", "proxyImage"), ("proxy", "proxyUID"),
]  # fmt: skip


@st.composite
def mutated_samples(draw: st.DrawFn) -> Json:
    """A valid sample with a few of its fields replaced by arbitrary JSON."""
    obj = copy.deepcopy(sample(draw(st.sampled_from([FULL, MINIMAL]))))
    for path in draw(st.lists(st.sampled_from(_PATHS), max_size=4)):
        node: Any = obj["spec"]
        for key in path[:-1]:
            if not isinstance(node, dict):
                break
            node = node.setdefault(key, {})
        else:
            if isinstance(node, dict):
                node[path[-1]] = draw(_json)
    return obj


objects = st.one_of(
    st.fixed_dictionaries({"metadata": _json, "spec": _json}),
    st.fixed_dictionaries({"spec": st.dictionaries(st.sampled_from(["global", "proxy"]), _json)}),
    mutated_samples(),
)


def _assert_errors(result: object) -> None:
    assert isinstance(result, list)
    for error in result:
        assert isinstance(error, FieldError)
        assert isinstance(error.field, str) and error.field
        assert isinstance(error.message, str) and error.message
        assert "cannot be rendered" not in error.message, error  # a bug in a format


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=objects, old=st.none() | objects, others=st.lists(objects | _json, max_size=3))
def test_validate_never_raises(obj: Json, old: Json | None, others: list[Json]) -> None:
    _assert_errors(validate(obj, old, others))
    assert all(isinstance(w, str) for w in warnings_for(obj))


@settings(max_examples=300, deadline=None)
@given(_json)
def test_validate_never_raises_on_any_json_at_all(value: Any) -> None:
    _assert_errors(validate(value))
    _assert_errors(validate({"spec": value}))
    _assert_errors(validate({"spec": {"proxy": value, "global": value}}))


@pytest.mark.parametrize(
    ("section", "field", "words"),
    [
        ({"restartInterval": "soon"}, "spec.rollout.restartInterval", "duration"),
        ({"restartInterval": "0s"}, "spec.rollout.restartInterval", "positive"),
        ({"paused": "yes"}, "spec.rollout.paused", "true or false"),
        ({"maxRestartsPerPass": 0}, "spec.rollout.maxRestartsPerPass", "at least 1"),
        ({"maxRestartsPerPass": True}, "spec.rollout.maxRestartsPerPass", "at least 1"),
    ],
)
def test_rollout_settings_are_checked_by_name(
    section: dict[str, Any], field: str, words: str
) -> None:
    obj = sample("edge_19.12.3.yaml")
    obj["spec"]["rollout"] = section
    found = [(e.field, e.message) for e in validate(obj)]
    assert [f for f, _ in found] == [field], found
    assert words in found[0][1]


def test_rollout_settings_that_make_sense_pass() -> None:
    obj = sample("edge_19.12.3.yaml")
    obj["spec"]["rollout"] = {"paused": True, "maxRestartsPerPass": 25, "restartInterval": "1m30s"}
    assert validate(obj) == []


# -- v1alpha1's values annotation (issue 26) --------------------------------------------------

ANNOTATION = "config.linkerd.io/v1alpha2-values"
ANNOTATION_FIELD = f"metadata.annotations[{ANNOTATION}]"


def modern_v1alpha1(annotation: str) -> dict[str, Any]:
    obj = {
        "apiVersion": "config.linkerd.io/v1alpha1",
        "kind": "LinkerdConfig",
        "metadata": {"name": "modern", "annotations": {ANNOTATION: annotation}},
        "spec": {"proxy": {"proxyVersion": "edge-26.8.3"}},
    }
    return obj


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        ('{"proxy": {"nativeSidecar": false}}', []),
        (
            '{"proxy": {"nativeSidecar": "yes", "bogus": 1}}',
            [
                (f"{ANNOTATION_FIELD}.proxy.nativeSidecar", "must be true or false"),
                (f"{ANNOTATION_FIELD}.proxy.bogus", "is not a LinkerdConfig field"),
            ],
        ),
        ("not json", [(ANNOTATION_FIELD, "must be a JSON object of v1alpha2 values")]),
        ("[1]", [(ANNOTATION_FIELD, "must be a JSON object of v1alpha2 values")]),
        ('{"a": ' * 100 + "{}" + "}" * 100, [(ANNOTATION_FIELD, "holds too much")]),
    ],
    ids=["valid", "bad-values-named-in-the-annotation", "not-json", "not-an-object", "too-deep"],
)
def test_v1alpha1s_values_annotation_is_validated_and_named_as_v1alpha1_names_it(
    annotation: str, expected: list[tuple[str, str]]
) -> None:
    """Conversion carries an annotation it cannot read as it is (lossless), so validation is
    where a malformed one is refused, rather than its values silently not applied."""
    errors = validate(modern_v1alpha1(annotation))
    assert len(errors) == len(expected), errors
    for error, (field, message) in zip(errors, expected, strict=True):
        assert error.field == field and message in error.message, error


def modern_v1alpha2(annotation: str | None) -> dict[str, Any]:
    obj = convert(modern_v1alpha1('{"proxy": {"nativeSidecar": false}}'), "v1alpha2")
    if annotation is not None:
        obj["metadata"]["annotations"] = {ANNOTATION: annotation}
    return obj


def test_a_v1alpha2_object_given_v1alpha1s_values_annotation_is_refused_when_it_brings_it() -> None:
    """Nothing reads it on a v1alpha2 object, and through v1alpha1 it would pass for values.
    Refused on a create and on an update that adds or changes it; an update leaving one
    already stored (webhooks off) as it was -- a label edit -- is not refused for it."""
    stray = '{"proxy": {"nativeSidecar": true}}'
    field = ANNOTATION_FIELD
    (error,) = validate(modern_v1alpha2(stray))
    assert error.field == field and "remove it" in error.message
    (error,) = validate(modern_v1alpha2(stray), modern_v1alpha2(None))
    assert error.field == field
    (error,) = validate(modern_v1alpha2(stray), modern_v1alpha2("{}"))
    assert error.field == field
    labelled = modern_v1alpha2(stray)
    labelled["metadata"]["labels"] = {"team": "mesh"}
    assert validate(labelled, modern_v1alpha2(stray)) == []
    assert validate(modern_v1alpha2(None)) == []
    # Already stored (webhooks off): nothing reads it, and it stops no reconcile.
    assert validate(modern_v1alpha2(stray), stored=True) == []
    assert Judgements().validate(modern_v1alpha2(stray)) == []


def test_a_no_op_write_through_v1alpha1_stores_no_unvalidated_values() -> None:
    """A v1alpha2 object stored with the annotation (webhooks off), read and written back
    unchanged through v1alpha1, as ``kubectl get -o yaml | kubectl replace -f -`` does: the
    v1alpha1 view shows the values the object has (here none v1alpha1 lacks a field for),
    not the annotation's, so the write stores no spec.values that validation never saw."""
    plain = modern_v1alpha1("{}")
    del plain["metadata"]["annotations"]
    stored = convert(plain, "v1alpha2")
    stored["metadata"]["annotations"] = {ANNOTATION: '{"proxy": {"nativeSidecar": true}}'}
    view = convert(stored, "v1alpha1")
    assert "annotations" not in view["metadata"]
    assert validate(view, view) == []
    written = convert(view, "v1alpha2")
    assert written["spec"] == stored["spec"]
    assert "nativeSidecar" not in str(written)
