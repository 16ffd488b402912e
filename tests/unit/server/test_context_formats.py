"""The assembled context rendered for each model API: pinned outputs (golden), checked
against each SDK's own request types, and the pairing of tool calls and results each API
requires."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from anthropic.types import (
    AssistantMessageParam,
    TextBlockParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
    UserMessageParam,
)
from openai.types.chat import (
    ChatCompletionAssistantMessageParam,
    ChatCompletionMessageParam,
    ChatCompletionSystemMessageParam,
    ChatCompletionToolMessageParam,
    ChatCompletionUserMessageParam,
)
from openai.types.responses import (
    EasyInputMessageParam,
    ResponseFunctionToolCallParam,
    ResponseInputParam,
)
from openai.types.responses.response_input_param import FunctionCallOutput
from pydantic import TypeAdapter

from wm_core import Message, Role, TextPart, ToolResultPart, ToolUsePart
from wm_server.errors import InvalidArgument
from wm_server.services.context_formats import ContextFormat, context_format, render

# A context as AssembleContext returns it: roles alternate from the user; the user message
# after a tool step opens with its results; one result is an error; one step calls two tools.
CONTEXT = [
    Message("m1", Role.USER, (TextPart("Fix the failing test."),)),
    Message(
        "m2",
        Role.ASSISTANT,
        (
            TextPart("Reading the test and running it."),
            ToolUsePart("call_a", "read_file", '{"path": "tests/test_x.py"}'),
            ToolUsePart("call_b", "run", '{"cmd": "pytest -x"}'),
        ),
    ),
    Message(
        "m3",
        Role.USER,
        (
            ToolResultPart("call_a", "def test_x(): assert f() == 2"),
            ToolResultPart("call_b", "exit status 1", is_error=True),
            TextPart("Use the fixture, please."),
        ),
    ),
    Message("m4", Role.ASSISTANT, (ToolUsePart("call_c", "edit", "{}"),)),
    Message("m5", Role.USER, (ToolResultPart("call_c", "done"),)),
    Message("m6", Role.ASSISTANT, (TextPart("Fixed: f() returns 2 again."),)),
]

CHAT = [
    {"role": "system", "content": "You are careful.\n\nRead the summary first."},
    {"role": "user", "content": "Fix the failing test."},
    {
        "role": "assistant",
        "content": "Reading the test and running it.",
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "tests/test_x.py"}'},
            },
            {
                "id": "call_b",
                "type": "function",
                "function": {"name": "run", "arguments": '{"cmd": "pytest -x"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_a", "content": "def test_x(): assert f() == 2"},
    {"role": "tool", "tool_call_id": "call_b", "content": "[tool error] exit status 1"},
    {"role": "user", "content": "Use the fixture, please."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_c", "type": "function", "function": {"name": "edit", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "call_c", "content": "done"},
    {"role": "assistant", "content": "Fixed: f() returns 2 again."},
]

RESPONSES = [
    {"type": "message", "role": "system", "content": "You are careful.\n\nRead the summary first."},
    {"type": "message", "role": "user", "content": "Fix the failing test."},
    {"type": "message", "role": "assistant", "content": "Reading the test and running it."},
    {
        "type": "function_call",
        "call_id": "call_a",
        "name": "read_file",
        "arguments": '{"path": "tests/test_x.py"}',
    },
    {
        "type": "function_call",
        "call_id": "call_b",
        "name": "run",
        "arguments": '{"cmd": "pytest -x"}',
    },
    {
        "type": "function_call_output",
        "call_id": "call_a",
        "output": "def test_x(): assert f() == 2",
    },
    {"type": "function_call_output", "call_id": "call_b", "output": "[tool error] exit status 1"},
    {"type": "message", "role": "user", "content": "Use the fixture, please."},
    {"type": "function_call", "call_id": "call_c", "name": "edit", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_c", "output": "done"},
    {"type": "message", "role": "assistant", "content": "Fixed: f() returns 2 again."},
]

ANTHROPIC = [
    {"role": "user", "content": [{"type": "text", "text": "Fix the failing test."}]},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Reading the test and running it."},
            {
                "type": "tool_use",
                "id": "call_a",
                "name": "read_file",
                "input": {"path": "tests/test_x.py"},
            },
            {"type": "tool_use", "id": "call_b", "name": "run", "input": {"cmd": "pytest -x"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "call_a",
                "content": "def test_x(): assert f() == 2",
                "is_error": False,
            },
            {
                "type": "tool_result",
                "tool_use_id": "call_b",
                "content": "exit status 1",
                "is_error": True,
            },
            {"type": "text", "text": "Use the fixture, please."},
        ],
    },
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "call_c", "name": "edit", "input": {}}],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "call_c", "content": "done", "is_error": False}
        ],
    },
    {"role": "assistant", "content": [{"type": "text", "text": "Fixed: f() returns 2 again."}]},
]


def _materialize(value: Any) -> Any:
    """Pydantic validates an SDK type's Iterable fields lazily: walk them so every nested
    item is validated too."""
    if isinstance(value, dict):
        return {k: _materialize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or type(value).__name__ == "ValidatorIterator":
        return [_materialize(v) for v in value]
    return value


def _conforms(item: dict[str, Any], typed: Any) -> None:
    """``item`` is a valid ``typed`` (an SDK TypedDict): its required keys present, no key it
    does not define (pydantic would ignore one), every value of the declared type."""
    keys = typed.__required_keys__ | typed.__optional_keys__
    assert typed.__required_keys__ <= set(item), (typed.__name__, item)
    assert set(item) <= keys, (typed.__name__, set(item) - keys)
    _materialize(TypeAdapter(typed).validate_python(item))


def _render(fmt: ContextFormat) -> Any:
    return json.loads(render(fmt, CONTEXT, "You are careful.", "Read the summary first."))


def test_chat_completions_golden_and_sdk_types() -> None:
    out = _render(ContextFormat.OPENAI_CHAT_COMPLETIONS)
    assert out == CHAT
    _materialize(TypeAdapter(list[ChatCompletionMessageParam]).validate_python(out))
    by_role = {
        "system": ChatCompletionSystemMessageParam,
        "user": ChatCompletionUserMessageParam,
        "assistant": ChatCompletionAssistantMessageParam,
        "tool": ChatCompletionToolMessageParam,
    }
    for item in out:
        _conforms(item, by_role[item["role"]])


def test_chat_completions_tool_messages_follow_their_call() -> None:
    """Every call id of an assistant message is answered by one tool message right after it,
    before any other message (the API refuses anything else)."""
    out = _render(ContextFormat.OPENAI_CHAT_COMPLETIONS)
    for index, item in enumerate(out):
        if item["role"] != "assistant" or "tool_calls" not in item:
            continue
        ids = [c["id"] for c in item["tool_calls"]]
        following = out[index + 1 : index + 1 + len(ids)]
        assert [m["role"] for m in following] == ["tool"] * len(ids)
        assert [m["tool_call_id"] for m in following] == ids
    assert sum(item["role"] == "tool" for item in out) == 3


def test_responses_golden_and_sdk_types() -> None:
    out = _render(ContextFormat.OPENAI_RESPONSES)
    assert out == RESPONSES
    _materialize(TypeAdapter(ResponseInputParam).validate_python(out))
    by_type = {
        "message": EasyInputMessageParam,
        "function_call": ResponseFunctionToolCallParam,
        "function_call_output": FunctionCallOutput,
    }
    for item in out:
        _conforms(item, by_type[item["type"]])
    calls = [i["call_id"] for i in out if i["type"] == "function_call"]
    outputs = [i["call_id"] for i in out if i["type"] == "function_call_output"]
    assert calls == outputs  # each call answered once, in order
    for call_id in calls:
        first = next(n for n, i in enumerate(out) if i.get("call_id") == call_id)
        assert out[first]["type"] == "function_call"  # the call before its output


def test_anthropic_golden_and_sdk_types() -> None:
    out = _render(ContextFormat.ANTHROPIC_MESSAGES)
    assert out == ANTHROPIC
    blocks = {"text": TextBlockParam, "tool_use": ToolUseBlockParam}
    blocks["tool_result"] = ToolResultBlockParam
    for message in out:
        # Walking MessageParam's lazily validated, recursive content crashes pydantic-core
        # (a definitions panic): the message is checked with its content as text, and each
        # block against its own type below.
        typed = UserMessageParam if message["role"] == "user" else AssistantMessageParam
        _conforms({**message, "content": ""}, typed)
        for block in message["content"]:
            _conforms(block, blocks[block["type"]])
    for before, after in itertools.pairwise(out):
        uses = [b["id"] for b in before["content"] if b["type"] == "tool_use"]
        if uses:  # the next user message opens with exactly those results
            head = after["content"][: len(uses)]
            assert after["role"] == "user"
            assert [b.get("tool_use_id") for b in head] == uses


def _items(out: list[dict[str, Any]]) -> Iterator[str]:
    for item in out:
        yield item.get("role") or item["type"]


def test_no_system_text_no_system_message() -> None:
    """Without a system prompt or addition the OpenAI renderings start with the user."""
    chat = json.loads(render(ContextFormat.OPENAI_CHAT_COMPLETIONS, CONTEXT[:1]))
    responses = json.loads(render(ContextFormat.OPENAI_RESPONSES, CONTEXT[:1]))
    assert list(_items(chat)) == ["user"]
    assert list(_items(responses)) == ["user"]


def test_unspecified_renders_nothing() -> None:
    assert render(ContextFormat.UNSPECIFIED, CONTEXT, "x", "y") == ""


def test_an_unknown_format_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidArgument) as caught:
        context_format(99)
    assert caught.value.violations[0].field == "format"
    assert "OPENAI_RESPONSES" in caught.value.violations[0].description
