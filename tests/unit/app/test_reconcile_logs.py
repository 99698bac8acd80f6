"""The log lines of a reconcile, as a log pipeline sees them: JSON with controller-runtime's
keys (msg, ts, level, logger), a reconcile ID on every line of one reconcile, and one info line
per reconcile with its outcome and duration. Run in a child process: logging is global state."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

SCRIPT = textwrap.dedent(
    """
    import asyncio
    import structlog
    from linkerd_config.kube.controller import Controller, ControllerOptions, Result
    from linkerd_config.logs import configure_logging

    configure_logging("info", "json")
    inner = structlog.get_logger("test.reconciler")

    class Reconciler:
        def __init__(self):
            self.done = asyncio.Event()
            self.calls = 0

        async def reconcile(self, key):
            self.calls += 1
            inner.info("inside", attempt=self.calls)
            if key == "bad" and self.calls < 3:
                raise OSError("refused")
            if self.calls >= 3:
                self.done.set()
            return Result()

    async def main():
        reconciler = Reconciler()
        controller = Controller("demo", reconciler, options=ControllerOptions(workers=1))
        task = asyncio.create_task(controller.run(lambda: ["ok", "bad"]))
        await asyncio.wait_for(reconciler.done.wait(), 20)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass

    asyncio.run(main())
    """
)


def lines() -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True
    )
    return [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]


def test_each_reconcile_has_an_id_on_every_line_and_ends_with_one_summary() -> None:
    records = lines()
    for record in records:
        assert {"msg", "ts", "level", "logger"} <= set(record), record
        assert "event" not in record and "timestamp" not in record
    ours = [r for r in records if "reconcileID" in r]
    by_id: dict[str, list[dict[str, Any]]] = {}
    for record in ours:
        by_id.setdefault(record["reconcileID"], []).append(record)
    assert len(by_id) == 3  # "ok" once; "bad" twice (an error, then a success)
    outcomes = []
    for group in by_id.values():
        assert {r["controller"] for r in group} == {"demo"}
        assert len({r["key"] for r in group}) == 1
        assert group[0]["msg"] == "inside"  # the reconciler's own line carries the ID too
        finished = [r for r in group if r["msg"] == "reconcile finished"]
        assert len(finished) == 1 and finished[0]["level"] == "info"
        assert finished[0]["seconds"] >= 0
        outcomes.append((group[0]["key"], finished[0]["result"]))
    assert sorted(outcomes) == [("bad", "error"), ("bad", "success"), ("ok", "success")]


MALFORMED = textwrap.dedent(
    """
    import asyncio
    from aiohttp import web
    from linkerd_config.kube.serving import ConnectionLimits
    from linkerd_config.logs import configure_logging
    from tests.support.raw_http import connect, served

    configure_logging("info", "json")

    async def main():
        app = web.Application()
        async def ok(request):
            return web.Response(text="ok")
        app.router.add_get("/", ok)
        async with served(app, "logs-test", ConnectionLimits(), None) as port:
            for raw in (b"GET / HTTP/1.1\\r\\nHost x\\r\\n\\r\\n", b"GET / HTTP/9.9\\r\\n\\r\\n"):
                reader, writer = await connect(port)
                writer.write(raw)
                print("ANSWER", (await asyncio.wait_for(reader.readline(), 5)).decode().strip())
                writer.close()
            await asyncio.sleep(0.2)

    asyncio.run(main())
    """
)


def test_a_malformed_request_is_one_short_warning_without_a_traceback() -> None:
    """Issue 61, finding 9: aiohttp logged each request it could not parse as an error with
    about 500 bytes of traceback. It is the client's: answered 400, one short warning."""
    done = subprocess.run(
        [sys.executable, "-c", MALFORMED], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.count("ANSWER HTTP/1.0 400") == 2, done.stdout
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    said = [line for line in lines if line["logger"] == "aiohttp.server"]
    assert len(said) == 2, done.stderr
    for line in said:
        assert line["level"] == "warning" and "exception" not in line, line
        assert line["msg"].startswith("malformed request answered 400: ")
        assert "\n" not in line["msg"] and len(line["msg"]) < 300
