"""Faults and bad input found when the controller was attacked as a user would, each
reproduced on the local control plane with Linkerd's real injector:

1. a deleted ``linkerd-config`` comes back whole (``install``, ``linkerd.io/created-by``),
   even when the controller restarted in between;
2. a frozen path to the API server is noticed (readiness false) and recovered from in <= 30 s;
3. a write the API server refuses shows at once in status, an Event and one error line;
4. any string survives server-side apply (DEL, C1 controls, non-ASCII);
5. values Linkerd cannot use are refused even with the webhooks off;
6. the restart batch size and interval hold under the pod churn of the rollout itself;
7. the restart count survives a leader that died before its last status write;
8. start-up problems are one line naming what to do, or a wait with readiness false.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from devcluster.cluster import (
    ControlPlaneOptions,
    LocalControlPlane,
    free_port,
    write_kubeconfig,
)
from devcluster.proxy_injector import ProxyInjector
from linkerd_config.app import App, build, running
from linkerd_config.kube.certs import write_serving_pair
from linkerd_config.kube.client import APPLY_PATCH, MERGE_PATCH, ApiError, KubeClient
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.resource import CONFIGMAPS, DEPLOYMENTS, EVENTS, NAMESPACES
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import scenario
from tests.support.audit import received_at, successful_writes
from tests.support.run_process import RunProcess
from tests.support.samples import SAMPLES, install_configmap, load, sample
from tests.support.tcp_proxy import FreezableProxy
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
CM_PATH = CONFIGMAPS.path("linkerd", "linkerd-config")
CONFIG = "edge-19.12.3"
SAMPLE = "edge_19.12.3.yaml"
AGENT = "linkerd-config/"
FLEET = "fleet"
FLEET_SIZE = 25
VAP_PATH = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
VAP_BINDING_PATH = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"


@pytest.fixture(scope="module")
def cp() -> Iterator[LocalControlPlane]:
    with LocalControlPlane(ControlPlaneOptions(workloads=True)) as plane:
        yield plane


@pytest.fixture(scope="module")
async def linkerd(cp: LocalControlPlane) -> AsyncIterator[tuple[KubeClient, ProxyInjector]]:
    """Linkerd edge-19.12.1 installed, its real injector serving, the CRD present."""
    access = await load_access(str(cp.kubeconfig))
    async with KubeClient(access, user_agent="reliability-tests") as kube:
        await scenario.install_crd(kube)
        await scenario.install_linkerd_edge_19_12_1(kube)
        async with scenario.linkerd_injector(cp) as injector:
            yield kube, injector


@pytest.fixture
def kube(linkerd: tuple[KubeClient, ProxyInjector]) -> KubeClient:
    return linkerd[0]


@contextlib.asynccontextmanager
async def controller(cp: LocalControlPlane, name: str, *flags: str) -> AsyncIterator[App]:
    settings = scenario.local_settings(cp.kubeconfig, "--identity", name, *flags)
    app = await build(settings)
    async with running(app):
        yield app


async def synced(kube: KubeClient, name: str = CONFIG) -> Obj:
    async def probe() -> Obj | None:
        cond = await scenario.condition(kube, name, "ConfigMapSynced")
        ok = cond.get("status") == "True" and cond.get("observedGeneration") == cond["generation"]
        return cond if ok else None

    return await eventually(probe, timeout=60, what=f"{name} ConfigMapSynced")


async def ensure_applied(kube: KubeClient) -> None:
    with contextlib.suppress(ApiError):
        await kube.request("POST", LINKERD_CONFIGS.path(), body=sample(SAMPLE))


# -- 1. nothing we did not write is lost --------------------------------------------------------


async def test_a_deleted_configmap_comes_back_whole_even_after_a_restart(
    cp: LocalControlPlane, kube: KubeClient
) -> None:
    original = install_configmap()
    await ensure_applied(kube)

    def whole(cm: Obj) -> None:
        assert cm["data"]["install"] == original["data"]["install"]
        annotations = cm["metadata"]["annotations"]
        assert annotations["linkerd.io/created-by"] == "linkerd/cli edge-19.12.1"
        assert cm["metadata"]["labels"]["linkerd.io/control-plane-ns"] == "linkerd"
        assert '"proxyVersion":"edge-19.12.3"' in cm["data"]["proxy"]

    async def recreated(old_uid: str) -> Obj | None:
        try:
            cm: Obj = await kube.request("GET", CM_PATH)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise
        ours = '"proxyVersion":"edge-19.12.3"' in cm["data"].get("proxy", "")
        return cm if cm["metadata"]["uid"] != old_uid and ours else None

    async with controller(cp, "keeper-1"):
        await synced(kube)
        before = await kube.request("GET", CM_PATH)
        whole(before)
        await kube.request("DELETE", CM_PATH)
        again = await eventually(lambda: recreated(before["metadata"]["uid"]), timeout=20)
        whole(again)

    # Deleted while no controller runs: a new one has no cache of it, only the API.
    await kube.request("DELETE", CM_PATH)
    async with controller(cp, "keeper-2"):
        third = await eventually(lambda: recreated(again["metadata"]["uid"]), timeout=30)
        whole(third)
        # And the next apply, which omits install, must not take it away.
        await kube.request(
            "PATCH", CM_PATH, body={"data": {"proxy": "{}"}}, content_type=MERGE_PATCH
        )
        await synced(kube)

        async def reverted() -> Obj | None:
            cm: Obj = await kube.request("GET", CM_PATH)
            return cm if cm["data"]["proxy"] != "{}" else None

        whole(await eventually(reverted, timeout=20))


# -- 3. a refused write is visible ----------------------------------------------------------------


@contextlib.asynccontextmanager
async def configmap_frozen(kube: KubeClient) -> AsyncIterator[str]:
    """A ValidatingAdmissionPolicy that refuses every update of linkerd-config."""
    message = "linkerd-config is frozen by policy"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "freeze-linkerd-config"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["UPDATE"],
                        "resources": ["configmaps"],
                    }
                ]
            },
            "validations": [
                {"expression": "object.metadata.name != 'linkerd-config'", "message": message}
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "freeze-linkerd-config"},
        "spec": {"policyName": "freeze-linkerd-config", "validationActions": ["Deny"]},
    }
    await kube.request("POST", VAP_PATH, body=policy)
    await kube.request("POST", VAP_BINDING_PATH, body=binding)
    try:

        async def enforced() -> bool:
            try:
                await kube.request(
                    "PATCH",
                    CM_PATH,
                    params={"dryRun": "All"},
                    body={"metadata": {"labels": {"probe": "x"}}},
                    content_type=MERGE_PATCH,
                )
            except ApiError as exc:
                return message in exc.message
            return False

        await eventually(enforced, timeout=30, what="the policy enforced")
        yield message
    finally:
        await kube.request("DELETE", f"{VAP_BINDING_PATH}/freeze-linkerd-config")
        await kube.request("DELETE", f"{VAP_PATH}/freeze-linkerd-config")


async def test_a_refused_write_shows_in_status_an_event_and_one_error_line(
    cp: LocalControlPlane, kube: KubeClient
) -> None:
    await ensure_applied(kube)
    async with controller(cp, "refused"):
        await synced(kube)
        async with configmap_frozen(kube) as message:
            with capture_logs() as logs:
                await kube.request(
                    "PATCH",
                    LINKERD_CONFIGS.path(name=CONFIG),
                    body={"spec": {"proxy": {"logLevel": "debug"}}},
                    content_type=MERGE_PATCH,
                )

                async def failing() -> Obj | None:
                    ready = await scenario.condition(kube, CONFIG, "Ready")
                    current = ready.get("observedGeneration") == ready["generation"]
                    return ready if current and ready.get("status") == "False" else None

                ready = await eventually(failing, timeout=15, what="Ready=False")
                await asyncio.sleep(1)  # let a retry or two happen
            synced_cond = await scenario.condition(kube, CONFIG, "ConfigMapSynced")
            assert synced_cond["status"] == "False"
            for cond in (ready, synced_cond):
                assert cond["reason"] == "WriteFailed"
                assert message in cond["message"] and "422" in cond["message"], cond
            events = (await kube.request("GET", EVENTS.path("default")))["items"]
            warnings = [
                e
                for e in events
                if e["reason"] == "ConfigMapWriteFailed" and e["involvedObject"]["name"] == CONFIG
            ]
            assert len(warnings) == 1 and warnings[0]["type"] == "Warning", warnings
            assert message in warnings[0]["message"]
            refused = [e for e in logs if e["event"] == "configmap write refused"]
            assert refused and all(e["log_level"] == "error" for e in refused)
            assert not [e for e in logs if e.get("exc_info")], "a traceback was logged"
        # Policy gone: the next retry writes, and status recovers.
        cond = await synced(kube)
        assert cond["status"] == "True"
    cm = await kube.request("GET", CM_PATH)
    assert '"level":"debug"' in cm["data"]["proxy"]
    await kube.request(
        "PATCH",
        LINKERD_CONFIGS.path(name=CONFIG),
        body={"spec": {"proxy": {"logLevel": None}}},
        content_type=MERGE_PATCH,
    )


# -- 4. any string survives the apply -------------------------------------------------------------


async def test_any_string_survives_server_side_apply(kube: KubeClient) -> None:
    hostile = 'del:\x7f c1:\x85\x9f nbsp:\xa0 ls:\u2028 emoji:\U0001f680 tab:\t nl:\n quote:" bs:\\'
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "hostile-strings", "namespace": "default"},
        "data": {"value": hostile},
    }
    await kube.request(
        "PATCH",
        CONFIGMAPS.path("default", "hostile-strings"),
        params={"fieldManager": "reliability-tests"},
        body=body,
        content_type=APPLY_PATCH,
    )
    cm = await kube.request("GET", CONFIGMAPS.path("default", "hostile-strings"))
    assert cm["data"]["value"] == hostile


# -- 5. values Linkerd cannot use are never written ------------------------------------------------


@pytest.mark.parametrize(
    ("sample_file", "field", "schema_refuses"),
    [
        ("bad_cluster_domain.yaml", "spec.global.clusterDomain", True),
        ("markup_in_names.yaml", "spec.proxy.proxyImage.name", True),
        ("control_character_in_image.yaml", "spec.proxy.proxyInitImage.name", True),
        ("bad_trust_domain.yaml", "spec.global.identityContext.trustDomain", True),
        # Refused by the controller: status names the field as its writer (v1alpha1) does.
        ("garbage_pem.yaml", "spec.global.identityContext.trustAnchorsPEM", False),
        ("leaf_not_ca.yaml", "spec.global.identityContext.trustAnchorsPEM", False),
    ],
)
async def test_values_linkerd_cannot_use_are_refused_without_webhooks(
    cp: LocalControlPlane, kube: KubeClient, sample_file: str, field: str, schema_refuses: bool
) -> None:
    """With no webhook, a value the schema can describe (the field table's grammar) is never
    stored; one it cannot (an X.509 anchor) is stored, and the controller refuses it."""
    bad = load(SAMPLES / "invalid" / sample_file)
    name = bad["metadata"]["name"]
    with contextlib.suppress(ApiError):  # only the scenario's config may own the ConfigMap
        await kube.request("DELETE", LINKERD_CONFIGS.path(name=CONFIG))
    before = await kube.request("GET", CM_PATH)
    if schema_refuses:
        with pytest.raises(ApiError) as refused:
            await kube.request("POST", LINKERD_CONFIGS.path(), body=bad)
        assert refused.value.status == 422 and f"{field}: Invalid value" in str(refused.value)
        assert (await kube.request("GET", CM_PATH))["data"] == before["data"]
        return
    await kube.request("POST", LINKERD_CONFIGS.path(), body=bad)  # no webhook: stored
    try:
        async with controller(cp, f"no-webhooks-{name}"):

            async def refused_by_controller() -> Obj | None:
                cond = await scenario.condition(kube, name, "ConfigMapSynced")
                return cond if cond.get("reason") == "InvalidConfig" else None

            cond = await eventually(refused_by_controller, timeout=20, what=f"{name} refused")
            assert cond["status"] == "False" and field in cond["message"], cond
            await asyncio.sleep(1)
            after = await kube.request("GET", CM_PATH)
            assert after["data"] == before["data"]
    finally:
        await kube.request("DELETE", LINKERD_CONFIGS.path(name=name))


# -- 6, 7. restarts: paced, and counted from what the workloads record ----------------------


async def fleet(kube: KubeClient) -> None:
    """FLEET_SIZE opted-in Deployments of one pod each, injected by Linkerd."""
    with contextlib.suppress(ApiError):
        await kube.request(
            "POST",
            NAMESPACES.path(),
            body={"metadata": {"name": FLEET, "annotations": {"linkerd.io/inject": "enabled"}}},
        )
    await scenario.wait_admits_pods(kube, FLEET, injected=True)
    for i in range(FLEET_SIZE):
        await scenario.create(
            kube, DEPLOYMENTS.path(FLEET), scenario.deployment(f"app-{i:02d}", True, replicas=1)
        )
    await scenario.wait_settled(kube, FLEET, expected=FLEET_SIZE, timeout=180)
    await scenario.wait_steady(kube, FLEET, timeout=180)


def passes(times: list[float], gap: float = 1.0) -> list[list[float]]:
    """Restart times grouped into passes: a pass's restarts are milliseconds apart."""
    groups: list[list[float]] = []
    for t in sorted(times):
        if groups and t - groups[-1][-1] < gap:
            groups[-1].append(t)
        else:
            groups.append([t])
    return groups


async def back_to_edge_19_12_1(kube: KubeClient) -> None:
    """No LinkerdConfig, and linkerd-config as Linkerd edge-19.12.1 installed it, served by the
    injector: the fleet created next runs the old proxy."""
    with contextlib.suppress(ApiError):
        await kube.request("DELETE", LINKERD_CONFIGS.path(name=CONFIG))
    await kube.request("PUT", CM_PATH, body={**install_configmap(), "metadata": {
        **install_configmap()["metadata"], "resourceVersion": None}})  # fmt: skip

    async def injects_old() -> bool:
        pod = await scenario.dry_run_pod(kube, "default", {"linkerd.io/inject": "enabled"})
        return pod["metadata"]["annotations"].get("linkerd.io/proxy-version") == "edge-19.12.1"

    await eventually(injects_old, timeout=30, what="the injector back on edge-19.12.1")


async def test_batch_size_and_interval_hold_under_pod_churn(
    cp: LocalControlPlane, kube: KubeClient
) -> None:
    await back_to_edge_19_12_1(kube)
    await fleet(kube)
    async with controller(cp, "pacer", "--max-restarts-per-pass", "10", "--restart-interval", "5s"):
        await ensure_applied(kube)
        await synced(kube)

        async def fleet_restarted() -> bool:
            writes = successful_writes(cp, "patch", "deployments", FLEET, AGENT)
            return len({e["objectRef"]["name"] for e in writes}) == FLEET_SIZE

        await eventually(fleet_restarted, timeout=120, interval=1, what="every workload restarted")
    times = [received_at(e) for e in successful_writes(cp, "patch", "deployments", FLEET, AGENT)]
    assert len(times) == FLEET_SIZE  # each exactly once
    groups = passes(times)
    gaps = [round(b[0] - a[-1], 2) for a, b in itertools.pairwise(groups)]
    print(f"\npasses: {[len(g) for g in groups]}, gaps between them: {gaps}")
    # As few passes as a batch of 10 allows, none over it. Under make test's two processes
    # the first pass restarted 5 in both sharded runs (passes 5, 10, 10: the batch and the
    # interval held); why the first was the short one is not yet known (issue 62's note).
    assert sorted(len(g) for g in groups) == [5, 10, 10]
    for previous, current in itertools.pairwise(groups):
        assert current[0] - previous[-1] >= 5.0 - 0.05  # the interval, from the last restart


async def test_restart_count_survives_a_leader_that_never_wrote_it(
    cp: LocalControlPlane, kube: KubeClient
) -> None:
    await ensure_applied(kube)
    await fleet(kube)
    flags = ("--max-restarts-per-pass", "10", "--restart-interval", "2s")
    before = len(successful_writes(cp, "patch", "deployments", FLEET, AGENT))
    async with controller(cp, "dies-early", *flags):
        await synced(kube)
        changed = copy.deepcopy(sample(SAMPLE)["spec"]["proxy"])
        changed["proxyVersion"] = "edge-19.12.4"
        await kube.request(
            "PATCH",
            LINKERD_CONFIGS.path(name=CONFIG),
            body={"spec": {"proxy": changed}},
            content_type=MERGE_PATCH,
        )

        async def first_pass() -> bool:
            done = len(successful_writes(cp, "patch", "deployments", FLEET, AGENT)) - before
            return done >= 10

        await eventually(first_pass, timeout=60, what="the first pass")
    # As if that leader died between its restarts and its status write.
    await kube.request(
        "PATCH",
        LINKERD_CONFIGS.path(name=CONFIG, subresource="status"),
        body={"status": {"restartedWorkloads": 0}},
        content_type=MERGE_PATCH,
    )
    async with controller(cp, "successor", *flags):

        async def rolled() -> Obj | None:
            obj: Obj = await kube.request("GET", LINKERD_CONFIGS.path(name=CONFIG))
            status = obj.get("status") or {}
            conds = {c["type"]: c for c in status.get("conditions") or []}
            up = conds.get("DataPlaneUpToDate", {})
            return (
                status
                if up.get("status") == "True" and status.get("outdatedWorkloads") == 0
                else None
            )

        status = await eventually(rolled, timeout=120, interval=1, what="the rollout finished")
    restarted = successful_writes(cp, "patch", "deployments", FLEET, AGENT)[before:]
    assert len({e["objectRef"]["name"] for e in restarted}) == FLEET_SIZE == len(restarted)
    assert status["restartedWorkloads"] == FLEET_SIZE, status


# -- 8. start-up problems: one line naming what to do, or a wait with readiness false ----------

CLI = [sys.executable, "-m", "linkerd_config", "run"]
WAITING_FOR_CERT = "waiting for the serving certificate"


def bare_environment(home: Path) -> dict[str, str]:
    """No kubeconfig, not in a cluster."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "POD_"))}
    return {**env, "HOME": str(home)}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], "no kubeconfig at"),
        (["--kubeconfig", "/nope"], "kubeconfig /nope does not exist"),
        (["--kubeconfig", "GARBAGE"], "is not usable"),
    ],
    ids=["no-kubeconfig", "missing-file", "garbage-file"],
)
def test_an_unusable_kubeconfig_is_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    garbage = tmp_path / "garbage.kubeconfig"
    garbage.write_text("this: is: not: a kubeconfig\n")
    argv = [str(garbage) if a == "GARBAGE" else a for a in args]
    done = subprocess.run(
        [*CLI, *argv, "--enable-webhooks", "false"],
        env=bare_environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], done.stderr
    assert "Traceback" not in done.stderr + done.stdout


async def http_status(url: str) -> int:
    try:
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            return resp.status
    except aiohttp.ClientError:
        return 0


def run_flags(kubeconfig: Path, health: int, *extra: str) -> list[str]:
    return [
        *CLI,
        "--kubeconfig", str(kubeconfig),
        "--health-probe-bind-address", f"127.0.0.1:{health}",
        "--metrics-bind-address", "127.0.0.1:0",
        "--leader-elect", "false",
        *extra,
    ]  # fmt: skip


async def test_webhooks_wait_for_their_certificate_with_readiness_false(
    cp: LocalControlPlane, kube: KubeClient, tmp_path: Path
) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    health = free_port()
    argv = run_flags(
        cp.kubeconfig,
        health,
        "--enable-webhooks", "true",
        "--webhook-cert-dir", str(certs),
        "--webhook-bind-address", f"127.0.0.1:{free_port()}",
    )  # fmt: skip
    process = RunProcess(argv, dict(os.environ))
    try:
        ready_url = f"http://127.0.0.1:{health}/readyz"
        await eventually(
            lambda: _is(http_status(f"http://127.0.0.1:{health}/healthz"), 200),
            timeout=30,
            what="alive",
        )
        await asyncio.sleep(3)
        assert process.proc.poll() is None, process.lines  # still running, not crashed
        assert await http_status(ready_url) == 500  # not ready (as controller-runtime answers)
        waiting = [r for r in process.records() if r.get("msg") == WAITING_FOR_CERT]
        assert len(waiting) == 1, process.lines
        write_serving_pair(certs, ["localhost"], ["127.0.0.1"])  # cert-manager issues it
        await eventually(lambda: _is(http_status(ready_url), 200), timeout=30, what="ready")
    finally:
        code = process.stop()
    output = "\n".join(process.lines)
    assert code == 0, output
    assert "Traceback" not in output and "Unclosed client session" not in output, output


async def _is(value: Awaitable[int], expected: int) -> bool:
    return await value == expected


async def test_a_missing_crd_is_one_line_then_waited_for(
    private_control_plane: LocalControlPlane,
) -> None:
    cp = private_control_plane
    health = free_port()
    process = RunProcess(
        run_flags(cp.kubeconfig, health, "--enable-webhooks", "false"), dict(os.environ)
    )
    try:
        ready_url = f"http://127.0.0.1:{health}/readyz"
        await eventually(
            lambda: _is(http_status(f"http://127.0.0.1:{health}/healthz"), 200), timeout=30
        )
        await asyncio.sleep(6)  # several retries' worth
        records = process.records()
        missing = [r for r in records if r.get("msg", "").startswith("resource not served")]
        assert len(missing) == 1, process.lines
        assert (
            missing[0]["level"] == "error"
            and "kubectl apply -k manifests/crd" in missing[0]["todo"]
        )
        assert not [r for r in records if r.get("msg") == "list/watch request failed"]
        assert await http_status(ready_url) == 500  # not ready (as controller-runtime answers)
        access = await load_access(str(cp.kubeconfig))
        async with KubeClient(access, user_agent="reliability-tests") as admin:
            await scenario.install_crd(admin)
        await eventually(lambda: _is(http_status(ready_url), 200), timeout=60, what="ready")
    finally:
        code = process.stop()
    assert code == 0
    assert "Traceback" not in "\n".join(process.lines)


# -- 2. a frozen path to the API server is noticed, and recovered from -----------------------


async def via_proxy(
    cp: LocalControlPlane, tmp_path: Path, user: str
) -> tuple[FreezableProxy, Path]:
    """A started proxy to the API server, and a kubeconfig (``user``, cluster admin) through
    it."""
    proxy = FreezableProxy("127.0.0.1", cp.apiserver_port)
    port = await proxy.start()
    kubeconfig = tmp_path / "via-proxy.kubeconfig"
    identity = cp.certificate_authority.client(user, ["system:masters"])
    write_kubeconfig(kubeconfig, f"https://127.0.0.1:{port}", cp.ca_pem, user, identity)
    return proxy, kubeconfig


@pytest.mark.parametrize("elect", ["true", "false"], ids=["leader-elect", "no-leader-elect"])
async def test_a_frozen_path_is_noticed_within_30_seconds_and_recovered_from(
    cp: LocalControlPlane, kube: KubeClient, tmp_path: Path, elect: str
) -> None:
    """Every connection the controller has is frozen (open, silent); new ones work. The
    controller must notice, say so on /readyz, and revert a manual edit made meanwhile, with
    leader election (the Lease requests and renewals are the signs) and without it (one
    replica, or a local run: a heartbeat request is)."""
    await ensure_applied(kube)
    proxy, kubeconfig = await via_proxy(cp, tmp_path, "frozen-path")
    health = free_port()
    ready_url = f"http://127.0.0.1:{health}/readyz"
    # Default lease timings (15 s / 10 s / 2 s): the promise is for what users run.
    settings = scenario.local_settings(
        kubeconfig,
        "--identity",
        f"frozen-{elect}",
        "--health-probe-bind-address",
        f"127.0.0.1:{health}",
        "--leader-elect",
        elect,
    )
    app = await build(settings)
    try:
        async with running(app):
            await eventually(lambda: _is(http_status(ready_url), 200), timeout=60, what="ready")
            await eventually(lambda: asyncio.sleep(0, result=app.manager.leading), timeout=60)
            await synced(kube)
            frozen = proxy.freeze()
            assert frozen >= 3, frozen  # the watches, at least
            edited = time.monotonic()
            await kube.request(
                "PATCH", CM_PATH, body={"data": {"proxy": "{}"}}, content_type=MERGE_PATCH
            )
            unready_seen: list[float] = []

            async def reverted() -> bool:
                if await http_status(ready_url) != 200 and not unready_seen:
                    unready_seen.append(time.monotonic() - edited)
                cm: Obj = await kube.request("GET", CM_PATH)
                return cm["data"]["proxy"] != "{}"

            await eventually(reverted, timeout=45, interval=0.5, what="the edit reverted")
            took = time.monotonic() - edited
            print(
                f"\nfrozen path ({elect=}): unready after {unready_seen}s, "
                f"edit reverted after {took:.1f}s"
            )
            assert unready_seen, "readiness never said the caches were blind"
            assert took <= 30 + 10  # detection (<= 19 s with these timings) plus recovery
    finally:
        await proxy.close()


async def test_a_graceful_stop_ends_within_its_grace_while_the_api_server_is_silent(
    cp: LocalControlPlane, kube: KubeClient, tmp_path: Path
) -> None:
    """SIGTERM while every connection to the API server, old and new, is silent (a hung load
    balancer), with a revert's Event count waiting for its interval: the stop drains what it
    can within its bound, gives up on writing the count and on releasing the Lease, and ends
    within the manager's grace, not at some request's timeout or never."""
    await ensure_applied(kube)
    proxy, kubeconfig = await via_proxy(cp, tmp_path, "silent-stop")
    settings = scenario.local_settings(
        kubeconfig, "--identity", "silent-stop", "--leader-elect", "true"
    )
    app = await build(settings)
    stop = asyncio.Event()
    task = asyncio.create_task(app.manager.run(stop), name="manager")
    try:
        await eventually(lambda: asyncio.sleep(0, result=app.manager.leading), timeout=60)
        await synced(kube)
        for n in range(2):  # two reverts within 5 s: the second one's count waits
            await kube.request(
                "PATCH", CM_PATH, body={"data": {"proxy": f"{{{n}}}"}}, content_type=MERGE_PATCH
            )

            async def reverted(n: int = n) -> bool:
                cm: Obj = await kube.request("GET", CM_PATH)
                return str(cm["data"]["proxy"]) != f"{{{n}}}"

            await eventually(reverted, timeout=30, interval=0.1, what=f"edit {n} reverted")
        await eventually(
            lambda: asyncio.sleep(0, result=app.recorder.pending > 0), timeout=5,
            what="a count waiting",
        )  # fmt: skip
        proxy.freeze(new_too=True)
        with capture_logs() as logs:
            stopped = time.monotonic()
            stop.set()
            await asyncio.wait_for(task, app.manager.shutdown_grace + 10)
            took = time.monotonic() - stopped
    finally:
        stop.set()
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await app.client.close()
        await proxy.close()
    said = {(e["event"], e.get("drain")) for e in logs}
    print(f"\nstopped in {took:.1f}s with the API server silent: {sorted(said)[:12]}")
    assert ("drain did not finish in time", "events") in said
    assert took <= app.manager.shutdown_grace + 2.0, took


SAMPLE_FILE = SAMPLES / "edge_19.12.3.yaml"
HUGE_KUBECONFIG = 300 * 2**20
"""Issue 39, finding 6: a kubeconfig this size was read and parsed whole (60 s, 659 MB)."""


@pytest.mark.parametrize(
    "command",
    [["run", "--enable-webhooks", "false"], ["plan", "-f", str(SAMPLE_FILE)], ["status"]],
    ids=["run", "plan", "status"],
)
def test_a_huge_kubeconfig_is_refused_unread(tmp_path: Path, command: list[str]) -> None:
    huge = tmp_path / "huge.kubeconfig"
    with huge.open("wb") as f:  # sparse: its size, not its bytes, is what is refused
        f.truncate(HUGE_KUBECONFIG)
    done = subprocess.run(
        ["/usr/bin/time", "-f", "maxrss_kib=%M", sys.executable, "-m", "linkerd_config",
         *command, "--kubeconfig", str(huge)],
        env=bare_environment(tmp_path), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done
    *lines, rss = [
        line for line in done.stderr.strip().splitlines() if not line.startswith("Command exited")
    ]
    assert len(lines) == 1 and "is larger than 16 MiB" in lines[0], done.stderr
    assert int(rss.split("=")[1]) < 150 * 1024, rss  # the interpreter and its imports


@pytest.mark.parametrize(
    "command",
    [["plan", "-f", str(SAMPLE_FILE)], ["status"], ["run"]],
    ids=["plan", "status", "run"],
)
def test_a_usage_error_exits_1_not_2(tmp_path: Path, command: list[str]) -> None:
    """Issue 39, finding 6: ``plan`` and ``status`` exit 2 for "changes" / "not converged";
    a usage error exited 2 too (argparse's)."""
    done = subprocess.run(
        [sys.executable, "-m", "linkerd_config", *command, "--no-such-flag"],
        env=bare_environment(tmp_path), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done
    assert "--no-such-flag" in done.stderr, done.stderr
