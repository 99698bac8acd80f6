"""Trust anchors made on the fly, as Linkerd's docs make them with the step CLI
(``step certificate create root.linkerd.cluster.local ca.crt ca.key --profile root-ca
--no-password --insecure``): a self-signed EC P-256 CA, basicConstraints CA:TRUE with path
length 1 and keyUsage certSign/cRLSign, both critical, valid for ten years."""

from __future__ import annotations

import datetime

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID


def trust_anchor(
    cn: str = "root.linkerd.cluster.local",
    *,
    valid_from: datetime.datetime | None = None,
    valid_until: datetime.datetime | None = None,
) -> str:
    """A new root CA (a new key each call) as PEM, ending in a newline as step writes it;
    valid from five minutes ago for ten years unless told."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    usage = x509.KeyUsage(
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
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid_from or now - datetime.timedelta(minutes=5))
        .not_valid_after(valid_until or now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(Encoding.PEM).decode()


def bundle(*anchors: str) -> str:
    """Anchors concatenated, as ``cat ca-old.crt ca-new.crt`` (or ``step certificate bundle``)
    makes a bundle, without the trailing newline Helm's ``trim`` (and this controller) drops."""
    return "".join(anchors).strip()
