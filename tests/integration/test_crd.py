"""The CRD on the real API server: the original sample is accepted exactly as it is, and the
schema alone (no webhook) already refuses what OpenAPI and CEL can check."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.resource import CRDS
from linkerd_config.linkerd.formats.field_table import FIELDS
from linkerd_config.linkerd.linkerdconfig_resource import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from linkerd_config.linkerd.linkerdconfig_resource import crd
from tests.support.conversion_server import conversion_server
from tests.support.samples import SAMPLES, load, sample
from tests.support.waiting import eventually


@pytest.fixture(scope="module")
async def installed_crd(kube: KubeClient) -> None:
    try:
        await kube.request("POST", CRDS.path(), body=crd(conversion_server().conversion()))
    except ApiError as exc:
        if not exc.conflict:
            raise

    async def established() -> bool:
        obj = await kube.request("GET", CRDS.path(name=crd()["metadata"]["name"]))
        return any(
            c["type"] == "Established" and c["status"] == "True"
            for c in obj.get("status", {}).get("conditions", [])
        )

    await eventually(established, timeout=30, what="LinkerdConfig CRD Established")

    async def serving() -> bool:
        await kube.request("GET", LINKERD_CONFIGS.path())
        return True

    await eventually(serving, timeout=30, what="LinkerdConfig storage ready")


async def dry_run_create(kube: KubeClient, obj: dict[str, Any]) -> dict[str, Any]:
    return await kube.request("POST", LINKERD_CONFIGS.path(), params={"dryRun": "All"}, body=obj)


async def test_original_sample_is_accepted_as_is(kube: KubeClient, installed_crd: None) -> None:
    obj = sample("edge_19.12.3.yaml")
    created = await dry_run_create(kube, obj)
    assert created["spec"] == obj["spec"]


async def test_minimal_sample_is_accepted(kube: KubeClient, installed_crd: None) -> None:
    await dry_run_create(kube, load(SAMPLES / "edge_19.12.3_use_webhook_defaults.yaml"))


@pytest.mark.parametrize(
    ("mutate", "fields"),
    [
        (lambda s: s["proxy"].update(inboundPort=70000), ["spec.proxy.inboundPort"]),
        (lambda s: s["proxy"].update(adminPort=4190, controlPort=4190), ["spec.proxy"]),
        (lambda s: s["proxy"].update(ignoreInboundPorts=["25", "x"]),
         ["spec.proxy.ignoreInboundPorts[1]"]),
        (lambda s: s["global"]["identityContext"].update(issuanceLifeTime="one day"),
         ["spec.global.identityContext.issuanceLifeTime"]),
        (lambda s: s["proxy"].pop("proxyVersion"), ["spec.proxy.proxyVersion"]),
        (lambda s: s["global"].update(version="19.12.3"), ["spec.global.version"]),
        (lambda s: s["proxy"]["proxyImage"].update(pullPolicy="Sometimes"),
         ["spec.proxy.proxyImage.pullPolicy"]),
        (lambda s: s["proxy"]["resource"]["limits"].update(memory="lots"),
         ["spec.proxy.resource.limits.memory"]),
    ],
)  # fmt: skip
async def test_schema_refuses_with_the_field_named(
    kube: KubeClient, installed_crd: None, mutate: Any, fields: list[str]
) -> None:
    obj = copy.deepcopy(sample("edge_19.12.3.yaml"))
    mutate(obj["spec"])
    with pytest.raises(ApiError) as refused:
        await dry_run_create(kube, obj)
    assert refused.value.status == 422
    for field in fields:
        assert field in refused.value.message


async def test_target_is_immutable(kube: KubeClient, installed_crd: None) -> None:
    obj = sample("edge_19.12.3.yaml")
    obj["metadata"]["name"] = "immutable-target"
    created = await kube.request("POST", LINKERD_CONFIGS.path(), body=obj)
    try:
        created["spec"]["global"]["configMap"] = "another-config"
        with pytest.raises(ApiError) as refused:
            await kube.request("PUT", LINKERD_CONFIGS.path(name="immutable-target"), body=created)
        assert refused.value.status == 422
        assert "configMap is immutable" in refused.value.message
    finally:
        await kube.request("DELETE", LINKERD_CONFIGS.path(name="immutable-target"))


async def test_every_field_of_the_table_is_kept_not_pruned(
    kube: KubeClient, installed_crd: None
) -> None:
    """Issue 25: a field the formats map but the schema lacked (ephemeral-storage) was
    pruned by the API server. Every row of the field table, set to its grammar's example
    (or its legacy default: the four ports must differ), comes back from a strict dry-run
    create as it was sent."""

    obj: dict[str, Any] = {
        "apiVersion": "config.linkerd.io/v1alpha1",
        "kind": "LinkerdConfig",
        "metadata": {"name": "every-field"},
        "spec": {},
    }
    for row in FIELDS:
        node = obj["spec"]
        for key in row.path[:-1]:
            node = node.setdefault(key, {})
        default = row.legacy.default if row.legacy is not None else None
        node[row.path[-1]] = row.grammar.example if default is None else default  # ports differ
    created = await kube.request(
        "POST",
        LINKERD_CONFIGS.path(),
        params={"dryRun": "All", "fieldValidation": "Strict"},
        body=obj,
    )
    assert created["spec"] == obj["spec"]
    assert created["spec"]["proxy"]["resource"]["limits"]["ephemeral-storage"] == "100m"
