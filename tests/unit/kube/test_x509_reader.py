"""``kube.x509_reader`` judged by cryptography, which read certificates before it: every
field it reads equals cryptography's reading of the same certificate (certificates
cryptography builds, hypothesis choosing keys, names, validity and extensions), and the same
certificates damaged are accepted exactly when cryptography accepts them."""

from __future__ import annotations

import datetime
import functools
import ipaddress
import warnings
from typing import Any

import pytest
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import AuthorityInformationAccessOID, ExtendedKeyUsageOID, NameOID
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from linkerd_config.kube.x509_reader import (
    UNCHECKED_EXTENSIONS,
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


_URI = x509.UniformResourceIdentifier("http://ca.example/x")
OTHER_EXTENSIONS: dict[str, Any] = {
    "san": lambda key: x509.SubjectAlternativeName(
        [
            x509.DNSName("root.linkerd.cluster.local"),
            x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1")),
            x509.RFC822Name("a@b.c"),
            _URI,
            x509.RegisteredID(x509.ObjectIdentifier("1.2.3")),
            x509.DirectoryName(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "d")])),
            x509.OtherName(x509.ObjectIdentifier("1.2.4"), b"\x0c\x01a"),
        ]
    ),
    "eku": lambda key: x509.ExtendedKeyUsage(
        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    ),
    "aki": lambda key: x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()),
    "aia": lambda key: x509.AuthorityInformationAccess(
        [x509.AccessDescription(AuthorityInformationAccessOID.OCSP, _URI)]
    ),
    "crldp": lambda key: x509.CRLDistributionPoints(
        [x509.DistributionPoint([_URI], None, None, None)]
    ),
    "policies": lambda key: x509.CertificatePolicies(
        [x509.PolicyInformation(x509.ObjectIdentifier("2.5.29.32.0"), ["http://cps.example"])]
    ),
    "constraints": lambda key: x509.NameConstraints(
        [x509.DNSName("cluster.local"), x509.IPAddress(ipaddress.ip_network("10.0.0.0/8"))],
        None,
    ),
}
"""The common extensions besides those read, whose structure is checked (damaged, they must
be refused as cryptography refuses them)."""


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
    for extension in draw(st.lists(st.sampled_from(sorted(OTHER_EXTENSIONS)), unique=True)):
        builder = builder.add_extension(OTHER_EXTENSIONS[extension](key), critical=False)
    algorithm = None if kind.startswith("ed") else hashes.SHA256()
    return builder.sign(key, algorithm).public_bytes(Encoding.DER)


class ExtensionsRefused(Exception):
    """cryptography loaded the certificate and read its fields, not its extensions."""


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
        cert.extensions  # noqa: B018  (read whole, as the reader's extensions_error says)
    except (ValueError, TypeError, x509.DuplicateExtension) as error:
        raise ExtensionsRefused(str(error)) from error
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


def read_as_cryptography_reads(der: bytes) -> None:
    """Refused by cryptography (loading it, or reading a field or its extensions): refused
    here too, or its extensions reported unreadable. Accepted by cryptography: accepted, and
    read as cryptography reads it. Nothing but CertificateError is raised."""
    try:
        ours: Certificate | None = read_der(der)
    except CertificateError:
        ours = None
    try:
        theirs: dict[str, Any] | None = cryptography_view(der)
    except ExtensionsRefused:
        if ours is not None and UNCHECKED_EXTENSIONS.intersection(ours.extensions):
            return  # one cryptography reads and the reader, by its contract, does not
        theirs = None
    except (ValueError, TypeError, x509.DuplicateExtension, x509.InvalidVersion):
        theirs = None
    if theirs is None:
        if ours is not None and ours.extensions_error is None:
            pytest.fail(f"accepted what cryptography refuses: {der.hex()}")
        return
    if ours is None or ours.extensions_error is not None:
        pytest.fail(f"refused what cryptography accepts: {der.hex()}")
    assert our_view(ours) == theirs


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
    read_as_cryptography_reads(der)


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


def test_an_oid_past_63_octets_is_refused_before_it_is_computed() -> None:
    """A 200 KB arc would take quadratic time to build; an OID over 63 octets is refused
    first (cryptography's bound)."""
    algorithm = tlv(0x30, tlv(0x06, b"\x2a\x03"))
    hostile = tlv(0x31, tlv(0x30, tlv(0x06, b"\xff" * 200_000 + b"\x01") + tlv(0x0C, b"a")))
    tbs = tlv(0x30, tlv(0x02, b"\x01") + algorithm + tlv(0x30, hostile))
    der = tlv(0x30, tbs + algorithm + tlv(0x03, b"\x00"))
    with pytest.raises(CertificateError, match="over 63 octets"):
        read_der(der)


def test_begin_lines_without_end_are_read_in_one_pass() -> None:
    """Thousands of BEGIN lines and no END: no block (each BEGIN starts the block anew, so the
    text is read once, not once per BEGIN)."""
    with pytest.raises(CertificateError, match="no -----BEGIN CERTIFICATE----- block"):
        read_pem_bundle("-----BEGIN CERTIFICATE-----\n" * 9_000)
    anchor = trust_anchor("after")
    found = read_pem_bundle("-----BEGIN CERTIFICATE-----\nnot base64\n" * 100 + anchor)
    assert [cert.subject for cert in found] == ["CN=after"]


# -- certificates built by hand, byte by byte: edges a builder will not make ------------------

GX = 0x6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296
GY = 0x4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5
"""P-256's generator: a point on the curve, for keys no signature is checked with."""


def seq(*parts: bytes) -> bytes:
    return tlv(0x30, b"".join(parts))


def oid(dotted: str) -> bytes:
    arcs = [int(arc) for arc in dotted.split(".")]
    body = bytearray()
    for arc in [40 * arcs[0] + arcs[1], *arcs[2:]]:
        chunk = [arc & 0x7F]
        while arc := arc >> 7:
            chunk.append(0x80 | (arc & 0x7F))
        body += bytes(reversed(chunk))
    return tlv(0x06, bytes(body))


def integer(value: int) -> bytes:
    return tlv(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big", signed=True))


def name(*attributes: bytes) -> bytes:
    return seq(tlv(0x31, b"".join(attributes)))


def cn(value: bytes, tag: int = 0x0C) -> bytes:
    return seq(oid("2.5.4.3"), tlv(tag, value))


EC_KEY = seq(oid("1.2.840.10045.2.1"), oid("1.2.840.10045.3.1.7"))
POINT = b"\x04" + GX.to_bytes(32, "big") + GY.to_bytes(32, "big")
RSA_KEY = seq(oid("1.2.840.113549.1.1.1"), tlv(0x05, b""))
MODULUS = 0xC5D3 << 1008 | 1
ECDSA_SHA256 = seq(oid("1.2.840.10045.4.3.2"))


def hand_built(
    *,
    version: bytes = tlv(0xA0, integer(2)),
    algorithm: bytes = ECDSA_SHA256,
    subject: bytes = name(cn(b"s")),
    key: bytes = seq(EC_KEY, tlv(0x03, b"\x00" + POINT)),
    extensions: bytes = b"",
) -> bytes:
    validity = seq(tlv(0x17, b"200101000000Z"), tlv(0x17, b"300101000000Z"))
    tbs = seq(version, integer(1), algorithm, name(cn(b"i")), validity, subject, key, extensions)
    return seq(tbs, ECDSA_SHA256, tlv(0x03, b"\x00"))


def extension(dotted: str, value: bytes) -> bytes:
    return tlv(0xA3, seq(seq(oid(dotted), tlv(0x04, value))))


HAND_BUILT = {
    "a value tagged OCTET STRING": hand_built(subject=name(cn(b"a", 0x04))),
    "a value tagged UTCTime": hand_built(subject=name(cn(b"a", 0x17))),
    "an IA5String not ASCII": hand_built(subject=name(cn("é".encode(), 0x16))),
    "one attribute twice in an RDN": hand_built(subject=name(cn(b"a"), cn(b"a"))),
    "an OID arc of 10 octets": hand_built(
        subject=name(seq(tlv(0x06, b"\x2a" + b"\x81" * 9 + b"\x01"), tlv(0x0C, b"x")))
    ),
    "an OID of 64 octets": hand_built(subject=name(seq(tlv(0x06, b"\x2a" * 64), tlv(0x0C, b"x")))),
    "ECDSA's signature algorithm with NULL": hand_built(
        algorithm=seq(oid("1.2.840.10045.4.3.2"), tlv(0x05, b""))
    ),
    "an unknown algorithm, a high-tag parameter": hand_built(
        algorithm=seq(oid("1.2.3"), b"\x1f\x81\x00\x00")
    ),
    "a compressed point": hand_built(
        key=seq(EC_KEY, tlv(0x03, b"\x00\x03" + GX.to_bytes(32, "big")))
    ),
    "an even RSA modulus": hand_built(
        key=seq(RSA_KEY, tlv(0x03, b"\x00" + seq(integer(MODULUS + 1), integer(65537))))
    ),
    "an RSA exponent over 2³¹": hand_built(
        key=seq(RSA_KEY, tlv(0x03, b"\x00" + seq(integer(MODULUS), integer(2**31 + 1))))
    ),
    "an RSA modulus of 3": hand_built(
        key=seq(RSA_KEY, tlv(0x03, b"\x00" + seq(integer(3), integer(3))))
    ),
    "an RSA exponent of 15,000 bits (too long to print)": hand_built(
        key=seq(
            RSA_KEY,
            tlv(0x03, b"\x00" + seq(integer(2**15100 + 1), integer(2**15000 + 1))),
        )
    ),
    "a version of 15,000 bits": hand_built(version=tlv(0xA0, integer(2**15000))),
    "an X25519 key of 1 byte": hand_built(key=seq(seq(oid("1.3.101.110")), tlv(0x03, b"\x00\x09"))),
    "Ed448 with NULL": hand_built(
        key=seq(seq(oid("1.3.101.113"), tlv(0x05, b"")), tlv(0x03, b"\x00" + b"\x00" * 57))
    ),
    "version 2": hand_built(version=tlv(0xA0, integer(1))),
    "an empty extension list": hand_built(extensions=tlv(0xA3, seq())),
    "pathLen without cA": hand_built(extensions=extension("2.5.29.19", seq(integer(0)))),
    "an empty extKeyUsage": hand_built(extensions=extension("2.5.29.37", seq())),
    "an unknown extension holding nothing": hand_built(extensions=extension("1.2.3.4", b"")),
    "an IP address of 5 octets": hand_built(
        extensions=extension("2.5.29.17", seq(tlv(0x87, b"\x01\x02\x03\x04\x05")))
    ),
    "a dNSName not UTF-8": hand_built(extensions=extension("2.5.29.17", seq(tlv(0x82, b"\xff")))),
    "a directoryName value not UTF-8": hand_built(
        extensions=extension("2.5.29.17", seq(tlv(0xA4, name(cn(b"\x9a")))))
    ),
    "a directoryName value of no string type": hand_built(
        extensions=extension("2.5.29.17", seq(tlv(0xA4, name(cn(b"d", 0x0E)))))
    ),
    "a directoryName attribute twice": hand_built(
        extensions=extension("2.5.29.17", seq(tlv(0xA4, name(cn(b"a"), cn(b"a")))))
    ),
    # Found by hypothesis in CI's machine (a flipped constructed bit): the value is opaque.
    "an otherName value constructed, its content no DER": hand_built(
        extensions=extension("2.5.29.17", seq(tlv(0xA0, oid("1.2.4") + tlv(0xA0, tlv(0x2C, b"a")))))
    ),
    "an otherName value of two elements": hand_built(
        extensions=extension(
            "2.5.29.17", seq(tlv(0xA0, oid("1.2.4") + tlv(0xA0, tlv(0x0C, b"a") * 2)))
        )
    ),
}
"""Found by attacking the reader (helper-14): each was read unlike cryptography before its fix."""


@pytest.mark.parametrize("der", HAND_BUILT.values(), ids=list(HAND_BUILT))
def test_hand_built_edges_are_read_as_cryptography_reads_them(der: bytes) -> None:
    read_as_cryptography_reads(der)


def test_keys_linkerd_cannot_use_are_read_unlike_cryptography() -> None:
    """Where the reader departs from cryptography, on purpose: keys Go's crypto/x509 (which
    Linkerd's identity reads anchors with) does not take are no EC or RSA key here, so the
    anchor checks refuse them. An RSASSA-PSS key and a curve other than SEC 2's read as
    "other"; an EC key with explicit or implicit curve parameters is refused."""
    pss = hand_built(
        key=seq(
            seq(oid("1.2.840.113549.1.1.10")),
            tlv(0x03, b"\x00" + seq(integer(MODULUS), integer(65537))),
        )
    )
    assert cryptography_view(pss)["key"] == ("rsa", "", 1024)
    assert read_der(pss).public_key.kind == "other"
    brainpool = ec.generate_private_key(ec.BrainpoolP256R1()).public_key()
    point = brainpool.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
    curve = seq(oid("1.2.840.10045.2.1"), oid("1.3.36.3.3.2.8.1.1.7"))
    key = seq(curve, tlv(0x03, b"\x00" + point))
    assert cryptography_view(hand_built(key=key))["key"] == ("ec", "brainpoolP256r1", 0)
    assert read_der(hand_built(key=key)).public_key.kind == "other"
    implicit = seq(seq(oid("1.2.840.10045.2.1"), tlv(0x05, b"")), tlv(0x03, b"\x00" + POINT))
    with pytest.raises(CertificateError):
        read_der(hand_built(key=implicit))
