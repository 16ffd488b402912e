"""A local stand-in for the Anthropic Messages API, for tests that use the real SDK.

The server core (queue, faults, recording) is :mod:`support.fake_http`; this module adds the
Messages API's route and shapes: ``POST /v1/messages``, its content blocks, its usage and its
error bodies.

Usage::

    from support.fake_anthropic import FakeAnthropic, tool_use, error, text_only

    with FakeAnthropic() as fake:
        fake.enqueue(error(429, retry_after=0.01), tool_use({"sections": {...}}))
        client = anthropic.AsyncAnthropic(api_key="test", base_url=fake.base_url)
        ...
        assert fake.requests[-1].body["tool_choice"] == {...}

``retry_after`` seconds are sent as ``retry-after``, which the SDK honours.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    "FakeAnthropic",
    "RecordedRequest",
    "Reply",
    "Responder",
    "connection_reset",
    "error",
    "message",
    "requested_tool",
    "slow",
    "text_only",
    "tool_use",
]

ROUTE = "/v1/messages"

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


def message(
    content: list[dict[str, Any]],
    *,
    stop_reason: str | None,
    usage: Mapping[str, int] | None = None,
    model: str | None = None,
) -> Reply:
    """A 200 answer with the given content blocks (``model`` defaults to the request's)."""
    body: dict[str, Any] = {
        "id": f"msg_fake_{next_id():05d}",
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
            "id": f"toolu_fake_{next_id():05d}",
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


def requested_tool(request: RecordedRequest) -> str:
    """The tool the request forces (``tool_choice.name``)."""
    choice = request.tool_choice or {}
    return str(choice.get("name", "update_working_memory"))


class FakeAnthropic(FakeApi):
    """The Messages API on loopback; ``base_url`` is what ``AsyncAnthropic`` takes."""

    route = ROUTE

    def unscripted(self) -> Reply:
        return Reply(
            status=500,
            body={
                "type": "error",
                "error": {"type": "api_error", "message": "fake server: no reply queued"},
            },
            headers={"x-should-retry": "false"},
        )

    def not_found(self, path: str) -> Reply:
        return error(404, message_text=f"no route {path}")

    def complete(self, body: dict[str, Any], request: RecordedRequest) -> dict[str, Any]:
        if "model" in body:
            return body
        return {**body, "model": request.model or "claude-fake"}
