"""``spec.rollout`` says how the controller rolls a configuration out, in every format: no
format may take it for a value to write or refuse (it was once refused on every modern
Linkerd as "has no place in Linkerd edge-26.8.4's values")."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from linkerd_config.linkerd.admission.validation import validate
from linkerd_config.linkerd.configmap.desired import current_data, desired_config
from linkerd_config.linkerd.spec.crd import target_of
from tests.support.samples import modern_install, sample

ROLLOUT = {"paused": True, "maxRestartsPerPass": 1, "restartInterval": "30s"}


def modern() -> dict[str, Any]:
    return {
        "apiVersion": "config.linkerd.io/v1alpha1",
        "kind": "LinkerdConfig",
        "metadata": {"name": "modern", "creationTimestamp": "2026-11-24T00:00:00Z"},
        "spec": {"proxy": {"proxyVersion": "edge-26.8.4", "logLevel": "debug"}},
    }


def legacy() -> dict[str, Any]:
    return sample("edge_19.12.3.yaml")


def with_rollout(config: dict[str, Any]) -> dict[str, Any]:
    config = copy.deepcopy(config)
    config["spec"]["rollout"] = dict(ROLLOUT)
    return config


@pytest.mark.parametrize("make", [modern, legacy], ids=["values", "legacy"])
def test_a_rollout_section_is_accepted_in_every_format(make: Any) -> None:
    assert validate(make()) == []
    assert validate(with_rollout(make())) == []


def test_a_rollout_section_changes_nothing_a_values_cluster_is_given() -> None:
    configmaps = {d["metadata"]["name"]: d for d in modern_install()}
    target = target_of(modern())
    current = current_data(configmaps, target)
    plain = desired_config(modern(), current)
    rolled = desired_config(with_rollout(modern()), current)
    assert rolled.data == plain.data
    assert rolled.config_hash == plain.config_hash
    assert "rollout" not in rolled.data["values"]
