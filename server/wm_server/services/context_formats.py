"""The assembled context rendered as the JSON a model API's request takes.

AssembleContext's messages already alternate user and assistant, start with the user, and
answer every tool call in the next user message with its results first (wm_core's assembly
guarantees it). Each API pairs calls and results its own way, so each rendering is one
function here: Anthropic Messages keeps the blocks (wm_core.anthropic_json, the one copy of
that shape); OpenAI Chat Completions moves the calls into ``tool_calls`` and each result into
its own ``tool`` message; the OpenAI Responses API flattens everything into ``input`` items
(``message``, ``function_call``, ``function_call_output``) linked by ``call_id``.

The OpenAI renderings open with a ``system`` message holding the system prompt and the
system-prompt addition, because both APIs take it among their messages; Anthropic's goes in
the request's ``system`` parameter instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import Any

from wm_core import Message, Role, TextPart, ToolResultPart, ToolUsePart, anthropic_json
from wm_server.errors import invalid

# Prefixed to a failed tool's output in the OpenAI shapes, which have no error flag.
TOOL_ERROR_PREFIX = "[tool error] "


class ContextFormat(IntEnum):
    """The values of wm.v1.ContextFormat (the proto enum is the contract)."""

    UNSPECIFIED = 0
    ANTHROPIC_MESSAGES = 1
    OPENAI_CHAT_COMPLETIONS = 2
    OPENAI_RESPONSES = 3


def _text(message: Message) -> str:
    return "\n\n".join(p.text for p in message.parts if isinstance(p, TextPart))


def _system(system_prompt: str, addition: str) -> list[dict[str, Any]]:
    text = "\n\n".join(t for t in (system_prompt, addition) if t)
    return [{"role": "system", "content": text}] if text else []


def _result_text(part: ToolResultPart) -> str:
    return f"{TOOL_ERROR_PREFIX}{part.content}" if part.is_error else part.content


def chat_completions(
    messages: Sequence[Message], system_prompt: str = "", addition: str = ""
) -> list[dict[str, Any]]:
    """Chat Completions ``messages``: an assistant message's calls in ``tool_calls``, then
    one ``tool`` message per call id, then the user's own text (if any)."""
    out = _system(system_prompt, addition)
    for message in messages:
        text = _text(message)
        if message.role is Role.ASSISTANT:
            calls = [
                {
                    "id": p.id,
                    "type": "function",
                    "function": {"name": p.name, "arguments": p.input_json or "{}"},
                }
                for p in message.parts
                if isinstance(p, ToolUsePart)
            ]
            item: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                item["tool_calls"] = calls
            if text or calls:
                out.append(item)
            continue
        for part in message.parts:
            if isinstance(part, ToolResultPart):
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": part.tool_use_id,
                        "content": _result_text(part),
                    }
                )
        if text:
            out.append({"role": "user", "content": text})
    return out


def _response_item(part: ToolUsePart | ToolResultPart) -> dict[str, Any]:
    if isinstance(part, ToolUsePart):
        return {
            "type": "function_call",
            "call_id": part.id,
            "name": part.name,
            "arguments": part.input_json or "{}",
        }
    return {
        "type": "function_call_output",
        "call_id": part.tool_use_id,
        "output": _result_text(part),
    }


def responses_input(
    messages: Sequence[Message], system_prompt: str = "", addition: str = ""
) -> list[dict[str, Any]]:
    """Responses API ``input`` items, in the order of the parts: each run of text as one
    ``message`` item, calls as ``function_call``, results as ``function_call_output`` (same
    ``call_id``)."""
    out = [{"type": "message", **item} for item in _system(system_prompt, addition)]
    for message in messages:
        role = "assistant" if message.role is Role.ASSISTANT else "user"
        texts: list[str] = []
        for part in (*message.parts, None):  # None: the end, which closes the last text run
            if isinstance(part, TextPart):
                texts.append(part.text)
                continue
            if texts:
                out.append({"type": "message", "role": role, "content": "\n\n".join(texts)})
                texts = []
            if part is not None:
                out.append(_response_item(part))
    return out


_OPENAI: dict[ContextFormat, Callable[[Sequence[Message], str, str], list[dict[str, Any]]]] = {
    ContextFormat.OPENAI_CHAT_COMPLETIONS: chat_completions,
    ContextFormat.OPENAI_RESPONSES: responses_input,
}


def context_format(value: int) -> ContextFormat:
    """The request's format, or INVALID_ARGUMENT naming ``format`` for a value this server
    does not know (a newer client's)."""
    try:
        return ContextFormat(value)
    except ValueError:
        names = ", ".join(f.name for f in ContextFormat)
        raise invalid("format", f"must be one of {names}", "UNKNOWN_FORMAT") from None


def render(
    fmt: ContextFormat, messages: Sequence[Message], system_prompt: str = "", addition: str = ""
) -> str:
    """The context as JSON for ``fmt``; "" when unspecified."""
    if fmt is ContextFormat.ANTHROPIC_MESSAGES:
        return anthropic_json(messages)
    openai = _OPENAI.get(fmt)
    if openai is None:
        return ""
    return json.dumps(openai(messages, system_prompt, addition), ensure_ascii=False)
