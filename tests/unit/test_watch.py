"""Watch-stream decoding: line splitting, each way a stream can end, and its timeouts.
(The informer's reaction to them is in ``test_informer_scripted.py``.)"""

from __future__ import annotations

import asyncio
from typing import cast
from unittest.mock import Mock

import aiohttp
import orjson
import pytest
from aiohttp.base_protocol import BaseProtocol

from linkerd_config.kube.watch import (
    GoneError,
    LineReader,
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
