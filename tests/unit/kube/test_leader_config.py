"""Leader election without a cluster: config validation, and the elector's decisions against an
in-memory Lease API with a fake monotonic clock (expiry, conflicts, release, the write gate)."""

from __future__ import annotations

import asyncio
import copy
import re
import socket
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.kubeconfig import ClusterAccess
from linkerd_config.kube.leader import (
    LeaderElectionConfig,
    LeaderElector,
    LeaderGate,
    NoElection,
    NotLeaderError,
    micro_time,
)
from tests.support.clock import FakeClock

NS, NAME = "ns", "lock"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{NAME}"
MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


# -- config ------------------------------------------------------------------------------------


def test_defaults_match_client_go() -> None:
    cfg = LeaderElectionConfig("ns", "name")
    assert (cfg.lease_duration, cfg.renew_deadline, cfg.retry_period) == (15.0, 10.0, 2.0)
    assert cfg.release_on_cancel is True
    assert cfg.lease_path == "/apis/coordination.k8s.io/v1/namespaces/ns/leases/name"


def test_default_identity_is_hostname_and_uuid_and_unique_per_instance() -> None:
    a, b = LeaderElectionConfig("ns", "name"), LeaderElectionConfig("ns", "name")
    host, sep, rest = a.identity.rpartition("_")
    assert sep == "_" and host == socket.gethostname()
    uuid.UUID(rest)  # raises if not a UUID
    assert a.identity != b.identity


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"renew_deadline": 15.0}, "renew_deadline .* must be less than lease_duration"),
        ({"renew_deadline": 20.0}, "renew_deadline .* must be less than lease_duration"),
        ({"retry_period": 10.0}, "retry_period .* must be less than renew_deadline"),
        ({"retry_period": 0}, "retry_period must be a positive number"),
        ({"lease_duration": -1}, "lease_duration must be a positive number"),
        ({"renew_deadline": float("nan")}, "renew_deadline must be a positive number"),
        (
            {"lease_duration": 0.5, "renew_deadline": 0.4, "retry_period": 0.1},
            "at least 1s",
        ),
        ({"identity": ""}, "identity must not be empty"),
        ({"lease_name": ""}, "lease_name must not be empty"),
        ({"lease_namespace": ""}, "lease_namespace must not be empty"),
    ],
)
def test_invalid_configs_are_rejected_with_a_clear_error(
    kwargs: dict[str, Any], message: str
) -> None:
    args: dict[str, Any] = {"lease_namespace": "ns", "lease_name": "name", **kwargs}
    with pytest.raises(ValueError, match=message):
        LeaderElectionConfig(**args)


def test_config_is_frozen_and_rounds_duration_up() -> None:
    cfg = LeaderElectionConfig("ns", "n", lease_duration=4.2, renew_deadline=3, retry_period=0.5)
    assert cfg.lease_duration_seconds == 5
    with pytest.raises(AttributeError):
        cfg.lease_duration = 1  # type: ignore[misc]


def test_micro_time_format() -> None:
    assert MICRO.match(micro_time())


# -- an in-memory Lease API --------------------------------------------------------------------


class FakeLeaseApi:
    """Just enough of the API server: GET/POST/PUT Leases with resourceVersion conflicts."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.rv = 0
        self.calls: list[tuple[str, str, bool]] = []

    def store(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.objects[path] = obj
        return copy.deepcopy(obj)

    def seed(
        self, holder: str, duration: int = 15, renew: str = "2000-01-01T00:00:00.000000Z"
    ) -> None:
        self.store(
            LEASE_PATH,
            {
                "metadata": {"name": NAME, "namespace": NS},
                "spec": {
                    "holderIdentity": holder,
                    "leaseDurationSeconds": duration,
                    "acquireTime": renew,
                    "renewTime": renew,
                    "leaseTransitions": 3,
                },
            },
        )

    def spec(self) -> dict[str, Any]:
        return dict(self.objects[LEASE_PATH]["spec"])

    async def request(
        self, method: str, path: str, *, body: Any = None, fenced: bool = True, **_: Any
    ) -> dict[str, Any]:
        self.calls.append((method, path, fenced))
        await asyncio.sleep(0)
        if method == "GET":
            if path not in self.objects:
                raise ApiError(404, method, path, {"reason": "NotFound"}, None)
            return copy.deepcopy(self.objects[path])
        if method == "POST":
            target = f"{path}/{body['metadata']['name']}"
            if target in self.objects:
                raise ApiError(409, method, path, {"reason": "AlreadyExists"}, None)
            return self.store(target, body)
        if method == "PUT":
            if path not in self.objects:
                raise ApiError(404, method, path, {"reason": "NotFound"}, None)
            current = self.objects[path]["metadata"]["resourceVersion"]
            if body["metadata"].get("resourceVersion") != current:
                raise ApiError(409, method, path, {"reason": "Conflict"}, None)
            return self.store(path, body)
        raise AssertionError(f"unexpected {method} {path}")


def make(
    api: FakeLeaseApi,
    identity: str,
    clock: Callable[[], float] | None = None,
    registry: CollectorRegistry | None = None,
    **timings: float,
) -> LeaderElector:
    cfg = LeaderElectionConfig(
        NS,
        NAME,
        identity=identity,
        lease_duration=timings.get("lease", 15),
        renew_deadline=timings.get("renew", 10),
        retry_period=timings.get("retry", 0.02),
    )
    kwargs: dict[str, Any] = {"clock": clock} if clock else {}
    return LeaderElector(api, cfg, registry, **kwargs)  # type: ignore[arg-type]


async def until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while True:
            if cond():
                return
            await asyncio.sleep(0.005)


def status(registry: CollectorRegistry, name: str = NAME) -> float | None:
    return registry.get_sample_value("leader_election_master_status", {"name": name})


async def record_transitions(leadership: LeaderElector | NoElection, out: list[str]) -> None:
    """What a manager sees: leadership gained, then lost, as the two signals say."""
    while True:
        await leadership.wait_for_leadership()
        out.append("started")
        await leadership.leadership_lost.wait()
        out.append("stopped")


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)


# -- elector behaviour -------------------------------------------------------------------------


async def test_first_candidate_creates_the_lease_leads_and_releases_on_cancel() -> None:
    api, registry = FakeLeaseApi(), CollectorRegistry()
    el = make(api, "me", registry=registry)
    calls: list[str] = []
    assert status(registry) == 0  # the series exists before the first scrape

    recorder = asyncio.create_task(record_transitions(el, calls))
    task = asyncio.create_task(el.run())
    await el.wait_for_leadership(timeout=5)
    spec = api.spec()
    assert spec["holderIdentity"] == "me"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert MICRO.match(spec["renewTime"]) and MICRO.match(spec["acquireTime"])
    assert el.is_leader and LeaderGate(el).allowed and status(registry) == 1
    assert not el.leadership_lost.is_set()

    first_renew = spec["renewTime"]
    await until(lambda: api.spec()["renewTime"] != first_renew)  # it keeps renewing
    assert api.spec()["acquireTime"] == spec["acquireTime"]  # same term

    await stop(task)
    released = api.spec()
    assert released["holderIdentity"] == ""
    assert released["leaseDurationSeconds"] == 1
    assert released["leaseTransitions"] == 0
    assert el.leadership_lost.is_set() and not el.is_leader and status(registry) == 0
    await until(lambda: calls == ["started", "stopped"])
    await stop(recorder)
    assert all(not fenced for _, _, fenced in api.calls), "the elector must bypass the gate"


async def test_follower_judges_expiry_on_its_own_clock_not_the_record_renew_time() -> None:
    api, clock = FakeLeaseApi(), FakeClock()
    api.seed("other", duration=15, renew="2000-01-01T00:00:00.000000Z")  # "ancient" renewTime
    el = make(api, "me", clock)

    with capture_logs() as logs:
        assert not await el._attempt()  # first sight starts our clock, whatever renewTime says
    assert el.leader == "other"
    assert [e["leader"] for e in logs if e["event"] == "new leader observed"] == ["other"]
    clock.now += 14.9
    assert not await el._attempt()
    # The holder renews: the record changed, so the expiry clock restarts from now.
    spec = api.spec() | {"renewTime": micro_time()}
    api.store(LEASE_PATH, {**api.objects[LEASE_PATH], "spec": spec})
    assert not await el._attempt()
    clock.now += 14.9
    assert not await el._attempt()
    clock.now += 0.2
    assert await el._attempt()
    spec = api.spec()
    assert spec["holderIdentity"] == "me"
    assert spec["leaseTransitions"] == 4  # holder changed: 3 -> 4
    assert spec["acquireTime"] != "2000-01-01T00:00:00.000000Z"
    assert el.leader == "me"


async def test_released_lease_is_taken_at_once() -> None:
    api, clock = FakeLeaseApi(), FakeClock()
    api.seed("", duration=1)
    el = make(api, "me", clock)
    assert await el._attempt()
    assert api.spec()["holderIdentity"] == "me"


async def test_conflicting_create_and_update_mean_someone_else_won() -> None:
    api = FakeLeaseApi()
    a, b = make(api, "a"), make(api, "b")
    results = await asyncio.gather(a._attempt(), b._attempt())
    assert sorted(results) == [False, True]  # both saw 404; one POST got 409
    winner = "a" if results[0] else "b"
    assert api.spec()["holderIdentity"] == winner

    # A PUT carrying a stale resourceVersion is refused, whatever the lease looks like.
    api2, clock = FakeLeaseApi(), FakeClock()
    api2.seed("gone", duration=1)
    el = make(api2, "me", clock)
    real = api2.request

    async def racing(method: str, path: str, **kw: Any) -> dict[str, Any]:
        result = await real(method, path, **kw)
        if method == "GET":  # another candidate writes between our GET and our PUT
            api2.store(LEASE_PATH, {**api2.objects[LEASE_PATH], "spec": api2.spec()})
        return result

    api2.request = racing  # type: ignore[method-assign]
    assert not await el._attempt()


async def test_gate_closes_when_renew_deadline_passes_even_before_the_loop_notices() -> None:
    api, clock = FakeLeaseApi(), FakeClock()
    el = make(api, "me", clock, lease=4, renew=3, retry=0.02)
    gate = LeaderGate(el)
    task = asyncio.create_task(el.run())
    try:
        await el.wait_for_leadership(timeout=5)
        gate.check("POST", "/api/v1/namespaces/x/configmaps")
        clock.now += 2.9
        gate.check("PUT", "/api/v1/namespaces/x/configmaps/y")
        clock.now += 0.2  # 3.1s since the last renew started: a pause, as the process sees it
        with pytest.raises(NotLeaderError) as info:
            gate.check("DELETE", "/api/v1/namespaces/x/configmaps/y")  # no await in between
        assert "DELETE /api/v1/namespaces/x/configmaps/y" in str(info.value)
        assert "renew deadline" in str(info.value)
        assert not gate.allowed and not el.is_leader
        await asyncio.wait_for(el.leadership_lost.wait(), 5)  # and the loop gives up too
    finally:
        await stop(task)


async def test_leader_loses_at_once_when_another_holder_took_the_lease() -> None:
    api = FakeLeaseApi()
    el = make(api, "me", lease=15, renew=10, retry=0.02)
    task = asyncio.create_task(el.run())
    try:
        await el.wait_for_leadership(timeout=5)
        api.store(
            LEASE_PATH, {**api.objects[LEASE_PATH], "spec": api.spec() | {"holderIdentity": "x"}}
        )
        await asyncio.wait_for(el.leadership_lost.wait(), 2)  # far sooner than renew_deadline
        assert el.leader == "x" and not el.is_leader
    finally:
        await stop(task)
    assert api.spec()["holderIdentity"] == "x", "a non-holder must not release"


async def test_not_leader_error_is_raised_before_any_io() -> None:
    api = FakeLeaseApi()
    el = make(api, "me")

    async def no_token() -> str | None:
        return None

    access = ClusterAccess("https://127.0.0.1:1", False, no_token, "test")
    client = KubeClient(access, write_gate=LeaderGate(el))  # never opened: I/O would fail
    with pytest.raises(NotLeaderError, match="POST /api/v1/namespaces/a/configmaps"):
        await client.request("POST", "/api/v1/namespaces/a/configmaps", body={})
    with pytest.raises(RuntimeError, match="before open"):
        await client.request("GET", "/api/v1/namespaces/a/configmaps")  # reads pass the gate


async def test_no_election_always_leads() -> None:
    registry = CollectorRegistry()
    events: list[str] = []
    ne = NoElection("lock", registry)
    recorder = asyncio.create_task(record_transitions(ne, events))
    gate = LeaderGate(ne)
    await ne.wait_for_leadership(timeout=0.1)
    assert ne.is_leader and gate.allowed
    gate.check("DELETE", "/x")
    task: asyncio.Task[None] = asyncio.create_task(ne.run())
    await until(lambda: events == ["started"] and status(registry, "lock") == 1)
    await stop(task)
    await until(lambda: events == ["started", "stopped"])
    assert ne.leadership_lost.is_set() and status(registry, "lock") == 0
    await stop(recorder)
