"""A managed key deleted from ``linkerd-config`` comes back, and what the controller says names
fields as the object's writer does (issue 39, finding 6).

On a control plane of the test's own, with the format's Linkerd and its real injector, the
controller runs with its webhooks off and on:

* **Names.** Two LinkerdConfigs that cannot be written (they manage a ConfigMap that does not
  exist; the values one states no Linkerd version, the legacy one no trust anchor), one
  applied as v1alpha1 and one as v1alpha2: the Ready condition, the Warning Event, ``plan -f``
  and ``status`` name the field as its own version does (``spec.global.version`` for the
  v1alpha1 object, ``spec.values.linkerdVersion`` for the v1alpha2 one), never the other's.
  Before the fix, both said the storage version's name (the finding: a v1alpha1 object that
  never set it was asked for ``spec.values.linkerdVersion``).
* **Restore.** A v1alpha1 LinkerdConfig manages ``linkerd-config``; then someone deletes the
  key the format writes in place (``values``), or the one that declares the release in the
  legacy format (``global``): it is written back as it was, a ``ConfigMapReverted`` Event
  names the key, and Ready stays (or comes back) True. Before the fix the values format went
  ``Ready=False`` asking the v1alpha1 object for ``spec.values.linkerdVersion``, and nothing
  was restored.
* **The trust bundle.** In the values format, ``ca-bundle.crt`` deleted from
  ``linkerd-identity-trust-roots`` (the spec states no anchor: the key is not ours) is put
  back from its copy, and the copy keeps it. Before, the copy was overwritten with the
  key's absence -- the bundle's only copy lost -- and Ready stayed True.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.cluster import LocalControlPlane
from linkerd_config.kube.client import MERGE_PATCH, ApiError, KubeClient
from linkerd_config.kube.resource import CONFIGMAPS, EVENTS
from linkerd_config.linkerd.admission.validation import TRUST_ANCHOR
from linkerd_config.linkerd.configmap.desired import preserved_name
from linkerd_config.linkerd.formats.helm_values import TRUST_ROOTS_CONFIGMAP, TRUST_ROOTS_KEY
from linkerd_config.linkerd.formats.target_release import GLOBAL_VERSION
from linkerd_config.linkerd.spec.conversion import V1ALPHA2, convert, served_field
from linkerd_config.linkerd.spec.crd import LINKERD_CONFIGS as STORED
from linkerd_config.linkerd.spec.crd import LINKERD_CONFIGS_V1ALPHA1
from tests.support import formats, scenario, webhooks_on
from tests.support.formats import Format
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

Obj = dict[str, Any]
CM_PATH = CONFIGMAPS.path("linkerd", "linkerd-config")
CASES = webhooks_on.FORMAT_CASES
DELETED_KEY = {"legacy": "global", "values": "values"}
"""The key deleted: the one each format's release is declared in."""


def unwritable(fmt: Format, configmap: str) -> tuple[Obj, str]:
    """A v1alpha1 spec managing ``configmap``, which does not exist, so cannot be written,
    and the field (as the hub names it) the refusal names: the values one states no Linkerd
    version, the legacy one no trust anchor."""
    spec = fmt.spec(fmt.good, {})
    spec.setdefault("global", {})["configMap"] = configmap
    if fmt is formats.LEGACY:
        del spec["global"]["identityContext"]["trustAnchorsPEM"]
        return spec, TRUST_ANCHOR
    return spec, GLOBAL_VERSION


def v1alpha1(name: str, spec: Obj) -> Obj:
    return {
        "apiVersion": LINKERD_CONFIGS_V1ALPHA1.api_version,
        "kind": "LinkerdConfig",
        "metadata": {"name": name},
        "spec": spec,
    }


async def ready(kube: KubeClient, name: str) -> Obj:
    return await scenario.condition(kube, name, "Ready")


async def ready_is(kube: KubeClient, name: str, status: str, reason: str) -> Obj | None:
    cond = await ready(kube, name)
    current = cond.get("observedGeneration") == cond["generation"]
    return (
        cond if current and (cond.get("status"), cond.get("reason")) == (status, reason) else None
    )


async def events_of(kube: KubeClient, name: str, reason: str) -> list[str]:
    found = await kube.request(
        "GET",
        EVENTS.path(),
        params={"fieldSelector": f"involvedObject.name={name},reason={reason}"},
    )
    return [str(e["message"]) for e in found["items"]]


async def event_saying(kube: KubeClient, name: str, reason: str, text: str) -> list[str]:
    """The messages of ``name``'s ``reason`` Events once one says ``text``: the recorder
    posts its Events in batches, after the write they tell of."""
    said: list[str] = []

    async def posted() -> bool:
        said[:] = await events_of(kube, name, reason)
        return any(text in m for m in said)

    await eventually(posted, timeout=15, interval=0.2, what=f"a {reason} Event saying {text}")
    return said


def inspect(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "linkerd_config", *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(("fmt", "webhooks"), CASES)
async def test_a_deleted_key_comes_back_and_messages_name_the_writers_fields(
    own_control_plane: LocalControlPlane,
    own_kube: KubeClient,
    tmp_path: Path,
    fmt: Format,
    webhooks: bool,
) -> None:
    cp, kube = own_control_plane, own_kube
    async with (
        formats.installed(cp, kube, fmt),
        webhooks_on.controller(cp, kube, tmp_path / "certs", webhooks, "deleted-key"),
    ):
        # -- names, as each object's writer names them -----------------------------------
        spec, hub_field = unwritable(fmt, "absent-1")
        names = {"v1alpha1": hub_field, "v1alpha2": served_field(hub_field, V1ALPHA2)}
        assert names["v1alpha1"] != names["v1alpha2"], names
        first = v1alpha1("named-v1alpha1", spec)
        second = convert(v1alpha1("named-v1alpha2", unwritable(fmt, "absent-2")[0]), V1ALPHA2)
        await scenario.apply_linkerdconfig(kube, "named-v1alpha1", spec)
        await kube.request("POST", STORED.path(), body=second)
        files = {}
        for version, obj in (("v1alpha1", first), ("v1alpha2", second)):
            files[version] = tmp_path / f"{version}.yaml"
            files[version].write_text(yaml.safe_dump(obj))
        stated = await asyncio.to_thread(inspect, cp.kubeconfig, "status")
        for version, other in (("v1alpha1", "v1alpha2"), ("v1alpha2", "v1alpha1")):
            name = f"named-{version}"
            cond = await eventually(
                lambda name=name: ready_is(kube, name, "False", "InvalidConfig"),
                timeout=60,
                what=f"{name} refused",
            )
            said = {"Ready": cond["message"]}
            said["Event"] = "\n".join(
                await event_saying(kube, name, "InvalidConfig", f"{names[version]}:")
            )
            planned = await asyncio.to_thread(
                inspect, cp.kubeconfig, "plan", "-f", str(files[version])
            )
            said["plan"] = planned.stdout
            said["status"] = next(
                (n for n in stated.stdout.splitlines() if n.startswith(f'LinkerdConfig "{name}"')),
                "",
            )
            print(f"\n{name}: {said}")
            for where, text in said.items():
                assert f"{names[version]}:" in text, (where, names[version], text)
                assert names[other] not in text, (where, names[other], text)
            await kube.request("DELETE", STORED.path(name=name))

        # -- a deleted key comes back --------------------------------------------------------
        managed = fmt.spec(fmt.good, {})
        if fmt is formats.LEGACY:  # the cluster's anchor kept: only global holds it
            del managed["global"]["identityContext"]["trustAnchorsPEM"]
        await scenario.apply_linkerdconfig(kube, "managed", managed)
        await eventually(
            lambda: ready_is(kube, "managed", "True", "Ready"), timeout=120, what="managed Ready"
        )
        key = DELETED_KEY[fmt.name]
        written = (await kube.request("GET", CM_PATH))["data"]
        deleted = time.monotonic()
        await kube.request(
            "PATCH", CM_PATH, body={"data": {key: None}}, content_type=MERGE_PATCH, fenced=False
        )
        said: list[str] = []

        async def restored() -> bool:
            cond = await ready(kube, "managed")
            said.append(str(cond.get("message")))
            data = (await kube.request("GET", CM_PATH)).get("data") or {}
            return data.get(key) == written[key]

        await eventually(restored, timeout=30, interval=0.2, what=f"key {key} written back")
        took = time.monotonic() - deleted
        print(f"\n{fmt.name}: {key} back after {took:.1f}s")
        assert (await kube.request("GET", CM_PATH))["data"] == written
        await event_saying(kube, "managed", "ConfigMapReverted", f"keys {key}")
        await eventually(
            lambda: ready_is(kube, "managed", "True", "Ready"), timeout=60, what="Ready after"
        )
        assert not [m for m in said if "spec.values.linkerdVersion" in m], said

        # -- the trust bundle's key deleted from the trust roots -----------------------------
        if fmt is formats.LEGACY:
            return  # no trust-roots ConfigMap: the legacy format's anchor is in global
        roots_path = CONFIGMAPS.path("linkerd", TRUST_ROOTS_CONFIGMAP)
        copy_path = CONFIGMAPS.path("linkerd", preserved_name(TRUST_ROOTS_CONFIGMAP))
        trusted = (await kube.request("GET", roots_path))["data"][TRUST_ROOTS_KEY]
        await kube.request(
            "PATCH",
            roots_path,
            body={"data": {TRUST_ROOTS_KEY: None}},
            content_type=MERGE_PATCH,
            fenced=False,
        )

        async def bundle_back() -> bool:
            data = (await kube.request("GET", roots_path)).get("data") or {}
            return data.get(TRUST_ROOTS_KEY) == trusted

        await eventually(bundle_back, timeout=30, interval=0.2, what="the trust bundle put back")
        assert (await kube.request("GET", copy_path))["data"][TRUST_ROOTS_KEY] == trusted
        await event_saying(kube, "managed", "ConfigMapUpdated", TRUST_ROOTS_KEY)
        await eventually(
            lambda: ready_is(kube, "managed", "True", "Ready"), timeout=60, what="Ready after"
        )


@pytest.mark.parametrize("webhooks", [False, True], ids=["webhooks-off", "webhooks-on"])
async def test_a_configmap_made_again_by_a_reinstall_keeps_its_new_values(
    own_control_plane: LocalControlPlane, own_kube: KubeClient, tmp_path: Path, webhooks: bool
) -> None:
    """Issue 61, finding 2 (10 of 10 before): ``linkerd-config`` deleted and made again at
    once with new Helm values (a reinstall, ``helm upgrade --force``). The new values stand;
    only the keys the spec manages are ours (the proxy version). Before, the restore's create
    was refused as a conflict and our apply, with no precondition, put the preserved copy's
    old values back over the new ones. Helm's ``app.kubernetes.io/managed-by: Helm`` label
    stays, before and after (finding 9: it was rewritten to ``linkerd-config``)."""
    cp, kube, fmt = own_control_plane, own_kube, formats.VALUES
    helm = {"app.kubernetes.io/managed-by": "Helm"}
    async with (
        formats.installed(cp, kube, fmt),
        webhooks_on.controller(cp, kube, tmp_path / "certs", webhooks, "reinstalled"),
    ):
        await kube.request(
            "PATCH", CM_PATH, body={"metadata": {"labels": helm}}, content_type=MERGE_PATCH,
            params={"fieldManager": "helm"}, fenced=False,
        )  # fmt: skip
        await scenario.apply_linkerdconfig(kube, "reinstalled", fmt.spec(fmt.good, {}))
        await eventually(
            lambda: ready_is(kube, "reinstalled", "True", "Ready"), timeout=120, what="Ready"
        )
        before = await kube.request("GET", CM_PATH)
        assert before["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        values = yaml.safe_load(before["data"]["values"])
        assert values.get("clusterNetworks") != "10.99.0.0/16"
        values["clusterNetworks"] = "10.99.0.0/16"  # the reinstall's, not the spec's
        again = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "linkerd-config", "namespace": "linkerd", "labels": helm},
            "data": {**before["data"], "values": yaml.safe_dump(values)},
        }
        for _ in range(20):
            await kube.request("DELETE", CM_PATH, fenced=False)
            try:
                await kube.request("POST", CONFIGMAPS.path("linkerd"), body=again, fenced=False)
                break
            except ApiError as error:
                if error.status != 409:
                    raise
                # The controller's restore came between the two: the reinstall goes again.
        else:
            pytest.fail("the reinstall's create never came before the controller's restore")
        seen: list[str] = []

        async def settled() -> bool:
            now = yaml.safe_load((await kube.request("GET", CM_PATH))["data"]["values"])
            seen.append(str(now.get("clusterNetworks")))
            return now["proxy"]["image"]["version"] == fmt.good and len(seen) > 25

        await eventually(settled, timeout=60, interval=0.2, what="the ConfigMap settled")
        print(f"\nclusterNetworks seen after the reinstall: {sorted(set(seen))}")
        assert seen[-1] == "10.99.0.0/16", seen
        assert set(seen[-20:]) == {"10.99.0.0/16"}, seen
        labels = (await kube.request("GET", CM_PATH))["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm", labels
        await eventually(
            lambda: ready_is(kube, "reinstalled", "True", "Ready"), timeout=60, what="Ready after"
        )
