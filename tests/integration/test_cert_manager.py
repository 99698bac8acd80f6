"""`make deploy` of the default overlay on a local control plane running the real cert-manager
(its controller and CA injector built from its Go module: devcluster/cert_manager.py).

The overlay's self-signed Issuer and Certificate become a serving certificate for the webhook
Service in the Secret the controller mounts. The CA injector copies that CA into the caBundle
of both webhook configurations (and of the CRD's conversion webhook, if it has one), as
their ``cert-manager.io/inject-ca-from`` annotations ask. Nothing is skipped. Without Go the
build fails, and so does the test.
"""

from __future__ import annotations

import base64
import datetime
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from devcluster import third_party_crds
from devcluster.binaries import BinaryUnavailableError
from devcluster.cert_manager import ensure_cert_manager, start_cert_manager
from devcluster.cluster import LocalControlPlane
from linkerd_config.kube.resource import CRDS
from tests.support import in_cluster

# A first run on a machine where `make binaries` has not built cert-manager builds it here
# (about 3 minutes with empty Go caches, measured on 2 CPUs).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

REPO = in_cluster.REPO
IMAGE = "linkerd-config:cert-manager-test"

Obj = dict[str, Any]


def test_without_go_the_build_fails_and_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A machine without Go and without the cached binaries gets an error, never a skip."""
    monkeypatch.setenv("LINKERD_CONFIG_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(BinaryUnavailableError, match="no Go toolchain on PATH"):
        ensure_cert_manager(progress=lambda _: None)


def one(objs: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def go_duration(text: str) -> datetime.timedelta:
    units = {"h": "hours", "m": "minutes", "s": "seconds"}
    parts = re.findall(r"(\d+)([hms])", text)
    assert parts and "".join(n + u for n, u in parts) == text, text
    return sum((datetime.timedelta(**{units[u]: int(n)}) for n, u in parts), datetime.timedelta())


def test_make_deploy_gets_a_certificate_from_cert_manager_and_its_ca_injected(
    private_control_plane: LocalControlPlane,
) -> None:
    cp = private_control_plane
    start_cert_manager(cp)
    # The default overlay also has a PodMonitor: the Prometheus Operator's real CRD.
    third_party_crds.apply(cp, [third_party_crds.crd_path("podmonitors")])
    in_cluster.make(cp, "-s", "deploy", "OVERLAY=default", f"IMG={IMAGE}")
    rendered = in_cluster.kubectl(cp, "kustomize", str(REPO / "manifests" / "default"))
    objs = [d for d in yaml.safe_load_all(rendered) if d]

    # The Certificate, as the overlay renders it, becomes Ready.
    certificate = one(objs, "Certificate", "linkerd-config-serving-cert")
    namespace = certificate["metadata"]["namespace"]
    spec = certificate["spec"]
    cert_path = (
        f"/apis/cert-manager.io/v1/namespaces/{namespace}/certificates/linkerd-config-serving-cert"
    )

    def certificate_ready() -> bool:
        status = cp.api_request("GET", cert_path).get("status") or {}
        return any(
            c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or []
        )

    cp.wait_for("the Certificate Ready", certificate_ready)

    # Its Secret holds a certificate for the webhook Service's DNS name, signed as the
    # Issuer says (selfSigned: by its own key), with the key, usages and lifetime asked for.
    secret = cp.api_request("GET", f"/api/v1/namespaces/{namespace}/secrets/{spec['secretName']}")
    assert secret["metadata"]["name"] == "linkerd-config-webhook-cert"
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    cert = x509.load_pem_x509_certificate(data["tls.crt"])
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dns_names = names.get_values_for_type(x509.DNSName)
    assert sorted(dns_names) == sorted(spec["dnsNames"])
    services = {
        (w["clientConfig"]["service"]["namespace"], w["clientConfig"]["service"]["name"])
        for o in objs
        if o["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for w in o["webhooks"]
    }
    assert services == {("linkerd", "linkerd-config-webhook")}
    one(objs, "Service", "linkerd-config-webhook")
    assert "linkerd-config-webhook.linkerd.svc" in dns_names

    issuer_ref = spec["issuerRef"]
    assert issuer_ref["kind"] == "Issuer"
    issuer = one(objs, "Issuer", issuer_ref["name"])
    assert issuer["spec"] == {"selfSigned": {}}, "this test checks a self-signed Issuer"
    assert cert.issuer == cert.subject
    cert.verify_directly_issued_by(cert)  # the signature is by the certificate's own key
    assert data["ca.crt"] == data["tls.crt"]

    key = serialization.load_pem_private_key(data["tls.key"], password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert (spec["privateKey"]["algorithm"], spec["privateKey"]["size"]) == ("ECDSA", 256)
    assert key.curve.name == "secp256r1"
    assert key.public_key() == cert.public_key()
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and usage.key_encipherment
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert set(spec["usages"]) == {"digital signature", "key encipherment", "server auth"}
    assert cert.not_valid_after_utc - cert.not_valid_before_utc == go_duration(spec["duration"])

    # The CA injector puts that CA into both webhook configurations' caBundle ...
    ca = data["ca.crt"]
    hooks = {
        "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
        "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    }
    for kind, plural in hooks.items():
        (hook,) = [o for o in objs if o["kind"] == kind]
        assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
            f"{namespace}/{certificate['metadata']['name']}"
        )
        path = f"/apis/admissionregistration.k8s.io/v1/{plural}/{hook['metadata']['name']}"

        def injected(path: str = path) -> bool:
            webhooks = cp.api_request("GET", path)["webhooks"]
            return all(
                base64.b64decode(w["clientConfig"].get("caBundle", "")) == ca for w in webhooks
            )

        cp.wait_for(f"the CA in {kind}'s caBundle", injected)

    # ... and into the CRD's conversion webhook, when the CRD has one (ours has none).
    for crd in (o for o in objs if o["kind"] == "CustomResourceDefinition"):
        crd_path = CRDS.path(name=crd["metadata"]["name"])
        conversion = crd["spec"].get("conversion") or {}
        if conversion.get("strategy") == "Webhook":

            def converted(crd_path: str = crd_path) -> bool:
                live = cp.api_request("GET", crd_path)["spec"]["conversion"]
                bundle = live["webhook"]["clientConfig"].get("caBundle", "")
                return base64.b64decode(bundle) == ca

            cp.wait_for(f"the CA in {crd['metadata']['name']}'s conversion webhook", converted)
        else:
            live = cp.api_request("GET", crd_path)["spec"].get("conversion") or {}
            assert live.get("strategy", "None") == "None", live
            assert "cert-manager.io/inject-ca-from" not in (
                crd["metadata"].get("annotations") or {}
            )
