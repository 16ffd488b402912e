"""Memory extraction through every provider: the real SDKs against the local fake APIs (the
forced tool, the prompt, the parsed ops, broken output, error classes), the offline extractor
and the scripted replay."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from support.fake_anthropic import FakeAnthropic, tool_use
from support.fake_anthropic import error as anthropic_error
from support.fake_anthropic import text_only as anthropic_text
from support.fake_openai import FakeOpenAI, tool_call
from support.fake_openai import error as openai_error
from wm_core import (
    KEY_FACTS,
    MEMORY_TOOL,
    MemoryOpKind,
    MemoryRecord,
    MemoryType,
    Message,
    PendingItem,
    ReadMethod,
    Role,
    TextPart,
    parse_memory_ops,
)
from wm_server.llm.anthropic_provider import AnthropicProvider
from wm_server.llm.offline import OfflineProvider
from wm_server.llm.openai_provider import OpenAIProvider
from wm_server.llm.port import LlmError, MemoryRequest, Purpose
from wm_server.llm.schemas import strict_schema
from wm_server.llm.scripted import ScriptedProvider, ScriptedResponse, load_script

FAST_RETRY = {"retry-after-ms": "5"}

ANSWER = {
    "ops": [
        {
            "op": "CREATE",
            "type": "preference",
            "text": "User prefers tabs over spaces.",
            "source_message_ids": ["m1"],
        },
        {
            "op": "RETIRE",
            "target_ids": ["mem_7"],
            "reason": "the user moved from Memcached to Redis",
            "source_message_ids": ["m2"],
        },
    ]
}


def request() -> MemoryRequest:
    return MemoryRequest(
        messages=(
            Message("m1", Role.USER, (TextPart("I prefer tabs over spaces."),)),
            Message("m2", Role.USER, (TextPart("We dropped Memcached for Redis."),)),
        ),
        existing=(
            MemoryRecord(
                "mem_7", MemoryType.DECISION, "The team uses Memcached.", event_time="2026-01-02"
            ),
        ),
        pending=(PendingItem(KEY_FACTS, "Decided to shard the ledger by tenant.", "key_facts"),),
        archive_id="archive_003",
    )


def _assert_prompt(user: str, system: str) -> None:
    assert "[mem_7] (decision) The team uses Memcached. (event time 2026-01-02)" in user
    assert "[m1] [user]: I prefer tabs over spaces." in user  # ids to cite as sources
    assert "<not_in_working_memory>" in user and "shard the ledger by tenant" in user
    assert '<archive id="archive_003">' in user
    assert "update_memories" in system and "RETIRE" in system
    assert "seven sections" not in system  # its own instructions, not the working memory's


async def test_anthropic_forces_the_memory_tool_and_its_answer_parses(
    fake: FakeAnthropic, make_provider: Callable[..., AnthropicProvider]
) -> None:
    fake.enqueue(tool_use(ANSWER, name="update_memories", usage={"input_tokens": 900}))
    reply = await make_provider().extract_memories(request())

    [sent] = fake.requests
    assert sent.tool_choice == {
        "type": "tool",
        "name": "update_memories",
        "disable_parallel_tool_use": True,
    }
    assert [t["name"] for t in sent.tools] == ["update_memories"]
    assert sent.tools[0]["input_schema"] == strict_schema(MEMORY_TOOL["input_schema"])
    _assert_prompt(sent.user_text, sent.system_text)
    assert reply.usage.input_tokens == 900 and reply.usage.llm_calls == 1
    parsed = parse_memory_ops(reply.tool_input)
    assert parsed.problems == ()
    assert [(op.kind, op.target_ids) for op in parsed.ops] == [
        (MemoryOpKind.CREATE, ()),
        (MemoryOpKind.RETIRE, ("mem_7",)),
    ]


async def test_anthropic_errors_are_classified_as_for_the_update(
    fake: FakeAnthropic, make_provider: Callable[..., AnthropicProvider]
) -> None:
    fake.set_default(anthropic_error(529, headers=FAST_RETRY))
    with pytest.raises(LlmError) as outage:
        await make_provider(max_retries=1).extract_memories(request())
    assert outage.value.transient and outage.value.retryable
    fake.set_default(anthropic_error(400, message_text="bad schema"))
    with pytest.raises(LlmError) as refused:
        await make_provider(max_retries=1).extract_memories(request())
    assert not refused.value.retryable and "bad schema" in str(refused.value)


async def test_anthropic_text_instead_of_the_tool_gives_no_ops_and_says_why(
    fake: FakeAnthropic, make_provider: Callable[..., AnthropicProvider]
) -> None:
    fake.enqueue(anthropic_text("Nothing worth remembering, I think."))
    reply = await make_provider().extract_memories(request())
    parsed = parse_memory_ops(reply.tool_input)
    assert reply.tool_input is None
    assert parsed.ops == () and not parsed.usable and parsed.problems == ("no arguments",)


async def test_openai_forces_the_strict_function_and_its_answer_parses(
    fake_openai: FakeOpenAI, make_openai_provider: Callable[..., OpenAIProvider]
) -> None:
    fake_openai.enqueue(tool_call(ANSWER, name="update_memories"))
    reply = await make_openai_provider().extract_memories(request())

    [sent] = fake_openai.requests
    assert sent.tool_choice == {"type": "function", "function": {"name": "update_memories"}}
    [tool] = sent.tools
    assert tool["function"]["strict"] is True
    assert tool["function"]["parameters"] == strict_schema(MEMORY_TOOL["input_schema"])
    assert "maxLength" not in json.dumps(tool)  # not in the strict subset; the reader cuts
    messages = sent.body["messages"]
    _assert_prompt(messages[1]["content"], messages[0]["content"])
    parsed = parse_memory_ops(reply.tool_input)
    assert [op.kind for op in parsed.ops] == [MemoryOpKind.CREATE, MemoryOpKind.RETIRE]


async def test_openai_broken_arguments_are_recovered_op_by_op(
    fake_openai: FakeOpenAI, make_openai_provider: Callable[..., OpenAIProvider]
) -> None:
    text = json.dumps(ANSWER)
    cut = text[: text.index('"reason"') + 15]  # cut off inside the second op
    fake_openai.enqueue(tool_call(cut, name="update_memories", finish_reason="length"))
    reply = await make_openai_provider(strict=False).extract_memories(request())
    assert reply.stop_reason == "max_tokens" and isinstance(reply.tool_input, str)
    parsed = parse_memory_ops(reply.tool_input)
    assert parsed.method is ReadMethod.REPAIRED
    assert [op.text for op in parsed.ops] == ["User prefers tabs over spaces."]
    assert any("cut off" in p for p in parsed.problems)


async def test_openai_errors_are_classified_as_for_the_update(
    fake_openai: FakeOpenAI, make_openai_provider: Callable[..., OpenAIProvider]
) -> None:
    fake_openai.set_default(openai_error(503, headers=FAST_RETRY))
    with pytest.raises(LlmError) as outage:
        await make_openai_provider(max_retries=0).extract_memories(request())
    assert outage.value.transient


async def test_offline_extracts_deterministically_in_the_tool_shape() -> None:
    provider = OfflineProvider()
    first = await provider.extract_memories(request())
    second = await provider.extract_memories(request())
    assert first.tool_input == second.tool_input
    parsed = parse_memory_ops(first.tool_input)
    assert parsed.problems == ()
    assert [(op.kind, op.type, op.text) for op in parsed.ops] == [
        (MemoryOpKind.CREATE, MemoryType.PREFERENCE, "The user prefers tabs over spaces."),
        # the team's new choice replaces the one about Memcached it names
        (MemoryOpKind.UPDATE, MemoryType.DECISION, "The team dropped Memcached for Redis."),
        (
            MemoryOpKind.CREATE,
            MemoryType.DECISION,
            "Decided to shard the ledger by tenant.",
        ),
    ]
    assert parsed.ops[0].source_message_ids == ("m1",)
    assert parsed.ops[1].target_ids == ("mem_7",)


async def test_scripted_replays_memory_answers_apart_from_the_working_memory_calls(
    tmp_path: Path,
) -> None:
    script = tmp_path / "script.jsonl"
    script.write_text(
        "\n".join(
            json.dumps(line)
            for line in (
                {"purpose": "memory", "tool_input": ANSWER},
                {"tool_input": {"sections": {}}},
                {"purpose": "memory", "tool_input": '{"ops": [{"op": "CREATE", "type": "ev'},
                {"purpose": "memory", "error": {"message": "overloaded", "retryable": True}},
            )
        )
    )
    responses, _ = load_script(script)
    provider = ScriptedProvider(responses)
    assert parse_memory_ops((await provider.extract_memories(request())).tool_input).ops
    update = await provider.create(None)  # type: ignore[arg-type]  # the WM call, in its order
    assert update.tool_input == {"sections": {}}
    broken = parse_memory_ops((await provider.extract_memories(request())).tool_input)
    assert broken.ops == () and broken.problems  # recovered nothing, and says so
    with pytest.raises(LlmError, match="overloaded"):
        await provider.extract_memories(request())
    unscripted = await provider.extract_memories(request())  # none left: nothing to remember
    assert unscripted.tool_input == {"ops": []} and unscripted.usage.llm_calls == 0
    assert [purpose for purpose, _ in provider.calls] == [
        Purpose.MEMORY,
        Purpose.CREATE,
        Purpose.MEMORY,
        Purpose.MEMORY,
        Purpose.MEMORY,
    ]
    assert ScriptedResponse.from_dict({"purpose": "memory"}).purpose is Purpose.MEMORY
