"""A tiny certificate authority: for the local control plane, and self-signed webhook
serving certificates when no cert-manager provides them.

Everything is ECDSA P-256: quick to generate, accepted by every Kubernetes component.
"""

from __future__ import annotations

import datetime
import ipaddress
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class TinyCA:
    """Signs serving and client certificates; valid for a week, like envtest's."""

    def __init__(self, common_name: str, validity: datetime.timedelta | None = None) -> None:
        self._validity = validity or datetime.timedelta(days=7)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + self._validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    @property
    def pair(self) -> KeyPair:
        return KeyPair(self.cert_pem, _key_pem(self._key))

    def serving(self, dns_names: list[str], ips: list[str]) -> KeyPair:
        """A server certificate; Go verifies IP SANs only, so loopback IPs must be listed."""
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        cn = dns_names[0] if dns_names else ips[0]
        return self._issue(cn, [], sans, ExtendedKeyUsageOID.SERVER_AUTH)

    def client(self, user: str, groups: list[str]) -> KeyPair:
        """A client certificate: the API server reads CN as the user and O as the groups."""
        return self._issue(user, groups, [], ExtendedKeyUsageOID.CLIENT_AUTH)

    def _issue(
        self,
        common_name: str,
        organizations: list[str],
        sans: list[x509.GeneralName],
        usage: x509.ObjectIdentifier,
    ) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + self._validity)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def signing_key() -> KeyPair:
    """A bare key pair (public key in the cert slot) for ServiceAccount token signing."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(public, _key_pem(key))


def self_signed_serving_pair(
    host: str = "localhost", validity: datetime.timedelta | None = None
) -> KeyPair:
    """A serving pair for ``host`` from a throwaway CA of its own, chain included (leaf, then
    CA), as client-go's GenerateSelfSignedCertKey makes for a server given no certificate.
    Valid a year by default: it lives as long as the process that made it."""
    ca = TinyCA(f"{host}-ca@{int(time.time())}", validity or datetime.timedelta(days=365))
    pair = ca.serving([host], [])
    return KeyPair(pair.cert_pem + ca.cert_pem, pair.key_pem)


def write_serving_pair(
    directory: Path, dns_names: list[str], ips: list[str], ca: TinyCA | None = None
) -> bytes:
    """Write ``tls.crt``/``tls.key`` (cert-manager's names) signed by ``ca`` or a new CA;
    returns the CA certificate, which is the caBundle a webhook configuration needs."""
    ca = ca or TinyCA("linkerd-config-webhook-ca")
    pair = ca.serving(dns_names, ips)
    directory.mkdir(parents=True, exist_ok=True)
    # Key first, then certificate, each by rename: a reader never sees a torn file.
    for name, data in (("tls.key", pair.key_pem), ("tls.crt", pair.cert_pem)):
        tmp = directory / f".{name}.tmp"
        tmp.write_bytes(data)
        tmp.chmod(0o600)
        tmp.replace(directory / name)
    return ca.cert_pem
