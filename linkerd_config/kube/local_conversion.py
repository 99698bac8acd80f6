"""A CRD's conversion webhook served by a process outside the cluster (a local run).

A multi-version CRD needs its converter for every read or write of a version other than the
storage one. In-cluster, the converter is a Service; a process run on a laptop against a
cluster has no Service, so it registers itself: it serves ConversionReviews on a port the API
server can reach, with a certificate of its own, and points the CRD's
``spec.conversion.webhook.clientConfig`` at it (``url`` and ``caBundle``).

The CRD as installed for such runs carries, on the version that needs the converter, a CEL
rule that refuses every write with a message saying what to do (the *refusal*). While no one
serves the conversion, a write in that version fails with that one line instead of "connection
refused"; this module removes the rule once the API server has been seen to reach the
converter, and puts it back when the process stops (only if the CRD still points at it).

Knows nothing of any particular CRD: the caller says which CRD, which version, which rule and
which object to probe with. The patches are pure functions (``register_patch``,
``restore_patch``), tested from tables; ``LocalConversion`` only acts.
"""

from __future__ import annotations

import asyncio
import base64
import enum
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp
import structlog

from linkerd_config.kube.client import JSON_PATCH, ApiError, KubeClient
from linkerd_config.kube.leader import NotLeaderError
from linkerd_config.kube.resource import CRDS, Json

log = structlog.get_logger(__name__)

VALIDATIONS = "x-kubernetes-validations"


class Outcome(enum.Enum):
    """How a registration ended."""

    REGISTERED = "registered"
    """The CRD points at this process and the API server was seen converting through it."""
    SERVED_ELSEWHERE = "served-elsewhere"
    """The CRD's converter is a Service (an in-cluster install): left alone."""
    UNREACHABLE = "unreachable"
    """The API server could not reach this process: the refusal is back in place."""
    NO_CRD = "no-crd"
    """The CRD is not installed."""


@dataclass(frozen=True)
class Refusal:
    """The rule on ``version``'s schema root that refuses writes while no one converts."""

    version: str
    rule: Json
    """One ``x-kubernetes-validations`` entry: ``{"rule": ..., "message": ...}``."""


@dataclass(frozen=True)
class Registration:
    """What to register on which CRD."""

    crd: str
    url: str
    """The full URL the API server calls (path included)."""
    ca_pem: bytes
    refusal: Refusal
    probe: Json
    """An object in ``refusal.version`` to create with dryRun=All: a write in that version is
    converted to the storage version, so it succeeds only if the API server reaches us."""
    probe_path: str
    """The collection path of ``refusal.version`` to POST ``probe`` to."""
    marker: tuple[str, str]
    """The annotation (key, value) that says a CRD's converter is a local process: only such
    a CRD is pointed at us (never one whose URL is someone else's converter)."""
    unreachable_hint: str = "make the API server able to reach this process"
    """What to do when the API server cannot reach us (the program's own flags and installs)."""

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca_pem).decode()


def _version_index(crd: Json, version: str) -> int | None:
    for i, v in enumerate(crd.get("spec", {}).get("versions") or []):
        if v.get("name") == version:
            return i
    return None


def _root_rules(crd: Json, index: int) -> list[Json]:
    version = crd["spec"]["versions"][index]
    root = (version.get("schema") or {}).get("openAPIV3Schema") or {}
    rules = root.get(VALIDATIONS)
    return list(rules) if isinstance(rules, list) else []


def served_by_service(crd: Json) -> bool:
    conversion = crd.get("spec", {}).get("conversion") or {}
    client = (conversion.get("webhook") or {}).get("clientConfig") or {}
    return conversion.get("strategy") == "Webhook" and "service" in client


def marked(crd: Json, reg: Registration) -> bool:
    key, value = reg.marker
    return bool((crd.get("metadata", {}).get("annotations") or {}).get(key) == value)


def register_patch(crd: Json, reg: Registration) -> list[Json] | None:
    """A JSON patch pointing ``crd``'s converter at ``reg.url`` and taking the refusal off,
    guarded by the resourceVersion it was computed from; None when the CRD is not marked as
    converted by a local process, its converter is a Service (someone else serves it), or it
    does not have the version."""
    if not marked(crd, reg) or served_by_service(crd):
        return None
    index = _version_index(crd, reg.refusal.version)
    if index is None:
        return None
    version = crd["metadata"]["resourceVersion"]
    ops: list[Json] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": version},
        {
            "op": "add",
            "path": "/spec/conversion",
            "value": {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"url": reg.url, "caBundle": reg.ca_bundle},
                    "conversionReviewVersions": ["v1"],
                },
            },
        },
    ]
    rules = _root_rules(crd, index)
    kept = [r for r in rules if r != reg.refusal.rule]
    if kept != rules:
        root = f"/spec/versions/{index}/schema/openAPIV3Schema/{VALIDATIONS}"
        if kept:
            ops.append({"op": "replace", "path": root, "value": kept})
        else:
            ops.append({"op": "remove", "path": root})
    return ops


def restore_patch(crd: Json, reg: Registration) -> list[Json] | None:
    """A JSON patch putting the refusal back, guarded by the CRD still pointing at us (same
    url and caBundle); None when it points elsewhere now or already refuses."""
    client = ((crd.get("spec", {}).get("conversion") or {}).get("webhook") or {}).get(
        "clientConfig"
    ) or {}
    if client.get("url") != reg.url or client.get("caBundle") != reg.ca_bundle:
        return None
    if not marked(crd, reg):
        return None
    index = _version_index(crd, reg.refusal.version)
    if index is None:
        return None
    rules = _root_rules(crd, index)
    if reg.refusal.rule in rules:
        return None
    base = "/spec/conversion/webhook/clientConfig"
    return [
        {"op": "test", "path": f"{base}/url", "value": reg.url},
        {"op": "test", "path": f"{base}/caBundle", "value": reg.ca_bundle},
        {
            "op": "add",
            "path": f"/spec/versions/{index}/schema/openAPIV3Schema/{VALIDATIONS}",
            "value": [*rules, reg.refusal.rule],
        },
    ]


def probe_verdict(error: ApiError | None, refusal: Refusal) -> bool | None:
    """What a dry-run create in the refused version says: True, the API server converted
    through us; None, it still applies the schema with the refusal (not yet known); False,
    anything else: it could not reach us (or does not yet trust our CA), or refused the probe
    before converting, which proves nothing."""
    if error is None:
        return True
    if refusal.rule.get("message", "\0") in error.message:
        return None
    return False


class Terms(Protocol):
    """Leadership as the registration needs it (``kube.leader``'s electors are such)."""

    leadership_lost: asyncio.Event

    async def wait_for_leadership(self, timeout: float | None = None) -> None: ...


class KeptChanging(RuntimeError):
    """The CRD changed between every read and write of an attempt."""


TRANSIENT = (ApiError, aiohttp.ClientError, OSError, TimeoutError, KeptChanging)
"""What a registration attempt may meet and try again after (an API server restarting, a
connection reset): never a reason to stop the process."""


@dataclass
class LocalConversion:
    """Registers a ``Registration`` on the CRD in each term this process leads; at
    cancellation puts the refusal back if the CRD still points here."""

    client: KubeClient
    probe_timeout: float = 30.0
    probe_interval: float = 0.5
    request_timeout: float = 10.0
    retry_delays: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 30.0)
    """Between attempts that failed on the way (``TRANSIENT``); the last one repeats."""
    clock: Callable[[], float] = time.monotonic
    outcome: Outcome | None = None
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the attempt has an outcome (readiness waits for it in a local run)."""
    last_probe_error: str | None = None
    _registration: Registration | None = None
    _patched: bool = False
    """The CRD was pointed here (and the refusal taken off) by this process."""

    @property
    def registration(self) -> Registration:
        if self._registration is None:
            raise RuntimeError("LocalConversion.run has not been given a registration")
        return self._registration

    async def run(self, registration: Registration, terms: Terms) -> None:
        """Until cancelled: in each term this process leads, register (another process may
        have registered itself while it did not lead); hold between terms."""
        self._registration = registration
        try:
            while True:
                await terms.wait_for_leadership()
                self.outcome = await self._register_retrying(terms)
                if self.outcome is not None:
                    self.settled.set()
                await terms.leadership_lost.wait()
        finally:
            # Whenever the CRD was pointed here, even if stopped before the probe answered:
            # the guarded patch changes nothing if it no longer points here.
            if self._patched:
                await asyncio.shield(self._restore_quietly())

    async def _register_retrying(self, terms: Terms) -> Outcome | None:
        """``register``, again after each transient failure while this term lasts; None if
        the term ended first."""
        for attempt in itertools.count():
            if terms.leadership_lost.is_set():
                return None
            try:
                return await self.register()
            except NotLeaderError:  # the term ended while registering: the next registers
                return None
            except TRANSIENT as exc:
                delay = self.retry_delays[min(attempt, len(self.retry_delays) - 1)]
                log.warning(
                    "conversion registration failed; trying again",
                    crd=self.registration.crd,
                    error=f"{type(exc).__name__}: {exc}",
                    retry_in=delay,
                )
                await asyncio.sleep(delay)
        return None  # pragma: no cover - itertools.count never ends

    async def register(self) -> Outcome:
        reg = self.registration
        for _ in range(5):  # another writer between GET and PATCH: read again
            try:
                crd = await self._get()
            except ApiError as exc:
                if exc.not_found:
                    log.error("conversion not registered: the CRD is not installed", crd=reg.crd)
                    return Outcome.NO_CRD
                raise
            patch = register_patch(crd, reg)
            if patch is None:
                key, value = reg.marker
                log.info(
                    "the CRD's converter is not a local run's (an in-cluster install's "
                    f"Service, or no annotation {key}={value} as make install's CRD has): "
                    "not registering this process's",
                    crd=reg.crd,
                )
                return Outcome.SERVED_ELSEWHERE
            # Before sending: a patch whose answer is lost may still have been applied, and
            # the restore is guarded by the CRD naming us, so trying it costs nothing.
            self._patched = True
            try:
                await self._patch(patch, fenced=True)
                break
            except ApiError as exc:
                if exc.status in (409, 422):
                    continue
                raise
        else:
            raise KeptChanging(f"CRD {reg.crd} kept changing under the conversion registration")
        if await self._probe():
            log.info("conversion registered", crd=reg.crd, url=reg.url, version=reg.refusal.version)
            return Outcome.REGISTERED
        await self._restore_quietly()
        log.error(
            f"the API server cannot reach this process at {reg.url} to convert "
            f"{reg.refusal.version} objects; {reg.refusal.version} stays refused (the other "
            f"versions work): {reg.unreachable_hint}",
            crd=reg.crd,
            error=self.last_probe_error,
        )
        return Outcome.UNREACHABLE

    async def _probe(self) -> bool:
        reg = self.registration
        deadline = self.clock() + self.probe_timeout
        verdict: bool | None = None
        while self.clock() < deadline:
            error: ApiError | None = None
            try:
                await self.client.request(
                    "POST",
                    reg.probe_path,
                    params={"dryRun": "All"},
                    body=reg.probe,
                    timeout=self.request_timeout,
                    fenced=False,  # a dry run stores nothing
                )
            except ApiError as exc:
                error = exc
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                # No answer at all: not evidence either way; ask again until the deadline.
                verdict, self.last_probe_error = False, f"{type(exc).__name__}: {exc}"
                await asyncio.sleep(self.probe_interval)
                continue
            verdict = probe_verdict(error, reg.refusal)
            if verdict:
                return True
            self.last_probe_error = None if error is None else error.message
            # False may be the API server's cache of the old caBundle: try until the deadline.
            await asyncio.sleep(self.probe_interval)
        return bool(verdict)

    async def _restore_quietly(self) -> None:
        """The refusal back, if the CRD still points here; never raises (a stop path), and
        takes at most a GET's and a PATCH's timeouts, Retry-After waits included."""
        try:
            async with asyncio.timeout(2 * self.request_timeout):
                crd = await self._get()
                patch = restore_patch(crd, self.registration)
                if patch is not None:
                    # Unfenced: at shutdown the Lease is already released; the test ops make
                    # the write apply only while the CRD still points at this process.
                    await self._patch(patch, fenced=False)
                    log.info(
                        "conversion unregistered: the refusal is back", crd=self.registration.crd
                    )
        # TRANSIENT's, and the client closed under it (RuntimeError: a stop cut short).
        except (*TRANSIENT, RuntimeError) as exc:
            log.warning(
                "could not put the conversion refusal back",
                crd=self.registration.crd,
                error=str(exc),
            )

    async def _get(self) -> Json:
        return await self.client.request(
            "GET", CRDS.path(name=self.registration.crd), timeout=self.request_timeout
        )

    async def _patch(self, patch: list[Json], *, fenced: bool) -> None:
        await self.client.request(
            "PATCH",
            CRDS.path(name=self.registration.crd),
            body=patch,
            content_type=JSON_PATCH,
            timeout=self.request_timeout,
            fenced=fenced,
        )
