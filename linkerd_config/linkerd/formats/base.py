"""What every Linkerd config format offers reconcile, and how it refuses input.

Reconcile only ever talks to a ``ConfigFormat``: it asks for the ConfigMap data a
LinkerdConfig ``spec`` renders to, which keys of the ConfigMap that data owns, and where an
existing ConfigMap keeps its trust anchors. Linkerd's legacy protobuf-JSON format (``global``
and ``proxy`` keys) and a later Helm-values format (one ``values`` key) can then sit side by
side, picked by target version, without reconcile knowing which one it holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from linkerd_config.linkerd.formats.field_table import HUB_SECTIONS
from linkerd_config.linkerd.formats.versions import LinkerdVersion
from linkerd_config.linkerd.mesh import DesiredProxy

__all__ = [
    "CONFIGURATION_SECTIONS",
    "SNAPSHOT_FIELD",
    "ConfigFormat",
    "FieldError",
    "FormatError",
    "Installed",
    "InstalledDataError",
    "Rendering",
    "Snapshot",
    "configuration",
]

CONFIGURATION_SECTIONS = HUB_SECTIONS
"""The parts of a LinkerdConfig spec that are Linkerd's configuration, which a format
writes. Every other section (``rollout``) says how the controller acts, in every format,
and no format may see it as a value to write or refuse."""


def configuration(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The sections of ``spec`` a format renders and checks."""
    return {key: spec[key] for key in CONFIGURATION_SECTIONS if key in spec}


class FieldError(NamedTuple):
    """One problem: the field's path (``spec.proxy.ignoreInboundPorts[1]``) and what is wrong.

    Shared by formats and admission validation, so either's errors read the same in a status
    condition or an admission answer.
    """

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class FormatError(ValueError):
    """The spec cannot be written in this format: one entry per offending field.

    Formats never drop or coerce what they cannot represent; they say which field and why, in
    the same path syntax the admission webhooks use, so the message can go straight into a
    status condition or an admission response.
    """

    errors: list[FieldError]

    def __init__(self, errors: Iterable[tuple[str, str]]) -> None:
        self.errors = [FieldError(*error) for error in errors]
        if not self.errors:
            raise ValueError("FormatError needs at least one (field path, message) pair")
        super().__init__("; ".join(str(error) for error in self.errors))


class InstalledDataError(FormatError):
    """What the cluster holds cannot be used: the ConfigMap and key are named, never a spec
    field (the LinkerdConfig did not set it). Nothing is written until it is fixed."""

    def __init__(self, where: str, key: str, problem: str) -> None:
        self.where = where
        self.key = key
        super().__init__([(f"ConfigMap {where}, key {key}", problem)])


@dataclass(frozen=True)
class Installed:
    """What the cluster holds where a LinkerdConfig writes. Reconcile finds it (which
    ConfigMap, in which namespace); a format only reads it."""

    where: str
    """``namespace/name`` of the managed ConfigMap, for messages."""
    data: Mapping[str, str] = field(default_factory=dict)
    """Its data (empty when there is no such ConfigMap, nor a preserved copy of it)."""
    others: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """The data of the other ConfigMaps in its namespace, by name (the trust roots)."""


@dataclass(frozen=True)
class Rendering:
    """What a spec becomes in the cluster, as one format decides it."""

    data: dict[str, str]
    """The ``linkerd-config`` keys to write (exactly the format's ``managed_keys``)."""
    managed: Mapping[str, Any]
    """What the spec sets, canonically: hashed into the configuration's identity, so a change
    elsewhere in the ConfigMap (a Helm setting we do not manage) restarts nothing."""
    proxy: DesiredProxy
    """What an up-to-date meshed pod carries under this configuration."""
    trust_anchor_source: str
    """``Spec`` when the spec states the anchors, ``Cluster`` when the cluster's are kept."""
    companions: dict[str, dict[str, str]] = field(default_factory=dict)
    """Other ConfigMaps in Linkerd's namespace, by name: the keys to write there."""
    depends_on: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Other ConfigMaps in Linkerd's namespace without which this release's injector cannot
    inject (the trust roots), by name, with the keys it cannot do without, whether or not the
    spec writes into them: kept (a copy of each), restored whole when deleted, and a key
    deleted put back."""


SNAPSHOT_FIELD = "status.lastCompleted.installed"
"""Where a LinkerdConfig keeps the snapshot of the installation it adopted (for messages)."""


@dataclass(frozen=True)
class Snapshot:
    """A configuration as it was installed, kept to be written back (a LinkerdConfig adopting
    an installation records it: the first upgrade can roll back to it). Exactly the keys a
    format writes, as they were: ``linkerd-config``'s and the other ConfigMaps'."""

    data: Mapping[str, str]
    """``linkerd-config``'s keys of the format's ``managed_keys``."""
    companions: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Other ConfigMaps in Linkerd's namespace, by name: the keys a rendering may write."""


class ConfigFormat(Protocol):
    """One way of writing a LinkerdConfig into Linkerd's ConfigMaps, for one Linkerd release.

    A format owns its fields: their defaults, what it refuses (``check``, with field paths),
    how a spec lands on the cluster's current data (``rendering``), how it reads that data
    back (``trust_anchors``), and what an up-to-date pod carries (``Rendering.proxy``).
    Adding a LinkerdConfig field touches the schema and the format(s) that render it.
    """

    @property
    def version(self) -> LinkerdVersion:
        """The Linkerd release this format instance writes for."""
        ...

    @property
    def name(self) -> str:
        """``legacy`` or ``values``: shown in status and ``kubectl get -o wide``."""
        ...

    @property
    def managed_keys(self) -> frozenset[str]:
        """The ``linkerd-config`` data keys ``rendering`` writes; every other key is left alone."""
        ...

    @property
    def owned_keys(self) -> frozenset[str]:
        """Of ``managed_keys``, those whose whole content comes from the spec (the rest are
        rewritten in place and so kept in the preserved copy too)."""
        ...

    def defaults(self) -> Mapping[str, Any]:
        """What fills a field the spec leaves out (nested like the spec)."""
        ...

    def check(self, spec: Mapping[str, Any]) -> list[FieldError]:
        """Everything about a (defaulted) spec this release cannot carry; empty if nothing."""
        ...

    def rendering(self, spec: Mapping[str, Any], installed: Installed) -> Rendering:
        """The defaulted ``spec`` written onto what is ``installed``. Deterministic, and
        byte-identical to what is there when nothing managed differs. Raises FormatError naming
        every field it cannot write."""
        ...

    def trust_anchors(self, installed: Installed) -> str | None:
        """The trust anchor PEM the installed ConfigMap holds, or None if it holds none;
        InstalledDataError if its data cannot be read."""
        ...

    def snapshot(self, installed: Installed) -> Snapshot:
        """What is installed of the keys this format writes, to be written back later."""
        ...

    def restoring(
        self, snapshot: Snapshot, spec: Mapping[str, Any], installed: Installed
    ) -> Rendering:
        """``snapshot`` written back onto what is installed now: every field a rendering of
        ``spec`` sets goes back to what the snapshot holds (removed where it held none),
        everything else stays as installed. Raises FormatError when the snapshot cannot be
        written (a key missing, or unreadable), naming ``status.lastCompleted.installed``."""
        ...
