"""One raw watch stream turned into typed events.

The API server sends a watch body as newline-delimited JSON, one ``{"type", "object"}``
event per line. Lines are as long as the object is big (a ConfigMap may approach 1 MiB),
so lines are split with our own buffer rather than ``StreamReader.readline``, whose 64 KiB
high-water mark rejects them.

A stream ends in one of four ways, and the caller needs to tell them apart:

* cleanly (the server's ``timeoutSeconds`` ran out): iteration stops;
* an ERROR event with a 410 Status: :class:`GoneError` -- the resourceVersion we resumed
  from is older than the server's history, only a relist can recover;
* any other ERROR event or an undecodable line: :class:`WatchStatusError` /
  :class:`WatchProtocolError` -- reconnect and resume;
* silence: :class:`WatchStalledError` when no line at all (not even a bookmark) arrived within
  the inactivity deadline. This sits on top of aiohttp's ``sock_read`` timeout because a
  half-open connection behind a proxy can trickle keep-alive bytes forever without a line;
* a record cut off: :class:`WatchStalledError` too when a line or frame that has started does
  not complete within ``RecordDeadline`` (10 s, plus a second per 64 KiB of it). The API server
  writes each event whole, so a record that stops halfway is a stalled path (a server or
  middlebox that sent part of a frame, then nothing), not a quiet watch: it is not left to the
  inactivity deadline, which must wait out the minute between bookmarks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, Protocol, get_args

import orjson

from linkerd_config.kube.resource import Json

EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]
WATCH_EVENT_TYPES: frozenset[str] = frozenset(get_args(EventType))

DEFAULT_MAX_LINE = 64 * 1024 * 1024
"""Far above etcd's 1.5 MiB object limit; only guards memory against a broken peer."""

RECORD_DEADLINE: Final = 10.0
"""Seconds a record (a JSON line, a protobuf frame) that has started may take to complete,
besides the time its size allows at ``RECORD_MIN_RATE``."""
RECORD_MIN_RATE: Final = 64 * 1024
"""Bytes per second a record that has started must arrive at, at least (512 kbit/s): a 1.5 MiB
object, etcd's largest, may take 34 s; a ConfigMap of a few KiB, 10 s."""


@dataclass(frozen=True, slots=True)
class RecordDeadline:
    """How long a record that has started may take to complete: ``base`` seconds plus what
    has arrived of it so far at ``rate`` bytes per second, so a record that keeps coming at
    ``rate`` or faster keeps its time, and one that stops is stopped ``base`` seconds later
    (a frame's header claims its size, but a claim is no progress)."""

    base: float = RECORD_DEADLINE
    rate: float = RECORD_MIN_RATE

    def allowed(self, size: int) -> float:
        return self.base + size / self.rate


class ByteSource(Protocol):
    """What we need of ``aiohttp.StreamReader``: the next chunk, ``b""`` at end of body;
    and a way for the stream's owner to end a read in progress with an exception."""

    async def readany(self) -> bytes: ...

    def set_exception(self, exc: BaseException) -> None: ...


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One decoded watch event; ``object`` is the plain decoded dict."""

    type: EventType
    object: Json

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")


class WatchError(Exception):
    """The watch stream ended abnormally; reconnecting (from the last resourceVersion) helps."""


class WatchStatusError(WatchError):
    """The server sent an ERROR event; ``status`` is its ``metav1.Status``."""

    def __init__(self, status: Json) -> None:
        self.status = status
        code = status.get("code")
        self.code: int | None = code if isinstance(code, int) else None
        self.reason: str = str(status.get("reason") or "")
        self.message: str = str(status.get("message") or "")
        super().__init__(f"watch error {self.code} {self.reason}: {self.message}")


class GoneError(WatchStatusError):
    """410: our resourceVersion is too old for the server's history; relist to recover."""


class WatchStalledError(WatchError):
    """No line arrived within the inactivity deadline; the connection is presumed dead."""


class WatchInterrupted(WatchError):
    """Ended on purpose by its owner (a suspected dead path, or a relist asked for)."""


class WatchProtocolError(WatchError):
    """A line that is not a watch event (bad JSON, unknown type, or absurdly long)."""


def decode_event(line: bytes | bytearray | memoryview) -> WatchEvent:
    """One line of a watch body -> event. ERROR events are returned, not raised, here."""
    try:
        raw = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        preview = bytes(line[:200]).decode(errors="replace")
        raise WatchProtocolError(f"undecodable watch line ({exc}): {preview!r}") from exc
    if not isinstance(raw, dict):
        raise WatchProtocolError(f"watch line is not an object: {type(raw).__name__}")
    kind = raw.get("type")
    obj = raw.get("object")
    if kind not in WATCH_EVENT_TYPES:
        raise WatchProtocolError(f"unknown watch event type {kind!r}")
    if not isinstance(obj, dict):
        raise WatchProtocolError(f"{kind} event without an object")
    return WatchEvent(kind, obj)


def is_gone_status(status: Json) -> bool:
    """410 Gone / Expired, as client-go's ``IsGone || IsResourceExpired``."""
    return status.get("code") == 410 or status.get("reason") in ("Gone", "Expired")


def raise_for_error(event: WatchEvent) -> WatchEvent:
    """Pass a normal event through; turn an ERROR event into the matching exception."""
    if event.type != "ERROR":
        return event
    if is_gone_status(event.object):
        raise GoneError(event.object)
    raise WatchStatusError(event.object)


class _Records:
    """What both record readers share: the next chunk of their source, waited for within the
    ``RecordDeadline`` of the record under way, if one is."""

    def __init__(
        self,
        source: ByteSource,
        max_line: int = DEFAULT_MAX_LINE,
        deadline: RecordDeadline = RecordDeadline(),
    ) -> None:
        self._source = source
        self._max = max_line
        """Bytes in one record at most."""
        self._deadline = deadline
        self._buf = bytearray()
        self._pos = 0  # start of the unread part of _buf
        self._eof = False
        self._started: float | None = None
        # Invariant: the loop time the record under way was first waited for; None between
        # records (reset as each record is handed out).

    def _done(self, record: bytes) -> bytes:
        self._started = None
        return record

    async def _more(self, under_way: int, size: int, what: str) -> bytes:
        """The next chunk (``b""`` at the end). ``under_way``: bytes of an incomplete record
        already here, ``size`` that record's size (as far as known); a record under way must
        complete within its deadline, else WatchStalledError (``what`` it was)."""
        if not under_way:
            self._started = None
            return await self._source.readany()
        loop = asyncio.get_running_loop()
        if self._started is None:
            self._started = loop.time()
        allowed = self._deadline.allowed(size)
        scope = asyncio.timeout_at(self._started + allowed)
        try:
            async with scope:
                return await self._source.readany()
        except TimeoutError:
            if not scope.expired():
                raise  # aiohttp's own (sock_read): the stream says what it was
            raise WatchStalledError(
                f"{what} stopped after {under_way} bytes: incomplete for "
                f"{loop.time() - self._started:.1f}s (a record of its size may take "
                f"{allowed:.1f}s)"
            ) from None


class LineReader(_Records):
    """Newline-delimited records from a chunked byte source, any length up to ``max_line``."""

    _scan = 0
    """No newline in ``_buf[_pos:_scan]``: the search resumes here (set per reader once it
    scans; the class's 0 until then)."""

    def buffered(self) -> bytes | None:
        """The next whole line if it is already here (no wait), else None."""
        nl = self._buf.find(b"\n", max(self._pos, self._scan))
        if nl < 0:
            self._scan = len(self._buf)
            return None
        line = bytes(self._buf[self._pos : nl])
        self._pos = self._scan = nl + 1
        return self._done(line)

    async def readline(self) -> bytes | None:
        """The next line without its newline; a last unterminated line counts; None at end."""
        while True:
            nl = self._buf.find(b"\n", max(self._pos, self._scan))
            if nl >= 0:
                line = bytes(self._buf[self._pos : nl])
                self._pos = self._scan = nl + 1
                return self._done(line)
            if self._eof:
                if self._pos < len(self._buf):
                    line = bytes(self._buf[self._pos :])
                    self._pos = self._scan = len(self._buf)
                    return self._done(line)
                return None
            if len(self._buf) - self._pos > self._max:
                raise WatchProtocolError(f"watch line longer than {self._max} bytes")
            # Drop consumed bytes only when reading more, so a chunk of many short lines is
            # not shifted once per line.
            if self._pos:
                del self._buf[: self._pos]
                self._pos = 0
            self._scan = len(self._buf)
            under_way = len(self._buf)
            chunk = await self._more(under_way, under_way, "a watch line")
            if chunk:
                self._buf += chunk
            else:
                self._eof = True


class FrameReader(_Records):
    """Length-delimited records (a 4-byte big-endian length, then that many bytes), as the
    API server frames a protobuf watch; each at most ``max_line`` bytes."""

    def buffered(self) -> bytes | None:
        """The next record if it is already here (no wait), else None."""
        have = len(self._buf) - self._pos
        if have < 4:
            return None
        length = int.from_bytes(self._buf[self._pos : self._pos + 4], "big")
        if length > self._max:
            raise WatchProtocolError(f"watch frame of {length} bytes, over {self._max}")
        if have < 4 + length:
            return None
        start = self._pos + 4
        self._pos = start + length
        return self._done(bytes(self._buf[start : self._pos]))

    async def readline(self) -> bytes | None:
        """The next record; None at the end of the body (a cut-off record is an error)."""
        while True:
            have = len(self._buf) - self._pos
            record = self.buffered()
            if record is not None:
                return record
            if self._eof:
                if have:
                    raise WatchProtocolError(f"watch body ends inside a frame ({have} bytes)")
                return None
            if self._pos:
                del self._buf[: self._pos]
                self._pos = 0
            what = "a watch frame's length"
            if have >= 4:
                what = f"a watch frame of {int.from_bytes(self._buf[:4], 'big')} bytes"
            # Its time is what has arrived of it, as a line's: the size its header claims is
            # the peer's word, and a claim of 60 MiB, then nothing, held the watch for the
            # inactivity deadline (146.6 s: issue 61, finding 7), not the record's.
            chunk = await self._more(have, have, what)
            if chunk:
                self._buf += chunk
            else:
                self._eof = True


class RecordReader(Protocol):
    async def readline(self) -> bytes | None: ...

    def buffered(self) -> bytes | None: ...


class WatchStream:
    """Async iterator of :class:`WatchEvent` over one watch body.

    A class rather than an async generator so that abandoning it mid-stream needs no
    ``aclose()``: the HTTP response's context manager owns the connection. JSON lines by
    default; a protobuf watch passes its ``FrameReader`` and decoder (``protobuf_wire``).
    """

    def __init__(
        self,
        source: ByteSource,
        *,
        inactivity_timeout: float,
        max_line: int = DEFAULT_MAX_LINE,
        framed: bool = False,
        decode: Callable[[bytes], WatchEvent] = decode_event,
        record_deadline: RecordDeadline = RecordDeadline(),
    ) -> None:
        if inactivity_timeout <= 0:
            raise ValueError("inactivity_timeout must be positive")
        self._source = source
        self._lines: RecordReader = (
            FrameReader(source, max_line, record_deadline)
            if framed
            else LineReader(source, max_line, record_deadline)
        )
        self._decode = decode
        self._inactivity = inactivity_timeout

    def set_exception(self, exc: BaseException) -> None:
        """End the read in progress (and every later one) with ``exc``."""
        self._source.set_exception(exc)

    def __aiter__(self) -> WatchStream:
        return self

    async def __anext__(self) -> WatchEvent:
        while True:
            # A record already buffered needs no wait, nor a deadline (a streaming list is
            # thousands of events a read).
            line = self._lines.buffered()
            if line is not None:
                if self._decode is not decode_event or line.strip():
                    return raise_for_error(self._decode(line))
                continue
            try:
                async with asyncio.timeout(self._inactivity):
                    line = await self._lines.readline()
            except TimeoutError as exc:  # ours, or aiohttp's sock_read (a TimeoutError too)
                raise WatchStalledError(f"no watch event within {self._inactivity:.0f}s") from exc
            if line is None:
                raise StopAsyncIteration
            if self._decode is not decode_event or line.strip():
                return raise_for_error(self._decode(line))
