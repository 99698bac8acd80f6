"""``kube.x509_reader`` judged by cryptography, which read certificates before it: every
field it reads equals cryptography's reading of the same certificate (certificates
cryptography builds, hypothesis choosing keys, names, validity and extensions), and the same
certificates damaged are accepted exactly when cryptography accepts them."""

from __future__ import annotations

import datetime
import functools
import warnings
from typing import Any

import pytest
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from linkerd_config.kube.x509_reader import (
    Certificate,
    CertificateError,
    read_der,
    read_pem,
    read_pem_bundle,
)
from tests.support.anchors import trust_anchor

KEYS = ("p192", "p224", "p256", "p384", "p521", "k256", "rsa1024", "rsa2048", "ed25519", "ed448")


@functools.cache
def private_key(kind: str) -> Any:
    """One key per kind for the whole run (RSA keys are slow to make)."""
    makers = {
        "p192": lambda: ec.generate_private_key(ec.SECP192R1()),
        "p224": lambda: ec.generate_private_key(ec.SECP224R1()),
        "p256": lambda: ec.generate_private_key(ec.SECP256R1()),
        "p384": lambda: ec.generate_private_key(ec.SECP384R1()),
        "p521": lambda: ec.generate_private_key(ec.SECP521R1()),
        "k256": lambda: ec.generate_private_key(ec.SECP256K1()),
        "rsa1024": lambda: rsa.generate_private_key(65537, 1024),
        "rsa2048": lambda: rsa.generate_private_key(65537, 2048),
        "ed25519": ed25519.Ed25519PrivateKey.generate,
        "ed448": ed448.Ed448PrivateKey.generate,
    }
    return makers[kind]()


TEXT_TYPES = [
    _ASN1Type.UTF8String,
    _ASN1Type.PrintableString,
    _ASN1Type.IA5String,
    _ASN1Type.T61String,
    _ASN1Type.BMPString,
    _ASN1Type.UniversalString,
    _ASN1Type.VisibleString,
    _ASN1Type.NumericString,
]
NAME_TYPES = [
    NameOID.COMMON_NAME,
    NameOID.ORGANIZATION_NAME,
    NameOID.ORGANIZATIONAL_UNIT_NAME,
    NameOID.LOCALITY_NAME,
    NameOID.STATE_OR_PROVINCE_NAME,
    NameOID.STREET_ADDRESS,
    NameOID.DOMAIN_COMPONENT,
    NameOID.USER_ID,
    NameOID.SERIAL_NUMBER,
    NameOID.EMAIL_ADDRESS,
    x509.ObjectIdentifier("1.3.6.1.4.1.99999.1"),
]
ANY_TEXT = list('ab Z09#,+"\\<>;=\x00é☃\U0001f600.-')
ALPHABETS = {
    _ASN1Type.PrintableString: list("aZ09 '()+,-./:=?"),
    _ASN1Type.NumericString: list("0 9"),
    _ASN1Type.IA5String: list('ab Z09#,+"\\<>;=\x00.-'),
    _ASN1Type.VisibleString: list('ab Z09#,+"\\<>;=.-'),
}


@st.composite
def attributes(draw: st.DrawFn) -> x509.NameAttribute[Any]:
    if draw(st.booleans()) and draw(st.booleans()):
        country = draw(st.sampled_from(["US", "DE", "#1"]))
        return x509.NameAttribute(NameOID.COUNTRY_NAME, country, _type=_ASN1Type.UTF8String)
    if draw(st.integers(0, 9)) == 0:
        bits = draw(st.binary(max_size=6))
        return x509.NameAttribute(NameOID.X500_UNIQUE_IDENTIFIER, bits, _type=_ASN1Type.BitString)
    kind = draw(st.sampled_from(TEXT_TYPES))
    alphabet = st.sampled_from(ALPHABETS.get(kind, ANY_TEXT))
    value = draw(st.text(alphabet=alphabet, min_size=1, max_size=12))
    return x509.NameAttribute(draw(st.sampled_from(NAME_TYPES)), value, _type=kind)


names = st.lists(
    st.lists(attributes(), min_size=1, max_size=2, unique=True).map(x509.RelativeDistinguishedName),
    max_size=4,
).map(x509.Name)
moments = st.datetimes(
    min_value=datetime.datetime(1950, 1, 1), max_value=datetime.datetime(2300, 1, 1)
).map(lambda d: d.replace(microsecond=0))


@st.composite
def usages(draw: st.DrawFn) -> x509.KeyUsage:
    flags = [draw(st.booleans()) for _ in range(7)]
    agreement = flags[4]
    return x509.KeyUsage(
        digital_signature=flags[0],
        content_commitment=flags[1],
        key_encipherment=flags[2],
        data_encipherment=flags[3],
        key_agreement=agreement,
        key_cert_sign=flags[5],
        crl_sign=flags[6],
        encipher_only=agreement and draw(st.booleans()),
        decipher_only=agreement and draw(st.booleans()),
    )


@st.composite
def certificates(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(KEYS))
    key = private_key(kind)
    start, end = sorted([draw(moments), draw(moments)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(draw(names))
        .issuer_name(draw(names))
        .public_key(key.public_key())
        .serial_number(draw(st.integers(1, 2**159 - 1)))
        .not_valid_before(start)
        .not_valid_after(end)
    )
    if draw(st.booleans()):
        ca = draw(st.booleans())
        length = draw(st.one_of(st.none(), st.integers(0, 3))) if ca else None
        builder = builder.add_extension(x509.BasicConstraints(ca, length), draw(st.booleans()))
    if draw(st.booleans()):
        builder = builder.add_extension(draw(usages()), draw(st.booleans()))
    if draw(st.booleans()):
        identifier = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        builder = builder.add_extension(identifier, critical=False)
    algorithm = None if kind.startswith("ed") else hashes.SHA256()
    return builder.sign(key, algorithm).public_bytes(Encoding.DER)


def cryptography_view(der: bytes) -> dict[str, Any]:
    """What cryptography reads of ``der``, in the reader's terms; raises if it will not load."""
    with warnings.catch_warnings():  # a serial not positive, a country of 3 letters: warned
        warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        cert = x509.load_der_x509_certificate(der)
        subject = cert.subject.rfc4514_string()
    view: dict[str, Any] = {
        "fingerprint": cert.fingerprint(hashes.SHA256()).hex(),
        "not_before": cert.not_valid_before_utc,
        "not_after": cert.not_valid_after_utc,
    }
    view["subject"] = subject
    try:
        key = cert.public_key()
    except UnsupportedAlgorithm:  # a key of a kind it does not know: "other" here
        key = None
    if isinstance(key, ec.EllipticCurvePublicKey):
        view["key"] = ("ec", key.curve.name, 0)
    elif isinstance(key, rsa.RSAPublicKey):
        view["key"] = ("rsa", "", key.key_size)
    elif isinstance(key, ed25519.Ed25519PublicKey):
        view["key"] = ("ed25519", "", 0)
    else:
        view["key"] = ("other", "", 0)
    try:
        view["ca"] = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        view["ca"] = None
    try:
        usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
        view["key_cert_sign"] = usage.key_cert_sign
    except x509.ExtensionNotFound:
        view["key_cert_sign"] = None
    return view


def our_view(cert: Certificate) -> dict[str, Any]:
    key = cert.public_key
    return {
        "fingerprint": cert.fingerprint,
        "not_before": cert.not_before,
        "not_after": cert.not_after,
        "subject": cert.subject,
        "key": (key.kind, key.curve, key.bits),
        "ca": cert.ca,
        "key_cert_sign": cert.key_cert_sign,
    }


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(certificates())
def test_every_field_reads_as_cryptography_reads_it(der: bytes) -> None:
    ours = read_der(der)
    assert ours.extensions_error is None
    assert our_view(ours) == cryptography_view(der)


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    der = bytearray(draw(certificates()))
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        # A share of the length, not an index: ECDSA signatures vary in length between runs.
        at = int(draw(st.floats(0, 1, exclude_max=True)) * len(der))
        if how == "flip":
            der[at] ^= draw(st.integers(1, 255))
        elif how == "cut":
            del der[at:]
        elif how == "insert":
            der[at:at] = draw(st.binary(min_size=1, max_size=3))
        elif len(der) > 1:
            del der[at]
        if not der:
            der = bytearray(b"\x30")
    return bytes(der)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged())
def test_a_damaged_certificate_is_accepted_exactly_when_cryptography_accepts_it(
    der: bytes,
) -> None:
    """Refused by cryptography (loading it, or reading a field or its extensions): refused
    here too, or its extensions reported unreadable. Accepted by cryptography: accepted, and
    read as cryptography reads it. Nothing but CertificateError is raised."""
    try:
        ours: Certificate | None = read_der(der)
    except CertificateError:
        ours = None
    try:
        theirs: dict[str, Any] | None = cryptography_view(der)
    except (ValueError, TypeError, x509.DuplicateExtension, x509.InvalidVersion):
        theirs = None
    if theirs is None:
        if ours is not None and ours.extensions_error is None:
            pytest.fail(f"accepted what cryptography refuses: {der.hex()}")
        return
    if ours is None or ours.extensions_error is not None:
        pytest.fail(f"refused what cryptography accepts: {der.hex()}")
    assert our_view(ours) == theirs


def test_pem_blocks_and_text_around_them() -> None:
    first, second = trust_anchor("one"), trust_anchor("two")
    found = read_pem_bundle(f"# anchors\n{first}\nbetween\n{second}")
    assert [cert.subject for cert in found] == ["CN=one", "CN=two"]
    assert read_pem(first.replace("\n", "\r\n")).subject == "CN=one"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no -----BEGIN CERTIFICATE----- block"),
        ("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----", "not base64"),
        ("-----BEGIN CERTIFICATE-----\nMAA=\n-----END CERTIFICATE-----", "the TBSCertificate"),
        ("-----BEGIN CERTIFICATE-----\nMIA=\n-----END CERTIFICATE-----", "definite DER length"),
    ],
)
def test_what_is_not_a_certificate_says_why(text: str, message: str) -> None:
    with pytest.raises(CertificateError, match=message):
        read_pem_bundle(text)


def test_two_certificates_where_one_is_expected() -> None:
    with pytest.raises(CertificateError, match="2 certificates where one"):
        read_pem(trust_anchor() + trust_anchor())


def tlv(tag: int, content: bytes) -> bytes:
    size = len(content)
    if size < 0x80:
        return bytes([tag, size]) + content
    octets = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(octets)]) + octets + content


def test_an_oid_arc_past_63_bits_is_refused_before_it_is_computed() -> None:
    """A 200 KB arc would take quadratic time to build; it is refused at its tenth octet."""
    algorithm = tlv(0x30, tlv(0x06, b"\x2a\x03"))
    hostile = tlv(0x31, tlv(0x30, tlv(0x06, b"\xff" * 200_000 + b"\x01") + tlv(0x0C, b"a")))
    tbs = tlv(0x30, tlv(0x02, b"\x01") + algorithm + tlv(0x30, hostile))
    der = tlv(0x30, tbs + algorithm + tlv(0x03, b"\x00"))
    with pytest.raises(CertificateError, match="an arc over 63 bits"):
        read_der(der)


def test_begin_lines_without_end_are_read_in_one_pass() -> None:
    """Thousands of BEGIN lines and no END: no block (each BEGIN starts the block anew, so the
    text is read once, not once per BEGIN)."""
    with pytest.raises(CertificateError, match="no -----BEGIN CERTIFICATE----- block"):
        read_pem_bundle("-----BEGIN CERTIFICATE-----\n" * 9_000)
    anchor = trust_anchor("after")
    found = read_pem_bundle("-----BEGIN CERTIFICATE-----\nnot base64\n" * 100 + anchor)
    assert [cert.subject for cert in found] == ["CN=after"]
