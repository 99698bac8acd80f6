"""The documented recovery from a failed canary, with Linkerd's real injectors in both
formats (issue 37, finding 4): the canary's new pods are refused (an admission policy refusing
the pods of the failed configuration's restart), so the rollout halts; the fix is a new
attempt (another configuration). Its restart of the canary makes a new ReplicaSet, admitted,
while the previous attempt's ReplicaSet is refused until the Deployment controller scales it
down; until that ReplicaSet's status is synced the Deployment still shows its
``ReplicaFailure``. Before, a new attempt that read the Deployment in that window halted on it
(56 ms into it, as reported). Here the window is milliseconds on the local control plane and
is not always hit (this test passed once on the code before the fix): the defect is pinned
deterministically by ``tests/unit/rollout/test_rollout_executor.py``
(``test_a_replica_failure_of_an_earlier_revision_halts_nothing``) and by the property test
(``tests/unit/rollout/test_rollout_invariants.py``, Halt). This test holds the real path: the new
attempt completes, and the only halt said is the first attempt's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from devcluster.cluster import LocalControlPlane
from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.resource import EVENTS, Json
from linkerd_config.linkerd import mesh
from tests.support import commands, formats, scenario
from tests.support.formats import Format
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

NAME = "evidence"
CANARY = {"count": 1, "namespaceSelector": "kubernetes.io/metadata.name=cart", "stableFor": "3s"}


def spec(fmt: Format, version: str) -> Json:
    return fmt.spec(version, {"canary": CANARY, "progressDeadline": "2m"})


async def reason_is(kube: KubeClient, reason: str) -> Json | None:
    cond = await scenario.condition(kube, NAME, "DataPlaneUpToDate")
    return cond if cond.get("reason") == reason else None


async def config_hash(cp: LocalControlPlane, fmt: Format, version: str, tmp: Path) -> str:
    """The configuration ``plan`` says applying ``version`` would write."""
    body = {"apiVersion": "config.linkerd.io/v1alpha1", "kind": "LinkerdConfig",
            "metadata": {"name": NAME}, "spec": spec(fmt, version)}  # fmt: skip
    _, planned = await commands.plan_object(cp.kubeconfig, body, tmp)
    return str(planned["configHash"]["planned"])


@pytest.mark.timeout(480)
@pytest.mark.parametrize("fmt", formats.FORMATS, ids=formats.IDS)
async def test_a_new_attempt_is_not_halted_by_the_previous_attempts_failure(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, fmt: Format, tmp_path: Path
) -> None:
    cp, kube = own_control_plane, own_kube
    async with formats.installed(cp, kube, fmt):
        await scenario.meshed_namespace(kube, "cart", ["web"], replicas=1)
        await scenario.meshed_namespace(kube, "shop", ["api"], replicas=1)
        failing = await config_hash(cp, fmt, fmt.broken, tmp_path)
        async with (
            # Real creates only: the question, asked in cart, is a dry run and admitted, so
            # the canary is restarted and the ReplicaSet its restart makes is refused (a
            # refused question would hold the restart, and make no ReplicaSet to refuse).
            scenario.annotated_pods_refused(
                kube, "cart", mesh.RESTARTED_FOR_ANNOTATION, failing,
                "not this configuration here", "refuse-the-failing-configuration",
                dry_runs=False,
            ),
            scenario.controller(cp, NAME),
        ):  # fmt: skip
            await scenario.apply_linkerdconfig(kube, NAME, spec(fmt, fmt.broken))
            halted = await eventually(
                lambda: reason_is(kube, "RolloutHalted"), timeout=180, what="the canary failed"
            )
            assert "deployment/cart/web: new pods refused" in halted["message"]

            await scenario.apply_linkerdconfig(kube, NAME, spec(fmt, fmt.good))  # the fix
            await eventually(
                lambda: reason_is(kube, "UpToDate"), timeout=240, what="the new attempt done"
            )
            for namespace in ("cart", "shop"):
                pods = await scenario.wait_settled(kube, namespace, expected=1)
                assert set(scenario.proxy_versions(pods).values()) == {fmt.good}
        items = (await kube.request("GET", EVENTS.path("default")))["items"]
        halts = [e for e in items if e["reason"] == "RolloutHalted"]
        assert len(halts) == 1 and fmt.broken in halts[0]["message"]  # the first attempt's
