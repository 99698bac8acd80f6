"""Linkerd's legacy config format: protobuf messages as Go-jsonpb JSON under ``global``/``proxy``.

Linkerd from stable-2.6.0 / edge-19.12.1 up to (not including) stable-2.9.0 / edge-20.10.2
reads its control-plane and proxy defaults from the ``global`` and ``proxy`` keys of the
``linkerd-config`` ConfigMap, each one JSON document of its ``linkerd2.config.Global`` /
``Proxy`` message as Go's jsonpb (EmitDefaults) prints it, plus a trailing newline. (From
edge-20.10.2, linkerd2 PR #5036, the injector reads the Helm ``values`` key instead; stable-2.9.0
is the first stable release with that.) This module turns a LinkerdConfig ``spec`` into exactly
those bytes, so that the controller's output is indistinguishable from ``linkerd install``'s
and a drift check can compare strings.

The ``install`` key (what the CLI last ran with) is Linkerd's own record and is not managed.

Linkerd's ``config.proto`` changed inside the range, and EmitDefaults prints every field a
release's message has, so the output has exactly the target release's fields, in its order:

========================================  ==================================================
releases                                  difference
========================================  ==================================================
stable-2.6.x                              ``identityContext`` has no ``scheme``
edge-20.1.1+, stable-2.7.0+               ignored ports ``[{"portRange":"1000-2000"}]``,
                                          before that ``[{"port":8888}]``
edge-20.1.3+, stable-2.7.0+               ``proxy``: ``debugImage``, ``debugImageVersion``
edge-20.6.3+, stable-2.8.1+               ``proxy``: ``destinationGetNetworks``
edge-20.7.1+                              ``proxy``: ``logFormat``
edge-20.7.3 to edge-20.8.3 only           ``global``: ``endpointSliceEnabled``
edge-20.7.5+                              ``proxy``: ``outboundConnectTimeout``,
                                          ``inboundConnectTimeout``
========================================  ==================================================

(stable-2.7.x and stable-2.8.0 share edge-20.1.3's message; no stable release has the last
three rows within the range.) ``config_pb2`` holds every field any release has;
``FIELD_RELEASES`` says which releases have the optional ones, and the messages a format
builds are ``config_pb2``'s without the fields its release lacks. A spec field absent from
the spec renders as the proto default (``null``, ``""``, ``false``), as Linkerd's own writer
does.

Nothing is dropped silently: Linkerd's reader ignores unknown fields, so a value written in the
wrong place or shape would just vanish (every ignored port would become port 0 / an empty
range). A spec value the target release cannot express is therefore an error naming the field
and the first release that has it: a port range before edge-20.1.1, a debug image before
stable-2.7.0. One allowance: stable-2.6 accepts ``scheme: linkerd.io/tls`` (what the defaults
fill in, and the only issuer scheme stable-2.6 has) and omits it; any other scheme is refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from typing import Any, Final

from google.protobuf import descriptor_pb2, descriptor_pool, duration_pb2, message_factory
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message

from linkerd_config.linkerd.formats import bounded
from linkerd_config.linkerd.formats.base import (
    FieldError,
    FormatError,
    Installed,
    InstalledDataError,
    Rendering,
)
from linkerd_config.linkerd.formats.jsonpb import marshal
from linkerd_config.linkerd.formats.legacy import config_pb2
from linkerd_config.linkerd.formats.legacy.install_defaults import LEGACY_DEFAULTS
from linkerd_config.linkerd.formats.versions import (
    LinkerdVersion,
    VersionError,
    first_of,
    firsts,
    parse_version,
)
from linkerd_config.linkerd.rollout import DesiredProxy

__all__ = [
    "FIELD_RELEASES",
    "FIRST_SUPPORTED",
    "FIRST_UNSUPPORTED",
    "MANAGED_KEYS",
    "PORT_RANGES_SINCE",
    "LegacyFormat",
    "Releases",
    "parse_go_duration",
]

MANAGED_KEYS: Final = frozenset({"global", "proxy"})
TRUST_ANCHOR_FIELD: Final = "spec.global.identityContext.trustAnchorsPEM"

# The oldest releases whose format we have seen: stable-2.6.0's install template and the
# edge-19.12.1 fixture.
FIRST_SUPPORTED: Final = firsts("stable-2.6.0", "edge-19.12.1")
# From these releases on, Linkerd's injector reads the Helm ``values`` key, not global/proxy
# (linkerd2 PR #5036, "Update Injection to use new linkerd-config.values"): a separate format.
FIRST_UNSUPPORTED: Final = firsts("stable-2.9.0", "edge-20.10.2")
# Ignored ports became `repeated PortRange` in these releases (linkerd2 PR "port ranges").
PORT_RANGES_SINCE: Final = firsts("edge-20.1.1", "stable-2.7.0")

_MAX_PORT = 65535
_MAX_UID = 2**31 - 1  # Kubernetes' bound for runAsUser
_PORT = re.compile(r"0|[1-9][0-9]*")
_RANGE = re.compile(r"(0|[1-9][0-9]*)-(0|[1-9][0-9]*)")
_RESOURCE_NAMES = ("cpu", "memory")

# Spec keys of the optional Proxy fields (all strings but the debug image), by proto field.
_PROXY_OPTIONAL: Final = {
    "debugImage": "debug_image",
    "debugImageVersion": "debug_image_version",
    "destinationGetNetworks": "destination_get_networks",
    "logFormat": "log_format",
    "outboundConnectTimeout": "outbound_connect_timeout",
    "inboundConnectTimeout": "inbound_connect_timeout",
}

# Every field of only some releases, by spec key (each in FIELD_RELEASES).
_OPTIONAL_FIELDS: Final = {**_PROXY_OPTIONAL, "endpointSliceEnabled": "endpoint_slice_enabled"}

_GLOBAL_KEYS = frozenset(
    {
        "linkerdNamespace",
        "cniEnabled",
        "version",
        "identityContext",
        "omitWebhookSideEffects",
        "clusterDomain",
        "endpointSliceEnabled",
        "configMap",  # the ConfigMap's name: where reconcile writes, not part of the data
    }
)
_IDENTITY_KEYS = frozenset(
    {"trustDomain", "trustAnchorsPEM", "issuanceLifeTime", "clockSkewAllowance", "scheme"}
)
_PROXY_KEYS = frozenset(
    {
        "proxyImage",
        "proxyInitImage",
        "adminPort",
        "controlPort",
        "inboundPort",
        "outboundPort",
        "ignoreInboundPorts",
        "ignoreOutboundPorts",
        "logLevel",
        "disableExternalProfiles",
        "proxyVersion",
        "proxyInitImageVersion",
        "proxyUID",
        "resource",
        *_PROXY_OPTIONAL,
    }
)
_IMAGE_KEYS = frozenset({"name", "pullPolicy"})

# The issuer scheme stable-2.6 always uses, though its IdentityContext cannot say so.
_LINKERD_SCHEME = "linkerd.io/tls"


@dataclass(frozen=True, slots=True)
class Releases:
    """The releases whose ``config.proto`` has a field.

    Per channel: from the first release of that channel in ``since`` up to (not including) the
    one in ``until``. A channel missing from ``since`` never has the field; one missing from
    ``until`` keeps it to the end of the legacy range.
    """

    since: tuple[LinkerdVersion, ...]
    until: tuple[LinkerdVersion, ...] = ()

    def include(self, version: LinkerdVersion) -> bool:
        first = first_of(self.since, version.channel)
        end = first_of(self.until, version.channel)
        return first is not None and version >= first and (end is None or version < end)

    def requirement(self, version: LinkerdVersion) -> str:
        """Why a release outside these cannot carry the field, naming the first that can."""
        first = first_of(self.since, version.channel)
        if first is None:
            spans = " or ".join(self._span(other) for other in self.since)
            return f"is only in Linkerd {spans}, in no {version.channel} release"
        if first_of(self.until, version.channel) is None:
            return f"needs Linkerd {first} or later"
        return f"is only in Linkerd {self._span(first)}"

    def _span(self, first: LinkerdVersion) -> str:
        end = first_of(self.until, first.channel)
        return f"{first} or later" if end is None else f"{first} up to (not including) {end}"


def _releases(*since: str, until: tuple[str, ...] = ()) -> Releases:
    return Releases(firsts(*since), firsts(*until))


# The fields of config_pb2's messages that only some releases of the range have, by (message,
# field); every other field is in every release that uses its message. Checked against copies
# of Linkerd's config.proto for every release (tests/fixtures/linkerd-legacy/). Releases past
# the range are named where they have the field, to say where to look.
FIELD_RELEASES: Final[Mapping[tuple[str, str], Releases]] = {
    ("IdentityContext", "scheme"): _releases("edge-19.10.5", "stable-2.7.0"),
    ("ProxyWithPortRanges", "debug_image"): _releases("edge-20.1.3", "stable-2.7.0"),
    ("ProxyWithPortRanges", "debug_image_version"): _releases("edge-20.1.3", "stable-2.7.0"),
    ("ProxyWithPortRanges", "destination_get_networks"): _releases("edge-20.6.3", "stable-2.8.1"),
    ("ProxyWithPortRanges", "log_format"): _releases("edge-20.7.1", "stable-2.9.0"),
    ("ProxyWithPortRanges", "outbound_connect_timeout"): _releases("edge-20.7.5", "stable-2.9.0"),
    ("ProxyWithPortRanges", "inbound_connect_timeout"): _releases("edge-20.7.5", "stable-2.9.0"),
    ("Global", "endpoint_slice_enabled"): _releases("edge-20.7.3", until=("edge-20.8.4",)),
}


@dataclass(frozen=True, slots=True)
class LegacyFormat:
    """The ``global``/``proxy`` protobuf-JSON format, for one Linkerd release."""

    version: LinkerdVersion

    def __post_init__(self) -> None:
        if not self.supports(self.version):
            raise FormatError([("spec.global.version", _unsupported(self.version))])

    @staticmethod
    def supports(version: LinkerdVersion) -> bool:
        """Whether ``version`` reads this format (and one we know the shape of)."""
        return version.at_least(*FIRST_SUPPORTED) and not version.at_least(*FIRST_UNSUPPORTED)

    @classmethod
    def for_version(cls, version: str | LinkerdVersion) -> LegacyFormat:
        """The format for a release name; FormatError on ``spec.global.version`` if none."""
        if isinstance(version, LinkerdVersion):
            return cls(version)
        try:
            return cls(parse_version(version))
        except VersionError as error:
            raise FormatError([("spec.global.version", str(error))]) from error

    @property
    def name(self) -> str:
        return "legacy"

    @property
    def managed_keys(self) -> frozenset[str]:
        return MANAGED_KEYS

    @property
    def owned_keys(self) -> frozenset[str]:
        """``global`` and ``proxy`` are written whole from the spec."""
        return MANAGED_KEYS

    def defaults(self) -> Mapping[str, Any]:
        """What ``linkerd install`` of the era wrote for a field the spec leaves out."""
        return LEGACY_DEFAULTS

    def check(self, spec: Mapping[str, Any]) -> list[FieldError]:
        """Everything ``render`` would refuse (a trust anchor is not needed to check)."""
        try:
            self.messages(spec)
        except FormatError as error:
            return list(error.errors)
        return []

    def rendering(self, spec: Mapping[str, Any], installed: Installed) -> Rendering:
        """``render`` of the spec, with the cluster's trust anchor when the spec has none
        (Linkerd cannot run without one: with neither, FormatError on the anchor field)."""
        stated = spec.get("global")
        global_: Mapping[str, Any] = stated if isinstance(stated, Mapping) else {}
        identity = global_.get("identityContext")
        identity = identity if isinstance(identity, Mapping) else {}
        source = "Spec"
        if not str(identity.get("trustAnchorsPEM") or "").strip():
            kept = self.trust_anchors(installed)
            if not kept:
                raise FormatError(
                    [
                        (
                            TRUST_ANCHOR_FIELD,
                            f"not set, and ConfigMap {installed.where} holds none to keep",
                        )
                    ]
                )
            spec = {
                **spec,
                "global": {**global_, "identityContext": {**identity, "trustAnchorsPEM": kept}},
            }
            source = "Cluster"
        data = self.render(spec)
        proxy = spec.get("proxy")
        version = str((proxy if isinstance(proxy, Mapping) else {}).get("proxyVersion") or "")
        return Rendering(
            data=data, managed=data, proxy=DesiredProxy(version), trust_anchor_source=source
        )

    @property
    def port_ranges(self) -> bool:
        """Whether this release reads ignored ports as ranges (``portRange``)."""
        return self.version.at_least(*PORT_RANGES_SINCE)

    def render(self, spec: Mapping[str, Any]) -> dict[str, str]:
        """The ``global`` and ``proxy`` values, byte for byte as Linkerd writes them."""
        return {key: marshal(message) + "\n" for key, message in self.messages(spec).items()}

    def messages(self, spec: Mapping[str, Any]) -> dict[str, Message]:
        """The protobuf messages behind ``render``, keyed by ConfigMap key."""
        reader = _Reader()
        root = spec if isinstance(spec, Mapping) else {}
        if not isinstance(spec, Mapping):
            reader.fail("spec", "must be an object")
        global_ = self._global(reader, reader.section(root, "global", "spec"))
        proxy = self._proxy(reader, reader.section(root, "proxy", "spec"))
        if reader.errors:
            raise FormatError(reader.errors)
        return {"global": self._exact(global_), "proxy": self._exact(proxy)}

    @property
    def absent_fields(self) -> frozenset[tuple[str, str]]:
        """The (message, field) pairs of ``config_pb2`` this release's config.proto lacks."""
        return frozenset(
            key for key, releases in FIELD_RELEASES.items() if not releases.include(self.version)
        )

    def has_field(self, message: str, field: str) -> bool:
        """Whether this release's ``message`` (a ``config_pb2`` name) has ``field``."""
        releases = FIELD_RELEASES.get((message, field))
        return releases is None or releases.include(self.version)

    def trust_anchors(self, installed: Installed) -> str | None:
        """The PEM in ``global``'s identityContext, or None when there is none to reuse.

        Accepts both the JSON names Linkerd writes and the original field names, as
        Linkerd's own reader does. Raises InstalledDataError if ``global`` is not the JSON
        of a Global message.
        """
        parsed = _installed_global(installed)
        if parsed is None:
            return None
        identity = _either(parsed, "identityContext", "identity_context")
        if identity is None:
            return None
        if not isinstance(identity, dict):
            raise InstalledDataError(
                installed.where, "global", "identityContext must be a JSON object or null"
            )
        pem = _either(identity, "trustAnchorsPem", "trust_anchors_pem")
        if pem is None or pem == "":
            return None
        if not isinstance(pem, str):
            raise InstalledDataError(
                installed.where, "global", "identityContext.trustAnchorsPem must be a string"
            )
        return pem

    @staticmethod
    def installed_version(installed: Installed) -> str | None:
        """The version an installed ``global`` declares (None without one)."""
        parsed = _installed_global(installed)
        version = parsed.get("version") if parsed is not None else None
        return version if isinstance(version, str) and version else None

    def _global(self, reader: _Reader, section: Mapping[str, Any]) -> config_pb2.Global:
        path = "spec.global"
        reader.unknown_keys(section, _GLOBAL_KEYS, path)
        version = reader.string(section, "version", path)
        if version:
            try:
                if parse_version(version) != self.version:
                    reader.fail(
                        f"{path}.version", f"is {version}, but this format writes {self.version}"
                    )
            except VersionError as error:
                reader.fail(f"{path}.version", str(error))
        identity_path = f"{path}.identityContext"
        identity = reader.section(section, "identityContext", path)
        reader.unknown_keys(identity, _IDENTITY_KEYS, identity_path)
        return config_pb2.Global(
            linkerd_namespace=reader.string(section, "linkerdNamespace", path),
            cni_enabled=reader.boolean(section, "cniEnabled", path),
            version=version,
            identity_context=config_pb2.IdentityContext(
                trust_domain=reader.string(identity, "trustDomain", identity_path),
                trust_anchors_pem=reader.string(identity, "trustAnchorsPEM", identity_path),
                issuance_lifetime=reader.duration(identity, "issuanceLifeTime", identity_path),
                clock_skew_allowance=reader.duration(identity, "clockSkewAllowance", identity_path),
                scheme=self._scheme(reader, identity, identity_path),
            ),
            # auto_inject_context stays unset: Linkerd always writes it as null.
            omitWebhookSideEffects=reader.boolean(section, "omitWebhookSideEffects", path),
            cluster_domain=reader.string(section, "clusterDomain", path),
            endpoint_slice_enabled=(
                self._given(reader, section, "endpointSliceEnabled", path, "Global")
                and reader.boolean(section, "endpointSliceEnabled", path)
            ),
        )

    def _scheme(self, reader: _Reader, identity: Mapping[str, Any], path: str) -> str:
        """The issuer scheme; stable-2.6 has no field for it and takes only its own one."""
        if self.has_field("IdentityContext", "scheme"):
            return reader.string(identity, "scheme", path)
        scheme = identity.get("scheme")
        if scheme is not None and not isinstance(scheme, str):
            reader.fail(f"{path}.scheme", "must be a string")
        elif scheme not in (None, "", _LINKERD_SCHEME):
            requirement = FIELD_RELEASES[("IdentityContext", "scheme")].requirement(self.version)
            reader.fail(
                f"{path}.scheme", f"{requirement}; {self.version} always uses {_LINKERD_SCHEME}"
            )
        return ""

    def _given(
        self, reader: _Reader, section: Mapping[str, Any], key: str, path: str, message: str
    ) -> bool:
        """Whether the spec gives ``key`` (a field of only some releases) and this release has it.

        A value given for a release without the field is an error naming the first release
        that has it; the caller then leaves the field at its default.
        """
        if section.get(key) is None:
            return False
        field = _OPTIONAL_FIELDS[key]
        if self.has_field(message, field):
            return True
        reader.fail(f"{path}.{key}", FIELD_RELEASES[(message, field)].requirement(self.version))
        return False

    def _exact(self, message: Message) -> Message:
        """``message`` as this release's message: the same values, only the release's fields.

        The readers refuse every value a release cannot carry, so the absent fields are at
        their defaults and converting loses nothing; a difference here is a bug.
        """
        exact: Message = _release_messages(self.absent_fields)[message.DESCRIPTOR.name]()
        exact.ParseFromString(message.SerializeToString())
        exact.DiscardUnknownFields()
        if exact.SerializeToString() != message.SerializeToString():
            raise AssertionError(f"{message.DESCRIPTOR.name} lost a value for {self.version}")
        return exact

    def _proxy(
        self, reader: _Reader, section: Mapping[str, Any]
    ) -> config_pb2.Proxy | config_pb2.ProxyWithPortRanges:
        path = "spec.proxy"
        reader.unknown_keys(section, _PROXY_KEYS, path)
        inbound = self._ignored_ports(reader, section, "ignoreInboundPorts", path)
        outbound = self._ignored_ports(reader, section, "ignoreOutboundPorts", path)
        fields: dict[str, Any] = {
            "proxy_image": reader.image(section, "proxyImage", path),
            "proxy_init_image": reader.image(section, "proxyInitImage", path),
            "control_port": config_pb2.Port(port=reader.port(section, "controlPort", path)),
            "inbound_port": config_pb2.Port(port=reader.port(section, "inboundPort", path)),
            "admin_port": config_pb2.Port(port=reader.port(section, "adminPort", path)),
            "outbound_port": config_pb2.Port(port=reader.port(section, "outboundPort", path)),
            "resource": reader.resources(section, "resource", path),
            "proxy_uid": reader.integer(section, "proxyUID", path, 0, _MAX_UID),
            "log_level": config_pb2.LogLevel(level=reader.string(section, "logLevel", path)),
            "disable_external_profiles": reader.boolean(section, "disableExternalProfiles", path),
            "proxy_version": reader.string(section, "proxyVersion", path),
            "proxy_init_image_version": reader.string(section, "proxyInitImageVersion", path),
        }
        for key, field in _PROXY_OPTIONAL.items():
            if self._given(reader, section, key, path, "ProxyWithPortRanges"):
                read = reader.image if key == "debugImage" else reader.string
                fields[field] = read(section, key, path)
        if self.port_ranges:
            return config_pb2.ProxyWithPortRanges(
                ignore_inbound_ports=[config_pb2.PortRange(port_range=p) for p in inbound],
                ignore_outbound_ports=[config_pb2.PortRange(port_range=p) for p in outbound],
                **fields,
            )
        return config_pb2.Proxy(
            ignore_inbound_ports=[config_pb2.Port(port=int(p)) for p in inbound],
            ignore_outbound_ports=[config_pb2.Port(port=int(p)) for p in outbound],
            **fields,
        )

    def _ignored_ports(
        self, reader: _Reader, section: Mapping[str, Any], key: str, path: str
    ) -> list[str]:
        """The valid entries of an ignore list, canonical ("8888", "1000-2000")."""
        entries = section.get(key)
        if entries is None:
            return []
        if isinstance(entries, str) or not isinstance(entries, Sequence):
            reader.fail(f"{path}.{key}", "must be a list of ports or port ranges")
            return []
        kept: list[str] = []
        for index, entry in enumerate(entries):
            where = f"{path}.{key}[{index}]"
            if not isinstance(entry, str):
                reader.fail(where, 'must be a string: a port ("8888") or a range ("1000-2000")')
            elif _PORT.fullmatch(entry):
                if reader.in_range(where, int(entry), 1, _MAX_PORT):
                    kept.append(entry)
            elif match := _RANGE.fullmatch(entry):
                low, high = int(match.group(1)), int(match.group(2))
                if not (
                    reader.in_range(where, low, 1, _MAX_PORT)
                    and reader.in_range(where, high, 1, _MAX_PORT)
                ):
                    continue
                if low > high:
                    reader.fail(where, f"is not a port range: {low} is greater than {high}")
                elif not self.port_ranges:
                    first = self.version.first_in(PORT_RANGES_SINCE)
                    reader.fail(where, f"port ranges need Linkerd {first} or later")
                else:
                    kept.append(f"{low}-{high}")
            else:
                reader.fail(where, 'is not a port ("8888") or a port range ("1000-2000")')
        return kept


@cache
def _release_messages(absent: frozenset[tuple[str, str]]) -> Mapping[str, type[Message]]:
    """``config_pb2``'s messages without the ``absent`` (message, field) pairs, by name.

    Built from ``config_pb2``'s own descriptor, so names, numbers, types and declaration
    order stay as generated; only whole fields go. They live in a descriptor pool of their
    own, since the default pool already holds the full messages under the same names.
    """
    file = descriptor_pb2.FileDescriptorProto.FromString(config_pb2.DESCRIPTOR.serialized_pb)
    for message in file.message_type:
        kept = [field for field in message.field if (message.name, field.name) not in absent]
        del message.field[:]
        message.field.extend(kept)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(duration_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(file)
    return {
        message.name: message_factory.GetMessageClass(
            pool.FindMessageTypeByName(f"{file.package}.{message.name}")
        )
        for message in file.message_type
    }


class _Reader:
    """Reads a spec dict into typed values, recording every problem instead of stopping."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def fail(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def section(self, parent: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
        value = parent.get(key)
        if value is None:
            self.fail(f"{path}.{key}", "is required")
            return {}
        if not isinstance(value, Mapping):
            self.fail(f"{path}.{key}", "must be an object")
            return {}
        return value

    def unknown_keys(self, section: Mapping[str, Any], known: frozenset[str], path: str) -> None:
        for key in section:
            if key not in known:
                self.fail(f"{path}.{key}", "is not part of Linkerd's legacy config format")

    def string(self, parent: Mapping[str, Any], key: str, path: str) -> str:
        value = parent.get(key)
        if isinstance(value, str):
            return value
        self.fail(f"{path}.{key}", "is required" if value is None else "must be a string")
        return ""

    def boolean(self, parent: Mapping[str, Any], key: str, path: str) -> bool:
        """Optional, false when absent (as in Linkerd and the original Go resource)."""
        value = parent.get(key, False)
        if isinstance(value, bool):
            return value
        self.fail(f"{path}.{key}", "must be true or false")
        return False

    def integer(self, parent: Mapping[str, Any], key: str, path: str, low: int, high: int) -> int:
        value = parent.get(key)
        if value is None:
            self.fail(f"{path}.{key}", "is required")
        elif isinstance(value, bool) or not isinstance(value, int):
            self.fail(f"{path}.{key}", "must be an integer")
        elif self.in_range(f"{path}.{key}", value, low, high):
            return value
        return 0

    def port(self, parent: Mapping[str, Any], key: str, path: str) -> int:
        return self.integer(parent, key, path, 1, _MAX_PORT)

    def in_range(self, path: str, value: int, low: int, high: int) -> bool:
        if low <= value <= high:
            return True
        self.fail(path, f"{value} is out of range: must be between {low} and {high}")
        return False

    def duration(self, parent: Mapping[str, Any], key: str, path: str) -> Duration:
        text = self.string(parent, key, path)
        if not text:
            return Duration()
        try:
            nanos = parse_go_duration(text)
        except ValueError as error:
            self.fail(f"{path}.{key}", str(error))
            return Duration()
        if nanos < 0:
            self.fail(f"{path}.{key}", f"{text} is negative")
            return Duration()
        seconds, remainder = divmod(nanos, 1_000_000_000)
        return Duration(seconds=seconds, nanos=remainder)

    def image(self, parent: Mapping[str, Any], key: str, path: str) -> config_pb2.Image:
        section = self.section(parent, key, path)
        self.unknown_keys(section, _IMAGE_KEYS, f"{path}.{key}")
        return config_pb2.Image(
            image_name=self.string(section, "name", f"{path}.{key}"),
            pull_policy=self.string(section, "pullPolicy", f"{path}.{key}"),
        )

    def resources(
        self, parent: Mapping[str, Any], key: str, path: str
    ) -> config_pb2.ResourceRequirements:
        """Optional requests/limits of cpu and memory; absent ones are empty strings."""
        here = f"{path}.{key}"
        section = parent.get(key) or {}
        if not isinstance(section, Mapping):
            self.fail(here, "must be an object")
            section = {}
        self.unknown_keys(section, frozenset({"requests", "limits"}), here)
        found: dict[str, str] = {}
        for kind in ("requests", "limits"):
            amounts = section.get(kind) or {}
            if not isinstance(amounts, Mapping):
                self.fail(f"{here}.{kind}", "must be an object")
                continue
            for name, amount in amounts.items():
                where = f"{here}.{kind}.{name}"
                if name not in _RESOURCE_NAMES:
                    self.fail(where, "the legacy config format carries only cpu and memory")
                elif isinstance(amount, str):
                    found[f"{kind}.{name}"] = amount
                elif isinstance(amount, int) and not isinstance(amount, bool):
                    found[f"{kind}.{name}"] = str(amount)
                else:
                    self.fail(where, 'must be a quantity string such as "100m" or "20Mi"')
        return config_pb2.ResourceRequirements(
            request_cpu=found.get("requests.cpu", ""),
            request_memory=found.get("requests.memory", ""),
            limit_cpu=found.get("limits.cpu", ""),
            limit_memory=found.get("limits.memory", ""),
        )


# Go's time.ParseDuration units, in nanoseconds (both micro signs included).
_UNITS: Final = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,
    "\u03bcs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_DURATION_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")
_MAX_NANOS = 2**63 - 1


def parse_go_duration(text: str) -> int:
    """Nanoseconds in a Go duration string ("86400s", "24h", "1h30m", "1.5s", "300ms").

    Follows Go's ``time.ParseDuration``: an optional sign, then one or more decimal numbers
    each with a unit; "0" alone needs none; the total must fit in an int64 of nanoseconds.
    Fractions below a nanosecond are truncated, as Go does.
    """
    error = ValueError(
        f"{text!r} is not a duration: expected a number and unit such as 86400s, 24h or 1h30m"
    )
    rest = text
    negative = rest[:1] == "-"
    if rest[:1] in ("-", "+"):
        rest = rest[1:]
    if rest == "0":
        return 0
    if not rest:
        raise error
    total = Fraction(0)
    while rest:
        match = _DURATION_PART.match(rest)
        if match is None or match.end() == 0:
            raise error
        whole, fraction, unit = match.groups()
        if not whole and not fraction:
            raise error
        if unit not in _UNITS:
            raise ValueError(
                f"{text!r} is not a duration: unknown unit {unit!r} (use ns, us, ms, s, m or h)"
            )
        number = Fraction(int(whole or "0"))
        if fraction:
            number += Fraction(int(fraction), 10 ** len(fraction))
        total += number * _UNITS[unit]
        rest = rest[match.end() :]
    nanos = int(total)  # truncates toward zero, like Go
    if nanos > _MAX_NANOS:
        raise ValueError(f"{text!r} is out of range: durations end at about 292 years")
    return -nanos if negative else nanos


def _installed_global(installed: Installed) -> dict[str, Any] | None:
    """An installed ConfigMap's ``global`` as JSON (None if it has none), read within
    ``formats.bounded``'s limits; InstalledDataError naming the ConfigMap and key if it is
    refused or is not a JSON object."""
    raw = installed.data.get("global")
    if raw is None or not raw.strip():
        return None
    try:
        parsed = bounded.json_value(raw)
    except bounded.Unreadable as error:
        raise InstalledDataError(installed.where, "global", str(error)) from error
    if not isinstance(parsed, dict):
        raise InstalledDataError(installed.where, "global", "must be a JSON object")
    return parsed


def _either(mapping: Mapping[str, Any], json_name: str, original_name: str) -> Any:
    return mapping[json_name] if json_name in mapping else mapping.get(original_name)


def _unsupported(version: LinkerdVersion) -> str:
    first = version.first_in(FIRST_SUPPORTED)
    after = version.first_in(FIRST_UNSUPPORTED)
    return (
        f"Linkerd {version} is not supported by the legacy config format: "
        f"it covers {first} up to (not including) {after}"
    )
