"""What a controller reads of an X.509 certificate, from its DER, without cryptography.

``cryptography`` costs ``linkerd-config run`` 17 ms and 7-8 MiB (its Rust library's pages)
the first time a certificate is read, which is the first reconcile, as the caches fill: more
than a fifth of the whole process at 1,000 pods (issue 40). What reconciles read of a trust
anchor is little (its fingerprint, subject, validity, basicConstraints, keyUsage and public
key), and none of it needs a signature checked or a key used: that is what this module reads.
Certificates are still *made* with cryptography (``kube.certs``, tests).

What it accepts is what cryptography (which read them before) accepts: DER with definite
minimal lengths and nothing trailing, SET OF in DER's order, PrintableString and IA5String
characters checked, an EC point uncompressed and on its curve, RSA numbers odd, keyUsage's
encipherOnly and decipherOnly only with keyAgreement. Anything else is a
:class:`CertificateError` naming what is wrong, never another exception.
``tests/unit/test_x509_reader.py`` checks every field against cryptography's reading of the
same certificates, and that damaged ones are accepted exactly when cryptography accepts them
(hypothesis).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final


class CertificateError(ValueError):
    """The bytes are not one DER X.509 certificate this reader accepts."""


_BOOLEAN: Final = 0x01
_INTEGER: Final = 0x02
_BIT_STRING: Final = 0x03
_OCTET_STRING: Final = 0x04
_NULL: Final = 0x05
_OID: Final = 0x06
_UTC_TIME: Final = 0x17
_GENERALIZED_TIME: Final = 0x18
_SEQUENCE: Final = 0x30
_SET: Final = 0x31
_VERSION: Final = 0xA0
_ISSUER_UID: Final = 0x81
_SUBJECT_UID: Final = 0x82
_EXTENSIONS: Final = 0xA3

_BASIC_CONSTRAINTS: Final = "2.5.29.19"
_KEY_USAGE: Final = "2.5.29.15"
_UNIQUE_IDENTIFIER: Final = "2.5.4.45"
_RSA: Final = "1.2.840.113549.1.1.1"
_EC: Final = "1.2.840.10045.2.1"
_ED25519: Final = "1.3.101.112"

_ATTRIBUTE_NAMES: Final = {
    "2.5.4.3": "CN",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.6": "C",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
"""Short names in RFC 4514 strings (cryptography's ``_NAMEOID_TO_NAME``); other types are
written as their dotted OID."""

_TEXT: Final[dict[int, str]] = {
    0x0C: "utf-8",  # UTF8String
    0x12: "utf-8",  # NumericString
    0x13: "utf-8",  # PrintableString
    0x14: "utf-8",  # T61String (read as UTF-8, as cryptography does)
    0x16: "utf-8",  # IA5String
    0x1A: "utf-8",  # VisibleString
    0x1C: "utf-32-be",  # UniversalString
    0x1E: "utf-16-be",  # BMPString
}


@dataclass(frozen=True, slots=True)
class _Curve:
    name: str
    p: int
    a: int
    b: int

    @property
    def size(self) -> int:
        return (self.p.bit_length() + 7) // 8

    def holds(self, x: int, y: int) -> bool:
        return x < self.p and y < self.p and (y * y - x**3 - self.a * x - self.b) % self.p == 0


_P192: Final = 2**192 - 2**64 - 1
_P224: Final = 2**224 - 2**96 + 1
_P256: Final = 2**256 - 2**224 + 2**192 + 2**96 - 1
_P384: Final = 2**384 - 2**128 - 2**96 + 2**32 - 1
_P521: Final = 2**521 - 1
_CURVES: Final = {
    "1.2.840.10045.3.1.1": _Curve(
        "secp192r1", _P192, _P192 - 3, int("64210519E59C80E70FA7E9AB72243049FEB8DEECC146B9B1", 16)
    ),
    "1.3.132.0.33": _Curve(
        "secp224r1",
        _P224,
        _P224 - 3,
        int("B4050A850C04B3ABF54132565044B0B7D7BFD8BA270B39432355FFB4", 16),
    ),
    "1.2.840.10045.3.1.7": _Curve(
        "secp256r1",
        _P256,
        _P256 - 3,
        int("5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B", 16),
    ),
    "1.3.132.0.34": _Curve(
        "secp384r1",
        _P384,
        _P384 - 3,
        int(
            "B3312FA7E23EE7E4988E056BE3F82D19181D9C6EFE8141120314088F5013875A"
            "C656398D8A2ED19D2A85C8EDD3EC2AEF",
            16,
        ),
    ),
    "1.3.132.0.35": _Curve(
        "secp521r1",
        _P521,
        _P521 - 3,
        int(
            "0051953EB9618E1C9A1F929A21A0B68540EEA2DA725B99B315F3B8B489918EF1"
            "09E156193951EC7E937B1652C0BD3BB1BF073573DF883D2C34F1EF451FD46B503F00",
            16,
        ),
    ),
    "1.3.132.0.10": _Curve("secp256k1", 2**256 - 2**32 - 977, 0, 7),
}
"""Curves whose points are checked: y² = x³ + ax + b over p (SEC 2's parameters; the tests
check them against points cryptography makes)."""


@dataclass(frozen=True, slots=True)
class PublicKey:
    """What a certificate's key is: ``kind`` ``ec`` (with its ``curve``), ``rsa`` (with its
    modulus' ``bits``), ``ed25519``, or ``other`` (``algorithm`` names its OID)."""

    kind: str
    algorithm: str
    curve: str = ""
    bits: int = 0


@dataclass(frozen=True, slots=True)
class Certificate:
    """The fields of one certificate a reconcile reads."""

    der: bytes
    subject: str
    """RFC 4514, as cryptography's ``Name.rfc4514_string()``."""
    not_before: datetime.datetime
    not_after: datetime.datetime
    public_key: PublicKey
    ca: bool | None
    """basicConstraints' cA; None without the extension."""
    key_cert_sign: bool | None
    """keyUsage's keyCertSign; None without the extension."""
    extensions_error: str | None = None
    """Why basicConstraints or keyUsage cannot be read (then ``ca``/``key_cert_sign`` are
    None); None when they can."""

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the DER, lowercase hex (as ``cert.fingerprint(hashes.SHA256()).hex()``)."""
        return hashlib.sha256(self.der).hexdigest()


class _Der:
    """A cursor over DER elements in ``data[pos:end]``."""

    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    def more(self) -> bool:
        return self.pos < self.end

    def peek(self) -> int | None:
        return self.data[self.pos] if self.pos < self.end else None

    def element(self, tag: int, what: str) -> tuple[int, int]:
        """The next element, which must have ``tag``: its content's start and end."""
        data, pos = self.data, self.pos
        if pos + 2 > self.end:
            raise CertificateError(f"{what}: truncated")
        if data[pos] != tag:
            raise CertificateError(f"{what}: tag 0x{data[pos]:02x}, expected 0x{tag:02x}")
        if tag & 0x1F == 0x1F:  # no field this reader reads has one
            raise CertificateError(f"{what}: a high tag number")
        length = data[pos + 1]
        pos += 2
        if length & 0x80:
            count = length & 0x7F
            if count == 0 or count > 4 or pos + count > self.end:
                raise CertificateError(f"{what}: not a definite DER length")
            length = int.from_bytes(data[pos : pos + count], "big")
            if data[pos] == 0 or length < 0x80:
                raise CertificateError(f"{what}: a length not in its shortest form")
            pos += count
        if pos + length > self.end:
            raise CertificateError(f"{what}: truncated")
        self.pos = pos + length
        return pos, pos + length

    def inner(self, tag: int, what: str) -> _Der:
        start, end = self.element(tag, what)
        return _Der(self.data, start, end)

    def raw(self, tag: int, what: str) -> bytes:
        start, end = self.element(tag, what)
        return self.data[start:end]

    def done(self, what: str) -> None:
        if self.pos != self.end:
            raise CertificateError(f"{what}: unexpected data after its last field")

    def integer(self, what: str) -> int:
        content = self.raw(_INTEGER, what)
        padded = len(content) > 1 and (
            (content[0] == 0 and content[1] < 0x80) or (content[0] == 0xFF and content[1] >= 0x80)
        )
        if not content or padded:
            raise CertificateError(f"{what}: not a DER INTEGER")
        return int.from_bytes(content, "big", signed=True)

    def oid(self, what: str) -> str:
        return _oid(self.raw(_OID, what), what)

    def boolean(self, what: str) -> bool:
        content = self.raw(_BOOLEAN, what)
        if content not in (b"\x00", b"\xff"):
            raise CertificateError(f"{what}: not a DER BOOLEAN")
        return content == b"\xff"

    def bits(self, what: str) -> bytes:
        """A BIT STRING's bytes; its unused bits must be zero, as DER asks."""
        content = self.raw(_BIT_STRING, what)
        if not content or content[0] > 7 or (len(content) == 1 and content[0]):
            raise CertificateError(f"{what}: not a DER BIT STRING")
        unused = content[0]
        if unused and content[-1] & ((1 << unused) - 1):
            raise CertificateError(f"{what}: not a DER BIT STRING")
        return content[1:]


_MAX_ARC_OCTETS: Final = 9
"""63 bits (Go's parser stops at 31): without a bound, a hostile OID's one arc would grow an
integer a step at a time, in quadratic time."""


def _oid(content: bytes, what: str) -> str:
    if not content or content[-1] & 0x80:
        raise CertificateError(f"{what}: not an OBJECT IDENTIFIER")
    arcs: list[int] = []
    value = 0
    fresh = True
    length = 0
    for byte in content:
        if fresh and byte == 0x80:
            raise CertificateError(f"{what}: not an OBJECT IDENTIFIER (padded arc)")
        length = 1 if fresh else length + 1
        if length > _MAX_ARC_OCTETS:
            raise CertificateError(f"{what}: an arc over {7 * _MAX_ARC_OCTETS} bits")
        value = (value << 7) | (byte & 0x7F)
        fresh = not byte & 0x80
        if fresh:
            arcs.append(value)
            value = 0
    first = min(arcs[0] // 40, 2)
    return ".".join(str(arc) for arc in (first, arcs[0] - 40 * first, *arcs[1:]))


def _time(der: _Der, what: str) -> datetime.datetime:
    tag = der.peek()
    if tag == _UTC_TIME:
        text = der.raw(_UTC_TIME, what)
        pattern, year_digits = _UTC_PATTERN, 2
    elif tag == _GENERALIZED_TIME:
        text = der.raw(_GENERALIZED_TIME, what)
        pattern, year_digits = _GENERALIZED_PATTERN, 4
    else:
        raise CertificateError(f"{what}: neither UTCTime nor GeneralizedTime")
    if not pattern.fullmatch(text):
        raise CertificateError(f"{what}: {text!r} is not a DER time")
    year = int(text[:year_digits])
    if year_digits == 2:
        year += 1900 if year >= 50 else 2000
    rest = text[year_digits:]
    try:
        return datetime.datetime(
            year,
            int(rest[0:2]),
            int(rest[2:4]),
            int(rest[4:6]),
            int(rest[6:8]),
            int(rest[8:10]),
            tzinfo=datetime.UTC,
        )
    except ValueError as error:
        raise CertificateError(f"{what}: {text!r} is not a date ({error})") from error


_UTC_PATTERN: Final = re.compile(rb"[0-9]{12}Z")
_GENERALIZED_PATTERN: Final = re.compile(rb"[0-9]{14}Z")


def _name(der: _Der, *, read: bool = True) -> str:
    """The Name as an RFC 4514 string, its RDNs last first; with ``read`` False, its shape is
    checked and its values are not decoded (the issuer: cryptography decodes one only when
    asked, and nothing here asks)."""
    rdns: list[str] = []
    while der.more():
        rdn = der.inner(_SET, "a name's RDN")
        if not rdn.more():
            raise CertificateError("a name's RDN is empty")
        attributes: list[str] = []
        encodings: list[bytes] = []
        while rdn.more():
            start = rdn.pos
            pair = rdn.inner(_SEQUENCE, "a name's attribute")
            encodings.append(rdn.data[start : rdn.pos])
            oid = pair.oid("a name attribute's type")
            tag = pair.peek()
            if tag is None:
                raise CertificateError("a name attribute without a value")
            value = pair.raw(tag, "a name attribute's value")
            pair.done("a name's attribute")
            if read:
                text = _attribute_text(oid, tag, value)
                attributes.append(f"{_ATTRIBUTE_NAMES.get(oid, oid)}={text}")
            elif tag in _CHECKED_ON_LOAD:
                _attribute_text(oid, tag, value)
        if not _in_der_order(encodings):
            raise CertificateError("a name's RDN: its attributes are not in DER's SET order")
        rdns.append("+".join(attributes))
    return ",".join(reversed(rdns))


def _in_der_order(encodings: list[bytes]) -> bool:
    """X.690 11.6: a SET OF's elements ascend as octet strings, the shorter padded with 0s."""
    for first, second in itertools.pairwise(encodings):
        width = max(len(first), len(second))
        if first.ljust(width, b"\0") > second.ljust(width, b"\0"):
            return False
    return True


_PRINTABLE: Final = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 '()+,-./:=?"
)
_CHARACTER_SETS: Final[dict[int, frozenset[int]]] = {
    0x13: _PRINTABLE,  # PrintableString
    0x16: frozenset(range(0x80)),  # IA5String
}
"""The string types whose characters cryptography checks (not NumericString's nor
VisibleString's)."""
_CHECKED_ON_LOAD: Final = frozenset({0x13, 0x16, 0x1C, 0x1E})
"""The string types cryptography checks in a name it is not asked to decode (the issuer's):
PrintableString, IA5String, UniversalString and BMPString; a UTF8String is checked when
decoded."""


def _attribute_text(oid: str, tag: int, value: bytes) -> str:
    if tag == _BIT_STRING and oid == _UNIQUE_IDENTIFIER:  # its octets in hex, as cryptography
        return "#" + binascii.hexlify(value).decode() if value else ""
    encoding = _TEXT.get(tag)
    if encoding is None:
        raise CertificateError(f"a name attribute's value: tag 0x{tag:02x} is not a string")
    allowed = _CHARACTER_SETS.get(tag)
    if allowed is not None and not allowed.issuperset(value):
        raise CertificateError(f"a name attribute's value: {value!r} is not a tag 0x{tag:02x}")
    try:
        return _escaped(value.decode(encoding))
    except UnicodeDecodeError as error:
        raise CertificateError(f"a name attribute's value: not {encoding} ({error})") from error


def _escaped(value: str) -> str:
    """RFC 4514 section 2.4, as cryptography's ``_escape_dn_value`` writes it."""
    if not value:
        return ""
    for special in ("\\", '"', "+", ",", ";", "<", ">"):
        value = value.replace(special, "\\" + special)
    value = value.replace("\0", "\\00")
    if value[0] == "#" or (value[0] == " " and len(value) > 1):
        value = "\\" + value
    if value[-1] == " ":
        value = value[:-1] + "\\ "
    return value


def _public_key(info: _Der) -> PublicKey:
    algorithm = info.inner(_SEQUENCE, "the public key's algorithm")
    oid = algorithm.oid("the public key's algorithm")
    key = info.bits("the public key")
    info.done("the public key")
    if oid == _RSA:
        if algorithm.peek() == _NULL:
            algorithm.raw(_NULL, "the RSA key's parameters")
        algorithm.done("the public key's algorithm")
        numbers = _Der(key).inner(_SEQUENCE, "the RSA key")
        modulus = numbers.integer("the RSA modulus")
        exponent = numbers.integer("the RSA exponent")
        numbers.done("the RSA key")
        if modulus <= 0 or not modulus & 1:
            raise CertificateError("the RSA key: its modulus is not a positive odd number")
        if not 3 <= exponent < 2**31 or not exponent & 1:  # Go: an odd int; cryptography: odd
            raise CertificateError(f"the RSA key: exponent {exponent} is not odd, from 3 to 2³¹")
        return PublicKey("rsa", oid, bits=modulus.bit_length())
    if oid == _EC:
        curve_oid = algorithm.oid("the EC key's curve")
        algorithm.done("the public key's algorithm")
        curve = _CURVES.get(curve_oid)
        if curve is None:  # not a curve cryptography reads either
            return PublicKey("other", f"{oid} on curve {curve_oid}")
        size = curve.size
        if len(key) != 1 + 2 * size or key[0] != 0x04:
            raise CertificateError(f"the {curve.name} key: not an uncompressed point")
        x = int.from_bytes(key[1 : 1 + size], "big")
        y = int.from_bytes(key[1 + size :], "big")
        if not curve.holds(x, y):
            raise CertificateError(f"the {curve.name} key: a point not on the curve")
        return PublicKey("ec", oid, curve=curve.name)
    if oid == _ED25519:
        algorithm.done("the public key's algorithm")
        if len(key) != 32:
            raise CertificateError("the Ed25519 key: not 32 bytes")
        return PublicKey("ed25519", oid)
    _parameters(algorithm, "the public key's algorithm")
    return PublicKey("other", oid)


def _parameters(algorithm: _Der, what: str) -> None:
    """An AlgorithmIdentifier's parameters, when it has any: one DER element, unread."""
    tag = algorithm.peek()
    if tag is not None:
        algorithm.raw(tag, f"{what}'s parameters")
    algorithm.done(what)


def _signature_algorithm(der: _Der, what: str) -> None:
    """An AlgorithmIdentifier, checked for shape only (no signature is checked here)."""
    algorithm = der.inner(_SEQUENCE, what)
    algorithm.oid(what)
    _parameters(algorithm, what)


def _extensions(der: _Der) -> dict[str, bytes]:
    """Each extension's value by OID; the same OID twice is refused, as Go does."""
    found: dict[str, bytes] = {}
    listed = der.inner(_SEQUENCE, "the extensions")
    der.done("the extensions")
    if not listed.more():
        raise CertificateError("the extensions: an empty list")
    while listed.more():
        extension = listed.inner(_SEQUENCE, "an extension")
        oid = extension.oid("an extension's OID")
        if extension.peek() == _BOOLEAN and not extension.boolean("an extension's critical"):
            raise CertificateError(f"extension {oid}: critical FALSE encoded (not DER)")
        value = extension.raw(_OCTET_STRING, f"extension {oid}")
        extension.done(f"extension {oid}")
        if oid in found:
            raise CertificateError(f"extension {oid} appears twice")
        found[oid] = value
    return found


_EXTENSION_TAGS: Final = {
    "2.5.29.14": _OCTET_STRING,  # subjectKeyIdentifier
    "2.5.29.15": _BIT_STRING,  # keyUsage
    "2.5.29.17": _SEQUENCE,  # subjectAltName
    "2.5.29.18": _SEQUENCE,  # issuerAltName
    "2.5.29.19": _SEQUENCE,  # basicConstraints
    "2.5.29.30": _SEQUENCE,  # nameConstraints
    "2.5.29.31": _SEQUENCE,  # cRLDistributionPoints
    "2.5.29.32": _SEQUENCE,  # certificatePolicies
    "2.5.29.35": _SEQUENCE,  # authorityKeyIdentifier
    "2.5.29.37": _SEQUENCE,  # extKeyUsage
    "1.3.6.1.5.5.7.1.1": _SEQUENCE,  # authorityInfoAccess
}
"""The outer type of the common extensions' values. Past basicConstraints and keyUsage, which
are read, an extension's value is checked to be one DER element of its type, no deeper."""


def _extensions_problem(extensions: dict[str, bytes]) -> str | None:
    for oid, value in extensions.items():
        whole = _Der(value)
        if whole.peek() is None:
            return f"extension {oid}: empty"
        try:
            whole.raw(_EXTENSION_TAGS.get(oid, value[0]), f"extension {oid}")
            whole.done(f"extension {oid}")
        except CertificateError as error:
            return str(error)
    return None


def _basic_constraints(value: bytes) -> bool:
    fields = _Der(value).inner(_SEQUENCE, "basicConstraints")
    ca = False
    if fields.peek() == _BOOLEAN:
        ca = fields.boolean("basicConstraints' cA")
        if not ca:
            raise CertificateError("basicConstraints: cA FALSE encoded (not DER)")
    if fields.peek() == _INTEGER and fields.integer("basicConstraints' pathLen") < 0:
        raise CertificateError("basicConstraints: a negative pathLen")
    fields.done("basicConstraints")
    return ca


def _key_cert_sign(value: bytes) -> bool:
    outer = _Der(value)
    bits = outer.bits("keyUsage")
    outer.done("keyUsage")
    first = bits[0] if bits else 0
    second = bits[1] if len(bits) > 1 else 0
    if (first & 0x01 or second & 0x80) and not first & 0x08:
        raise CertificateError("keyUsage: encipherOnly or decipherOnly without keyAgreement")
    return bool(first & 0x04)  # bit 5, keyCertSign (bit 0 is the first octet's 0x80)


def _read_extension(
    extensions: dict[str, bytes], oid: str, read: Callable[[bytes], bool]
) -> bool | None:
    value = extensions.get(oid)
    return None if value is None else read(value)


def read_der(der: bytes) -> Certificate:
    """One certificate from its DER; :class:`CertificateError` if it is not one."""
    outer = _Der(der)
    certificate = outer.inner(_SEQUENCE, "the certificate")
    outer.done("the certificate")
    tbs = certificate.inner(_SEQUENCE, "the TBSCertificate")
    _signature_algorithm(certificate, "the signature algorithm")
    certificate.bits("the signature")
    certificate.done("the certificate")
    if tbs.peek() == _VERSION:
        version = tbs.inner(_VERSION, "the version")
        number = version.integer("the version")
        version.done("the version")
        if number not in (1, 2):  # v2, v3; v1 is encoded by leaving the field out
            raise CertificateError(f"the version: {number} is not a DER X.509 version")
    tbs.integer("the serial number")  # negative: accepted, as cryptography (warning) does
    _signature_algorithm(tbs, "the TBSCertificate's signature algorithm")
    _name(tbs.inner(_SEQUENCE, "the issuer"), read=False)
    validity = tbs.inner(_SEQUENCE, "the validity")
    not_before = _time(validity, "notBefore")
    not_after = _time(validity, "notAfter")
    validity.done("the validity")
    subject = _name(tbs.inner(_SEQUENCE, "the subject"))
    public_key = _public_key(tbs.inner(_SEQUENCE, "the subject public key info"))
    for tag, what in ((_ISSUER_UID, "the issuer's unique ID"), (_SUBJECT_UID, "the subject's")):
        if tbs.peek() == tag:
            tbs.raw(tag, what)
    extensions: dict[str, bytes] = {}
    if tbs.peek() == _EXTENSIONS:
        extensions = _extensions(tbs.inner(_EXTENSIONS, "the extensions"))
    tbs.done("the TBSCertificate")
    try:
        problem = _extensions_problem(extensions)
        ca = _read_extension(extensions, _BASIC_CONSTRAINTS, _basic_constraints)
        key_cert_sign = _read_extension(extensions, _KEY_USAGE, _key_cert_sign)
    except CertificateError as error:
        problem = str(error)
    if problem is not None:
        return Certificate(der, subject, not_before, not_after, public_key, None, None, problem)
    return Certificate(der, subject, not_before, not_after, public_key, ca, key_cert_sign)


# Markers only: pairing them in one pass keeps parsing linear (a pattern spanning BEGIN to
# END rescans the rest of the text from every unmatched BEGIN).
_PEM_MARKER: Final = re.compile(r"-----(BEGIN|END) ([^\r\n-]*)-----")
_BASE64_SPACE: Final = re.compile(r"[ \t\r\n]+")


@dataclass(frozen=True, slots=True)
class PemBlock:
    """One BEGIN..END block: its two labels (which may differ), its text from the BEGIN line
    to the END line, and where its body lies in that text."""

    begin: str
    end: str
    text: str
    body: slice


def pem_blocks(text: str) -> tuple[list[PemBlock], bool]:
    """The BEGIN..END blocks of ``text`` in one linear pass, and whether any marker was left
    unpaired (a BEGIN read again before its END starts the block anew). Text between blocks
    is ignored, as PEM allows."""
    blocks: list[PemBlock] = []
    unpaired = False
    opened: re.Match[str] | None = None
    for marker in _PEM_MARKER.finditer(text):
        if marker.group(1) == "BEGIN":
            unpaired = unpaired or opened is not None
            opened = marker
        elif opened is None:
            unpaired = True
        else:
            start = opened.start()
            body = slice(opened.end() - start, marker.start() - start)
            blocks.append(
                PemBlock(opened.group(2), marker.group(2), text[start : marker.end()], body)
            )
            opened = None
    return blocks, unpaired or opened is not None


def read_pem(block: str) -> Certificate:
    """The one certificate of a ``-----BEGIN CERTIFICATE-----`` block (text around it is
    ignored); :class:`CertificateError` if it holds none or it is not one."""
    found = read_pem_bundle(block)
    if len(found) != 1:
        raise CertificateError(f"{len(found)} certificates where one was expected")
    return found[0]


def read_pem_bundle(text: str) -> list[Certificate]:
    """Every ``CERTIFICATE`` block of ``text``, in order (blocks of other labels, unpaired
    markers and the text around them are passed over); :class:`CertificateError` if there is
    none or one is not a certificate."""
    found: list[Certificate] = []
    for block in pem_blocks(text)[0]:
        if block.begin != "CERTIFICATE" or block.end != "CERTIFICATE":
            continue
        body = _BASE64_SPACE.sub("", block.text[block.body])
        try:
            der = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError) as error:
            raise CertificateError(f"not base64 ({error})") from error
        found.append(read_der(der))
    if not found:
        raise CertificateError("no -----BEGIN CERTIFICATE----- block")
    return found
