"""Leader election on a coordination.k8s.io/v1 Lease, and the write gate that enforces it.

What the election guarantees:

* Of candidates racing for the same Lease, exactly one wins each round: every acquire or
  renew is a PUT carrying the ``resourceVersion`` we read (or a POST, which fails if the
  Lease exists), so the API server accepts one writer and answers 409 Conflict to the rest.
* A candidate never takes over a lease whose record it saw change less than
  ``leaseDurationSeconds`` ago. Expiry is judged on this process's *monotonic* clock, from
  the moment *we observed* the record change (as client-go does); the ``renewTime`` written
  by another host is never compared with our clock, so wall-clock skew between hosts does
  not matter.
* The leader stops considering itself leader (and :class:`LeaderGate` refuses its writes)
  once ``renew_deadline`` has passed since the start of its last successful renew, which
  is before any other candidate can consider the lease expired (``renew_deadline <
  lease_duration``).

What it does not guarantee:

* Fencing is local, not enforced by the API server. The Kubernetes API offers no fencing
  token, so a write that passed the gate just before the deadline still lands after a
  successor took over if its delivery takes longer than the margin
  ``lease_duration - renew_deadline`` (a slow network, a stalled connection). The gate
  narrows the window of two writers; it cannot close it.
* Clock *rate* skew is not tolerated arbitrarily: if the leader's monotonic clock runs
  slower than a follower's by more than ``lease_duration / renew_deadline``, both can act
  as leader for a while. Choose the ratio of the two to bound the tolerated rate skew.
* A paused process (SIGSTOP, a long GC pause, a blocked event loop, a suspended VM) still
  believes it leads until it runs again and notices that its renew deadline has passed;
  the gate checks the deadline on every write, so it refuses writes issued after the
  pause, but a write already in flight before the pause goes out when the process resumes.
* Stopping leader-only work is cooperative: :attr:`LeaderElector.leadership_lost` tells
  workers at once, but a worker that ignores them is stopped only at the gate.
* Liveness is not guaranteed either: after a crash without release, nobody leads until
  the lease expires (up to ``lease_duration`` plus one retry period), and nobody leads
  while the API server is unreachable.
"""

from __future__ import annotations

import asyncio
import math
import random
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

import structlog
from prometheus_client import CollectorRegistry, Gauge

from linkerd_config.kube.client import ApiError, KubeClient
from linkerd_config.kube.metrics import ComponentMetrics
from linkerd_config.kube.resource import LEASES, Json, rfc3339

log = structlog.get_logger(__name__)


# Up to +20% on each follower retry so contenders started together do not poll in lockstep.
RETRY_JITTER = 0.2


def default_identity() -> str:
    """Unique per process, so a restarted pod never inherits its predecessor's term."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def micro_time(when: datetime | None = None) -> str:
    """RFC 3339 with microseconds, the wire form of a metav1.MicroTime."""
    return rfc3339(when, micro=True)


class NotLeaderError(RuntimeError):
    """A write refused locally because this process does not (or may no longer) lead."""

    def __init__(self, method: str, path: str, reason: str) -> None:
        self.method = method
        self.path = path
        self.reason = reason
        super().__init__(f"{method} {path}: refused, {reason}")


@dataclass(frozen=True)
class LeaderElectionConfig:
    """Which lease, who we are, and the three timings that bound failover and fencing."""

    lease_namespace: str
    lease_name: str
    identity: str = field(default_factory=default_identity)
    lease_duration: float = 15.0
    """How long followers wait after last seeing the record change before taking over."""
    renew_deadline: float = 10.0
    """How long the leader keeps trying to renew (and keeps writing) after its last renew."""
    retry_period: float = 2.0
    """Interval between acquire attempts and between renewals."""
    release_on_cancel: bool = True
    """On cancellation, clear holderIdentity so a successor need not wait for expiry."""

    def __post_init__(self) -> None:
        for name in ("lease_namespace", "lease_name", "identity"):
            if not getattr(self, name):
                raise ValueError(f"leader election: {name} must not be empty")
        for name in ("lease_duration", "renew_deadline", "retry_period"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(
                    f"leader election: {name} must be a positive number, got {value!r}"
                )
        if self.lease_duration < 1:
            raise ValueError(
                "leader election: lease_duration must be at least 1s (the Lease stores whole "
                f"seconds), got {self.lease_duration}"
            )
        if self.renew_deadline >= self.lease_duration:
            raise ValueError(
                f"leader election: renew_deadline ({self.renew_deadline}s) must be less than "
                f"lease_duration ({self.lease_duration}s), or the leader could keep writing "
                "after followers consider its lease expired"
            )
        if self.retry_period >= self.renew_deadline:
            raise ValueError(
                f"leader election: retry_period ({self.retry_period}s) must be less than "
                f"renew_deadline ({self.renew_deadline}s), or the leader gets no second try "
                "before its deadline"
            )

    @property
    def lease_duration_seconds(self) -> int:
        """Whole seconds for the Lease, rounded up so we never advertise less than we assume."""
        return math.ceil(self.lease_duration)

    @property
    def lease_path(self) -> str:
        return LEASES.path(self.lease_namespace, self.lease_name)

    @property
    def lease_key(self) -> str:
        return f"{self.lease_namespace}/{self.lease_name}"


class _Fence(Protocol):
    """What a gate needs to know: may we write now, and if not, why not."""

    def write_allowed(self) -> bool: ...

    def refusal_reason(self) -> str: ...


class LeaderGate:
    """The client's WriteGate: refuses every write unless this process leads right now."""

    def __init__(self, fence: _Fence) -> None:
        self._fence = fence

    @property
    def allowed(self) -> bool:
        return self._fence.write_allowed()

    def check(self, method: str, path: str) -> None:
        if not self._fence.write_allowed():
            raise NotLeaderError(method, path, self._fence.refusal_reason())


class LeaderElectionMetrics(ComponentMetrics):
    """client-go's leader election gauge, by lease name."""

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        self.status = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
            "backup, 1 indicates master. 'name' is the string used to identify the lease.",
            ["name"],
            registry=registry,
        )


class _LeadershipBase:
    """The signals shared by the real elector and the always-leader variant."""

    def __init__(self, name: str, registry: CollectorRegistry | None) -> None:
        self.leadership_lost = asyncio.Event()
        """Set the moment leadership ends (cleared again on re-acquire): stop workers now."""
        self._leading_event = asyncio.Event()
        self._status = LeaderElectionMetrics.of(registry).status.labels(name)
        self._status.set(0)

    async def wait_for_leadership(self, timeout: float | None = None) -> None:
        """Return once this process leads; TimeoutError if ``timeout`` passes first."""
        if timeout is None:
            await self._leading_event.wait()
        else:
            async with asyncio.timeout(timeout):
                await self._leading_event.wait()


@dataclass
class _Observed:
    """The Lease as last read or written, and when (our monotonic clock) its spec last changed."""

    obj: Json
    spec: Json
    changed_at: float

    @property
    def holder(self) -> str:
        return str(self.spec.get("holderIdentity") or "")

    @property
    def duration(self) -> float:
        return float(self.spec.get("leaseDurationSeconds") or 0)

    @property
    def transitions(self) -> int:
        return int(self.spec.get("leaseTransitions") or 0)


class LeaderElector(_LeadershipBase):
    """Campaigns for one Lease until cancelled; re-joins the election after losing it.

    Use :meth:`wait_for_leadership` and :attr:`leadership_lost` to start and
    stop leader-only work, and put a :class:`LeaderGate` on the client so that work cannot
    write once leadership is in doubt. The elector's own Lease requests bypass the gate.
    """

    def __init__(
        self,
        client: KubeClient,
        config: LeaderElectionConfig,
        registry: CollectorRegistry | None = None,
        *,
        on_unreachable: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``on_unreachable`` runs when a Lease request gets no answer at all (it timed out,
        or the connection failed): the first sign that the path to the API server is dead,
        for followers (who poll) as for the leader (who renews). ``on_answered`` runs when one
        is refused with an HTTP status (a missing namespace, RBAC): the path is alive even
        though no Lease exists to watch."""
        super().__init__(config.lease_name, registry)
        self.client = client
        self.config = config
        self.on_unreachable = on_unreachable
        self.on_answered: Callable[[], None] | None = None
        self._clock = clock
        self._observed: _Observed | None = None
        self._leading = False
        self._renewed_at: float | None = None
        self._reported_leader = ""
        self._log = log.bind(lease=config.lease_key, identity=config.identity)

    # -- state ------------------------------------------------------------------------------

    @property
    def identity(self) -> str:
        return self.config.identity

    @property
    def leader(self) -> str:
        """The holder we last observed ("" if none yet); informational only."""
        return self._observed.holder if self._observed else ""

    @property
    def is_leader(self) -> bool:
        """True only while we hold the lease *and* our last renew is within the deadline."""
        return self.write_allowed()

    def write_allowed(self) -> bool:
        if not self._leading or self._renewed_at is None:
            return False
        return self._clock() - self._renewed_at < self.config.renew_deadline

    def refusal_reason(self) -> str:
        key, me = self.config.lease_key, self.identity
        if not self._leading or self._renewed_at is None:
            holder = self.leader or "nobody"
            return f"{me} is not the leader of lease {key} (last seen holder: {holder})"
        age = self._clock() - self._renewed_at
        return (
            f"{me} last renewed lease {key} {age:.1f}s ago, beyond the renew deadline of "
            f"{self.config.renew_deadline:.1f}s; leadership is in doubt"
        )

    # -- main loop --------------------------------------------------------------------------

    async def run(self) -> None:
        """Acquire, renew, and on loss start over; returns only by cancellation."""
        self._log.info("leader election started")
        try:
            while True:
                await self._acquire()
                self._lose(await self._renew_until_lost())
        except asyncio.CancelledError:
            if self._leading:
                self._lose("cancelled")
                if self.config.release_on_cancel:
                    await self._release()
            raise
        finally:
            if self._leading:  # a non-cancellation error escaped; never leave the gate open
                self._lose("elector failed")

    async def _acquire(self) -> None:
        self._log.info("attempting to acquire lease")
        while True:
            started = self._clock()
            if await self._attempt():
                self._win(started)
                return
            delay = self.config.retry_period * (1 + RETRY_JITTER * random.random())
            await asyncio.sleep(delay)

    async def _renew_until_lost(self) -> str:
        """Renew every retry period; give up when the deadline since the last renew passes.

        Returns why leadership ended.
        """
        cfg = self.config
        while True:
            await asyncio.sleep(cfg.retry_period)
            while True:
                assert self._renewed_at is not None
                remaining = self._renewed_at + cfg.renew_deadline - self._clock()
                if remaining <= 0:
                    return f"no successful renew within the {cfg.renew_deadline}s deadline"
                started = self._clock()
                if await self._attempt(limit=remaining):
                    self._renewed_at = started
                    break
                if self.leader != self.identity:
                    return f"lease taken over by {self.leader}"
                await asyncio.sleep(min(cfg.retry_period, remaining))

    async def _attempt(self, limit: float | None = None) -> bool:
        """One acquire-or-renew, bounded by the renew deadline (or what is left of it)."""
        limit = self.config.renew_deadline if limit is None else limit
        try:
            async with asyncio.timeout(limit):
                return await self._try_acquire_or_renew(limit)
        except TimeoutError:
            self._log.warning("lease request timed out", seconds=round(limit, 3))
            self._unreachable()
            return False
        except ApiError as exc:
            self._log.warning("lease request failed", status=exc.status, error=exc.message)
            if self.on_answered is not None:
                self.on_answered()
            return False
        except Exception as exc:
            self._log.warning("lease request failed", error=repr(exc))
            self._unreachable()
            return False
        finally:
            self._maybe_report_leader()

    def _unreachable(self) -> None:
        if self.on_unreachable is not None:
            try:
                self.on_unreachable()
            except Exception:
                self._log.exception("on_unreachable hook failed")

    async def _try_acquire_or_renew(self, limit: float) -> bool:
        cfg = self.config
        now = micro_time()
        obs = self._observed
        # 1. Fast path: we lead and hold a fresh copy, so write without reading first.
        if self._leading and obs is not None and self._lease_valid(obs):
            try:
                await self._put(obs, self._spec(now, obs, keep_term=True), limit)
                return True
            except ApiError as exc:
                self._log.info("optimistic renew failed; re-reading lease", status=exc.status)
        # 2. Read, or create if absent.
        try:
            current = await self.client.request("GET", cfg.lease_path, timeout=limit, fenced=False)
        except ApiError as exc:
            if not exc.not_found:
                raise
            return await self._create(now, limit)
        obs = self._observe(current)
        # 3. Someone else holds an unexpired lease.
        if obs.holder and obs.holder != self.identity and self._lease_valid(obs):
            return False
        # 4. Take it over (or renew it, if the record says we hold it).
        try:
            await self._put(obs, self._spec(now, obs, keep_term=obs.holder == self.identity), limit)
        except ApiError as exc:
            if exc.conflict:
                self._log.debug("lost the race to update the lease")
                return False
            raise
        return True

    async def _create(self, now: str, limit: float) -> bool:
        cfg = self.config
        body = {
            "apiVersion": LEASES.api_version,
            "kind": LEASES.kind,
            "metadata": {"name": cfg.lease_name, "namespace": cfg.lease_namespace},
            "spec": self._spec(now, None, keep_term=False),
        }
        try:
            created = await self.client.request(
                "POST", LEASES.path(cfg.lease_namespace), body=body, timeout=limit, fenced=False
            )
        except ApiError as exc:
            if exc.conflict:
                self._log.debug("lost the race to create the lease")
                return False
            raise
        self._observe(created)
        return True

    async def _put(self, obs: _Observed, spec: Json, limit: float) -> None:
        """Write with the resourceVersion we read: 409 means someone else wrote in between."""
        body = {**obs.obj, "spec": spec}
        updated = await self.client.request(
            "PUT", self.config.lease_path, body=body, timeout=limit, fenced=False
        )
        self._observe(updated)

    def _spec(self, now: str, obs: _Observed | None, *, keep_term: bool) -> Json:
        spec: Json = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.config.lease_duration_seconds,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 0,
        }
        if obs is not None:
            if keep_term:
                spec["acquireTime"] = obs.spec.get("acquireTime") or now
                spec["leaseTransitions"] = obs.transitions
            else:
                spec["leaseTransitions"] = obs.transitions + 1
        return spec

    def _observe(self, obj: Json) -> _Observed:
        """Remember the Lease; restart the expiry clock only when its spec actually changed."""
        spec = dict(obj.get("spec") or {})
        prev = self._observed
        changed_at = self._clock() if prev is None or prev.spec != spec else prev.changed_at
        self._observed = _Observed(obj=obj, spec=spec, changed_at=changed_at)
        return self._observed

    def _lease_valid(self, obs: _Observed) -> bool:
        return obs.changed_at + obs.duration > self._clock()

    def _maybe_report_leader(self) -> None:
        holder = self.leader
        if holder and holder != self._reported_leader:
            self._reported_leader = holder
            if holder != self.identity:
                self._log.info("new leader observed", leader=holder)

    # -- transitions ------------------------------------------------------------------------

    def _win(self, started: float) -> None:
        self._renewed_at = started
        self._leading = True
        self.leadership_lost.clear()
        self._leading_event.set()
        self._status.set(1)
        obs = self._observed
        self._log.info("became leader", transitions=obs.transitions if obs else 0)

    def _lose(self, why: str) -> None:
        """Close the gate first, then tell everyone; safe to call from a cancellation path."""
        self._leading = False
        self._renewed_at = None
        self._leading_event.clear()
        self.leadership_lost.set()
        self._status.set(0)
        if why == "cancelled":
            self._log.info("stopped leading", reason=why)
        else:
            self._log.warning("stopped leading", reason=why)

    async def _release(self) -> None:
        """Hand the lease over at once: empty holder, 1s duration, transitions unchanged."""
        deadline = self.config.renew_deadline
        try:
            async with asyncio.timeout(deadline):
                for _ in range(2):
                    obs = self._observed
                    if obs is None or obs.holder != self.identity:
                        return
                    now = micro_time()
                    spec = {
                        **obs.spec,
                        "holderIdentity": "",
                        "leaseDurationSeconds": 1,
                        "renewTime": now,
                        "acquireTime": now,
                        "leaseTransitions": obs.transitions,
                    }
                    try:
                        await self._put(obs, spec, deadline)
                        self._log.info("released lease")
                        return
                    except ApiError as exc:
                        if not exc.conflict:
                            raise
                        # Our copy was stale (a renew in flight when cancelled); re-read.
                        current = await self.client.request(
                            "GET", self.config.lease_path, timeout=deadline, fenced=False
                        )
                        self._observe(current)
        except (TimeoutError, ApiError, OSError) as exc:
            self._log.warning("could not release lease; successor waits for expiry", error=str(exc))


class NoElection(_LeadershipBase):
    """Always leader: for a single replica or local runs with leader election disabled."""

    def __init__(
        self,
        name: str = "no-election",
        registry: CollectorRegistry | None = None,
        *,
        identity: str | None = None,
    ) -> None:
        super().__init__(name, registry)
        self.name = name
        self.identity = identity or default_identity()
        self._leading_event.set()

    @property
    def leader(self) -> str:
        return self.identity

    @property
    def is_leader(self) -> bool:
        return True

    def write_allowed(self) -> bool:
        return True

    def refusal_reason(self) -> str:  # pragma: no cover - never refuses
        return "leader election is disabled"

    async def run(self) -> None:
        """Lead at once and until cancelled, with the same signals as the real elector."""
        self._status.set(1)
        log.info("leader election disabled; leading", name=self.name, identity=self.identity)
        try:
            await asyncio.Event().wait()
        finally:
            self._leading_event.clear()  # the signals never say "leading" and "lost" at once
            self.leadership_lost.set()
            self._status.set(0)
