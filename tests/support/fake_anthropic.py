"""A local stand-in for the Anthropic Messages API, for tests that use the real SDK.

Why: the provider must be tested through ``anthropic.AsyncAnthropic`` itself (its retries,
its timeout handling, its error classes), never through a mock of the client. This module
runs a tiny HTTP server on ``127.0.0.1`` (an ephemeral port, in a background thread) that
answers ``POST /v1/messages`` the way the API does, from a queue the test fills in.

Usage::

    from support.fake_anthropic import FakeAnthropic, tool_use, error, text_only

    with FakeAnthropic() as fake:
        fake.enqueue(error(429, retry_after=0.01), tool_use({"sections": {...}}))
        client = anthropic.AsyncAnthropic(api_key="test", base_url=fake.base_url)
        ...
        assert fake.requests[-1].body["tool_choice"] == {...}

Each request takes the next queued reply; a queued item may also be a callable that
receives the :class:`RecordedRequest` and returns a :class:`Reply` (for answers that depend
on the request). With nothing queued, the ``default`` reply is used, and without a default
the server answers 500 with ``x-should-retry: false`` so a forgotten reply fails loudly
instead of looking like a flaky network.

Faults: ``Reply(status=…)`` with any body and headers, ``retry_after`` seconds (sent as
``retry-after``, which the SDK honours), ``delay`` before answering (to exceed the client
timeout), and ``reset=True`` to drop the connection without an answer.
"""

from __future__ import annotations

import itertools
import json
import socket
import struct
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = [
    "FakeAnthropic",
    "RecordedRequest",
    "Reply",
    "Responder",
    "connection_reset",
    "error",
    "message",
    "slow",
    "text_only",
    "tool_use",
]

DEFAULT_USAGE: Mapping[str, int] = {
    "input_tokens": 120,
    "output_tokens": 80,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
}

_ERROR_TYPES: Mapping[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",
    529: "overloaded_error",
}


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted answer. ``body`` may be a JSON-able object or raw bytes."""

    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    reset: bool = False


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A request as the server received it; headers are lower-cased."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any

    @property
    def model(self) -> str | None:
        value = self._get("model")
        return value if isinstance(value, str) else None

    @property
    def max_tokens(self) -> int | None:
        value = self._get("max_tokens")
        return value if isinstance(value, int) else None

    @property
    def tools(self) -> list[dict[str, Any]]:
        return list(self._get("tools") or [])

    @property
    def tool_choice(self) -> dict[str, Any] | None:
        value = self._get("tool_choice")
        return value if isinstance(value, dict) else None

    @property
    def system_blocks(self) -> list[dict[str, Any]]:
        """The system prompt as a list of text blocks (a plain string becomes one block)."""
        system = self._get("system")
        if system is None:
            return []
        if isinstance(system, str):
            return [{"type": "text", "text": system}]
        return list(system)

    @property
    def system_text(self) -> str:
        return "\n".join(str(b.get("text", "")) for b in self.system_blocks)

    @property
    def user_text(self) -> str:
        """Every text block of every user message, joined: what the model was shown."""
        chunks: list[str] = []
        for msg in self._get("messages") or []:
            if msg.get("role") != "user":
                continue
            content = msg.get("content")
            if isinstance(content, str):
                chunks.append(content)
                continue
            for block in content or []:
                if block.get("type") == "text":
                    chunks.append(str(block.get("text", "")))
                elif block.get("type") == "tool_result":
                    chunks.append(json.dumps(block.get("content"), ensure_ascii=False))
        return "\n".join(chunks)

    def _get(self, key: str) -> Any:
        return self.body.get(key) if isinstance(self.body, dict) else None


Responder = Reply | Callable[[RecordedRequest], Reply]

_ids = itertools.count(1)


def message(
    content: list[dict[str, Any]],
    *,
    stop_reason: str | None,
    usage: Mapping[str, int] | None = None,
    model: str | None = None,
) -> Reply:
    """A 200 answer with the given content blocks (``model`` defaults to the request's)."""
    body: dict[str, Any] = {
        "id": f"msg_fake_{next(_ids):05d}",
        "type": "message",
        "role": "assistant",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": dict(usage if usage is not None else DEFAULT_USAGE),
    }
    if model is not None:
        body["model"] = model
    return Reply(status=200, body=body)


def tool_use(
    tool_input: Any,
    *,
    name: str = "update_working_memory",
    stop_reason: str = "tool_use",
    usage: Mapping[str, int] | None = None,
    text: str | None = None,
) -> Reply:
    """A forced tool call, optionally preceded by a text block."""
    blocks: list[dict[str, Any]] = []
    if text:
        blocks.append({"type": "text", "text": text})
    blocks.append(
        {
            "type": "tool_use",
            "id": f"toolu_fake_{next(_ids):05d}",
            "name": name,
            "input": tool_input,
        }
    )
    return message(blocks, stop_reason=stop_reason, usage=usage)


def text_only(
    text: str, *, stop_reason: str = "end_turn", usage: Mapping[str, int] | None = None
) -> Reply:
    """An answer that ignores the tool and just talks."""
    return message([{"type": "text", "text": text}], stop_reason=stop_reason, usage=usage)


def error(
    status: int,
    *,
    error_type: str | None = None,
    message_text: str | None = None,
    retry_after: float | None = None,
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """An API error in the documented shape (``{"type": "error", "error": {...}}``)."""
    all_headers = dict(headers or {})
    if retry_after is not None:
        all_headers["retry-after"] = f"{retry_after:g}"
    body = {
        "type": "error",
        "error": {
            "type": error_type or _ERROR_TYPES.get(status, "api_error"),
            "message": message_text or f"fake error {status}",
        },
    }
    return Reply(status=status, body=body, headers=all_headers)


def slow(reply: Reply, delay: float) -> Reply:
    """The same reply, sent only after ``delay`` seconds."""
    return replace(reply, delay=delay)


def connection_reset() -> Reply:
    """Drop the connection (TCP reset) instead of answering."""
    return Reply(reset=True)


_UNSCRIPTED = Reply(
    status=500,
    body={
        "type": "error",
        "error": {"type": "api_error", "message": "fake server: no reply queued"},
    },
    headers={"x-should-retry": "false"},
)


class FakeAnthropic:
    """The server. Start it with ``with FakeAnthropic() as fake`` (or ``start()``/``stop()``)."""

    def __init__(self, *, default: Responder | None = None) -> None:
        self._queue: deque[Responder] = deque()
        self._default = default
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> FakeAnthropic:
        handler = _make_handler(self)
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        server.block_on_close = False
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- programming and inspection ---------------------------------------------------------

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeAnthropic is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def enqueue(self, *replies: Responder) -> None:
        """Queue answers for the next requests, in order."""
        with self._lock:
            self._queue.extend(replies)

    def set_default(self, reply: Responder | None) -> None:
        """The answer used once the queue is empty (None: a loud, non-retryable 500)."""
        with self._lock:
            self._default = reply

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    @property
    def pending(self) -> int:
        """Queued answers not consumed yet."""
        with self._lock:
            return len(self._queue)

    def clear(self) -> None:
        """Forget queued answers and recorded requests."""
        with self._lock:
            self._queue.clear()
            self._requests.clear()

    def __iter__(self) -> Iterator[RecordedRequest]:
        return iter(self.requests)

    # -- used by the handler ---------------------------------------------------------------

    def _take(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self._requests.append(request)
            responder = self._queue.popleft() if self._queue else self._default
        if responder is None:
            return _UNSCRIPTED
        return responder(request) if callable(responder) else responder

    def _wait(self, seconds: float) -> bool:
        """Sleep unless the server stops first; True when the server is stopping."""
        return self._stopping.wait(seconds)


def _make_handler(fake: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return  # keep test output quiet

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            request = RecordedRequest(
                method="POST",
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
            )
            if self.path.split("?")[0].rstrip("/") != "/v1/messages":
                self._send(error(404, message_text=f"no route {self.path}"), request)
                return
            self._send(fake._take(request), request)

        def _send(self, reply: Reply, request: RecordedRequest) -> None:
            if reply.delay and fake._wait(reply.delay):
                self.close_connection = True
                return
            if reply.reset:
                self._reset()
                return
            body = reply.body
            if reply.status == 200 and isinstance(body, dict) and "model" not in body:
                body = {**body, "model": request.model or "claude-fake"}
            payload = body if isinstance(body, bytes) else json.dumps(body).encode()
            try:
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.send_header("request-id", f"req_fake_{next(_ids):05d}")
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)
                self.wfile.flush()
            except OSError:
                self.close_connection = True  # the client gave up (its timeout); nothing to do

        def _reset(self) -> None:
            self.close_connection = True
            try:
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.connection.close()
            except OSError:
                pass

    return Handler
