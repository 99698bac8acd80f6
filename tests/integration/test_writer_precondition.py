"""``Writer.apply`` ``on`` a cached read is conditional on the real API server: a body
rendered from a cached read is refused (409) once someone else has changed the object, or
deleted it, so a change the cache has not shown yet is never written over and a deletion
never answered by a bare new object; on the current version it lands."""

from __future__ import annotations

import uuid

import pytest

from linkerd_config.kube.client import MERGE_PATCH, ApiError, KubeClient
from linkerd_config.kube.resource import CONFIGMAPS, CRDS, DEPLOYMENTS, ApiResource
from linkerd_config.kube.writer import Writer
from tests.support.waiting import eventually


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


WIDGETS = ApiResource("precondition.test", "v1", "widgets", "Widget", namespaced=False)
WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.precondition.test"},
    "spec": {
        "group": "precondition.test",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
        "scope": "Cluster",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
                "subresources": {"status": {}},
            }
        ],
    },
}


async def test_a_custom_resources_status_write_checks_its_version_not_its_uid(
    kube: KubeClient,
) -> None:
    """Why the report's status write carries the resourceVersion it was decided on: a custom
    resource's status subresource keeps the stored metadata whatever a patch says (the API
    server's CRD status strategy), so a uid there is no precondition. A status decided for
    a LinkerdConfig deleted since landed on the one made again under its name (CI: a halt
    without the completed configuration it returns to, the failed proxy written). The
    resourceVersion is checked: refused (409) on the old object's, landed on the new one's."""
    try:
        await kube.request("POST", CRDS.path(), body=WIDGET_CRD, fenced=False)
    except ApiError as exc:
        if exc.status != 409:
            raise

    async def served() -> bool:
        try:
            await kube.request("GET", WIDGETS.path(), fenced=False)
        except ApiError:
            return False
        return True

    await eventually(served, timeout=60, what="the widget CRD served")
    writer = Writer(kube, "precondition-test")
    name = f"remade-{uuid.uuid4().hex[:8]}"
    widget = {"apiVersion": "precondition.test/v1", "kind": "Widget", "metadata": {"name": name}}
    first = await kube.request("POST", WIDGETS.path(), body=widget, fenced=False)
    await kube.request("DELETE", WIDGETS.path(name=name), fenced=False)
    again = await kube.request("POST", WIDGETS.path(), body=widget, fenced=False)
    try:
        ignored = await writer.patch_status(
            WIDGETS, None, name, {"by": "uid"}, uid=first["metadata"]["uid"]
        )
        assert ignored["metadata"]["uid"] == again["metadata"]["uid"]
        assert ignored["status"]["by"] == "uid"  # the uid was no precondition
        with pytest.raises(ApiError) as refused:
            await writer.patch_status(
                WIDGETS, None, name, {"by": "first"},
                resource_version=first["metadata"]["resourceVersion"],
            )  # fmt: skip
        assert refused.value.status == 409
        now = await kube.request("GET", WIDGETS.path(name=name))
        assert now["status"]["by"] == "uid"
        landed = await writer.patch_status(
            WIDGETS, None, name, {"by": "again"},
            resource_version=now["metadata"]["resourceVersion"], uid=now["metadata"]["uid"],
        )  # fmt: skip
        assert landed["status"]["by"] == "again"
    finally:
        await kube.request("DELETE", WIDGETS.path(name=name), fenced=False)
