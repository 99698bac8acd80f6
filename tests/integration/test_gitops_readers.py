"""How GitOps tools read a LinkerdConfig, judged by their own code (issue 38): kstatus
(``sigs.k8s.io/cli-utils`` ``status.Compute``, what Helm 4's ``--wait`` reads), Flux's wait
(``github.com/fluxcd/pkg/ssa`` ``WaitForSetWithContext``, fail-fast, as kustomize-controller
runs it for ``wait: true``) and Argo CD's health (our ``health.lua`` under gopher-lua), all
built from their Go modules (``devcluster/status_readers.py``), on a control plane of the
test's own with the format's Linkerd and its real injector.

Each state is read by all three at the moment it is reached:

* a spec just applied (the API server's answer: a generation not yet observed): InProgress;
* a paced rollout (one restart per pass, 3 s apart): Flux's wait returns only once every
  opted-in pod runs the new proxy; then Current, Healthy;
* paused: InProgress (Flux waits out its timeout), Suspended;
* halted (a namespace refuses the new proxy's pods, ``onFailure: Halt``), and rolled back
  (a new configuration refused the same way, ``onFailure: Rollback``): Failed; Flux's wait
  fails at once, not at its timeout; Degraded.

And Linkerd's own CLI (edge-26.8.3, built here) with ``linkerd-config`` on PATH, as a
Linkerd user runs it: ``linkerd config status`` runs ours; ``linkerd check`` runs our checks
(category ``linkerd-config-controller``, read through Linkerd's own parser of extension
output): no error once the rollout is done, the halted rollout an error.

Legacy format with the webhooks off, values format with ours on: the conditions are the
controller's in both modes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devcluster.cluster import LocalControlPlane
from devcluster.linkerd_binaries import ensure_linkerd
from devcluster.status_readers import StatusReaders, ensure_status_readers
from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.resource import Json
from linkerd_config.linkerd.spec.crd import LINKERD_CONFIGS
from tests.support import formats, scenario, webhooks_on
from tests.support.formats import Format
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

NAME = "gitops"
PACED, FRAGILE = "paced", "fragile"
REPO = Path(__file__).resolve().parents[2]
HEALTH_LUA = REPO / "manifests" / "components" / "argocd-health" / "health.lua"
PACE = {"maxRestartsPerPass": 1, "restartInterval": "3s", "progressDeadline": "2m"}
FLUX_TIMEOUT = 240.0
CASES = [(formats.LEGACY, "webhooks-off"), (formats.VALUES, "webhooks-on")]


class Readers:
    """The three tools, each asked about the LinkerdConfig as stored now (or as given)."""

    def __init__(self, cp: LocalControlPlane, kube: KubeClient, folder: Path) -> None:
        self.tools = StatusReaders(ensure_status_readers())
        self.cp, self.kube, self.folder = cp, kube, folder
        self.seen: list[tuple[str, str, str]] = []

    async def read(self, what: str, obj: Json | None = None) -> tuple[str, str]:
        """kstatus's status and Argo CD's health of ``obj`` (by default, as stored now)."""
        if obj is None:
            obj = await self.kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
        path = self.folder / f"{len(self.seen):02d}-{what}.json"
        path.write_text(json.dumps(obj))
        kstatus = await asyncio.to_thread(self.tools.kstatus, path)
        health = await asyncio.to_thread(self.tools.argocd_health, HEALTH_LUA, path)
        self.seen.append((what, kstatus["status"], health["status"]))
        return kstatus["status"], health["status"]

    async def flux_wait(self, timeout: float = FLUX_TIMEOUT) -> dict[str, Any]:
        group, kind = LINKERD_CONFIGS.group, LINKERD_CONFIGS.kind
        return await asyncio.to_thread(
            self.tools.flux_wait, self.cp.kubeconfig, group, kind, NAME, timeout
        )


class LinkerdCli:
    """Linkerd's CLI with our ``linkerd-config`` (the installed console script) on PATH."""

    def __init__(self, cp: LocalControlPlane, folder: Path) -> None:
        self.binary = ensure_linkerd("edge-26.8.3", "linkerd")
        self.kubeconfig = cp.kubeconfig
        bin_dir = folder / "bin"
        bin_dir.mkdir()
        (bin_dir / "linkerd-config").symlink_to(Path(sys.executable).parent / "linkerd-config")
        self.env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(folder)}
        self.said: list[Json] = []
        """The last ``linkerd check``'s failing checks of ours, as printed."""

    async def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return await asyncio.to_thread(
            subprocess.run, [str(self.binary), *args], env=self.env, capture_output=True,
            text=True, timeout=240, check=False,
        )  # fmt: skip

    async def our_checks(self) -> tuple[int, dict[str, str]]:
        """``linkerd check -o json``: its exit code, and our category's checks (description
        -> result) as Linkerd printed them (one JSON document per category run)."""
        done = await self.run(
            "check", f"--kubeconfig={self.kubeconfig}", "--wait=5s", "--output=json"
        )
        found: dict[str, str] = {}
        decoder, text, at = json.JSONDecoder(), done.stdout, 0
        while (at := text.find("{", at)) >= 0:
            document, end = decoder.raw_decode(text, at)
            for category in document.get("categories") or ():
                if category["categoryName"] == "linkerd-config-controller":
                    found.update({c["description"]: c["result"] for c in category["checks"]})
                    self.said = [c for c in category["checks"] if c["result"] != "success"]
            at = end
        assert found, f"no linkerd-config-controller category:\n{done.stdout}\n{done.stderr}"
        return done.returncode, found


async def opted_in_proxies(kube: KubeClient) -> set[str | None]:
    found: set[str | None] = set()
    for namespace in (PACED, FRAGILE):
        found |= set(scenario.proxy_versions(await scenario.running_pods(kube, namespace)).values())
    return found


async def ready_reason(kube: KubeClient, reason: str) -> Json | None:
    cond = await scenario.condition(kube, NAME, "DataPlaneUpToDate")
    return cond if cond.get("reason") == reason else None


@pytest.mark.parametrize(("fmt", "webhooks"), CASES, ids=[f"{f.name}-{w}" for f, w in CASES])
async def test_kstatus_flux_and_argo_cd_read_each_state_of_a_rollout(
    own_control_plane: LocalControlPlane,
    own_kube: KubeClient,
    fmt: Format,
    webhooks: str,
    tmp_path: Path,
) -> None:
    cp, kube = own_control_plane, own_kube
    readers = Readers(cp, kube, tmp_path)
    linkerd_cli = LinkerdCli(cp, tmp_path)
    flags: tuple[str, ...] = ()
    serving: contextlib.AbstractAsyncContextManager[None] = contextlib.nullcontext()
    if webhooks == "webhooks-on":
        flags, ca_pem, port = webhooks_on.serving(tmp_path / "certs")
    async with formats.installed(cp, kube, fmt):
        await scenario.meshed_namespace(kube, PACED, ["a", "b", "c"], replicas=1)
        await scenario.meshed_namespace(kube, FRAGILE, ["f"], replicas=1)
        async with scenario.controller(cp, "gitops", *flags):
            if flags:
                serving = webhooks_on.in_effect(kube, ca_pem, port)
            async with serving:
                await states(kube, readers, fmt, linkerd_cli)
    assert [s[0] for s in readers.seen] == [
        "applied", "rolling", "done", "paused", "halted", "rolled-back",
    ]  # fmt: skip


async def states(kube: KubeClient, readers: Readers, fmt: Format, cli: LinkerdCli) -> None:
    # 1. A spec change is InProgress at once: the API server's own answer to the apply.
    applied = await scenario.apply_linkerdconfig(kube, NAME, fmt.spec(fmt.good, PACE))
    assert await readers.read("applied", applied) == ("InProgress", "Progressing")

    # 2. A paced rollout: InProgress while it rolls; Flux's wait returns once every opted-in
    # pod runs the new proxy, and only then.
    waiting = asyncio.create_task(readers.flux_wait())
    await eventually(lambda: ready_reason(kube, "RollingOut"), timeout=120, what="rolling")
    assert await readers.read("rolling") == ("InProgress", "Progressing")
    waited = await waiting
    assert waited["ready"] is True, waited
    assert await opted_in_proxies(kube) == {fmt.good}
    assert await readers.read("done") == ("Current", "Healthy")
    # Through Linkerd's CLI: `linkerd config status` is ours; `linkerd check` shows our
    # checks, none an error (the core checks of a Linkerd control plane this local one does
    # not run fail on their own: not ours to judge).
    said = await cli.run("config", "status", f"--kubeconfig={cli.kubeconfig}", "-o", "json")
    assert said.returncode == 0, said.stderr
    (mine,) = [r for r in json.loads(said.stdout) if r["linkerdConfig"] == NAME]
    assert mine["healthy"] is True and mine["proxyVersion"] == fmt.good
    _, ours = await cli.our_checks()
    assert "error" not in ours.values(), cli.said
    assert ours[f"LinkerdConfig {NAME}: no rollout halted or rolled back"] == "success"

    # 3. Paused: a hold a person chose. InProgress; Flux waits out its timeout; Suspended.
    await scenario.apply_linkerdconfig(kube, NAME, fmt.spec(fmt.broken, {**PACE, "paused": True}))
    await eventually(lambda: ready_reason(kube, "Paused"), timeout=60, what="paused")
    assert await readers.read("paused") == ("InProgress", "Suspended")
    held = await readers.flux_wait(timeout=6.0)
    assert held["ready"] is False and held["error"].startswith("timeout waiting for"), held

    # 4. Halted: the new proxy's pods refused in one namespace (real creates: the dry-run
    # question is admitted, so the restart happens and its pods are refused). Failed; Flux's
    # wait fails at once.
    async with scenario.proxy_refused(kube, FRAGILE, fmt.broken, dry_runs=False):
        await fails_fast(kube, readers, fmt, fmt.broken, "Halt", "RolloutHalted", "halted")
        code, ours = await cli.our_checks()
        assert code == 1
        assert ours[f"LinkerdConfig {NAME}: no rollout halted or rolled back"] == "error", cli.said
        assert ours[f"LinkerdConfig {NAME}: Ready"] == "error", ours
        said = await cli.run("config", "status", f"--kubeconfig={cli.kubeconfig}")
        assert said.returncode == 1 and "HALTED" in said.stdout, said  # ours exits 2

    # 5. Rolled back (a new attempt, onFailure: Rollback): the same, fail fast. A new attempt
    # is a new configuration (onFailure alone, a spec.rollout edit, is the same attempt, and
    # stays halted): the release after the broken one, refused in fragile too.
    head, _, last = fmt.broken.rpartition(".")
    retried = f"{head}.{int(last) + 1}"
    async with scenario.proxy_refused(kube, FRAGILE, retried, dry_runs=False):
        await fails_fast(kube, readers, fmt, retried, "Rollback", "RolledBack", "rolled-back")


async def fails_fast(
    kube: KubeClient,
    readers: Readers,
    fmt: Format,
    version: str,
    on_failure: str,
    reason: str,
    what: str,
) -> None:
    """Proxy ``version`` (refused) applied with ``onFailure``: Flux's wait fails at once
    (fail-fast, well before its timeout) on the rollout's failure (``reason``); kstatus
    Failed, Degraded."""
    spec = fmt.spec(version, {**PACE, "onFailure": on_failure})
    await scenario.apply_linkerdconfig(kube, NAME, spec)
    failed = await readers.flux_wait()
    assert failed["ready"] is False, failed
    assert failed["error"].startswith("failed early due to stalled resources"), failed
    assert failed["seconds"] < FLUX_TIMEOUT / 2, failed
    assert await ready_reason(kube, reason) is not None
    assert await readers.read(what) == ("Failed", "Degraded")
