"""The calls a reconciler makes, typed: no HTTP verb, path, content type or query parameter
leaves the machinery. Every write passes the client's write gate (only the leader writes).

Errors keep their type from the client: :class:`ApiError` with ``not_found`` / ``conflict``
and the server's reason and message. ``get`` answers None for a missing object, because for a
reader "gone" is an answer, not a failure.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Iterator

from linkerd_config.kube.client import APPLY_PATCH, MERGE_PATCH, ApiError, KubeClient
from linkerd_config.kube.resource import PODS, ApiResource, Json


class Writer:
    """One field manager's writes (server-side apply owns fields by manager name)."""

    def __init__(self, client: KubeClient, field_manager: str) -> None:
        self.client = client
        self.field_manager = field_manager
        self._own = _OwnWrites()

    def unless_echo(self, resource: ApiResource, obj: Json, wake: Callable[[], None]) -> None:
        """Call ``wake`` unless ``obj`` (as a watch delivers it) is the object exactly as this
        writer's last write of it left it: the watch's echo of our own write, which tells the
        reconcile that wrote it nothing it did not know. While a write of that object is in
        flight the answer waits for it (the echo may come before the write's response)."""
        self._own.unless_echo(resource, obj, wake)

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

    async def apply(self, resource: ApiResource, obj: Json, *, on: Json | None = None) -> Json:
        """Server-side apply of ``obj`` (named by its metadata), taking over conflicting
        fields: we are the source of truth for the fields we send, and only for those.

        ``on``: the cached read the body was derived from (a key whose text is ours and
        someone else's at once, such as Helm's ``values``), a precondition on its
        resourceVersion and uid: ApiError with ``conflict`` (409) when the object changed
        since, or was deleted since. A change the cache has not shown yet is never written
        over, and a deletion it has not shown never answered by a new object holding only
        what we send (an apply creates what is missing, whatever resourceVersion it names;
        a uid that no object has stops it)."""
        meta = obj["metadata"]
        if on is not None:
            cached = on.get("metadata") or {}
            precondition = {k: cached[k] for k in ("resourceVersion", "uid") if cached.get(k)}
            obj = {**obj, "metadata": {**meta, **precondition}}
        with self._own.writing(resource, meta.get("namespace"), meta["name"]) as wrote:
            return wrote(
                await self.client.request(
                    "PATCH",
                    resource.path(meta.get("namespace"), meta["name"]),
                    params={"fieldManager": self.field_manager, "force": True},
                    body=obj,
                    content_type=APPLY_PATCH,
                )
            )

    async def create(self, resource: ApiResource, obj: Json, *, field_manager: str) -> Json:
        """Create ``obj``; ApiError with ``conflict`` when it exists. Its fields belong to
        ``field_manager``, so a later ``apply`` that omits them never removes them."""
        meta = obj["metadata"]
        with self._own.writing(resource, meta.get("namespace"), meta.get("name", "")) as wrote:
            return wrote(
                await self.client.request(
                    "POST",
                    resource.path(meta.get("namespace")),
                    params={"fieldManager": field_manager},
                    body=obj,
                )
            )

    async def merge_patch(
        self,
        resource: ApiResource,
        namespace: str | None,
        name: str,
        patch: Json,
        *,
        field_manager: str | None = None,
    ) -> Json:
        """A JSON merge patch; a ``metadata.resourceVersion`` in it is a precondition (a
        conflict if the object changed since). ``field_manager``: whose the fields it sets
        are (by default the API server names one from the user agent)."""
        params = None if field_manager is None else {"fieldManager": field_manager}
        with self._own.writing(resource, namespace, name) as wrote:
            return wrote(
                await self.client.request(
                    "PATCH",
                    resource.path(namespace, name),
                    params=params,
                    body=patch,
                    content_type=MERGE_PATCH,
                )
            )

    async def patch_status(
        self,
        resource: ApiResource,
        namespace: str | None,
        name: str,
        status: Json,
        *,
        resource_version: str | None = None,
        uid: str | None = None,
    ) -> Json:
        """Merge ``status`` into the status subresource; with ``resource_version``, only if
        the object has not changed since, with ``uid``, only if it is still that object, not
        one made again under its name (a conflict otherwise: client-go's preconditions)."""
        body: Json = {"status": status}
        preconditions = {"resourceVersion": resource_version, "uid": uid}
        if any(v is not None for v in preconditions.values()):
            body["metadata"] = {k: v for k, v in preconditions.items() if v is not None}
        with self._own.writing(resource, namespace, name) as wrote:
            return wrote(
                await self.client.request(
                    "PATCH",
                    resource.path(namespace, name, "status"),
                    body=body,
                    content_type=MERGE_PATCH,
                )
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


OWN_WRITES_KEPT = 4096
"""How many objects' last writes ``Writer.unless_echo`` remembers."""

_Key = tuple[str, str, str]
"""(resource, namespace, name)"""


class _OwnWrites:
    """What one writer last wrote of each object (its resourceVersion), and which of its
    writes are in flight: how ``Writer.unless_echo`` tells our own write's echo from a
    change. Bounded: a write forgotten only costs a spare reconcile."""

    def __init__(self) -> None:
        self.last: OrderedDict[_Key, str] = OrderedDict()
        self.in_flight: dict[_Key, int] = {}
        self.held: dict[_Key, list[tuple[str | None, Callable[[], None]]]] = {}
        """Events that came while their object was being written: judged when it is."""

    @staticmethod
    def key(resource: ApiResource, namespace: str | None, name: str) -> _Key:
        return (str(resource), namespace or "", name)

    @contextlib.contextmanager
    def writing(
        self, resource: ApiResource, namespace: str | None, name: str
    ) -> Iterator[Callable[[Json], Json]]:
        key = self.key(resource, namespace, name)
        self.in_flight[key] = self.in_flight.get(key, 0) + 1

        def wrote(written: Json) -> Json:
            version = (written.get("metadata") or {}).get("resourceVersion")
            if isinstance(version, str):
                self.last[key] = version
                self.last.move_to_end(key)
                while len(self.last) > OWN_WRITES_KEPT:
                    self.last.popitem(last=False)
            return written

        try:
            yield wrote
        finally:
            self.in_flight[key] -= 1
            if not self.in_flight[key]:
                del self.in_flight[key]
                for version, wake in self.held.pop(key, []):
                    self._judge(key, version, wake)

    def unless_echo(self, resource: ApiResource, obj: Json, wake: Callable[[], None]) -> None:
        meta = obj.get("metadata") or {}
        key = self.key(resource, meta.get("namespace"), meta.get("name") or "")
        version = meta.get("resourceVersion")
        if key in self.in_flight:
            self.held.setdefault(key, []).append((version, wake))
        else:
            self._judge(key, version, wake)

    def _judge(self, key: _Key, version: str | None, wake: Callable[[], None]) -> None:
        if version is None or self.last.get(key) != version:
            wake()
