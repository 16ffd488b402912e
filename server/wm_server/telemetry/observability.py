"""Structured logging (structlog), configured once at start.

Why two faces: a log shipper wants one JSON object per line; a person running ``make run``
wants to read the lines. JSON is the default off a terminal, readable coloured lines (structlog's
console renderer) on one; ``WM_LOG_FORMAT=json|console`` decides otherwise.

The access log has a path of its own (:class:`AccessLog`): one line per RPC is the one line
every call writes, and rendering it through structlog's processor chain on the call's path
costs more than the health check's own handler. In JSON its lines are the same objects (the
same fields, ``event``, ``level`` and ``timestamp``, on the same stream), collected while the
loop runs the RPCs and rendered and written together right after them, in one write, so
neither the rendering nor the system call delays the response; on a console they go through
structlog like any line (a person reads them, the rate is a person's).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import sys
import time
from collections.abc import MutableMapping
from contextvars import ContextVar
from typing import Any, TextIO

import structlog


class RpcLogContext:
    """The fields every log line of one RPC carries (request id, method, session, tenant).

    The interceptor sets one of these per RPC and fills it in as it learns more (the session
    id once the request is decoded, the tenant once the key is checked); the log processor
    reads it when a line is written. One context variable set per RPC replaces structlog's
    clear-and-bind of four context variables, whose merge walks every variable of the
    context on each line."""

    __slots__ = ("method", "request_id", "session_id", "tenant")

    def __init__(self, method: str) -> None:
        self.method = method
        self.request_id = ""
        self.session_id = ""
        self.tenant = ""


_rpc_context: ContextVar[RpcLogContext | None] = ContextVar("wm_rpc_log_context", default=None)


def set_rpc_log_context(context: RpcLogContext) -> None:
    """Attach ``context`` to every line logged from now on in this task (one RPC's task)."""
    _rpc_context.set(context)


def merge_rpc_context(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """The structlog processor that adds the current RPC's fields (a line's own win)."""
    rpc = _rpc_context.get()
    if rpc is not None:
        event_dict.setdefault("request_id", rpc.request_id)
        event_dict.setdefault("method", rpc.method)
        event_dict.setdefault("session_id", rpc.session_id)
        event_dict.setdefault("tenant", rpc.tenant)
    return event_dict


class AccessLog:
    """The access lines: written by the configured JSON stream once :func:`configure_logging`
    ran, else (a server started in process, without it) through structlog as any line."""

    def __init__(self) -> None:
        self._fallback = structlog.get_logger("wm_server.access")
        self._stream: TextIO | None = None
        self.threshold = logging.DEBUG  # a line below it is dropped before it is built
        self._pending: list[tuple[str, float, dict[str, Any]]] = []
        self._scheduled = False
        self._second = -1
        self._second_text = ""

    def configure(self, stream: TextIO | None, threshold: int) -> None:
        self.flush()
        self._stream = stream
        self.threshold = threshold

    def enabled(self, level: int) -> bool:
        return level >= self.threshold

    def emit(self, level: int, fields: dict[str, Any]) -> None:
        """Log one line of ``level`` (a ``logging`` number) with ``fields``."""
        if self._stream is None:
            self._fallback.log(level, "rpc", **fields)
            return
        self._pending.append((logging.getLevelName(level).lower(), time.time(), fields))
        if self._scheduled:
            return
        try:
            asyncio.get_running_loop().call_soon(self.flush)
        except RuntimeError:  # no loop: write at once
            self.flush()
            return
        self._scheduled = True

    def flush(self) -> None:
        """Render and write the lines collected so far (also at shutdown and at exit)."""
        self._scheduled = False
        pending, self._pending = self._pending, []
        if not pending or self._stream is None:
            return
        lines = []
        for level, stamp, fields in pending:
            fields["event"] = "rpc"
            fields["level"] = level
            fields["timestamp"] = self._iso(stamp)
            lines.append(json.dumps(fields))
        lines.append("")
        try:
            self._stream.write("\n".join(lines))
            self._stream.flush()
        except (OSError, ValueError):  # a closed stream at exit: nothing left to tell
            pass

    def _iso(self, stamp: float) -> str:
        """ISO 8601 UTC with microseconds, as structlog's TimeStamper(fmt="iso", utc=True)
        writes it; the date and time of day are formatted once per second."""
        second = int(stamp)
        if second != self._second:
            self._second = second
            self._second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._second_text}.{int((stamp - second) * 1e6):06d}Z"


ACCESS_LOG = AccessLog()
atexit.register(ACCESS_LOG.flush)


def resolve_format(log_format: str, *, terminal: bool) -> str:
    """``auto`` → ``console`` on a terminal, else ``json``; an explicit choice stays."""
    if log_format == "auto":
        return "console" if terminal else "json"
    return log_format


def configure_logging(level: str = "info", log_format: str = "auto") -> None:
    """Lines on stderr with ISO timestamps, JSON or console (see the module docstring); the
    RPC's fields (request and session ids) are merged into every line."""
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
                merge_rpc_context,
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
            merge_rpc_context,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *tail,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    ACCESS_LOG.configure(None if console else sys.stderr, numeric)
