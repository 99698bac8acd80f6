"""Trust anchors made on the fly, as Linkerd's docs make them with the step CLI
(``step certificate create root.linkerd.cluster.local ca.crt ca.key --profile root-ca
--no-password --insecure``): a self-signed EC P-256 CA, basicConstraints CA:TRUE with path
length 1 and keyUsage certSign/cRLSign, both critical, valid for ten years. And the issuer
Linkerd's identity controller signs with, as the same docs make it (``step certificate create
identity.linkerd.cluster.local issuer.crt issuer.key --profile intermediate-ca --not-after
8760h --no-password --insecure --ca ca.crt --ca-key ca.key``)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from cryptography.x509.oid import NameOID

from devcluster.linkerd_control_plane import IdentityCredentials

_CA_USAGE = x509.KeyUsage(
    digital_signature=False,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=True,
    crl_sign=True,
    encipher_only=False,
    decipher_only=False,
)


def trust_anchor(
    cn: str = "root.linkerd.cluster.local",
    *,
    valid_from: datetime.datetime | None = None,
    valid_until: datetime.datetime | None = None,
) -> str:
    """A new root CA (a new key each call) as PEM, ending in a newline as step writes it;
    valid from five minutes ago for ten years unless told."""
    cert, _key = _root(cn, valid_from, valid_until)
    return cert.public_bytes(Encoding.PEM).decode()


def _root(
    cn: str, valid_from: datetime.datetime | None, valid_until: datetime.datetime | None
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid_from or now - datetime.timedelta(minutes=5))
        .not_valid_after(valid_until or now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
        .add_extension(_CA_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


@dataclass(frozen=True)
class SigningAnchor:
    """A trust anchor with its key, for tests that issue under it (a rotation's new issuer)."""

    certificate: str
    key: str


def signing_anchor(cn: str = "root.linkerd.cluster.local") -> SigningAnchor:
    """A new trust anchor as :func:`trust_anchor` makes it, with its key (PEM, PKCS#8)."""
    cert, key = _root(cn, None, None)
    return SigningAnchor(cert.public_bytes(Encoding.PEM).decode(), _key_pem(key))


def identity_issuer(anchor: SigningAnchor, trust_domain: str = "cluster.local") -> tuple[str, str]:
    """An issuer for ``identity.linkerd.<trust_domain>`` signed by ``anchor`` (CA, path
    length 0, valid a year): its certificate and key (PEM)."""
    anchor_cert = x509.load_pem_x509_certificate(anchor.certificate.encode())
    anchor_key = serialization.load_pem_private_key(anchor.key.encode(), None)
    assert isinstance(anchor_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"identity.linkerd.{trust_domain}")])
    issuer = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(anchor_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_CA_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(anchor_key.public_key()), False
        )
        .sign(anchor_key, hashes.SHA256())
    )
    return issuer.public_bytes(Encoding.PEM).decode(), _key_pem(key)


def identity_pki(trust_domain: str = "cluster.local") -> IdentityCredentials:
    """What ``linkerd install`` takes for identity: a new anchor, and an issuer under it
    (:func:`identity_issuer`) with its key."""
    anchor = signing_anchor(f"root.linkerd.{trust_domain}")
    certificate, key = identity_issuer(anchor, trust_domain)
    return IdentityCredentials(anchor.certificate, certificate, key)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()


def bundle(*anchors: str) -> str:
    """Anchors concatenated, as ``cat ca-old.crt ca-new.crt`` (or ``step certificate bundle``)
    makes a bundle, without the trailing newline Helm's ``trim`` (and this controller) drops."""
    return "".join(anchors).strip()
