"""``plan`` and ``status`` say the canary (``spec.rollout.canary``): the workloads it restarts
first, in passes of their own, the rest after it has been healthy for ``stableFor``; a plan
holds when none matches; ``status`` shows the canary's phase from the LinkerdConfig's status."""

from __future__ import annotations

import copy
from typing import Any

from linkerd_config.inspection import render_plan, render_status
from linkerd_config.kube.resource import rfc3339
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.configmap.desired import current_data, desired_config
from linkerd_config.linkerd.spec.crd import CANARY_FIELD, target_of
from linkerd_config.linkerd.status.plan import plan, status
from tests.support.preview_views import APPS, DEFAULTS, view
from tests.support.samples import install_configmap, sample

Json = dict[str, Any]


def records(hash_: str = "", restarted: tuple[str, ...] = ()) -> dict[str, Json]:
    """The Deployments' records: labels (``tier: canary`` on emoji), restarts for ``hash_``."""
    found = {}
    for ns, name in APPS:
        annotations = {mesh.RESTARTED_FOR_ANNOTATION: hash_} if name in restarted else {}
        found[f"{ns}/{name}"] = {
            "metadata": {
                "name": name,
                "namespace": ns,
                "generation": 1,
                "labels": {"app": name, **({"tier": "canary"} if name == "emoji" else {})},
            },
            "spec": {"replicas": 2, "template": {"metadata": {"annotations": annotations}}},
            "status": {
                "observedGeneration": 1,
                "replicas": 2,
                "updatedReplicas": 2,
                "availableReplicas": 2,
            },
        }
    return found


def with_canary(**section: Any) -> Json:
    config: Json = copy.deepcopy(sample("edge_19.12.3.yaml"))
    config["spec"]["rollout"] = {"canary": section}
    return config


def config_hash(config: Json) -> str:
    cm = install_configmap()
    target = target_of(config)
    return desired_config(config, current_data({target.name: cm}, target)).config_hash


def test_the_plan_restarts_the_canary_first_in_a_pass_of_its_own() -> None:
    config = with_canary(selector="tier=canary", stableFor="90s")
    found = plan(config, view(deployments=APPS, records=records()), DEFAULTS)
    assert found.problem is None, found.problem
    passes = {f"{w.workload.namespace}/{w.workload.name}": w.batch for w in found.restarts}
    assert passes == {"emojivoto/emoji": 1, "emojivoto/voting": 2, "emojivoto/web": 2}
    assert [w.canary for w in found.restarts if w.batch == 1] == [True]
    assert found.canary["restartFirst"] == ["deployment/emojivoto/emoji"]
    assert found.as_json()["rollout"]["canary"]["stableForSeconds"] == 90.0
    text = render_plan(found)
    assert "  pass 1 (canary):\n    deployment/emojivoto/emoji" in text, text
    assert (
        "  then, once the canary (deployment/emojivoto/emoji) has been healthy for 1m30s:\n" in text
    )
    assert "  pass 2:\n" in text
    # Without a canary, the same restarts in passes of two, in sorted order.
    plain = plan(sample("edge_19.12.3.yaml"), view(deployments=APPS, records=records()), DEFAULTS)
    assert [w.batch for w in plain.restarts] == [1, 1, 2]
    assert plain.as_json()["rollout"]["canary"] == {"phase": "off"}


def test_a_plan_whose_canary_matches_nothing_restarts_nothing_now() -> None:
    config = with_canary(namespaceSelector="env=nowhere")
    found = plan(config, view(deployments=APPS, records=records()), DEFAULTS)
    assert found.canary_unmatched and found.held
    text = render_plan(found)
    assert "held: no workload to restart matches spec.rollout.canary" in text, text


def test_a_plan_mid_canary_waits_for_the_canary_already_restarted() -> None:
    config = with_canary(selector="tier=canary")
    hash_ = config_hash(config)
    stored = {
        **copy.deepcopy(config),
        "status": {
            CANARY_FIELD: {
                "configHash": hash_,
                "generation": 1,
                "resumeToken": "",
                "workloads": ["deployment/emojivoto/emoji"],
            }
        },
    }
    # emoji restarted for this configuration: its pods are rolling (not stale any more).
    apps = {k: v for k, v in APPS.items() if k[1] != "emoji"}
    restarted = records(hash_, ("emoji",))
    found = plan(config, view(deployments=apps, records=restarted, configs=[stored]), DEFAULTS)
    assert found.canary["restartFirst"] == [] and not found.canary_unmatched
    assert all(not w.canary for w in found.restarts)
    text = render_plan(found)
    assert "then, once the canary (deployment/emojivoto/emoji) has been healthy for 5m0s:" in text


def test_status_says_the_canary_and_its_passing() -> None:
    config = with_canary(selector="tier=canary", stableFor="1m")
    hash_ = config_hash(config)
    since = rfc3339(1_800_000_000.0, micro=True)
    record = {"configHash": hash_, "generation": 1, "resumeToken": "",
              "workloads": ["deployment/emojivoto/emoji"], "healthySince": since}  # fmt: skip
    stored = {**config, "status": {CANARY_FIELD: record}}
    (report,) = status(view(deployments=APPS, records=records(), configs=[stored]), DEFAULTS)
    said = report.as_json()["rollout"]["canary"]
    assert said["phase"] == "canary" and said["healthySince"] == since
    text = render_status(report)
    assert f"Canary: deployment/emojivoto/emoji: healthy since {since}; the rest restart" in text
    passed = {**record, "passedAt": since}
    stored = {**config, "status": {CANARY_FIELD: passed}}
    (report,) = status(view(deployments=APPS, records=records(), configs=[stored]), DEFAULTS)
    assert report.as_json()["rollout"]["canary"]["phase"] == "passed"
    assert f"Canary: passed at {since} (deployment/emojivoto/emoji)" in render_status(report)
