"""Notice a silently dead path to the API server, and recover from it.

A watch that merely has nothing to say and a watch whose TCP path died (a frozen NAT or load
balancer entry, a half-open connection through a proxy) look the same from the client: no
bytes. The API server's bookmarks arrive only about once a minute, and TCP keepalive is
answered by whatever proxy is in between, so neither bounds how long a controller stays blind.

Two signs, whichever comes first. A Lease request (every replica makes one each retry period)
that gets no answer at all (``suspect``). And silence: a Lease under leader election changes
every retry period (the leader renews it), so a watch
on it must see an event at least every ``silence`` seconds (lease duration plus two retry
periods: even a leader change fits). When it does not, the path is presumed dead:
``on_silence`` runs (the app drops every pooled connection, so each watch fails at once and
resumes from its resourceVersion on a new connection: no relist, no event lost, and no
request waits out its timeout on a dead connection), and ``healthy`` is False, so readiness
says the caches may be stale, until the Lease is heard from again.

What this does not promise: a path that dies for one connection only while the Lease watch
stays healthy is caught by that watch's own inactivity deadline (above the bookmark interval)
and by TCP keepalive when the peer is really gone, not by this.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog

from linkerd_config.kube.informer import Informer, ListWatchClient
from linkerd_config.kube.resource import LEASES

log = structlog.get_logger(__name__)


class WatchHealth:
    """Watches one Lease; calls ``on_silence`` when it has been silent for ``silence`` s."""

    def __init__(
        self,
        client: ListWatchClient,
        namespace: str,
        lease: str,
        silence: float,
        on_silence: Callable[[], None],
        *,
        check_every: float = 1.0,
    ) -> None:
        if silence <= 0:
            raise ValueError("silence must be positive")
        self.silence = silence
        self.on_silence = on_silence
        self.check_every = check_every
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
        # Invariant: True from a detected silence until the Lease is heard from again.

    def healthy(self) -> bool:
        return not self._silent

    def suspect(self, why: str) -> None:
        """Another sign of a dead path (a Lease request got no answer): act now, without
        waiting out the silence."""
        if self._silent:
            return
        log.warning("API server unreachable; reconnecting every watch", why=why)
        self._silent = True
        self._last_heard = time.monotonic()
        self.on_silence()

    def _heard(self, _obj: object) -> None:
        self._last_heard = time.monotonic()
        if self._silent:
            self._silent = False
            log.info("API server watch path healthy again")

    async def run(self) -> None:
        """Check for silence until cancelled; ``informer`` is run by its owner (the manager,
        which runs every informer), and checking starts once it has synced."""
        await self.informer.wait_synced(timeout=365 * 86400.0)
        self._last_heard = time.monotonic()
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
