"""Structured logging (structlog), configured once at start.

Why two faces: a log shipper wants one JSON object per line; a person running ``make run``
wants to read the lines. JSON is the default off a terminal, readable coloured lines (structlog's
console renderer) on one; ``WM_LOG_FORMAT=json|console`` decides otherwise.
"""

from __future__ import annotations

import logging
import sys

import structlog


def resolve_format(log_format: str, *, terminal: bool) -> str:
    """``auto`` → ``console`` on a terminal, else ``json``; an explicit choice stays."""
    if log_format == "auto":
        return "console" if terminal else "json"
    return log_format


def configure_logging(level: str = "info", log_format: str = "auto") -> None:
    """Lines on stderr with ISO timestamps, JSON or console (see the module docstring);
    context variables (request and session ids) are merged into every line."""
    numeric = logging.getLevelNamesMapping()[level.upper()]
    terminal = sys.stderr.isatty()
    console = resolve_format(log_format, terminal=terminal) == "console"
    # The console renderer prints exceptions itself (prettily); JSON needs them as a string.
    tail: list[structlog.types.Processor] = (
        [structlog.dev.ConsoleRenderer(colors=terminal)]
        if console
        else [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    )
    # Standard-library records (grpc, httpx, the SDKs) are rendered the same way, so that in
    # JSON every line on stderr parses: log shippers and the tests read the stream line by line.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.contextvars.merge_contextvars,
                structlog.stdlib.add_log_level,
                structlog.stdlib.add_logger_name,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                *tail,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *tail,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
