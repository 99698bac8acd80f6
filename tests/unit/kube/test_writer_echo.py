"""``Writer.unless_echo``: the watch's echo of our own write wakes nobody; every other change
does, including one that arrives while our write is in flight (judged when it returns), and
every event held by a write that failed or was cancelled."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.resource import CONFIGMAPS, ApiResource, Json
from linkerd_config.kube.writer import OWN_WRITES_KEPT, Writer
from tests.support.scripted_client import ScriptedClient

SECRETS = ApiResource("", "v1", "secrets", "Secret")


def configmap(name: str = "linkerd-config", version: str | None = None) -> Json:
    meta: Json = {"name": name, "namespace": "linkerd"}
    if version is not None:
        meta["resourceVersion"] = version
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


class Woken:
    def __init__(self) -> None:
        self.by: list[str] = []

    def __call__(self, writer: Writer, obj: Json, resource: Any = CONFIGMAPS) -> None:
        version = obj["metadata"].get("resourceVersion")
        writer.unless_echo(resource, obj, lambda: self.by.append(str(version)))


@pytest.fixture
def client() -> ScriptedClient:
    return ScriptedClient()


@pytest.fixture
def writer(client: ScriptedClient) -> Writer:
    return Writer(cast(KubeClient, client), "linkerd-config")


WRITES = {
    "apply": lambda w: w.apply(CONFIGMAPS, configmap()),
    "create": lambda w: w.create(CONFIGMAPS, configmap(), field_manager="restore"),
    "merge_patch": lambda w: w.merge_patch(CONFIGMAPS, "linkerd", "linkerd-config", {"a": 1}),
    "patch_status": lambda w: w.patch_status(CONFIGMAPS, "linkerd", "linkerd-config", {}),
}


@pytest.mark.parametrize("write", WRITES)
async def test_the_echo_of_each_write_wakes_nobody(writer: Writer, write: str) -> None:
    woken = Woken()
    written = await WRITES[write](writer)
    version = written["metadata"]["resourceVersion"]
    woken(writer, configmap(version=version))
    assert woken.by == []
    # Someone else's write after ours, and an older state, are changes.
    woken(writer, configmap(version=str(int(version) + 1)))
    woken(writer, configmap(version=str(int(version) - 1)))
    assert woken.by == [str(int(version) + 1), str(int(version) - 1)]


async def test_what_we_never_wrote_wakes(writer: Writer) -> None:
    woken = Woken()
    written = await writer.apply(CONFIGMAPS, configmap())
    version = written["metadata"]["resourceVersion"]
    woken(writer, configmap("other", version))  # another object, same version
    woken(writer, configmap(version=version), SECRETS)  # another resource, same name
    woken(writer, configmap())  # no resourceVersion at all
    assert woken.by == [version, version, "None"]


async def test_an_echo_before_the_write_returns_is_judged_when_it_does(
    writer: Writer, client: ScriptedClient
) -> None:
    woken = Woken()
    client.release.clear()
    write = asyncio.create_task(writer.apply(CONFIGMAPS, configmap()))
    await asyncio.sleep(0)
    coming = str(client.version + 1)
    woken(writer, configmap(version=coming))  # the echo, ahead of the response
    woken(writer, configmap(version=str(client.version + 2)))  # a change right after it
    assert woken.by == []  # held while in flight
    client.release.set()
    written = await write
    assert written["metadata"]["resourceVersion"] == coming
    assert woken.by == [str(client.version + 1)]  # the change woke, the echo did not


@pytest.mark.parametrize("how", ["failed", "cancelled"])
async def test_events_held_by_a_write_that_never_returned_wake(
    writer: Writer, client: ScriptedClient, how: str
) -> None:
    woken = Woken()
    await writer.apply(CONFIGMAPS, configmap())
    client.release.clear()
    if how == "failed":
        client.fail_next = ApiError(500, "PATCH", "/api/v1/...", {"message": "boom"}, None)
    write = asyncio.create_task(writer.apply(CONFIGMAPS, configmap()))
    await asyncio.sleep(0)
    woken(writer, configmap(version="555"))
    assert woken.by == []
    if how == "failed":
        client.release.set()
        with pytest.raises(ApiError):
            await write
    else:
        write.cancel()
        with pytest.raises(asyncio.CancelledError):
            await write
    assert woken.by == ["555"]


async def test_concurrent_writes_of_one_object_are_judged_after_the_last(
    writer: Writer, client: ScriptedClient
) -> None:
    woken = Woken()
    client.release.clear()
    first = asyncio.create_task(writer.apply(CONFIGMAPS, configmap()))
    second = asyncio.create_task(writer.apply(CONFIGMAPS, configmap()))
    await asyncio.sleep(0)
    woken(writer, configmap(version=str(client.version + 1)))  # the first's echo
    woken(writer, configmap(version=str(client.version + 2)))  # the second's echo
    client.release.set()
    await asyncio.gather(first, second)
    # Only the last write's version is ours to drop; the first's is a state we moved past.
    assert woken.by == [str(client.version - 1)]


async def test_what_it_remembers_is_bounded(writer: Writer) -> None:
    woken = Woken()
    first = await writer.apply(CONFIGMAPS, configmap("cm-0"))
    for n in range(1, OWN_WRITES_KEPT + 1):
        await writer.apply(CONFIGMAPS, configmap(f"cm-{n}"))
    woken(writer, first)  # forgotten: a spare wake, never a missed one
    assert woken.by == [first["metadata"]["resourceVersion"]]
