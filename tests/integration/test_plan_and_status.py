"""``linkerd-config plan`` and ``status``, the real command, against what the controller then
does. On a control plane of its own with Linkerd's real injector, in both formats:

* ``plan`` for a change lists exactly the Deployments that applying it then restarts (the
  audit log's PATCHes, object by object), in the passes they are restarted in; the pinned and
  the excluded opted-in workloads are listed as not restarted, with why; exit 2;
* after the rollout, the same ``plan`` says nothing changes, exit 0;
* ``status`` reports the stale pods while the rollout is paused (exit 2) and none after it
  (exit 0).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.cluster import LocalControlPlane
from devcluster.linkerd_install import render_install
from linkerd_config.app import build, running
from linkerd_config.kube.client import MERGE_PATCH, KubeClient
from linkerd_config.kube.resource import DEPLOYMENTS, SERVICE_ACCOUNTS
from linkerd_config.linkerd import mesh
from linkerd_config.linkerd.rollout.policy import RolloutOptions
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import scenario, service_accounts
from tests.support.audit import received_at, successful_writes
from tests.support.samples import sample
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
CONTROLLER_AGENT = "linkerd-config/"
PINNED = "pinned"


async def cli(
    cp: LocalControlPlane, *args: str, kubeconfig: Path | None = None
) -> tuple[int, str, str]:
    """The installed command, as a user runs it (as the admin, or as ``kubeconfig`` says)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "linkerd_config",
        *args,
        "--kubeconfig",
        str(kubeconfig or cp.kubeconfig),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def plan_json(
    cp: LocalControlPlane, path: Path, kubeconfig: Path | None = None
) -> tuple[int, Obj]:
    code, out, err = await cli(cp, "plan", "-f", str(path), "-o", "json", kubeconfig=kubeconfig)
    assert code in (0, 2), (code, out, err)
    return code, json.loads(out)


async def status_json(cp: LocalControlPlane) -> tuple[int, list[Obj]]:
    code, out, err = await cli(cp, "status", "-o", "json")
    assert code in (0, 2), (code, out, err)
    return code, json.loads(out)


RBAC = "/apis/rbac.authorization.k8s.io/v1"
READER = "linkerd-config-planner"
READS = [
    {"apiGroups": ["config.linkerd.io"], "resources": ["linkerdconfigs"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["list"]},
    {"apiGroups": ["apps"], "resources": ["replicasets", "deployments", "statefulsets",
                                         "daemonsets"], "verbs": ["list"]},
]  # fmt: skip


async def list_only_kubeconfig(cp: LocalControlPlane, kube: KubeClient, path: Path) -> Path:
    """A ServiceAccount that may only list what the README says plan and status read (and
    ConfigMaps in Linkerd's namespace only)."""
    account = {"metadata": {"name": READER}}
    await scenario.create(kube, SERVICE_ACCOUNTS.path("default"), account)
    subject = [{"kind": "ServiceAccount", "name": READER, "namespace": "default"}]
    await scenario.create(kube, f"{RBAC}/clusterroles", {"metadata": {"name": READER},
                                                         "rules": READS})  # fmt: skip
    await scenario.create(kube, f"{RBAC}/clusterrolebindings", {
        "metadata": {"name": READER}, "subjects": subject,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": READER}})  # fmt: skip
    configmaps = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]
    await scenario.create(kube, f"{RBAC}/namespaces/linkerd/roles", {
        "metadata": {"name": READER}, "rules": configmaps})  # fmt: skip
    await scenario.create(kube, f"{RBAC}/namespaces/linkerd/rolebindings", {
        "metadata": {"name": READER}, "subjects": subject,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": READER}})  # fmt: skip
    bearer = await service_accounts.token(kube, "default", READER)
    return service_accounts.kubeconfig(path, cp, READER, bearer)


def names(lines: list[Obj]) -> dict[str, Obj]:
    return {f"{w['kind']}/{w['namespace']}/{w['name']}": w for w in lines}


def restarted_by_controller(cp: LocalControlPlane) -> list[Obj]:
    return successful_writes(cp, "patch", "deployments", scenario.EMOJIVOTO, CONTROLLER_AGENT)


async def up_to_date(kube: KubeClient, name: str) -> None:
    async def ready() -> bool:
        cond = await scenario.condition(kube, name, "Ready")
        return cond.get("status") == "True" and cond.get("observedGeneration") == cond.get(
            "generation"
        )

    await eventually(ready, timeout=180, what=f"LinkerdConfig {name} Ready")


async def test_legacy_plan_then_paused_status_then_rollout_as_planned(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, tmp_path: Path
) -> None:
    cp, kube = own_control_plane, own_kube
    async with scenario.readme_starting_point(cp, kube):
        pinned = scenario.deployment(PINNED, opted_in=True)
        pinned["spec"]["template"]["metadata"]["annotations"] = {
            mesh.PIN_ANNOTATION: "edge-19.12.1"
        }
        await scenario.create(kube, DEPLOYMENTS.path(scenario.EMOJIVOTO), pinned)
        await scenario.wait_settled(kube, scenario.EMOJIVOTO, expected=10)
        config = sample("edge_19.12.3.yaml")
        config["spec"]["rollout"] = {"maxRestartsPerPass": 2, "restartInterval": "1s"}
        path = tmp_path / "linkerdconfig.yaml"
        path.write_text(yaml.safe_dump(config))

        code, _, err = await cli(cp, "status")
        assert code == 1 and "no LinkerdConfig in the cluster" in err, err
        code, planned = await plan_json(cp, path)
        assert code == 2 and planned["valid"] and planned["changes"], planned
        restarts = names(planned["rollout"]["restarts"])
        assert {k: w["batch"] for k, w in restarts.items()} == {
            "Deployment/emojivoto/emoji": 1,
            "Deployment/emojivoto/voting": 1,
            "Deployment/emojivoto/web": 2,
        }
        for line in restarts.values():
            assert line["pods"] == 2
            assert line["reasons"] == [
                {"reason": "proxy version edge-19.12.1 → edge-19.12.3", "pods": 2}
            ]
        kept = names(planned["rollout"]["notRestarted"])
        assert {k: w["state"] for k, w in kept.items()} == {
            "Deployment/emojivoto/pinned": "pinned",
            "Deployment/kube-system-like/coredns-like": "excluded",
        }
        proxy_changes = {
            c["path"]: c
            for k in planned["configMapChanges"]
            if k["key"] == "proxy"
            for c in k["changes"]
        }
        assert proxy_changes["proxyVersion"]["before"] == "edge-19.12.1"
        assert proxy_changes["proxyVersion"]["after"] == "edge-19.12.3"
        code, text, _ = await cli(cp, "plan", "-f", str(path))
        assert code == 2
        assert "pass 2:\n    deployment/emojivoto/web (2 pod(s))" in text, text
        assert "[pinned] pinned to edge-19.12.1 by config.linkerd.io/proxy-version" in text

        settings = scenario.local_settings(cp.kubeconfig, "--identity", "plan-test")
        app = await build(settings, RolloutOptions(injector_wait=30.0))
        async with running(app):
            paused = {**config, "spec": {**config["spec"], "rollout": {
                **config["spec"]["rollout"], "paused": True}}}  # fmt: skip
            await kube.request("POST", LINKERD_CONFIGS.path(), body=paused)

            async def held() -> bool:
                cond = await scenario.condition(kube, "edge-19.12.3", "DataPlaneUpToDate")
                return cond.get("reason") == "Paused"

            await eventually(held, timeout=30, what="rollout paused")
            code, reports = await status_json(cp)
            assert code == 2
            (report,) = reports
            assert set(names(report["stale"])) == set(restarts)
            assert report["namespaces"]["emojivoto"] == {
                "up-to-date": 0, "stale": 6, "pinned": 2, "excluded": 0,
            }  # fmt: skip
            assert report["namespaces"]["kube-system-like"]["excluded"] == 2
            assert report["rollout"]["paused"] is True
            assert restarted_by_controller(cp) == []

            await kube.request(
                "PATCH",
                LINKERD_CONFIGS.path(name="edge-19.12.3"),
                body={"spec": {"rollout": {"paused": False}}},
                content_type=MERGE_PATCH,
            )
            await up_to_date(kube, "edge-19.12.3")
            await scenario.wait_settled(kube, scenario.EMOJIVOTO, expected=10)

            code, reports = await status_json(cp)
            assert code == 0, reports
            (report,) = reports
            assert report["stale"] == [] and report["healthy"]
            assert report["namespaces"]["emojivoto"] == {
                "up-to-date": 6, "stale": 0, "pinned": 2, "excluded": 0,
            }  # fmt: skip
            code, text, _ = await cli(cp, "status")
            assert code == 0 and "Healthy" in text, text

            config["spec"]["rollout"]["paused"] = False
            path.write_text(yaml.safe_dump(config))
            code, again = await plan_json(cp, path)
            assert code == 0 and not again["changes"], again
            code, text, _ = await cli(cp, "plan", "-f", str(path))
            assert code == 0 and "No changes" in text, text

    patches = restarted_by_controller(cp)
    assert sorted(e["objectRef"]["name"] for e in patches) == sorted(
        k.rsplit("/", 1)[1] for k in restarts
    )
    at = {e["objectRef"]["name"]: received_at(e) for e in patches}
    assert at["web"] > max(at["emoji"], at["voting"])  # the second pass, as planned


MODERN_TAG = "edge-26.8.3"


async def test_modern_plan_lists_what_the_rollout_restarts_and_then_nothing(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, tmp_path: Path
) -> None:
    cp, kube = own_control_plane, own_kube
    install = await asyncio.to_thread(render_install, MODERN_TAG)
    await scenario.install_crd(kube)
    await scenario.install_linkerd(kube, install)
    async with scenario.linkerd_injector(cp, MODERN_TAG, webhook_template=install.injector_webhook):
        await scenario.install_workloads(kube)
        await scenario.wait_settled(kube, scenario.EMOJIVOTO, expected=8)
        config = {
            "apiVersion": "config.linkerd.io/v1alpha1",
            "kind": "LinkerdConfig",
            "metadata": {"name": "linkerd"},
            "spec": {"proxy": {"proxyVersion": "edge-26.8.4", "logLevel": "debug"}},
        }
        path = tmp_path / "linkerdconfig.yaml"
        path.write_text(yaml.safe_dump(config))
        code, planned = await plan_json(cp, path)
        assert code == 2, planned
        assert planned["configFormat"] == "values"
        (values,) = [k for k in planned["configMapChanges"] if k["key"] == "values"]
        changed = {c["path"]: (c.get("before"), c.get("after")) for c in values["changes"]}
        installed = yaml.safe_load(install.get("ConfigMap", "linkerd-config")["data"]["values"])
        assert changed == {  # exactly the two values the spec sets, nothing else
            "proxy.image.version": (installed["proxy"]["image"]["version"], "edge-26.8.4"),
            "proxy.logLevel": (installed["proxy"]["logLevel"], "debug"),
        }
        restarts = names(planned["rollout"]["restarts"])
        assert set(restarts) == {f"Deployment/emojivoto/{n}" for n in scenario.OPTED_IN}
        assert {w["batch"] for w in restarts.values()} == {1}
        reader = await list_only_kubeconfig(cp, kube, tmp_path / "reader.kubeconfig")
        assert await plan_json(cp, path, reader) == (code, planned)  # list is all it needs

        settings = scenario.local_settings(cp.kubeconfig, "--identity", "plan-modern")
        app = await build(settings, RolloutOptions(restart_interval=1.0, injector_wait=30.0))
        async with running(app):
            await kube.request("POST", LINKERD_CONFIGS.path(), body=config)
            await up_to_date(kube, "linkerd")
            await scenario.wait_settled(kube, scenario.EMOJIVOTO, expected=8)
            code, reports = await status_json(cp)
            assert code == 0 and reports[0]["stale"] == [], reports
            code, again = await plan_json(cp, path)
            assert code == 0 and not again["changes"], again

    patches = restarted_by_controller(cp)
    assert sorted(e["objectRef"]["name"] for e in patches) == sorted(scenario.OPTED_IN)
