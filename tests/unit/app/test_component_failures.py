"""A component that fails says why in one line (the manager's log), and a port already in use
is named with its address: found running `ENABLE_WEBHOOKS=false make run` beside another
process on the webhook port, which logged ``ExceptionGroup('unhandled errors in a TaskGroup',
[ExceptionGroup(...)])``."""

from __future__ import annotations

import asyncio
import socket

import pytest
from aiohttp import web
from structlog.testing import capture_logs

from linkerd_config.kube.leader import NoElection
from linkerd_config.kube.serving import serve
from linkerd_config.manager import Manager, describe


@pytest.mark.parametrize(
    ("exc", "line"),
    [
        (None, "returned without an error"),
        (ValueError("bad"), "ValueError: bad"),
        (
            ExceptionGroup("outer", [ExceptionGroup("inner", [OSError(98, "in use")])]),
            "OSError: [Errno 98] in use",
        ),
        (ExceptionGroup("two", [KeyError("a"), TimeoutError()]), "KeyError: 'a'; TimeoutError: "),
    ],
)
def test_describe(exc: BaseException | None, line: str) -> None:
    assert describe(exc) == line


async def test_a_server_on_a_taken_port_names_it_and_stops_the_manager() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:

        async def server() -> None:
            async with asyncio.TaskGroup() as group:  # as the conversion server nests it
                group.create_task(serve(web.Application(), "127.0.0.1", port, name="x"))

        manager = Manager(NoElection())
        manager.add_server("conversion", server)
        with capture_logs() as logs:
            await asyncio.wait_for(manager.run(asyncio.Event()), 10)
    finally:
        taken.close()
    # Seen while the manager waits ("component exited; shutting down") or, when leadership
    # came first, at shutdown ("component failed"): either way, the same line.
    said = [
        e
        for e in logs
        if e["event"] in ("component exited; shutting down", "component failed")
        and e.get("component") == "server:conversion"
    ]
    assert said, logs
    assert {e["error"] for e in said} == {
        f"OSError: [Errno 98] cannot listen on 127.0.0.1:{port}: Address already in use"
    }
