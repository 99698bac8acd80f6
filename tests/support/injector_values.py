"""The fixture of every value Linkerd edge-26.8.3's injector reads for a pod
(tests/fixtures/injector_values_edge-26.8.3.json: each value's path and a sample), and a
v1alpha2 LinkerdConfig that states them all at once."""

from __future__ import annotations

import json
from typing import Any

from tests.support.samples import FIXTURES, SECOND_TRUST_ANCHOR

Json = dict[str, Any]
INJECTOR_VALUES = json.loads((FIXTURES / "injector_values_edge-26.8.3.json").read_text())


def every_injector_value() -> Json:
    """A v1alpha2 LinkerdConfig stating every path of the fixture at once, with its sample."""
    values: Json = {}
    for entry in INJECTOR_VALUES["paths"]:
        sample = entry["sample"]
        if sample == "@file":
            sample = SECOND_TRUST_ANCHOR
        node = values
        keys = entry["path"].split(".")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = sample
    return {
        "apiVersion": "config.linkerd.io/v1alpha2",
        "kind": "LinkerdConfig",
        "metadata": {"name": "every-value"},
        "spec": {"values": values},
    }
