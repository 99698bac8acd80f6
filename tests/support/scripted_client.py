"""A stand-in for ``KubeClient.request`` under ``kube.writer.Writer``'s unit tests: every write
answers the object with the next resourceVersion, and a test may hold answers back (a write in
flight) or make the next one fail."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from linkerd_config.kube.client import ApiError
from linkerd_config.kube.resource import Json


class ScriptedClient:
    def __init__(self) -> None:
        self.version = 100
        self.release = asyncio.Event()
        self.release.set()
        """Cleared: writes wait (in flight) until it is set again."""
        self.fail_next: ApiError | None = None
        self.calls: list[tuple[str, str]] = []

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Json | None = None,
        content_type: str = "",
        **_: Any,
    ) -> Json:
        self.calls.append((method, path))
        await self.release.wait()
        if self.fail_next is not None:
            failure, self.fail_next = self.fail_next, None
            raise failure
        self.version += 1
        segments = path.strip("/").split("/")
        name = segments[-2] if segments[-1] == "status" else segments[-1]
        namespace = segments[segments.index("namespaces") + 1] if "namespaces" in segments else ""
        meta = dict((body or {}).get("metadata") or {})
        meta.update(name=meta.get("name", name), resourceVersion=str(self.version))
        if namespace:
            meta["namespace"] = namespace
        return {**(body or {}), "metadata": meta}
