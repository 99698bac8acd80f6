"""What a controller reads of an X.509 certificate, from its DER, without cryptography.

``cryptography`` costs ``linkerd-config run`` 17 ms and 7-8 MiB (its Rust library's pages)
the first time a certificate is read, which is the first reconcile, as the caches fill: more
than a fifth of the whole process at 1,000 pods (issue 40). What reconciles read of a trust
anchor is little (its fingerprint, subject, validity, basicConstraints, keyUsage and public
key), and none of it needs a signature checked or a key used: that is what this module reads.
Certificates are still *made* with cryptography (``kube.certs``, tests).

What it accepts is what cryptography (which read them before) accepts: DER with definite
minimal lengths and nothing trailing, SET OF in DER's order, the string types cryptography
checks, algorithm parameters of the type each known algorithm takes, an EC point on its
curve, RSA numbers cryptography takes, the common extensions' structure (what cryptography
refuses to read a certificate's extensions over is ``extensions_error``). Anything else is a
:class:`CertificateError` naming what is wrong, never another exception, in time linear in
the input. ``tests/unit/kube/test_x509_reader.py`` checks every field against cryptography's
reading of the same certificates, that damaged ones are accepted exactly when cryptography
accepts them (hypothesis), and hand-built edges. Where it departs on purpose, keys Go's
``crypto/x509`` does not take (so Linkerd cannot use): an RSASSA-PSS key or one on a curve
outside SEC 2's reads as ``other``, and an EC key with explicit curve parameters is refused.
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
    0x04: "utf-8",  # OCTET STRING, UTCTime, GeneralizedTime: read as UTF-8, as cryptography
    0x17: "utf-8",  # does (its _ASN1Type)
    0x18: "utf-8",
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

    def point(self, key: bytes) -> bool:
        """Whether ``key`` is a point on the curve (SEC 1 2.3.4): uncompressed (04), hybrid
        (06, 07: y's parity too) or compressed (02, 03: some y exists), not infinity."""
        size = (self.p.bit_length() + 7) // 8
        form = key[0] if key else 0
        if form in (0x04, 0x06, 0x07) and len(key) == 1 + 2 * size:
            x = int.from_bytes(key[1 : 1 + size], "big")
            y = int.from_bytes(key[1 + size :], "big")
            if form != 0x04 and y & 1 != form & 1:
                return False
            return x < self.p and y < self.p and (y * y - self._rhs(x)) % self.p == 0
        if form in (0x02, 0x03) and len(key) == 1 + size:
            x = int.from_bytes(key[1:], "big")
            # Euler's criterion: x³ + ax + b is a square (0 is: y = 0).
            return x < self.p and pow(self._rhs(x), (self.p - 1) // 2, self.p) in (0, 1)
        return False

    def _rhs(self, x: int) -> int:
        return (x**3 + self.a * x + self.b) % self.p


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
    """Why the extensions cannot be read as cryptography reads them (then ``ca`` and
    ``key_cert_sign`` are None; ``UNCHECKED_EXTENSIONS`` are not looked into); None when
    they can."""
    extensions: tuple[str, ...] = ()
    """The OIDs of its extensions, in order."""

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
        if pos >= self.end:
            raise CertificateError(f"{what}: truncated")
        if data[pos] != tag:
            raise CertificateError(f"{what}: tag 0x{data[pos]:02x}, expected 0x{tag:02x}")
        if tag & 0x1F == 0x1F:  # no field this reader reads has one
            raise CertificateError(f"{what}: a high tag number")
        return self._content(pos + 1, what)

    def skip(self, what: str) -> None:
        """Past the next element, whatever its tag (high tag numbers too), unread."""
        data, pos = self.data, self.pos
        if pos >= self.end:
            raise CertificateError(f"{what}: truncated")
        if data[pos] & 0x1F == 0x1F:  # the tag's number goes on while 0x80 is set
            pos += 1
            while pos < self.end and data[pos] & 0x80:
                pos += 1
        self._content(pos + 1, what)

    def _content(self, pos: int, what: str) -> tuple[int, int]:
        """The content whose definite DER length starts at ``pos``, past the tag; the cursor
        is moved past it."""
        data = self.data
        if pos >= self.end:
            raise CertificateError(f"{what}: truncated")
        length = data[pos]
        pos += 1
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

    def integer(self, what: str, tag: int = _INTEGER) -> int:
        """An INTEGER (``tag``: when implicitly tagged), in its shortest encoding."""
        content = self.raw(tag, what)
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

    def bits(self, what: str, tag: int = _BIT_STRING) -> bytes:
        """A BIT STRING's bytes (``tag``: when implicitly tagged); its unused bits must be
        zero, as DER asks."""
        content = self.raw(tag, what)
        if not content or content[0] > 7 or (len(content) == 1 and content[0]):
            raise CertificateError(f"{what}: not a DER BIT STRING")
        unused = content[0]
        if unused and content[-1] & ((1 << unused) - 1):
            raise CertificateError(f"{what}: not a DER BIT STRING")
        return content[1:]


_MAX_OID_OCTETS: Final = 63
"""cryptography's bound on an OID's encoding (it also bounds the work: a hostile arc of
200 KB would grow an integer a step at a time, in quadratic time)."""


def _oid(content: bytes, what: str) -> str:
    if not content or content[-1] & 0x80:
        raise CertificateError(f"{what}: not an OBJECT IDENTIFIER")
    if len(content) > _MAX_OID_OCTETS:
        raise CertificateError(f"{what}: an OBJECT IDENTIFIER over {_MAX_OID_OCTETS} octets")
    arcs: list[int] = []
    value = 0
    fresh = True
    for byte in content:
        if fresh and byte == 0x80:
            raise CertificateError(f"{what}: not an OBJECT IDENTIFIER (padded arc)")
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


def _name(der: _Der, *, read: bool = True, rdn_tag: int = _SET) -> str:
    """The Name as an RFC 4514 string, its RDNs last first; with ``read`` False, its shape is
    checked and its values are not decoded (the issuer: cryptography decodes one only when
    asked, and nothing here asks). ``rdn_tag``: its RDNs' (one implicitly tagged elsewhere)."""
    rdns: list[str] = []
    while der.more():
        rdn = der.inner(rdn_tag, "a name's RDN")
        if not rdn.more():
            raise CertificateError("a name's RDN is empty")
        attributes: list[str] = []
        seen: set[str] = set()
        encodings: list[bytes] = []
        while rdn.more():
            start = rdn.pos
            pair = rdn.inner(_SEQUENCE, "a name's attribute")
            encodings.append(rdn.data[start : rdn.pos])
            oid = pair.oid("a name attribute's type")
            tag = pair.peek()
            if tag is None:
                raise CertificateError("a name attribute without a value")
            if not read and tag & 0x1F == 0x1F:  # kept whole, unread, by cryptography
                pair.skip("a name attribute's value")
                pair.done("a name's attribute")
                continue
            value = pair.raw(tag, "a name attribute's value")
            pair.done("a name's attribute")
            if read:
                text = f"{_ATTRIBUTE_NAMES.get(oid, oid)}={_attribute_text(oid, tag, value)}"
                if text in seen:  # the same type and value (escaping is one-to-one)
                    raise CertificateError(f"a name's RDN holds {text!r} twice")
                seen.add(text)
                attributes.append(text)
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
"""PrintableString's characters: the only string type whose characters cryptography checks
(not IA5String's, NumericString's nor VisibleString's)."""
_PRINTABLE_STRING: Final = 0x13
_CHECKED_ON_LOAD: Final = frozenset({_PRINTABLE_STRING, 0x1C, 0x1E})
"""The string types cryptography checks in a name it is not asked to decode (the issuer's):
PrintableString, UniversalString and BMPString; a UTF8String is checked when decoded."""


def _attribute_text(oid: str, tag: int, value: bytes) -> str:
    if tag == _BIT_STRING and oid == _UNIQUE_IDENTIFIER:  # its octets in hex, as cryptography
        return "#" + binascii.hexlify(value).decode() if value else ""
    encoding = _TEXT.get(tag)
    if encoding is None:
        raise CertificateError(f"a name attribute's value: tag 0x{tag:02x} is not a string")
    if tag == _PRINTABLE_STRING and not _PRINTABLE.issuperset(value):
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
        _parameters(algorithm, "the public key's algorithm", oid)
        whole = _Der(key)
        numbers = whole.inner(_SEQUENCE, "the RSA key")
        whole.done("the RSA key")
        modulus = numbers.integer("the RSA modulus")
        exponent = numbers.integer("the RSA exponent")
        numbers.done("the RSA key")
        # cryptography's checks; numbers are never written into a message (one of 5,000
        # digits cannot be turned into text).
        if modulus < 3:
            raise CertificateError("the RSA key: a modulus under 3")
        if not 3 <= exponent < modulus or not exponent & 1:
            raise CertificateError("the RSA key: an exponent not odd, from 3 to the modulus")
        return PublicKey("rsa", oid, bits=modulus.bit_length())
    if oid == _EC:
        curve_oid = algorithm.oid("the EC key's curve")
        algorithm.done("the public key's algorithm")
        curve = _CURVES.get(curve_oid)
        if curve is None:  # not a curve cryptography reads either
            return PublicKey("other", f"{oid} on curve {curve_oid}")
        if not curve.point(key):
            raise CertificateError(f"the {curve.name} key: not a point on the curve")
        return PublicKey("ec", oid, curve=curve.name)
    _parameters(algorithm, "the public key's algorithm", oid)
    size = _KEY_SIZES.get(oid)
    if size is not None and len(key) != size:
        raise CertificateError(f"the {oid} key: not {size} bytes")
    return PublicKey("ed25519" if oid == _ED25519 else "other", oid)


_KEY_SIZES: Final = {_ED25519: 32, "1.3.101.113": 57, "1.3.101.110": 32, "1.3.101.111": 56}
"""The lengths of Ed25519, Ed448, X25519 and X448 keys."""

_NONE: Final = -1
"""In ``_PARAMETER_TAGS``: no parameters at all."""
_ABSENT: Final = frozenset({_NONE})
_NULL_OR_ABSENT: Final = frozenset({_NONE, _NULL})
_PARAMETER_TAGS: Final[dict[str, frozenset[int]]] = {
    **dict.fromkeys(
        (
            "1.2.840.10045.4.1",  # ecdsa-with-SHA1
            "1.2.840.10045.4.3.1",  # ecdsa-with-SHA224 .. SHA512
            "1.2.840.10045.4.3.2",
            "1.2.840.10045.4.3.3",
            "1.2.840.10045.4.3.4",
            "2.16.840.1.101.3.4.3.1",  # dsa-with-sha224, sha256
            "2.16.840.1.101.3.4.3.2",
            *_KEY_SIZES,
        ),
        _ABSENT,
    ),
    **dict.fromkeys(
        (f"1.2.840.113549.1.1.{n}" for n in (1, 4, 5, 11, 12, 13, 14)),  # rsaEncryption, RSA
        _NULL_OR_ABSENT,  # with MD5, SHA-1, SHA-256, -384, -512, -224
    ),
    "1.2.840.113549.1.1.10": frozenset({_NONE, _SEQUENCE}),  # RSASSA-PSS
    "1.2.840.10040.4.1": frozenset({_SEQUENCE}),  # DSA's key, with its domain parameters
}
"""What parameters cryptography lets the algorithms it knows have (none, NULL, a structure);
an algorithm it does not know may have any one element."""


def _parameters(algorithm: _Der, what: str, oid: str) -> None:
    """An AlgorithmIdentifier's parameters, after its OID: one element of the type its
    algorithm allows (unread), or none where allowed."""
    allowed = _PARAMETER_TAGS.get(oid)
    tag = algorithm.peek()
    if tag is None:
        if allowed is not None and _NONE not in allowed:
            raise CertificateError(f"{what}: {oid} without its parameters")
    elif allowed is None:
        algorithm.skip(what)
    elif tag not in allowed:
        raise CertificateError(f"{what}: parameters {oid} does not take")
    elif tag == _NULL:
        if algorithm.raw(_NULL, what):
            raise CertificateError(f"{what}: a NULL with content")
    else:
        algorithm.raw(tag, what)
    algorithm.done(what)


def _signature_algorithm(der: _Der, what: str) -> None:
    """An AlgorithmIdentifier, checked for shape only (no signature is checked here)."""
    algorithm = der.inner(_SEQUENCE, what)
    _parameters(algorithm, what, algorithm.oid(what))


def _extensions(der: _Der) -> dict[str, bytes]:
    """Each extension's value by OID; the same OID twice is refused, as cryptography does."""
    found: dict[str, bytes] = {}
    listed = der.inner(_SEQUENCE, "the extensions")
    der.done("the extensions")
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


def _general_name(der: _Der, what: str, addresses: tuple[int, int] = (4, 16)) -> None:
    """One GeneralName, as far as cryptography checks it when it reads the extension
    (``addresses``: the lengths an iPAddress may have; a name constraint's is a network)."""
    tag = der.peek()
    if tag in (0x81, 0x82, 0x86):  # rfc822Name, dNSName, URI: IA5String, read as UTF-8
        _utf8(der.raw(tag, what), what)
    elif tag == 0x87:  # iPAddress
        address = der.raw(tag, what)
        if len(address) not in addresses:
            raise CertificateError(f"{what}: an IP address of a length not in {addresses}")
        if len(address) in (8, 32) and not _network(address):
            raise CertificateError(f"{what}: not a network (a mask not a prefix, or host bits)")
    elif tag == 0x88:  # registeredID
        _oid(der.raw(tag, what), what)
    elif tag == 0xA0:  # otherName: a type and an explicitly tagged value, one element
        other = der.inner(tag, what)
        other.oid(what)
        value = other.inner(0xA0, what)
        other.done(what)
        if not value.more():
            raise CertificateError(f"{what}: an otherName without its value")
        # One element, read as cryptography reads it: a tag and a definite length, its
        # content opaque (a constructed one is not descended into).
        tag = value.peek()
        assert tag is not None  # more() said so
        value.inner(tag, what)
        value.done(what)
    elif tag == 0xA4:  # directoryName: its values decoded, as cryptography does on reading it
        outer = der.inner(tag, what)
        _name(outer.inner(_SEQUENCE, what))
        outer.done(what)
    else:
        raise CertificateError(f"{what}: not a GeneralName this reader knows")


def _network(address: bytes) -> bool:
    """A name constraint's iPAddress: an address, then a prefix mask its host bits are 0 in."""
    half = len(address) // 2
    host = int.from_bytes(address[:half], "big")
    mask = int.from_bytes(address[half:], "big")
    inverted = ~mask & ((1 << (8 * half)) - 1)
    return inverted & (inverted + 1) == 0 and host & inverted == 0


def _general_names(names: _Der, what: str) -> None:
    """Every GeneralName of ``names`` (an opened GeneralNames)."""
    while names.more():
        _general_name(names, what)


def _check_alternative_names(value: _Der, what: str) -> None:
    _general_names(value.inner(_SEQUENCE, what), what)


def _check_key_usages(value: _Der, what: str) -> None:
    usages = value.inner(_SEQUENCE, what)
    if not usages.more():
        raise CertificateError(f"{what}: empty")
    while usages.more():
        usages.oid(what)


def _check_authority_key(value: _Der, what: str) -> None:
    fields = value.inner(_SEQUENCE, what)
    if fields.peek() == 0x80:
        fields.raw(0x80, what)
    issuer = fields.peek() == 0xA1
    if issuer:
        names = fields.inner(0xA1, what)
        if not names.more():
            raise CertificateError(f"{what}: an empty authorityCertIssuer")
        _general_names(names, what)
    if (fields.peek() == 0x82) != issuer:
        raise CertificateError(f"{what}: an issuer without a serial number, or the reverse")
    if issuer:
        fields.raw(0x82, what)
    fields.done(what)


def _check_sequence_of(value: _Der, what: str, check: Callable[[_Der, str], None]) -> None:
    items = value.inner(_SEQUENCE, what)
    while items.more():
        item = items.inner(_SEQUENCE, what)
        check(item, what)
        item.done(what)


_CPS: Final = "1.3.6.1.5.5.7.2.1"
_USER_NOTICE: Final = "1.3.6.1.5.5.7.2.2"


def _policy(item: _Der, what: str) -> None:
    item.oid(what)
    if not item.more():
        return
    qualifiers = item.inner(_SEQUENCE, what)
    while qualifiers.more():
        qualifier = qualifiers.inner(_SEQUENCE, what)
        kind = qualifier.oid(what)
        if qualifier.peek() == 0x16 and kind == _CPS:
            _utf8(qualifier.raw(0x16, what), what)
        elif qualifier.peek() == _SEQUENCE and kind == _USER_NOTICE:
            _well_formed(qualifier.inner(_SEQUENCE, what), what)
        else:
            raise CertificateError(f"{what}: a policy qualifier neither a CPS nor a notice")
        qualifier.done(what)


def _utf8(value: bytes, what: str) -> None:
    try:
        value.decode()
    except UnicodeDecodeError as error:
        raise CertificateError(f"{what}: not UTF-8 ({error})") from error


def _access(item: _Der, what: str) -> None:
    item.oid(what)
    _general_name(item, what)


def _distribution_point(item: _Der, what: str) -> None:
    if not item.more():
        raise CertificateError(f"{what}: an empty distribution point")
    if item.peek() == 0xA0:  # distributionPoint: a fullName or a name relative to the issuer
        point = item.inner(0xA0, what)
        if point.peek() == 0xA0:
            _general_names(point.inner(0xA0, what), what)
        else:
            _name(point, rdn_tag=0xA1)
    if item.peek() == 0x81:  # reasons
        item.bits(what, 0x81)
    if item.peek() == 0xA2:  # cRLIssuer
        _general_names(item.inner(0xA2, what), what)


def _subtrees(item: _Der, what: str) -> None:
    _general_name(item, what, (8, 32))
    _well_formed(item, what)


def _check_name_constraints(value: _Der, what: str) -> None:
    fields = value.inner(_SEQUENCE, what)
    if not fields.more():
        raise CertificateError(f"{what}: neither permitted nor excluded subtrees")
    for tag in (0xA0, 0xA1):
        if fields.peek() == tag:
            trees = fields.inner(tag, what)
            if not trees.more():
                raise CertificateError(f"{what}: empty subtrees")
            while trees.more():
                tree = trees.inner(_SEQUENCE, what)
                _subtrees(tree, what)
    fields.done(what)


_MAX_DEPTH: Final = 32


def _well_formed(der: _Der, what: str, depth: int = 0, elements: int | None = None) -> None:
    """Every element of ``der`` is DER (definite minimal lengths, low tag numbers), the
    constructed ones' too, down to a bounded depth; ``elements``: how many there must be."""
    if depth > _MAX_DEPTH:
        raise CertificateError(f"{what}: nested over {_MAX_DEPTH} deep")
    found = 0
    while der.more():
        found += 1
        tag = der.peek()
        assert tag is not None  # more() said so
        inner = der.inner(tag, what)
        if tag & 0x20:
            _well_formed(inner, what, depth + 1)
    if elements is not None and found != elements:
        raise CertificateError(f"{what}: {found} elements where {elements} belong")


def _check_octet_string(value: _Der, what: str) -> None:
    value.raw(_OCTET_STRING, what)


def _check_policy_constraints(value: _Der, what: str) -> None:
    fields = value.inner(_SEQUENCE, what)
    if not fields.more():
        raise CertificateError(f"{what}: neither requireExplicitPolicy nor inhibitPolicyMapping")
    for tag in (0x80, 0x81):
        if fields.peek() == tag and fields.integer(what, tag) < 0:
            raise CertificateError(f"{what}: a negative skip count")
    fields.done(what)


def _check_inhibit_any_policy(value: _Der, what: str) -> None:
    if value.integer(what) < 0:
        raise CertificateError(f"{what}: a negative skip count")


_TLS_FEATURES: Final = frozenset({5, 17})  # status_request, status_request_v2


def _check_tls_features(value: _Der, what: str) -> None:
    features = value.inner(_SEQUENCE, what)
    if not features.more():
        raise CertificateError(f"{what}: empty")
    while features.more():
        if features.integer(what) not in _TLS_FEATURES:
            raise CertificateError(f"{what}: a TLS feature cryptography does not know")


def _check_private_key_usage_period(value: _Der, what: str) -> None:
    fields = value.inner(_SEQUENCE, what)
    if not fields.more():
        raise CertificateError(f"{what}: neither notBefore nor notAfter")
    for tag in (0x80, 0x81):
        if fields.peek() == tag and not _GENERALIZED_PATTERN.fullmatch(fields.raw(tag, what)):
            raise CertificateError(f"{what}: not a GeneralizedTime")
    fields.done(what)


_EXTENSION_CHECKS: Final[dict[str, Callable[[_Der, str], None]]] = {
    "2.5.29.14": _check_octet_string,  # subjectKeyIdentifier
    "2.5.29.17": _check_alternative_names,  # subjectAltName
    "2.5.29.18": _check_alternative_names,  # issuerAltName
    "2.5.29.30": _check_name_constraints,
    "2.5.29.16": _check_private_key_usage_period,
    "2.5.29.31": lambda value, what: _check_sequence_of(value, what, _distribution_point),
    "2.5.29.46": lambda value, what: _check_sequence_of(value, what, _distribution_point),
    "2.5.29.32": lambda value, what: _check_sequence_of(value, what, _policy),
    "2.5.29.35": _check_authority_key,
    "2.5.29.36": _check_policy_constraints,
    "2.5.29.37": _check_key_usages,  # extKeyUsage
    "2.5.29.54": _check_inhibit_any_policy,
    "1.3.6.1.5.5.7.1.1": lambda value, what: _check_sequence_of(value, what, _access),
    "1.3.6.1.5.5.7.1.11": lambda value, what: _check_sequence_of(value, what, _access),
    "1.3.6.1.5.5.7.1.24": _check_tls_features,
}
"""What is checked of the extensions cryptography reads besides the two read here
(basicConstraints and keyUsage): their structure, as far as cryptography refuses to read a
certificate's extensions when it is wrong. An extension cryptography does not know is not
looked into, as it is not; nor, unlike cryptography, are the rarest it knows (OCSP no-check,
signed certificate timestamps, the precertificate poison, Microsoft's certificate template,
admissions): a malformed one of those passes here."""

UNCHECKED_EXTENSIONS: Final = frozenset(
    {
        "1.3.6.1.5.5.7.48.1.5",  # OCSP no-check
        "1.3.6.1.4.1.11129.2.4.2",  # signed certificate timestamps
        "1.3.6.1.4.1.11129.2.4.3",  # the precertificate poison
        "1.3.6.1.4.1.311.21.7",  # Microsoft's certificate template
        "1.3.36.8.3.3",  # admissions
    }
)
"""The extensions cryptography reads and this reader does not look into."""


def _extensions_problem(extensions: dict[str, bytes]) -> str | None:
    for oid, value in extensions.items():
        check = _EXTENSION_CHECKS.get(oid)
        if check is None:
            continue
        whole = _Der(value)
        what = f"extension {oid}"
        try:
            check(whole, what)
            whole.done(what)
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
    if fields.peek() == _INTEGER:
        length = fields.integer("basicConstraints' pathLen")
        if not 0 <= length < 2**64:
            raise CertificateError("basicConstraints: a pathLen not from 0 to 2⁶⁴")
        if not ca:
            raise CertificateError("basicConstraints: a pathLen without cA")
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
        if number != 2:  # v3; v1 is encoded by leaving the field out, v2 is refused
            raise CertificateError("the version: not v3 (v1 is the field left out)")
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
            tbs.bits(what, tag)
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
        ca = key_cert_sign = None
    return Certificate(
        der,
        subject,
        not_before,
        not_after,
        public_key,
        ca,
        key_cert_sign,
        problem,
        tuple(extensions),
    )


# Markers only: pairing them in one pass keeps parsing linear (a pattern spanning BEGIN to
# END rescans the rest of the text from every unmatched BEGIN).
_PEM_MARKER: Final = re.compile(r"-----(BEGIN|END) ([^\r\n-]*)-----")
_BASE64_SPACE: Final = re.compile(r"[ \t\r\n]+")
_CERTIFICATE_LABELS: Final = frozenset({"CERTIFICATE", "X509 CERTIFICATE"})
"""The labels cryptography reads a certificate under."""


@dataclass(frozen=True, slots=True)
class PemBlock:
    """One BEGIN..END block: its two labels (which may differ), its text from the BEGIN line
    to the END line, and where its body lies in that text."""

    begin: str
    end: str
    text: str
    body: slice


def pem_blocks(text: str) -> tuple[list[PemBlock], str]:
    """The BEGIN..END blocks of ``text`` in one linear pass, and the first marker left
    unpaired: ``BEGIN`` (one without its END; a BEGIN read again before its END starts the
    block anew), ``END`` (one without a BEGIN), or "" when none is. Text between blocks is
    ignored, as PEM allows."""
    blocks: list[PemBlock] = []
    unpaired = ""
    opened: re.Match[str] | None = None
    for marker in _PEM_MARKER.finditer(text):
        if marker.group(1) == "BEGIN":
            if opened is not None:
                unpaired = unpaired or "BEGIN"
            opened = marker
        elif opened is None:
            unpaired = unpaired or "END"
        else:
            start = opened.start()
            body = slice(opened.end() - start, marker.start() - start)
            blocks.append(
                PemBlock(opened.group(2), marker.group(2), text[start : marker.end()], body)
            )
            opened = None
    return blocks, unpaired or ("BEGIN" if opened is not None else "")


def read_block(block: PemBlock) -> Certificate:
    """The certificate a block found by :func:`pem_blocks` holds (its labels are the
    caller's to check); :class:`CertificateError` if its body is not one."""
    body = _BASE64_SPACE.sub("", block.text[block.body])
    try:
        der = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError) as error:
        raise CertificateError(f"not base64 ({error})") from error
    return read_der(der)


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
        if block.begin == block.end and block.begin in _CERTIFICATE_LABELS:
            found.append(read_block(block))
    if not found:
        raise CertificateError("no -----BEGIN CERTIFICATE----- block")
    return found
