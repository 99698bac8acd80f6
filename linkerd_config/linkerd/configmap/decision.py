"""The steps before a LinkerdConfig's reconcile writes anything, decided in one place for the
controller and for ``plan`` and ``status`` (``status.plan``): whether it is valid, which ConfigMap
it targets, whether that is in the namespace the controller manages, whether it owns that
ConfigMap, and what it renders onto what is installed.

Pure. Rendering reads installed data within ``formats.bounded``'s limits, which anyone who may
edit the ConfigMap can reach: the controller runs ``decide`` over copies of its caches, off
the event loop unless its inputs are a few KB.

The messages state the fact; each caller adds what it does about it (the controller: nothing
written; ``plan``: nothing would be).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.admission.validation import render_errors
from linkerd_config.linkerd.configmap.desired import (
    Desired,
    current_data,
    desired_config,
    in_namespace,
)
from linkerd_config.linkerd.formats import (
    FieldError,
    FormatError,
    InstalledDataError,
    VersionError,
)
from linkerd_config.linkerd.spec.crd import Target, owner_among, target_of

INVALID = "Invalid"
"""The object fails validation (the webhook's checks)."""
NAMESPACE_NOT_MANAGED = "NamespaceNotManaged"
"""Its target is outside the namespace whose ConfigMaps the controller manages."""
CONFLICT = "Conflict"
"""An older LinkerdConfig manages its target."""
INSTALLED_CONFIG_UNREADABLE = "InstalledConfigUnreadable"
"""What is installed cannot be read (``formats.InstalledDataError``)."""
INVALID_CONFIG = "InvalidConfig"
"""Valid on its own, it does not render onto what is installed."""


@dataclass(frozen=True)
class Refused:
    """Why nothing is written for it: one of the reasons above, and the fact, for people."""

    reason: str
    message: str
    owner: str = ""
    """``CONFLICT``: the LinkerdConfig that manages the target."""


@dataclass(frozen=True)
class Decided:
    """It owns its target, and this is what the target's namespace must hold."""

    target: Target
    configmaps: dict[str, Json]
    """The ConfigMaps of the target's namespace, by name."""
    current: dict[str, dict[str, str]]
    """What the rendering read (``desired.current_data``): the trust-anchor guard and a
    rollback render onto the same."""
    desired: Desired


def decide(
    config: Json,
    errors: Sequence[FieldError],
    configs: Iterable[Json],
    configmaps: Mapping[str, Json],
    config_namespace: str,
) -> Decided | Refused:
    """The reconcile's steps before it writes, for ``config`` given its validation ``errors``
    (each caller validates as it must: the controller the object alone, ``plan`` as the API
    server would store it), the LinkerdConfigs in the cluster (``config`` replaces its own
    name among them) and the cached ``namespace/name`` -> ConfigMap map."""
    if errors:
        return Refused(INVALID, render_errors(errors))
    target = target_of(config)
    if target.namespace != config_namespace:
        return Refused(
            NAMESPACE_NOT_MANAGED,
            f"ConfigMap {target} is outside the namespace the controller manages "
            f"({config_namespace})",
        )
    name = config["metadata"]["name"]
    others = [c for c in configs if c["metadata"]["name"] != name]
    owner = owner_among([*others, config], target)
    if owner is not None and owner["metadata"]["name"] != name:
        older = str(owner["metadata"]["name"])
        message = f"ConfigMap {target} is managed by the older LinkerdConfig {older}"
        return Refused(CONFLICT, message, older)
    in_target_namespace = in_namespace(configmaps.items(), target.namespace)
    try:
        current = current_data(in_target_namespace, target)
        desired = desired_config(config, current)
    except InstalledDataError as exc:
        return Refused(INSTALLED_CONFIG_UNREADABLE, str(exc))
    except (FormatError, VersionError) as exc:
        return Refused(INVALID_CONFIG, str(exc))
    return Decided(target, in_target_namespace, current, desired)
