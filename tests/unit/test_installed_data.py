"""What the cluster holds is read within bounds and never guessed at (issue 22, findings 1
and 4): the installed ``linkerd-config`` may have been written by anyone with edit rights on
it. An alias bomb, a key stated twice, a version no format reads: refused, each naming the
ConfigMap and key (never a spec field the LinkerdConfig did not set), nothing written."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from linkerd_config.linkerd.cluster_view import ClusterView
from linkerd_config.linkerd.config_diff import readable
from linkerd_config.linkerd.formats import InstalledDataError, bounded
from linkerd_config.linkerd.preview import plan, status
from linkerd_config.linkerd.reconcile import current_data, desired_config, target_of
from linkerd_config.linkerd.rollout_policy import RolloutOptions
from tests.support.controller_fakes import conditions, controller
from tests.support.hostile import (
    alias_bomb,
    bombed_values,
    installed_values,
    with_values,
)
from tests.support.linkerdconfigs import config as legacy_config
from tests.support.linkerdconfigs import small
from tests.support.samples import install_configmap, modern_install

VALUES_AT = "ConfigMap linkerd/linkerd-config, key values"
GLOBAL_AT = "ConfigMap linkerd/linkerd-config, key global"


def render(configmap: dict[str, Any], config: dict[str, Any] | None = None) -> Any:
    config = config or small()
    target = target_of(config)
    return desired_config(config, current_data({target.name: configmap}, target))


def refusal(configmap: dict[str, Any], config: dict[str, Any] | None = None) -> str:
    """The one error a rendering onto ``configmap`` raises, as ``field: message``."""
    with pytest.raises(InstalledDataError) as raised:
        render(configmap, config)
    (error,) = raised.value.errors
    return str(error)


# -- what Linkerd writes passes ---------------------------------------------------------------


def test_what_linkerd_itself_wrote_is_read_as_before() -> None:
    """Linkerd renders ``values`` with Helm's toYaml (Go's marshaller: no anchors, no
    aliases, no key twice), and ``global`` with jsonpb: both read exactly as PyYAML and
    Python's JSON read them."""
    text = installed_values()
    assert bounded.yaml_value(text) == yaml.safe_load(text)
    legacy = install_configmap()["data"]
    for key in ("global", "proxy", "install"):
        assert bounded.json_value(legacy[key]) == json.loads(legacy[key])


# -- finding 1: the alias bomb ------------------------------------------------------------------


@pytest.mark.parametrize("levels", [4, 10, 11])
def test_an_alias_bomb_in_values_is_refused_at_its_first_anchor(levels: int) -> None:
    bombed = with_values(modern_install()[0], bombed_values(levels))
    first_anchor = installed_values().count("\n") + 1  # the line after Linkerd's values
    assert refusal(bombed) == (
        f"{VALUES_AT}: line {first_anchor}, column 9: a YAML anchor (&l0); "
        "Linkerd never writes anchors or aliases"
    )


def test_an_alias_alone_is_refused_too() -> None:
    """An alias without an anchor is not YAML; one with an anchor is caught at the anchor:
    either way no alias is ever expanded."""
    text = installed_values() + "laugh: *nowhere\n"
    message = refusal(with_values(modern_install()[0], text))
    assert message.startswith(f"{VALUES_AT}: line ")
    assert "nowhere" in message


async def test_reconcile_of_a_bomb_writes_nothing_and_says_which_configmap() -> None:
    config_cm, roots = modern_install()
    bombed = with_values(config_cm, bombed_values(10))
    ctl, writer, recorder = controller(small(), configmap=bombed)
    ctl.configmaps.store.put(roots)
    await ctl.reconcile("modern")
    assert writer.applied == []  # neither the ConfigMap (the bomb written back) nor a copy
    (status_,) = writer.statuses
    assert conditions(status_)["Ready"] == ("False", "InstalledConfigUnreadable")
    assert conditions(status_)["ConfigMapSynced"] == ("False", "InstalledConfigUnreadable")
    ready = next(c for c in status_["conditions"] if c["type"] == "Ready")
    assert ready["message"].startswith(f"{VALUES_AT}: line ")
    assert "nothing is written until the ConfigMap is corrected" in ready["message"]
    assert recorder.events == [("Warning", "InstalledConfigUnreadable")]


def test_plan_and_status_refuse_the_bomb_naming_the_configmap() -> None:
    config_cm, roots = modern_install()
    bombed = with_values(config_cm, bombed_values(11))
    stored = {**small(), "status": {}}
    configmaps = {f"linkerd/{cm['metadata']['name']}": cm for cm in (bombed, roots)}
    cluster = ClusterView(
        configs=[stored], configmaps=configmaps, pods=[], namespaces={}, replicasets={},
        workloads={}, config_namespace="linkerd",
    )  # fmt: skip
    defaults = RolloutOptions(max_restarts_per_pass=1, restart_interval=1.0)
    planned = plan(small(), cluster, defaults)
    assert planned.problem is not None
    assert planned.problem.reason == "InstalledConfigUnreadable"
    assert planned.problem.message.startswith(f"{VALUES_AT}: line ")
    (reported,) = status(cluster, defaults)
    assert reported.problem == planned.problem


def test_the_readable_diff_never_expands_a_bomb() -> None:
    """``plan`` diffs any key it would change, the trust roots too: a refused text is
    compared as the text it is."""
    text = alias_bomb(11)
    assert readable(text) == text


# -- finding 4: a key twice, a version no format reads ------------------------------------------


def test_a_key_twice_in_values_is_refused_not_resolved() -> None:
    text = installed_values() + "linkerdVersion: edge-1.0.0\n"
    first = next(
        number
        for number, line in enumerate(installed_values().splitlines(), start=1)
        if line.startswith("linkerdVersion:")
    )
    message = refusal(with_values(modern_install()[0], text))
    assert message == (
        f"{VALUES_AT}: line {text.count(chr(10))}, column 1: key 'linkerdVersion' appears "
        f"twice in one mapping (first at line {first}); which one counts would be a guess"
    )
    assert "spec.global.version" not in message


def test_an_unusable_installed_version_is_the_configmaps_problem() -> None:
    values = installed_values().replace("linkerdVersion: edge-26.8.3", "linkerdVersion: edge-1.0.0")
    assert values != installed_values()
    message = refusal(with_values(modern_install()[0], values))
    assert message.startswith(
        f"{VALUES_AT}: declares the Linkerd version, and 'edge-1.0.0' is not a Linkerd version"
    )
    assert message.endswith("state spec.global.version, or correct the ConfigMap")


def test_a_key_twice_in_the_legacy_global_is_refused() -> None:
    cm = install_configmap()
    global_ = cm["data"]["global"].rstrip().rstrip("}") + ',"version":"edge-1.0.0"}'
    bad = {**cm, "data": {**cm["data"], "global": global_}}
    assert refusal(bad, legacy_config()) == (
        f"{GLOBAL_AT}: key 'version' appears twice in one object; which one counts would be a guess"
    )


# -- the bounds, each refused with a reason ------------------------------------------------------

DEEP = 100_000


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("a: " + "[" * (bounded.MAX_DEPTH + 1) + "]" * (bounded.MAX_DEPTH + 1), "levels deep"),
        ("a: " + "[" * DEEP + "]" * DEEP, "levels deep"),
        ("a: [" + ", ".join(["1"] * bounded.MAX_NODES) + "]", "values"),
        ("a: " + "x" * bounded.MAX_BYTES, f"larger than {bounded.MAX_BYTES} bytes"),
        ("a: " + "9" * 5000, "is not usable YAML"),
        ("a: &x 1\nb: 2\n", "a YAML anchor (&x)"),
        ("a: 1\n---\nb: 2\n", "is not YAML"),
        ("{a: 1, a: 2}", "appears twice"),
        ("? [1, 2]\n: 3\n", "a mapping key that is itself a mapping or list"),
    ],
    ids=[
        "depth",
        "very-deep",
        "values",
        "bytes",
        "huge-int",
        "anchor",
        "two-documents",
        "flow-key-twice",
        "list-key",
    ],
)
def test_yaml_beyond_the_bounds_is_refused(text: str, reason: str) -> None:
    with pytest.raises(bounded.Unreadable, match=re.escape(reason)):
        bounded.yaml_value(text)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[" * (bounded.MAX_DEPTH + 1) + "]" * (bounded.MAX_DEPTH + 1), "levels deep"),
        ("[" * DEEP + "]" * DEEP, "levels deep"),
        ("[" + ",".join(["1"] * (bounded.MAX_NODES + 1)) + "]", "values"),
        ('"' + "x" * bounded.MAX_BYTES + '"', "larger than"),
        ("9" * 5000, "is not usable JSON"),
        ('{"a": NaN}', "NaN is not JSON"),
        ('{"a": 1, "a": 2}', "appears twice"),
        ("{not json", "line 1, column 2: is not JSON"),
    ],
    ids=["depth", "very-deep", "values", "bytes", "huge-int", "nan", "key-twice", "syntax"],
)
def test_json_beyond_the_bounds_is_refused(text: str, reason: str) -> None:
    with pytest.raises(bounded.Unreadable, match=re.escape(reason)):
        bounded.json_value(text)
