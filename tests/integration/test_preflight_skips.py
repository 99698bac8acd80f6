"""The pre-flight, in both formats with their real injectors: a Deployment that is paused
(``spec.paused``) or already unavailable (its pods Running but never Ready: a kwok Stage)
before its restart is not restarted and does not count against the new configuration; it is
listed as skipped, with why, in status, in ``linkerd-config status`` and in ``plan``. The
healthy one beside them is restarted."""

from __future__ import annotations

import time

import pytest
import yaml

from devcluster.cluster import LocalControlPlane
from linkerd_config.kube.client import MERGE_PATCH, KubeClient
from linkerd_config.kube.resource import DEPLOYMENTS, PODS, Json
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import commands, formats, scenario
from tests.support.audit import received_at, successful_writes
from tests.support.formats import Format
from tests.support.unready_stage import kept_unready, pods_never_ready
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

NAME = "preflight"
NS = "preflight"
SICK = {"example.com/sick": "true"}
"""Pods with this annotation run but never become Ready (the Stage below)."""


def linkerdconfig(fmt: Format) -> Json:
    return {
        "apiVersion": "config.linkerd.io/v1alpha1",
        "kind": "LinkerdConfig",
        "metadata": {"name": NAME},
        "spec": fmt.spec(fmt.good, {"maxRestartsPerPass": 10}),
    }


async def sick_deployment(kube: KubeClient) -> None:
    """An opted-in Deployment whose pods the Stage keeps unready: unavailable before any
    restart of ours."""
    body = scenario.deployment("sick", opted_in=True, replicas=1)
    template = body["spec"]["template"]["metadata"]
    template["annotations"] = {**(template.get("annotations") or {}), **SICK}
    await scenario.create(kube, DEPLOYMENTS.path(NS), body)

    async def unavailable() -> bool:
        dep = await kube.request("GET", DEPLOYMENTS.path(NS, "sick"))
        conditions = {c["type"]: c for c in dep.get("status", {}).get("conditions") or ()}
        pods = (await kube.request("GET", PODS.path(NS)))["items"]
        running = [p for p in pods if p["metadata"]["name"].startswith("sick-")]
        return conditions.get("Available", {}).get("status") == "False" and all(
            kept_unready(p) for p in running
        ) == bool(running)

    await eventually(unavailable, timeout=60, what="sick unavailable")


def by_name(lines: list[Json], state: str) -> dict[str, list[str]]:
    """Of plan's or status's workload lines, those in ``state``: name → their reasons."""
    return {w["name"]: [r["reason"] for r in w["reasons"]] for w in lines if w["state"] == state}


@pytest.mark.parametrize("fmt", formats.FORMATS, ids=formats.IDS)
async def test_paused_and_unavailable_workloads_are_skipped_and_listed(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, fmt: Format, tmp_path: object
) -> None:
    cp, kube = own_control_plane, own_kube
    async with formats.installed(cp, kube, fmt):
        await scenario.meshed_namespace(kube, NS, ["healthy", "paused"], replicas=1)
        await kube.request(
            "PATCH",
            DEPLOYMENTS.path(NS, "paused"),
            body={"spec": {"paused": True}},
            content_type=MERGE_PATCH,
        )
        async with pods_never_ready(kube, "sick-pods", SICK, NS):
            await sick_deployment(kube)
            path = tmp_path / "lc.yaml"  # type: ignore[operator]
            path.write_text(yaml.safe_dump(linkerdconfig(fmt)))

            # Before anything is applied, plan lists both as skipped, with why.
            code, plan = await commands.plan_json(cp.kubeconfig, path)
            assert code == 2
            rollout = plan["rollout"]
            assert [w["name"] for w in rollout["restarts"]] == ["healthy"]
            skipped = by_name(rollout["notRestarted"], "skipped")
            assert set(skipped) == {"paused", "sick"}, rollout["notRestarted"]
            assert "skipped: paused (spec.paused)" in skipped["paused"]
            assert any("skipped: not available before its restart" in r for r in skipped["sick"])

            async with scenario.controller(cp, "preflight"):
                applied = time.time()
                await kube.request("POST", LINKERD_CONFIGS.path(), body=linkerdconfig(fmt))

                async def listed() -> Json | None:
                    cond = await scenario.condition(kube, NAME, "DataPlaneUpToDate")
                    restarted = [
                        e["objectRef"]["name"]
                        for e in successful_writes(cp, "patch", "deployments", NS, "linkerd")
                        if received_at(e) >= applied
                    ]
                    message = cond.get("message", "")
                    return cond if restarted == ["healthy"] and "Skipped" in message else None

                cond = await eventually(listed, timeout=120, what="skips listed")
                assert cond["status"] == "False" and cond["reason"] == "RollingOut"
                assert f"deployment/{NS}/paused: paused (spec.paused)" in cond["message"]
                assert (
                    f"deployment/{NS}/sick: not available before its restart" in (cond["message"])
                )
                code, reports = await commands.status_json(cp.kubeconfig)
                assert code == 2
                (mine,) = [r for r in reports if r["linkerdConfig"] == NAME]
                skipped = by_name(mine["stale"], "skipped")
                assert set(skipped) == {"paused", "sick"}
                # Neither was restarted: no record of this configuration on them.
                for name in ("paused", "sick"):
                    dep = await kube.request("GET", DEPLOYMENTS.path(NS, name))
                    annotations = dep["spec"]["template"]["metadata"].get("annotations") or {}
                    assert "config.linkerd.io/restarted-for" not in annotations, name
