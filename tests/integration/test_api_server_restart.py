"""kube-apiserver restarted in the middle of a rollout, as an upgrade or a crash restarts it:
the rollout resumes once the new API server is ready, with and without leader election, long
before the stall it once had could end, and every informer follows again within the stall
detector's bound. How soon it resumed is printed, not asserted (speed is ``make bench``'s).

It once stalled for 150 s while reporting ready: the Lease request that got no answer while
the API server was down dropped every pooled connection, and aiohttp detaches a closed
connection's body from it, so every watch read on one waited out its 150 s inactivity
deadline, blind (``KubeClient.renew_connections`` now fails each of them at once).

On a control plane of its own with Linkerd's real edge-19.12.3 injector and the README's
workloads (three opted-in Deployments), one restart per pass.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from devcluster.cluster import LocalControlPlane
from linkerd_config.app import build, running
from linkerd_config.kube.client import MERGE_PATCH, KubeClient
from linkerd_config.kube.resource import CONFIGMAPS
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import scenario
from tests.support.audit import received_at, successful_writes
from tests.support.samples import sample
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

LONG_LEASE = ("--leader-elect-lease-duration", "40s", "--leader-elect-renew-deadline", "30s")
"""Leadership outlives the API server's restart: no new term (whose fresh LIST would mend
the caches anyway), the case that once stalled."""
INTERVAL = 4.0
STALLED = 150.0
"""The watch inactivity deadline the stall waited out, blind. Resuming takes the restart
interval and a few seconds; the waits below allow half the stall, so only a stall fails
them, however loaded the machine."""


def restarts(cp: LocalControlPlane) -> list[float]:
    """When the controller's Deployment restarts reached the API server, oldest first."""
    writes = successful_writes(cp, "patch", "deployments", scenario.EMOJIVOTO, "linkerd-config/")
    return [received_at(e) for e in writes]


@pytest.mark.parametrize(
    "flags",
    [("--leader-elect", "true", *LONG_LEASE), ("--leader-elect", "false")],
    ids=["leader-elect", "no-leader-elect"],
)
async def test_a_rollout_resumes_within_seconds_of_an_api_server_restart(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, flags: tuple[str, ...]
) -> None:
    cp, kube = own_control_plane, own_kube
    async with scenario.readme_starting_point(cp, kube):
        await scenario.wait_settled(kube, scenario.EMOJIVOTO, expected=8)
        settings = scenario.local_settings(cp.kubeconfig, "--identity", "restart", *flags)
        stall_bound = settings.lease_duration + 2 * settings.retry_period
        options = RolloutOptions(
            max_restarts_per_pass=1, restart_interval=INTERVAL, injector_wait=60
        )
        app = await build(settings, options)
        async with running(app):
            await eventually(
                lambda: asyncio.sleep(0, result=app.manager.leading), timeout=60, what="leading"
            )
            obj = sample("edge_19.12.3.yaml")
            await kube.request("POST", LINKERD_CONFIGS.path(), body=obj)
            await eventually(
                lambda: asyncio.sleep(0, result=len(restarts(cp)) >= 1),
                timeout=60,
                what="the first restart",
            )
            before = len(restarts(cp))
            assert before < len(scenario.OPTED_IN), "the rollout ended before the restart"

            await asyncio.to_thread(cp.restart_apiserver)  # returns once /readyz says ok
            api_ready = time.time()

            async def resumed() -> float | None:
                return next((t for t in restarts(cp) if t >= api_ready), None)

            first_after = await eventually(
                resumed, timeout=STALLED / 2, what="a restart after the API server was ready again"
            )
            took = first_after - api_ready
            following = time.monotonic()
            await eventually(
                lambda: asyncio.sleep(0, result=app.manager.ready()),
                timeout=stall_bound,
                what="every informer following again (readiness)",
            )
            print(
                f"\nAPI server restart ({flags}): next restart {took:.2f}s after it was "
                f"ready; ready again {time.monotonic() - following:.2f}s after that"
            )
            # And the caches follow: an edit made now is reverted within seconds.
            edited = time.monotonic()
            await kube.request(
                "PATCH",
                CONFIGMAPS.path("linkerd", "linkerd-config"),
                body={"data": {"proxy": "{}"}},
                content_type=MERGE_PATCH,
            )

            async def reverted() -> bool:
                cm = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
                return bool(cm["data"]["proxy"] != "{}")

            await eventually(reverted, timeout=STALLED / 2, what="an edit after it reverted")
            print(f"edit after the restart reverted in {time.monotonic() - edited:.2f}s")

            async def rolled_out() -> bool:
                up = await scenario.condition(kube, obj["metadata"]["name"], "Ready")
                return up.get("status") == "True"

            await eventually(rolled_out, timeout=120, what="the rollout finished")
            patched = sorted(
                e["objectRef"]["name"]
                for e in successful_writes(
                    cp, "patch", "deployments", scenario.EMOJIVOTO, "linkerd-config/"
                )
            )
            assert patched == sorted(scenario.OPTED_IN)  # each once, across the restart
