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
three rows within the range.) ``config_pb2`` holds every field any release has; the field
table (``formats/field_table.py``, each row's legacy column) says which spec field goes to
which proto field and which releases have the optional ones (``field_releases`` is derived
from it), and the messages a format builds are ``config_pb2``'s without the fields its
release lacks. A spec field absent from
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
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from linkerd_config.kube.memo import Memo
from linkerd_config.kube.protobuf_encoding import without_fields
from linkerd_config.linkerd.formats import bounded
from linkerd_config.linkerd.formats.base import (
    SNAPSHOT_FIELD,
    FieldError,
    FormatError,
    Installed,
    InstalledDataError,
    Rendering,
    Snapshot,
    configuration,
)
from linkerd_config.linkerd.formats.field_grammar import parse_go_duration
from linkerd_config.linkerd.formats.field_table import FIELDS, ConfigField, spec_leaves
from linkerd_config.linkerd.formats.versions import (
    LinkerdVersion,
    Releases,
    VersionError,
    firsts,
    parse_version,
)
from linkerd_config.linkerd.mesh import DesiredProxy

if TYPE_CHECKING:
    from google.protobuf.duration_pb2 import Duration
    from google.protobuf.message import Message

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

_RENDERED: Final[Memo[dict[str, str]]] = Memo(8)
"""``render``'s last answers, by release and spec."""

_PORT = re.compile(r"0|[1-9][0-9]*")
_RANGE = re.compile(r"(0|[1-9][0-9]*)-(0|[1-9][0-9]*)")
_MAX_PORT = 65535

# The issuer scheme stable-2.6 always uses, though its IdentityContext cannot say so.
_LINKERD_SCHEME = "linkerd.io/tls"
_SCHEME: Final = ("global", "identityContext", "scheme")
_VERSION: Final = ("global", "version")


@cache
def _config_pb2() -> ModuleType:
    """``config_pb2``, imported when a legacy configuration is first built: with it come
    protobuf's descriptor_pb2 and text_format (about 3.7 MiB), which a cluster of the values
    format never needs."""
    from linkerd_config.linkerd.formats.legacy import config_pb2  # noqa: PLC0415

    return config_pb2


_ROOTS: Final = {"global": "Global", "proxy": "ProxyWithPortRanges"}
"""The message under each key (the proxy's, from edge-20.1.1 on: the field table's proto paths
name the same fields in ``Proxy``)."""


def _gated_field(row: ConfigField) -> tuple[str, str]:
    """(message, field) of ``config_pb2`` that the row's releases are about."""
    assert row.legacy is not None
    descriptor = getattr(_config_pb2(), _ROOTS[row.path[0]]).DESCRIPTOR
    for name in row.legacy.proto.split("."):
        if name == row.legacy.gated:
            return descriptor.name, name
        descriptor = descriptor.fields_by_name[name].message_type
    raise ValueError(f"{row.name}: gate {row.legacy.gated!r} is not on {row.legacy.proto!r}")


_LEGACY_ROWS: Final = tuple(row for row in FIELDS if row.legacy is not None)


@cache
def field_releases() -> Mapping[tuple[str, str], Releases]:
    """The fields of config_pb2's messages that only some releases of the range have, by
    (message, field), from the field table; every other field is in every release that uses
    its message. Checked against copies of Linkerd's config.proto for every release
    (tests/fixtures/linkerd-legacy/)."""
    return {
        _gated_field(row): row.legacy.releases
        for row in _LEGACY_ROWS
        if row.legacy is not None and row.legacy.releases is not None
    }


def _legacy_defaults() -> dict[str, Any]:
    """What ``linkerd install`` of the era wrote for a field the spec leaves out, nested like
    the spec (the field table's legacy defaults, and every format's)."""
    found: dict[str, Any] = {}
    for row in FIELDS:
        default = row.legacy.default if row.legacy is not None else None
        default = row.default if default is None else default
        if default is None:
            continue
        node = found
        for key in row.path[:-1]:
            node = node.setdefault(key, {})
        node[row.path[-1]] = default
    return found


LEGACY_DEFAULTS: Final = _legacy_defaults()


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
        """``proxy`` is written whole from the spec. ``global`` is not always: it carries the
        cluster's trust anchor when the spec states none, so it is kept in the preserved copy
        too, and a deleted ``global`` comes back with that anchor."""
        return frozenset({"proxy"})

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
        """The ``global`` and ``proxy`` values, byte for byte as Linkerd writes them. A
        function of the release and the spec alone (nothing installed is read), so the last
        few are remembered: a manual edit of the ConfigMap is reverted without rendering the
        unchanged spec again."""

        def render() -> dict[str, str]:
            from linkerd_config.linkerd.formats.jsonpb import marshal  # noqa: PLC0415 (_config_pb2)

            return {key: marshal(message) + "\n" for key, message in self.messages(spec).items()}

        return dict(_RENDERED.get_or_make([str(self.version), spec], render))

    def messages(self, spec: Mapping[str, Any]) -> dict[str, Message]:
        """The protobuf messages behind ``render``, keyed by ConfigMap key, built from the
        field table's legacy column."""
        reader = _Reader()
        root = spec if isinstance(spec, Mapping) else {}
        if not isinstance(spec, Mapping):
            reader.fail("spec", "must be an object")
        for section in ("global", "proxy"):
            reader.section(root, section, "spec")
        for stated in spec_leaves(configuration(root)):
            if stated.row is None:
                reader.fail(stated.field, stated.problem)
            elif stated.row.legacy is None and not stated.row.location:
                reader.fail(stated.field, _not_legacy(stated.row))
        config_pb2 = _config_pb2()
        built: dict[str, Message] = {
            "global": config_pb2.Global(),
            "proxy": config_pb2.ProxyWithPortRanges() if self.port_ranges else config_pb2.Proxy(),
        }
        given = {
            row.legacy.gated
            for row in _LEGACY_ROWS
            if row.legacy is not None and _value(root, row.path) is not None
        }
        refused: set[str] = set()  # gates already refused: one error per absent field
        for row in _LEGACY_ROWS:
            value = _value(root, row.path)
            legacy = row.legacy
            assert legacy is not None
            gate = legacy.releases
            absent = gate is not None and not gate.include(self.version)
            if gate is not None and absent and value is not None and row.path != _SCHEME:
                if legacy.gated not in refused:
                    refused.add(legacy.gated)
                    reader.fail(_gate_field(row), gate.requirement(self.version))
                continue
            self._field(reader, built[row.path[0]], row, value, given)
        if reader.errors:
            raise FormatError(reader.errors)
        return {key: self._exact(message) for key, message in built.items()}

    def _field(
        self, reader: _Reader, message: Message, row: ConfigField, value: Any, given: set[str]
    ) -> None:
        """One row of the table into ``message``: its value converted to the proto field's
        type, or its absence (an error when the release needs it)."""
        legacy = row.legacy
        assert legacy is not None
        if row.path == _SCHEME and not self.has_field("IdentityContext", "scheme"):
            self._scheme(reader, value, row.field)
            return
        if legacy.releases is not None and not legacy.releases.include(self.version):
            if value is not None:
                reader.fail(row.field, legacy.releases.requirement(self.version))
            return
        if value is None:
            if legacy.releases is not None and legacy.gated not in given:
                return  # a field of only some releases, left out: null, as Linkerd writes it
            if row.grammar.json_type in ("string", "integer"):
                reader.fail(row.field, "is required")
            else:
                _parent(message, legacy.proto).SetInParent()
            return
        names = legacy.proto.split(".")
        parent = _parent(message, legacy.proto)
        proto = parent.DESCRIPTOR.fields_by_name[names[-1]]
        if proto.message_type is not None and proto.message_type.name == "Duration":
            parent_field = getattr(parent, names[-1])
            parent_field.CopyFrom(reader.duration(value, row.field))
        elif proto.is_repeated:
            entries = self._ignored_ports(reader, value, row.field)
            config_pb2 = _config_pb2()
            wrapped = (
                [config_pb2.PortRange(port_range=p) for p in entries]
                if self.port_ranges
                else [config_pb2.Port(port=int(p)) for p in entries]
            )
            getattr(parent, names[-1]).extend(wrapped)
        elif proto.type == proto.TYPE_BOOL:
            setattr(parent, names[-1], reader.boolean(value, row.field))
        elif proto.type == proto.TYPE_STRING:
            if row.path == _VERSION:
                self._check_version(reader, value, row.field)
            setattr(parent, names[-1], reader.string(value, row.field))
        else:
            low = 0 if row.grammar.minimum is None else row.grammar.minimum
            high = _MAX_PORT if row.grammar.maximum is None else row.grammar.maximum
            setattr(parent, names[-1], reader.integer(value, row.field, low, high))

    def _check_version(self, reader: _Reader, version: Any, field: str) -> None:
        if not isinstance(version, str) or not version:
            return
        try:
            if parse_version(version) != self.version:
                reader.fail(field, f"is {version}, but this format writes {self.version}")
        except VersionError as error:
            reader.fail(field, str(error))

    @property
    def absent_fields(self) -> frozenset[tuple[str, str]]:
        """The (message, field) pairs of ``config_pb2`` this release's config.proto lacks."""
        return frozenset(
            key for key, releases in field_releases().items() if not releases.include(self.version)
        )

    def has_field(self, message: str, field: str) -> bool:
        """Whether this release's ``message`` (a ``config_pb2`` name) has ``field``."""
        releases = field_releases().get((message, field))
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

    def snapshot(self, installed: Installed) -> Snapshot:
        """``global`` and ``proxy`` as installed (wholly ours once written: kept whole)."""
        return Snapshot(
            {k: installed.data[k] for k in sorted(self.managed_keys & installed.data.keys())}
        )

    def restoring(
        self, snapshot: Snapshot, spec: Mapping[str, Any], installed: Installed
    ) -> Rendering:
        """``global`` and ``proxy`` exactly as the snapshot holds them: both keys are wholly
        the format's, so nothing installed since is lost by writing them back."""
        missing = sorted(self.managed_keys - snapshot.data.keys())
        if missing:
            raise FormatError(
                [
                    (
                        SNAPSHOT_FIELD,
                        f"has no key {', '.join(missing)} of ConfigMap {installed.where}",
                    )
                ]
            )
        data = {key: snapshot.data[key] for key in sorted(self.managed_keys)}
        try:
            proxy = bounded.json_value(data["proxy"])
        except bounded.Unreadable as error:
            raise FormatError([(f"{SNAPSHOT_FIELD}.proxy", str(error))]) from error
        version = (
            _either(proxy, "proxyVersion", "proxy_version") if isinstance(proxy, dict) else None
        )
        if not isinstance(version, str) or not version:
            raise FormatError([(f"{SNAPSHOT_FIELD}.proxy", "has no proxyVersion")])
        return Rendering(
            data=data, managed=data, proxy=DesiredProxy(version), trust_anchor_source="Cluster"
        )

    @staticmethod
    def installed_version(installed: Installed) -> str | None:
        """The version an installed ``global`` declares (None without one)."""
        parsed = _installed_global(installed)
        version = parsed.get("version") if parsed is not None else None
        return version if isinstance(version, str) and version else None

    def _scheme(self, reader: _Reader, scheme: Any, field: str) -> None:
        """stable-2.6 has no field for the issuer scheme and takes only its own one."""
        if scheme is not None and not isinstance(scheme, str):
            reader.fail(field, "must be a string")
        elif scheme not in (None, "", _LINKERD_SCHEME):
            requirement = field_releases()[("IdentityContext", "scheme")].requirement(self.version)
            reader.fail(field, f"{requirement}; {self.version} always uses {_LINKERD_SCHEME}")

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

    def _ignored_ports(self, reader: _Reader, entries: Any, field: str) -> list[str]:
        """The valid entries of an ignore list, canonical ("8888", "1000-2000")."""
        if isinstance(entries, str) or not isinstance(entries, Sequence):
            reader.fail(field, "must be a list of ports or port ranges")
            return []
        kept: list[str] = []
        for index, entry in enumerate(entries):
            where = f"{field}[{index}]"
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
    from google.protobuf import (  # noqa: PLC0415 (see _config_pb2)
        descriptor_pool,
        duration_pb2,
        message_factory,
    )

    config_pb2 = _config_pb2()
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(duration_pb2.DESCRIPTOR.serialized_pb)
    file = pool.AddSerializedFile(without_fields(config_pb2.DESCRIPTOR.serialized_pb, absent))
    return {
        name: message_factory.GetMessageClass(message)
        for name, message in file.message_types_by_name.items()
    }


class _Reader:
    """Reads spec values into typed values, recording every problem instead of stopping."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def fail(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def section(self, parent: Mapping[str, Any], key: str, path: str) -> None:
        value = parent.get(key)
        if value is None:
            self.fail(f"{path}.{key}", "is required")

    def string(self, value: Any, field: str) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)  # a quantity given as a number
        self.fail(field, "must be a string")
        return ""

    def boolean(self, value: Any, field: str) -> bool:
        if isinstance(value, bool):
            return value
        self.fail(field, "must be true or false")
        return False

    def integer(self, value: Any, field: str, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(field, "must be an integer")
        elif self.in_range(field, value, low, high):
            return value
        return 0

    def in_range(self, path: str, value: int, low: int, high: int) -> bool:
        if low <= value <= high:
            return True
        self.fail(path, f"{value} is out of range: must be between {low} and {high}")
        return False

    def duration(self, value: Any, field: str) -> Duration:
        from google.protobuf.duration_pb2 import Duration  # noqa: PLC0415 (see _config_pb2)

        text = self.string(value, field)
        if not text:
            return Duration()
        try:
            nanos = parse_go_duration(text)
        except ValueError as error:
            self.fail(field, str(error))
            return Duration()
        if nanos < 0:
            self.fail(field, f"{text} is negative")
            return Duration()
        seconds, remainder = divmod(nanos, 1_000_000_000)
        return Duration(seconds=seconds, nanos=remainder)


def _gate_field(row: ConfigField) -> str:
    """The spec field a release gate is about: ``spec.proxy.debugImage`` for the debug
    image's name (its proto field ``debug_image`` is what a release lacks)."""
    assert row.legacy is not None
    names = row.legacy.proto.split(".")
    below = len(names) - 1 - names.index(row.legacy.gated)
    return "spec." + ".".join(row.path[: len(row.path) - below])


def _value(spec: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = spec
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _parent(message: Message, proto: str) -> Message:
    """The message holding the last field of ``proto`` (a dotted path from ``message``)."""
    for name in proto.split(".")[:-1]:
        message = getattr(message, name)
    return message


def _not_legacy(row: ConfigField) -> str:
    where = f" (Linkerd {row.values.releases.describe()})" if row.values is not None else ""
    return f"is not in Linkerd's legacy config format; only the values format has it{where}"


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
