"""The LinkerdConfig configuration fields: one row each, the one place a field is described.

From ``FIELDS`` follow: the CRD schema of ``spec.global`` and ``spec.proxy``
(``spec.crd``), each field's grammar and messages in validation, the defaults
(every format's, and what ``linkerd install`` wrote in the legacy era), the legacy mapping
(the ``config.proto`` field, and the releases whose message has it), the values mapping (the
Helm values path, its conversion, the releases whose chart has it), and the documentation's
field table (``write_docs_table``, which ``make generate`` runs on docs/user-guide.md; a test fails
when it is stale). Adding a field is one row plus its tests;
tests/unit/formats/test_field_table.py proves it on a scratch copy.

The legacy range is closed (its last release is edge-20.10.1): ``config.proto`` is Linkerd's
history, and a new field's legacy column is None, which the legacy format refuses naming the
releases whose values have it.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from linkerd_config.linkerd.formats.field_grammar import (
    BOOLEAN,
    CAPABILITIES,
    CIDR_LIST,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    DURATION,
    ENV_VARS,
    IGNORED_PORTS,
    IGNORED_PORTS_TEXT,
    IMAGE_NAME,
    IMAGE_TAG,
    LINKERD_VERSION,
    LOG_LEVEL,
    PEM_BUNDLE,
    PORT,
    PROXY_DURATION,
    QUANTITY,
    RATIO,
    STRING_MAP,
    Grammar,
    count,
    enum,
    free_object,
    grammar_of,
    text,
)
from linkerd_config.linkerd.formats.versions import Releases, releases

__all__ = [
    "FIELDS",
    "SECTIONS",
    "VALUES_RELEASES",
    "ConfigField",
    "LegacyField",
    "ServedAs",
    "Stated",
    "ValuesField",
    "by_path",
    "docs_table",
    "schema",
    "spec_leaves",
    "v1alpha2_schema",
    "write_docs_table",
]

Path = tuple[str, ...]

VALUES_RELEASES: Final = releases("edge-20.10.2", "stable-2.9.0")
"""The releases that read the values format: a values key with no other gate."""
UNIFIED_IMAGE: Final = releases("edge-25.11.3", "stable-2.20.0")
"""The unified proxy image: the proxy image runs the init container too (no open-source
stable release has it; the last is stable-2.14.10)."""
EPHEMERAL_STORAGE_SINCE: Final = releases("edge-21.11.1", "stable-2.12.0")
"""The chart's proxy.resources.ephemeral-storage (linkerd2 #7159); not in any legacy
release's config.proto."""
_FLAT_SINCE: Final = releases("edge-21.2.2", "stable-2.10.0").since[0]
"""From here on no value sits under ``global.`` (the 2.9 layout ends)."""
_UNIFIED: Final = "the proxy image runs the init container too (unified proxy image)"


@dataclass(frozen=True)
class LegacyField:
    """Where a field goes in the legacy format: a ``config_pb2`` field under the key's root
    message (``Global``, or ``Proxy``/``ProxyWithPortRanges``)."""

    proto: str
    """The path of proto field names from the root message: ``identity_context.scheme``."""
    releases: Releases | None = None
    """The releases whose message has it; None: every legacy release."""
    gate: str = ""
    """The proto field ``releases`` is about (a name on ``proto``); default its first."""
    default: Any = None
    """What ``linkerd install`` of the era wrote when the spec leaves it out (None: nothing)."""

    @property
    def gated(self) -> str:
        return self.gate or self.proto.split(".")[0]


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class ValuesField:
    """Where a field goes in the Helm values."""

    path: Path
    nested: bool = False
    """Under ``global:`` in the 2.9 layout (edge-20.10.2 .. edge-21.2.1, stable-2.9.x)."""
    convert: Callable[[Any], Any] = _same
    releases: Releases = VALUES_RELEASES
    """The releases whose chart has it (and whose injector reads it)."""
    gone: str = ""
    """Why it cannot be set from ``releases.until`` on."""


@dataclass(frozen=True)
class ServedAs:
    """How v1alpha2 states a field whose value differs from its v1alpha1 form: Linkerd's
    own type (``proxyInit.ignoreInboundPorts`` is one comma-separated string) or sense
    (``proxy.enableExternalProfiles`` inverts ``disableExternalProfiles``). The two
    functions are inverses on every value of the two grammars; anything else passes through
    unchanged, so conversion never fails and validation names the problem."""

    grammar: Grammar
    to_v1alpha2: Callable[[Any], Any]
    to_v1alpha1: Callable[[Any], Any]


@dataclass(frozen=True)
class ConfigField:
    """One LinkerdConfig configuration field: its path, grammar, meaning and mappings."""

    path: Path
    grammar: Grammar
    description: str
    legacy: LegacyField | None
    values: ValuesField | None
    required: bool = False
    """The schema requires it (validation says what else each format needs)."""
    immutable: bool = False
    location: bool = False
    """Where the configuration goes (which ConfigMap), not part of it: no format writes it
    as a value."""
    default: Any = None
    """Every format's default (where the configuration goes): None for none."""
    doc: str = ""
    """For the docs' field table, when the mappings need a word."""
    served_as: ServedAs | None = None
    """v1alpha2's grammar and conversion when they are not the row's own."""

    @property
    def name(self) -> str:
        return ".".join(self.path)

    @property
    def in_v1alpha1(self) -> bool:
        """v1alpha1 has a home for it (the hub's ``values`` section is v1alpha2's only)."""
        return self.path[0] != "values"

    @property
    def v1alpha2_path(self) -> Path:
        """Its path under ``spec`` in v1alpha2: Linkerd's values path under ``values``
        (the name ``linkerd install --set`` takes), or, for where the configuration goes,
        its own name at the top."""
        if not self.in_v1alpha1:
            return self.path
        if self.location or self.values is None:
            return (self.path[-1],)
        return ("values", *self.values.path)

    @property
    def v1alpha2_grammar(self) -> Grammar:
        return self.grammar if self.served_as is None else self.served_as.grammar

    def served_field(self, version: str) -> str:
        """The path as admission and status name it in ``version``."""
        path = self.v1alpha2_path if version == "v1alpha2" else self.path
        return "spec." + ".".join(path)

    @property
    def field(self) -> str:
        """The path as admission and status name it: ``spec.proxy.adminPort``."""
        return f"spec.{self.name}"


def _ports(entries: Any) -> str:
    return ",".join(str(entry) for entry in entries)


def _not(value: Any) -> Any:
    return not value


def _joined(value: Any) -> Any:
    if isinstance(value, list) and all(isinstance(entry, str) for entry in value):
        return ",".join(value)
    return value


def _split(value: Any) -> Any:
    return (value.split(",") if value else []) if isinstance(value, str) else value


def _negated(value: Any) -> Any:
    return not value if isinstance(value, bool) else value


_PORT_LIST: Final = ServedAs(IGNORED_PORTS_TEXT, _joined, _split)
_INVERTED: Final = ServedAs(BOOLEAN, _negated, _negated)


def _image(
    key: str,
    what: str,
    legacy: str,
    values: Path,
    *,
    legacy_releases: Releases | None = None,
    values_releases: Releases = VALUES_RELEASES,
    nested: bool = True,
    gone: str = "",
    default: str | None = None,
) -> tuple[ConfigField, ConfigField]:
    return (
        ConfigField(
            ("proxy", key, "name"),
            IMAGE_NAME,
            f"The {what} image repository, without tag.",
            LegacyField(f"{legacy}.image_name", legacy_releases, default=default),
            ValuesField((*values, "name"), nested, releases=values_releases, gone=gone),
        ),
        ConfigField(
            ("proxy", key, "pullPolicy"),
            enum("Always", "IfNotPresent", "Never"),
            f"The {what} image's Kubernetes pull policy.",
            LegacyField(
                f"{legacy}.pull_policy",
                legacy_releases,
                default=None if default is None else "IfNotPresent",
            ),
            ValuesField((*values, "pullPolicy"), nested, releases=values_releases, gone=gone),
        ),
    )


def _port(key: str, proto: str, values: str, default: int) -> ConfigField:
    return ConfigField(
        ("proxy", key),
        PORT,
        f"Proxy {values} port.",
        LegacyField(f"{proto}.port", default=default),
        ValuesField(("proxy", "ports", values), nested=True),
    )


def _ignored(direction: str) -> ConfigField:
    key = f"ignore{direction}Ports"
    return ConfigField(
        ("proxy", key),
        IGNORED_PORTS,
        f"{direction} ports the proxy does not intercept: a port or a range 'lo-hi' (ranges "
        "need Linkerd edge-20.1.1 / stable-2.7.0 or later).",
        LegacyField(f"ignore_{direction.lower()}_ports", default=[]),
        ValuesField(("proxyInit", key), nested=True, convert=_ports),
        served_as=_PORT_LIST,
        doc='legacy: `[{"port"}]`, `[{"portRange"}]` from edge-20.1.1; values: comma-joined',
    )


def _connect_timeout(direction: str, example: str) -> ConfigField:
    key = f"{direction}ConnectTimeout"
    return ConfigField(
        ("proxy", key),
        PROXY_DURATION,
        f"Proxy {direction} connect timeout, e.g. {example}.",
        LegacyField(f"{direction}_connect_timeout", releases("edge-20.7.5", "stable-2.9.0")),
        ValuesField(("proxy", key), nested=True),
    )


def _resources() -> Iterator[ConfigField]:
    for kind in ("requests", "limits"):
        for name, legacy in (("cpu", "cpu"), ("memory", "memory"), ("ephemeral-storage", "")):
            yield ConfigField(
                ("proxy", "resource", kind, name),
                QUANTITY,
                f"The proxy container's {name} {kind[:-1]}.",
                LegacyField(f"resource.{kind[:-1]}_{legacy}") if legacy else None,
                # requests.cpu -> resources.cpu.request
                ValuesField(
                    ("proxy", "resources", name, kind[:-1]),
                    nested=True,
                    convert=str,
                    releases=EPHEMERAL_STORAGE_SINCE if not legacy else VALUES_RELEASES,
                ),
            )


# -- values only v1alpha2 states (Linkerd's names; legacy Linkerd has none of them) ---------------

_PULL_POLICY: Final = enum("Always", "IfNotPresent", "Never")
_LOG_FORMAT: Final = enum("plain", "json")
_INBOUND_POLICY: Final = enum(
    "all-unauthenticated",
    "all-authenticated",
    "cluster-unauthenticated",
    "cluster-authenticated",
    "deny",
    "audit",
)
_ADDRESS: Final = text(512, "an address host:port", "collector.linkerd-jaeger:4317")
_MOUNT_PATH: Final = text(4096, "a path in the container", "/var/run/secrets/tokens")
_SECONDS: Final = count("a number of seconds", 10)
_SECURITY_CONTEXT: Final = free_object(
    "a container securityContext", {"readOnlyRootFilesystem": True}
)
_PROXY_PARAMS: Final = free_object(
    "the proxy's parameters by scope, protocol and name",
    {"server": {"http2": {"keepAliveInterval": "10s"}}},
)
# Under global: in the 2.9 layout (edge-20.10.2 .. edge-21.2.1, stable-2.9.x).
_NESTED_IN_2_9: Final = frozenset({"proxy", "proxyInit", "imagePullPolicy"})


def _linkerd(path: str, grammar: Grammar, description: str, since: Releases) -> ConfigField:
    """A value only v1alpha2 states, by its values path (``proxy.nativeSidecar``): in the
    hub's ``values`` section, written where Linkerd's chart has it by the releases
    ``since`` says (Linkerd's chart history), refused by the legacy format."""
    keys = tuple(path.split("."))
    return ConfigField(
        ("values", *keys),
        grammar,
        description,
        None,
        ValuesField(keys, nested=keys[0] in _NESTED_IN_2_9, releases=since),
    )


FIELDS: Final[tuple[ConfigField, ...]] = (
    # -- spec.global ----------------------------------------------------------------------
    ConfigField(
        ("global", "linkerdNamespace"),
        DNS_LABEL,
        "Namespace of the Linkerd control plane (where the ConfigMap is).",
        LegacyField("linkerd_namespace", default="linkerd"),
        None,
        immutable=True,
        location=True,
        default="linkerd",
        doc="where the ConfigMap is",
    ),
    ConfigField(
        ("global", "configMap"),
        DNS_SUBDOMAIN,
        "Name of the ConfigMap to manage.",
        None,
        None,
        immutable=True,
        location=True,
        default="linkerd-config",
        doc="where the ConfigMap is",
    ),
    ConfigField(
        ("global", "cniEnabled"),
        BOOLEAN,
        "Whether the Linkerd CNI plugin is used.",
        LegacyField("cni_enabled", default=False),
        ValuesField(("cniEnabled",), nested=True),
    ),
    ConfigField(
        ("global", "version"),
        LINKERD_VERSION,
        "Linkerd version, e.g. edge-19.12.3 or edge-26.8.3; picks the config format. "
        "Leave it out to follow the version the cluster's linkerd-config declares.",
        LegacyField("version"),
        ValuesField(("linkerdVersion",), nested=True),
        doc="values: the injector's fallback proxy version",
    ),
    ConfigField(
        ("global", "identityContext", "trustDomain"),
        DNS_SUBDOMAIN,
        "Trust domain of identities.",
        LegacyField("identity_context.trust_domain", default="cluster.local"),
        ValuesField(("identityTrustDomain",), nested=True),
    ),
    ConfigField(
        ("global", "identityContext", "trustAnchorsPEM"),
        PEM_BUNDLE,
        "PEM bundle of trust anchor (root CA) certificates. When empty, the anchor already in "
        "the cluster's linkerd-config is kept.",
        LegacyField("identity_context.trust_anchors_pem"),
        ValuesField(("identityTrustAnchorsPEM",), nested=True),
        doc="values: also `ca-bundle.crt` of linkerd-identity-trust-roots (edge-21.7.5+, "
        "stable-2.11.0+)",
    ),
    ConfigField(
        ("global", "identityContext", "issuanceLifeTime"),
        DURATION,
        "Lifetime of issued certificates, e.g. 86400s.",
        LegacyField("identity_context.issuance_lifetime", default="86400s"),
        ValuesField(("identity", "issuer", "issuanceLifetime")),
    ),
    ConfigField(
        ("global", "identityContext", "clockSkewAllowance"),
        DURATION,
        "Tolerated clock skew, e.g. 20s.",
        LegacyField("identity_context.clock_skew_allowance", default="20s"),
        ValuesField(("identity", "issuer", "clockSkewAllowance")),
    ),
    ConfigField(
        ("global", "identityContext", "scheme"),
        enum("linkerd.io/tls"),
        "Identity scheme.",
        LegacyField(
            "identity_context.scheme",
            releases("edge-19.10.5", "stable-2.7.0"),
            gate="scheme",
            default="linkerd.io/tls",
        ),
        ValuesField(("identity", "issuer", "scheme")),
        doc="legacy: stable-2.6 has no field for it and takes only linkerd.io/tls",
    ),
    ConfigField(
        ("global", "omitWebhookSideEffects"),
        BOOLEAN,
        "Declare webhooks without side effects.",
        LegacyField("omitWebhookSideEffects", default=False),
        ValuesField(
            ("omitWebhookSideEffects",),
            releases=releases(
                "edge-20.10.2", "stable-2.9.0", until=("edge-21.9.4", "stable-2.11.0")
            ),
            gone="Linkerd's webhooks declare no side effects",
        ),
    ),
    ConfigField(
        ("global", "clusterDomain"),
        DNS_SUBDOMAIN,
        "Cluster DNS domain.",
        LegacyField("cluster_domain", default="cluster.local"),
        ValuesField(("clusterDomain",), nested=True),
    ),
    ConfigField(
        ("global", "endpointSliceEnabled"),
        BOOLEAN,
        "Use EndpointSlices.",
        LegacyField("endpoint_slice_enabled", releases("edge-20.7.3", until=("edge-20.8.4",))),
        ValuesField(("enableEndpointSlices",), nested=True),
    ),
    # -- spec.proxy -----------------------------------------------------------------------
    *_image(
        "proxyImage",
        "proxy",
        "proxy_image",
        ("proxy", "image"),
        default="gcr.io/linkerd-io/proxy",
    ),
    *_image(
        "proxyInitImage",
        "proxy-init",
        "proxy_init_image",
        ("proxyInit", "image"),
        values_releases=Releases(VALUES_RELEASES.since, UNIFIED_IMAGE.since),
        gone=_UNIFIED,
        default="gcr.io/linkerd-io/proxy-init",
    ),
    _port("adminPort", "admin_port", "admin", 4191),
    _port("controlPort", "control_port", "control", 4190),
    _port("inboundPort", "inbound_port", "inbound", 4143),
    _port("outboundPort", "outbound_port", "outbound", 4140),
    _ignored("Inbound"),
    _ignored("Outbound"),
    ConfigField(
        ("proxy", "logLevel"),
        LOG_LEVEL,
        "Proxy log level, e.g. warn,linkerd2_proxy=info.",
        LegacyField("log_level.level", default="warn,linkerd2_proxy=info"),
        ValuesField(("proxy", "logLevel"), nested=True),
    ),
    ConfigField(
        ("proxy", "disableExternalProfiles"),
        BOOLEAN,
        "Do not use service profiles outside the mesh.",
        LegacyField("disable_external_profiles", default=True),
        ValuesField(("proxy", "enableExternalProfiles"), nested=True, convert=_not),
        served_as=_INVERTED,
        doc="values: inverted",
    ),
    ConfigField(
        ("proxy", "proxyVersion"),
        IMAGE_TAG,
        "Proxy version, e.g. edge-19.12.3.",
        LegacyField("proxy_version"),
        ValuesField(("proxy", "image", "version"), nested=True),
        required=True,
    ),
    ConfigField(
        ("proxy", "proxyInitImageVersion"),
        IMAGE_TAG,
        "proxy-init version, e.g. v1.2.0 (required by the legacy format).",
        LegacyField("proxy_init_image_version"),
        ValuesField(
            ("proxyInit", "image", "version"),
            nested=True,
            releases=Releases(VALUES_RELEASES.since, UNIFIED_IMAGE.since),
            gone=_UNIFIED,
        ),
    ),
    ConfigField(
        ("proxy", "proxyUID"),
        Grammar(
            "integer", "a user ID 0-2147483647", 2102, minimum=0, maximum=2**31 - 1, int64=True
        ),
        "UID the proxy runs as.",
        LegacyField("proxy_uid", default=2102),
        ValuesField(("proxy", "uid"), nested=True),
    ),
    *_resources(),
    *_image(
        "debugImage",
        "debug container",
        "debug_image",
        ("debugContainer", "image"),
        legacy_releases=releases("edge-20.1.3", "stable-2.7.0"),
        nested=False,
    ),
    ConfigField(
        ("proxy", "debugImageVersion"),
        IMAGE_TAG,
        "Debug container version.",
        LegacyField("debug_image_version", releases("edge-20.1.3", "stable-2.7.0")),
        ValuesField(("debugContainer", "image", "version")),
    ),
    ConfigField(
        ("proxy", "destinationGetNetworks"),
        CIDR_LIST,
        "Networks the proxy resolves through the destination service, comma-separated CIDRs.",
        LegacyField("destination_get_networks", releases("edge-20.6.3", "stable-2.8.1")),
        # edge-20.10.2 and 20.10.3 read global.proxy.destinationGetNetworks instead.
        ValuesField(
            ("clusterNetworks",), nested=True, releases=releases("edge-20.10.4", "stable-2.9.0")
        ),
    ),
    ConfigField(
        ("proxy", "logFormat"),
        enum("plain", "json"),
        "Proxy log format.",
        LegacyField("log_format", releases("edge-20.7.1", "stable-2.9.0")),
        ValuesField(("proxy", "logFormat"), nested=True),
    ),
    _connect_timeout("outbound", "1000ms"),
    _connect_timeout("inbound", "100ms"),
    # -- values only v1alpha2 states: what edge-26.8.3's injector reads for a pod
    # (tests/fixtures/injector_values_edge-26.8.3.json), first releases from Linkerd's
    # chart history ---------------------------------------------------------------------
    _linkerd(
        "disableIPv6",
        BOOLEAN,
        "Disables routing IPv6 traffic in addition to IPv4 traffic through the proxy (IPv6 "
        "routing only available as of proxy-init v2.3.0 and linkerd-cni v1.4.0).",
        releases("edge-24.4.1"),
    ),
    _linkerd(
        "imagePullPolicy",
        _PULL_POLICY,
        "Docker image pull policy.",
        VALUES_RELEASES,
    ),
    _linkerd(
        "identity.serviceAccountTokenProjection",
        BOOLEAN,
        "Use Service Account token Volume projection for pod validation instead of the default "
        "token.",
        releases("edge-21.11.1", "stable-2.12.0"),
    ),
    _linkerd(
        "networkValidator.connectAddr",
        _ADDRESS,
        "Address to which the network-validator will attempt to connect.",
        releases("edge-22.10.3", "stable-2.13.0"),
    ),
    _linkerd(
        "networkValidator.listenAddr",
        _ADDRESS,
        "Address to which network-validator listens to requests from itself. If empty, defaults "
        "to 0.0.0.0:4140 and [::]:4140 for IPv4 and IPv6 respectively.",
        releases("edge-22.10.3", "stable-2.13.0"),
    ),
    _linkerd(
        "networkValidator.logFormat",
        _LOG_FORMAT,
        "Log format (`plain` or `json`) for network-validator.",
        releases("edge-22.10.3", "stable-2.13.0"),
    ),
    _linkerd(
        "networkValidator.logLevel",
        LOG_LEVEL,
        "Log level for the network-validator.",
        releases("edge-22.10.3", "stable-2.13.0"),
    ),
    _linkerd(
        "networkValidator.securityContext",
        _SECURITY_CONTEXT,
        "The securityContext in the network-validator pod spec.",
        releases("edge-25.8.4"),
    ),
    _linkerd(
        "networkValidator.timeout",
        DURATION,
        "Timeout before network-validator fails to validate the pod's network connectivity.",
        releases("edge-22.10.3", "stable-2.13.0"),
    ),
    _linkerd(
        "proxy.accessLog",
        enum("apache", "json"),
        "The proxy access log format (apache or json); none when unset.",
        releases("edge-22.1.5", "stable-2.12.0"),
    ),
    _linkerd(
        "proxy.additionalEnv",
        ENV_VARS,
        "Environment variables added to the proxy container.",
        releases("edge-24.2.3"),
    ),
    _linkerd(
        "proxy.await",
        BOOLEAN,
        "If set, the application container will not start until the proxy is ready.",
        releases("edge-21.4.4", "stable-2.11.0"),
    ),
    _linkerd(
        "proxy.capabilities.add",
        CAPABILITIES,
        "Linux capabilities added to the proxy container.",
        VALUES_RELEASES,
    ),
    _linkerd(
        "proxy.capabilities.drop",
        CAPABILITIES,
        "Linux capabilities dropped from the proxy container.",
        VALUES_RELEASES,
    ),
    _linkerd(
        "proxy.control.streams.idleTimeout",
        PROXY_DURATION,
        "The timeout between consecutive updates from the control plane.",
        releases("edge-23.12.4"),
    ),
    _linkerd(
        "proxy.control.streams.initialTimeout",
        PROXY_DURATION,
        "The timeout for the first update from the control plane.",
        releases("edge-23.12.4"),
    ),
    _linkerd(
        "proxy.control.streams.lifetime",
        PROXY_DURATION,
        "The maximum duration for a response stream (i.e. before it will be reinitialized).",
        releases("edge-23.12.4"),
    ),
    _linkerd(
        "proxy.cores",
        count("a number of CPU cores", 2, int64=True),
        "Deprecated: use runtime.workers.minimum.",
        releases("edge-20.11.1", "stable-2.9.0"),
    ),
    _linkerd(
        "proxy.defaultInboundPolicy",
        _INBOUND_POLICY,
        "The default allow policy to use when no `Server` selects a pod.",
        releases("edge-21.8.4", "stable-2.11.0"),
    ),
    _linkerd(
        "proxy.disableInboundProtocolDetectTimeout",
        BOOLEAN,
        "When set to true, disables the protocol detection timeout on the inbound side of the "
        "proxy by setting it to a very high value.",
        releases("edge-23.11.1", "stable-2.14.4"),
    ),
    _linkerd(
        "proxy.disableOutboundProtocolDetectTimeout",
        BOOLEAN,
        "When set to true, disables the protocol detection timeout on the outbound side of the "
        "proxy by setting it to a very high value.",
        releases("edge-23.11.1", "stable-2.14.4"),
    ),
    _linkerd(
        "proxy.enableShutdownEndpoint",
        BOOLEAN,
        "Enables the proxy's /shutdown admin endpoint.",
        releases("edge-24.6.2"),
    ),
    _linkerd(
        "proxy.experimentalEnv",
        ENV_VARS,
        "Environment variables for the proxy's experimental features.",
        releases("edge-24.1.2"),
    ),
    _linkerd(
        "proxy.gid",
        count("a group ID, or -1 for none", 2102, minimum=-1, int64=True),
        "Optional customisation of the group id under which the proxy runs (the group ID will "
        "be omitted if lower than 0).",
        releases("edge-24.5.4"),
    ),
    _linkerd(
        "proxy.inbound",
        _PROXY_PARAMS,
        "The proxy's inbound parameters, by scope and protocol (each leaf becomes "
        "LINKERD2_PROXY_INBOUND_<SCOPE>_<PROTO>_<PARAM>).",
        releases("edge-24.4.5"),
    ),
    _linkerd(
        "proxy.inboundDiscoveryCacheUnusedTimeout",
        PROXY_DURATION,
        "Maximum time allowed before an unused inbound discovery result is evicted from the cache.",
        releases("edge-23.5.1", "stable-2.13.4"),
    ),
    _linkerd(
        "proxy.isGateway",
        BOOLEAN,
        "The pod is a multicluster gateway.",
        VALUES_RELEASES,
    ),
    _linkerd(
        "proxy.isIngress",
        BOOLEAN,
        "The pod is an ingress controller (the proxy routes by l5d-dst-override).",
        releases("edge-20.10.6", "stable-2.9.0"),
    ),
    _linkerd(
        "proxy.livenessProbe.initialDelaySeconds",
        _SECONDS,
        "Seconds before the proxy's liveness probe starts.",
        releases("edge-24.2.2"),
    ),
    _linkerd(
        "proxy.livenessProbe.timeoutSeconds",
        _SECONDS,
        "Timeout of the proxy's liveness probe, in seconds.",
        releases("edge-24.2.2"),
    ),
    _linkerd(
        "proxy.logHTTPHeaders",
        enum("off", "insecure"),
        "(`off` or `insecure`) If set to `off`, will prevent the proxy from logging HTTP headers.",
        releases("edge-24.6.2"),
    ),
    _linkerd(
        "proxy.metrics.hostnameLabels",
        BOOLEAN,
        "Whether or not to export hostname labels in outbound request metrics.",
        releases("edge-25.3.4"),
    ),
    _linkerd(
        "proxy.nativeSidecar",
        BOOLEAN,
        "Enable native sidecars.",
        releases("edge-23.11.4"),
    ),
    _linkerd(
        "proxy.opaquePorts",
        IGNORED_PORTS_TEXT,
        "Default set of opaque ports - SMTP (25,587) server-first - MYSQL (3306) server-first - "
        "Galera (4444) server-first - PostgreSQL (5432) server-first - Redis (6379) "
        "server-first - ElasticSearch (9300) server-first - Memcached (11211) clients do not "
        "issue any preamble, which breaks detection.",
        VALUES_RELEASES,
    ),
    _linkerd(
        "proxy.outbound",
        _PROXY_PARAMS,
        "The proxy's outbound parameters, by scope and protocol (each leaf becomes "
        "LINKERD2_PROXY_OUTBOUND_<SCOPE>_<PROTO>_<PARAM>).",
        releases("edge-24.4.5"),
    ),
    _linkerd(
        "proxy.outboundDiscoveryCacheUnusedTimeout",
        PROXY_DURATION,
        "Maximum time allowed before an unused outbound discovery result is evicted from the "
        "cache.",
        releases("edge-23.5.1", "stable-2.13.4"),
    ),
    _linkerd(
        "proxy.podInboundPorts",
        IGNORED_PORTS_TEXT,
        "The pod's inbound ports, comma-separated (the injector otherwise reads them from the "
        "containers).",
        releases("edge-21.7.3", "stable-2.11.0"),
    ),
    _linkerd(
        "proxy.readinessProbe.initialDelaySeconds",
        _SECONDS,
        "Seconds before the proxy's readiness probe starts.",
        releases("edge-24.2.2"),
    ),
    _linkerd(
        "proxy.readinessProbe.timeoutSeconds",
        _SECONDS,
        "Timeout of the proxy's readiness probe, in seconds.",
        releases("edge-24.2.2"),
    ),
    _linkerd(
        "proxy.requireIdentityOnInboundPorts",
        IGNORED_PORTS_TEXT,
        "Inbound ports that accept only meshed (mTLS) clients, comma-separated.",
        VALUES_RELEASES,
    ),
    _linkerd(
        "proxy.runtime.workers.maximum",
        count("a number of worker threads", 2, minimum=1, int64=True),
        "At most this many proxy worker threads.",
        releases("edge-25.3.3"),
    ),
    _linkerd(
        "proxy.runtime.workers.maximumCPURatio",
        RATIO,
        "Maximum number of worker threads that the proxy can use, by ratio of the number of "
        "available CPUs.",
        releases("edge-25.3.3"),
    ),
    _linkerd(
        "proxy.runtime.workers.minimum",
        count("a number of worker threads", 1, minimum=1, int64=True),
        "Configures a lower bound on the number of worker threads that the proxy can use. When "
        "maximumCPURatio is not set, this value is used.",
        releases("edge-25.3.3"),
    ),
    _linkerd(
        "proxy.saMountPath.mountPath",
        _MOUNT_PATH,
        "Where the proxy mounts the service account token.",
        VALUES_RELEASES,
    ),
    _linkerd(
        "proxy.saMountPath.name",
        DNS_LABEL,
        "The volume name of the proxy's service account token.",
        VALUES_RELEASES,
    ),
    _linkerd(
        "proxy.saMountPath.readOnly",
        BOOLEAN,
        "Mount the proxy's service account token read-only.",
        VALUES_RELEASES,
    ),
    _linkerd(
        "proxy.securityContext",
        _SECURITY_CONTEXT,
        "Optional custom security context for the proxy container.",
        releases("edge-25.8.4"),
    ),
    _linkerd(
        "proxy.shutdownGracePeriod",
        PROXY_DURATION,
        "Grace period for graceful proxy shutdowns. If this timeout elapses before all open "
        "connections have completed, the proxy will terminate forcefully, closing any remaining "
        "connections.",
        releases("edge-22.7.2", "stable-2.12.0"),
    ),
    _linkerd(
        "proxy.startupProbe.failureThreshold",
        count("a number of probes", 120, minimum=1),
        "Failures the proxy's startup probe tolerates (native sidecar).",
        releases("edge-23.11.4"),
    ),
    _linkerd(
        "proxy.startupProbe.initialDelaySeconds",
        _SECONDS,
        "Seconds before the proxy's startup probe starts (native sidecar).",
        releases("edge-23.11.4"),
    ),
    _linkerd(
        "proxy.startupProbe.periodSeconds",
        count("a number of seconds", 1, minimum=1),
        "Seconds between the proxy's startup probes (native sidecar).",
        releases("edge-23.11.4"),
    ),
    _linkerd(
        "proxy.tracing.collector.endpoint",
        _ADDRESS,
        "The collector endpoint to send traces to.",
        releases("edge-25.6.4"),
    ),
    _linkerd(
        "proxy.tracing.collector.meshIdentity.namespace",
        DNS_LABEL,
        "Mesh identity namespace for the trace collector.",
        releases("edge-25.10.1"),
    ),
    _linkerd(
        "proxy.tracing.collector.meshIdentity.serviceAccountName",
        DNS_SUBDOMAIN,
        "The trace collector's service account name (its mesh identity), often default.",
        releases("edge-25.6.4"),
    ),
    _linkerd(
        "proxy.tracing.enabled",
        BOOLEAN,
        "Enables trace collection and export in the proxy.",
        releases("edge-25.10.1"),
    ),
    _linkerd(
        "proxy.tracing.labels",
        STRING_MAP,
        "Additional labels to add to the traces emitted by the proxy.",
        releases("edge-25.10.2"),
    ),
    _linkerd(
        "proxy.tracing.protocol",
        enum("opentelemetry", "opencensus"),
        "The proxy's trace export protocol.",
        releases("edge-25.6.4"),
    ),
    _linkerd(
        "proxy.tracing.traceServiceName",
        text(253, "a service name", "linkerd-proxy"),
        "The service name the proxy's spans carry.",
        releases("edge-25.6.4"),
    ),
    _linkerd(
        "proxy.waitBeforeExitSeconds",
        _SECONDS,
        "If set the injected proxy sidecars in the data plane will stay alive for at least the "
        "given period before receiving the SIGTERM signal from Kubernetes but no longer than "
        "the pod's `terminationGracePeriodSeconds`. See Lifecycle hooks for more info on "
        "container lifecycle hooks.",
        VALUES_RELEASES,
    ),
    _linkerd(
        "proxyInit.capabilities.add",
        CAPABILITIES,
        "Linux capabilities added to the proxy-init container.",
        VALUES_RELEASES,
    ),
    _linkerd(
        "proxyInit.capabilities.drop",
        CAPABILITIES,
        "Linux capabilities dropped from the proxy-init container.",
        VALUES_RELEASES,
    ),
    _linkerd(
        "proxyInit.closeWaitTimeoutSecs",
        _SECONDS,
        "Changes the default value for the nf_conntrack_tcp_timeout_close_wait kernel "
        "parameter. If used, runAsRoot needs to be true.",
        VALUES_RELEASES,
    ),
    _linkerd(
        "proxyInit.iptablesMode",
        enum("nft", "legacy"),
        "Variant of iptables that will be used to configure routing.",
        releases("edge-22.7.3", "stable-2.12.0"),
    ),
    _linkerd(
        "proxyInit.logFormat",
        _LOG_FORMAT,
        "Log format (`plain` or `json`) for the proxy-init.",
        releases("edge-21.11.2", "stable-2.11.2"),
    ),
    _linkerd(
        "proxyInit.logLevel",
        enum("trace", "debug", "info", "warn", "warning", "error", "fatal", "panic"),
        "Log level for the proxy-init.",
        releases("edge-21.11.2", "stable-2.11.2"),
    ),
    _linkerd(
        "proxyInit.privileged",
        BOOLEAN,
        "Privileged mode allows the container processes to inherit all security capabilities "
        "and bypass any security limitations enforced by the kubelet.",
        releases("edge-22.12.1", "stable-2.12.3"),
    ),
    _linkerd(
        "proxyInit.runAsGroup",
        count("a group ID", 65534, int64=True),
        "This value is used only if runAsRoot is false; otherwise runAsGroup will be 0.",
        releases("edge-24.5.4"),
    ),
    _linkerd(
        "proxyInit.runAsRoot",
        BOOLEAN,
        "Allow overriding the runAsNonRoot behaviour "
        "(<https://github.com/linkerd/linkerd2/issues/7308>).",
        releases("edge-21.12.1", "stable-2.11.2"),
    ),
    _linkerd(
        "proxyInit.runAsUser",
        count("a user ID", 65534, int64=True),
        "This value is used only if runAsRoot is false; otherwise runAsUser will be 0.",
        releases("edge-22.8.3", "stable-2.12.0"),
    ),
    _linkerd(
        "proxyInit.saMountPath.mountPath",
        _MOUNT_PATH,
        "Where proxy-init mounts the service account token.",
        VALUES_RELEASES,
    ),
    _linkerd(
        "proxyInit.saMountPath.name",
        DNS_LABEL,
        "The volume name of proxy-init's service account token.",
        VALUES_RELEASES,
    ),
    _linkerd(
        "proxyInit.saMountPath.readOnly",
        BOOLEAN,
        "Mount proxy-init's service account token read-only.",
        VALUES_RELEASES,
    ),
    _linkerd(
        "proxyInit.skipSubnets",
        CIDR_LIST,
        "Comma-separated list of subnets in valid CIDR format that should be skipped by the proxy.",
        releases("edge-22.1.4", "stable-2.11.2"),
    ),
    _linkerd(
        "proxyInit.xtMountPath.mountPath",
        _MOUNT_PATH,
        "Where proxy-init mounts the xtables lock.",
        VALUES_RELEASES,
    ),
    _linkerd(
        "proxyInit.xtMountPath.name",
        DNS_LABEL,
        "The volume name of proxy-init's xtables lock.",
        VALUES_RELEASES,
    ),
)

HUB_SECTIONS: Final = ("global", "proxy", "values")
"""The configuration sections of the hub, the form the domain reads (``spec.conversion``):
v1alpha1's two, and ``values`` for the fields only v1alpha2 has."""

SECTIONS: Final[Mapping[Path, str]] = {
    ("global",): "Control-plane settings (legacy: the ConfigMap's global key; values: "
    "top-level values).",
    ("global", "identityContext"): "mTLS identity settings.",
    ("proxy",): "Data-plane proxy settings (legacy: the ConfigMap's proxy key; values: proxy, "
    "proxyInit).",
    ("proxy", "proxyImage"): "The proxy image.",
    ("proxy", "proxyInitImage"): "The proxy-init image.",
    ("proxy", "debugImage"): "The debug container image.",
    ("proxy", "resource"): "Proxy container resources.",
    ("proxy", "resource", "requests"): "Requests.",
    ("proxy", "resource", "limits"): "Limits.",
}
"""The objects between the sections and the fields: their descriptions."""

_PROXY_PORTS: Final = ("adminPort", "controlPort", "inboundPort", "outboundPort")


def by_path(fields: tuple[ConfigField, ...] = FIELDS) -> dict[Path, ConfigField]:
    return {row.path: row for row in fields}


def _objects(fields: tuple[ConfigField, ...]) -> set[Path]:
    return {row.path[:i] for row in fields for i in range(1, len(row.path))}


# -- the schema ----------------------------------------------------------------------------------


def schema(section: str, fields: tuple[ConfigField, ...] = FIELDS) -> dict[str, Any]:
    """The OpenAPI schema of ``spec.<section>`` (``global`` or ``proxy``)."""
    root: dict[str, Any] = _object((section,))
    for row in fields:
        if row.path[0] != section:
            continue
        node = root
        for depth in range(1, len(row.path) - 1):
            node = node["properties"].setdefault(row.path[depth], _object(row.path[: depth + 1]))
        leaf = row.grammar.schema(row.description)
        if row.immutable:
            leaf["x-kubernetes-validations"] = [
                {"rule": "self == oldSelf", "message": f"{row.path[-1]} is immutable"}
            ]
        node["properties"][row.path[-1]] = leaf
        if row.required:
            node.setdefault("required", []).append(row.path[-1])
    if section == "proxy":
        root["x-kubernetes-validations"] = [_distinct(list(_PROXY_PORTS))]
    return root


def _object(path: Path) -> dict[str, Any]:
    return {"type": "object", "description": SECTIONS.get(path, ""), "properties": {}}


V1ALPHA2_SECTIONS: Final[Mapping[Path, str]] = {
    ("values",): "Linkerd's configuration values, by the names Linkerd's chart and "
    "`linkerd install --set` use (proxy.image.version, proxy.nativeSidecar, "
    "proxyInit.ignoreInboundPorts, ...). Legacy Linkerd (up to edge-20.10.1) takes those "
    "its global/proxy protobuf has.",
    ("values", "proxy"): "The data-plane proxy.",
    ("values", "proxyInit"): "The proxy-init container (or, on releases with the unified "
    "proxy image, the proxy's init container).",
    ("values", "debugContainer"): "The debug sidecar.",
}


def v1alpha2_schema(fields: tuple[ConfigField, ...] = FIELDS) -> dict[str, Any]:
    """The OpenAPI properties of v1alpha2's ``spec`` that the table owns: the location
    fields at the top and ``values``. Required objects on the way to a required field are
    required too, so a v1alpha2 spec needs what a v1alpha1 spec needs."""
    root: dict[str, Any] = {"type": "object", "properties": {}}
    ports: dict[str, Path] = {}
    for row in fields:
        path = row.v1alpha2_path
        node = root
        for depth in range(len(path) - 1):
            if row.required:
                _require(node, path[depth])
            node = node["properties"].setdefault(
                path[depth],
                {
                    "type": "object",
                    "description": V1ALPHA2_SECTIONS.get(path[: depth + 1], ""),
                    "properties": {},
                },
            )
        leaf = row.v1alpha2_grammar.schema(row.description)
        if row.immutable:
            leaf["x-kubernetes-validations"] = [
                {"rule": "self == oldSelf", "message": f"{path[-1]} is immutable"}
            ]
        node["properties"][path[-1]] = leaf
        if row.required:
            _require(node, path[-1])
        if row.path[:1] == ("proxy",) and row.path[-1] in _PROXY_PORTS:
            ports[row.path[-1]] = path
    parents = {path[:-1] for path in ports.values()}
    assert len(parents) == 1, "the proxy's ports share one object in v1alpha2"
    node = root
    for key in parents.pop():
        node = node["properties"][key]
    names = [ports[port][-1] for port in _PROXY_PORTS]
    node["x-kubernetes-validations"] = [_distinct(names)]
    return root


def _require(node: dict[str, Any], key: str) -> None:
    required = node.setdefault("required", [])
    if key not in required:
        required.append(key)


def _distinct(names: list[str]) -> dict[str, str]:
    rule = " && ".join(
        f"(!has(self.{a}) || !has(self.{b}) || self.{a} != self.{b})"
        for i, a in enumerate(names)
        for b in names[i + 1 :]
    )
    listed = ", ".join(names[:-1]) + f" and {names[-1]}"
    return {"rule": rule, "message": f"{listed} must all differ"}


# -- reading a spec ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stated:
    """One stated (non-null) value of a spec's configuration sections: a field of the table
    (``row``), or something the table has no such field for (``problem`` says what)."""

    field: str
    row: ConfigField | None
    value: Any
    problem: str = ""


def spec_leaves(spec: Mapping[str, Any], fields: tuple[ConfigField, ...] = FIELDS) -> list[Stated]:
    """Every stated value of the hub's sections (``spec.global``, ``spec.proxy``, and
    ``spec.values`` for what only v1alpha2 states), in the spec's order: a
    table field with its value, or an unknown key, or a scalar where the table has an
    object. Walks only as deep as the table's objects, so its cost is bounded by the spec's
    size."""
    rows = by_path(fields)
    objects = _objects(fields)
    found: list[Stated] = []
    stack: list[tuple[Path, Any]] = [
        ((section,), spec.get(section))
        for section in reversed(HUB_SECTIONS)
        if spec.get(section) is not None
    ]
    while stack:
        path, value = stack.pop()
        where = "spec." + ".".join(path)
        if path in rows:
            found.append(Stated(where, rows[path], value))
        elif path not in objects:
            found.append(Stated(where, None, value, "is not a LinkerdConfig field"))
        elif not isinstance(value, Mapping):
            found.append(Stated(where, None, value, "must be an object"))
        else:
            stack.extend(
                ((*path, str(key)), child)
                for key, child in reversed(list(value.items()))
                if child is not None
            )
    return found


# -- the docs ------------------------------------------------------------------------------------


def _legacy_cell(row: ConfigField) -> str:
    if row.legacy is None:
        return "—" if row.location else "not in the legacy format"
    cell = f"`{row.legacy.proto}`"
    if row.legacy.releases is not None:
        cell += f" ({row.legacy.releases.describe()})"
    return cell


def _values_cell(row: ConfigField) -> str:
    if row.values is None:
        return "—"
    path = ".".join(row.values.path)
    nested = row.values.nested and row.values.releases.since[0] < _FLAT_SINCE
    return f"`{path}`" + (" (2.9: under `global.`)" if nested else "")


def _first_cell(row: ConfigField) -> str:
    """The first releases that read it, per format."""
    parts = []
    if row.legacy is not None:
        gate = row.legacy.releases
        parts.append("legacy: " + ("every release" if gate is None else gate.describe()))
    if row.values is not None:
        parts.append("values: " + row.values.releases.describe())
    return "; ".join(parts) or "every release"


DOCS_BEGIN: Final = "<!-- field-table:begin (generated by make generate; do not edit) -->"
DOCS_END: Final = "<!-- field-table:end -->"


def docs_table(fields: tuple[ConfigField, ...] = FIELDS) -> str:
    """The documentation's field table, in Markdown, between its markers: each field's name
    in v1alpha2 and v1alpha1, its value, where each format writes it and the first
    releases that read it."""
    lines = [
        DOCS_BEGIN,
        "",
        "| v1alpha2 (`spec.`) | v1alpha1 (`spec.`) | value | legacy protobuf (`global`/`proxy`) "
        "| Helm values | first release | notes |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in fields:
        grammar = row.v1alpha2_grammar
        value = grammar_of(grammar.schema(""))
        if grammar.pattern or grammar.explain or grammar.items:
            value = grammar.expected
        notes = "; ".join(note for note in (grammar.more, row.doc) if note)
        v1alpha1 = f"`{row.name}`" if row.in_v1alpha1 else "—"
        lines.append(
            f"| `{'.'.join(row.v1alpha2_path)}` | {v1alpha1} | {_escape(value)} "
            f"| {_legacy_cell(row)} | {_values_cell(row)} | {_first_cell(row)} "
            f"| {_escape(notes)} |"
        )
    lines += ["", DOCS_END]
    return "\n".join(lines)


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def with_docs_table(readme: str, fields: tuple[ConfigField, ...] = FIELDS) -> str:
    """``readme`` with the text between the table's markers replaced by ``docs_table``."""
    start, end = readme.index(DOCS_BEGIN), readme.index(DOCS_END) + len(DOCS_END)
    return readme[:start] + docs_table(fields) + readme[end:]


def write_docs_table(readme: str) -> None:
    """Rewrite the table in file ``readme`` (``make generate``)."""
    path = pathlib.Path(readme)
    path.write_text(with_docs_table(path.read_text()))
