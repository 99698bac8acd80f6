"""Linkerd's legacy config format: protobuf messages as Go-jsonpb JSON under ``global``/``proxy``.

Linkerd up to stable-2.8 / edge-20.x reads its control-plane and proxy defaults from the
``global`` and ``proxy`` keys of the ``linkerd-config`` ConfigMap, each one JSON document of
its ``linkerd2.config.Global`` / ``Proxy`` message as Go's jsonpb (EmitDefaults) prints it, plus
a trailing newline. This module turns a LinkerdConfig ``spec`` into exactly those bytes, so
that the controller's output is indistinguishable from ``linkerd install``'s and a drift check
can compare strings.

The ``install`` key (what the CLI last ran with) is Linkerd's own record and is not managed.

One shape change matters within the range: from edge-20.1.1 / stable-2.7.0 the ignored
ports are ``[{"portRange":"1000-2000"}]``, before that ``[{"port":8888}]``. Linkerd's reader
ignores unknown fields, so the wrong shape would not fail loudly: every ignored port would
silently become port 0 / an empty range. Hence the version gate, and an error (never a
silent drop) for a port range aimed at a release that cannot express it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message

from linkerd_config.linkerd.formats.base import FieldError, FormatError
from linkerd_config.linkerd.formats.jsonpb import marshal
from linkerd_config.linkerd.formats.legacy import config_pb2
from linkerd_config.linkerd.formats.versions import LinkerdVersion, VersionError, parse_version

__all__ = [
    "FIRST_SUPPORTED",
    "FIRST_UNSUPPORTED",
    "MANAGED_KEYS",
    "PORT_RANGES_SINCE",
    "LegacyFormat",
    "parse_go_duration",
]

MANAGED_KEYS: Final = frozenset({"global", "proxy"})

# The oldest releases whose format we have seen: stable-2.6.0's install template (it lacks
# only identityContext.scheme, which its reader ignores) and the edge-19.12.1 fixture.
FIRST_SUPPORTED: Final = (parse_version("stable-2.6.0"), parse_version("edge-19.12.1"))
# From these releases on, the Helm-values format applies (a separate format, not this one).
FIRST_UNSUPPORTED: Final = (parse_version("stable-2.9.0"), parse_version("edge-21.1.1"))
# Ignored ports became `repeated PortRange` in these releases (linkerd2 PR "port ranges").
PORT_RANGES_SINCE: Final = (parse_version("edge-20.1.1"), parse_version("stable-2.7.0"))

_MAX_PORT = 65535
_MAX_UID = 2**31 - 1  # Kubernetes' bound for runAsUser
_PORT = re.compile(r"0|[1-9][0-9]*")
_RANGE = re.compile(r"(0|[1-9][0-9]*)-(0|[1-9][0-9]*)")
_RESOURCE_NAMES = ("cpu", "memory")

_GLOBAL_KEYS = frozenset(
    {
        "linkerdNamespace",
        "cniEnabled",
        "version",
        "identityContext",
        "omitWebhookSideEffects",
        "clusterDomain",
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
    }
)
_IMAGE_KEYS = frozenset({"name", "pullPolicy"})


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
    def managed_keys(self) -> frozenset[str]:
        return MANAGED_KEYS

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
        return {"global": global_, "proxy": proxy}

    def trust_anchors(self, data: Mapping[str, str]) -> str | None:
        """The PEM in ``global``'s identityContext, or None when there is none to reuse.

        Accepts both the JSON names Linkerd writes and the original field names, as
        Linkerd's own reader does. Raises FormatError if ``global`` is not the JSON of a
        Global message.
        """
        raw = data.get("global")
        if raw is None or not raw.strip():
            return None
        path = "data.global"
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as error:
            raise FormatError([(path, f"not valid JSON: {error}")]) from error
        if not isinstance(parsed, dict):
            raise FormatError([(path, "must be a JSON object")])
        identity = _either(parsed, "identityContext", "identity_context")
        if identity is None:
            return None
        if not isinstance(identity, dict):
            raise FormatError([(f"{path}.identityContext", "must be a JSON object or null")])
        pem = _either(identity, "trustAnchorsPem", "trust_anchors_pem")
        if pem is None or pem == "":
            return None
        if not isinstance(pem, str):
            raise FormatError([(f"{path}.identityContext.trustAnchorsPem", "must be a string")])
        return pem

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
                scheme=reader.string(identity, "scheme", identity_path),
            ),
            # auto_inject_context stays unset: Linkerd always writes it as null.
            omitWebhookSideEffects=reader.boolean(section, "omitWebhookSideEffects", path),
            cluster_domain=reader.string(section, "clusterDomain", path),
        )

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
                    first = _first_of_channel(PORT_RANGES_SINCE, self.version)
                    reader.fail(where, f"port ranges need Linkerd {first} or later")
                else:
                    kept.append(f"{low}-{high}")
            else:
                reader.fail(where, 'is not a port ("8888") or a port range ("1000-2000")')
        return kept


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


def _either(mapping: Mapping[str, Any], json_name: str, original_name: str) -> Any:
    return mapping[json_name] if json_name in mapping else mapping.get(original_name)


def _first_of_channel(firsts: Sequence[LinkerdVersion], version: LinkerdVersion) -> LinkerdVersion:
    return next(first for first in firsts if first.channel == version.channel)


def _unsupported(version: LinkerdVersion) -> str:
    first = _first_of_channel(FIRST_SUPPORTED, version)
    after = _first_of_channel(FIRST_UNSUPPORTED, version)
    return (
        f"Linkerd {version} is not supported by the legacy config format: "
        f"it covers {first} up to (not including) {after}"
    )
