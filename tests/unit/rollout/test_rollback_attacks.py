"""Attacks on ``onFailure: Rollback`` and the halt it starts from, one reconcile at a time with
the rollout executor's fakes (``tests/support/rollback_worlds.py``): leadership changing hands
between the steps, and a ``status.lastCompleted`` that can no longer be used."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from linkerd_config.inspection import render_plan
from linkerd_config.kube.client import ClusterAccess, KubeClient
from linkerd_config.kube.events import EventRecorder
from linkerd_config.kube.resource import Json
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.configmap.desired import (
    Desired,
    apply_body,
    current_data,
    desired_config,
)
from linkerd_config.linkerd.mesh import RESTARTED_FOR_ANNOTATION, DesiredProxy
from linkerd_config.linkerd.reconciler import LinkerdConfigController
from linkerd_config.linkerd.rollout import health, rollback
from linkerd_config.linkerd.rollout.observe import HEALTH_RECHECK
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.rollout.record import RESUME_ANNOTATION, Completed, Halt
from linkerd_config.linkerd.spec.crd import (
    HALT_FIELD,
    HASH_ANNOTATION,
    LAST_COMPLETED_FIELD,
    Target,
    status_schema,
    target_of,
)
from linkerd_config.linkerd.status.plan import plan, status
from linkerd_config.linkerd.status.view import ClusterView
from tests.support.controller_fakes import controller
from tests.support.linkerdconfigs import small
from tests.support.merge_patch import apply_merge_patch
from tests.support.rollback_worlds import (
    OLD_DESIRED,
    OLD_HASH,
    REFUSED,
    RollbackWorld,
    failed_first_pass,
    rollback_config,
)
from tests.support.rollout_worlds import DESIRED, HASH, OLD, roll, with_status
from tests.support.samples import install_configmap, modern_install, sample


def _versioned(config: Json, resource_version: str, **changes: object) -> Json:
    return {
        **config,
        "metadata": {**config["metadata"], "resourceVersion": resource_version, **changes},
    }


async def test_a_decision_of_an_earlier_term_does_not_override_the_halt_status_holds() -> None:
    """Leader A starts a rollback; its status write never lands (it lost the lease). Leader B
    then halts the next generation (``onFailure: Halt`` now) and writes that. When A leads
    again, status's halt is the record: A's old rollback must not come back."""
    world = RollbackWorld(2)
    config = _versioned(rollback_config(), "10")
    started = await failed_first_pass(world, config)
    assert started.reason == "RollingBack"  # decided by A, never written
    spec = {"rollout": {**config["spec"]["rollout"], "onFailure": "Halt"}}
    later = {**_versioned(config, "20", generation=3), "spec": spec}
    plain = health.halt_record(
        later, HASH, [("deployment/ns/app-00", "new pods refused")], "2026-11-24T01:00:00Z"
    )
    later = {**later, "status": {**later["status"], HALT_FIELD: plain.to_json()}}
    seen = world.executor.halt_state(later, HASH).halted
    assert seen == plain
    assert rollback.config_to_render(later, seen) is None  # the ConfigMap stays as asked
    outcome = await roll(world.executor, later, DESIRED, DESIRED)
    assert outcome.reason == "RolloutHalted"
    assert outcome.status[HALT_FIELD] == plain.to_json()


async def test_a_decision_of_an_earlier_term_does_not_come_back_once_status_moved_on() -> None:
    """Leader A decides a rollback that it never writes; leader B finds the workload healthy
    after all and the rollout completes (no halt in status, ``lastCompleted`` this one). A
    leading again must not roll back a rollout that completed."""
    world = RollbackWorld(2)
    config = _versioned(rollback_config(), "10")
    started = await failed_first_pass(world, config)
    assert started.reason == "RollingBack"  # decided by A, never written
    completed = rollback.completed_record(config, HASH, "2026-11-24T01:00:00Z")
    later = _versioned(config, "30")
    assert completed is not None
    later = {**later, "status": {**later["status"], LAST_COMPLETED_FIELD: completed.to_json()}}
    assert world.executor.halt_state(later, HASH).halted is None


async def test_the_decision_still_holds_until_its_own_write_is_read_back() -> None:
    """What the memo is for: the cache has not shown our status write yet (the same
    resourceVersion), so the halt decided stands and nothing is reported twice."""
    world = RollbackWorld(2)
    config = _versioned(rollback_config(), "10")
    started = await failed_first_pass(world, config)
    again = await roll(world.executor, config, DESIRED, DESIRED)
    assert again.status[HALT_FIELD] == started.status[HALT_FIELD]
    assert [e[3] for e in world.recorder.full].count("RollingBack") == 2  # config + workload
    read_back = _versioned(with_status(config, started), "11")
    assert world.executor.halt_state(read_back, HASH).halted == Halt.parse(
        started.status[HALT_FIELD]
    )


async def test_a_decision_holds_while_the_cache_shows_an_earlier_write_without_it() -> None:
    """Issue 58 (seen twice on the real API server: RollingOut for one pass after
    RolloutHalted, and the ConfigMap back on the failed proxy for a moment): the cache moved
    on to a write of ours made before the halt's (conditions only), and a moved
    resourceVersion was read as "status moved on without it". The halt stands until status
    holds it."""
    world = RollbackWorld(2)
    config = _versioned(rollback_config(), "10")
    started = await failed_first_pass(world, config)
    earlier = _versioned(config, "11")  # no halt in its status: written before the halt's
    assert world.executor.halt_state(earlier, HASH).halted == Halt.parse(started.status[HALT_FIELD])
    again = await roll(world.executor, earlier, DESIRED, OLD_DESIRED)
    assert again.reason == "RollingBack" and world.writer.patched == ["ns/app-00"]


def test_one_halt_at_two_phases_is_the_same_halt_another_is_not() -> None:
    config = {"metadata": {"generation": 2}}
    halt = health.halt_record(config, HASH, [("deployment/ns/a", "x")], "T1")
    started = rollback.start(halt, Completed("h0", 1, ""), [])
    assert started.rolled_back().same(started)
    for changed in ({"at": "T2"}, {"resume_token": "1"}, {"config_hash": "h"}):
        assert not started.rolled_back().same(replace(started, **changed))
    # Not the generation: an edit of spec.rollout alone is the same attempt.
    assert started.rolled_back().same(replace(started, generation=3))


def _completed_with(spec: Json) -> Json:
    """``rollback_config``'s LinkerdConfig, its ``lastCompleted`` holding ``spec``."""
    config = rollback_config()
    record = {
        **config["status"][LAST_COMPLETED_FIELD],
        "spec": orjson.dumps(spec).decode(),
    }
    return {**config, "status": {**config["status"], LAST_COMPLETED_FIELD: record}}


VALID_OLD_SPEC: Json = {"proxy": {"proxyVersion": OLD, "proxyInitImageVersion": "v1.2.0"}}


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        # Accepted before e7ea3eb (str.strip() removed the U+2028), refused since.
        (
            {
                "proxy": {
                    "proxyVersion": "edge-20.10.1",
                    "proxyInitImageVersion": "v1.3.6",
                    "destinationGetNetworks": "10.0.0.0/8\u2028",
                }
            },
            "spec.proxy.destinationGetNetworks",
        ),
        # Values this release refuses (as a record someone wrote into status could hold).
        (
            {"proxy": {**VALID_OLD_SPEC["proxy"], "proxyVersion": f"{OLD}\u2028"}},
            "spec.proxy.proxyVersion",
        ),
        ({"proxy": {**VALID_OLD_SPEC["proxy"], "logLevel": "warn,\u2028x"}}, "spec.proxy.logLevel"),
        # Written by someone with the right to patch status: rendering it crashed.
        ({"global": 5, "proxy": VALID_OLD_SPEC["proxy"]}, "spec.global"),
    ],
)
async def test_a_last_completed_spec_that_no_longer_validates_is_not_gone_back_to(
    spec: Json, why: str
) -> None:
    """The rollback renders the recorded spec into the ConfigMap: only what the webhook and
    the reconcile would accept may be written, so a record that no longer validates halts
    the rollout instead, saying why."""
    config = _completed_with(spec)
    halted = await failed_first_pass(RollbackWorld(2), config)
    assert halted.reason == "RolloutHalted", halted.message
    assert "rollback" not in halted.status[HALT_FIELD]
    assert "no longer validates" in halted.message and why in halted.message
    # A rollback already under way when it stopped validating renders the spec instead.
    started = await failed_first_pass(RollbackWorld(2), _completed_with(VALID_OLD_SPEC))
    assert started.reason == "RollingBack"
    under_way = with_status(config, started)
    assert rollback.config_to_render(under_way, Halt.parse(started.status[HALT_FIELD])) is None


async def test_a_valid_last_completed_spec_is_gone_back_to() -> None:
    started = await failed_first_pass(RollbackWorld(2), _completed_with(VALID_OLD_SPEC))
    assert started.reason == "RollingBack"
    rendered = rollback.config_to_render(
        with_status(_completed_with(VALID_OLD_SPEC), started),
        Halt.parse(started.status[HALT_FIELD]),
    )
    assert rendered is not None and rendered["spec"]["proxy"] == VALID_OLD_SPEC["proxy"]


async def test_a_deployment_edited_since_our_restart_keeps_the_edit_when_it_goes_back() -> None:
    """Our restart changes two annotations of the pod template; someone then changes the
    image (a new ReplicaSet, still recording the failed configuration). Going back must undo
    our change, not theirs: the previous ReplicaSet's template would bring the old image
    back, so the Deployment is restarted onto the old configuration instead."""
    world = RollbackWorld(2)
    config = rollback_config()
    started = await failed_first_pass(world, config)
    assert started.reason == "RollingBack"
    live = world.deployments.get("ns/app-00")
    edited_template = {
        **live["spec"]["template"],
        "spec": {"containers": [{"name": "app", "image": "app:v2"}]},
    }
    edited = {
        **live,
        "metadata": {**live["metadata"], "resourceVersion": "3"},
        "spec": {**live["spec"], "template": edited_template},
    }
    world.deployments.put(edited)
    world.live_replicasets["app-00"].append(world.replicaset(edited, "3"))
    config = with_status(config, started)
    restoring = await world.bring_back(config)
    assert "brought 1 of 1" in restoring.message
    ((key, patch),) = world.writer.patches
    assert key == "ns/app-00"
    after = apply_merge_patch(edited["spec"], patch["spec"])
    assert after["template"]["spec"] == edited_template["spec"]  # the image change stands
    annotations = after["template"]["metadata"]["annotations"]
    assert annotations[RESTARTED_FOR_ANNOTATION] == OLD_HASH


async def test_a_deployment_only_we_changed_goes_back_to_its_previous_template() -> None:
    world = RollbackWorld(2)
    config = rollback_config()
    started = await failed_first_pass(world, config)
    config = with_status(config, started)
    await world.bring_back(config)
    ((_, patch),) = world.writer.patches
    assert patch["spec"]["template"] == {"metadata": {"annotations": None}}


OURS = {RESTARTED_FOR_ANNOTATION: "h1", "config.linkerd.io/restarted-at": "t"}
BEFORE: Json = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"image": "w:1"}]}}


@pytest.mark.parametrize(
    ("live", "only_ours"),
    [
        ({**BEFORE, "metadata": {**BEFORE["metadata"], "annotations": OURS}}, True),
        (BEFORE, True),
        (
            {
                "metadata": {**BEFORE["metadata"], "annotations": OURS},
                "spec": {"containers": [{"image": "w:2"}]},
            },
            False,
        ),
        (
            {
                **BEFORE,
                "metadata": {
                    **BEFORE["metadata"],
                    "annotations": {**OURS, "kubectl.kubernetes.io/restartedAt": "t"},
                },
            },
            False,
        ),
        (
            {**BEFORE, "metadata": {"labels": {"app": "web", "tier": "2"}, "annotations": OURS}},
            False,
        ),
    ],
)
def test_only_a_template_changed_by_our_restart_alone_goes_back(
    live: Json, only_ours: bool
) -> None:
    deployment = {"metadata": {"name": "web"}, "spec": {"template": live}}
    assert rollback.only_restarted_since(deployment, BEFORE) is only_ours


# -- plan while rolled back -------------------------------------------------------------------


def _rolled_back_cluster(fmt: str) -> tuple[Json, ClusterView, str]:
    """A LinkerdConfig whose rollout of its spec failed and was rolled back: the stored
    object (its status: lastCompleted, the RolledBack record) and the cluster as the
    controller leaves it (the ConfigMaps on the configuration returned to)."""
    if fmt == "legacy":
        config = sample("edge_19.12.3.yaml")
        installed = {"linkerd-config": install_configmap()}
        old_version = "edge-19.12.1"
        config["spec"]["global"]["version"] = "edge-19.12.3"
    else:
        installed = {cm["metadata"]["name"]: cm for cm in modern_install()}
        config = {
            "apiVersion": "config.linkerd.io/v1alpha1",
            "kind": "LinkerdConfig",
            "metadata": {"name": "linkerd"},
            "spec": {"proxy": {"proxyVersion": "edge-26.8.3"}},
        }
        old_version = "edge-26.8.2"
    config["spec"]["rollout"] = {"onFailure": "Rollback"}
    old = copy.deepcopy(config)
    old["spec"]["proxy"]["proxyVersion"] = old_version
    target = target_of(config)
    asked = desired_config(config, current_data(installed, target))
    back = desired_config(old, current_data(installed, target))
    kept = copy.deepcopy(installed)  # the ConfigMaps as the rollback leaves them
    ours = apply_body(back, config["metadata"]["name"])
    kept[target.name]["data"].update(ours["data"])
    kept[target.name]["metadata"].setdefault("annotations", {}).update(
        ours["metadata"]["annotations"]
    )
    for name, data in back.companions.items():
        kept[name]["data"].update(data)
    stored = copy.deepcopy(config)
    stored["metadata"] = {
        **stored["metadata"],
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "generation": 2,
    }
    last = rollback.completed_record(
        {"metadata": {"generation": 1}, "spec": old["spec"]}, back.config_hash, "t0"
    )
    assert last is not None
    halt = health.halt_record(
        stored, asked.config_hash, [("deployment/emojivoto/web", "new pods refused")], "t1"
    )
    stored["status"] = {
        LAST_COMPLETED_FIELD: last.to_json(),
        HALT_FIELD: rollback.start(halt, last, []).rolled_back().to_json(),
    }
    cluster = ClusterView(
        configs=[stored],
        configmaps={f"linkerd/{n}": cm for n, cm in kept.items()},
        pods=[],
        namespaces={},
        replicasets={},
        workloads={},
        config_namespace="linkerd",
    )
    return config, cluster, back.config_hash


@pytest.mark.parametrize("fmt", ["legacy", "values"])
def test_a_plan_of_the_rolled_back_spec_changes_no_configmap(fmt: str) -> None:
    """Applying the spec that failed again changes nothing (no new generation): the
    controller keeps the ConfigMap on the configuration it returned to, so ``plan`` must not
    show it going back to the failed one."""
    config, cluster, back_hash = _rolled_back_cluster(fmt)
    result = plan(config, cluster, RolloutOptions())
    assert result.problem is None, result.problem
    assert result.keys == () and result.metadata == (), render_plan(result)
    assert result.halted == ("deployment/emojivoto/web: new pods refused",)
    # An edit of spec.rollout alone is no new attempt (issue 58, finding 4): still nothing.
    paced = copy.deepcopy(config)
    paced["spec"]["rollout"].update(progressDeadline="20m", paused=True)
    kept = plan(paced, cluster, RolloutOptions())
    assert kept.problem is None, kept.problem
    assert kept.keys == () and kept.metadata == (), render_plan(kept)
    assert kept.halted == result.halted
    # A new configuration is a new attempt: it is written, as the controller would.
    changed = copy.deepcopy(config)
    changed["spec"]["proxy"]["proxyVersion"] = "edge-26.8.4"
    again = plan(changed, cluster, RolloutOptions())
    assert again.keys and again.current_hash == back_hash and again.halted == ()


async def test_a_refused_restore_is_tried_again_at_a_pace_not_on_every_event() -> None:
    """Every pod and workload change wakes the reconcile. A restore the API server refuses
    (a webhook refusing updates of that Deployment, say) was sent again, with a Warning
    Event and a failure counted, on every one of them."""
    world = RollbackWorld(2)
    config = rollback_config()
    config = with_status(config, await failed_first_pass(world, config))
    world.executor.found(OLD_HASH)
    world.writer.injects = OLD
    world.writer.forbidden.add("app-00")
    world.clock.now += 5.0
    for _ in range(20):  # 20 events in 2 s
        world.clock.now += 0.1
        outcome = await roll(world.executor, config, DESIRED, OLD_DESIRED)
        assert outcome.reason == "RollingBack"
    refused = [e for e in world.recorder.full if e[3] == "RollbackFailed"]
    assert len(refused) == 1, len(refused)
    failures = world.executor.metrics.restart_failures.labels("Deployment")
    assert failures._value.get() == 1.0  # type: ignore[attr-defined]
    assert outcome.requeue_after is not None and 0 < outcome.requeue_after <= HEALTH_RECHECK
    world.clock.now += HEALTH_RECHECK  # its time comes: tried again, and once allowed, done
    world.writer.forbidden.clear()
    restoring = await roll(world.executor, config, DESIRED, OLD_DESIRED)
    assert "brought 1 of 1" in restoring.message
    assert world.writer.patched == ["ns/app-00", "ns/app-00"]  # the restart, the restore


# -- the controller's rendering of a rollback ------------------------------------------------


async def test_a_rollback_the_installed_linkerd_can_no_longer_read_is_not_an_invalid_spec() -> None:
    """The last completed configuration was legacy (``global``/``proxy`` keys, Linkerd up to
    edge-20.10.1); Linkerd was upgraded since, to a release that reads ``values``, and the
    first configuration for it failed. Going back cannot render onto what is installed: the
    spec itself is valid, so the LinkerdConfig must not be reported invalid and stopped there
    (the failed configuration stays written, the rollout halted, saying why)."""
    access = ClusterAccess("https://127.0.0.1:1", False, lambda: None, "test")
    registry = CollectorRegistry()
    client = KubeClient(access, registry=registry)  # never opened: nothing here does I/O
    controller = LinkerdConfigController(client, EventRecorder(client, "test"))
    installed = {cm["metadata"]["name"]: cm for cm in modern_install()}
    config: Json = {
        "apiVersion": "config.linkerd.io/v1alpha1",
        "kind": "LinkerdConfig",
        "metadata": {"name": "linkerd", "generation": 4, "resourceVersion": "7"},
        "spec": {"proxy": {"proxyVersion": "edge-26.8.3"}, "rollout": {"onFailure": "Rollback"}},
    }
    legacy = sample("edge_19.12.3.yaml")
    last = rollback.completed_record({**legacy, "metadata": {"generation": 3}}, "h0", "t0")
    assert last is not None and rollback.target({**config, "status": {
        LAST_COMPLETED_FIELD: last.to_json()}}, "h1")[0] is not None  # it validates  # fmt: skip
    current = current_data(installed, target_of(config))
    asked = desired_config(config, current)
    halt = health.halt_record(
        config, asked.config_hash, [("deployment/ns/app", "new pods refused")], "t1"
    )
    config["status"] = {
        LAST_COMPLETED_FIELD: last.to_json(),
        HALT_FIELD: rollback.start(halt, last, []).to_json(),
    }
    back = await controller._rendered_target(config, asked, current)
    assert back is None  # nothing but the spec's can be written
    outcome = await roll(controller.rollout, config, asked, back)
    assert outcome.reason == "RolloutHalted"
    assert "cannot roll back to configuration h0" in outcome.message
    assert "renders onto the Linkerd installed now" in outcome.message
    # status and plan say what the controller does: no invalid spec, the halt.
    cluster = ClusterView(
        configs=[{**config, "metadata": {**config["metadata"], "creationTimestamp": "t"}}],
        configmaps={f"linkerd/{n}": cm for n, cm in installed.items()},
        pods=[],
        namespaces={},
        replicasets={},
        workloads={},
        config_namespace="linkerd",
    )
    (said,) = status(cluster, RolloutOptions())
    assert said.problem is None, said.problem
    assert said.halted == ("deployment/ns/app: new pods refused",) and not said.rolled_back
    planned = plan(config, cluster, RolloutOptions())
    assert planned.problem is None, planned.problem


# -- a halt of many workloads, against the CRD's bounds ---------------------------------------


def _outside_schema(schema: Json, value: object, path: str = "status") -> list[str]:
    """Where ``value`` breaks the schema's maxItems and maxLength (what the API server
    refuses a status write for)."""
    found: list[str] = []
    if isinstance(value, str) and len(value) > schema.get("maxLength", len(value)):
        found.append(f"{path}: {len(value)} characters > {schema['maxLength']}")
    if isinstance(value, list):
        if len(value) > schema.get("maxItems", len(value)):
            found.append(f"{path}: {len(value)} items > {schema['maxItems']}")
        for i, item in enumerate(value):
            found += _outside_schema(schema.get("items") or {}, item, f"{path}[{i}]")
    if isinstance(value, dict):
        for key, item in value.items():
            inner = (schema.get("properties") or {}).get(key) or {}
            found += _outside_schema(inner, item, f"{path}.{key}")
    return found


REFUSAL = (
    'pods "{name}-7d9f8b6c5d-x2x9z" is forbidden: ValidatingAdmissionPolicy '
    "'refuse-new-proxy' with binding 'refuse-new-proxy-binding' denied request: this "
    "namespace does not admit the new proxy version yet"
)


@pytest.mark.parametrize(
    ("failing", "detail"),
    [(200, ""), (1200, ""), (3, " (a webhook's long reason)" * 400)],
)
async def test_a_halt_of_many_workloads_fits_what_the_api_server_stores(
    failing: int, detail: str
) -> None:
    """maxRestartsPerPass admits up to 10000; a namespace-wide refusal fails every workload
    of the pass at once, each with the API server's message. The halt's status (the record,
    the condition messages) must stay within the CRD's bounds, else the API server refuses
    the status write and the halt is never recorded; and a resume must still be written."""
    world = RollbackWorld(failing)
    config = {**rollback_config(last_completed=False), "spec": {"rollout": {}}}
    config["spec"]["rollout"] = {"maxRestartsPerPass": failing, "progressDeadline": "30s"}
    await roll(world.executor, config, DESIRED, DESIRED)
    for key, _ in world.writer.patches:
        name = key.split("/")[1]
        refused = {**REFUSED, "conditions": [{**REFUSED["conditions"][0],
                   "message": REFUSAL.format(name=name) + detail}]}  # fmt: skip
        world.writer.patches = [(key, _)]
        world.restarted(refused)
    world.clock.now += 1.0
    halted = await roll(world.executor, config, DESIRED, DESIRED)
    assert halted.reason == "RolloutHalted"
    schema = status_schema()
    condition = schema["properties"]["conditions"]["items"]["properties"]["message"]
    assert len(halted.message) <= condition["maxLength"], len(halted.message)
    assert _outside_schema(schema, halted.status) == []
    assert halted.message.count("deployment/ns/") == min(failing, 5)
    assert failing <= 5 or f"and {failing - 5} more" in halted.message
    assert len(halted.status[HALT_FIELD]["failed"]) == min(failing, 1000)
    # Resumed: what status then says of the forgiven fits too.
    written = with_status(config, halted)
    resumed = {**written, "metadata": {**written["metadata"],
               "annotations": {RESUME_ANNOTATION: "1"}}}  # fmt: skip
    after = world.executor.halt_state(resumed, HASH)
    assert after.halted is None
    assert _outside_schema(schema, after.status) == []


async def test_a_deleted_linkerdconfig_leaves_no_halted_gauge_to_alert_on() -> None:
    """LinkerdConfigRolloutHalted and LinkerdConfigRolloutRolledBack fire while the leader's
    gauge is 1. A LinkerdConfig deleted while halted (or rolled back) kept its 1 until the
    process restarted: an alert about an object that no longer exists, for ever."""
    access = ClusterAccess("https://127.0.0.1:1", False, lambda: None, "test")
    registry = CollectorRegistry()
    client = KubeClient(access, registry=registry)  # never opened: nothing here does I/O
    controller = LinkerdConfigController(client, EventRecorder(client, "test"))
    controller.rollout.metrics.halted.labels("gone").set(1)
    controller.rollout.metrics.rolled_back.labels("gone").set(1)
    controller.rollout.metrics.halted.labels("kept").set(1)
    await controller.reconcile("gone")  # not in the cache: deleted
    for family in ("linkerd_config_rollout_halted", "linkerd_config_rollout_rolled_back"):
        assert registry.get_sample_value(family, {"linkerdconfig": "gone"}) is None, family
    assert registry.get_sample_value("linkerd_config_rollout_halted", {"linkerdconfig": "kept"})


async def test_a_previous_replicaset_of_another_configuration_is_not_gone_back_to() -> None:
    """A completed (h0, lastCompleted); B's rollout restarted app-00 (its ReplicaSet records
    hB, its pod runs B's proxy) but a new spec came before B completed; that one failed. Going
    back to A must not restore B's ReplicaSet: its pods run B's proxy, the rollback's gate
    waits for A's, and nothing restarts them: RollingBack for ever. The Deployment is
    restarted onto A instead."""
    b_proxy = "edge-19.12.2"
    world = RollbackWorld(2)
    live = world.deployments.get("ns/app-00")
    template = live["spec"]["template"]
    template = {**template, "metadata": {**template["metadata"],
                "annotations": {RESTARTED_FOR_ANNOTATION: "hB"}}}  # fmt: skip
    live = {**live, "spec": {**live["spec"], "template": template}}
    world.deployments.put(live)
    world.live_replicasets["app-00"] = [world.replicaset(live, "1")]
    pod = world.pods.get("ns/app-00-pod")
    annotations = {mesh.PROXY_VERSION_ANNOTATION: b_proxy}
    world.pods.put({**pod, "metadata": {**pod["metadata"], "annotations": annotations}})
    config = rollback_config()
    started = await failed_first_pass(world, config)
    assert started.reason == "RollingBack"
    config = with_status(config, started)
    restoring = await world.bring_back(config)
    assert "brought 1 of 1" in restoring.message
    ((_, patch),) = world.writer.patches
    annotations = patch["spec"]["template"]["metadata"]["annotations"]
    assert annotations[RESTARTED_FOR_ANNOTATION] == OLD_HASH  # restarted onto A
    world.restored()
    pod = world.pods.get("ns/app-00-pod")
    annotations = {mesh.PROXY_VERSION_ANNOTATION: OLD}  # its new pod, injected with A
    world.pods.put({**pod, "metadata": {**pod["metadata"], "annotations": annotations}})
    done = await roll(world.executor, config, DESIRED, OLD_DESIRED)
    assert done.reason == "RolledBack", done.message


@pytest.mark.parametrize(
    ("recorded", "restores"), [(None, True), ("h0", True), ("h0b", True), ("hB", False)]
)
def test_a_previous_template_restores_only_the_configuration_returned_to(
    recorded: str | None, restores: bool
) -> None:
    annotations = {} if recorded is None else {RESTARTED_FOR_ANNOTATION: recorded}
    template = {"metadata": {"annotations": annotations}, "spec": {}}
    assert rollback.restores_to(template, ("h0", "h0b")) is restores


async def test_a_new_attempt_repairs_what_the_failed_one_broke() -> None:
    """A new configuration while rolling back: the Deployment still on the failed template is
    failing because of us, so the new attempt restarts it rather than skipping it for ever
    as 'already failing'."""
    fixed = Desired(
        Target("linkerd", "linkerd-config"), {}, "h3", "Spec", DesiredProxy("edge-19.12.4")
    )
    world = RollbackWorld(2)
    config = _completed_with(VALID_OLD_SPEC)
    started = await failed_first_pass(world, config)
    assert started.reason == "RollingBack"
    retried = with_status(config, started)
    retried = {**retried, "metadata": {**retried["metadata"], "generation": 3}}
    world.writer.injects = "edge-19.12.4"
    world.executor.found("h3")
    outcome = await roll(world.executor, retried, fixed, fixed)
    assert "Skipped" not in outcome.message, outcome.message
    assert world.writer.patched == ["ns/app-00", "ns/app-00"]  # restarted again, for h3


async def test_a_linkerdconfig_made_again_under_its_name_inherits_no_decision_of_the_old() -> None:
    """The executor's expectations are one LinkerdConfig's (its uid), not its name's nor
    its configuration's: one deleted mid-rollback and made again with the same spec starts
    from its own status (where the reconcile gives back the ConfigMap's record), not from a
    halt decided for the one deleted and never read back."""
    world = RollbackWorld(2)
    config = _versioned(rollback_config(), "10", uid="first")
    started = await failed_first_pass(world, config)
    assert started.reason == "RollingBack"  # decided, never read back
    assert world.executor.halt_state(config, HASH).halted is not None
    again = _versioned({**config, "status": {}}, "40", uid="second")
    assert world.executor.halt_state(again, HASH).halted is None


# -- a lastCompleted written into status by someone else (issue 61, finding 1) ----------------


def _written_settled(ctl: Any, writer: Any, name: str) -> tuple[Json, Json]:
    """The caches showing what the first reconcile wrote: the managed ConfigMap and the
    LinkerdConfig with the status written."""
    ours = [a for a in writer.applied if a["metadata"]["name"] == "linkerd-config"][-1]
    key = "linkerd/linkerd-config"
    current = ctl.configmaps.store.get(key)
    meta = {**current["metadata"]}
    for part in ("labels", "annotations"):
        meta[part] = {**(meta.get(part) or {}), **ours["metadata"][part]}
    cm = {**current, "metadata": meta, "data": {**current["data"], **ours["data"]}}
    ctl.configmaps.store.put(cm)
    status: Json = {}
    for written in writer.statuses:
        status = apply_merge_patch(status, written)
    stored = {**ctl.configs.store.get(name), "status": status}
    ctl.configs.store.put(stored)
    return cm, stored


@pytest.mark.parametrize("fmt", ["legacy", "values"])
@pytest.mark.parametrize("forged_hash", ["another", "the held one"])
async def test_a_last_completed_written_into_status_by_another_is_not_gone_back_to(
    fmt: str, forged_hash: str
) -> None:
    """A patch of status alone: a ``lastCompleted`` whose spec names another proxy image,
    and a ``rolloutHalt`` rolling back to it. Before, the reconcile wrote that image into
    ``linkerd-config``. Now the record is not ours (the ConfigMap neither holds what it
    renders to nor carries its digest): ignored, with a Warning, and the ConfigMap keeps the
    spec's configuration. Its hash forged to the one the ConfigMap holds changes nothing:
    the record does not render to it."""
    if fmt == "legacy":
        config, installed = sample("edge_19.12.3.yaml"), [install_configmap()]
        config["metadata"].update(creationTimestamp="2026-01-01T00:00:00Z", generation=1)
    else:
        config, installed = small(), list(modern_install())
    evil = {"proxy": {**config["spec"]["proxy"], "proxyImage": {"name": "evil.example/proxy"}}}
    config = {**config, "spec": {**config["spec"], "rollout": {"onFailure": "Rollback"}}}
    name = config["metadata"]["name"]
    ctl, writer, recorder = controller(config, configmap=installed[0])
    for cm in installed[1:]:
        ctl.configmaps.store.put(cm)
    await ctl.reconcile(name)
    cm, stored = _written_settled(ctl, writer, name)
    held = cm["metadata"]["annotations"][HASH_ANNOTATION]
    # The genuine record: the ConfigMap holds what it renders to.
    genuine = Completed.parse(stored["status"][LAST_COMPLETED_FIELD])
    assert genuine is not None and genuine.config_hash == held
    in_linkerd = {k.split("/")[1]: v for k, v in ctl.configmaps.store.snapshot().items()}
    current = current_data(in_linkerd, target_of(config))
    assert rollback.holds(stored, genuine, held, current)
    forged = Completed(
        held if forged_hash == "the held one" else "0123456789abcdef",
        1, "2026-01-01T00:00:00Z", spec=orjson.dumps(evil).decode(),
    )  # fmt: skip
    assert not rollback.holds(stored, forged, held, current)
    halt = health.halt_record(stored, held, [("deployment/ns/app", "forged")], "t1")
    attacked = {
        **stored,
        "status": {
            **stored["status"],
            LAST_COMPLETED_FIELD: forged.to_json(),
            HALT_FIELD: rollback.start(halt, forged, []).to_json(),
        },
    }
    ctl.configs.store.put(attacked)
    writer.applied.clear()
    await ctl.reconcile(name)
    assert ("Warning", "RolloutRecordUntrusted") in recorder.events
    for body in writer.applied:
        assert "evil.example" not in orjson.dumps(body).decode()
    # Nothing to go back to: the spec's configuration stays, halted.
    assert all(
        b["metadata"]["annotations"].get(HASH_ANNOTATION, held) == held for b in writer.applied
    )
    ready = next(c for c in writer.statuses[-1]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "RolloutHalted"
    assert f"cannot roll back to configuration {forged.config_hash}" in ready["message"]
    # plan and status read it as the controller does: no rollback to it.
    cluster = ClusterView(
        configs=[attacked],
        configmaps=dict(ctl.configmaps.store.snapshot()),
        pods=[],
        namespaces={},
        replicasets={},
        workloads={},
        config_namespace="linkerd",
    )
    (said,) = status(cluster, RolloutOptions())
    assert not said.rolled_back
