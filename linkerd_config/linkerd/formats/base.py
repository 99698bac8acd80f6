"""What every Linkerd config format offers reconcile, and how it refuses input.

Reconcile only ever talks to a ``ConfigFormat``: it asks for the ConfigMap data a
LinkerdConfig ``spec`` renders to, which keys of the ConfigMap that data owns, and where an
existing ConfigMap keeps its trust anchors. Linkerd's legacy protobuf-JSON format (``global``
and ``proxy`` keys) and a later Helm-values format (one ``values`` key) can then sit side by
side, picked by target version, without reconcile knowing which one it holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple, Protocol

from linkerd_config.linkerd.formats.versions import LinkerdVersion

__all__ = ["ConfigFormat", "FieldError", "FormatError"]


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


class ConfigFormat(Protocol):
    """One way of writing a LinkerdConfig into Linkerd's ``linkerd-config`` ConfigMap."""

    @property
    def version(self) -> LinkerdVersion:
        """The Linkerd release this format instance writes for."""
        ...

    @property
    def managed_keys(self) -> frozenset[str]:
        """The ConfigMap data keys ``render`` owns; every other key is left alone."""
        ...

    def render(self, spec: Mapping[str, Any]) -> dict[str, str]:
        """The ConfigMap data for a LinkerdConfig ``spec``: exactly ``managed_keys``.

        Deterministic, so the result can be compared byte for byte with what the cluster
        holds. Raises FormatError naming every field that cannot be written for ``version``.
        """
        ...

    def trust_anchors(self, data: Mapping[str, str]) -> str | None:
        """The trust anchor PEM an existing ConfigMap's data holds, or None if it holds none."""
        ...
