"""The LinkerdConfig configuration fields: one row each, the one place a field is described.

From ``FIELDS`` follow: the CRD schema of ``spec.global`` and ``spec.proxy``
(``linkerdconfig_resource``), each field's grammar and messages in validation, the defaults
(every format's, and what ``linkerd install`` wrote in the legacy era), the legacy mapping
(the ``config.proto`` field, and the releases whose message has it), the values mapping (the
Helm values path, its conversion, the releases whose chart has it), and the documentation's
field table (``write_docs_table``, which ``make generate`` runs on the README; a test fails
when it is stale). Adding a field is one row plus its tests;
tests/unit/test_field_table.py proves it on a scratch copy.

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
    CIDR_LIST,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    DURATION,
    IGNORED_PORTS,
    IMAGE_NAME,
    IMAGE_TAG,
    LINKERD_VERSION,
    LOG_LEVEL,
    PEM_BUNDLE,
    PORT,
    PROXY_DURATION,
    QUANTITY,
    Grammar,
    enum,
    grammar_of,
)
from linkerd_config.linkerd.formats.versions import Releases, releases

__all__ = [
    "FIELDS",
    "SECTIONS",
    "VALUES_RELEASES",
    "ConfigField",
    "LegacyField",
    "Stated",
    "ValuesField",
    "by_path",
    "docs_table",
    "schema",
    "spec_leaves",
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

    @property
    def name(self) -> str:
        return ".".join(self.path)

    @property
    def field(self) -> str:
        """The path as admission and status name it: ``spec.proxy.adminPort``."""
        return f"spec.{self.name}"


def _ports(entries: Any) -> str:
    return ",".join(str(entry) for entry in entries)


def _not(value: Any) -> Any:
    return not value


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
)

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
        distinct = " && ".join(
            f"(!has(self.{a}) || !has(self.{b}) || self.{a} != self.{b})"
            for i, a in enumerate(_PROXY_PORTS)
            for b in _PROXY_PORTS[i + 1 :]
        )
        root["x-kubernetes-validations"] = [
            {
                "rule": distinct,
                "message": "adminPort, controlPort, inboundPort and outboundPort must all differ",
            }
        ]
    return root


def _object(path: Path) -> dict[str, Any]:
    return {"type": "object", "description": SECTIONS.get(path, ""), "properties": {}}


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
    """Every stated value of ``spec.global`` and ``spec.proxy``, in the spec's order: a
    table field with its value, or an unknown key, or a scalar where the table has an
    object. Walks only as deep as the table's objects, so its cost is bounded by the spec's
    size."""
    rows = by_path(fields)
    objects = _objects(fields)
    found: list[Stated] = []
    stack: list[tuple[Path, Any]] = [
        ((section,), spec.get(section))
        for section in reversed(("global", "proxy"))
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
        return "—" if row.values is None or row.doc else "not in the legacy format"
    cell = f"`{row.legacy.proto}`"
    if row.legacy.releases is not None:
        cell += f" ({row.legacy.releases.describe()})"
    return cell


def _values_cell(row: ConfigField) -> str:
    if row.values is None:
        return "—"
    path = ".".join(row.values.path)
    cell = f"`{path}`" + (" (2.9: under `global.`)" if row.values.nested else "")
    if row.values.releases != VALUES_RELEASES:
        cell += f" ({row.values.releases.describe()})"
    return cell


DOCS_BEGIN: Final = "<!-- field-table:begin (generated by make generate; do not edit) -->"
DOCS_END: Final = "<!-- field-table:end -->"


def docs_table(fields: tuple[ConfigField, ...] = FIELDS) -> str:
    """The documentation's field table, in Markdown, between its markers."""
    lines = [
        DOCS_BEGIN,
        "",
        "| LinkerdConfig field | value | legacy (`global`/`proxy`) | Helm values | notes |",
        "|---|---|---|---|---|",
    ]
    for row in fields:
        value = grammar_of(row.grammar.schema(""))
        if row.grammar.pattern or row.grammar.explain or row.grammar.items:
            value = row.grammar.expected
        notes = "; ".join(note for note in (row.grammar.more, row.doc) if note)
        lines.append(
            f"| `{row.name}` | {value.replace('|', chr(92) + '|')} | {_legacy_cell(row)} "
            f"| {_values_cell(row)} | {notes.replace('|', chr(92) + '|')} |"
        )
    lines += ["", DOCS_END]
    return "\n".join(lines)


def with_docs_table(readme: str, fields: tuple[ConfigField, ...] = FIELDS) -> str:
    """``readme`` with the text between the table's markers replaced by ``docs_table``."""
    start, end = readme.index(DOCS_BEGIN), readme.index(DOCS_END) + len(DOCS_END)
    return readme[:start] + docs_table(fields) + readme[end:]


def write_docs_table(readme: str) -> None:
    """Rewrite the table in file ``readme`` (``make generate``)."""
    path = pathlib.Path(readme)
    path.write_text(with_docs_table(path.read_text()))
