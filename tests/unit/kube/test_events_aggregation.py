"""Event correlation decisions with fake clocks, and the recorder's writes to a fake client."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from linkerd_config.kube.client import MERGE_PATCH, ApiError
from linkerd_config.kube.events import (
    AGGREGATE_PREFIX,
    Action,
    EventCorrelator,
    EventRecorder,
    EventSpec,
    ObjectRef,
    SpamFilter,
)
from linkerd_config.kube.leader import NotLeaderError
from tests.support.clock import FakeClock
from tests.support.waiting import eventually


def correlator(clock: FakeClock, **kw: Any) -> EventCorrelator:
    return EventCorrelator(clock=clock, wall_clock=clock, **kw)


def spec(
    message: str = "m",
    reason: str = "Synced",
    uid: str = "u1",
    name: str = "obj",
    type: str = "Normal",
    component: str = "c",
) -> EventSpec:
    ref = ObjectRef("ConfigMap", name, "ns", uid, "v1", "7")
    return EventSpec(ref, type, reason, message, component, "host-1")


# -- de-duplication ----------------------------------------------------------------------------


def test_identical_events_patch_one_event_with_a_growing_count() -> None:
    clock = FakeClock(1_700_000_000.0)
    c = correlator(clock)
    first = c.correlate(spec())
    assert first.action is Action.CREATE and first.count == 1
    assert first.name.startswith("obj.") and int(first.name[4:], 16) > 0
    clock.now += 30
    second = c.correlate(spec())
    clock.now += 30
    third = c.correlate(spec())
    assert (second.action, third.action) == (Action.PATCH, Action.PATCH)
    assert (second.name, third.name) == (first.name, first.name)
    assert (second.count, third.count) == (2, 3)
    assert third.first_timestamp == first.first_timestamp
    assert third.last_timestamp == first.first_timestamp + 60


@pytest.mark.parametrize(
    "other",
    [
        spec(uid="u2"),  # another object (same name, new incarnation)
        spec(type="Warning"),
        spec(reason="Other"),
        spec(message="different"),
        spec(component="other-controller"),
    ],
)
def test_events_differing_in_any_key_field_are_separate(other: EventSpec) -> None:
    c = correlator(FakeClock(1_700_000_000.0))
    a = c.correlate(spec())
    b = c.correlate(other)
    assert b.action is Action.CREATE and b.name != a.name


def test_a_repeat_after_the_window_creates_a_new_event() -> None:
    clock = FakeClock(1_700_000_000.0)
    c = correlator(clock)
    a = c.correlate(spec())
    clock.now += 600  # exactly the window: still the same event
    assert c.correlate(spec()).action is Action.PATCH
    clock.now += 600.5
    b = c.correlate(spec())
    assert b.action is Action.CREATE and b.count == 1 and b.name != a.name


# -- aggregation of similar events -------------------------------------------------------------


def test_similar_events_beyond_the_threshold_are_combined() -> None:
    clock = FakeClock(1_700_000_000.0)
    c = correlator(clock)
    separate = [c.correlate(spec(message=f"msg-{i}")) for i in range(9)]
    assert all(d.action is Action.CREATE and not d.aggregated for d in separate)
    assert len({d.name for d in separate}) == 9

    tenth = c.correlate(spec(message="msg-9"))
    assert tenth.action is Action.CREATE and tenth.aggregated
    assert tenth.message == AGGREGATE_PREFIX + "msg-9"

    eleventh = c.correlate(spec(message="msg-10"))
    assert eleventh.action is Action.PATCH and eleventh.name == tenth.name
    assert eleventh.count == 2 and eleventh.message == AGGREGATE_PREFIX + "msg-10"
    again = c.correlate(spec(message="msg-9"))  # a combined message stays combined
    assert again.name == tenth.name and again.count == 3

    # One of the first nine keeps counting on its own Event.
    repeat = c.correlate(spec(message="msg-3"))
    assert repeat.action is Action.PATCH and repeat.name == separate[3].name
    assert repeat.count == 2 and not repeat.aggregated

    # Another reason on the same object is its own group.
    assert not c.correlate(spec(reason="Other", message="x")).aggregated


def test_similar_group_resets_after_a_quiet_window() -> None:
    clock = FakeClock(1_700_000_000.0)
    c = correlator(clock, max_similar=3)
    c.correlate(spec(message="a"))
    c.correlate(spec(message="b"))
    assert c.correlate(spec(message="c")).aggregated
    clock.now += 601
    d = c.correlate(spec(message="d"))
    assert d.action is Action.CREATE and not d.aggregated


# -- spam filter -------------------------------------------------------------------------------


def test_spam_filter_allows_a_burst_of_25_then_one_per_five_minutes() -> None:
    clock = FakeClock(1_700_000_000.0)
    c = correlator(clock)
    decisions = [c.correlate(spec(message=f"m{i % 3}")) for i in range(25)]
    assert all(d.action is not Action.DROP for d in decisions)
    dropped = c.correlate(spec(message="m0"))
    assert dropped.action is Action.DROP and dropped.throttle_started
    again = c.correlate(spec(message="m0"))
    assert again.action is Action.DROP and not again.throttle_started

    # Other objects have their own budget.
    assert c.correlate(spec(uid="u2", name="other")).action is Action.CREATE

    clock.now += 299
    assert c.correlate(spec(message="m0")).action is Action.DROP
    clock.now += 1
    refilled = c.correlate(spec(message="m0"))
    assert refilled.action is Action.PATCH and refilled.count == 10  # m0 was sent 9 times
    assert c.correlate(spec(message="m0")).action is Action.DROP


def test_warnings_are_never_dropped_and_spend_no_budget() -> None:
    clock = FakeClock(1_700_000_000.0)
    c = correlator(clock, spam_burst=2)
    assert c.correlate(spec()).action is Action.CREATE
    assert c.correlate(spec()).action is Action.PATCH
    assert c.correlate(spec()).action is Action.DROP  # Normal: the budget is spent
    failures = [c.correlate(spec(message=f"w{i}", type="Warning")) for i in range(40)]
    assert all(d.action is not Action.DROP for d in failures)
    # Still bounded: beyond the similar-message threshold they share one combined Event.
    assert len({d.name for d in failures}) == 10
    assert failures[-1].message.startswith(AGGREGATE_PREFIX)
    assert c.correlate(spec()).action is Action.DROP  # and Normal ones stay throttled


def test_dropped_events_do_not_advance_counts() -> None:
    clock = FakeClock(1_700_000_000.0)
    c = correlator(clock, spam_burst=2)
    c.correlate(spec())
    c.correlate(spec())
    assert c.correlate(spec()).action is Action.DROP
    clock.now += 300
    assert c.correlate(spec()).count == 3


def test_spam_filter_is_a_token_bucket_per_key() -> None:
    f = SpamFilter(burst=1, qps=0.5, max_entries=2)
    assert f.allow(("a",), 0.0) and not f.allow(("a",), 1.0) and f.allow(("a",), 2.0)
    assert f.allow(("b",), 2.0)  # another object has its own budget
    with pytest.raises(ValueError, match="burst"):
        SpamFilter(burst=0)


def test_event_names_are_unique_and_valid_even_within_one_clock_tick() -> None:
    c = correlator(FakeClock(1_700_000_000.0))
    names = {c.correlate(spec(message=str(i))).name for i in range(5)}
    assert len(names) == 5
    long = c.correlate(spec(name="x" * 253))
    assert len(long.name) <= 253 and long.name.startswith("xxx")


# -- the recorder against a fake client --------------------------------------------------------


class FakeClient:
    def __init__(self) -> None:
        self.events: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str, Any, str]] = []
        self.fail_with: Exception | None = None

    async def request(
        self, method: str, path: str, *, body: Any = None, content_type: str = "", **_: Any
    ) -> dict[str, Any]:
        self.calls.append((method, path, copy.deepcopy(body), content_type))
        await asyncio.sleep(0)
        if self.fail_with is not None:
            raise self.fail_with
        if method == "POST":
            self.events[f"{path}/{body['metadata']['name']}"] = copy.deepcopy(body)
            return body  # type: ignore[no-any-return]
        if method == "PATCH":
            if path not in self.events:
                raise ApiError(404, method, path, {"reason": "NotFound"}, None)
            self.events[path].update(body)
            return self.events[path]
        raise AssertionError(method)


CM = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "cm", "namespace": "ns", "uid": "abc", "resourceVersion": "5"},
}
NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "n-uid"}}


async def start(recorder: EventRecorder) -> asyncio.Task[None]:
    return asyncio.create_task(recorder.run())


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)


async def test_recorder_creates_then_patches_and_fills_every_field() -> None:
    client = FakeClient()
    rec = EventRecorder(client, "linkerd-config", instance="pod-1")  # type: ignore[arg-type]
    rec.record(CM, "Normal", "Synced", "hello")
    rec.record(CM, "Normal", "Synced", "hello")
    rec.record(NODE, "Warning", "Broken", "node says no")
    assert client.calls == [] and rec.pending == 3  # record() did no I/O
    task = await start(rec)
    try:
        assert await rec.flush(5)
    finally:
        await stop(task)

    # The repeat's count waited for its series interval; flush wrote it after the rest.
    (post, _, body, _), (post2, npath, nbody, _), (patch, ppath, pbody, ctype) = client.calls
    assert (post, post2, patch) == ("POST", "POST", "PATCH")
    assert ppath == f"/api/v1/namespaces/ns/events/{body['metadata']['name']}"
    assert ctype == MERGE_PATCH and pbody["count"] == 2 and "lastTimestamp" in pbody
    assert body["involvedObject"] == {
        "kind": "ConfigMap",
        "name": "cm",
        "namespace": "ns",
        "uid": "abc",
        "apiVersion": "v1",
        "resourceVersion": "5",
    }
    assert body["source"] == {"component": "linkerd-config", "host": "pod-1"}
    assert body["reportingComponent"] == "linkerd-config"
    assert body["reportingInstance"] == "pod-1"
    assert body["count"] == 1 and body["type"] == "Normal" and body["reason"] == "Synced"
    assert body["firstTimestamp"].endswith("Z") and body["lastTimestamp"].endswith("Z")
    # Cluster-scoped objects' events go to "default", with no namespace on the reference.
    assert npath == "/api/v1/namespaces/default/events"
    assert "namespace" not in nbody["involvedObject"]
    assert rec.stats == {"created": 2, "patched": 1}


async def test_patch_of_a_missing_event_falls_back_to_create_with_the_full_count() -> None:
    client = FakeClient()
    rec = EventRecorder(client, "c")  # type: ignore[arg-type]
    client.fail_with = ApiError(500, "POST", "/x", {"message": "boom"}, None)
    rec.record(CM, "Normal", "R", "m")
    task = await start(rec)
    try:
        assert await rec.flush(5)
        client.fail_with = None
        rec.record(CM, "Normal", "R", "m")
        assert await rec.flush(5)
    finally:
        await stop(task)
    methods = [c[0] for c in client.calls]
    assert methods == ["POST", "PATCH", "POST"]
    (event,) = client.events.values()
    assert event["count"] == 2
    assert rec.stats["failed"] == 1 and rec.stats["created"] == 1


async def test_write_errors_are_logged_not_raised() -> None:
    client = FakeClient()
    rec = EventRecorder(client, "c")  # type: ignore[arg-type]
    task = await start(rec)
    try:
        client.fail_with = NotLeaderError("POST", "/api/v1/namespaces/ns/events", "follower")
        rec.record(CM, "Normal", "R", "one")
        assert await rec.flush(5)
        client.fail_with = OSError("connection reset")
        rec.record(CM, "Normal", "R", "two")
        assert await rec.flush(5)
        assert not task.done()  # the writer survives every failure
    finally:
        await stop(task)
    assert rec.stats["refused"] == 1 and rec.stats["failed"] == 1


async def test_record_never_blocks_and_rejects_bad_input() -> None:
    client = FakeClient()
    rec = EventRecorder(client, "c", max_queue=2)  # type: ignore[arg-type]
    for i in range(4):
        rec.record(CM, "Normal", "R", f"m{i}")
    assert rec.pending == 2 and rec.stats["dropped_queue"] == 2
    assert not await rec.flush(0.05)  # nobody is writing: flush times out, does not hang
    with pytest.raises(ValueError, match="type"):
        rec.record(CM, "Error", "R", "m")
    with pytest.raises(ValueError, match=r"kind and metadata\.name"):
        rec.record({"metadata": {}}, "Normal", "R", "m")


async def test_spam_filtered_events_are_not_written() -> None:
    client = FakeClient()
    rec = EventRecorder(client, "c")  # type: ignore[arg-type]
    for _ in range(30):
        rec.record(CM, "Normal", "Busy", "same")
    # 25 allowed: one create queued, the 24 repeats' newest count waiting for its interval.
    assert rec.stats["dropped_spam"] == 5 and rec.pending == 2
    rec.record(CM, "Warning", "Failing", "same")  # a failure is never dropped
    assert rec.stats["dropped_spam"] == 5 and rec.pending == 3


# -- a repeated Event's count: written at most once per series interval -------------------------


def patches(client: FakeClient) -> list[dict[str, Any]]:
    return [body for method, _, body, _ in client.calls if method == "PATCH"]


async def test_repeats_within_the_interval_cost_one_patch_written_when_it_is_up() -> None:
    client = FakeClient()
    rec = EventRecorder(client, "c", series_interval=0.2)  # type: ignore[arg-type]
    task = await start(rec)
    try:
        rec.record(CM, "Normal", "Reverted", "again")

        async def created() -> bool:
            return rec.stats["created"] == 1

        async def patched() -> bool:
            return rec.stats["patched"] == 1

        await eventually(created, timeout=5, what="the create")
        for _ in range(4):
            rec.record(CM, "Normal", "Reverted", "again")
        assert rec.pending == 1 and patches(client) == []  # the newest count waits
        # No flush: its timer writes it.
        await eventually(patched, timeout=5, what="the waiting count")
        assert rec.pending == 0
    finally:
        await stop(task)
    ((event,),) = [list(client.events.values())]
    assert [p["count"] for p in patches(client)] == [5] and event["count"] == 5
    assert rec.stats == {"created": 1, "patched": 1}


async def test_the_newest_waiting_count_replaces_older_ones_and_flush_writes_it() -> None:
    clock = FakeClock(1000.0)
    rec = EventRecorder(FakeClient(), "c", clock=clock)  # type: ignore[arg-type]
    rec.record(CM, "Normal", "R", "m")
    waits = []
    for message in ("m", "m", "m"):
        clock.now += 1
        rec.record(CM, "Normal", "R", message)
        waits.append(rec.pending)
    assert waits == [2, 2, 2]  # the create, and one waiting count however many repeats
    client: FakeClient = rec.client  # type: ignore[assignment]
    task = await start(rec)
    try:
        assert await rec.flush(5)
    finally:
        await stop(task)
    (patch,) = patches(client)
    assert patch["count"] == 4
    (post,) = [body for method, _, body, _ in client.calls if method == "POST"]
    assert patch["lastTimestamp"] >= post["lastTimestamp"]


async def test_a_repeat_after_the_interval_is_queued_at_once_and_supersedes_a_waiting_one() -> None:
    clock = FakeClock(1000.0)
    client = FakeClient()
    rec = EventRecorder(client, "c", clock=clock)  # type: ignore[arg-type]
    rec.record(CM, "Normal", "R", "m")
    clock.now += 4.9
    rec.record(CM, "Normal", "R", "m")  # within 5 s of the create: waits
    assert rec.pending == 2 and rec._queue.qsize() == 1
    clock.now += 0.1
    rec.record(CM, "Normal", "R", "m")  # 5 s on: queued now, the waiting count superseded
    assert rec.pending == 2 and rec._queue.qsize() == 2
    task = await start(rec)
    try:
        assert await rec.flush(5)
    finally:
        await stop(task)
    assert [c[0] for c in client.calls] == ["POST", "PATCH"]
    assert [p["count"] for p in patches(client)] == [3] and rec.pending == 0


async def test_a_zero_interval_writes_every_repeat_as_client_go_tools_record() -> None:
    client = FakeClient()
    rec = EventRecorder(client, "c", series_interval=0)  # type: ignore[arg-type]
    for _ in range(3):
        rec.record(CM, "Normal", "R", "m")
    assert rec.pending == 3
    task = await start(rec)
    try:
        assert await rec.flush(5)
    finally:
        await stop(task)
    assert [p["count"] for p in patches(client)] == [2, 3]
    with pytest.raises(ValueError, match="series_interval"):
        EventRecorder(client, "c", series_interval=-1)  # type: ignore[arg-type]


def test_a_caller_without_an_event_loop_queues_every_repeat() -> None:
    rec = EventRecorder(FakeClient(), "c")  # type: ignore[arg-type]
    for _ in range(3):
        rec.record(CM, "Normal", "R", "m")
    assert rec.pending == 3  # nothing to wait on: nothing is held back
