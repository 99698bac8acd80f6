"""Watch-stream decoding: line splitting, each way a stream can end, and its timeouts.
(The informer's reaction to them is in ``test_informer_scripted.py``.)"""

from __future__ import annotations

import asyncio
import time
from typing import cast
from unittest.mock import Mock

import aiohttp
import orjson
import pytest
from aiohttp.base_protocol import BaseProtocol

from linkerd_config.kube.watch import (
    GoneError,
    LineReader,
    RecordDeadline,
    WatchEvent,
    WatchProtocolError,
    WatchStalledError,
    WatchStatusError,
    WatchStream,
    decode_event,
)
from tests.support.watch_lines import cm, line, status


def feed(chunks: list[bytes], *, eof: bool = True) -> aiohttp.StreamReader:
    """A real aiohttp StreamReader, pre-filled with ``chunks`` as the network would deliver."""
    loop = asyncio.get_running_loop()
    # No socket behind it: flow-control calls (pause/resume reading) are recorded and ignored.
    protocol = cast(BaseProtocol, Mock(connected=True))
    reader = aiohttp.StreamReader(protocol, 2**16, loop=loop)
    for chunk in chunks:
        reader.feed_data(chunk)
    if eof:
        reader.feed_eof()
    return reader


async def collect(stream: WatchStream) -> list[WatchEvent]:
    return [e async for e in stream]


# -- line splitting ----------------------------------------------------------------------


async def test_lines_split_across_arbitrary_chunks() -> None:
    body = line("ADDED", cm("a", "1")) + line("MODIFIED", cm("a", "2")) + b"\n"
    # Every possible chunking at one-byte granularity must give the same events.
    for size in (1, 2, 7, 64, len(body)):
        chunks = [body[i : i + size] for i in range(0, len(body), size)]
        events = await collect(WatchStream(feed(chunks), inactivity_timeout=5))
        assert [(e.type, e.resource_version) for e in events] == [("ADDED", "1"), ("MODIFIED", "2")]


async def test_line_longer_than_aiohttp_limit() -> None:
    big = "x" * (3 * 1024 * 1024)  # 3 MiB: far past StreamReader.readline's 64 KiB limit
    body = line("ADDED", cm("big", "7", blob=big)) + line("DELETED", cm("small", "8"))
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)]
    events = await collect(WatchStream(feed(chunks), inactivity_timeout=5))
    assert events[0].object["data"]["blob"] == big
    assert events[1].type == "DELETED"


async def test_many_lines_in_one_chunk_and_unterminated_last_line() -> None:
    body = b"".join(line("ADDED", cm(f"n{i}", str(i))) for i in range(500))
    body += orjson.dumps({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "999"}}})
    events = await collect(WatchStream(feed([body]), inactivity_timeout=5))
    assert len(events) == 501
    assert events[-1].type == "BOOKMARK"
    assert events[-1].resource_version == "999"


async def test_line_reader_limit() -> None:
    reader = LineReader(feed([b"a" * 100]), max_line=10)
    with pytest.raises(WatchProtocolError, match="longer than"):
        await reader.readline()


async def test_line_reader_eof_behaviour() -> None:
    reader = LineReader(feed([b"one\ntw", b"o\n", b"three"]))
    assert await reader.readline() == b"one"
    assert await reader.readline() == b"two"
    assert await reader.readline() == b"three"
    assert await reader.readline() is None
    assert await reader.readline() is None


# -- decoding and errors -----------------------------------------------------------------


def test_decode_event_rejects_garbage() -> None:
    with pytest.raises(WatchProtocolError, match="undecodable"):
        decode_event(b"{not json")
    with pytest.raises(WatchProtocolError, match="not an object"):
        decode_event(b"[1,2]")
    with pytest.raises(WatchProtocolError, match="unknown watch event type"):
        decode_event(b'{"type":"WAT","object":{}}')
    with pytest.raises(WatchProtocolError, match="without an object"):
        decode_event(b'{"type":"ADDED","object":null}')
    # ERROR events are plain events at this level; the stream turns them into exceptions.
    assert decode_event(line("ERROR", status(410))).type == "ERROR"


async def test_error_410_becomes_gone() -> None:
    body = line("ADDED", cm("a", "1")) + line("ERROR", status(410, "Expired", "too old"))
    stream = WatchStream(feed([body]), inactivity_timeout=5)
    assert (await anext(stream)).type == "ADDED"
    with pytest.raises(GoneError) as info:
        await anext(stream)
    assert info.value.code == 410
    assert info.value.message == "too old"


async def test_expired_reason_without_code_is_gone_too() -> None:
    stream = WatchStream(feed([line("ERROR", {"reason": "Expired"})]), inactivity_timeout=5)
    with pytest.raises(GoneError):
        await anext(stream)


async def test_other_error_is_a_status_error_not_gone() -> None:
    stream = WatchStream(feed([line("ERROR", status(500, "InternalError"))]), inactivity_timeout=5)
    with pytest.raises(WatchStatusError) as info:
        await anext(stream)
    assert not isinstance(info.value, GoneError)
    assert info.value.code == 500


async def test_inactivity_deadline() -> None:
    reader = feed([line("ADDED", cm("a", "1")), b'{"type":"MODIFIED",'], eof=False)
    stream = WatchStream(reader, inactivity_timeout=0.2)
    assert (await anext(stream)).type == "ADDED"
    # Half a line arrived, then silence: a partial line does not count as life.
    with pytest.raises(WatchStalledError):
        await anext(stream)


async def test_inactivity_deadline_restarts_per_line() -> None:
    reader = feed([], eof=False)
    stream = WatchStream(reader, inactivity_timeout=1.0)

    async def trickle() -> None:
        for i in range(4):
            await asyncio.sleep(0.4)
            reader.feed_data(line("BOOKMARK", {"metadata": {"resourceVersion": str(i)}}))
        reader.feed_eof()

    task = asyncio.create_task(trickle())
    events = await collect(stream)  # 1.6 s in all, but never 1 s of silence
    await task
    assert [e.resource_version for e in events] == ["0", "1", "2", "3"]


async def test_socket_read_timeout_is_a_stall() -> None:
    class TimingOut:
        async def readany(self) -> bytes:
            raise aiohttp.ServerTimeoutError("Timeout on reading data from socket")

    with pytest.raises(WatchStalledError):
        await anext(WatchStream(TimingOut(), inactivity_timeout=5))


# -- a record cut off: the record deadline (issue 39, finding 6) ---------------------------


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


FAST = RecordDeadline(base=0.2, rate=1e9)
"""0.2 s for any record, whatever its size: the tests' own deadline."""


@pytest.mark.parametrize(
    ("cut", "says"),
    [
        (frame(b"x" * 1000)[:300], "a watch frame of 1000 bytes stopped after 300 bytes"),
        (frame(b"x" * 1000)[:2], "a watch frame's length stopped after 2 bytes"),
    ],
)
async def test_a_frame_cut_off_is_a_stall_at_its_deadline_not_the_inactivity_one(
    cut: bytes, says: str
) -> None:
    """The API server writes each event whole: part of a frame, then nothing, is a stalled
    path, said within the record's deadline (before: only the inactivity deadline, 150 s)."""
    reader = feed([frame(b"whole"), cut], eof=False)
    stream = WatchStream(
        reader, inactivity_timeout=60, framed=True, decode=lambda _: WatchEvent("ADDED", {}),
        record_deadline=FAST,
    )  # fmt: skip
    await anext(stream)  # the whole frame before it
    started = time.monotonic()
    with pytest.raises(WatchStalledError, match=says):
        await anext(stream)
    assert 0.15 < time.monotonic() - started < 2


async def test_a_frame_claiming_a_huge_size_then_nothing_is_a_stall_at_the_base_deadline() -> None:
    """Issue 61, finding 7: a header claiming 60 MiB (under the largest frame accepted), then
    silence. Its time is what arrived of it, not what it claims: stopped after the base
    0.2 s, where its claim would have allowed 17 hours at this rate."""
    claim = (60 * 1024 * 1024).to_bytes(4, "big")
    reader = feed([frame(b"whole"), claim + b"x" * 10], eof=False)
    stream = WatchStream(
        reader, inactivity_timeout=60, framed=True, decode=lambda _: WatchEvent("ADDED", {}),
        record_deadline=RecordDeadline(base=0.2, rate=1000),
    )  # fmt: skip
    await anext(stream)
    started = time.monotonic()
    with pytest.raises(WatchStalledError, match="a watch frame of 62914560 bytes stopped"):
        await anext(stream)
    assert time.monotonic() - started < 2


async def test_a_frame_claiming_more_than_the_largest_accepted_fails_at_once() -> None:
    reader = feed([(65 * 1024 * 1024).to_bytes(4, "big")], eof=False)
    stream = WatchStream(
        reader, inactivity_timeout=60, framed=True, decode=lambda _: WatchEvent("ADDED", {}),
    )  # fmt: skip
    with pytest.raises(WatchProtocolError, match="over"):
        await asyncio.wait_for(anext(stream), timeout=1)


async def test_a_json_line_cut_off_is_a_stall_at_its_deadline_too() -> None:
    reader = feed([line("ADDED", cm("a", "1")), b'{"type":"MODIFIED",'], eof=False)
    stream = WatchStream(reader, inactivity_timeout=60, record_deadline=FAST)
    assert (await anext(stream)).type == "ADDED"
    started = time.monotonic()
    with pytest.raises(WatchStalledError, match="a watch line stopped after 19 bytes"):
        await anext(stream)
    assert 0.15 < time.monotonic() - started < 2


async def test_a_quiet_watch_between_records_waits_out_only_the_inactivity_deadline() -> None:
    reader = feed([frame(b"whole")], eof=False)
    stream = WatchStream(
        reader, inactivity_timeout=0.6, framed=True, decode=lambda _: WatchEvent("ADDED", {}),
        record_deadline=FAST,
    )  # fmt: skip
    await anext(stream)
    started = time.monotonic()
    with pytest.raises(WatchStalledError, match="no watch event within"):
        await anext(stream)
    assert time.monotonic() - started > 0.5  # not the record deadline's 0.2 s


async def trickled(reader: aiohttp.StreamReader, data: bytes, piece: int, every: float) -> None:
    for at in range(0, len(data), piece):
        await asyncio.sleep(every)
        reader.feed_data(data[at : at + piece])


@pytest.mark.parametrize("framed", [True, False])
async def test_a_record_arriving_at_the_rate_keeps_its_time_and_a_slower_one_does_not(
    framed: bool,
) -> None:
    """0.3 s plus 1,000 bytes a second: 1,200 bytes in 12 pieces 0.05 s apart (0.6 s, within
    the 1.5 s allowed) complete; 0.2 s apart (2.4 s) is stopped, although bytes keep coming."""
    deadline = RecordDeadline(base=0.3, rate=1000)
    body = frame(b"x" * 1196) if framed else b'"' + b"x" * 1198 + b'"\n'

    def stream_of(reader: aiohttp.StreamReader) -> WatchStream:
        return WatchStream(
            reader, inactivity_timeout=60, framed=framed, record_deadline=deadline,
            decode=lambda _: WatchEvent("ADDED", {}),
        )  # fmt: skip

    reader = feed([], eof=False)
    task = asyncio.create_task(trickled(reader, body, 100, 0.05))
    assert (await anext(stream_of(reader))).type == "ADDED"
    await task
    reader = feed([], eof=False)
    task = asyncio.create_task(trickled(reader, body, 100, 0.2))
    with pytest.raises(WatchStalledError, match="stopped after"):
        await anext(stream_of(reader))
    task.cancel()


async def test_each_record_has_its_own_deadline() -> None:
    """A record that completes resets the clock: the next one, waited for later, gets its
    full time (here each frame takes 0.15 s of a 0.2 s deadline; four in a row take 0.6 s)."""
    reader = feed([], eof=False)
    body = b"".join(frame(b"x" * 96) for _ in range(4))  # 100 bytes each
    task = asyncio.create_task(trickled(reader, body, 50, 0.075))
    stream = WatchStream(
        reader, inactivity_timeout=60, framed=True, decode=lambda _: WatchEvent("ADDED", {}),
        record_deadline=FAST,
    )  # fmt: skip
    for _ in range(4):
        assert (await anext(stream)).type == "ADDED"
    await task


def test_the_default_deadline_scales_with_the_record() -> None:
    assert RecordDeadline().allowed(4 * 1024) == pytest.approx(10.06, abs=0.01)
    assert RecordDeadline().allowed(1536 * 1024) == pytest.approx(34.0)  # etcd's largest
    assert RecordDeadline().allowed(4 * 1024) < 150 / 10  # the inactivity deadline's tenth


async def test_aiohttps_own_timeout_mid_record_is_still_a_stall() -> None:
    class TimingOutMidFrame:
        def __init__(self) -> None:
            self.chunks = [frame(b"x" * 10)[:5]]

        async def readany(self) -> bytes:
            if self.chunks:
                return self.chunks.pop()
            raise aiohttp.ServerTimeoutError("Timeout on reading data from socket")

        def set_exception(self, exc: BaseException) -> None:
            pass

    stream = WatchStream(TimingOutMidFrame(), inactivity_timeout=5, framed=True)
    with pytest.raises(WatchStalledError, match="no watch event within"):
        await anext(stream)
