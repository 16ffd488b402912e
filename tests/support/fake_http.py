"""A local HTTP server that stands in for a model API, for tests that use the real SDKs.

Why: a provider must be tested through its vendor's SDK itself (its retries, its timeout
handling, its error classes), never through a mock of the client. This module runs a tiny
HTTP server on ``127.0.0.1`` (an ephemeral port, in a background thread) that answers the
API's one route from a queue the test fills in. The wire shapes of each API live in their own
module (``fake_anthropic``: the Messages API, ``fake_openai``: Chat Completions); this one
knows only requests, replies and faults.

Each request takes the next queued reply; a queued item may also be a callable that receives
the :class:`RecordedRequest` and returns a :class:`Reply` (for answers that depend on the
request). With nothing queued, the ``default`` reply is used, and without a default the
server answers the API's ``unscripted`` reply (a 500 with ``x-should-retry: false``) so a
forgotten reply fails loudly instead of looking like a flaky network.

Faults: ``Reply(status=…)`` with any body and headers, ``delay`` before answering (to exceed
the client timeout), and ``reset=True`` to drop the connection without an answer.
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
from typing import Any, Self

__all__ = [
    "FakeApi",
    "RecordedRequest",
    "Reply",
    "Responder",
    "connection_reset",
    "next_id",
    "slow",
]

_ids = itertools.count(1)


def next_id() -> int:
    """A number unique in this test process, for message, call and request ids."""
    return next(_ids)


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
    """A request as the server received it; headers are lower-cased.

    The accessors read both APIs' shapes: the system prompt is a top-level ``system`` in the
    Messages API and a ``system`` (or ``developer``) message in Chat Completions.
    """

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
        if value is None:
            value = self._get("max_completion_tokens")
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
            contents = [
                m.get("content")
                for m in self._get("messages") or []
                if m.get("role") in ("system", "developer")
            ]
            return [block for content in contents for block in _blocks(content)]
        return _blocks(system)

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
            for block in _blocks(msg.get("content")):
                if block.get("type") == "text":
                    chunks.append(str(block.get("text", "")))
                elif block.get("type") == "tool_result":
                    chunks.append(json.dumps(block.get("content"), ensure_ascii=False))
        return "\n".join(chunks)

    def _get(self, key: str) -> Any:
        return self.body.get(key) if isinstance(self.body, dict) else None


def _blocks(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content)


Responder = Reply | Callable[[RecordedRequest], Reply]


def slow(reply: Reply, delay: float) -> Reply:
    """The same reply, sent only after ``delay`` seconds."""
    return replace(reply, delay=delay)


def connection_reset() -> Reply:
    """Drop the connection (TCP reset) instead of answering."""
    return Reply(reset=True)


class FakeApi:
    """The server. Start it with ``with Fake…() as fake`` (or ``start()``/``stop()``).

    A subclass names its ``route``, the reply for a forgotten script (``unscripted``), how a
    wrong path is answered (``not_found``) and may fill in a 200 body (``complete``).
    """

    route = "/"
    base_path = ""  # appended to the server root in ``base_url`` (the SDKs' convention)

    def __init__(self, *, default: Responder | None = None) -> None:
        self._queue: deque[Responder] = deque()
        self._default = default
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- what differs per API ----------------------------------------------------------------

    def unscripted(self) -> Reply:
        return Reply(
            status=500, body={"error": "no reply queued"}, headers={"x-should-retry": "false"}
        )

    def not_found(self, path: str) -> Reply:
        return Reply(status=404, body={"error": f"no route {path}"})

    def complete(self, body: dict[str, Any], request: RecordedRequest) -> dict[str, Any]:
        """The body of a 200 answer as sent (e.g. with the request's model filled in)."""
        return body

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Self:
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

    def __enter__(self) -> Self:
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
            raise RuntimeError(f"{type(self).__name__} is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{self.base_path}"

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
            return self.unscripted()
        return responder(request) if callable(responder) else responder

    def _wait(self, seconds: float) -> bool:
        """Sleep unless the server stops first; True when the server is stopping."""
        return self._stopping.wait(seconds)


def _make_handler(fake: FakeApi) -> type[BaseHTTPRequestHandler]:
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
            if self.path.split("?")[0].rstrip("/") != fake.route:
                self._send(fake.not_found(self.path), request)
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
            if reply.status == 200 and isinstance(body, dict):
                body = fake.complete(body, request)
            payload = body if isinstance(body, bytes) else json.dumps(body).encode()
            try:
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.send_header("request-id", f"req_fake_{next_id():05d}")
                self.send_header("x-request-id", f"req_fake_{next_id():05d}")
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
