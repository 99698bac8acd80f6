"""The CRD on the real API server: the original sample is accepted exactly as it is, and the
schema alone (no webhook) already refuses what OpenAPI and CEL can check."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.resource import CRDS
from linkerd_config.linkerd.formats.field_table import FIELDS
from linkerd_config.linkerd.spec.conversion import (
    GROUP,
    SERVED_VERSIONS,
    V1ALPHA1,
    V1ALPHA2,
    convert,
)
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS as LINKERD_CONFIGS_V1ALPHA2,
)
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from linkerd_config.linkerd.spec.crd import crd
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


@pytest.mark.parametrize("version", SERVED_VERSIONS)
async def test_every_field_of_the_table_is_kept_not_pruned(
    kube: KubeClient, installed_crd: None, version: str
) -> None:
    """Issue 25: a field the formats map but the schema lacked (ephemeral-storage) was
    pruned by the API server. Every row of the field table the version has, under its name
    in that version, set to its grammar's example (or its legacy default: the four ports
    must differ), comes back from a strict dry-run create as it was sent."""

    obj: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "LinkerdConfig",
        "metadata": {"name": "every-field"},
        "spec": {},
    }
    rows = [row for row in FIELDS if version == V1ALPHA2 or row.in_v1alpha1]
    for row in rows:
        path = row.v1alpha2_path if version == V1ALPHA2 else row.path
        node = obj["spec"]
        for key in path[:-1]:
            node = node.setdefault(key, {})
        default = row.legacy.default if row.legacy is not None else None
        if default is None:
            value = (row.v1alpha2_grammar if version == V1ALPHA2 else row.grammar).example
        elif version == V1ALPHA2 and row.served_as is not None:
            value = row.served_as.to_v1alpha2(default)
        else:
            value = default  # ports differ
        node[path[-1]] = value
    resource = LINKERD_CONFIGS if version == V1ALPHA1 else LINKERD_CONFIGS_V1ALPHA2
    created = await kube.request(
        "POST",
        resource.path(),
        params={"dryRun": "All", "fieldValidation": "Strict"},
        body=obj,
    )
    assert created["spec"] == obj["spec"]
    assert len(rows) == (len(FIELDS) if version == V1ALPHA2 else sum(r.in_v1alpha1 for r in FIELDS))
    limits = created["spec"]["values"]["proxy"]["resources"] if version == V1ALPHA2 else None
    if limits is None:
        limits = created["spec"]["proxy"]["resource"]["limits"]
        assert limits["ephemeral-storage"] == "100m"
    else:
        assert limits["ephemeral-storage"]["limit"] == "100m", limits


def _with_env(version_obj: dict[str, Any], name: str) -> dict[str, Any]:
    proxy = version_obj["spec"].setdefault("values", {}).setdefault("proxy", {})
    proxy["additionalEnv"] = [{"name": "OK", "value": "1"}, {"name": name, "value": "x"}]
    return version_obj


@pytest.mark.parametrize(
    ("version", "mutate", "field"),
    [
        *[(V1ALPHA2, lambda o, n=name: _with_env(o, n), "spec.values.proxy.additionalEnv[1].name")
          for name in ("A\nB", "A\x00B", "A\u2028B", "\ufeffA", "{{ .Values.x }}", "1ABC")],
        (V1ALPHA1, lambda o: o["spec"]["global"]["identityContext"].update(
            trustDomain="cluster.local\u2028"), "spec.global.identityContext.trustDomain"),
        (V1ALPHA1, lambda o: o["spec"]["proxy"]["proxyImage"].update(
            name="\ufeffgcr.io/linkerd-io/proxy"), "spec.proxy.proxyImage.name"),
    ],
)  # fmt: skip
async def test_schema_refuses_what_a_pod_spec_refuses(
    kube: KubeClient, installed_crd: None, version: str, mutate: Any, field: str
) -> None:
    """Issue 39, finding 3: with no webhook at all (``ENABLE_WEBHOOKS=false``), the API
    server refuses an env var name Kubernetes' ``IsEnvVarName`` refuses and a format
    character in a string field, naming the field. Before, each was stored, the
    LinkerdConfig Ready, and every injected pod would have been refused."""
    obj = copy.deepcopy(sample("edge_19.12.3.yaml"))
    if version == V1ALPHA2:
        obj = convert(obj, V1ALPHA2)
    mutate(obj)
    resource = LINKERD_CONFIGS_V1ALPHA2 if version == V1ALPHA2 else LINKERD_CONFIGS
    with pytest.raises(ApiError) as refused:
        await kube.request("POST", resource.path(), params={"dryRun": "All"}, body=obj)
    assert refused.value.status == 422, refused.value.message
    assert field in refused.value.message, refused.value.message
