"""The calls a reconciler makes, typed: no HTTP verb, path, content type or query parameter
leaves the machinery. Every write passes the client's write gate (only the leader writes).

Errors keep their type from the client: :class:`ApiError` with ``not_found`` / ``conflict``
and the server's reason and message. ``get`` answers None for a missing object, because for a
reader "gone" is an answer, not a failure.
"""

from __future__ import annotations

from linkerd_config.kube.client import APPLY_PATCH, MERGE_PATCH, ApiError, KubeClient
from linkerd_config.kube.resource import PODS, ApiResource, Json


class Writer:
    """One field manager's writes (server-side apply owns fields by manager name)."""

    def __init__(self, client: KubeClient, field_manager: str) -> None:
        self.client = client
        self.field_manager = field_manager

    async def get(self, resource: ApiResource, namespace: str | None, name: str) -> Json | None:
        """The live object, or None when it does not exist."""
        try:
            return await self.client.request("GET", resource.path(namespace, name))
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    async def list(self, resource: ApiResource, namespace: str | None) -> list[Json]:
        """The live objects of ``resource`` in ``namespace``, read now (not from a cache):
        for the rare decision that needs what no cache keeps (a ReplicaSet's pod template)."""
        found = await self.client.request("GET", resource.path(namespace))
        return list(found.get("items") or [])

    async def apply(self, resource: ApiResource, obj: Json) -> Json:
        """Server-side apply of ``obj`` (named by its metadata), taking over conflicting
        fields: we are the source of truth for the fields we send, and only for those."""
        meta = obj["metadata"]
        return await self.client.request(
            "PATCH",
            resource.path(meta.get("namespace"), meta["name"]),
            params={"fieldManager": self.field_manager, "force": True},
            body=obj,
            content_type=APPLY_PATCH,
        )

    async def create(self, resource: ApiResource, obj: Json, *, field_manager: str) -> Json:
        """Create ``obj``; ApiError with ``conflict`` when it exists. Its fields belong to
        ``field_manager``, so a later ``apply`` that omits them never removes them."""
        return await self.client.request(
            "POST",
            resource.path(obj["metadata"].get("namespace")),
            params={"fieldManager": field_manager},
            body=obj,
        )

    async def merge_patch(
        self,
        resource: ApiResource,
        namespace: str | None,
        name: str,
        patch: Json,
    ) -> Json:
        """A JSON merge patch; a ``metadata.resourceVersion`` in it is a precondition (a
        conflict if the object changed since)."""
        return await self.client.request(
            "PATCH", resource.path(namespace, name), body=patch, content_type=MERGE_PATCH
        )

    async def patch_status(
        self,
        resource: ApiResource,
        namespace: str | None,
        name: str,
        status: Json,
        *,
        resource_version: str | None = None,
    ) -> Json:
        """Merge ``status`` into the status subresource; with ``resource_version``, only if
        the object has not changed since (a conflict otherwise)."""
        body: Json = {"status": status}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        return await self.client.request(
            "PATCH",
            resource.path(namespace, name, "status"),
            body=body,
            content_type=MERGE_PATCH,
        )

    async def evict(self, namespace: str, name: str) -> None:
        """Evict a pod through the Eviction API, so PodDisruptionBudgets hold."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        await self.client.request("POST", PODS.path(namespace, name, "eviction"), body=body)

    async def dry_run_create(self, resource: ApiResource, namespace: str, obj: Json) -> Json:
        """What admission (mutating webhooks included) makes of ``obj``; nothing is stored."""
        return await self.client.request(
            "POST", resource.path(namespace), params={"dryRun": "All"}, body=obj
        )
