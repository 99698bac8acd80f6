"""Linkerd's config formats: one module per format, one protocol for reconcile.

* ``legacy``: the protobuf-JSON ``global``/``proxy`` keys (stable-2.6 .. 2.8, edge-19.x ..
  edge-20.10.1);
* ``helm_values``: the Helm ``values`` key and the trust-roots ConfigMap (stable-2.9 /
  edge-20.10.2 on).

Which one applies follows from the target Linkerd version: the spec's, or, when the spec
leaves it to the cluster, the one the installed ConfigMap declares (:func:`format_of`).
Everything else reconcile and validation need goes through the ``ConfigFormat`` protocol.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from linkerd_config.linkerd.formats.base import (
    ConfigFormat,
    FieldError,
    FormatError,
    Installed,
    InstalledDataError,
    Rendering,
)
from linkerd_config.linkerd.formats.helm_values import VALUES_KEY, HelmValuesFormat
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
    "HelmValuesFormat",
    "Installed",
    "InstalledDataError",
    "LegacyFormat",
    "LinkerdVersion",
    "Rendering",
    "VersionError",
    "cluster_version",
    "format_for",
    "format_of",
    "parse_version",
    "reads_values",
    "stated_version",
    "version_hint",
]

VERSION_FIELD = "spec.global.version"


def format_for(version: str | LinkerdVersion) -> ConfigFormat:
    """The format Linkerd ``version`` reads; FormatError on ``spec.global.version`` if none."""
    try:
        parsed = version if isinstance(version, LinkerdVersion) else parse_version(version)
    except VersionError as error:
        raise FormatError([(VERSION_FIELD, str(error))]) from error
    if HelmValuesFormat.supports(parsed):
        return HelmValuesFormat(parsed)
    return LegacyFormat(parsed)


def version_hint(spec: Mapping[str, Any]) -> str | None:
    """``global.version``, else ``proxy.proxyVersion``: the version a spec is about, as far
    as the spec alone can say (admission checks against it; the cluster may know better)."""
    for section, key in (("global", "version"), ("proxy", "proxyVersion")):
        part = spec.get(section)
        value = part.get(key) if isinstance(part, Mapping) else None
        if value is not None and value != "":  # stated: the answer, even if unusable
            return value if isinstance(value, str) else None
    return None


def reads_values(version: str | None) -> bool:
    """Whether ``version`` names a release that reads the Helm values format."""
    try:
        return version is not None and HelmValuesFormat.supports(parse_version(version))
    except VersionError:
        return False


def stated_version(spec: Mapping[str, Any]) -> str | None:
    """The version a spec states: ``global.version``, else (legacy specs only, where Linkerd's
    control plane and proxy share one version) ``proxy.proxyVersion``. In the values format a
    proxy version says nothing about the control plane's: the cluster's then decides."""
    hint = version_hint(spec)
    global_ = spec.get("global")
    if isinstance(global_, Mapping) and global_.get("version") == hint:
        return hint
    try:
        parse_version(hint or "")
    except VersionError:
        return None
    return None if reads_values(hint) else hint


def cluster_version(installed: Installed) -> tuple[str, str] | None:
    """The Linkerd version an installed ``linkerd-config`` declares, in either format (each
    format reads its own keys back), and the key that declares it; InstalledDataError if
    that key cannot be read."""
    version = HelmValuesFormat.installed_version(installed)
    if version:
        return version, VALUES_KEY
    version = LegacyFormat.installed_version(installed)
    return (version, "global") if version else None


def format_of(spec: Mapping[str, Any], current: Installed) -> ConfigFormat:
    """The format to write ``spec`` in, given what is ``current``ly installed (its data empty
    if nothing is). Refuses a spec whose version reads another format than the cluster's; a
    version the cluster declares that no format reads is the ConfigMap's problem, named so."""
    stated = stated_version(spec)
    declared = cluster_version(current) if current.data else None
    installed = declared[0] if declared else None
    if stated is None and installed is None:
        raise FormatError(
            [(VERSION_FIELD, "is not set, and the cluster's linkerd-config declares no version")]
        )
    if stated is None and declared is not None:
        try:
            return format_for(declared[0])
        except FormatError as error:
            problem = error.errors[0].message
            raise InstalledDataError(
                current.where,
                declared[1],
                f"declares the Linkerd version, and {problem}; state spec.global.version, or "
                "correct the ConfigMap",
            ) from error
    chosen = format_for(stated or str(installed))
    if stated is not None and installed is not None:
        try:
            theirs = format_for(installed)
        except FormatError:
            return chosen  # the cluster's version is one we cannot write: the spec decides
        if type(theirs) is not type(chosen):
            raise FormatError(
                [
                    (
                        VERSION_FIELD,
                        f"{stated} reads {_describe(chosen)}, but the cluster runs Linkerd "
                        f"{installed}, which reads {_describe(theirs)}: upgrade Linkerd first, "
                        "then change spec.global.version (or leave it out to follow the cluster)",
                    )
                ]
            )
    return chosen


def _describe(fmt: ConfigFormat) -> str:
    if isinstance(fmt, HelmValuesFormat):
        return "the Helm `values` key"
    return "the legacy global/proxy keys"
