"""Linkerd's config formats: one module per format, one protocol for reconcile.

* ``legacy``: the protobuf-JSON ``global``/``proxy`` keys (stable-2.6 .. 2.8, edge-19.x ..
  edge-20.10.1);
* ``helm_values``: the Helm ``values`` key and the trust-roots ConfigMap (stable-2.9 /
  edge-20.10.2 on).

Which one applies follows from the target Linkerd release, decided in one place,
``target_release`` (the spec's version, the proxy version standing in for it, the cluster's,
admission's guess, and the field a version error is reported on). Everything else reconcile
and validation need goes through the ``ConfigFormat`` protocol.
"""

from __future__ import annotations

from linkerd_config.linkerd.formats.base import (
    ConfigFormat,
    FieldError,
    FormatError,
    Installed,
    InstalledDataError,
    Rendering,
    Snapshot,
)
from linkerd_config.linkerd.formats.helm_values import HelmValuesFormat
from linkerd_config.linkerd.formats.legacy import LegacyFormat
from linkerd_config.linkerd.formats.target_release import (
    StatedVersion,
    TargetRelease,
    cluster_version,
    format_for,
    format_of,
    guess,
    release_for,
    stated_version,
)
from linkerd_config.linkerd.formats.versions import (
    LinkerdVersion,
    VersionError,
    parse_version,
)

__all__ = [
    "ConfigFormat",
    "FieldError",
    "FormatError",
    "HelmValuesFormat",
    "Installed",
    "InstalledDataError",
    "LegacyFormat",
    "LinkerdVersion",
    "Rendering",
    "Snapshot",
    "StatedVersion",
    "TargetRelease",
    "VersionError",
    "cluster_version",
    "format_for",
    "format_of",
    "guess",
    "parse_version",
    "release_for",
    "stated_version",
]
