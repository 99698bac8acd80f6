"""The LinkerdConfig custom resource: its schema (the one source of truth for the CRD),
its status conditions, and small typed views of the parts the controller decides on.

``python -m linkerd_config.linkerd.spec.crd [--local]`` prints the CRD; ``make
generate`` writes it to ``manifests/crd/`` (converted by the in-cluster webhook) and, with
``--local``, to ``manifests/crd-local/`` (``make install``: converted by a controller run
outside the cluster, ``ENABLE_WEBHOOKS=false make run``); a test fails when a checked-in file
differs.
"""

from __future__ import annotations

import base64
import dataclasses
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import yaml

from linkerd_config.kube.resource import ApiResource, Json
from linkerd_config.linkerd.formats import field_table
from linkerd_config.linkerd.formats.field_grammar import DURATION, parse_go_duration, text
from linkerd_config.linkerd.spec.canary_section import MAX_COUNT as CANARY_MAX_COUNT
from linkerd_config.linkerd.spec.canary_section import MAX_SELECTOR_CHARS, CanarySpec
from linkerd_config.linkerd.spec.conversion import (
    GROUP,
    SERVED_VERSIONS,
    STORAGE_VERSION,
    V1ALPHA1,
    V1ALPHA2,
)

VERSION = STORAGE_VERSION
"""The version the controller reads and writes: the storage version, which the API server
serves without calling the conversion webhook for every object stored since."""
KIND = "LinkerdConfig"
PLURAL = "linkerdconfigs"
LINKERD_CONFIGS = ApiResource(GROUP, VERSION, PLURAL, KIND, namespaced=False)
LINKERD_CONFIGS_V1ALPHA1 = ApiResource(GROUP, V1ALPHA1, PLURAL, KIND, namespaced=False)

# The conversion webhook: served by the admission server beside the admission webhooks, at
# the same Service and with the same certificate.
SERVICE = ("linkerd", "linkerd-config-webhook")
CERTIFICATE = "linkerd/linkerd-config-serving-cert"
CERTIFICATE_ANNOTATION = "cert-manager.io/inject-ca-from"
CONVERT_PATH = f"/convert-{GROUP.replace('.', '-')}-{KIND.lower()}"

# The CRD for a controller run outside the cluster (``make install``): the converter is the
# local process, at the URL it serves by default (the webhook port on loopback), with the CA
# it makes at start. Until it has registered itself (``kube/local_conversion.py``), v1alpha1
# writes are refused by this rule, in one line that says what to do, instead of the API
# server's "connection refused".
LOCAL_CONVERSION_URL = "https://127.0.0.1:9443"
LOCAL_CONVERTER: Final = ("config.linkerd.io/converter", "local-controller")
"""The annotation that marks the local CRD: only it is pointed at a local controller."""
CONVERSION_REFUSAL: Final[Json] = {
    "rule": "false",
    "message": (
        f"{KIND} {V1ALPHA1} is converted by the controller, and none serves the conversion "
        "now: start it (ENABLE_WEBHOOKS=false make run) where the API server can reach it, "
        f"install it in the cluster with its webhooks (make deploy), or apply {V1ALPHA2} "
        "(linkerd-config convert -f FILE)"
    ),
}
CONVERSION_PROBE: Final[Json] = {
    "apiVersion": f"{GROUP}/{V1ALPHA1}",
    "kind": KIND,
    "metadata": {"generateName": "conversion-probe-"},
    "spec": {"proxy": {"proxyVersion": "edge-19.12.3"}},  # v1alpha1's one required field
}
"""What a local controller creates with dryRun=All to see the API server convert through it
(valid, so that only the conversion can fail it; dry-run stores nothing)."""

# Condition types (Kubernetes API conventions: positive polarity, CamelCase).
READY = "Ready"
CONFIGMAP_SYNCED = "ConfigMapSynced"
DATA_PLANE_UP_TO_DATE = "DataPlaneUpToDate"
CONFLICT = "Conflict"

# What the ConfigMap says about who manages it.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "linkerd-config"
OWNER_ANNOTATION = "config.linkerd.io/linkerdconfig"
HASH_ANNOTATION = "config.linkerd.io/config-hash"
RECORD_ANNOTATION = "config.linkerd.io/rollout-record"
"""On the managed ConfigMap while a rollback is in force: the LinkerdConfig's rollout record
(``rollback.carried``), so a LinkerdConfig deleted and made again goes on going back."""
COMPLETED_ANNOTATION = "config.linkerd.io/last-completed"
"""On the managed ConfigMap: the digest of the ``lastCompleted`` record the controller wrote
(``record.digest``). Status is the controller's memory, but others may patch it; a record
this does not vouch for is not read (``record.vouched``): no rollback returns to it."""

ROLLBACK_MAX_LISTED: Final = 10_000
"""The most workloads ``status.rolloutHalt.rollback.workloads`` lists (``rollback``)."""

# A canary's label selectors: bounded text (canary parses them).
SELECTOR = text(MAX_SELECTOR_CHARS, "a label selector such as app=web", "app=web")
# A rollout's durations: the DURATION grammar, shorter.
ROLLOUT_DURATION = dataclasses.replace(DURATION, max_length=32)


# -- schema building blocks ------------------------------------------------------------------


def _str(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def _bool(description: str) -> dict[str, Any]:
    return {"type": "boolean", "description": description}


def _obj(description: str, properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "description": description, "properties": properties, **extra}


def spec_schema(version: str = VERSION) -> dict[str, Any]:
    rollout = _obj(
        "How opted-in workloads are restarted onto a new configuration. Absent fields take "
        "the controller's --max-restarts-per-pass and --restart-interval.",
        {
            "paused": _bool(
                "Write the ConfigMap but restart nothing until this is false again; the status "
                "says what would be restarted."
            ),
            "maxRestartsPerPass": {
                "type": "integer",
                "minimum": 1,
                "maximum": 10000,
                "description": "Workloads restarted per pass.",
            },
            "restartInterval": ROLLOUT_DURATION.schema(
                "The least time from one pass's last restart to the next pass, e.g. 30s or "
                "2m; a pass also waits until every workload restarted so far is healthy."
            ),
            "progressDeadline": ROLLOUT_DURATION.schema(
                "How long a restarted workload may take to be healthy again (its rollout "
                "complete, its pods on the desired proxy) before the rollout halts; default "
                "10m, a Deployment's own default. A Deployment fails earlier when its "
                "progressDeadlineSeconds says so."
            ),
            "onFailure": _str(
                "What a failed rollout does: Halt (the default) restarts nothing more; "
                "Rollback also returns the ConfigMap to the last configuration whose rollout "
                "completed and brings the workloads already restarted back onto it. The spec "
                "stays as written; a new configuration (global or proxy changed so that it "
                "renders differently), or the annotation config.linkerd.io/resume-rollout, "
                "is a new attempt; an edit of spec.rollout alone ends no halt nor rollback.",
                enum=["Halt", "Rollback"],
            ),
            "canary": _obj(
                "A canary first: the first pass restarts only the workloads this selects (the "
                "first count of them in the rollout's sorted order; owners only, never a bare "
                "pod), and the rest begin once those have been healthy (as between passes) "
                "continuously for stableFor. A canary that fails halts the rollout as any "
                "restarted workload does. When no workload to restart matches, nothing is "
                "restarted until one does (or this changes). Off unless set.",
                {
                    "count": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": CANARY_MAX_COUNT,
                        "description": "How many workloads the canary restarts (default 1); "
                        "fewer when fewer match.",
                    },
                    "namespaceSelector": SELECTOR.schema(
                        "A label selector over namespaces, as kubectl -l writes it (env=staging, "
                        "kubernetes.io/metadata.name in (shop,cart)); empty: every namespace."
                    ),
                    "selector": SELECTOR.schema(
                        "A label selector over the workloads' own labels (the Deployment's, "
                        "StatefulSet's or DaemonSet's metadata.labels), as kubectl -l writes "
                        "it (app=web); empty: every workload."
                    ),
                    "stableFor": ROLLOUT_DURATION.schema(
                        "How long every canary workload must stay healthy before the rest "
                        "begin, e.g. 15m; default 5m, at most 168h."
                    ),
                },
            ),
        },
    )
    if version == V1ALPHA1:
        return _obj(
            "Desired Linkerd configuration.",
            {
                "global": field_table.schema("global"),
                "proxy": field_table.schema("proxy"),
                "rollout": rollout,
            },
            required=["proxy"],
        )
    configuration = field_table.v1alpha2_schema()
    return _obj(
        "Desired Linkerd configuration.",
        {**configuration["properties"], "rollout": rollout},
        required=configuration["required"],
    )


# The status fields the controller keeps, each named once: the schema below is written with
# these names, and every reader and writer of a field imports it from here.
HALT_FIELD: Final = "rolloutHalt"
"""The halt (or rollback) of the rollout's attempt."""
LAST_COMPLETED_FIELD: Final = "lastCompleted"
"""The last configuration whose rollout completed: what a rollback goes back to."""
FORGIVEN_FIELD: Final = "rolloutForgiven"
"""The workloads an explicit resume forgave."""
EVICTED_FIELD: Final = "evictedPods"
"""Bare pods evicted for the configuration."""
TRUST_BUNDLES_FIELD: Final = "trustBundles"
"""The trust bundles the guard has seen written, newest last."""
TRUST_HOLD_FIELD: Final = "trustAnchorHold"
"""The trust-anchor guard's hold on a removal."""
ISSUER_UPDATED_FIELD: Final = "identityIssuerUpdated"
"""When Linkerd's identity last took up a new issuer, as the guard saw it."""
CANARY_FIELD: Final = "rolloutCanary"
"""The canary's state."""
CANARY_MAX_RECORDED: Final = 1000
"""Canary workloads status names at most (more only when a canary is added to a rollout
under way: every workload restarted so far is one)."""


def status_schema() -> dict[str, Any]:
    condition = _obj(
        "A metav1.Condition.",
        {
            "type": _str("Condition type.", maxLength=316),
            "status": _str("True, False or Unknown.", enum=["True", "False", "Unknown"]),
            "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
            "lastTransitionTime": _str("When status last changed.", format="date-time"),
            "reason": _str("CamelCase reason.", maxLength=1024),
            "message": _str("Human-readable detail.", maxLength=32768),
        },
        required=["type", "status", "lastTransitionTime", "reason", "message"],
    )
    count = {"type": "integer", "minimum": 0}
    return _obj(
        "Observed state.",
        {
            "observedGeneration": {"type": "integer", "format": "int64"},
            "conditions": {
                "type": "array",
                "items": condition,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "configMap": _str("namespace/name of the managed ConfigMap."),
            "configHash": _str("Hash of the configuration last written."),
            "trustAnchorSource": _str(
                "Where the trust anchor came from.", enum=["Spec", "Cluster"]
            ),
            "linkerdVersion": _str(
                "The Linkerd version the configuration was written for (the spec's, or the "
                "cluster's when the spec leaves it out)."
            ),
            "configFormat": _str(
                "The linkerd-config format that version reads.", enum=["legacy", "values"]
            ),
            "outdatedWorkloads": {**count, "description": "Workloads still on another proxy."},
            "restartedWorkloads": {
                **count,
                "description": "Workloads restarted for this config hash, by any leader: the "
                "owners whose pod template records it, plus evicted bare pods.",
            },
            EVICTED_FIELD: {
                **count,
                "description": "Bare pods evicted for this config hash (they leave no record).",
            },
            HALT_FIELD: _obj(
                "The rollout of configHash is halted: a restarted workload failed or missed "
                "its deadline. Held until the configuration changes (an edit of spec.rollout "
                "alone is none) or the annotation config.linkerd.io/resume-rollout does.",
                {
                    "configHash": _str(
                        "The configuration the spec asks for, whose rollout halted."
                    ),
                    "rolledHash": _str(
                        "The configuration rolled out when it halted: configHash, or the "
                        "trust bundle a held anchor removal held on to instead (the halt is "
                        "configHash's all the same)."
                    ),
                    "generation": {"type": "integer", "format": "int64", "minimum": 0},
                    "resumeToken": _str(
                        "The resume annotation's value when it halted.", maxLength=1024
                    ),
                    "failed": {
                        "type": "array",
                        "maxItems": 1000,
                        "items": _str("A failed workload and why.", maxLength=4096),
                    },
                    "at": _str("When it halted.", format="date-time"),
                    "rollback": _obj(
                        "onFailure: Rollback: the configuration the ConfigMap returned to, "
                        "and the workloads brought back onto it.",
                        {
                            "toHash": _str("The configuration returned to.", maxLength=64),
                            "toGeneration": {"type": "integer", "format": "int64", "minimum": 0},
                            "phase": _str(
                                "RollingBack until every workload listed is back and "
                                "healthy, then RolledBack.",
                                enum=["RollingBack", "RolledBack"],
                            ),
                            "workloads": {
                                "type": "array",
                                "maxItems": ROLLBACK_MAX_LISTED,
                                "items": _str("kind/namespace/name", maxLength=1024),
                            },
                        },
                    ),
                },
            ),
            LAST_COMPLETED_FIELD: _obj(
                "The last configuration whose rollout completed: what onFailure: Rollback "
                "returns to.",
                {
                    "configHash": _str("Its hash.", maxLength=64),
                    "generation": {"type": "integer", "format": "int64", "minimum": 0},
                    "spec": _str(
                        "The spec's global and proxy sections it was rendered from (JSON).",
                        maxLength=1 << 20,
                    ),
                    "installed": _obj(
                        "Instead of spec, the installation this LinkerdConfig adopted (every "
                        "opted-in pod ran it): the keys it writes, as they were installed, "
                        "written back by a rollback.",
                        {
                            "data": {
                                "type": "object",
                                "description": "linkerd-config's keys.",
                                "maxProperties": 16,
                                "additionalProperties": {"type": "string", "maxLength": 1 << 19},
                            },
                            "companions": {
                                "type": "object",
                                "description": "Other ConfigMaps' keys, by ConfigMap name.",
                                "maxProperties": 16,
                                "additionalProperties": {
                                    "type": "object",
                                    "maxProperties": 16,
                                    "additionalProperties": {
                                        "type": "string",
                                        "maxLength": 1 << 19,
                                    },
                                },
                            },
                        },
                    ),
                    "at": _str(
                        "When its rollout completed (or the installation was adopted).",
                        format="date-time",
                    ),
                },
            ),
            FORGIVEN_FIELD: _obj(
                "Workloads a resume forgave: the rollout of configHash no longer waits for "
                "them (another configuration forgives nothing).",
                {
                    "configHash": _str("The configuration they were forgiven for."),
                    "generation": {
                        "type": "integer",
                        "format": "int64",
                        "minimum": 0,
                        "description": "The LinkerdConfig's generation they were forgiven in "
                        "(for people: an edit of spec.rollout alone keeps them forgiven).",
                    },
                    "workloads": {
                        "type": "array",
                        "maxItems": 1000,
                        "items": _str("kind/namespace/name", maxLength=1024),
                    },
                },
            ),
            TRUST_BUNDLES_FIELD: {
                "type": "array",
                "maxItems": 16,
                "description": "The trust bundles the trust-anchor guard knows, oldest first: "
                "the linkerd.io/trust-root-sha256 Linkerd's injector stamps on pods given each, "
                "and its anchors. A pod whose hash is not here counts as lacking every anchor.",
                "items": _obj(
                    "One bundle.",
                    {
                        "sha256": _str(
                            "SHA-256 (hex) of the bundle's text.", pattern=r"^[0-9a-f]{64}$"
                        ),
                        "anchors": {
                            "type": "array",
                            "maxItems": 100,
                            "items": _str(
                                "SHA-256 (hex) of an anchor's DER.", pattern=r"^[0-9a-f]{64}$"
                            ),
                        },
                    },
                ),
            },
            TRUST_HOLD_FIELD: _obj(
                "The trust-anchor guard holds the write: the new bundle drops anchors some "
                "meshed pods still need. Nothing is written until they are restarted.",
                {
                    "dropped": {
                        "type": "array",
                        "maxItems": 100,
                        "items": _str("An anchor the new bundle drops.", maxLength=4096),
                    },
                    "required": {
                        "type": "array",
                        "maxItems": 100,
                        "items": _str("An anchor every pod must trust.", maxLength=4096),
                    },
                    "pods": {
                        "type": "array",
                        "maxItems": 20,
                        "items": _str("namespace/name of a pod that holds it.", maxLength=512),
                    },
                    "podCount": {**count, "description": "Every pod that holds it."},
                    "unknownBundlePods": {
                        **count,
                        "description": "Of those, pods on a bundle the controller never read.",
                    },
                    "issuer": _obj(
                        "Pods created before Linkerd's identity took up its current issuer: "
                        "their certificates may be from the issuer before until renewed.",
                        {
                            "issuerUpdatedAt": _str("The issuer's update.", format="date-time"),
                            "until": _str(
                                "When every certificate issued before it has expired.",
                                format="date-time",
                            ),
                            "pods": {
                                "type": "array",
                                "maxItems": 20,
                                "items": _str("namespace/name of such a pod.", maxLength=512),
                            },
                            "podCount": {**count, "description": "Every such pod."},
                        },
                    ),
                },
            ),
            ISSUER_UPDATED_FIELD: _str(
                "When Linkerd's identity last took up a new issuer (its IssuerUpdated Event, "
                "kept here: Events expire). Until the certificates issued before have "
                "expired, a trust-anchor removal waits for the meshed pods created before it.",
                format="date-time",
            ),
            CANARY_FIELD: _obj(
                "The canary of configHash (spec.rollout.canary): its workloads, since when "
                "they have all been healthy (for these workloads and resume annotation), "
                "when it passed (then the rest roll).",
                {
                    "configHash": _str("The configuration it is the canary of.", maxLength=64),
                    "generation": {"type": "integer", "format": "int64", "minimum": 0},
                    "resumeToken": _str(
                        "The resume annotation's value it was healthy under.", maxLength=1024
                    ),
                    "workloads": {
                        "type": "array",
                        "maxItems": CANARY_MAX_RECORDED,
                        "items": _str("kind/namespace/name", maxLength=1024),
                    },
                    "healthySince": _str(
                        "Since when every canary workload has been healthy.", format="date-time"
                    ),
                    "passedAt": _str("When the canary passed.", format="date-time"),
                },
            ),
        },
    )


def crd(conversion: Json | None = None, *, local: bool = False) -> dict[str, Any]:
    """The CRD. Both versions are served and v1alpha2 is stored; ``conversion`` is the
    CRD's ``spec.conversion`` (``conversion_webhook``), by default the in-cluster Service's
    with its CA injected by cert-manager. ``local``: the CRD ``make install`` installs, whose
    converter is a controller run outside the cluster (``LOCAL_CONVERSION_URL``), and whose
    v1alpha1 refuses writes (``CONVERSION_REFUSAL``) until that controller takes it off."""
    metadata: Json = {
        "name": f"{PLURAL}.{GROUP}",
        "labels": {"app.kubernetes.io/name": "linkerd-config"},
    }
    if local:
        conversion = conversion or conversion_webhook(url=LOCAL_CONVERSION_URL)
        metadata["annotations"] = {LOCAL_CONVERTER[0]: LOCAL_CONVERTER[1]}
    elif conversion is None:
        conversion = conversion_webhook()
        metadata["annotations"] = {CERTIFICATE_ANNOTATION: CERTIFICATE}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": "linkerdconfig",
                "shortNames": ["lc"],
            },
            "scope": "Cluster",
            "versions": [
                _version(version, refuse=local and version == V1ALPHA1)
                for version in SERVED_VERSIONS
            ],
            "conversion": conversion,
        },
    }


def _version(version: str, *, refuse: bool = False) -> dict[str, Any]:
    proxy = "spec.values.proxy.image.version" if version == V1ALPHA2 else "spec.proxy.proxyVersion"
    return {
        "name": version,
        "served": True,
        "storage": version == STORAGE_VERSION,
        "subresources": {"status": {}},
        "additionalPrinterColumns": [
            {
                # namespace/name, as reconcile resolved it: a spec may leave both to the
                # defaults.
                "name": "ConfigMap",
                "type": "string",
                "jsonPath": ".status.configMap",
            },
            {
                "name": "Ready",
                "type": "string",
                "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
            },
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
            # -o wide: what an operator wants at a glance besides.
            {
                "name": "Linkerd",
                "type": "string",
                "jsonPath": ".status.linkerdVersion",
                "priority": 1,
            },
            {
                "name": "Format",
                "type": "string",
                "jsonPath": ".status.configFormat",
                "priority": 1,
            },
            {"name": "Proxy", "type": "string", "jsonPath": "." + proxy, "priority": 1},
            {
                "name": "Reason",
                "type": "string",
                "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
                "priority": 1,
            },
        ],
        "schema": {
            "openAPIV3Schema": _obj(
                "LinkerdConfig is the desired content of Linkerd's linkerd-config ConfigMap.",
                {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"type": "object"},
                    "spec": spec_schema(version),
                    # A LinkerdConfig no controller has seen reads as not observed yet:
                    # kstatus (Flux's and Helm 4's waits) takes an object without
                    # status.observedGeneration as Current, so a new one would be "ready"
                    # before anything was written. Defaulted on every read, this one is
                    # InProgress (generation 1, observed 0) until the controller says more.
                    "status": {**status_schema(), "default": {"observedGeneration": 0}},
                },
                required=["spec"],
            )
            | ({"x-kubernetes-validations": [CONVERSION_REFUSAL]} if refuse else {})
        },
    }


def conversion_webhook(
    *,
    url: str | None = None,
    service: tuple[str, str] | None = SERVICE,
    ca_pem: bytes | None = None,
) -> Json:
    """The CRD's ``spec.conversion``: the API server calls ``url`` (tests, the demo) or the
    Service on port 443 to convert between the served versions; ``ca_pem`` is its CA (with a
    Service and none, cert-manager's CA injector fills it from the CRD's annotation)."""
    client: Json = (
        {"url": url.rstrip("/") + CONVERT_PATH}
        if url is not None
        else {
            "service": {
                "namespace": (service or SERVICE)[0],
                "name": (service or SERVICE)[1],
                "path": CONVERT_PATH,
                "port": 443,
            }
        }
    )
    if ca_pem is not None:
        client["caBundle"] = base64.b64encode(ca_pem).decode()
    return {
        "strategy": "Webhook",
        "webhook": {"clientConfig": client, "conversionReviewVersions": ["v1"]},
    }


def crd_yaml(*, local: bool = False) -> str:
    header = (
        "# Generated by `make generate` from linkerd_config/linkerd/resource.py.\n# Do not edit.\n"
    )
    if local:
        header += (
            "# For a controller run outside the cluster (ENABLE_WEBHOOKS=false make run): it\n"
            "# serves the conversion, points spec.conversion at itself and takes v1alpha1's\n"
            '# refusal rule off; see docs/design.md, "Conversion with the webhooks off".\n'
        )
    body = crd(local=local)
    return header + yaml.safe_dump(body, sort_keys=False, width=100, allow_unicode=True)


# -- typed views ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Which ConfigMap a LinkerdConfig manages."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


DEFAULT_PROGRESS_DEADLINE = 600.0
"""Seconds, as a Deployment's progressDeadlineSeconds defaults."""


@dataclass(frozen=True)
class RolloutSpec:
    """A LinkerdConfig's ``spec.rollout``; None where it leaves the controller's setting."""

    paused: bool = False
    max_restarts_per_pass: int | None = None
    restart_interval: float | None = None
    progress_deadline: float = DEFAULT_PROGRESS_DEADLINE
    rollback: bool = False
    """``onFailure: Rollback``: a failed rollout returns to the last completed configuration."""
    canary: CanarySpec | None = None
    """``canary``: the first pass restarts only the canary; None: no canary."""

    @classmethod
    def of(cls, config: Json) -> RolloutSpec:
        """From an admitted object (validation has checked the types and the duration)."""
        section = (config.get("spec") or {}).get("rollout") or {}
        interval = section.get("restartInterval")
        deadline = section.get("progressDeadline")
        return cls(
            paused=bool(section.get("paused", False)),
            max_restarts_per_pass=section.get("maxRestartsPerPass"),
            restart_interval=None if interval is None else parse_go_duration(interval) / 1e9,
            progress_deadline=DEFAULT_PROGRESS_DEADLINE
            if deadline is None
            else parse_go_duration(deadline) / 1e9,
            rollback=section.get("onFailure") == "Rollback",
            canary=CanarySpec.of(section.get("canary")),
        )


COMMON_DEFAULTS: Json = {
    "global": {"linkerdNamespace": "linkerd", "configMap": "linkerd-config"},
    # An empty section, so that a spec without one is refused naming the field it lacks
    # (spec.proxy.proxyVersion), not the section.
    "proxy": {},
}
"""Every format's: where the configuration goes, and the sections a spec has."""


def target_of(config: Json) -> Target:
    """The ConfigMap a LinkerdConfig manages (the same in every format)."""
    stated = (config.get("spec") or {}).get("global") or {}
    defaults = COMMON_DEFAULTS["global"]
    return Target(
        str(stated.get("linkerdNamespace") or defaults["linkerdNamespace"]),
        str(stated.get("configMap") or defaults["configMap"]),
    )


def owner_among(configs: Iterable[Json], target: Target) -> Json | None:
    """The LinkerdConfig that manages ``target``: the oldest, ties broken by name."""
    rivals = [c for c in configs if not _deleting(c) and target_of(c) == target]
    return min(rivals, key=_rank, default=None)


class Owners:
    """Who manages each target (``owner_among``'s rule), kept as LinkerdConfigs come, change
    and go: a change costs its target's rivals, not a pass over every LinkerdConfig (a
    thousand of them listed, or resynced, would otherwise cost a million)."""

    def __init__(self) -> None:
        self._at: dict[str, Target] = {}
        # Invariant: each name's target, for the LinkerdConfigs not being deleted; and by
        # target, those names with their rank; and each target's owner, once asked.
        self._rivals: dict[Target, dict[str, tuple[str, str]]] = {}
        self._owner: dict[Target, str] = {}

    def put(self, config: Json) -> set[Target]:
        """``config`` as it is now; the targets whose owner it may have changed."""
        name = str(config["metadata"]["name"])
        touched = self.remove(name)
        if not _deleting(config):
            target = target_of(config)
            self._at[name] = target
            self._rivals.setdefault(target, {})[name] = _rank(config)
            self._owner.pop(target, None)
            touched.add(target)
        return touched

    def remove(self, name: str) -> set[Target]:
        """``name`` gone; the targets whose owner it may have changed."""
        target = self._at.pop(name, None)
        if target is None:
            return set()
        rivals = self._rivals[target]
        del rivals[name]
        if not rivals:
            del self._rivals[target]
        self._owner.pop(target, None)
        return {target}

    def of(self, target: Target) -> str | None:
        """The name of the LinkerdConfig that manages ``target`` (None: none does)."""
        if target not in self._owner:
            rivals = self._rivals.get(target)
            if not rivals:
                return None
            self._owner[target] = min(rivals, key=rivals.__getitem__)
        return self._owner[target]

    def targets(self) -> list[Target]:
        return list(self._rivals)


def _rank(config: Json) -> tuple[str, str]:
    """The older first, ties broken by name."""
    meta = config["metadata"]
    return str(meta.get("creationTimestamp", "")), str(meta["name"])


def _deleting(config: Json) -> bool:
    return bool(config["metadata"].get("deletionTimestamp"))


if __name__ == "__main__":
    sys.stdout.write(crd_yaml(local="--local" in sys.argv[1:]))
