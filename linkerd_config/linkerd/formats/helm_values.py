"""Linkerd's Helm-values config format (edge-20.10.2 / stable-2.9.0 and every release since).

``linkerd-config`` holds one key, ``values``: the Helm values Linkerd was installed with, as
YAML (``linkerd install`` and the Helm chart both write it; Linkerd's injector re-reads it on
every admission request, ``pkg/config.Values``). From edge-21.7.5 / stable-2.11.0 the trust
anchors the injector actually uses live in the ConfigMap ``linkerd-identity-trust-roots``
(key ``ca-bundle.crt``), which wins over ``values.identityTrustAnchorsPEM``.

This format *changes an installation*, it never creates one: it parses the current ``values``,
sets the fields the LinkerdConfig states (a field left out stays as installed), and keeps every
other key and value, so Helm users keep their settings. When nothing it manages differs, the
current bytes are returned untouched: no churn, no restarts.

Layouts within the range (each a version gate below):

* edge-20.10.2 .. edge-21.2.1 and stable-2.9.x nest the shared values under ``global:``
  (``global.proxy``, ``global.proxyInit``, ``global.linkerdVersion``, ...);
* ``proxyInit.image`` exists until the unified proxy image (edge-25.11.3), after which the
  proxy image also runs the init container and a proxy-init image cannot be set;
* ``omitWebhookSideEffects`` is gone from edge-21.9.4 / stable-2.11.0.

What the injector gives a pod (``pkg/inject``): proxy version = pod annotation
``config.linkerd.io/proxy-version``, then the namespace's, then ``proxy.image.version``, then
``linkerdVersion``; ``linkerd.io/trust-root-sha256`` = SHA-256 of ``ca-bundle.crt`` (from
edge-22.9.1 / stable-2.12.1); ``kube-system`` and ``cert-manager`` are never injected (from
edge-22.2.1 / stable-2.12.0).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import yaml

from linkerd_config.linkerd.formats import bounded, go_yaml
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
from linkerd_config.linkerd.formats.field_table import (
    VALUES_RELEASES,
    ValuesField,
    spec_leaves,
)
from linkerd_config.linkerd.formats.versions import LinkerdVersion, first_of, firsts
from linkerd_config.linkerd.mesh import DesiredProxy

__all__ = [
    "FIRST_SUPPORTED",
    "TRUST_ROOTS_CONFIGMAP",
    "TRUST_ROOTS_KEY",
    "VALUES_KEY",
    "HelmValuesFormat",
    "dump_values",
    "parse_values",
]

VALUES_KEY: Final = "values"
TRUST_ROOTS_CONFIGMAP: Final = "linkerd-identity-trust-roots"
TRUST_ROOTS_KEY: Final = "ca-bundle.crt"


# The injector reads `values` from edge-20.10.2 (linkerd2 #5036); stable-2.9.0 is the first
# stable release with it.
FIRST_SUPPORTED: Final = VALUES_RELEASES.since
FLAT_SINCE: Final = firsts("stable-2.10.0", "edge-21.2.2")
TRUST_ROOTS_SINCE: Final = firsts("stable-2.11.0", "edge-21.7.5")
SYSTEM_NAMESPACES_EXCLUDED_SINCE: Final = firsts("stable-2.12.0", "edge-22.2.1")
TRUST_ROOT_ANNOTATION_SINCE: Final = firsts("stable-2.12.1", "edge-22.9.1")

_SYSTEM_NAMESPACES: Final = frozenset({"kube-system", "cert-manager"})
_NESTED: Final = "global"


@dataclass(frozen=True, slots=True)
class HelmValuesFormat:
    """The ``values`` format, for one Linkerd release."""

    version: LinkerdVersion

    def __post_init__(self) -> None:
        if not self.supports(self.version):
            first = self.version.first_in(FIRST_SUPPORTED)
            raise FormatError(
                [
                    (
                        "spec.global.version",
                        f"Linkerd {self.version} reads the legacy global/proxy keys; the "
                        f"values format starts at {first}",
                    )
                ]
            )

    @staticmethod
    def supports(version: LinkerdVersion) -> bool:
        return version.at_least(*FIRST_SUPPORTED)

    @property
    def name(self) -> str:
        return "values"

    # -- what this release has -------------------------------------------------------------

    @property
    def nested(self) -> bool:
        """The 2.9 layout: shared values under ``global:``."""
        return not self.version.at_least(*FLAT_SINCE)

    @property
    def trust_roots_configmap(self) -> bool:
        return self.version.at_least(*TRUST_ROOTS_SINCE)

    @property
    def managed_keys(self) -> frozenset[str]:
        """Keys of ``linkerd-config`` this format writes; ``values`` is rewritten in place,
        so the whole of it is kept in the preserved copy too (see ``owned_keys``)."""
        return frozenset({VALUES_KEY})

    @property
    def owned_keys(self) -> frozenset[str]:
        """Keys whose whole content comes from the spec: none (``values`` is shared)."""
        return frozenset()

    def defaults(self) -> dict[str, Any]:
        """Nothing: a field left out is left as the installation has it."""
        return {}

    # -- checks ----------------------------------------------------------------------------

    def check(self, spec: Mapping[str, Any]) -> list[FieldError]:
        """What this release cannot carry: fields with no place in its values."""
        errors: list[FieldError] = []
        for stated in spec_leaves(configuration(spec)):
            row = stated.row
            if row is None:
                errors.append(FieldError(stated.field, stated.problem))
            elif row.location:
                continue
            elif row.values is None:
                errors.append(
                    FieldError(stated.field, f"has no place in Linkerd {self.version}'s values")
                )
            elif not row.values.releases.include(self.version):
                errors.append(FieldError(stated.field, self._absence(row.values)))
        return errors

    def _absence(self, values: ValuesField) -> str:
        """Why this release's values cannot carry a field its chart lacks."""
        end = first_of(values.releases.until, self.version.channel)
        if end is not None and self.version >= end:
            return f"cannot be set from Linkerd {end} on: {values.gone}"
        return values.releases.requirement(self.version)

    # -- rendering -------------------------------------------------------------------------

    def rendering(self, spec: Mapping[str, Any], installed: Installed) -> Rendering:
        """The spec set onto the installed ``values`` (and trust roots), everything else kept."""
        errors = self.check(spec)
        if errors:
            raise FormatError(errors)
        text, values = self._installed(installed)
        updated = copy.deepcopy(values)
        managed: dict[str, Any] = {}
        for where, value in self._stated(spec):
            _set(updated, where, value)
            managed[".".join(where)] = value
        anchors = _get(spec, ("global", "identityContext", "trustAnchorsPEM"))
        stated = anchors.strip() if isinstance(anchors, str) and anchors.strip() else None
        # as Helm's `trim` writes it
        return self._rendered(text, values, updated, managed, installed, stated)

    def snapshot(self, installed: Installed) -> Snapshot:
        """``values`` and the trust roots as installed."""
        data = {VALUES_KEY: installed.data[VALUES_KEY]} if VALUES_KEY in installed.data else {}
        bundle = (installed.others.get(TRUST_ROOTS_CONFIGMAP) or {}).get(TRUST_ROOTS_KEY)
        if not self.trust_roots_configmap or bundle is None:
            return Snapshot(data)
        return Snapshot(data, {TRUST_ROOTS_CONFIGMAP: {TRUST_ROOTS_KEY: bundle}})

    def restoring(
        self, snapshot: Snapshot, spec: Mapping[str, Any], installed: Installed
    ) -> Rendering:
        """Each value a rendering of ``spec`` sets, back as the snapshot's ``values`` held it
        (removed where it held none), and the trust roots the spec states back as the
        snapshot's; every other Helm value stays as installed now (a ``helm upgrade`` since
        is kept)."""
        recorded_text = snapshot.data.get(VALUES_KEY)
        if recorded_text is None:
            raise FormatError([(SNAPSHOT_FIELD, f"has no key {VALUES_KEY}")])
        recorded = parse_values(recorded_text, f"{SNAPSHOT_FIELD}.{VALUES_KEY}")
        text, values = self._installed(installed)
        updated = copy.deepcopy(values)
        managed: dict[str, Any] = {}
        for where, _ in self._stated(spec):
            found, was = _find(recorded, where)
            if found:
                _set(updated, where, copy.deepcopy(was))
            else:
                _remove(updated, where)
            managed[".".join(where)] = was
        anchors = _get(spec, ("global", "identityContext", "trustAnchorsPEM"))
        bundle = (snapshot.companions.get(TRUST_ROOTS_CONFIGMAP) or {}).get(TRUST_ROOTS_KEY)
        stated = anchors if isinstance(anchors, str) and anchors.strip() else None
        kept = bundle if stated is not None and bundle is not None else None
        return self._rendered(text, values, updated, managed, installed, kept)

    def _installed(self, installed: Installed) -> tuple[str, dict[str, Any]]:
        text = installed.data.get(VALUES_KEY)
        if text is None:
            raise FormatError(
                [
                    (
                        "spec.global.configMap",
                        f"ConfigMap {installed.where} has no `values` to update: install Linkerd "
                        f"{self.version} first (this format changes an installation, it does "
                        "not create one)",
                    )
                ]
            )
        return text, _installed_values(text, installed.where)

    def _stated(self, spec: Mapping[str, Any]) -> list[tuple[tuple[str, ...], Any]]:
        """Where in the values each field ``spec`` states goes, and its value there."""
        found = []
        for stated in spec_leaves(configuration(spec)):
            field = stated.row.values if stated.row is not None else None
            if field is None:
                continue
            where = ((_NESTED,) if field.nested and self.nested else ()) + field.path
            found.append((where, field.convert(stated.value)))
        return found

    def _rendered(
        self,
        text: str,
        values: Mapping[str, Any],
        updated: dict[str, Any],
        managed: dict[str, Any],
        installed: Installed,
        bundle_written: str | None,
    ) -> Rendering:
        """The rendering of ``updated`` values (``text`` kept when nothing changed) and, when
        ``bundle_written``, the trust roots written with it."""
        out = {VALUES_KEY: text if _identical(updated, values) else dump_values(updated)}
        companions: dict[str, dict[str, str]] = {}
        bundle = (installed.others.get(TRUST_ROOTS_CONFIGMAP) or {}).get(TRUST_ROOTS_KEY)
        if self.trust_roots_configmap and bundle_written is not None:
            bundle = bundle_written
            companions[TRUST_ROOTS_CONFIGMAP] = {TRUST_ROOTS_KEY: bundle}
            managed[f"{TRUST_ROOTS_CONFIGMAP}/{TRUST_ROOTS_KEY}"] = bundle
        return Rendering(
            data=out,
            managed=managed,
            companions=companions,
            proxy=self._desired_proxy(updated, bundle),
            trust_anchor_source="Spec" if bundle_written is not None else "Cluster",
            depends_on={TRUST_ROOTS_CONFIGMAP: frozenset({TRUST_ROOTS_KEY})}
            if self.trust_roots_configmap
            else {},
        )

    def _desired_proxy(self, values: Mapping[str, Any], bundle: str | None) -> DesiredProxy:
        root = values.get(_NESTED) if self.nested else values
        root = root if isinstance(root, Mapping) else {}
        image_version = _get(root, ("proxy", "image", "version"))
        version = image_version or root.get("linkerdVersion") or str(self.version)
        stamped = self.version.at_least(*TRUST_ROOT_ANNOTATION_SINCE) and bundle is not None
        return DesiredProxy(
            version=str(version),
            trust_root_sha256=hashlib.sha256(bundle.encode()).hexdigest()
            if stamped and bundle is not None
            else None,
            excluded_namespaces=_SYSTEM_NAMESPACES
            if self.version.at_least(*SYSTEM_NAMESPACES_EXCLUDED_SINCE)
            else frozenset(),
        )

    def trust_anchors(self, installed: Installed) -> str | None:
        """The anchors the installation's values hold (None if none)."""
        text = installed.data.get(VALUES_KEY)
        if text is None:
            return None
        values = _installed_values(text, installed.where)
        root = values.get(_NESTED) if self.nested else values
        pem = root.get("identityTrustAnchorsPEM") if isinstance(root, Mapping) else None
        return pem if isinstance(pem, str) and pem.strip() else None

    @staticmethod
    def installed_version(installed: Installed) -> str | None:
        """The ``linkerdVersion`` an installation's ``values`` declares (flat or 2.9-nested)."""
        text = installed.data.get(VALUES_KEY)
        if text is None:
            return None
        values = _installed_values(text, installed.where)
        for root in (values, values.get(_NESTED)):
            if isinstance(root, Mapping) and isinstance(root.get("linkerdVersion"), str):
                return str(root["linkerdVersion"])
        return None


def parse_values(text: str, where: str) -> dict[str, Any]:
    """A values document as Linkerd reads it (``formats.go_yaml``: the JSON value
    sigs.k8s.io/yaml makes of it, every key a string), within ``formats.bounded``'s limits (no
    anchors or aliases, no key twice, none two to PyYAML and one to Go); FormatError naming
    ``where`` if refused or not a YAML mapping."""
    try:
        parsed = go_yaml.value(text)
    except bounded.Unreadable as error:
        raise FormatError([(where, str(error))]) from error
    if parsed is None:
        return {}
    if not isinstance(parsed, dict):
        raise FormatError([(where, "must be a YAML mapping of Helm values")])
    return parsed


@functools.lru_cache(maxsize=8)
def _installed_values(text: str, where: str) -> dict[str, Any]:
    """``parse_values`` of the installed ``values`` of ConfigMap ``where``, once per distinct
    text: one reconcile reads it for the format, the version and the rendering, and it rarely
    changes. InstalledDataError naming the ConfigMap and key when refused (not cached: a
    refusal costs one bounded scan). Shared: never mutate the result (rendering works on a
    deep copy)."""
    try:
        return parse_values(text, VALUES_KEY)
    except FormatError as error:
        raise InstalledDataError(where, VALUES_KEY, error.errors[0].message) from error


def issuance_lifetime(data: Mapping[str, str], where: str) -> float | None:
    """Seconds the certificates Linkerd's identity issues last, as ``linkerd-config``'s
    ``values`` (``data``, of ConfigMap ``where``) say: ``identity.issuer.issuanceLifetime``
    (what ``linkerd install`` rendered identity's flag from). None when unset or unreadable:
    the caller takes Linkerd's default."""
    text = data.get(VALUES_KEY)
    if not isinstance(text, str):
        return None
    try:
        value = _get(_installed_values(text, where), ("identity", "issuer", "issuanceLifetime"))
        return parse_go_duration(value) / 1e9 if isinstance(value, str) else None
    except (InstalledDataError, ValueError):
        return None


class _ValuesDumper(yaml.SafeDumper):
    """YAML as Helm's ``toYaml`` writes it: keys sorted, lists flush with their key (PyYAML's
    own habit), multi-line strings as literal blocks."""


_NOT_PLAIN: Final = re.compile(
    r"""
    [-+]?(?:[0-9][0-9_]*+)?\.?[0-9_]*+(?:[eE][-+]?[0-9]++)?  # decimal, float, exponent: 1e3, .5
    | [-+]?0[xXoObB][0-9a-fA-F_]+                       # hex, YAML 1.2 octal 0o17, binary
    | [-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?  # YAML 1.1 base 60: 1:30
    | [-+]?\.(?:inf|Inf|INF|nan|NaN|NAN)
    | y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE
    | on|On|ON|off|Off|OFF|null|Null|NULL|~|<<|=
    | [0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(?:[Tt\ ].*)?         # timestamps
    """,
    re.VERBOSE,
)
"""Plain scalars some YAML reader takes for a number, a boolean, a null, a timestamp or a
merge key: YAML 1.1 (PyYAML, Helm's go-yaml v2), YAML 1.2 (go-yaml v3: ``0o17``) and Go's
float syntax (``1e3``, which PyYAML reads as a string). Linkerd's ``config.Values`` read
``identityTrustDomain: 1e3`` as "1000" and ``name: 0o17`` as "15" (issue 39, finding 2).
A string matching it is written quoted, which every reader reads as the same string.

Possessive (``*+``): the decimal's two runs of digits, backtracked into each other, made a
match of 250,000 digits and a letter quadratic (minutes, holding the GIL: the event loop
stopped with it); they match the same strings, in one pass."""


_LINE_BREAKS: Final = frozenset("\x85\u2028\u2029")
"""YAML 1.1's line breaks beyond ASCII: written as they are (UTF-8), a reader folds them."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if _LINE_BREAKS.intersection(value):  # escaped (\N, \L, \P): in quotes or a block, folded
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    # Go's own rules decide too (go_yaml.resolve): 0b-101 is -5 to Go, and no pattern above
    # would say so.
    ambiguous = _NOT_PLAIN.fullmatch(value) or not go_yaml.plain_string(value)
    quoted = "'" if ambiguous else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=quoted)


_ValuesDumper.add_representer(str, _string)


def dump_values(values: Mapping[str, Any]) -> str:
    return dump_yaml(values, sort_keys=True)


def dump_yaml(data: Mapping[str, Any], *, sort_keys: bool) -> str:
    """Block YAML, multi-line strings as literal blocks (a PEM bundle stays readable)."""
    return yaml.dump(
        data,
        Dumper=_ValuesDumper,
        sort_keys=sort_keys,
        default_flow_style=False,
        width=1 << 20,
        # UTF-8 as it is (Go's readers read it): escaped, each character took up to 10 bytes,
        # and a values text of 240 KB could be written at twice the size the reader admits.
        allow_unicode=True,
    )


def _identical(a: Any, b: Any) -> bool:
    """Equal, and of one type all the way down. To Go ``false`` is not ``0`` and ``1.0`` is
    not ``1``, where Python's ``==`` says they are: a hand-edited ``cniEnabled: 0`` is not the
    spec's ``false``, and is written over."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_identical(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _get(root: Any, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(root, Mapping):
            return None
        root = root.get(key)
    return root


def _find(root: Any, path: Sequence[str]) -> tuple[bool, Any]:
    """Whether ``path`` is in ``root`` (a null value counts), and its value."""
    for key in path:
        if not isinstance(root, Mapping) or key not in root:
            return False, None
        root = root[key]
    return True, root


def _remove(root: dict[str, Any], path: Sequence[str]) -> None:
    """``path`` out of ``root``, and each mapping it leaves empty on the way (the way
    ``_set`` made them)."""
    parent = root.get(path[0]) if len(path) > 1 else None
    if len(path) > 1 and isinstance(parent, dict):
        _remove(parent, path[1:])
        if not parent:
            del root[path[0]]
    elif len(path) == 1:
        root.pop(path[0], None)


def _set(root: dict[str, Any], path: Sequence[str], value: Any) -> None:
    for key in path[:-1]:
        child = root.get(key)
        if not isinstance(child, dict):
            child = root[key] = {}
        root = child
    root[path[-1]] = value
