"""Linkerd's injector down during a rollout and during a rollback (issue 37, finding 3), in
both formats with their real injectors (edge-19.12.3 on the legacy ``global``/``proxy``,
edge-26.8.3 on the Helm ``values``), under Linkerd's own ``failurePolicy: Ignore``: while the
injector is down, the API server admits pods without a proxy.

Before, a dry-run pod that came back without the proxy counted as "cannot ask the injector",
and once the fallback wait (``--injector-wait``, 3 s here) had passed the workloads were
restarted anyway: healthy meshed Deployments came back with no proxy, and nothing meshed them
again after the injector returned. Now the rollout (and the rollback) waits, saying why in
status and once in a Warning, restarts nothing however long it waits, and goes on by itself
once the injector injects again.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from devcluster.cluster import LocalControlPlane
from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.resource import (
    EVENTS,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    Json,
)
from linkerd_config.linkerd import mesh
from tests.support import formats, scenario
from tests.support.audit import received_at, successful_writes
from tests.support.formats import Format
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

NAME = "injector-down"
FALLBACK = 3.0
"""The fallback wait: a rollout that restarts once it has passed would do so here."""
OUT_WAITED = 4 * FALLBACK
AGENT = "linkerd-config/"


async def reason_is(kube: KubeClient, reason: str, text: str = "") -> Json | None:
    cond = await scenario.condition(kube, NAME, "DataPlaneUpToDate")
    return cond if cond.get("reason") == reason and text in cond.get("message", "") else None


def patched_since(cp: LocalControlPlane, namespaces: list[str], since: float) -> list[str]:
    return [
        f"{ns}/{e['objectRef']['name']}"
        for ns in namespaces
        for e in successful_writes(cp, "patch", "deployments", ns, AGENT)
        if received_at(e) >= since
    ]


async def all_meshed(kube: KubeClient, namespace: str, version: str, expected: int) -> bool:
    pods = await scenario.wait_settled(kube, namespace, expected=expected)
    return set(scenario.proxy_versions(pods).values()) == {version}


async def warnings(kube: KubeClient, reason: str) -> list[Json]:
    items = (await kube.request("GET", EVENTS.path("default")))["items"]
    return [e for e in items if e["reason"] == reason and e["involvedObject"]["name"] == NAME]


async def ignores_failures(kube: KubeClient) -> bool:
    """Linkerd's webhook as installed admits pods when the injector does not answer."""
    found = (await kube.request("GET", MUTATING_WEBHOOK_CONFIGURATIONS.path()))["items"]
    policies = {w.get("failurePolicy") for c in found for w in c.get("webhooks") or ()}
    return policies == {"Ignore"}


@pytest.mark.parametrize("fmt", formats.FORMATS, ids=formats.IDS)
async def test_nothing_is_restarted_out_of_the_mesh_while_the_injector_is_down(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, fmt: Format
) -> None:
    cp, kube = own_control_plane, own_kube
    async with formats.installed(cp, kube, fmt) as injector:
        assert await ignores_failures(kube)
        before = await scenario.meshed_namespace(kube, "app", ["a", "b"], replicas=1)
        installed_proxy = {mesh.proxy_version(p) for p in before}
        async with scenario.controller(cp, NAME, injector_wait=FALLBACK):
            await asyncio.to_thread(injector.down)
            unmeshed = await scenario.dry_run_pod(kube, "app", {})
            assert scenario.proxy_container(unmeshed) is None  # admitted without a proxy
            applied = time.time()
            await scenario.apply_linkerdconfig(kube, NAME, fmt.spec(fmt.good, {}))
            await eventually(
                lambda: reason_is(kube, "WaitingForInjector"),
                timeout=60,
                what="the rollout waiting for the injector",
            )
            await asyncio.sleep(OUT_WAITED)  # well past the fallback wait
            assert patched_since(cp, ["app"], applied) == []
            pods = await scenario.running_pods(kube, "app")
            assert {mesh.proxy_version(p) for p in pods} == installed_proxy  # all meshed
            held = await reason_is(kube, "WaitingForInjector", "did not inject a dry-run pod")
            assert held is not None and "out of the mesh" in held["message"]
            (said,) = await warnings(kube, "InjectorNotInjecting")
            assert said["type"] == "Warning"

            await asyncio.to_thread(injector.up)
            await eventually(
                lambda: reason_is(kube, "UpToDate"), timeout=180, what="rolled out afterwards"
            )
            assert await all_meshed(kube, "app", fmt.good, expected=2)
            assert sorted(patched_since(cp, ["app"], applied)) == ["app/a", "app/b"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fmt", formats.FORMATS, ids=formats.IDS)
async def test_a_rollback_waits_for_the_injector_rather_than_unmesh(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, fmt: Format
) -> None:
    """``alpha`` rolls onto the broken proxy and is healthy; ``zulu`` (sorted after it, one
    restart per pass) is restarted and its new pods are refused: the rollout fails and rolls
    back. The injector goes down as the rollback starts (the injector's files lag the
    ConfigMap by 5 s, so the rollback is still waiting for it to inject the old proxy):
    bringing ``alpha`` back now would create pods without a proxy."""
    cp, kube = own_control_plane, own_kube
    policy = {"onFailure": "Rollback", "maxRestartsPerPass": 1, "progressDeadline": "2m"}
    async with formats.installed(cp, kube, fmt, projection_delay=5.0) as injector:
        await scenario.meshed_namespace(kube, "alpha", ["alpha"], replicas=1)
        await scenario.meshed_namespace(kube, "zulu", ["zulu"], replicas=1)
        async with scenario.controller(cp, NAME, injector_wait=FALLBACK):
            await scenario.apply_linkerdconfig(kube, NAME, fmt.spec(fmt.good, policy))
            await eventually(
                lambda: reason_is(kube, "UpToDate"), timeout=240, what=f"{fmt.good} rolled out"
            )
            # zulu's dry runs admitted, its real pods refused: the question, asked in zulu,
            # lets the restart happen, and the pods it makes are refused (the attempt fails
            # at once, not at progressDeadline as a refused question would).
            async with scenario.proxy_refused(kube, "zulu", fmt.broken, dry_runs=False):
                applied = time.time()
                await scenario.apply_linkerdconfig(kube, NAME, fmt.spec(fmt.broken, policy))
                await eventually(
                    lambda: reason_is(kube, "RollingBack"),
                    timeout=180,
                    interval=0.2,
                    what="the rollback started",
                )
                await asyncio.to_thread(injector.down)
                down = time.time()
                assert patched_since(cp, ["alpha"], applied) == ["alpha/alpha"]  # not back yet
                await asyncio.sleep(OUT_WAITED)  # well past the fallback wait
                assert patched_since(cp, ["alpha"], down) == []
                pods = await scenario.running_pods(kube, "alpha")
                assert {mesh.proxy_version(p) for p in pods} == {fmt.broken}  # meshed still
                held = await reason_is(kube, "RollingBack", "did not inject a dry-run pod")
                assert held is not None and "out of the mesh" in held["message"]

                await asyncio.to_thread(injector.up)
                await eventually(
                    lambda: reason_is(kube, "RolledBack"), timeout=180, what="rolled back"
                )
            assert await all_meshed(kube, "alpha", fmt.good, expected=1)
            assert await all_meshed(kube, "zulu", fmt.good, expected=1)
