"""Pods of owners the controller does not restart (issue 37, finding 5), in both formats with
their real injectors: a ReplicaSet controlled by an Argo Rollouts ``Rollout`` (its CRD
installed, as Argo Rollouts installs it, reduced to an open schema) and a ReplicaSet of no
Deployment, each running an opted-in, meshed pod on the old proxy.

Before, both pods were taken for bare pods and evicted: their owners replaced them outside
the health gate, and nothing checked the replacements. Now each is skipped in pre-flight with
why (named by its owner), in ``plan``, in status and in ``status``; no pod is evicted, and the
rollout of the rest completes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from devcluster.cluster import LocalControlPlane
from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.resource import CRDS, REPLICASETS, Json
from linkerd_config.linkerd import mesh
from tests.support import commands, formats, scenario
from tests.support.audit import received_at, successful_writes
from tests.support.formats import Format
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

NAME = "owners"
NS = "owners"
ROLLOUTS_CRD: Json = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "rollouts.argoproj.io"},
    "spec": {
        "group": "argoproj.io",
        "names": {"kind": "Rollout", "listKind": "RolloutList", "plural": "rollouts",
                  "singular": "rollout"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object",
                                               "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}  # fmt: skip


def replicaset(name: str, owner: Json | None) -> Json:
    """A ReplicaSet of one opted-in pod, controlled by ``owner`` (an object) when given."""
    template = scenario.deployment(name, opted_in=True, replicas=1)["spec"]
    body: Json = {"metadata": {"name": name}, "spec": template}
    if owner is not None:
        meta = owner["metadata"]
        body["metadata"]["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
            }
        ]
    return body


def linkerdconfig(fmt: Format) -> Json:
    return {
        "apiVersion": "config.linkerd.io/v1alpha1",
        "kind": "LinkerdConfig",
        "metadata": {"name": NAME},
        "spec": fmt.spec(fmt.good, {"maxRestartsPerPass": 10}),
    }


@pytest.mark.parametrize("fmt", formats.FORMATS, ids=formats.IDS)
async def test_pods_of_unknown_owners_are_skipped_not_evicted(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, fmt: Format, tmp_path: Path
) -> None:
    cp, kube = own_control_plane, own_kube
    await scenario.create(kube, CRDS.path(), ROLLOUTS_CRD)

    async def established() -> bool:
        crd = await kube.request("GET", CRDS.path(name="rollouts.argoproj.io"))
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    await eventually(established, timeout=30, what="the Rollout CRD established")
    async with formats.installed(cp, kube, fmt):
        await scenario.meshed_namespace(kube, NS, ["healthy"], replicas=1)
        argo: Json = await kube.request(
            "POST",
            f"/apis/argoproj.io/v1alpha1/namespaces/{NS}/rollouts",
            body={"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
                  "metadata": {"name": "canary-app"}, "spec": {}},
        )  # fmt: skip
        await scenario.create(kube, REPLICASETS.path(NS), replicaset("canary-app-5d8f", argo))
        await scenario.create(kube, REPLICASETS.path(NS), replicaset("loner", None))
        before = await scenario.wait_settled(kube, NS, expected=3)
        assert all(mesh.proxy_version(p) is not None for p in before)  # all meshed
        uids = {p["metadata"]["uid"] for p in before if not p["metadata"]["name"].startswith("h")}

        code, plan = await commands.plan_object(cp.kubeconfig, linkerdconfig(fmt), tmp_path)
        assert code == 2
        assert [w["name"] for w in plan["rollout"]["restarts"]] == ["healthy"], plan["rollout"]
        listed = commands.states(plan["rollout"]["notRestarted"])
        assert listed["canary-app"][0] == "skipped", listed
        assert any("owned by a Rollout" in r for r in listed["canary-app"][1]), listed
        assert any("owned by a ReplicaSet" in r for r in listed["loner"][1]), listed

        async with scenario.controller(cp, NAME):
            applied = time.time()
            await kube.request("POST", "/apis/config.linkerd.io/v1alpha1/linkerdconfigs",
                               body=linkerdconfig(fmt))  # fmt: skip

            async def rolled() -> Json | None:
                cond = await scenario.condition(kube, NAME, "DataPlaneUpToDate")
                pods = await scenario.running_pods(kube, NS)
                healthy = [p for p in pods if p["metadata"]["name"].startswith("healthy-")]
                on_new = healthy and all(mesh.proxy_version(p) == fmt.good for p in healthy)
                return cond if on_new and "Skipped" in cond.get("message", "") else None

            cond = await eventually(rolled, timeout=180, interval=1, what="healthy rolled")
            assert f"rollout/{NS}/canary-app: owned by a Rollout" in cond["message"]
            assert f"replicaset/{NS}/loner: owned by a ReplicaSet" in cond["message"]
            code, reports = await commands.status_json(cp.kubeconfig)
            (mine,) = [r for r in reports if r["linkerdConfig"] == NAME]
            shown = commands.states(mine["stale"])
            assert shown["canary-app"][0] == shown["loner"][0] == "skipped", shown

        evictions = successful_writes(cp, "create", "pods/eviction", NS, "linkerd")
        assert [e for e in evictions if received_at(e) >= applied] == []
        after = {p["metadata"]["uid"] for p in await scenario.running_pods(kube, NS)}
        assert uids <= after  # the same pods, never replaced
