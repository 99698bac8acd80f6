"""The LinkerdConfig webhooks behind the real API server: it sends the AdmissionReviews over
TLS (checked against the caBundle), applies our JSONPatch, and turns our refusals into the
4xx its clients see. Only the controller is a stand-in: a real informer, nothing else.

The configurations are registered with ``failurePolicy: Fail`` for every LinkerdConfig, so
they are removed at the end of the module, and only once the API server has stopped calling
them is the server stopped: later modules must not find a webhook that is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from linkerd_config.kube.admission import AdmissionServer, ReloadingCertificate
from linkerd_config.kube.certs import write_serving_pair
from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.informer import Informer
from linkerd_config.kube.resource import (
    MUTATING_WEBHOOK_CONFIGURATIONS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
)
from linkerd_config.linkerd.admission.defaults import defaulted
from linkerd_config.linkerd.admission.webhooks import register, webhook_configurations
from linkerd_config.linkerd.spec.conversion import VALUES_ANNOTATION
from linkerd_config.linkerd.spec.crd import LINKERD_CONFIGS as V1ALPHA2_CONFIGS
from linkerd_config.linkerd.spec.crd import (
    LINKERD_CONFIGS_V1ALPHA1 as LINKERD_CONFIGS,  # tests write v1alpha1
)
from tests.support import scenario
from tests.support.samples import INVALID, load, sample, why_invalid
from tests.support.waiting import eventually
from tests.support.webhook_probe import DENIED, webhook_in_effect

Json = dict[str, Any]
RUN_LABEL = "test.linkerd-config.io/run"
RUN = uuid.uuid4().hex[:8]
MUTATING = MUTATING_WEBHOOK_CONFIGURATIONS.path()
VALIDATING = VALIDATING_WEBHOOK_CONFIGURATIONS.path()
FULL = "edge_19.12.3.yaml"
MINIMAL = "edge_19.12.3_use_webhook_defaults.yaml"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def labelled(obj: Json, name: str) -> Json:
    """``obj`` named ``name`` and labelled for this run (the informer sees only these)."""
    result = copy.deepcopy(obj)
    result["metadata"] = {"name": name, "labels": {RUN_LABEL: RUN}}
    return result


class Webhooks:
    """The running server, its informer, and the objects a test made (deleted at the end)."""

    def __init__(self, kube: KubeClient, informer: Informer) -> None:
        self.kube = kube
        self.informer = informer

    async def create(self, obj: Json, *, dry_run: bool = False) -> Json:
        params = {"dryRun": "All"} if dry_run else None
        created = await self.kube.request(
            "POST", LINKERD_CONFIGS.path(), body=obj, params=params, fenced=False
        )
        if not dry_run:
            name = created["metadata"]["name"]

            async def seen() -> bool:
                return self.informer.store.get(name) is not None

            await eventually(seen, timeout=10, what=f"informer sees {name}")
        return created

    async def delete(self, name: str) -> None:
        with contextlib.suppress(ApiError):
            await self.kube.request("DELETE", LINKERD_CONFIGS.path(name=name), fenced=False)

        async def forgotten() -> bool:
            return self.informer.store.get(name) is None

        await eventually(forgotten, timeout=10, what=f"informer forgets {name}")


@pytest.fixture(scope="module")
async def webhooks(
    kube: KubeClient, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Webhooks]:
    await scenario.install_crd(kube)
    cert_dir: Path = tmp_path_factory.mktemp("webhook-certs")
    ca_pem = write_serving_pair(cert_dir, ["localhost"], ["127.0.0.1"])
    informer = Informer(
        kube, LINKERD_CONFIGS, label_selector=f"{RUN_LABEL}={RUN}", name="webhook-test-configs"
    )
    informer_task = asyncio.create_task(informer.run(), name="webhook-test-informer")
    server = AdmissionServer(
        "127.0.0.1", 0, ReloadingCertificate(cert_dir / "tls.crt", cert_dir / "tls.key")
    )
    register(server, SimpleNamespace(configs=informer))
    server_task = asyncio.create_task(server.run(), name="webhook-test-server")
    configurations = []
    try:
        await informer.wait_synced(30)
        await asyncio.wait_for(server.started.wait(), 10)
        configurations = webhook_configurations(
            ca_pem, url_base=f"https://127.0.0.1:{server.bound_port}"
        )
        for configuration, path in zip(configurations, (MUTATING, VALIDATING), strict=True):
            name = configuration["metadata"]["name"]
            with contextlib.suppress(ApiError):
                await kube.request("DELETE", f"{path}/{name}", fenced=False)
            await kube.request("POST", path, body=configuration, fenced=False)
        await eventually(lambda: webhook_in_effect(kube), timeout=30, what="webhooks in effect")
        yield Webhooks(kube, informer)
    finally:
        with contextlib.suppress(ApiError):
            await kube.request(
                "DELETE",
                LINKERD_CONFIGS.path(),
                params={"labelSelector": f"{RUN_LABEL}={RUN}"},
                fenced=False,
            )
        for configuration, path in zip(configurations, (MUTATING, VALIDATING), strict=True):
            with contextlib.suppress(ApiError):
                await kube.request(
                    "DELETE", f"{path}/{configuration['metadata']['name']}", fenced=False
                )
        if configurations:

            async def gone() -> bool:
                return not await webhook_in_effect(kube)

            await eventually(gone, timeout=30, what="webhooks no longer called")
        for task in (server_task, informer_task):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def named_fields(path: Path) -> list[str]:
    return re.findall(r"spec\.[A-Za-z0-9_.\[\]]*[A-Za-z0-9_\]]", why_invalid(path))


# -- defaulting --------------------------------------------------------------------------------


async def test_minimal_sample_is_stored_fully_defaulted(webhooks: Webhooks) -> None:
    name = unique("minimal")
    obj = labelled(sample(MINIMAL), name)
    try:
        created = await webhooks.create(obj)
        assert created["spec"] == defaulted(obj["spec"])
        stored = await webhooks.kube.request("GET", LINKERD_CONFIGS.path(name=name))
        assert stored["spec"] == defaulted(obj["spec"])
        assert stored["spec"]["global"]["configMap"] == "linkerd-config"
        assert stored["spec"]["proxy"]["proxyImage"]["name"] == "gcr.io/linkerd-io/proxy"
    finally:
        await webhooks.delete(name)


async def test_full_sample_is_accepted_as_is(webhooks: Webhooks) -> None:
    name = unique("full")
    obj = labelled(sample(FULL), name)
    try:
        created = await webhooks.create(obj)
        assert created["spec"] == obj["spec"]
        # An update that leaves the spec alone (a label) goes through both webhooks too.
        created["metadata"]["labels"]["team"] = "mesh"
        updated = await webhooks.kube.request(
            "PUT", LINKERD_CONFIGS.path(name=name), body=created, fenced=False
        )
        assert updated["metadata"]["labels"]["team"] == "mesh"
    finally:
        await webhooks.delete(name)


async def test_dry_run_is_answered(webhooks: Webhooks) -> None:
    """sideEffects: None lets dry-run requests through the webhooks, defaulting included."""
    obj = labelled(sample(MINIMAL), unique("dry"))
    created = await webhooks.create(obj, dry_run=True)
    assert created["spec"] == defaulted(obj["spec"])


# -- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
async def test_invalid_samples_are_refused_naming_their_fields(
    webhooks: Webhooks, path: Path
) -> None:
    name = unique(path.stem.replace("_", "-"))
    with pytest.raises(ApiError) as refused:
        await webhooks.create(labelled(load(path), name))
    assert 400 <= refused.value.status < 500
    assert refused.value.status == 422
    message = refused.value.message
    fields = named_fields(path)
    if DENIED in message:  # our webhook answered: every field is named
        assert f'LinkerdConfig "{name}" is invalid: ' in message
        for field in fields:
            assert field in message, (field, message)
    else:  # the schema refused first (the webhook is never asked): it names its fields
        assert any(field in message for field in fields), message


async def test_what_only_the_webhook_knows_is_refused_by_it(webhooks: Webhooks) -> None:
    """Passes the schema, fails validation: a range with lo > hi, a network that is no CIDR,
    limits below requests, and a port range the target version cannot express -- all at once.
    (A bad log level no longer gets this far: the field table's grammar is in the schema.)"""
    obj = labelled(sample(FULL), unique("webhook-only"))
    proxy = obj["spec"]["proxy"]
    proxy["ignoreInboundPorts"] = ["25", "9000-80"]
    proxy["ignoreOutboundPorts"] = ["1000-2000"]
    proxy["destinationGetNetworks"] = "10.0.0.0/33"
    proxy["resource"] = {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}
    with pytest.raises(ApiError) as refused:
        await webhooks.create(obj)
    assert refused.value.status == 422
    message = refused.value.message
    assert DENIED in message
    for field in (
        "spec.proxy.ignoreInboundPorts[1]",
        "spec.proxy.ignoreOutboundPorts[0]",
        "spec.proxy.destinationGetNetworks",
        "spec.proxy.resource.limits.cpu",
    ):
        assert field in message, (field, message)


async def test_a_second_config_for_the_same_configmap_is_refused(webhooks: Webhooks) -> None:
    first, second = unique("first"), unique("second")
    target = unique("shared-config")
    obj = labelled(sample(FULL), first)
    obj["spec"]["global"]["configMap"] = target
    try:
        await webhooks.create(obj)
        rival = labelled(sample(MINIMAL), second)
        rival["spec"]["global"]["configMap"] = target
        with pytest.raises(ApiError) as refused:
            await webhooks.create(rival)
        assert refused.value.status == 422
        assert DENIED in refused.value.message
        assert "spec.global.configMap" in refused.value.message
        assert f"'{first}'" in refused.value.message
        assert f"linkerd/{target}" in refused.value.message
        # Once the owner is gone, the same object is welcome.
        await webhooks.delete(first)
        await webhooks.create(rival)
    finally:
        await webhooks.delete(first)
        await webhooks.delete(second)


async def test_changing_the_target_configmap_is_refused(webhooks: Webhooks) -> None:
    name = unique("immutable")
    try:
        created = await webhooks.create(labelled(sample(MINIMAL), name))
        created["spec"]["global"]["configMap"] = unique("elsewhere")
        with pytest.raises(ApiError) as refused:
            await webhooks.kube.request(
                "PUT", LINKERD_CONFIGS.path(name=name), body=created, fenced=False
            )
        assert refused.value.status == 422
        assert "configMap" in refused.value.message
        assert "immutable" in refused.value.message
    finally:
        await webhooks.delete(name)


async def test_an_update_is_validated(webhooks: Webhooks) -> None:
    name = unique("update")
    try:
        created = await webhooks.create(labelled(sample(FULL), name))
        created["spec"]["global"]["identityContext"]["issuanceLifeTime"] = "0s"
        with pytest.raises(ApiError) as refused:
            await webhooks.kube.request(
                "PUT", LINKERD_CONFIGS.path(name=name), body=created, fenced=False
            )
        assert refused.value.status == 422
        assert DENIED in refused.value.message
        assert "spec.global.identityContext.issuanceLifeTime" in refused.value.message
    finally:
        await webhooks.delete(name)


async def test_v1alpha1s_values_annotation_on_a_v1alpha2_object_is_refused(
    webhooks: Webhooks,
) -> None:
    """Nothing reads it on a v1alpha2 object, and through v1alpha1 it would pass for values:
    an update that adds it is refused, naming it."""
    name = unique("stray")
    try:
        await webhooks.create(labelled(sample(FULL), name))
        stored = await webhooks.kube.request("GET", V1ALPHA2_CONFIGS.path(name=name))
        assert stored["apiVersion"].endswith("/v1alpha2")
        stored["metadata"].setdefault("annotations", {})[VALUES_ANNOTATION] = "{}"
        with pytest.raises(ApiError) as refused:
            await webhooks.kube.request(
                "PUT", V1ALPHA2_CONFIGS.path(name=name), body=stored, fenced=False
            )
        assert refused.value.status == 422
        assert f"metadata.annotations[{VALUES_ANNOTATION}]" in refused.value.message
    finally:
        await webhooks.delete(name)
