"""What a user may leave out of a LinkerdConfig, and what fills it.

Two owners: *where* the configuration goes (``global.linkerdNamespace``, ``global.configMap``)
is the same for every Linkerd, so it is defaulted here; *what* the configuration says belongs
to the format of the target version (``ConfigFormat.defaults``): the legacy format fills every
field Linkerd's install wrote, the Helm-values format fills nothing (a field left out stays as
the installation has it).

The mutating webhook applies ``defaulted`` as a JSONPatch, and reconcile applies the very same
function before rendering, so an object stored while the webhook was down still renders
exactly as a defaulted one would. Defaulting is idempotent: a defaulted spec is a fixed point.
The webhook sees no cluster, so it takes the format from admission's guess at the target
release (``target_release.guess``); a spec that gives no usable version gets the common
defaults only, and reconcile, which knows the cluster's version, fills the rest.
"""

from __future__ import annotations

import copy
from typing import Any

from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.formats import ConfigFormat
from linkerd_config.linkerd.formats.target_release import defaulted_version, guessed_format
from linkerd_config.linkerd.spec.conversion import convert, to_hub, version_of
from linkerd_config.linkerd.spec.crd import COMMON_DEFAULTS


def defaulted(spec: Json, fmt: ConfigFormat | None = None) -> Json:
    """A new spec with every missing field filled; present fields are never changed.

    ``fmt`` is the format the spec will be written in; None takes admission's guess (none,
    or an unusable one: the common defaults only). An unset ``global.version`` (absent, null
    or empty) gets what ``target_release.defaulted_version`` says: in the legacy format the
    target release, the control plane's and (when it stands in) the proxy's one version.
    """
    result = copy.deepcopy(spec)
    _fill(result, COMMON_DEFAULTS)
    if fmt is None:
        fmt = guessed_format(spec)
    if fmt is not None:
        _fill(result, fmt.defaults())
        version = defaulted_version(fmt)
        if version is not None and result["global"].get("version") in (None, ""):
            result["global"]["version"] = version
    return result


def _fill(target: Json, defaults: Any) -> None:
    for key, value in defaults.items():
        if key not in target or target[key] is None:
            target[key] = copy.deepcopy(value)
        elif isinstance(value, dict) and isinstance(target[key], dict):
            _fill(target[key], value)


def object_patch(obj: Json) -> list[Json]:
    """``json_patch`` of a LinkerdConfig of either version: defaulted as the hub, the
    patch in the object's own version (``spec`` must be ``defaultable``)."""
    hub = to_hub(obj)
    wanted = convert({**hub, "spec": defaulted(hub["spec"])}, version_of(obj))
    ops: list[Json] = []
    _diff(obj["spec"], wanted["spec"], "/spec", ops)
    return ops


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
