"""Structured logging: key-value events, JSON in a cluster, readable on a terminal."""

from __future__ import annotations

import logging
import sys
from typing import Final

import structlog

LOG_FORMATS: Final = ("auto", "json", "console")


def configure_logging(level: str = "info", fmt: str = "auto") -> None:
    """Route structlog and the standard library's logging through one renderer.

    ``auto`` picks JSON unless stderr is a terminal, so a pod's logs are machine-readable
    and a developer's are not a wall of braces.
    """
    numeric = logging.getLevelNamesMapping().get(level.upper())
    if numeric is None:
        raise ValueError(f"log level {level!r} is not one of debug, info, warning, error")
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format {fmt!r} is not one of {', '.join(LOG_FORMATS)}")
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(), timestamp_key="ts")
    )
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info if use_json else _keep,
            # The keys controller-runtime's (zap) JSON uses, which log pipelines expect:
            # msg, ts, level, logger; structlog's own name for the message is "event".
            structlog.processors.EventRenamer("msg") if use_json else _keep,
            renderer,
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    # aiohttp's access log is noise at info: every probe and scrape would be a line.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    server = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _MalformedRequests) for f in server.filters):
        server.addFilter(_MalformedRequests())


MAX_MALFORMED_CHARS: Final = 200
"""The most of a malformed request's parse error a log line keeps (it quotes the bytes)."""


class _MalformedRequests(logging.Filter):
    """aiohttp logs a request it cannot parse as an error with its traceback (about 500
    bytes, at whatever rate a client sends them; issue 61, finding 9). It is the client's
    fault, answered 400: one short warning line, its parse error cut short."""

    def filter(self, record: logging.LogRecord) -> bool:
        # Here, not at the top: the settings import this module, and aiohttp must first be
        # imported as ``kube.tls.import_aiohttp_lean`` does (its server logs only after).
        from aiohttp.http_exceptions import HttpProcessingError  # noqa: PLC0415

        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            text = " ".join(str(error).split())
            if len(text) > MAX_MALFORMED_CHARS:
                text = f"{text[: MAX_MALFORMED_CHARS - 1]}…"
            record.msg, record.args = "malformed request answered 400: %s", (text,)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info = record.exc_text = None
        return True


def _keep(
    _logger: object, _name: str, event: structlog.types.EventDict
) -> structlog.types.EventDict:
    return event
