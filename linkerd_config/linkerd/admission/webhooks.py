"""The LinkerdConfig admission webhooks: defaulting and validation, as AdmissionServer routes.

Thin on purpose: what to default lives in ``defaults`` (reconcile applies the same function,
so an object stored while the webhook was down renders identically), and what to refuse in
``validation``. Here only the AdmissionReview plumbing and the two webhook configurations.

``python -m linkerd_config.linkerd.admission.webhooks`` prints the in-cluster configurations
(``manifests/webhook/webhooks.yaml``); a test fails when the checked-in file differs.
"""

from __future__ import annotations

import argparse
import base64
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import yaml

from linkerd_config.kube.admission import AdmissionRequest, AdmissionResponse, AdmissionServer
from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.admission.defaults import object_patch
from linkerd_config.linkerd.admission.validation import (
    defaultable,
    render_errors,
    validate,
    warnings_for,
)
from linkerd_config.linkerd.spec.conversion import (
    GROUP,
    SERVED_VERSIONS,
    V1ALPHA1,
    TooDeepError,
    convert,
    to_hub,
)
from linkerd_config.linkerd.spec.crd import (
    CERTIFICATE,
    CERTIFICATE_ANNOTATION,
    CONVERT_PATH,
    KIND,
    PLURAL,
    SERVICE,
)

__all__ = [
    "CERTIFICATE_ANNOTATION",
    "CONVERT_PATH",
    "MUTATE_PATH",
    "SERVICE",
    "VALIDATE_PATH",
    "convert_object",
    "mutate",
    "register",
    "validator",
    "webhook_configurations",
    "webhooks_yaml",
]


# The paths of the first release, whatever version a request is in: an upgrade's old and
# new pods then serve the same configurations while they roll.
MUTATE_PATH = f"/mutate-{GROUP.replace('.', '-')}-{V1ALPHA1}-{KIND.lower()}"
VALIDATE_PATH = f"/validate-{GROUP.replace('.', '-')}-{V1ALPHA1}-{KIND.lower()}"
MUTATING_NAME = "linkerd-config-mutating"
VALIDATING_NAME = "linkerd-config-validating"
MUTATING_WEBHOOK = f"m{KIND.lower()}.{GROUP}"
VALIDATING_WEBHOOK = f"v{KIND.lower()}.{GROUP}"


class _Store(Protocol):
    def list(self) -> list[Json]: ...


class _Informer(Protocol):
    @property
    def store(self) -> _Store: ...


class ConfigCache(Protocol):
    """What the webhooks need of the controller: its cache of LinkerdConfigs."""

    @property
    def configs(self) -> _Informer: ...


def register(server: AdmissionServer, controller: ConfigCache) -> None:
    """Serve both admission webhooks and the CRD's conversion webhook on ``server``;
    validation reads ``controller.configs``' cache."""
    server.add(MUTATE_PATH, mutate)
    server.add(VALIDATE_PATH, validator(controller))
    server.add_conversion(CONVERT_PATH, convert_object)


def convert_object(obj: Json, api_version: str) -> Json:
    """The conversion webhook: ``obj`` in ``api_version`` (group/version)."""
    group, _, version = api_version.rpartition("/")
    if group != GROUP or version not in SERVED_VERSIONS:
        raise ValueError(f"{api_version} is not a served version of {KIND}")
    source = obj.get("apiVersion")
    group, _, served = source.rpartition("/") if isinstance(source, str) else ("", "", "")
    if group != GROUP or served not in SERVED_VERSIONS:
        raise ValueError(f"apiVersion {source!r} is not a served version of {KIND}")
    if obj.get("kind") != KIND:
        raise ValueError(f"kind {obj.get('kind')!r} is not {KIND}")
    return convert(obj, version)


def mutate(review: AdmissionRequest) -> AdmissionResponse:
    """Fill Linkerd's defaults in, as a JSONPatch of adds; nothing when already complete.

    A spec too malformed to default is let through unpatched: the schema and the validating
    webhook then refuse it with field-level messages, which a failure here could not give.
    """
    obj = review.object or {}
    try:
        if not defaultable(obj.get("spec")) or not defaultable(to_hub(obj).get("spec")):
            return AdmissionResponse()
        patch = object_patch(obj)
    except TooDeepError:  # the annotation's values: the validating webhook names it (422)
        return AdmissionResponse()
    return AdmissionResponse(patch=patch or None)


def validator(controller: ConfigCache) -> Callable[[AdmissionRequest], AdmissionResponse]:
    """The validating handler: every problem at once, 422, naming the object."""

    def admit(review: AdmissionRequest) -> AdmissionResponse:
        obj = review.object or {}
        name = review.name or str(_name(obj) or "")
        others = [c for c in controller.configs.store.list() if _name(c) != name]
        old = review.old_object if review.operation == "UPDATE" else None
        errors = validate(obj, old, others)
        if errors:
            message = f'{KIND} "{name}" is invalid: {render_errors(errors)}'
            return AdmissionResponse.deny(message, code=422)
        return AdmissionResponse(warnings=tuple(warnings_for(obj)))

    return admit


def _name(obj: Json) -> object:
    metadata = obj.get("metadata")
    return metadata.get("name") if isinstance(metadata, dict) else None


# -- the webhook configurations ------------------------------------------------------------


def webhook_configurations(
    ca_pem: bytes | None = None,
    url_base: str | None = None,
    service: tuple[str, str] | None = None,
) -> list[Json]:
    """The Mutating- and ValidatingWebhookConfiguration for LinkerdConfigs.

    ``url_base`` (``https://127.0.0.1:8443``) for a server outside the cluster (tests, the
    demo), or ``service`` (namespace, name) for one inside it, reached on port 443; with a
    service and no ``ca_pem``, cert-manager's CA injector fills ``caBundle`` in.
    ``failurePolicy: Fail``: an object admitted undefaulted or unvalidated would reach
    reconcile, which is worse than a clear "webhook unavailable".
    """
    if (url_base is None) == (service is None):
        raise ValueError("give exactly one of url_base and service")
    configurations = []
    for kind, name, webhook, path in (
        ("MutatingWebhookConfiguration", MUTATING_NAME, MUTATING_WEBHOOK, MUTATE_PATH),
        ("ValidatingWebhookConfiguration", VALIDATING_NAME, VALIDATING_WEBHOOK, VALIDATE_PATH),
    ):
        client: Json
        if url_base is not None:
            client = {"url": url_base.rstrip("/") + path}
        else:
            assert service is not None
            client = {
                "service": {"namespace": service[0], "name": service[1], "path": path, "port": 443}
            }
        if ca_pem is not None:
            client["caBundle"] = base64.b64encode(ca_pem).decode()
        metadata: Json = {"name": name, "labels": {"app.kubernetes.io/name": "linkerd-config"}}
        if service is not None and ca_pem is None:
            metadata["annotations"] = {CERTIFICATE_ANNOTATION: CERTIFICATE}
        configurations.append(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": metadata,
                "webhooks": [
                    {
                        "name": webhook,
                        "clientConfig": client,
                        "rules": [
                            {
                                "apiGroups": [GROUP],
                                # Each request in its own version, so that a refusal
                                # names the fields as the user wrote them.
                                "apiVersions": list(SERVED_VERSIONS),
                                "operations": ["CREATE", "UPDATE"],
                                "resources": [PLURAL],
                                "scope": "Cluster",
                            }
                        ],
                        "matchPolicy": "Equivalent",
                        "failurePolicy": "Fail",
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "timeoutSeconds": 10,
                    }
                ],
            }
        )
    return configurations


def webhooks_yaml(configurations: Sequence[Json] | None = None) -> str:
    """The configurations as the multi-document YAML checked in under manifests/webhook/."""
    header = (
        "# Generated from linkerd_config/linkerd/webhooks.py. Do not edit; regenerate with\n"
        "# python -m linkerd_config.linkerd.admission.webhooks > manifests/webhook/webhooks.yaml\n"
    )
    documents = configurations or webhook_configurations(service=SERVICE)
    return header + yaml.safe_dump_all(documents, sort_keys=False, width=100)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m linkerd_config.linkerd.admission.webhooks",
        description="Print the LinkerdConfig webhook configurations (in-cluster by default).",
    )
    parser.add_argument("--url-base", help="serve from this https URL instead of the Service")
    parser.add_argument("--ca-file", type=Path, help="PEM CA bundle to put in caBundle")
    args = parser.parse_args(argv)
    ca_pem = args.ca_file.read_bytes() if args.ca_file else None
    if args.url_base:
        documents = webhook_configurations(ca_pem, url_base=args.url_base)
    else:
        documents = webhook_configurations(ca_pem, service=SERVICE)
    sys.stdout.write(webhooks_yaml(documents))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
