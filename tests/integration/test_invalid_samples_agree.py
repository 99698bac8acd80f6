"""``linkerd-config plan -f`` refuses exactly what ``kubectl apply`` refuses, on the samples:
every sample under tests/fixtures/samples/invalid/ is refused by both, each naming a field its
first line names; the two valid samples are accepted by both.

Both run as users run them (the command and kubectl, processes of their own) against a control
plane of the test's own: the CRD, Linkerd edge-19.12.1's linkerd-config ConfigMap, and our
webhooks registered and served (``failurePolicy: Fail`` for every LinkerdConfig, which is why
no other test may share this cluster).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from devcluster.cluster import LocalControlPlane
from linkerd_config.kube.admission import AdmissionServer, ReloadingCertificate
from linkerd_config.kube.certs import write_serving_pair
from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.informer import Informer
from linkerd_config.kube.resource import (
    MUTATING_WEBHOOK_CONFIGURATIONS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
)
from linkerd_config.linkerd.admission.webhooks import register, webhook_configurations
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import scenario
from tests.support.commands import cli
from tests.support.samples import INVALID, SAMPLES, why_invalid
from tests.support.waiting import eventually
from tests.support.webhook_probe import webhook_in_effect

VALID = sorted(SAMPLES.glob("edge_19.12.3*.yaml"))
PLAN_INVALID = 1
"""``plan``'s exit code for a LinkerdConfig it refuses (as for a command that fails)."""


def named_fields(path: Path) -> list[str]:
    """The fields a sample's first line names."""
    return re.findall(r"spec\.[A-Za-z0-9_.\[\]]*[A-Za-z0-9_\]]", why_invalid(path))


@pytest.fixture
async def cluster(
    own_control_plane: LocalControlPlane,
    own_kube: KubeClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[LocalControlPlane]:
    """``own_control_plane`` with the CRD, Linkerd edge-19.12.1's ConfigMap and our webhooks."""
    kube = own_kube
    await scenario.install_crd(kube)
    await scenario.install_linkerd_edge_19_12_1(kube)
    cert_dir = tmp_path_factory.mktemp("agree-webhook-certs")
    ca_pem = write_serving_pair(cert_dir, ["localhost"], ["127.0.0.1"])
    informer = Informer(kube, LINKERD_CONFIGS, name="agree-test-configs")
    informer_task = asyncio.create_task(informer.run(), name="agree-test-informer")
    server = AdmissionServer(
        "127.0.0.1", 0, ReloadingCertificate(cert_dir / "tls.crt", cert_dir / "tls.key")
    )
    register(server, SimpleNamespace(configs=informer))
    server_task = asyncio.create_task(server.run(), name="agree-test-server")
    try:
        await informer.wait_synced(30)
        await asyncio.wait_for(server.started.wait(), 10)
        configurations = webhook_configurations(
            ca_pem, url_base=f"https://127.0.0.1:{server.bound_port}"
        )
        paths = (MUTATING_WEBHOOK_CONFIGURATIONS.path(), VALIDATING_WEBHOOK_CONFIGURATIONS.path())
        for configuration, path in zip(configurations, paths, strict=True):
            await kube.request("POST", path, body=configuration, fenced=False)
        await eventually(lambda: webhook_in_effect(kube), timeout=30, what="webhooks in effect")
        yield own_control_plane
    finally:
        for task in (server_task, informer_task):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def kubectl_apply(cp: LocalControlPlane, path: Path) -> tuple[int, str]:
    """``kubectl apply --dry-run=server -f path``: its exit code and output."""
    proc = await asyncio.create_subprocess_exec(
        str(cp.binary("kubectl")),
        "--kubeconfig",
        str(cp.kubeconfig),
        "apply",
        "--dry-run=server",
        "-f",
        str(path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def plan_of(cp: LocalControlPlane, path: Path) -> tuple[int, bool, str]:
    """``linkerd-config plan -f path -o json``: exit code, whether it is valid, and what it
    says (its error, or the whole answer)."""
    code, out, err = await cli(cp.kubeconfig, "plan", "-f", str(path), "-o", "json")
    try:
        found = json.loads(out)
    except ValueError:
        return code, False, f"not JSON: {out!r} {err!r}"
    error = found.get("error") or {}
    said = f"{error.get('reason')}: {error.get('message')}" if error else json.dumps(found)
    return code, bool(found.get("valid")), said


async def test_plan_and_kubectl_apply_agree_on_every_sample(cluster: LocalControlPlane) -> None:
    problems: list[str] = []

    async def one(path: Path, should_refuse: bool) -> None:
        (apply_code, applied), (plan_code, valid, planned) = await asyncio.gather(
            kubectl_apply(cluster, path), plan_of(cluster, path)
        )
        where = f"{path.name}:\n  kubectl ({apply_code}): {applied.strip()}\n"
        where += f"  plan ({plan_code}): {planned}"
        if not should_refuse:
            if apply_code != 0 or not valid or plan_code not in (0, 2):
                problems.append(f"valid sample not accepted by both: {where}")
            return
        if apply_code == 0 or valid or plan_code != PLAN_INVALID:
            problems.append(f"invalid sample not refused by both: {where}")
            return
        fields = named_fields(path)
        both = [f for f in fields if f in applied and f in planned]
        if not both:
            problems.append(f"no field of {fields} named by both: {where}")

    for path in INVALID:
        await one(path, should_refuse=True)
    for path in VALID:
        await one(path, should_refuse=False)
    assert VALID and INVALID
    assert not problems, "\n".join(problems)
