"""Which Linkerd release a LinkerdConfig targets, and so which format it is written in.

The one owner of that decision: defaulting, admission validation and reconcile all ask here.

The rule:

1. **Stated.** ``spec.global.version``, when set (not absent, null or ``""``), is the target,
   whatever it holds: a value that is not a string, not a Linkerd release name, or a release
   no format reads is refused on ``spec.global.version``.
2. **Stood in for.** Otherwise ``spec.proxy.proxyVersion`` stands in for it, unless it names
   a release of the values format: up to stable-2.8.x / edge-20.10.1 Linkerd's control plane
   and proxy share one version, so the proxy's is the control plane's. A proxy version that
   names no release at all (a development build) stands in too, and is refused: without
   ``spec.global.version`` nothing could say which format it is. Every problem with a version
   that stands in is reported on ``spec.proxy.proxyVersion``, saying so.
3. **The cluster's.** Otherwise (no version, or a values-format proxy version, which says
   nothing about the control plane's) the release the cluster's ``linkerd-config`` declares
   decides: the ``values`` key's ``linkerdVersion``, else the legacy ``global``'s
   ``version``. A declared version no format reads is the ConfigMap's problem
   (InstalledDataError naming its key); no declared version at all is refused on
   ``spec.global.version``.
4. **No crossing formats.** A version from 1 or 2 that reads another format than the
   cluster's declared version is refused: upgrade Linkerd first. A declared version no format
   reads does not block a stated one: the spec decides.
5. **Admission** sees no cluster: its best guess is 1 or 2, else the values-format proxy
   version of 3 (reconcile, which sees the cluster, decides again).
6. **Defaulting.** In the legacy format ``spec.global.version`` defaults to the target
   release; in the values format it is left out (the cluster's stays).

The release boundaries themselves belong to the formats (``LegacyFormat.supports``,
``HelmValuesFormat.supports``); this module only says which version is asked about.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from linkerd_config.linkerd.formats.base import (
    ConfigFormat,
    FieldError,
    FormatError,
    Installed,
    InstalledDataError,
)
from linkerd_config.linkerd.formats.helm_values import VALUES_KEY, HelmValuesFormat
from linkerd_config.linkerd.formats.legacy import LegacyFormat
from linkerd_config.linkerd.formats.versions import LinkerdVersion, VersionError, parse_version

__all__ = [
    "GLOBAL_VERSION",
    "PROXY_VERSION",
    "Declared",
    "StatedVersion",
    "TargetRelease",
    "cluster_version",
    "defaulted_version",
    "format_for",
    "format_of",
    "guess",
    "guessed_format",
    "release_for",
    "stated_version",
]

GLOBAL_VERSION: Final = "spec.global.version"
PROXY_VERSION: Final = "spec.proxy.proxyVersion"
STANDS_IN: Final = "(the Linkerd version when spec.global.version is not set)"


def _nothing_declared(installed: Installed) -> str:
    """Why no version is declared, as the ConfigMap shows it: its values key, or its global,
    may be there without one (a values text holding ``linkerdVersion: 26``, say)."""
    if VALUES_KEY in installed.data:
        why = f"its {VALUES_KEY} key has no linkerdVersion that is a string"
    elif "global" in installed.data:
        why = "its global key has no version"
    else:
        why = f"no {VALUES_KEY} key, nor a global with one"
    return (
        f"is not set, and ConfigMap {installed.where} declares no version ({why}): state it, "
        "or restore the ConfigMap (linkerd upgrade)"
    )


def format_for(version: str | LinkerdVersion) -> ConfigFormat:
    """The format Linkerd ``version`` reads; FormatError on ``spec.global.version`` if none."""
    try:
        parsed = version if isinstance(version, LinkerdVersion) else parse_version(version)
    except VersionError as error:
        raise FormatError([(GLOBAL_VERSION, str(error))]) from error
    if HelmValuesFormat.supports(parsed):
        return HelmValuesFormat(parsed)
    return LegacyFormat(parsed)


@dataclass(frozen=True, slots=True)
class StatedVersion:
    """A version a spec gives, as written (perhaps unusable), and the field it is in."""

    value: object
    field: str

    @property
    def implied(self) -> bool:
        """Whether the version stands in for an unset ``spec.global.version``."""
        return self.field != GLOBAL_VERSION

    def address(self, errors: Iterable[tuple[str, str]]) -> list[FieldError]:
        """``errors`` (a format's, about ``spec.global.version``), reported on the field the
        version came from."""
        return [
            FieldError(self.field, f"{STANDS_IN} {message}")
            if self.implied and field == GLOBAL_VERSION
            else FieldError(field, message)
            for field, message in errors
        ]

    def format(self) -> ConfigFormat:
        """The format this version reads; FormatError on the field it came from if none."""
        if not isinstance(self.value, str):
            raise FormatError(
                self.address([(GLOBAL_VERSION, "must be a string such as edge-19.12.3")])
            )
        try:
            return format_for(self.value)
        except FormatError as error:
            raise FormatError(self.address(error.errors)) from error


@dataclass(frozen=True, slots=True)
class Declared:
    """The release an installed ``linkerd-config`` declares, and where: ConfigMap and key."""

    version: str
    where: str
    key: str

    @property
    def field(self) -> str:
        """The key, named as InstalledDataError names it."""
        return f"ConfigMap {self.where}, key {self.key}"


@dataclass(frozen=True, slots=True)
class TargetRelease:
    """The release reconcile writes for: its name, where it came from (a spec field, or the
    ConfigMap key that declares it) and the format it reads."""

    version: str
    source: str
    format: ConfigFormat


def stated_version(spec: Mapping[str, Any]) -> StatedVersion | None:
    """The spec's own answer (rules 1 and 2); None when it leaves the release to the cluster."""
    version = _get(spec, "global", "version")
    if not _unset(version):
        return StatedVersion(version, GLOBAL_VERSION)
    proxy = _get(spec, "proxy", "proxyVersion")
    if _unset(proxy) or _reads_values(proxy):
        return None
    return StatedVersion(proxy, PROXY_VERSION)


def guess(spec: Mapping[str, Any]) -> StatedVersion | None:
    """Admission's best guess (rule 5): the stated version, else a values-format proxy
    version; None when the spec gives no version at all."""
    stated = stated_version(spec)
    if stated is not None:
        return stated
    proxy = _get(spec, "proxy", "proxyVersion")
    return None if _unset(proxy) else StatedVersion(proxy, PROXY_VERSION)


def guessed_format(spec: Mapping[str, Any]) -> ConfigFormat | None:
    """The format of admission's guess; None when there is none, or it reads no format."""
    guessed = guess(spec)
    try:
        return None if guessed is None else guessed.format()
    except FormatError:
        return None  # validation names the field


def defaulted_version(fmt: ConfigFormat) -> str | None:
    """What an unset ``spec.global.version`` defaults to in ``fmt`` (rule 6)."""
    return str(fmt.version) if isinstance(fmt, LegacyFormat) else None


def cluster_version(installed: Installed) -> Declared | None:
    """The release an installed ``linkerd-config`` declares, in either format (each format
    reads its own keys back); InstalledDataError if the key that declares it is unreadable."""
    version = HelmValuesFormat.installed_version(installed)
    if version:
        return Declared(version, installed.where, VALUES_KEY)
    version = LegacyFormat.installed_version(installed)
    return Declared(version, installed.where, "global") if version else None


def release_for(spec: Mapping[str, Any], installed: Installed) -> TargetRelease:
    """The release to write ``spec`` for, given what is installed (its data empty if nothing
    is): rules 1 to 4. FormatError naming the spec's field, InstalledDataError naming the
    ConfigMap's key."""
    stated = stated_version(spec)
    declared = cluster_version(installed) if installed.data else None
    if stated is None:
        if declared is None:
            raise FormatError([(GLOBAL_VERSION, _nothing_declared(installed))])
        try:
            fmt = format_for(declared.version)
        except FormatError as error:
            raise InstalledDataError(
                declared.where,
                declared.key,
                f"declares the Linkerd version, and {error.errors[0].message}; state "
                "spec.global.version, or correct the ConfigMap",
            ) from error
        return TargetRelease(declared.version, declared.field, fmt)
    chosen = stated.format()
    if declared is not None:
        try:
            theirs = format_for(declared.version)
        except FormatError:
            theirs = chosen  # the cluster's version is one we cannot write: the spec decides
        if type(theirs) is not type(chosen):
            problem = (
                f"{stated.value} reads {_describe(chosen)}, but the cluster runs Linkerd "
                f"{declared.version}, which reads {_describe(theirs)}: "
                f"{_mismatch_advice(stated)}"
            )
            raise FormatError(stated.address([(GLOBAL_VERSION, problem)]))
    return TargetRelease(str(stated.value), stated.field, chosen)


def format_of(spec: Mapping[str, Any], installed: Installed) -> ConfigFormat:
    """The format to write ``spec`` in: ``release_for``'s."""
    return release_for(spec, installed).format


def _get(spec: Mapping[str, Any], section: str, key: str) -> Any:
    part = spec.get(section)
    return part.get(key) if isinstance(part, Mapping) else None


def _unset(value: Any) -> bool:
    return value is None or value == ""


def _reads_values(version: Any) -> bool:
    try:
        return isinstance(version, str) and HelmValuesFormat.supports(parse_version(version))
    except VersionError:
        return False


def _mismatch_advice(stated: StatedVersion) -> str:
    if stated.implied:
        return "upgrade Linkerd first, or state spec.global.version"
    return (
        "upgrade Linkerd first, then change spec.global.version (or leave it out to follow the "
        "cluster)"
    )


def _describe(fmt: ConfigFormat) -> str:
    if isinstance(fmt, HelmValuesFormat):
        return "the Helm `values` key"
    return "the legacy global/proxy keys"
