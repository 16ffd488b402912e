"""Structured JSON logging (structlog), configured once at start."""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from contextvars import ContextVar
from typing import Any

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


def configure_logging(level: str = "info") -> None:
    """JSON lines on stderr with ISO timestamps; the RPC's fields (request and session ids)
    are merged into every line."""
    numeric = logging.getLevelNamesMapping()[level.upper()]
    # Standard-library records (grpc, httpx, the SDKs) are rendered as JSON too, so that every
    # line on stderr parses: log shippers and the tests read the stream line by line.
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
                structlog.processors.format_exc_info,
                structlog.processors.JSONRenderer(),
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
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
