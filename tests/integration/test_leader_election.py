"""Leader election, fencing and events against a real kube-apiserver (RBAC and audit on).

Each elector authenticates with a client certificate of its own, in a group that a Role in
the test namespace lets get/create/update Leases, write Events and ConfigMaps, so the audit
log can tell who wrote what. Failover tests run electors in subprocesses
(``tests/support/elector_process.py``) so the leader can really be SIGKILLed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from devcluster.cluster import LocalControlPlane
from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.events import AGGREGATE_PREFIX, EventRecorder
from linkerd_config.kube.kubeconfig import load_access
from linkerd_config.kube.leader import (
    LeaderElectionConfig,
    LeaderElector,
    LeaderGate,
    NotLeaderError,
)
from linkerd_config.kube.resource import CONFIGMAPS, EVENTS, LEASES, NAMESPACES
from tests.support.audit import audit_entries

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "tests" / "support" / "elector_process.py"
GROUP = "linkerd-config:test-electors"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}

# Short timings so failover tests take seconds, not minutes.
LEASE, RENEW, RETRY = 4.0, 3.0, 0.5

TAKEOVER: dict[str, float] = {}  # measured times, printed at the end of the module


# -- helpers -----------------------------------------------------------------------------------


async def eventually(
    check: Callable[[], Awaitable[bool]] | Callable[[], bool], timeout: float, what: str
) -> None:
    """Poll until ``check`` holds; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def client_as(cp: LocalControlPlane, user: str) -> AsyncIterator[KubeClient]:
    access = await load_access(str(cp.add_user(user, [GROUP])))
    async with KubeClient(access, user_agent=f"test/{user}") as client:
        yield client


def config(ns: str, lease: str, identity: str) -> LeaderElectionConfig:
    return LeaderElectionConfig(
        ns, lease, identity=identity, lease_duration=LEASE, renew_deadline=RENEW, retry_period=RETRY
    )


async def get_lease(kube: KubeClient, ns: str, name: str) -> dict[str, Any]:
    return await kube.request("GET", LEASES.path(ns, name))


def suffix() -> str:
    return uuid.uuid4().hex[:6]


@pytest.fixture(scope="module")
async def namespace(control_plane: LocalControlPlane, kube: KubeClient) -> AsyncIterator[str]:
    """A namespace whose Role lets the test group use Leases, Events and ConfigMaps."""
    ns = f"leader-{suffix()}"
    await kube.request("POST", NAMESPACES.path(), body={"metadata": {"name": ns}})
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "electors", "namespace": ns},
        "rules": [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "verbs": ["get", "list", "watch", "create", "update"],
            },
            {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "create", "patch"]},
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "verbs": ["get", "create", "update", "patch", "delete"],
            },
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "electors", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "electors"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": GROUP}],
    }
    await kube.request(
        "POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", body=role
    )
    await kube.request(
        "POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", body=binding
    )
    async with client_as(control_plane, "rbac-probe") as probe:

        async def authorized() -> bool:
            try:
                await probe.request("GET", LEASES.path(ns, "probe"))
            except ApiError as exc:
                return exc.not_found  # 403 until the authorizer's cache has the binding
            return True

        await eventually(authorized, 30, "the RoleBinding to take effect")
    yield ns
    with contextlib.suppress(ApiError):
        await kube.request("DELETE", NAMESPACES.path(name=ns))


@pytest.fixture(scope="module", autouse=True)
def report_takeover_times() -> Any:
    yield
    if TAKEOVER:
        lines = ", ".join(f"{k}={v:.2f}s" for k, v in TAKEOVER.items())
        print(f"\nmeasured leader takeover times (lease {LEASE}s, retry {RETRY}s): {lines}")


@dataclass
class ElectorProcess:
    """A runner subprocess and the JSON events it printed, with the time each arrived."""

    identity: str
    proc: asyncio.subprocess.Process
    stderr_path: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    reader: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls, cp: LocalControlPlane, ns: str, lease: str, identity: str, tmp: Path
    ) -> ElectorProcess:
        kubeconfig = cp.add_user(identity, [GROUP])
        stderr_path = tmp / f"{identity}.stderr"
        with stderr_path.open("wb") as stderr:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                str(RUNNER),
                f"--kubeconfig={kubeconfig}",
                f"--namespace={ns}",
                f"--lease={lease}",
                f"--identity={identity}",
                f"--lease-duration={LEASE}",
                f"--renew-deadline={RENEW}",
                f"--retry-period={RETRY}",
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                cwd=REPO,
            )
        runner = cls(identity, proc, stderr_path)
        runner.reader = asyncio.create_task(runner._read())
        return runner

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self.events.append(json.loads(line))

    def find(self, event: str, **match: Any) -> dict[str, Any] | None:
        for e in self.events:
            if e["event"] == event and all(e.get(k) == v for k, v in match.items()):
                return e
        return None

    async def wait_for(self, event: str, timeout: float, **match: Any) -> dict[str, Any]:
        try:
            await eventually(lambda: self.find(event, **match) is not None, timeout, event)
        except pytest.fail.Exception:
            pytest.fail(
                f"{self.identity}: no {event!r} {match or ''} within {timeout}s; events: "
                f"{self.events}; stderr tail:\n{self.stderr_path.read_text()[-3000:]}"
            )
        found = self.find(event, **match)
        assert found is not None
        return found

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.proc.wait(), 10)
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.reader


@contextlib.asynccontextmanager
async def running(*electors: LeaderElector) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(e.run()) for e in electors]
    try:
        yield
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.wait(tasks, timeout=15)


# -- (a) two electors in one process -----------------------------------------------------------


async def test_exactly_one_of_two_electors_leads_and_the_follower_knows_who(
    control_plane: LocalControlPlane, kube: KubeClient, namespace: str
) -> None:
    lease = f"inproc-{suffix()}"
    ida, idb = f"inproc-a-{suffix()}", f"inproc-b-{suffix()}"
    seen: dict[str, list[str]] = {ida: [], idb: []}
    started: dict[str, int] = {ida: 0, idb: 0}
    registries = {ida: CollectorRegistry(), idb: CollectorRegistry()}
    async with client_as(control_plane, ida) as ca, client_as(control_plane, idb) as cb:
        electors = []
        for ident, client in ((ida, ca), (idb, cb)):
            electors.append(
                LeaderElector(client, config(namespace, lease, ident), registries[ident])
            )
        a, b = electors

        async def leaders(el: LeaderElector) -> None:
            """Each holder the elector reports, in order."""
            while True:
                if el.leader and el.leader not in seen[el.identity][-1:]:
                    seen[el.identity].append(el.leader)
                await asyncio.sleep(0.01)

        async def terms(el: LeaderElector) -> None:
            """Each term the elector starts, as a manager waiting on it sees them."""
            while True:
                await el.wait_for_leadership()
                started[el.identity] += 1
                await el.leadership_lost.wait()

        observers = [asyncio.create_task(f(el)) for el in electors for f in (leaders, terms)]
        async with running(a, b):
            await eventually(lambda: a.is_leader or b.is_leader, 30, "a leader")
            leader, follower = (a, b) if a.is_leader else (b, a)
            await eventually(
                lambda: leader.identity in seen[follower.identity], 15, "the follower to see it"
            )
            # Over several renew periods, exactly one of them leads.
            for _ in range(40):
                assert leader.is_leader and not follower.is_leader
                await asyncio.sleep(0.1)

            obj = await get_lease(kube, namespace, lease)
            assert obj["spec"]["holderIdentity"] == leader.identity
            assert obj["spec"]["leaseDurationSeconds"] == int(LEASE)
            assert follower.leader == leader.identity
            assert seen[leader.identity] == [leader.identity]
            assert started == {leader.identity: 1, follower.identity: 0}
            assert LeaderGate(leader).allowed and not LeaderGate(follower).allowed
            gauge = "leader_election_master_status"
            assert registries[leader.identity].get_sample_value(gauge, {"name": lease}) == 1
            assert registries[follower.identity].get_sample_value(gauge, {"name": lease}) == 0
        for task in observers:
            task.cancel()


# -- (b) SIGKILL of the leader -----------------------------------------------------------------


async def test_follower_takes_over_after_the_leader_is_killed(
    control_plane: LocalControlPlane, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    lease = f"kill-{suffix()}"
    a = await ElectorProcess.start(control_plane, namespace, lease, f"kill-a-{suffix()}", tmp_path)
    b: ElectorProcess | None = None
    try:
        await a.wait_for("leading", 60)
        b = await ElectorProcess.start(
            control_plane, namespace, lease, f"kill-b-{suffix()}", tmp_path
        )
        await b.wait_for("new_leader", 60, leader=a.identity)
        await asyncio.sleep(2 * RETRY)  # b has now seen several renewals
        assert b.find("leading") is None

        killed_at = time.monotonic()
        a.proc.send_signal(signal.SIGKILL)
        took_over = await b.wait_for("leading", LEASE + RETRY + 30)
        takeover = took_over["t"] - killed_at
        TAKEOVER["sigkill"] = takeover

        # Not before the lease could expire (b last saw a renew at most ~1 retry before the
        # kill), and not much after: expiry plus one (jittered) retry, plus a margin.
        assert takeover >= LEASE - 1.2 * RETRY - 0.5, f"took over too early: {takeover:.2f}s"
        assert takeover <= LEASE + 1.2 * RETRY + 3.0, f"took over too late: {takeover:.2f}s"
        spec = (await get_lease(kube, namespace, lease))["spec"]
        assert spec["holderIdentity"] == b.identity
        assert spec["leaseTransitions"] == 1
        assert await asyncio.wait_for(a.proc.wait(), 10) == -signal.SIGKILL
        assert a.find("exited") is None  # it really died without a chance to release
    finally:
        await a.stop()
        if b is not None:
            await b.stop()


# -- (c) graceful stop hands over at once ------------------------------------------------------


async def test_graceful_stop_releases_the_lease_and_hands_over_at_once(
    control_plane: LocalControlPlane, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    lease = f"term-{suffix()}"
    a = await ElectorProcess.start(control_plane, namespace, lease, f"term-a-{suffix()}", tmp_path)
    b: ElectorProcess | None = None
    try:
        await a.wait_for("leading", 60)
        b = await ElectorProcess.start(
            control_plane, namespace, lease, f"term-b-{suffix()}", tmp_path
        )
        await b.wait_for("new_leader", 60, leader=a.identity)
        await asyncio.sleep(2 * RETRY)

        stopped_at = time.monotonic()
        a.proc.send_signal(signal.SIGTERM)
        took_over = await b.wait_for("leading", LEASE + 30)
        handover = took_over["t"] - stopped_at
        TAKEOVER["sigterm"] = handover

        assert await asyncio.wait_for(a.proc.wait(), 15) == 0
        exited = await a.wait_for("exited", 5)
        assert exited["holder"] == "", "a should have seen its own release last"
        assert a.find("stopped_leading") is not None
        # One retry period (plus jitter and a request or two), far below the lease duration.
        assert handover < LEASE / 2, f"graceful handover took {handover:.2f}s"
        spec = (await get_lease(kube, namespace, lease))["spec"]
        assert spec["holderIdentity"] == b.identity
        assert spec["leaseTransitions"] == 1
    finally:
        await a.stop()
        if b is not None:
            await b.stop()


# -- (d) a follower's writes never reach the API server ----------------------------------------


async def test_follower_writes_are_refused_before_reaching_the_api(
    control_plane: LocalControlPlane, kube: KubeClient, namespace: str
) -> None:
    lease = f"fence-{suffix()}"
    ida, idb = f"fence-leader-{suffix()}", f"fence-follower-{suffix()}"
    async with client_as(control_plane, ida) as ca, client_as(control_plane, idb) as cb:
        leader = LeaderElector(ca, config(namespace, lease, ida))
        follower = LeaderElector(cb, config(namespace, lease, idb))
        ca.write_gate, cb.write_gate = LeaderGate(leader), LeaderGate(follower)
        async with running(leader):
            await leader.wait_for_leadership(timeout=60)
            async with running(follower):
                await eventually(lambda: follower.leader == ida, 30, "the follower to see a")
                assert not follower.is_leader

                cm_f, cm_l = f"from-follower-{suffix()}", f"from-leader-{suffix()}"
                body_f = {"metadata": {"name": cm_f}, "data": {"k": "v"}}
                with pytest.raises(NotLeaderError, match=f"POST {CONFIGMAPS.path(namespace)}"):
                    await cb.request("POST", CONFIGMAPS.path(namespace), body=body_f)
                for method in ("PUT", "PATCH", "DELETE"):
                    with pytest.raises(NotLeaderError, match=method):
                        await cb.request(method, CONFIGMAPS.path(namespace, cm_l), body={})
                # Events from a follower go through the same fence: logged, not written.
                recorder = EventRecorder(cb, "fence-test")
                # (In the namespace, where RBAC would allow it: only the gate stops it.)
                target = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "fence-target", "namespace": namespace},
                }
                recorder.record(
                    target,
                    "Normal",
                    "FromFollower",
                    "must not be written",
                )
                rec_task = asyncio.create_task(recorder.run())
                try:
                    assert await recorder.flush(10)
                finally:
                    rec_task.cancel()
                    await asyncio.wait([rec_task], timeout=5)
                assert recorder.stats == {"refused": 1}, recorder.stats

                body_l = {"metadata": {"name": cm_l}, "data": {"k": "v"}}
                created = await ca.request("POST", CONFIGMAPS.path(namespace), body=body_l)
                assert created["metadata"]["name"] == cm_l

    with pytest.raises(ApiError) as info:
        await kube.request("GET", CONFIGMAPS.path(namespace, cm_f))
    assert info.value.not_found

    def leader_write_logged() -> bool:
        return any(
            e.get("user", {}).get("username") == ida
            and e.get("verb") == "create"
            and e.get("objectRef", {}).get("name") == cm_l
            for e in audit_entries(control_plane)
        )

    await eventually(leader_write_logged, 30, "the leader's create in the audit log")
    entries = audit_entries(control_plane)
    follower_writes = [
        e
        for e in entries
        if e.get("user", {}).get("username") == idb and e.get("verb") in WRITE_VERBS
    ]
    assert all(e["objectRef"]["resource"] == "leases" for e in follower_writes), follower_writes
    assert not any(e.get("objectRef", {}).get("name") == cm_f for e in entries)
    follower_events = [
        e
        for e in entries
        if e.get("user", {}).get("username") == idb
        and e.get("objectRef", {}).get("resource") == "events"
    ]
    assert follower_events == []
    leader_cm = [
        e
        for e in entries
        if e.get("user", {}).get("username") == ida
        and e.get("objectRef", {}).get("resource") == "configmaps"
        and e.get("stage") == "ResponseComplete"
    ]
    assert [
        (e["verb"], e["objectRef"]["name"], e["responseStatus"]["code"]) for e in leader_cm
    ] == [("create", cm_l, 201)]


# -- (e) the event recorder against the real API -----------------------------------------------


async def write_events(recorder: EventRecorder, *records: tuple[Any, ...]) -> None:
    """Record, then run the writer until the queue is drained."""
    for args in records:
        recorder.record(*args)
    task = asyncio.create_task(recorder.run())
    try:
        assert await recorder.flush(30), "events were not written within 30s"
    finally:
        task.cancel()
        await asyncio.wait([task], timeout=5)


async def test_event_recorder_counts_repeats_and_aggregates_similar_events(
    control_plane: LocalControlPlane, kube: KubeClient, namespace: str
) -> None:
    cm_name = f"events-target-{suffix()}"
    cm = await kube.request(
        "POST", CONFIGMAPS.path(namespace), body={"metadata": {"name": cm_name}, "data": {}}
    )
    cm |= {"apiVersion": "v1", "kind": "ConfigMap"}
    async with client_as(control_plane, f"recorder-{suffix()}") as client:
        recorder = EventRecorder(client, "linkerd-config-test", instance="test-instance")
        await write_events(
            recorder,
            *[(cm, "Normal", "Repeated", "the same message")] * 5,
            *[(cm, "Warning", "Varied", f"message {i}") for i in range(12)],
        )
    # Repeats recorded within the series interval are written as one PATCH of the newest
    # count: one for "Repeated" (count 5), one for the combined Event (count 3).
    assert recorder.stats == {"created": 11, "patched": 2}, recorder.stats

    listed = await kube.request(
        "GET",
        EVENTS.path(namespace),
        params={"fieldSelector": f"involvedObject.uid={cm['metadata']['uid']}"},
    )
    events = listed["items"]
    (ev,) = [e for e in events if e["reason"] == "Repeated"]
    assert ev["count"] == 5 and ev["message"] == "the same message" and ev["type"] == "Normal"
    assert ev["firstTimestamp"] <= ev["lastTimestamp"]
    assert ev["source"]["component"] == "linkerd-config-test"
    assert ev["reportingComponent"] == "linkerd-config-test"
    assert ev["reportingInstance"] == "test-instance"
    ref = ev["involvedObject"]
    assert (ref["kind"], ref["name"], ref["namespace"], ref["uid"], ref["apiVersion"]) == (
        "ConfigMap",
        cm_name,
        namespace,
        cm["metadata"]["uid"],
        "v1",
    )
    assert ref["resourceVersion"] == cm["metadata"]["resourceVersion"]
    assert ev["metadata"]["name"].startswith(f"{cm_name}.")

    varied = [e for e in events if e["reason"] == "Varied"]
    separate = sorted(
        (e for e in varied if not e["message"].startswith(AGGREGATE_PREFIX)),
        key=lambda e: int(e["message"].split()[-1]),
    )
    combined = [e for e in varied if e["message"].startswith(AGGREGATE_PREFIX)]
    assert [e["message"] for e in separate] == [f"message {i}" for i in range(9)]
    assert all(e["count"] == 1 and e["type"] == "Warning" for e in separate)
    assert len(combined) == 1
    assert combined[0]["message"] == AGGREGATE_PREFIX + "message 11"
    assert combined[0]["count"] == 3


async def test_events_about_cluster_scoped_objects_go_to_default(
    kube: KubeClient, namespace: str
) -> None:
    ns_obj = await kube.request("GET", NAMESPACES.path(name=namespace))
    ns_obj |= {"apiVersion": "v1", "kind": "Namespace"}
    recorder = EventRecorder(kube, "linkerd-config-test")  # the test group can't write there
    await write_events(recorder, (ns_obj, "Normal", "ClusterScoped", "about a namespace"))
    assert recorder.stats == {"created": 1}, recorder.stats
    listed = await kube.request(
        "GET",
        EVENTS.path("default"),
        params={"fieldSelector": f"involvedObject.uid={ns_obj['metadata']['uid']}"},
    )
    (ev,) = listed["items"]
    assert ev["reason"] == "ClusterScoped" and ev["message"] == "about a namespace"
    assert ev["involvedObject"]["kind"] == "Namespace"
    assert ev["involvedObject"]["name"] == namespace
    assert "namespace" not in ev["involvedObject"]


async def test_spam_filter_caps_events_per_object(
    control_plane: LocalControlPlane, kube: KubeClient, namespace: str
) -> None:
    target: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"spammy-{suffix()}",
            "namespace": namespace,
            "uid": str(uuid.uuid4()),
        },
    }
    async with client_as(control_plane, f"spammer-{suffix()}") as client:
        recorder = EventRecorder(client, "linkerd-config-test")
        await write_events(recorder, *[(target, "Normal", "Flapping", "again")] * 40)
        # 25 allowed; their 24 repeats, all within the series interval, are one PATCH.
        assert recorder.stats == {"created": 1, "patched": 1, "dropped_spam": 15}, recorder.stats
        # A Warning is never dropped: the budget is spent, and it is written all the same.
        await write_events(recorder, (target, "Warning", "Failing", "broken"))
    assert recorder.stats == {"created": 2, "patched": 1, "dropped_spam": 15}, recorder.stats
    listed = await kube.request(
        "GET",
        EVENTS.path(namespace),
        params={"fieldSelector": f"involvedObject.uid={target['metadata']['uid']}"},
    )
    counts = {(e["type"], e["reason"]): e["count"] for e in listed["items"]}
    assert counts == {("Normal", "Flapping"): 25, ("Warning", "Failing"): 1}
