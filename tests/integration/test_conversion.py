"""v1alpha1 and v1alpha2 through the real API server and the real conversion webhook (the
product's handler, served as the Deployment serves it): every sample round-trips
v1alpha1 -> v1alpha2 -> v1alpha1 unchanged; a v1alpha2 object stating every value the
injector reads survives being read and written back as v1alpha1; and objects stored by the
release before v1alpha2 (its CRD: v1alpha1 only, stored as v1alpha1) still read, in both
versions, after the CRD is upgraded.
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.cluster import LocalControlPlane
from linkerd_config.app import build, running
from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.resource import CONFIGMAPS, CRDS
from linkerd_config.linkerd.spec.conversion import OMITTED_ANNOTATION, VALUES_ANNOTATION, convert
from linkerd_config.linkerd.spec.crd import (
    CONVERSION_REFUSAL,
    LINKERD_CONFIGS,
    LINKERD_CONFIGS_V1ALPHA1,
    crd,
)
from tests.support import scenario
from tests.support.conversion_server import conversion_server
from tests.support.injector_values import every_injector_value
from tests.support.samples import FIXTURES, SAMPLES, load
from tests.support.waiting import eventually

Json = dict[str, Any]
VALID_SAMPLES = sorted(SAMPLES.glob("*.yaml"))
REPO = Path(__file__).resolve().parents[2]
OLD_CRD = FIXTURES / "linkerdconfigs_crd_before_v1alpha2.yaml"


def named(obj: Json, prefix: str) -> Json:
    obj = copy.deepcopy(obj)
    obj["metadata"] = {"name": f"{prefix}-{uuid.uuid4().hex[:8]}"}
    return obj


async def read(kube: KubeClient, name: str) -> tuple[Json, Json]:
    """The object as v1alpha1 and as v1alpha2."""
    v1 = await kube.request("GET", LINKERD_CONFIGS_V1ALPHA1.path(name=name))
    v2 = await kube.request("GET", LINKERD_CONFIGS.path(name=name))
    return v1, v2


async def test_every_sample_round_trips_through_the_api_server(kube: KubeClient) -> None:
    await scenario.install_crd(kube)
    for path in VALID_SAMPLES:
        obj = named(load(path), "round-trip")
        name = obj["metadata"]["name"]
        await kube.request("POST", LINKERD_CONFIGS_V1ALPHA1.path(), body=obj, fenced=False)
        try:
            v1, v2 = await read(kube, name)
            assert v1["spec"] == obj["spec"], path.name
            assert v2["spec"] == convert(obj, "v1alpha2")["spec"], path.name
            assert VALUES_ANNOTATION not in (v1["metadata"].get("annotations") or {})
        finally:
            await kube.request("DELETE", LINKERD_CONFIGS.path(name=name), fenced=False)


async def test_values_only_v1alpha2_has_survive_a_v1alpha1_write(kube: KubeClient) -> None:
    """Read as v1alpha1 (the values it has no field for in the annotation), written back as
    v1alpha1 (as an old client's read-modify-write does), read as v1alpha2: unchanged."""
    await scenario.install_crd(kube)
    obj = named(every_injector_value(), "every-value")
    name = obj["metadata"]["name"]
    await kube.request("POST", LINKERD_CONFIGS.path(), body=obj, fenced=False)
    try:
        v1, v2 = await read(kube, name)
        assert v2["spec"] == obj["spec"]
        carried = json.loads(v1["metadata"]["annotations"][VALUES_ANNOTATION])
        assert carried["proxy"]["nativeSidecar"] == obj["spec"]["values"]["proxy"]["nativeSidecar"]
        assert (
            v1["spec"]["proxy"]["proxyVersion"]
            == obj["spec"]["values"]["proxy"]["image"]["version"]
        )
        v1["metadata"]["labels"] = {"edited": "as-v1alpha1"}
        await kube.request("PUT", LINKERD_CONFIGS_V1ALPHA1.path(name=name), body=v1, fenced=False)
        _, again = await read(kube, name)
        assert again["spec"] == obj["spec"]
        assert again["metadata"]["labels"] == {"edited": "as-v1alpha1"}
        assert VALUES_ANNOTATION not in (again["metadata"].get("annotations") or {})
    finally:
        await kube.request("DELETE", LINKERD_CONFIGS.path(name=name), fenced=False)


async def test_one_object_too_large_for_v1alpha1_breaks_no_read_and_loses_nothing(
    kube: KubeClient,
) -> None:
    """Issue 61, finding 5: one v1alpha2 object whose values did not fit v1alpha1's
    annotation made every v1alpha1 GET and LIST fail (500, "annotation Too long"), for every
    object. Now the LIST answers, the small object as before and the large one saying where
    its values are; writing the large one back as v1alpha1 is refused naming why, and its
    values stay as stored."""
    await scenario.install_crd(kube)
    small = named(every_injector_value(), "small")
    big = named(every_injector_value(), "big")
    inbound = {"server": {f"param{i}": "x" * 1000 for i in range(300)}}  # 300 KB
    big["spec"]["values"]["proxy"]["inbound"] = inbound
    for obj in (small, big):
        await kube.request("POST", LINKERD_CONFIGS.path(), body=obj, fenced=False)
    names = {small["metadata"]["name"], big["metadata"]["name"]}
    try:
        listed = await kube.request("GET", LINKERD_CONFIGS_V1ALPHA1.path())
        found = {
            o["metadata"]["name"]: o for o in listed["items"] if o["metadata"]["name"] in names
        }
        assert set(found) == names
        assert VALUES_ANNOTATION in found[small["metadata"]["name"]]["metadata"]["annotations"]
        read_back = found[big["metadata"]["name"]]
        assert (
            "read and write this LinkerdConfig as"
            in (read_back["metadata"]["annotations"][OMITTED_ANNOTATION])
        )
        with pytest.raises(ApiError) as refused:
            await kube.request(
                "PUT", LINKERD_CONFIGS_V1ALPHA1.path(name=big["metadata"]["name"]),
                body=read_back, fenced=False,
            )  # fmt: skip
        assert "would be lost" in refused.value.message, refused.value.message
        stored = await kube.request("GET", LINKERD_CONFIGS.path(name=big["metadata"]["name"]))
        assert stored["spec"]["values"]["proxy"]["inbound"] == inbound
    finally:
        for name in names:
            await kube.request("DELETE", LINKERD_CONFIGS.path(name=name), fenced=False)


async def test_a_v1alpha2_objects_own_annotation_is_not_read_as_values_through_v1alpha1(
    kube: KubeClient,
) -> None:
    """A v1alpha2 object stored with v1alpha1's values annotation (webhooks off: nothing
    refused it), read and written back through v1alpha1 unchanged: the annotation was shown
    as values, and the write stored them as spec.values that no validation saw."""
    await scenario.install_crd(kube)
    obj = named(load(SAMPLES / "edge_19.12.3.yaml"), "stray")
    obj = convert(obj, "v1alpha2")
    obj["metadata"]["annotations"] = {VALUES_ANNOTATION: '{"proxy": {"nativeSidecar": true}}'}
    name = obj["metadata"]["name"]
    await kube.request("POST", LINKERD_CONFIGS.path(), body=obj, fenced=False)
    try:
        v1, stored = await read(kube, name)
        assert "nativeSidecar" not in json.dumps(stored["spec"])
        assert VALUES_ANNOTATION not in (v1["metadata"].get("annotations") or {})
        await kube.request("PUT", LINKERD_CONFIGS_V1ALPHA1.path(name=name), body=v1, fenced=False)
        _, again = await read(kube, name)
        assert again["spec"] == stored["spec"]
    finally:
        await kube.request("DELETE", LINKERD_CONFIGS.path(name=name), fenced=False)


async def test_objects_stored_before_the_upgrade_still_read(
    private_control_plane: LocalControlPlane,
) -> None:
    access = await load_access(str(private_control_plane.kubeconfig))
    async with KubeClient(access, user_agent="linkerd-config-tests") as kube:
        old_crd = yaml.safe_load(OLD_CRD.read_text())
        await kube.request("POST", CRDS.path(), body=old_crd, fenced=False)

        async def served() -> bool:
            await kube.request("GET", LINKERD_CONFIGS_V1ALPHA1.path())
            return True

        await eventually(served, timeout=60, what="the old CRD served")
        stored = []
        for path in VALID_SAMPLES:
            obj = named(load(path), "stored-before")
            await kube.request("POST", LINKERD_CONFIGS_V1ALPHA1.path(), body=obj, fenced=False)
            stored.append(obj)

        # The upgrade: the new CRD over the old one (both versions, v1alpha2 stored).
        current = await kube.request("GET", CRDS.path(name=old_crd["metadata"]["name"]))
        upgraded = crd(conversion_server().conversion())
        upgraded["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        await kube.request(
            "PUT", CRDS.path(name=old_crd["metadata"]["name"]), body=upgraded, fenced=False
        )

        async def v1alpha2_served() -> bool:
            await kube.request("GET", LINKERD_CONFIGS.path())
            return True

        await eventually(v1alpha2_served, timeout=60, what="v1alpha2 served")
        listed = await kube.request("GET", LINKERD_CONFIGS.path())
        by_name = {item["metadata"]["name"]: item for item in listed["items"]}
        for obj in stored:
            name = obj["metadata"]["name"]
            assert by_name[name]["spec"] == convert(obj, "v1alpha2")["spec"]
            v1, _ = await read(kube, name)
            assert v1["spec"] == obj["spec"]
        crd_now = await kube.request("GET", CRDS.path(name=old_crd["metadata"]["name"]))
        # Still stored as v1alpha1 until rewritten: the API server says so.
        assert "v1alpha1" in crd_now["status"]["storedVersions"]


async def test_with_webhooks_off_v1alpha2_works_and_v1alpha1_is_refused_not_pruned(
    private_control_plane: LocalControlPlane,
) -> None:
    """The no-webhooks install (in the cluster, where no pod registers itself as the
    converter; a local run that could not register is the same): the CRD is
    manifests/crd-local's. v1alpha2, the storage version, needs no conversion: stored, read,
    and reconciled by the controller with its webhooks off. v1alpha1 needs the converter: the
    API server refuses it in one line that says what to do, and stores nothing (never a
    silently pruned object). `linkerd-config convert` makes it v1alpha2."""
    cp = private_control_plane
    access = await load_access(str(cp.kubeconfig))
    async with KubeClient(access, user_agent="linkerd-config-tests") as kube:
        await scenario.install_crd_as_manifests_have_it(kube, local=True)
        seed = load(SAMPLES / "edge_19.12.3.yaml")
        with pytest.raises(ApiError) as refused:
            await kube.request("POST", LINKERD_CONFIGS_V1ALPHA1.path(), body=seed, fenced=False)
        assert CONVERSION_REFUSAL["message"] in refused.value.message, refused.value
        assert (await kube.request("GET", LINKERD_CONFIGS.path()))["items"] == []

        # What the README offers for this case: the seed as v1alpha2, as convert writes it.
        up = load(REPO / "manifests/samples/v1alpha2/edge_19.12.3.yaml")
        assert up == convert(seed, "v1alpha2")
        await kube.request("POST", LINKERD_CONFIGS.path(), body=up, fenced=False)
        stored = await kube.request("GET", LINKERD_CONFIGS.path(name=up["metadata"]["name"]))
        assert stored["spec"] == up["spec"]

        await scenario.install_linkerd_edge_19_12_1(kube)
        # As the no-webhooks overlay's pods run: no conversion of their own.
        app = await build(
            scenario.local_settings(
                cp.kubeconfig, "--identity", "no-webhooks", "--serve-conversion=false"
            )
        )
        async with running(app):

            async def synced() -> bool:
                obj = await kube.request("GET", LINKERD_CONFIGS.path(name=up["metadata"]["name"]))
                conditions = (obj.get("status") or {}).get("conditions") or []
                return any(
                    c["type"] == "ConfigMapSynced" and c["status"] == "True" for c in conditions
                )

            await eventually(synced, timeout=30, what="reconciled with webhooks off")
        cm = await kube.request("GET", CONFIGMAPS.path("linkerd", "linkerd-config"))
        proxy = json.loads(cm["data"]["proxy"])
        assert proxy["proxyVersion"] == seed["spec"]["proxy"]["proxyVersion"]
