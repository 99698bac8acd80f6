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

import copy
import json
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from linkerd_config.devcluster.cluster import ControlPlaneOptions, LocalControlPlane
from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.resource import CONFIGMAPS
from linkerd_config.linkerd.api_conversion import VALUES_ANNOTATION, convert
from linkerd_config.linkerd.linkerdconfig_resource import (
    CONVERSION_REFUSAL,
    LINKERD_CONFIGS,
    LINKERD_CONFIGS_V1ALPHA1,
)
from tests.support import scenario
from tests.support.local_run import (
    REPO,
    Shell,
    guide_commands,
    interrupt,
    started,
    v1alpha1_rules,
)
from tests.support.samples import SAMPLES, load
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

SEED = SAMPLES / "edge_19.12.3.yaml"
SEED_V1ALPHA2 = REPO / "manifests" / "samples" / "v1alpha2" / "edge_19.12.3.yaml"
Json = dict[str, Any]


def test_the_guide_block_is_the_2019_readme_steps() -> None:
    install, run, apply, get = guide_commands()
    assert (install, run) == ("make install", "ENABLE_WEBHOOKS=false make run")
    assert apply == "kubectl apply -f manifests/samples/edge_19.12.3.yaml"
    assert get.startswith("kubectl get linkerdconfigs.v1alpha1.config.linkerd.io edge-19.12.3")


@pytest.fixture
def cluster() -> Iterator[LocalControlPlane]:
    with LocalControlPlane(ControlPlaneOptions(workloads=True)) as cp:
        yield cp


@pytest.fixture
async def kube(cluster: LocalControlPlane) -> AsyncIterator[KubeClient]:
    access = await load_access(str(cluster.kubeconfig))
    async with KubeClient(access, user_agent="linkerd-config-tests") as client:
        yield client


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
    cp: LocalControlPlane, kube: KubeClient, sample: Path, get: str
) -> tuple[Json, Shell]:
    """The guide's block with ``sample`` applied and ``get`` to read it back; returns what
    ``get`` printed. Linkerd edge-19.12.1, its workloads and the real injector first."""
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
            shell.run(f"kubectl apply -f {sample}")
            await eventually(
                lambda: seed_rolled(kube), timeout=240, interval=1, what="the seed rolled"
            )
            shown = yaml.safe_load(shell.run(get).stdout)
        finally:
            code, out = interrupt(controller)
        assert code in (0, 130, -signal.SIGINT), out
        records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert any(r.get("event") == "conversion registered" for r in records), out[-3000:]
        assert not [r for r in records if r.get("level") == "error"], out[-3000:]
    # Stopped: the refusal is back, so a v1alpha1 write says what to do again.
    assert await v1alpha1_rules(kube) == [CONVERSION_REFUSAL]
    return shown, shell


async def test_the_2019_readme_steps_with_the_seed_v1alpha1_sample(
    cluster: LocalControlPlane, kube: KubeClient
) -> None:
    *_, get = guide_commands()
    seed = load(SEED)
    shown, _ = await local_run(cluster, kube, SEED, get)
    assert shown["apiVersion"] == "config.linkerd.io/v1alpha1"
    assert shown["spec"] == seed["spec"]  # accepted as it is, nothing lost
    assert VALUES_ANNOTATION not in (shown["metadata"].get("annotations") or {})
    # Stored as v1alpha2, as the webhook-served CRD stores it.
    stored = await kube.request("GET", LINKERD_CONFIGS.path(name="edge-19.12.3"))
    assert stored["spec"] == convert(seed, "v1alpha2")["spec"]
    conditions = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
    assert conditions["Ready"] == "True", stored["status"]


async def test_the_same_steps_with_the_v1alpha2_sample(
    cluster: LocalControlPlane, kube: KubeClient
) -> None:
    sample = load(SEED_V1ALPHA2)
    name = sample["metadata"]["name"]
    shown, shell = await local_run(
        cluster, kube, SEED_V1ALPHA2, f"kubectl get linkerdconfig {name} -o yaml"
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
