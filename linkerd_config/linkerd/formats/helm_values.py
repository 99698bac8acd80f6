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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import yaml

from linkerd_config.linkerd.formats import bounded
from linkerd_config.linkerd.formats.base import (
    FieldError,
    FormatError,
    Installed,
    InstalledDataError,
    Rendering,
    configuration,
)
from linkerd_config.linkerd.formats.versions import LinkerdVersion, firsts
from linkerd_config.linkerd.rollout import DesiredProxy

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
FIRST_SUPPORTED: Final = firsts("stable-2.9.0", "edge-20.10.2")
FLAT_SINCE: Final = firsts("stable-2.10.0", "edge-21.2.2")
TRUST_ROOTS_SINCE: Final = firsts("stable-2.11.0", "edge-21.7.5")
NO_SIDE_EFFECTS_FLAG_SINCE: Final = firsts("stable-2.11.0", "edge-21.9.4")
SYSTEM_NAMESPACES_EXCLUDED_SINCE: Final = firsts("stable-2.12.0", "edge-22.2.1")
TRUST_ROOT_ANNOTATION_SINCE: Final = firsts("stable-2.12.1", "edge-22.9.1")
# The unified proxy image: no open-source stable release has it (the last is stable-2.14.10).
UNIFIED_IMAGE_SINCE: Final = firsts("stable-2.20.0", "edge-25.11.3")

_SYSTEM_NAMESPACES: Final = frozenset({"kube-system", "cert-manager"})
_NESTED: Final = "global"


@dataclass(frozen=True, slots=True)
class _Field:
    """One LinkerdConfig field and where it lives in the values."""

    spec: tuple[str, ...]
    values: tuple[str, ...]
    nested: bool = False
    """Under ``global:`` in the 2.9 layout."""
    convert: Callable[[Any], Any] = lambda value: value
    until: tuple[LinkerdVersion, ...] | None = None
    """The first releases without it."""
    gone: str = ""
    """Why it cannot be set from ``until`` on."""


def _ports(entries: Any) -> str:
    return ",".join(str(entry) for entry in entries)


_UNIFIED = "the proxy image runs the init container too (unified proxy image)"

FIELDS: Final[tuple[_Field, ...]] = (
    _Field(("global", "version"), ("linkerdVersion",), nested=True),
    _Field(("global", "cniEnabled"), ("cniEnabled",), nested=True),
    _Field(("global", "clusterDomain"), ("clusterDomain",), nested=True),
    _Field(
        ("global", "omitWebhookSideEffects"),
        ("omitWebhookSideEffects",),
        until=NO_SIDE_EFFECTS_FLAG_SINCE,
        gone="Linkerd's webhooks declare no side effects",
    ),
    _Field(("global", "identityContext", "trustDomain"), ("identityTrustDomain",), nested=True),
    _Field(
        ("global", "identityContext", "trustAnchorsPEM"), ("identityTrustAnchorsPEM",), nested=True
    ),
    _Field(
        ("global", "identityContext", "issuanceLifeTime"),
        ("identity", "issuer", "issuanceLifetime"),
    ),
    _Field(
        ("global", "identityContext", "clockSkewAllowance"),
        ("identity", "issuer", "clockSkewAllowance"),
    ),
    _Field(("global", "identityContext", "scheme"), ("identity", "issuer", "scheme")),
    _Field(("proxy", "proxyImage", "name"), ("proxy", "image", "name"), nested=True),
    _Field(("proxy", "proxyImage", "pullPolicy"), ("proxy", "image", "pullPolicy"), nested=True),
    _Field(("proxy", "proxyVersion"), ("proxy", "image", "version"), nested=True),
    _Field(
        ("proxy", "proxyInitImage", "name"),
        ("proxyInit", "image", "name"),
        nested=True,
        until=UNIFIED_IMAGE_SINCE,
        gone=_UNIFIED,
    ),
    _Field(
        ("proxy", "proxyInitImage", "pullPolicy"),
        ("proxyInit", "image", "pullPolicy"),
        nested=True,
        until=UNIFIED_IMAGE_SINCE,
        gone=_UNIFIED,
    ),
    _Field(
        ("proxy", "proxyInitImageVersion"),
        ("proxyInit", "image", "version"),
        nested=True,
        until=UNIFIED_IMAGE_SINCE,
        gone=_UNIFIED,
    ),
    _Field(("proxy", "adminPort"), ("proxy", "ports", "admin"), nested=True),
    _Field(("proxy", "controlPort"), ("proxy", "ports", "control"), nested=True),
    _Field(("proxy", "inboundPort"), ("proxy", "ports", "inbound"), nested=True),
    _Field(("proxy", "outboundPort"), ("proxy", "ports", "outbound"), nested=True),
    _Field(
        ("proxy", "ignoreInboundPorts"),
        ("proxyInit", "ignoreInboundPorts"),
        nested=True,
        convert=_ports,
    ),
    _Field(
        ("proxy", "ignoreOutboundPorts"),
        ("proxyInit", "ignoreOutboundPorts"),
        nested=True,
        convert=_ports,
    ),
    _Field(("proxy", "logLevel"), ("proxy", "logLevel"), nested=True),
    _Field(
        ("proxy", "disableExternalProfiles"),
        ("proxy", "enableExternalProfiles"),
        nested=True,
        convert=lambda disabled: not disabled,
    ),
    _Field(("proxy", "proxyUID"), ("proxy", "uid"), nested=True),
    _Field(("global", "endpointSliceEnabled"), ("enableEndpointSlices",), nested=True),
    _Field(("proxy", "debugImage", "name"), ("debugContainer", "image", "name")),
    _Field(("proxy", "debugImage", "pullPolicy"), ("debugContainer", "image", "pullPolicy")),
    _Field(("proxy", "debugImageVersion"), ("debugContainer", "image", "version")),
    _Field(("proxy", "destinationGetNetworks"), ("clusterNetworks",), nested=True),
    _Field(("proxy", "logFormat"), ("proxy", "logFormat"), nested=True),
    _Field(("proxy", "outboundConnectTimeout"), ("proxy", "outboundConnectTimeout"), nested=True),
    _Field(("proxy", "inboundConnectTimeout"), ("proxy", "inboundConnectTimeout"), nested=True),
    *(
        _Field(
            ("proxy", "resource", kind, name),
            ("proxy", "resources", name, kind[:-1]),  # requests.cpu -> resources.cpu.request
            nested=True,
            convert=str,
        )
        for kind in ("requests", "limits")
        for name in ("cpu", "memory", "ephemeral-storage")
    ),
)

# Where a LinkerdConfig says which ConfigMap to manage: not part of the values.
_LOCATION: Final = frozenset({("global", "linkerdNamespace"), ("global", "configMap")})


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
        for path, _ in _leaves(configuration(spec)):
            if path in _LOCATION:
                continue
            field = _FIELD_BY_SPEC.get(path)
            where = "spec." + ".".join(path)
            if field is None:
                errors.append(FieldError(where, f"has no place in Linkerd {self.version}'s values"))
            elif field.until is not None and self.version.at_least(*field.until):
                first = self.version.first_in(field.until)
                errors.append(
                    FieldError(where, f"cannot be set from Linkerd {first} on: {field.gone}")
                )
        return errors

    # -- rendering -------------------------------------------------------------------------

    def rendering(self, spec: Mapping[str, Any], installed: Installed) -> Rendering:
        """The spec set onto the installed ``values`` (and trust roots), everything else kept."""
        errors = self.check(spec)
        if errors:
            raise FormatError(errors)
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
        values = _installed_values(text, installed.where)
        updated = copy.deepcopy(values)
        managed: dict[str, Any] = {}
        for path, value in _leaves(configuration(spec)):
            field = _FIELD_BY_SPEC.get(path)
            if field is None:
                continue
            converted = field.convert(value)
            where = ((_NESTED,) if field.nested and self.nested else ()) + field.values
            _set(updated, where, converted)
            managed[".".join(where)] = converted
        out = {VALUES_KEY: text if updated == values else dump_values(updated)}

        companions: dict[str, dict[str, str]] = {}
        anchors = _get(spec, ("global", "identityContext", "trustAnchorsPEM"))
        bundle = (installed.others.get(TRUST_ROOTS_CONFIGMAP) or {}).get(TRUST_ROOTS_KEY)
        if self.trust_roots_configmap and isinstance(anchors, str) and anchors.strip():
            bundle = anchors.strip()  # as Helm's `trim` writes it
            companions[TRUST_ROOTS_CONFIGMAP] = {TRUST_ROOTS_KEY: bundle}
            managed[f"{TRUST_ROOTS_CONFIGMAP}/{TRUST_ROOTS_KEY}"] = bundle
        return Rendering(
            data=out,
            managed=managed,
            companions=companions,
            proxy=self._desired_proxy(updated, bundle),
            trust_anchor_source="Spec"
            if isinstance(anchors, str) and anchors.strip()
            else "Cluster",
            depends_on=frozenset({TRUST_ROOTS_CONFIGMAP})
            if self.trust_roots_configmap
            else frozenset(),
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
    """A values document, read within ``formats.bounded``'s limits (no anchors or aliases, no
    key twice); FormatError naming ``where`` if refused or not a YAML mapping."""
    try:
        parsed = bounded.yaml_value(text)
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


class _ValuesDumper(yaml.SafeDumper):
    """YAML as Helm's ``toYaml`` writes it: keys sorted, lists flush with their key (PyYAML's
    own habit), multi-line strings as literal blocks."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ValuesDumper.add_representer(str, _string)


def dump_values(values: Mapping[str, Any]) -> str:
    return yaml.dump(
        values, Dumper=_ValuesDumper, sort_keys=True, default_flow_style=False, width=1 << 20
    )


_FIELD_BY_SPEC: Final = {field.spec: field for field in FIELDS}


def _leaves(
    spec: Mapping[str, Any], prefix: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], Any]]:
    """Every stated (non-null) field of the spec as (path, value); lists are leaves, and so
    are the objects a field maps whole (none today)."""
    found: list[tuple[tuple[str, ...], Any]] = []
    for key, value in spec.items():
        path = (*prefix, str(key))
        if value is None:
            continue
        if isinstance(value, Mapping):
            found.extend(_leaves(value, path))
        else:
            found.append((path, value))
    return found


def _get(root: Any, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(root, Mapping):
            return None
        root = root.get(key)
    return root


def _set(root: dict[str, Any], path: Sequence[str], value: Any) -> None:
    for key in path[:-1]:
        child = root.get(key)
        if not isinstance(child, dict):
            child = root[key] = {}
        root = child
    root[path[-1]] = value
