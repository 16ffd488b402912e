"""A local stand-in for an OpenAI-compatible Chat Completions server, for tests that use the
real ``openai`` SDK.

The server core (queue, faults, recording) is :mod:`support.fake_http`; this module adds the
route and shapes of ``POST /v1/chat/completions``: choices with a message whose
``tool_calls`` carry the function arguments as a JSON *string*, a finish reason, usage with
``prompt_tokens_details.cached_tokens``, and ``{"error": {...}}`` bodies. Compatible servers
differ from OpenAI in ways the helpers can reproduce: arguments as plain text content
(``text_only``), arguments wrapped as ``{"raw": "..."}`` (``tool_call(raw=...)``), and one
call's arguments split over several ``tool_calls`` entries (``tool_call(split=...)``).

Usage::

    with FakeOpenAI() as fake:
        fake.enqueue(error(429, retry_after=0.01), tool_call({"sections": {...}}))
        client = openai.AsyncOpenAI(api_key="test", base_url=fake.base_url)
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from support.fake_http import (
    FakeApi,
    RecordedRequest,
    Reply,
    Responder,
    connection_reset,
    next_id,
    slow,
)

__all__ = [
    "FakeOpenAI",
    "RecordedRequest",
    "Reply",
    "Responder",
    "completion",
    "connection_reset",
    "error",
    "requested_tool",
    "slow",
    "text_only",
    "tool_call",
]

ROUTE = "/v1/chat/completions"

DEFAULT_USAGE: Mapping[str, Any] = {
    "prompt_tokens": 120,
    "completion_tokens": 80,
    "total_tokens": 200,
    "prompt_tokens_details": {"cached_tokens": 0},
}

_ERROR_TYPES: Mapping[int, str] = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    429: "requests",
    500: "server_error",
    503: "server_error",
    529: "server_error",
}
_ERROR_CODES: Mapping[int, str] = {401: "invalid_api_key", 429: "rate_limit_exceeded"}


def completion(
    message: Mapping[str, Any],
    *,
    finish_reason: str | None,
    usage: Mapping[str, Any] | None = None,
    model: str | None = None,
) -> Reply:
    """A 200 answer with one choice (``model`` defaults to the request's)."""
    body: dict[str, Any] = {
        "id": f"chatcmpl-fake{next_id():05d}",
        "object": "chat.completion",
        "created": 1_790_000_000,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", **message},
                "finish_reason": finish_reason,
                "logprobs": None,
            }
        ],
    }
    body["usage"] = dict(usage if usage is not None else DEFAULT_USAGE)
    if model is not None:
        body["model"] = model
    return Reply(status=200, body=body)


def tool_call(
    arguments: Any = None,
    *,
    name: str = "update_working_memory",
    finish_reason: str = "tool_calls",
    usage: Mapping[str, Any] | None = None,
    text: str | None = None,
    raw: str | None = None,
    split: Sequence[int] = (),
) -> Reply:
    """A function call. ``arguments`` is JSON-encoded unless it is already a string.

    ``raw`` sends ``{"raw": raw}`` as the arguments (a backend that could not parse what the
    model wrote); ``split`` cuts the arguments string at those offsets and sends each piece as
    its own ``tool_calls`` entry, the first with the id and name, the others with neither.
    """
    encoded = json.dumps({"raw": raw}) if raw is not None else _encode(arguments)
    call_id = f"call_fake{next_id():05d}"
    cuts = [0, *split, len(encoded)]
    pieces = [encoded[a:b] for a, b in itertools.pairwise(cuts)]
    calls: list[dict[str, Any]] = [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": pieces[0]}}
    ]
    calls.extend(
        {"type": "function", "function": {"name": "", "arguments": piece}} for piece in pieces[1:]
    )
    return completion(
        {"content": text, "tool_calls": calls}, finish_reason=finish_reason, usage=usage
    )


def _encode(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def text_only(
    text: str, *, finish_reason: str = "stop", usage: Mapping[str, Any] | None = None
) -> Reply:
    """An answer without a tool call (a backend that ignores ``tool_choice``)."""
    return completion({"content": text}, finish_reason=finish_reason, usage=usage)


def error(
    status: int,
    *,
    error_type: str | None = None,
    message_text: str | None = None,
    retry_after: float | None = None,
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """An API error in OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``)."""
    all_headers = dict(headers or {})
    if retry_after is not None:
        all_headers["retry-after"] = f"{retry_after:g}"
    body = {
        "error": {
            "message": message_text or f"fake error {status}",
            "type": error_type or _ERROR_TYPES.get(status, "server_error"),
            "param": None,
            "code": _ERROR_CODES.get(status),
        }
    }
    return Reply(status=status, body=body, headers=all_headers)


def requested_tool(request: RecordedRequest) -> str:
    """The function the request forces (``tool_choice.function.name``)."""
    choice = request.tool_choice or {}
    function = choice.get("function") or {}
    return str(function.get("name", "update_working_memory"))


class FakeOpenAI(FakeApi):
    """Chat Completions on loopback; ``base_url`` (ending in ``/v1``) is what ``AsyncOpenAI``
    takes."""

    route = ROUTE
    base_path = "/v1"

    def unscripted(self) -> Reply:
        reply = error(500, message_text="fake server: no reply queued")
        return Reply(status=500, body=reply.body, headers={"x-should-retry": "false"})

    def not_found(self, path: str) -> Reply:
        return error(404, message_text=f"no route {path}")

    def complete(self, body: dict[str, Any], request: RecordedRequest) -> dict[str, Any]:
        if "model" in body:
            return body
        return {**body, "model": request.model or "gpt-fake"}
