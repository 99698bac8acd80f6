"""``Writer.apply`` ``on`` a cached read is conditional on the real API server: a body
rendered from a cached read is refused (409) once someone else has changed the object, or
deleted it, so a change the cache has not shown yet is never written over and a deletion
never answered by a bare new object; on the current version it lands."""

from __future__ import annotations

import uuid

import pytest

from linkerd_config.kube.client import MERGE_PATCH, ApiError, KubeClient
from linkerd_config.kube.resource import CONFIGMAPS, DEPLOYMENTS
from linkerd_config.kube.writer import Writer


def body(name: str, value: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"ours": value},
    }


async def test_an_apply_on_a_stale_version_is_refused_and_on_the_current_one_lands(
    kube: KubeClient,
) -> None:
    writer = Writer(kube, "precondition-test")
    name = f"precondition-{uuid.uuid4().hex[:8]}"
    cached = await writer.apply(CONFIGMAPS, body(name, "1"))
    try:
        theirs = await kube.request(
            "PATCH",
            CONFIGMAPS.path("default", name),
            body={"data": {"theirs": "helm"}},
            content_type=MERGE_PATCH,
            fenced=False,
        )
        with pytest.raises(ApiError) as refused:
            await writer.apply(CONFIGMAPS, body(name, "2"), on=cached)
        assert refused.value.conflict, refused.value
        now = await kube.request("GET", CONFIGMAPS.path("default", name))
        assert now["data"] == {"ours": "1", "theirs": "helm"}
        landed = await writer.apply(CONFIGMAPS, body(name, "2"), on=theirs)
        assert landed["data"] == {"ours": "2", "theirs": "helm"}
        assert "resourceVersion" not in str(landed["metadata"].get("managedFields"))
    finally:
        await kube.request("DELETE", CONFIGMAPS.path("default", name), fenced=False)


async def test_an_apply_answers_with_what_others_own_and_without_what_we_stopped_sending(
    kube: KubeClient,
) -> None:
    """What ``writes.preserve`` reads from an apply's answer: a key we sent before
    and no longer send is gone (no one else owns it), a key someone else planted stays (ours
    cannot remove it: it is removed by a merge patch then), as are their metadata entries."""
    writer = Writer(kube, "precondition-test")
    name = f"answer-{uuid.uuid4().hex[:8]}"
    first = body(name, "1")
    first["data"] = {"ours": "1", "dropped": "x"}  # type: ignore[index]
    await writer.apply(CONFIGMAPS, first)
    try:
        await kube.request(
            "PATCH",
            CONFIGMAPS.path("default", name),
            body={"data": {"planted": "y"}, "metadata": {"annotations": {"planted": "z"}}},
            content_type=MERGE_PATCH,
            fenced=False,
        )
        answer = await writer.apply(CONFIGMAPS, body(name, "2"))
        assert answer["data"] == {"ours": "2", "planted": "y"}
        assert answer["metadata"]["annotations"] == {"planted": "z"}
    finally:
        await kube.request("DELETE", CONFIGMAPS.path("default", name), fenced=False)


async def test_an_apply_on_the_version_of_an_object_deleted_since_is_refused(
    kube: KubeClient,
) -> None:
    """A cache that has not yet shown a deletion: the apply on its version creates nothing
    (a preserved copy deleted meanwhile comes back only from a reconcile that saw it go).
    The API server refuses it as a conflict, the refusal the reconcile takes quietly."""
    writer = Writer(kube, "precondition-test")
    name = f"deleted-{uuid.uuid4().hex[:8]}"
    cached = await writer.apply(CONFIGMAPS, body(name, "1"))
    await kube.request("DELETE", CONFIGMAPS.path("default", name), fenced=False)
    with pytest.raises(ApiError) as refused:
        await writer.apply(CONFIGMAPS, body(name, "2"), on=cached)
    assert refused.value.conflict, refused.value
    with pytest.raises(ApiError) as gone:
        await kube.request("GET", CONFIGMAPS.path("default", name))
    assert gone.value.status == 404


async def test_a_status_write_for_an_object_made_again_under_its_name_is_refused(
    kube: KubeClient,
) -> None:
    """``patch_status`` ``uid``: a reconcile of an object deleted meanwhile writes nothing
    onto the one made again under its name (CI: a halt without the completed configuration
    it returns to landed on a re-made LinkerdConfig); on the object itself it lands."""
    writer = Writer(kube, "precondition-test")
    name = f"remade-{uuid.uuid4().hex[:8]}"
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "pause"}]},
            },
        },
    }
    path = DEPLOYMENTS.path("default")
    first = await kube.request("POST", path, body=deployment, fenced=False)
    await kube.request("DELETE", DEPLOYMENTS.path("default", name), fenced=False)
    again = await kube.request("POST", path, body=deployment, fenced=False)
    status = {"observedGeneration": 7}
    try:
        with pytest.raises(ApiError) as refused:
            await writer.patch_status(
                DEPLOYMENTS, "default", name, status, uid=first["metadata"]["uid"]
            )
        # Refused by validation (a uid is immutable), before any write.
        assert refused.value.status == 422 and "metadata.uid" in refused.value.message
        now = await kube.request("GET", DEPLOYMENTS.path("default", name))
        assert now["metadata"]["uid"] == again["metadata"]["uid"]
        assert (now.get("status") or {}).get("observedGeneration") != 7
        landed = await writer.patch_status(
            DEPLOYMENTS, "default", name, status, uid=again["metadata"]["uid"]
        )
        assert landed["status"]["observedGeneration"] == 7
    finally:
        await kube.request("DELETE", DEPLOYMENTS.path("default", name), fenced=False)
