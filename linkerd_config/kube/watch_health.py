"""Notice a silently dead path to the API server, and recover from it.

A watch that merely has nothing to say and a watch whose TCP path died (a frozen NAT or load
balancer entry, a half-open connection through a proxy) look the same from the client: no
bytes. The API server's bookmarks arrive only about once a minute, and TCP keepalive is
answered by whatever proxy is in between, so neither bounds how long a controller stays blind.

Two signs, whichever comes first:

* **A request that gets no answer at all** (``suspect``). Under leader election every replica
  makes a Lease request each retry period; without it (one replica, or a local run) this
  class makes one itself, a bounded GET of the Lease every ``heartbeat`` seconds on a
  connection kept open between them (``KubeClient.probe``: one that was open before the
  fault, as the watches' are; any HTTP answer, a 404 included, counts).
* **Silence.** Under leader election the Lease changes every retry period (the leader renews
  it), so a watch on it must see an event at least every ``silence`` seconds (lease duration
  plus two retry periods: even a leader change fits). Without election the heartbeat's
  answers are what is heard.

Either sign presumes the path dead: ``on_silence`` runs (the app drops every pooled
connection, and every watch reading on one fails at once and resumes from its
resourceVersion on a new connection: no event lost, a relist only where the resume stays
silent, and no request waits out its timeout on a dead connection), and ``healthy`` is False,
so readiness says the caches may be stale, until the API server is heard from again (each
informer is ready again once its own cache is proven current: ``Informer.healthy``). Then
``on_recovered`` runs (the app tells every informer to retry at once instead of sleeping out
a backoff grown while the server was away), so the caches follow again within seconds of the
API server answering.

What this does not promise: a path that dies for one connection only while the heartbeat's
stays healthy is caught by that watch's own deadlines, not by this: mid-event (part of a frame
or line arrived, then nothing) by the record deadline (``watch.RecordDeadline``: 10 s for an
event of a few KiB, a second more per 64 KiB); between events by the inactivity deadline
(above the bookmark interval), and by TCP keepalive when the peer is really gone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp
import structlog

from linkerd_config.kube.client import KubeClient
from linkerd_config.kube.informer import Informer
from linkerd_config.kube.resource import LEASES

log = structlog.get_logger(__name__)


class WatchHealth:
    """Follows one Lease (a watch under election, else a heartbeat request); calls
    ``on_silence`` when the API server has not been heard from for ``silence`` s or a
    request got no answer, and ``on_recovered`` when it is heard again."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        lease: str,
        silence: float,
        on_silence: Callable[[], None],
        *,
        heartbeat: float | None = None,
        heartbeat_timeout: float = 5.0,
        on_recovered: Callable[[], None] | None = None,
        check_every: float = 1.0,
    ) -> None:
        """``heartbeat`` None: someone else requests the Lease each retry period (the elector,
        which reports a request without an answer through ``suspect``) and it changes as
        often, so it is watched. A number: no one does, so every ``heartbeat`` seconds this
        asks for it, waiting at most ``heartbeat_timeout`` for an answer."""
        if silence <= 0:
            raise ValueError("silence must be positive")
        if heartbeat is not None and not 0 < heartbeat_timeout < silence:
            raise ValueError("heartbeat_timeout must be positive and below silence")
        self.client = client
        self.silence = silence
        self.on_silence = on_silence
        self.on_recovered = on_recovered
        self.check_every = check_every
        self.heartbeat = heartbeat
        self.heartbeat_timeout = heartbeat_timeout
        self._lease_path = LEASES.path(namespace, lease)
        self.informer: Informer | None = None
        if heartbeat is None:
            self.informer = Informer(
                client,
                LEASES,
                namespace=namespace,
                field_selector=f"metadata.name={lease}",
                inactivity_timeout=silence,
                name="lease-heartbeat",
            )
            self.informer.add_handler(self._heard, lambda _old, _new: self._heard(_new))
        self._last_heard = time.monotonic()
        self._silent = False
        # Invariant: True from a detected silence (or unanswered request) until the API
        # server is heard from again.

    def healthy(self) -> bool:
        return not self._silent

    def suspect(self, why: str) -> None:
        """Another sign of a dead path (a request got no answer): act now, without waiting
        out the silence."""
        if self._silent:
            return
        log.warning("API server unreachable; reconnecting every watch", why=why)
        self._silent = True
        self._last_heard = time.monotonic()
        self.on_silence()

    def heard(self) -> None:
        """The API server answered a request of another component (an HTTP status counts):
        the path is alive."""
        self._heard()

    def _heard(self, _obj: object = None) -> None:
        self._last_heard = time.monotonic()
        if self._silent:
            self._silent = False
            log.info("API server watch path healthy again")
            if self.on_recovered is not None:
                self.on_recovered()

    async def run(self) -> None:
        """Check for silence until cancelled; the Lease ``informer`` (under election) is run
        by its owner (the manager, which runs every informer), and checking starts once it
        has synced."""
        if self.informer is not None:
            await self.informer.wait_synced(timeout=365 * 86400.0)
        self._last_heard = time.monotonic()
        async with asyncio.TaskGroup() as group:
            if self.heartbeat is not None:
                group.create_task(self._beat(self.heartbeat), name="api-heartbeat")
            group.create_task(self._watch_silence(), name="api-silence")

    async def _beat(self, period: float) -> None:
        """At once (its connection opens with the others), then every ``period``."""
        while True:
            try:
                await self.client.probe(self._lease_path, timeout=self.heartbeat_timeout)
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                self.suspect(f"a heartbeat request got no answer ({type(exc).__name__})")
            else:
                self._heard()  # an answer, whatever it says (a 404 too): the path works
            await asyncio.sleep(period)

    async def _watch_silence(self) -> None:
        while True:
            await asyncio.sleep(self.check_every)
            quiet = time.monotonic() - self._last_heard
            if quiet < self.silence:
                continue
            if not self._silent:
                log.warning(
                    "API server watch path silent; reconnecting every watch",
                    silent_seconds=round(quiet, 1),
                )
            self._silent = True
            self._last_heard = time.monotonic()  # give the new connections their time
            self.on_silence()
