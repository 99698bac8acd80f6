"""The first upgrade rolls back (issue 37, finding 6), in both formats with Linkerd's real
injectors: Linkerd installed (edge-19.12.1's ``global``/``proxy`` read by edge-19.12.3's
injector; edge-26.8.3's Helm ``values``), its opted-in pods meshed and healthy on it, then a
first LinkerdConfig for a newer proxy with ``onFailure: Rollback``, while a
ValidatingAdmissionPolicy refuses pods with the newer proxy in namespace ``fragile`` (real
creates only: the controller's dry-run question, asked in ``fragile``, is admitted, so
``fragile/a`` is restarted and the pods the restart makes are refused).

Before, the rollout failed at ``fragile/a`` and halted ("no earlier configuration of this
LinkerdConfig completed its rollout"), leaving the ConfigMap and ``fragile/a`` on the new
proxy. Now the LinkerdConfig records the installation it adopts (every opted-in pod ran it)
before its first write, and the failure rolls back to it: the ConfigMap holds what was
installed again, ``fragile/a`` is back on its previous ReplicaSet and healthy on the installed
proxy, ``steady/c`` is never touched.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import yaml

from devcluster.cluster import LocalControlPlane
from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.resource import CONFIGMAPS, DEPLOYMENTS, EVENTS, Json
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import commands, formats, scenario, webhooks_on
from tests.support.audit import received_at, successful_writes
from tests.support.formats import LEGACY, Format
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

NAME = "adopter"
FRAGILE, STEADY = "fragile", "steady"
ROLLOUT = {"onFailure": "Rollback", "maxRestartsPerPass": 1, "progressDeadline": "2m"}
AGENT = "linkerd-config/"


async def configmaps(kube: KubeClient) -> dict[str, Json]:
    found = (await kube.request("GET", CONFIGMAPS.path("linkerd")))["items"]
    return {cm["metadata"]["name"]: dict(cm.get("data") or {}) for cm in found}


def configuration(fmt: Format, data: dict[str, Json]) -> object:
    """What Linkerd's injector reads of the ConfigMaps, as the format writes it: the legacy
    keys byte for byte; the values as values (a rewrite may re-order them) and the trust
    roots."""
    if fmt is LEGACY:
        return {k: data["linkerd-config"][k] for k in ("global", "proxy")}
    return (
        yaml.safe_load(data["linkerd-config"]["values"]),
        data.get("linkerd-identity-trust-roots"),
    )


async def reason_is(kube: KubeClient, reason: str) -> Json | None:
    cond = await scenario.condition(kube, NAME, "DataPlaneUpToDate")
    return cond if cond.get("reason") == reason else None


@pytest.mark.parametrize("webhooks", ["webhooks-off", "webhooks-on"])
@pytest.mark.parametrize("fmt", formats.FORMATS, ids=formats.IDS)
async def test_the_first_upgrade_rolls_back_to_the_adopted_installation(
    own_control_plane: LocalControlPlane,
    own_kube: KubeClient,
    fmt: Format,
    webhooks: str,
    tmp_path: Path,
) -> None:
    cp, kube = own_control_plane, own_kube
    flags: tuple[str, ...] = ()
    serving: contextlib.AbstractAsyncContextManager[None] = contextlib.nullcontext()
    if webhooks == "webhooks-on":  # the LinkerdConfig defaulted and checked by ours
        flags, ca_pem, port = webhooks_on.serving(tmp_path / "certs")
    async with formats.installed(cp, kube, fmt):
        fragile = await scenario.meshed_namespace(kube, FRAGILE, ["a"], replicas=1)
        await scenario.meshed_namespace(kube, STEADY, ["c"], replicas=1)
        (installed_proxy,) = set(scenario.proxy_versions(fragile).values())
        assert installed_proxy is not None and installed_proxy != fmt.good
        before = configuration(fmt, await configmaps(kube))

        async with (
            scenario.proxy_refused(kube, FRAGILE, fmt.good, dry_runs=False),
            scenario.controller(cp, "adopter", *flags),
        ):
            if flags:
                serving = webhooks_on.in_effect(kube, ca_pem, port)
            async with serving:
                await scenario.apply_linkerdconfig(kube, NAME, fmt.spec(fmt.good, ROLLOUT))
                await adopted_and_rolled_back(cp, kube, fmt, before, installed_proxy)

        code, report = await commands.status_json(cp.kubeconfig)
        assert code == 2
        (mine,) = [r for r in report if r["linkerdConfig"] == NAME]
        assert mine["rolledBack"].startswith("rolled back to configuration ")
        assert mine["rolledBack"].endswith(f"(proxy {installed_proxy})")
        upcoming = mine["nextPass"]  # the controller's step on what status read
        assert (upcoming["phase"], upcoming["restarts"], upcoming["restores"]) == (
            "RolledBack",
            [],
            [],
        ), upcoming


async def adopted_and_rolled_back(
    cp: LocalControlPlane, kube: KubeClient, fmt: Format, before: object, installed_proxy: str
) -> None:
    """The failed first upgrade rolled back to the adopted installation, and only that."""
    done = await eventually(lambda: reason_is(kube, "RolledBack"), timeout=240, what="rolled back")
    lc = await kube.request("GET", LINKERD_CONFIGS.path(name=NAME))
    adopted = lc["status"]["lastCompleted"]
    assert adopted["generation"] == 0 and "spec" not in adopted
    assert set(adopted["installed"]) == {"data", "companions"}
    assert (
        f"rolled back to configuration {adopted['configHash']} (proxy "
        f"{installed_proxy})" in done["message"]
    )
    assert "deployment/fragile/a: new pods refused:" in done["message"]
    assert lc["status"]["configHash"] == adopted["configHash"]
    assert lc["status"]["rolloutHalt"]["rollback"]["phase"] == "RolledBack"
    assert lc["spec"]["proxy"]["proxyVersion"] == fmt.good  # the spec as written

    # What Linkerd reads is what was installed.
    assert configuration(fmt, await configmaps(kube)) == before
    pods = await scenario.wait_settled(kube, FRAGILE, expected=1)
    assert set(scenario.proxy_versions(pods).values()) == {installed_proxy}
    dep = await kube.request("GET", DEPLOYMENTS.path(FRAGILE, "a"))
    conditions = {c["type"]: c for c in dep["status"].get("conditions") or ()}
    assert conditions["Available"]["status"] == "True"
    assert "ReplicaFailure" not in conditions
    # One restart and one restore of fragile/a; steady/c never restarted.
    patched = [
        f"{ns}/{e['objectRef']['name']}"
        for ns in (FRAGILE, STEADY)
        for e in successful_writes(cp, "patch", "deployments", ns, AGENT)
        if received_at(e) > 0
    ]
    assert patched == ["fragile/a", "fragile/a"]
    said = (await kube.request("GET", EVENTS.path("default")))["items"]
    reasons = [e["reason"] for e in said if e["involvedObject"]["name"] == NAME]
    assert reasons[:1] == ["Adopted"]
    assert {"RollingBack", "RolledBack"} <= set(reasons)
