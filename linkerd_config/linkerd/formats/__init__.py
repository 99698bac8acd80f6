"""Linkerd's config formats: one module per format, one protocol for reconcile.

Reconcile calls ``format_for(spec.global.version)`` and then only the ``ConfigFormat``
protocol: ``render(spec)`` for the data, ``managed_keys`` for what it owns in the ConfigMap,
``trust_anchors(data)`` to reuse what the cluster already trusts. A new format (the Helm
``values`` key of stable-2.9+) is a new module and one more branch in ``format_for``.
"""

from linkerd_config.linkerd.formats.base import ConfigFormat, FieldError, FormatError
from linkerd_config.linkerd.formats.legacy import LegacyFormat
from linkerd_config.linkerd.formats.versions import (
    LinkerdVersion,
    VersionError,
    parse_version,
)

__all__ = [
    "ConfigFormat",
    "FieldError",
    "FormatError",
    "LegacyFormat",
    "LinkerdVersion",
    "VersionError",
    "format_for",
    "parse_version",
]


def format_for(version: str | LinkerdVersion) -> ConfigFormat:
    """The format Linkerd ``version`` reads; FormatError on ``spec.global.version`` if none.

    Raises FormatError both for a malformed version string and for a release no format
    here can write.
    """
    return LegacyFormat.for_version(version)
