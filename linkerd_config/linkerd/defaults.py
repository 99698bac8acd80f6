"""What a user may leave out of a LinkerdConfig, filled with Linkerd's own defaults.

The mutating webhook applies these as a JSONPatch, and reconcile applies the very same
function before rendering, so an object stored while the webhook was down still renders
exactly as a defaulted one would. Defaulting is idempotent: a defaulted spec is a fixed point.

Values are those of ``linkerd install`` in the version concerned (checked against the
edge-19.12.1 install in tests/fixtures): images under gcr.io/linkerd-io, pull policy
IfNotPresent (the original project wrote the pull policy into the image name and the proxy
image into the init image; each value here sits in its own field).
"""

from __future__ import annotations

import copy

from linkerd_config.kube.resource import Json

# Linkerd 2.6 / 2.7 era (edge-19.x and edge-20.x): the versions whose install writes the
# legacy global/proxy keys. A later format adds its own table beside this one.
LEGACY_DEFAULTS: Json = {
    "global": {
        "linkerdNamespace": "linkerd",
        "cniEnabled": False,
        "identityContext": {
            "trustDomain": "cluster.local",
            "issuanceLifeTime": "86400s",
            "clockSkewAllowance": "20s",
            "scheme": "linkerd.io/tls",
        },
        "omitWebhookSideEffects": False,
        "clusterDomain": "cluster.local",
        "configMap": "linkerd-config",
    },
    "proxy": {
        "proxyImage": {"name": "gcr.io/linkerd-io/proxy", "pullPolicy": "IfNotPresent"},
        "proxyInitImage": {"name": "gcr.io/linkerd-io/proxy-init", "pullPolicy": "IfNotPresent"},
        "adminPort": 4191,
        "controlPort": 4190,
        "inboundPort": 4143,
        "outboundPort": 4140,
        "ignoreInboundPorts": [],
        "ignoreOutboundPorts": [],
        "logLevel": "warn,linkerd2_proxy=info",
        "disableExternalProfiles": True,
        "proxyUID": 2102,
    },
}


def defaulted(spec: Json) -> Json:
    """A new spec with every missing field filled; present fields are never changed.

    ``global.version`` defaults to ``proxy.proxyVersion``: in a Linkerd install the control
    plane and the proxy share one version.
    """
    result = copy.deepcopy(spec)
    _fill(result, LEGACY_DEFAULTS)
    proxy_version = (result.get("proxy") or {}).get("proxyVersion")
    if proxy_version and not result["global"].get("version"):
        result["global"]["version"] = proxy_version
    return result


def _fill(target: Json, defaults: Json) -> None:
    for key, value in defaults.items():
        if key not in target or target[key] is None:
            target[key] = copy.deepcopy(value)
        elif isinstance(value, dict) and isinstance(target[key], dict):
            _fill(target[key], value)


def json_patch(spec: Json, base_path: str = "/spec") -> list[Json]:
    """The JSONPatch that turns ``spec`` into ``defaulted(spec)``: ``add`` operations only.

    A missing parent is added whole, so the patch applies to the object as it is. A value
    ``defaulted`` changes (only an empty ``global.version``, which counts as missing) is set
    by ``add`` too, which replaces an existing member (RFC 6902); a null that stays null is
    left alone, so the patch of a defaulted spec is empty.
    """
    ops: list[Json] = []
    _diff(spec, defaulted(spec), base_path, ops)
    return ops


def _diff(current: Json, wanted: Json, path: str, ops: list[Json]) -> None:
    for key, value in wanted.items():
        child = f"{path}/{_escape(key)}"
        if key in current and isinstance(value, dict) and isinstance(current[key], dict):
            _diff(current[key], value, child, ops)
        elif key not in current or current[key] != value:
            ops.append({"op": "add", "path": child, "value": value})


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
