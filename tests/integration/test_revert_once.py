"""A manual edit of ``linkerd-config`` is reverted by one reconcile (issue 40): the watch's
echo of our own write wakes nobody, in both formats, with the webhooks off and on.

On a control plane of the test's own, with the format's Linkerd and its real injector and
the controller in this process, after the LinkerdConfig is Ready:

* **Sequential edits.** Ten times: a manual edit of the proxy version in the managed key,
  waited for until it is reverted. The controller's own reconcile counter
  (``controller_runtime_reconcile_total``) counts at most 1.3 reconciles per edit; before the
  change it was two each (the edit's, then our write's echo).
* **Its Event.** Every revert records ``ConfigMapReverted`` on the LinkerdConfig; repeats
  within 5 s wait and their newest count is written when the interval is up (no flush in
  this process): the Event ends counting at least the ten sequential reverts. After the
  graceful stop it counts exactly the reverts recorded: the count still waiting then is
  written before the Lease goes.
* **An edit racing our write.** Edits sent back to back, each while the previous one's
  revert may be in flight: the last one wins the race or not, but it is reverted too (an
  event that comes while our write is in flight is judged when the write returns, never
  dropped as our echo).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from devcluster.cluster import LocalControlPlane
from linkerd_config.app import App
from linkerd_config.kube.client import MERGE_PATCH, KubeClient
from linkerd_config.kube.resource import CONFIGMAPS, EVENTS
from tests.support import formats, scenario, webhooks_on
from tests.support.formats import Format
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

CM_PATH = CONFIGMAPS.path("linkerd", "linkerd-config")
CASES = webhooks_on.FORMAT_CASES
MANAGED_KEY = {"legacy": "proxy", "values": "values"}
EDITS = 10


def reconciles(app: App) -> float:
    total = 0.0
    for result in ("success", "error", "requeue", "requeue_after"):
        total += (
            app.registry.get_sample_value(
                "controller_runtime_reconcile_total",
                {"controller": "linkerdconfig", "result": result},
            )
            or 0.0
        )
    return total


async def ready(kube: KubeClient) -> dict[str, Any] | None:
    cond = await scenario.condition(kube, "managed", "Ready")
    return cond if cond.get("status") == "True" else None


async def edit(kube: KubeClient, key: str, written: str, version: str, n: int) -> None:
    """The proxy version we wrote, changed by hand (as ``kubectl edit`` would)."""
    assert version in written, (version, written)
    edited = written.replace(version, f"{version}-by-hand-{n}")
    await kube.request(
        "PATCH", CM_PATH, body={"data": {key: edited}}, content_type=MERGE_PATCH, fenced=False
    )


async def holds(kube: KubeClient, key: str, value: str) -> bool:
    data = (await kube.request("GET", CM_PATH)).get("data") or {}
    return data.get(key) == value


async def revert_event_count(kube: KubeClient) -> int:
    """The count of the LinkerdConfig's ``ConfigMapReverted`` Event (cluster-scoped: its
    Events are in ``default``), 0 if there is none yet."""
    listed = await kube.request(
        "GET",
        EVENTS.path("default"),
        params={"fieldSelector": "involvedObject.kind=LinkerdConfig,involvedObject.name=managed"},
    )
    found = [e for e in listed["items"] if e["reason"] == "ConfigMapReverted"]
    return max((int(e.get("count") or 1) for e in found), default=0)


def reverts_recorded(app: App) -> list[int]:
    """How many ``ConfigMapReverted`` Events the app's recorder is asked for, as it goes."""
    seen = [0]
    record = app.recorder.record

    def counting(involved: Any, type: str, reason: str, message: str) -> None:
        seen[0] += reason == "ConfigMapReverted"
        record(involved, type, reason, message)

    app.recorder.record = counting  # type: ignore[method-assign]
    return seen


async def quiet(app: App) -> float:
    """The reconcile count once it has not moved for a second."""
    before = reconciles(app)
    while True:
        await asyncio.sleep(1.0)
        now = reconciles(app)
        if now == before:
            return now
        before = now


@pytest.mark.parametrize(("fmt", "webhooks"), CASES)
async def test_each_edit_is_reverted_by_one_reconcile(
    own_control_plane: LocalControlPlane,
    own_kube: KubeClient,
    tmp_path: Path,
    fmt: Format,
    webhooks: bool,
) -> None:
    cp, kube = own_control_plane, own_kube
    async with (
        formats.installed(cp, kube, fmt),
        webhooks_on.controller(cp, kube, tmp_path / "certs", webhooks, "revert-once") as app,
    ):
        recorded = reverts_recorded(app)
        await scenario.apply_linkerdconfig(kube, "managed", fmt.spec(fmt.good, {}))
        await eventually(lambda: ready(kube), timeout=120, what="managed Ready")
        key = MANAGED_KEY[fmt.name]
        written = (await kube.request("GET", CM_PATH))["data"][key]
        before = await quiet(app)

        for n in range(EDITS):
            await edit(kube, key, written, fmt.good, n)
            await eventually(
                lambda: holds(kube, key, written), timeout=30, interval=0.05, what=f"edit {n}"
            )
        after = await quiet(app)
        per_edit = (after - before) / EDITS
        print(f"\n{fmt.name}, webhooks {'on' if webhooks else 'off'}: {per_edit:.2f} per edit")
        assert per_edit <= 1.3, (before, after)

        async def counted() -> int | None:
            count = await revert_event_count(kube)
            return count if count >= EDITS else None

        await eventually(counted, timeout=30, what=f"the revert Event counting {EDITS}")

        # Back to back: each edit may land while the previous one's revert is in flight.
        for n in range(EDITS, EDITS + 5):
            await edit(kube, key, written, fmt.good, n)
        await eventually(
            lambda: holds(kube, key, written), timeout=30, interval=0.05, what="the last edit"
        )
        await quiet(app)
        assert await holds(kube, key, written)
        assert await ready(kube) is not None
    # The graceful stop wrote the count still waiting for its interval, before the Lease went:
    # the Event counts every revert the controller recorded, the back-to-back ones included.
    assert recorded[0] >= EDITS + 1
    assert await revert_event_count(kube) == recorded[0]
