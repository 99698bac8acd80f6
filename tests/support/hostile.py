"""Hostile text for the installed ConfigMap, as someone with edit rights on it could write.

Shared by the unit tests (the bounded readers, reconcile, plan) and the integration test that
writes it into a real ``linkerd-config`` on the local control plane.
"""

from __future__ import annotations

from typing import Any

from tests.support.samples import modern_install

WIDTH = 9
"""Aliases per level of a "billion laughs": ``levels`` levels expand to WIDTH**levels."""


def alias_bomb(levels: int, width: int = WIDTH) -> str:
    """Top-level YAML keys ``laugh0`` .. ``laugh<levels>``: each a list of ``width`` aliases
    of the one before, so the last one expands to ``width ** levels`` strings."""
    lines = ['laugh0: &l0 "lol"']
    for level in range(1, levels + 1):
        aliases = ", ".join([f"*l{level - 1}"] * width)
        lines.append(f"laugh{level}: &l{level} [{aliases}]")
    return "\n".join(lines) + "\n"


def installed_values() -> str:
    """The ``values`` of Linkerd edge-26.8.3's own ``linkerd-config``."""
    config_cm, _ = modern_install()
    return str(config_cm["data"]["values"])


def bombed_values(levels: int) -> str:
    """Linkerd's real values with an alias bomb of ``levels`` levels appended."""
    return installed_values() + alias_bomb(levels)


def with_values(configmap: dict[str, Any], values: str) -> dict[str, Any]:
    """``configmap`` with its ``values`` replaced."""
    return {**configmap, "data": {**configmap["data"], "values": values}}
