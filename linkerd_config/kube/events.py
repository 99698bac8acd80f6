"""Kubernetes Events (core/v1) with client-go's de-duplication, aggregation and spam filter.

Events are for humans reading ``kubectl describe``; they must never slow down or break a
reconcile. So :meth:`EventRecorder.record` only decides and enqueues (no I/O), a background
task owned by whoever calls :meth:`EventRecorder.run` does the writes, and failures (the
API server, or the leader gate refusing a follower's write) are logged and dropped.

The decision logic lives in :class:`EventCorrelator`, which is pure (clocks injected), and
mirrors client-go ``tools/record/events_cache.go``:

* the same event again (same object, type, reason, message, component) within the window
  PATCHes the existing Event's ``count`` and ``lastTimestamp`` instead of creating another;
* once ``max_similar`` different messages share an object, type and reason within the
  window, the newest ones are folded into one Event whose message is
  ``"(combined from similar events): <latest message>"``;
* a token bucket per source and object (burst 25, refilling one every 5 minutes) drops
  the excess of Normal events, so an object that is always busy cannot flood etcd.

Like client-go's newer ``tools/events`` (an EventSeries is written once, then its count is
kept in memory and written on a heartbeat), a repeated Event's count is written at most
once per ``series_interval`` (5 s): the first repeat within it waits, later ones replace
it, and the newest count and ``lastTimestamp`` are written when the interval is up (or at
:meth:`EventRecorder.flush`). A storm of reverts then costs one PATCH every few seconds,
not one per revert; ``kubectl describe`` may show a count a few seconds old.

One departure from client-go: a Warning is never dropped by the spam filter (nor does it
spend the object's budget). A failure is what a person reads Events for, and the two steps
above already bound what a repeated one costs: one Event whose count goes up, and at most
``max_similar`` Events per object and reason within the window.
"""

from __future__ import annotations

import asyncio
import enum
import socket
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import structlog

from linkerd_config.kube.client import MERGE_PATCH, ApiError, KubeClient
from linkerd_config.kube.leader import NotLeaderError
from linkerd_config.kube.ratelimit import TokenBucket
from linkerd_config.kube.resource import EVENTS, Json, rfc3339

log = structlog.get_logger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
EVENT_TYPES = frozenset({NORMAL, WARNING})
AGGREGATE_PREFIX = "(combined from similar events): "

# client-go events_cache.go defaults.
MAX_LRU_ENTRIES = 4096
AGGREGATE_MAX_SIMILAR = 10
AGGREGATE_WINDOW = 600.0
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0
SERIES_INTERVAL = 5.0

# API validation limits for Event fields (core/v1).
MESSAGE_LIMIT = 1024
REASON_LIMIT = 128
INSTANCE_LIMIT = 128
NAME_LIMIT = 253
CLUSTER_SCOPED_NAMESPACE = "default"

K = TypeVar("K")
V = TypeVar("V")


class _Lru(Generic[K, V]):
    """A bounded map; correlation state must not grow with every object ever seen."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._data: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self._limit:
            self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


@dataclass(frozen=True)
class ObjectRef:
    """The ``involvedObject`` of an Event."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = ""
    resource_version: str = ""

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> ObjectRef:
        meta = obj.get("metadata") or {}
        kind, name = obj.get("kind"), meta.get("name")
        if not kind or not name:
            raise ValueError("an Event's involved object needs kind and metadata.name")
        return cls(
            kind=str(kind),
            name=str(name),
            namespace=str(meta.get("namespace") or ""),
            uid=str(meta.get("uid") or ""),
            api_version=str(obj.get("apiVersion") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
        )

    def to_json(self) -> Json:
        ref: Json = {"kind": self.kind, "name": self.name, "apiVersion": self.api_version}
        for key, value in (
            ("namespace", self.namespace),
            ("uid", self.uid),
            ("resourceVersion", self.resource_version),
        ):
            if value:
                ref[key] = value
        return ref


@dataclass(frozen=True)
class EventSpec:
    """One call to ``record``: what happened, to what, reported by whom."""

    involved: ObjectRef
    type: str
    reason: str
    message: str
    component: str
    instance: str = ""

    @property
    def namespace(self) -> str:
        """Where the Event lives; cluster-scoped objects' Events go to "default" (client-go)."""
        return self.involved.namespace or CLUSTER_SCOPED_NAMESPACE

    def spam_key(self) -> tuple[str, ...]:
        o = self.involved
        return (self.component, self.instance, o.kind, o.namespace, o.name, o.uid, o.api_version)

    def aggregate_key(self) -> tuple[str, ...]:
        return (*self.spam_key(), self.type, self.reason)


class Action(enum.Enum):
    CREATE = "create"
    PATCH = "patch"
    DROP = "drop"


@dataclass(frozen=True)
class Decision:
    """What to write for one recorded event; timestamps are wall-clock seconds."""

    action: Action
    name: str = ""
    message: str = ""
    count: int = 0
    first_timestamp: float = 0.0
    last_timestamp: float = 0.0
    aggregated: bool = False
    throttle_started: bool = False
    """For DROP: the first drop since this object last had budget (log loudly once)."""


class SpamFilter:
    """One token bucket per source and object."""

    def __init__(
        self, burst: int = SPAM_BURST, qps: float = SPAM_QPS, max_entries: int = MAX_LRU_ENTRIES
    ) -> None:
        TokenBucket.check(qps, burst)
        self.burst = burst
        self.qps = qps
        self._buckets: _Lru[tuple[str, ...], TokenBucket] = _Lru(max_entries)

    def allow(self, key: tuple[str, ...], now: float) -> bool:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(self.qps, self.burst, now)
            self._buckets.put(key, bucket)
        return bucket.allow(now)


@dataclass
class _SimilarRecord:
    messages: set[str] = field(default_factory=set)
    last_seen: float = 0.0


@dataclass
class _EventLog:
    name: str
    count: int
    first_timestamp: float
    last_seen: float


class EventCorrelator:
    """Decides create / patch / drop for each event; pure apart from its own caches."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        window: float = AGGREGATE_WINDOW,
        max_similar: int = AGGREGATE_MAX_SIMILAR,
        spam_burst: int = SPAM_BURST,
        spam_qps: float = SPAM_QPS,
        max_entries: int = MAX_LRU_ENTRIES,
    ) -> None:
        if max_similar < 1 or window <= 0:
            raise ValueError("event correlator needs max_similar >= 1 and window > 0")
        self.window = window
        self.max_similar = max_similar
        self._clock = clock
        self._wall = wall_clock
        self._spam = SpamFilter(spam_burst, spam_qps, max_entries)
        self._throttled: _Lru[tuple[str, ...], bool] = _Lru(max_entries)
        self._similar: _Lru[tuple[str, ...], _SimilarRecord] = _Lru(max_entries)
        self._logs: _Lru[tuple[str, ...], _EventLog] = _Lru(max_entries)
        self._last_name_ns = 0

    def correlate(self, ev: EventSpec) -> Decision:
        now, wall = self._clock(), self._wall()
        spam_key = ev.spam_key()
        if ev.type != WARNING and not self._spam.allow(spam_key, now):
            first = not self._throttled.get(spam_key)
            self._throttled.put(spam_key, True)
            return Decision(Action.DROP, throttle_started=first)
        self._throttled.put(spam_key, False)

        # Aggregation: the first max_similar - 1 distinct messages keep their own Events;
        # from the max_similar-th on, new messages share one combined Event.
        agg_key = ev.aggregate_key()
        similar = self._similar.get(agg_key)
        if similar is None or now - similar.last_seen > self.window:
            similar = _SimilarRecord()
        similar.last_seen = now
        self._similar.put(agg_key, similar)
        if ev.message in similar.messages or len(similar.messages) < self.max_similar - 1:
            similar.messages.add(ev.message)
            key, message, aggregated = ("event", *agg_key, ev.message), ev.message, False
        else:
            key, message, aggregated = ("aggregate", *agg_key), AGGREGATE_PREFIX + ev.message, True

        # De-duplication: a repeat within the window counts up on the existing Event.
        seen = self._logs.get(key)
        if seen is not None and now - seen.last_seen <= self.window:
            seen.count += 1
            seen.last_seen = now
            return Decision(
                Action.PATCH, seen.name, message, seen.count, seen.first_timestamp, wall, aggregated
            )
        name = self._new_name(ev.involved.name, wall)
        self._logs.put(key, _EventLog(name, 1, wall, now))
        return Decision(Action.CREATE, name, message, 1, wall, wall, aggregated)

    def _new_name(self, involved: str, wall: float) -> str:
        """``<object>.<hex nanoseconds>`` like client-go, made unique even within one tick."""
        stamp = max(int(wall * 1e9), self._last_name_ns + 1)
        self._last_name_ns = stamp
        suffix = f".{stamp:x}"
        return involved[: NAME_LIMIT - len(suffix)].rstrip(".-") + suffix


def _timestamp(wall: float) -> str:
    return rfc3339(wall)


@dataclass(frozen=True)
class _Write:
    namespace: str
    name: str
    body: Json
    patch: Json | None


class EventRecorder:
    """Records Events without blocking the caller; :meth:`run` does the writes."""

    def __init__(
        self,
        client: KubeClient,
        component: str,
        *,
        instance: str | None = None,
        correlator: EventCorrelator | None = None,
        max_queue: int = 1000,
        request_timeout: float = 10.0,
        series_interval: float = SERIES_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not component:
            raise ValueError("EventRecorder needs a component name")
        if series_interval < 0:
            raise ValueError("EventRecorder needs series_interval >= 0")
        self.client = client
        self.component = component
        self.instance = (instance or socket.gethostname())[:INSTANCE_LIMIT]
        self.correlator = correlator or EventCorrelator()
        self.request_timeout = request_timeout
        self.stats: Counter[str] = Counter()
        self.series_interval = series_interval
        self._clock = clock
        self._queue: asyncio.Queue[_Write] = asyncio.Queue(maxsize=max_queue)
        # A repeat's count waits here (newest only) until its Event's last write is
        # series_interval old; one timer each, at that moment.
        self._queued_at: _Lru[tuple[str, str], float] = _Lru(MAX_LRU_ENTRIES)
        self._deferred: dict[tuple[str, str], tuple[_Write, asyncio.TimerHandle]] = {}

    def record(self, involved: Mapping[str, Any], type: str, reason: str, message: str) -> None:
        """Decide and enqueue; never waits and never raises for API trouble."""
        if type not in EVENT_TYPES:
            raise ValueError(f"event type must be one of {sorted(EVENT_TYPES)}, got {type!r}")
        if not reason:
            raise ValueError("an event needs a reason")
        spec = EventSpec(
            involved=ObjectRef.from_object(involved),
            type=type,
            reason=reason[:REASON_LIMIT],
            message=message[:MESSAGE_LIMIT],
            component=self.component,
            instance=self.instance,
        )
        decision = self.correlator.correlate(spec)
        if decision.action is Action.DROP:
            self.stats["dropped_spam"] += 1
            fields = {"object": f"{spec.involved.kind}/{spec.namespace}/{spec.involved.name}"}
            if decision.throttle_started:
                log.warning("event spam filter dropping events", reason=spec.reason, **fields)
            else:
                log.debug("event dropped by spam filter", reason=spec.reason, **fields)
            return
        write = self._build(spec, decision)
        if write.patch is None or not self._defer(write):
            self._enqueue(write)

    def _defer(self, write: _Write) -> bool:
        """Hold a repeat's count if its Event was queued less than series_interval ago."""
        key = (write.namespace, write.name)
        queued_at, now = self._queued_at.get(key), self._clock()
        if queued_at is None or now - queued_at >= self.series_interval:
            return False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to wait on (a synchronous caller): write it now
            return False
        waiting = self._deferred.get(key)
        timer = (
            waiting[1]
            if waiting is not None
            else loop.call_later(queued_at + self.series_interval - now, self._release, key)
        )
        self._deferred[key] = (write, timer)
        return True

    def _release(self, key: tuple[str, str]) -> None:
        deferred = self._deferred.get(key)
        if deferred is not None:
            self._enqueue(deferred[0])  # which drops it from the waiting, timer and all

    def _enqueue(self, write: _Write) -> None:
        key = (write.namespace, write.name)
        deferred = self._deferred.pop(key, None)
        if deferred is not None:  # this write is newer: the waiting one is superseded
            deferred[1].cancel()
        try:
            self._queue.put_nowait(write)
        except asyncio.QueueFull:
            self.stats["dropped_queue"] += 1
            log.warning(
                "event queue full; dropping event",
                event_name=write.name,
                reason=write.body["reason"],
            )
            return
        self._queued_at.put(key, self._clock())

    def _build(self, spec: EventSpec, d: Decision) -> _Write:
        message = d.message[:MESSAGE_LIMIT]
        body: Json = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": d.name, "namespace": spec.namespace},
            "involvedObject": spec.involved.to_json(),
            "type": spec.type,
            "reason": spec.reason,
            "message": message,
            "source": {"component": spec.component, "host": spec.instance},
            "reportingComponent": spec.component,
            "reportingInstance": spec.instance,
            "firstTimestamp": _timestamp(d.first_timestamp),
            "lastTimestamp": _timestamp(d.last_timestamp),
            "count": d.count,
        }
        patch: Json | None = None
        if d.action is Action.PATCH:
            patch = {
                "count": d.count,
                "lastTimestamp": body["lastTimestamp"],
                "message": message,
            }
        return _Write(spec.namespace, d.name, body, patch)

    @property
    def pending(self) -> int:
        """Writes not yet made: queued, and counts waiting for their series interval."""
        return self._queue.qsize() + len(self._deferred)

    async def run(self) -> None:
        """Write queued events one at a time, in order (a PATCH needs its CREATE first)."""
        while True:
            write = await self._queue.get()
            try:
                await self._write(write)
            finally:
                self._queue.task_done()

    async def flush(self, timeout: float) -> bool:
        """Write the counts waiting for their interval now, then wait until every queued
        event was written or given up; False on timeout."""
        for key in list(self._deferred):
            self._release(key)
        try:
            async with asyncio.timeout(timeout):
                await self._queue.join()
        except TimeoutError:
            return False
        return True

    async def _write(self, w: _Write) -> None:
        fields = {"event_name": w.name, "namespace": w.namespace, "reason": w.body["reason"]}
        try:
            if w.patch is not None:
                try:
                    await self.client.request(
                        "PATCH",
                        EVENTS.path(w.namespace, w.name),
                        body=w.patch,
                        content_type=MERGE_PATCH,
                        timeout=self.request_timeout,
                    )
                    self.stats["patched"] += 1
                    return
                except ApiError as exc:
                    if not exc.not_found:
                        raise
                    # Gone (Event TTL) or its create never landed: write it whole.
            await self.client.request(
                "POST", EVENTS.path(w.namespace), body=w.body, timeout=self.request_timeout
            )
            self.stats["created"] += 1
        except NotLeaderError as exc:
            self.stats["refused"] += 1
            log.info("event not written: not leader", error=str(exc), **fields)
        except ApiError as exc:
            self.stats["failed"] += 1
            log.warning("event not written", status=exc.status, error=exc.message, **fields)
        except Exception as exc:
            self.stats["failed"] += 1
            log.warning("event not written", error=repr(exc), **fields)
