"""A hostile ``linkerd-config`` on the local control plane (issue 22, finding 1).

Linkerd edge-26.8.3's own ConfigMaps are installed, the controller runs as a process with its
webhooks registered on the API server and its health server, and a LinkerdConfig manages the
ConfigMap (a debug image name with a newline is refused by the webhook, naming the field:
finding 3). Then someone with edit rights writes a "billion laughs" into ``values`` (11 levels
of 9 aliases, ~8.5 KB: before the fix, ~70 s of the event loop comparing the alias graph as a
tree, and the bomb written back). Rewritten again and again, so the controller is reconciling
it throughout, while ``/healthz`` and an admission review through the API server must keep
answering, each within its request's timeout (``PROBE_TIMEOUT``; the bug held the loop ~70 s).
Their latencies are printed, not asserted: speed lives in ``make bench``, never in a test.
The ConfigMap keeps exactly what was written (never the bomb written back), the
LinkerdConfig's status names the ConfigMap and key, and ``plan``/``status`` exit 1/2 naming
it, within a memory limit. A key written twice into ``values`` is refused the same way, never
resolved (finding 4).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from devcluster.cluster import LocalControlPlane, free_port
from linkerd_config.kube.certs import write_serving_pair
from linkerd_config.kube.client import MERGE_PATCH, ApiError, KubeClient
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.resource import CONFIGMAPS, EVENTS, NAMESPACES
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import scenario, webhooks_on
from tests.support.hostile import bombed_values, installed_values
from tests.support.run_process import RunProcess
from tests.support.samples import modern_install
from tests.support.waiting import eventually
from tests.support.webhook_probe import webhook_in_effect

pytestmark = pytest.mark.integration

Obj = dict[str, Any]
CM_PATH = CONFIGMAPS.path("linkerd", "linkerd-config")
VALUES_AT = "ConfigMap linkerd/linkerd-config, key values"
PROBE_TIMEOUT = 30.0
"""Each /healthz and admission review must answer within this (before the fix the bomb held
the event loop for about 70 s)."""
ROUNDS = 20
MEMORY_LIMIT = 2 << 30
"""Address space allowed to ``plan``/``status`` (before the fix ``plan`` grew to 3.6 GB)."""


def linkerdconfig(name: str, **global_: Any) -> Obj:
    spec: Obj = {"proxy": {"proxyVersion": "edge-26.8.4", "logLevel": "debug"}}
    if global_:
        spec["global"] = global_
    return {
        "apiVersion": "config.linkerd.io/v1alpha1",
        "kind": "LinkerdConfig",
        "metadata": {"name": name},
        "spec": spec,
    }


def controller_argv(kubeconfig: Path, certs: Path, health: int, webhook: int) -> list[str]:
    """``linkerd-config run``: webhooks on, health server on ``health``."""
    return [
        sys.executable, "-m", "linkerd_config", "run",
        "--kubeconfig", str(kubeconfig),
        "--health-probe-bind-address", f"127.0.0.1:{health}",
        "--metrics-bind-address", "127.0.0.1:0",
        "--leader-elect", "false",
        "--enable-webhooks", "true",
        "--webhook-cert-dir", str(certs),
        "--webhook-bind-address", f"127.0.0.1:{webhook}",
    ]  # fmt: skip


@contextlib.contextmanager
def controller(kubeconfig: Path, certs: Path, health: int, webhook: int) -> Iterator[RunProcess]:
    process = RunProcess(controller_argv(kubeconfig, certs, health, webhook), dict(os.environ))
    try:
        yield process
    finally:
        if process.proc.poll() is None:
            process.stop()


async def timed_healthz(http: aiohttp.ClientSession, url: str) -> float:
    started = time.perf_counter()
    async with http.get(url, timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT)) as resp:
        assert resp.status == 200, resp.status
        await resp.read()
    return time.perf_counter() - started


async def timed_admission(kube: KubeClient, round_: int) -> float:
    """A server-side dry-run create: the API server calls both webhooks and stores nothing.
    The object manages another ConfigMap, so it is admitted."""
    probe = linkerdconfig(f"probe-{round_}", configMap=f"probe-{round_}")
    started = time.perf_counter()
    created = await asyncio.wait_for(
        kube.request(
            "POST", LINKERD_CONFIGS.path(), params={"dryRun": "All"}, body=probe, fenced=False
        ),
        PROBE_TIMEOUT,
    )
    elapsed = time.perf_counter() - started
    # The mutating webhook answered: it filled in the namespace the spec left out.
    assert created["spec"]["global"]["linkerdNamespace"] == "linkerd", created
    return elapsed


async def ready(kube: KubeClient, name: str, status: str, reason: str) -> Obj | None:
    cond = await scenario.condition(kube, name, "Ready")
    return cond if (cond.get("status"), cond.get("reason")) == (status, reason) else None


def limited_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def inspect(kubeconfig: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "linkerd_config", *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=limited_memory,
    )
    return done, time.monotonic() - started


async def test_an_alias_bomb_in_values_is_refused_while_health_and_admission_keep_answering(
    private_control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    cp = private_control_plane
    access = await load_access(str(cp.kubeconfig))
    async with KubeClient(access, user_agent="hostile-configmap-test") as kube:
        await scenario.install_crd(kube)
        await scenario.create(kube, NAMESPACES.path(), {"metadata": {"name": "linkerd"}})
        for configmap in modern_install():
            await scenario.create(kube, CONFIGMAPS.path("linkerd"), configmap)

        certs = tmp_path / "certs"
        ca_pem = write_serving_pair(certs, ["localhost"], ["127.0.0.1"])
        health, webhook = free_port(), free_port()
        healthz = f"http://127.0.0.1:{health}/healthz"
        with controller(cp.kubeconfig, certs, health, webhook) as process:
            async with (
                webhooks_on.registered(kube, ca_pem, webhook),
                aiohttp.ClientSession() as http,
            ):
                await eventually(lambda: webhook_in_effect(kube), timeout=60, what="webhooks")
                # Finding 3 through the API server: the debug image's name is checked too, by
                # the schema now (the field table's image grammar), before the webhook.
                hostile = linkerdconfig("debug-image")
                hostile["spec"]["proxy"]["debugImage"] = {"name": "gcr.io/linkerd-io/debug\n"}
                with pytest.raises(ApiError) as refused_name:
                    await kube.request(
                        "POST",
                        LINKERD_CONFIGS.path(),
                        params={"dryRun": "All"},
                        body=hostile,
                        fenced=False,
                    )
                assert refused_name.value.status == 422, refused_name.value
                assert "spec.proxy.debugImage.name: Invalid value" in (
                    refused_name.value.message
                ), refused_name.value
                await scenario.create(kube, LINKERD_CONFIGS.path(), linkerdconfig("modern"))
                await eventually(
                    lambda: ready(kube, "modern", "True", "Ready"), timeout=60, what="Ready"
                )
                written = (await kube.request("GET", CM_PATH))["data"]["values"]
                assert yaml.safe_load(written)["proxy"]["logLevel"] == "debug"

                # Someone with edit rights writes the bomb, again and again (each a new text,
                # so each is a new reconcile), while health and admission are timed.
                health_times, admission_times = [], []
                for round_ in range(ROUNDS):
                    bomb = bombed_values(11) + f"# round {round_}\n"
                    await kube.request(
                        "PATCH",
                        CM_PATH,
                        body={"data": {"values": bomb}},
                        content_type=MERGE_PATCH,
                        fenced=False,
                    )
                    health_times.append(await timed_healthz(http, healthz))
                    admission_times.append(await timed_admission(kube, round_))
                    await asyncio.sleep(0.05)
                refused = await eventually(
                    lambda: ready(kube, "modern", "False", "InstalledConfigUnreadable"),
                    timeout=30,
                    what="Ready=False InstalledConfigUnreadable",
                )
                print(
                    f"\n/healthz: max {max(health_times) * 1000:.1f} ms; admission review: "
                    f"max {max(admission_times) * 1000:.1f} ms ({ROUNDS} rounds)"
                )
                # Every round's /healthz answered 200 and its admission review was mutated
                # (timed_healthz, timed_admission), each within PROBE_TIMEOUT.
                assert len(health_times) == len(admission_times) == ROUNDS
                assert refused["message"].startswith(f"{VALUES_AT}: line "), refused
                assert "a YAML anchor (&l0)" in refused["message"], refused

                # Never written back: the ConfigMap holds exactly the last text written.
                await asyncio.sleep(1)
                after = await kube.request("GET", CM_PATH)
                assert after["data"]["values"] == bomb
                events = await kube.request(
                    "GET",
                    EVENTS.path(),
                    params={"fieldSelector": "reason=InstalledConfigUnreadable"},
                )
                assert any(VALUES_AT in e["message"] for e in events["items"]), events

                # plan and status say the same, quickly and in bounded memory.
                plan_file = tmp_path / "modern.yaml"
                plan_file.write_text(yaml.safe_dump(linkerdconfig("modern")))
                planned, took = await asyncio.to_thread(
                    inspect, cp.kubeconfig, "plan", "-f", str(plan_file)
                )
                assert planned.returncode == 1, planned
                assert "(InstalledConfigUnreadable)" in planned.stdout, planned
                assert VALUES_AT in planned.stdout, planned
                assert took < 60, took
                stated, took = await asyncio.to_thread(inspect, cp.kubeconfig, "status")
                assert stated.returncode == 2, stated
                assert VALUES_AT in stated.stdout, stated

                # A key twice (finding 4): refused naming the ConfigMap, never resolved.
                twice = installed_values() + "linkerdVersion: edge-1.0.0\n"
                await kube.request(
                    "PATCH",
                    CM_PATH,
                    body={"data": {"values": twice}},
                    content_type=MERGE_PATCH,
                    fenced=False,
                )

                async def duplicate_reported() -> Obj | None:
                    cond = await ready(kube, "modern", "False", "InstalledConfigUnreadable")
                    return cond if cond and "appears twice" in cond["message"] else None

                cond = await eventually(duplicate_reported, timeout=30, what="key twice refused")
                assert cond["message"].startswith(f"{VALUES_AT}: line "), cond
                assert "spec.global.version" not in cond["message"], cond
                assert "spec.values.linkerdVersion" not in cond["message"], cond
                assert (await kube.request("GET", CM_PATH))["data"]["values"] == twice

                # Linkerd's own values back: the controller applies the LinkerdConfig again.
                await kube.request(
                    "PATCH",
                    CM_PATH,
                    body={"data": {"values": installed_values()}},
                    content_type=MERGE_PATCH,
                    fenced=False,
                )
                await eventually(
                    lambda: ready(kube, "modern", "True", "Ready"), timeout=60, what="Ready again"
                )
            code = process.stop()
        output = "\n".join(process.lines)
        assert code == 0, output
        assert "Traceback" not in output, output
