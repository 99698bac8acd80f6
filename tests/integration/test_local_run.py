"""The original project's local run, exactly as the user guide's local-run block has it (the
2019 README's steps): ``make install``, ``ENABLE_WEBHOOKS=false make run`` (the Makefile
target, a process of its own), ``kubectl apply -f`` the seed's unchanged sample, ``kubectl
get`` it back. Each test on an API server of its own, with KCM, the scheduler, kwok and
Linkerd's real edge-19.12.3 injector over edge-19.12.1's ConfigMap and the README's workloads.

The commands run in the repository with the test's cluster in ``KUBECONFIG`` and the test's
kubectl first on ``PATH``; the controller's ports are free ones (``*_BIND_ADDRESS``), so that
nothing else on the machine is in the way. Nothing else is added to what a user types.
"""

from __future__ import annotations

import asyncio
import copy
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml

from devcluster.cluster import LocalControlPlane
from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.resource import CONFIGMAPS, CRDS, NAMESPACES
from linkerd_config.linkerd.spec.conversion import VALUES_ANNOTATION, convert
from linkerd_config.linkerd.spec.crd import (
    CONVERSION_REFUSAL,
    LINKERD_CONFIGS,
    LINKERD_CONFIGS_V1ALPHA1,
)
from linkerd_config.settings import parse
from tests.support import scenario
from tests.support.local_run import (
    REPO,
    Shell,
    guide_commands,
    interrupt,
    records_of,
    started,
    stopped_gracefully,
    v1alpha1_rules,
)
from tests.support.samples import load
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

SEED = REPO / "manifests" / "samples" / "edge_19.12.3.yaml"  # the seed's, unchanged
SEED_V1ALPHA2 = REPO / "manifests" / "samples" / "v1alpha2" / "edge_19.12.3.yaml"
Json = dict[str, Any]


def test_the_guide_block_is_the_2019_readme_steps() -> None:
    install, run, apply, get = guide_commands()
    assert (install, run) == ("make install", "ENABLE_WEBHOOKS=false make run")
    assert apply == "kubectl apply -f manifests/samples/edge_19.12.3.yaml"
    assert get.startswith("kubectl get linkerdconfigs.v1alpha1.config.linkerd.io edge-19.12.3")


async def seed_rolled(kube: KubeClient) -> bool:
    """The seed scenario reconciled: the ConfigMap on edge-19.12.3 and every opted-in
    workload's pods injected by the real injector with the new proxy."""
    cm = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
    if '"proxyVersion":"edge-19.12.3"' not in cm["data"]["proxy"]:
        return False
    pods = await scenario.running_pods(kube, scenario.EMOJIVOTO)
    images = {p["metadata"]["labels"]["app"]: scenario.readme_check(p) for p in pods}
    return all(images.get(a) == scenario.NEW_PROXY_IMAGE for a in scenario.OPTED_IN) and (
        images.get(scenario.NOT_OPTED_IN) == scenario.OLD_PROXY_IMAGE
    )


async def local_run(
    cp: LocalControlPlane, kube: KubeClient, apply: str, get: str
) -> tuple[Json, Shell]:
    """The guide's block, its ``apply`` and ``get`` lines as given (the guide's own, or the
    same for the v1alpha2 sample); returns what ``get`` printed. Linkerd edge-19.12.1, its
    workloads and the real injector first."""
    install, run, _, _ = guide_commands()
    await scenario.install_linkerd_edge_19_12_1(kube)
    async with scenario.linkerd_injector(cp):
        await scenario.install_workloads(kube)
        await scenario.wait_settled(kube, scenario.EMOJIVOTO, expected=8)
        shell = Shell(cp)
        shell.run(install)

        # No controller yet: a v1alpha1 write is refused in one line saying what to do.
        refused = shell.run(f"kubectl apply -f {SEED}", check=False)
        assert refused.returncode != 0
        assert CONVERSION_REFUSAL["message"] in refused.stderr.replace("\n", " "), refused.stderr
        assert "\n" not in refused.stderr.strip(), refused.stderr

        controller = await started(shell, run)
        try:
            assert await v1alpha1_rules(kube) == []  # the refusal taken off while it serves
            shell.run(apply)
            await eventually(
                lambda: seed_rolled(kube), timeout=240, interval=1, what="the seed rolled"
            )
            shown = yaml.safe_load(shell.run(get).stdout)
        finally:
            code, out = interrupt(controller)
        stopped_gracefully(code, out)
        records = records_of(out)
        assert any(r.get("msg") == "conversion registered" for r in records), out[-3000:]
        assert not [r for r in records if r.get("level") == "error"], out[-3000:]
    # Stopped: the refusal is back, so a v1alpha1 write says what to do again.
    assert await v1alpha1_rules(kube) == [CONVERSION_REFUSAL]
    return shown, shell


async def test_the_2019_readme_steps_with_the_seed_v1alpha1_sample(
    own_control_plane: LocalControlPlane, own_kube: KubeClient
) -> None:
    *_, apply, get = guide_commands()
    seed = load(SEED)
    kube = own_kube
    shown, _ = await local_run(own_control_plane, kube, apply, get)
    assert shown["apiVersion"] == "config.linkerd.io/v1alpha1"
    assert shown["spec"] == seed["spec"]  # accepted as it is, nothing lost
    assert VALUES_ANNOTATION not in (shown["metadata"].get("annotations") or {})
    # Stored as v1alpha2, as the webhook-served CRD stores it.
    stored = await kube.request("GET", LINKERD_CONFIGS.path(name="edge-19.12.3"))
    assert stored["spec"] == convert(seed, "v1alpha2")["spec"]
    conditions = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
    assert conditions["Ready"] == "True", stored["status"]


async def test_the_same_steps_with_the_v1alpha2_sample(
    own_control_plane: LocalControlPlane, own_kube: KubeClient
) -> None:
    sample = load(SEED_V1ALPHA2)
    name = sample["metadata"]["name"]
    kube = own_kube
    shown, shell = await local_run(
        own_control_plane,
        kube,
        f"kubectl apply -f {SEED_V1ALPHA2.relative_to(REPO)}",
        f"kubectl get linkerdconfig {name} -o yaml",
    )
    assert shown["apiVersion"] == "config.linkerd.io/v1alpha2"
    assert shown["spec"] == sample["spec"]
    # With the controller stopped v1alpha2 still reads and writes (no converter needed) ...
    again = copy.deepcopy(shown)
    again["metadata"].setdefault("labels", {})["touched"] = "after-stop"
    await kube.request("PUT", LINKERD_CONFIGS.path(name=name), body=again, fenced=False)
    # ... and v1alpha1 is refused in one line, not half-read.
    with pytest.raises(ApiError) as refused:
        v1 = convert(sample, "v1alpha1")
        v1["metadata"] = {"name": "another"}
        await kube.request("POST", LINKERD_CONFIGS_V1ALPHA1.path(), body=v1, fenced=False)
    assert CONVERSION_REFUSAL["message"] in refused.value.message
    assert shell.ready() is False


# -- seams: a killed run, a CRD that is not the local one, an API server that cannot reach us --


@pytest.fixture
async def bare_kube(private_control_plane: LocalControlPlane) -> AsyncIterator[KubeClient]:
    """An API server of its own with Linkerd's namespace (where the run's Lease goes)."""
    access = await load_access(str(private_control_plane.kubeconfig))
    async with KubeClient(access, user_agent="linkerd-config-tests") as client:
        await scenario.create(client, NAMESPACES.path(), {"metadata": {"name": "linkerd"}})
        yield client


async def _v1alpha1_write(kube: KubeClient, name: str) -> None:
    obj = load(SEED)
    obj["metadata"] = {"name": name}
    await kube.request("POST", LINKERD_CONFIGS_V1ALPHA1.path(), body=obj, fenced=False)


async def test_a_killed_run_then_a_new_one(
    private_control_plane: LocalControlPlane, bare_kube: KubeClient
) -> None:
    """kill -9 skips the stop path: the CRD keeps pointing at a dead port (a v1alpha1 write
    then fails with the API server's own error, no refusal); the next run takes over."""
    cp, kube = private_control_plane, bare_kube
    install, run, *_ = guide_commands()
    shell = Shell(cp)
    shell.run(install)
    first = await started(shell, run)
    await _v1alpha1_write(kube, "before-kill")
    os.killpg(first.pid, signal.SIGKILL)
    first.communicate(timeout=30)
    with pytest.raises(ApiError) as dead:
        await _v1alpha1_write(kube, "while-dead")
    assert "conversion webhook" in dead.value.message
    assert await v1alpha1_rules(kube) == []

    # New ports, a new CA. It leads (and registers) once the dead run's Lease has expired;
    # until then it follows, Ready, and v1alpha1 waits.
    second = await started(Shell(cp), run)
    try:

        async def written() -> bool:
            try:
                await _v1alpha1_write(kube, "after-restart")
            except ApiError as exc:
                if "conversion webhook" in exc.message:
                    return False
                raise
            return True

        lease = parse([], env={}).lease_duration
        await eventually(written, timeout=lease + 30, interval=0.5, what="taken over")
        listed = await kube.request("GET", LINKERD_CONFIGS_V1ALPHA1.path())
        assert {o["metadata"]["name"] for o in listed["items"]} == {"before-kill", "after-restart"}
    finally:
        code, out = interrupt(second)
    stopped_gracefully(code, out)
    assert await v1alpha1_rules(kube) == [CONVERSION_REFUSAL]


async def test_a_crd_converted_by_the_in_cluster_service_is_left_alone(
    private_control_plane: LocalControlPlane, bare_kube: KubeClient
) -> None:
    """`make deploy`'s CRD (its converter the webhook Service): a local run with the webhooks
    off changes nothing on it, says so, and is Ready."""
    cp, kube = private_control_plane, bare_kube
    shell = Shell(cp)
    shell.run("kubectl apply -k manifests/crd")
    before = await kube.request("GET", CRDS.path(name=str(LINKERD_CONFIGS)))
    proc = await started(shell, "ENABLE_WEBHOOKS=false make run")
    code, out = interrupt(proc)
    after = await kube.request("GET", CRDS.path(name=str(LINKERD_CONFIGS)))
    assert after["spec"] == before["spec"]  # (the API server's own status writes may come)
    assert after["metadata"]["annotations"] == before["metadata"]["annotations"]
    assert any("not a local run's" in str(r.get("msg")) for r in records_of(out)), out[-3000:]
    stopped_gracefully(code, out)


async def test_an_api_server_that_cannot_reach_the_run(
    private_control_plane: LocalControlPlane, bare_kube: KubeClient
) -> None:
    """--conversion-url names an address nothing listens on (another loopback address than
    the one bound): the run says so in one error line, leaves the refusal, stays Ready, and
    reconciles v1alpha2 as usual."""
    cp, kube = private_control_plane, bare_kube
    shell = Shell(cp)
    port = shell.env["WEBHOOK_BIND_ADDRESS"].rpartition(":")[2]
    shell.env["CONVERSION_URL"] = f"https://127.0.0.2:{port}"
    shell.run("make install")
    proc = await started(shell, "ENABLE_WEBHOOKS=false make run")
    try:
        assert await v1alpha1_rules(kube) == [CONVERSION_REFUSAL]
        with pytest.raises(ApiError) as refused:
            await _v1alpha1_write(kube, "refused")
        assert CONVERSION_REFUSAL["message"] in refused.value.message
        up = load(SEED_V1ALPHA2)
        await kube.request("POST", LINKERD_CONFIGS.path(), body=up, fenced=False)
    finally:
        code, out = interrupt(proc)
    errors = [r for r in records_of(out) if r.get("level") == "error"]
    assert len(errors) == 1, out[-3000:]
    assert "cannot reach this process at https://127.0.0.2" in errors[0]["msg"]
    stopped_gracefully(code, out)


async def test_a_run_before_linkerd_is_installed_keeps_its_watches(
    private_control_plane: LocalControlPlane,
) -> None:
    """No `linkerd` namespace yet: every Lease request is refused (404), so no Lease exists to
    watch, but the API server answers; the run must not take that for a dead path and
    reconnect every watch each lease duration. Once the namespace exists it leads and
    registers the conversion."""
    cp = private_control_plane
    shell = Shell(cp)
    shell.run("make install")
    proc = shell.start("ENABLE_WEBHOOKS=false make run")
    try:
        # Longer than the silence that presumes a path dead (lease duration + 2 retries).
        settings = parse([], env={})
        await asyncio.sleep(settings.lease_duration + 3 * settings.retry_period)
        assert proc.poll() is None, "make run exited before linkerd existed"  # output below
        access = await load_access(str(cp.kubeconfig))
        async with KubeClient(access, user_agent="linkerd-config-tests") as kube:
            await scenario.create(kube, NAMESPACES.path(), {"metadata": {"name": "linkerd"}})

            async def registered() -> bool:
                return await v1alpha1_rules(kube) == []

            await eventually(registered, timeout=60, interval=0.5, what="registered")
    finally:
        code, out = interrupt(proc)
        print(out[-6000:])  # shown by pytest when the test fails
    stopped_gracefully(code, out)
    records = records_of(out)
    assert any(r.get("status") == 404 and r.get("msg") == "lease request failed" for r in records)
    silent = [
        r for r in records if "unreachable" in str(r.get("msg")) or "silent" in str(r.get("msg"))
    ]
    assert silent == [], silent
