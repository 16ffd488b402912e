"""The openai provider through the real SDK, against a local Chat Completions server.

Besides OpenAI's own behaviour, the cases cover what compatible backends do differently
(ignoring ``tool_choice``, arguments as text, wrapped as ``{"raw": ...}`` or split over
several entries) and check that the recovery chain turns each into a usable document.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from llm_samples import OPENAI_TEST_MODEL, PREVIOUS_WM, short_messages, valid_update_input

from support.fake_openai import (
    FakeOpenAI,
    connection_reset,
    error,
    slow,
    text_only,
    tool_call,
)
from support.timing import TIMER_TICK
from wm_core import CREATE_TOOL, SECTIONS, UPDATE_TOOL, parse_document, validate_update_arguments
from wm_server.llm.chain import generate_working_memory
from wm_server.llm.openai_provider import OpenAIProvider
from wm_server.llm.port import (
    CreateRequest,
    LlmError,
    ModelReply,
    Purpose,
    RepairRequest,
    UpdateRequest,
    Usage,
)
from wm_server.llm.schemas import strict_schema

Factory = Callable[..., OpenAIProvider]

FAST_RETRY = {"retry-after-ms": "5"}  # keeps the SDK's backoff short in these tests
NEW_STATE = "Duplicates are detected with an occurrence counter; --dry-run is next."


def update_request() -> UpdateRequest:
    return UpdateRequest(
        previous_document=PREVIOUS_WM,
        messages=short_messages(),
        reminders="<section_size_warnings>\nWARNING: test\n</section_size_warnings>",
    )


def _objects(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        if node.get("type") == "object":
            yield node
        for value in node.values():
            yield from _objects(value)
    elif isinstance(node, list):
        for item in node:
            yield from _objects(item)


# -- the request ---------------------------------------------------------------------------------


async def test_update_request_forces_the_strict_update_function(
    fake_openai: FakeOpenAI, make_openai_provider: Factory
):
    fake_openai.enqueue(tool_call(valid_update_input()))
    provider = make_openai_provider(max_tokens=3000)

    reply = await provider.update(update_request())

    assert reply.tool_input == valid_update_input()
    assert reply.stop_reason == "tool_use"
    assert reply.model == OPENAI_TEST_MODEL
    [request] = fake_openai.requests
    assert request.path == "/v1/chat/completions"
    assert request.model == OPENAI_TEST_MODEL
    assert request.body["max_completion_tokens"] == 3000
    assert request.headers["authorization"] == "Bearer sk-test-key"
    [tool] = request.tools
    assert tool["type"] == "function"
    function = tool["function"]
    assert function["name"] == "update_working_memory"
    assert function["strict"] is True
    assert function["parameters"] == strict_schema(UPDATE_TOOL["input_schema"])
    assert request.tool_choice == {
        "type": "function",
        "function": {"name": "update_working_memory"},
    }
    assert request.body["parallel_tool_calls"] is False
    # The static instructions come first (the cached prefix), the dynamic part is the user turn.
    roles = [m["role"] for m in request.body["messages"]]
    assert roles == ["system", "user"]
    assert "KEEP over APPEND and APPEND over UPDATE" in request.system_text
    user = request.user_text
    assert "<current_working_memory>" in user and "<section_size_warnings>" in user
    assert "[tool:bash (error)] sqlite3.IntegrityError" in user


async def test_create_request_forces_the_creation_function(
    fake_openai: FakeOpenAI, make_openai_provider: Factory
):
    fake_openai.enqueue(tool_call({"Session Title": "x"}, name="create_working_memory"))

    reply = await make_openai_provider().create(
        CreateRequest(messages=short_messages(), context_document="# Old summary\nthree turns")
    )

    assert reply.tool_input == {"Session Title": "x"}
    [request] = fake_openai.requests
    function = request.tools[0]["function"]
    assert function["name"] == "create_working_memory"
    assert function["parameters"] == strict_schema(CREATE_TOOL["input_schema"])
    assert request.tool_choice == {
        "type": "function",
        "function": {"name": "create_working_memory"},
    }
    assert "<previous_working_memory>\n# Old summary\nthree turns" in request.user_text


async def test_repair_request_shows_the_errors_and_the_rejected_answer(
    fake_openai: FakeOpenAI, make_openai_provider: Factory
):
    fake_openai.enqueue(tool_call(valid_update_input()))
    rejected = ModelReply(tool_input='{"sections": {"Bogus', stop_reason="tool_use", usage=Usage())

    await make_openai_provider().repair(
        RepairRequest(update_request(), rejected, ("arguments are not valid JSON",))
    )

    [request] = fake_openai.requests
    assert "arguments are not valid JSON" in request.user_text
    assert '{"sections": {"Bogus' in request.user_text
    assert "KEEP over APPEND and APPEND over UPDATE" in request.system_text


async def test_non_strict_setting_sends_the_plain_schema(
    fake_openai: FakeOpenAI, make_openai_provider: Factory
):
    fake_openai.enqueue(tool_call(valid_update_input()))

    await make_openai_provider(strict=False).update(update_request())

    function = fake_openai.requests[0].tools[0]["function"]
    assert "strict" not in function
    assert function["parameters"] == UPDATE_TOOL["input_schema"]


def test_strict_schema_is_in_the_strict_dialect_and_accepts_the_same_arguments():
    for tool in (UPDATE_TOOL, CREATE_TOOL):
        schema = strict_schema(tool["input_schema"])
        assert "oneOf" not in json.dumps(schema)
        for node in _objects(schema):
            assert node["additionalProperties"] is False
            assert sorted(node["required"]) == sorted(node["properties"])
    schema = strict_schema(UPDATE_TOOL["input_schema"])
    assert schema != UPDATE_TOOL["input_schema"]  # the input is converted, not mutated
    assert "oneOf" in json.dumps(UPDATE_TOOL["input_schema"])
    validator = Draft202012Validator(schema)
    assert not list(validator.iter_errors(valid_update_input()))
    broken = valid_update_input()
    broken["sections"]["Current State"] = {"op": "UPDATE"}  # no content
    assert list(validator.iter_errors(broken))
    assert validate_update_arguments(broken)  # the contract agrees
    broken["sections"]["Current State"] = {"op": "KEEP", "content": "x"}  # extra property
    assert list(validator.iter_errors(broken))


def test_an_optional_property_becomes_required_and_nullable():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
        "required": ["a"],
    }

    converted = strict_schema(schema)

    assert converted["required"] == ["a", "b"]
    assert converted["additionalProperties"] is False
    assert converted["properties"]["b"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert schema["required"] == ["a"]


# -- the answer ----------------------------------------------------------------------------------


async def test_usage_records_prompt_completion_and_cached_tokens(
    fake_openai: FakeOpenAI, make_openai_provider: Factory
):
    usage = {
        "prompt_tokens": 5000,
        "completion_tokens": 210,
        "total_tokens": 5210,
        "prompt_tokens_details": {"cached_tokens": 4000},
    }
    fake_openai.enqueue(tool_call(valid_update_input(), usage=usage))

    reply = await make_openai_provider().update(update_request())

    # input_tokens are the uncached part, as the Anthropic provider records them.
    assert reply.usage == Usage(1000, 210, 4000, 0, llm_calls=1)


async def test_usage_without_details_or_without_usage(
    fake_openai: FakeOpenAI, make_openai_provider: Factory
):
    fake_openai.enqueue(
        tool_call(valid_update_input(), usage={"prompt_tokens": 70, "completion_tokens": 9}),
        tool_call(valid_update_input(), usage={}),
    )
    provider = make_openai_provider()

    first = await provider.update(update_request())
    second = await provider.update(update_request())

    assert first.usage == Usage(70, 9, 0, 0, llm_calls=1)
    assert second.usage.llm_calls == 1 and second.usage.input_tokens == 0


async def test_length_finish_is_reported_as_max_tokens(
    fake_openai: FakeOpenAI, make_openai_provider: Factory
):
    partial = '{"sections": {"Current State": {"op": "UPDATE", "content": "Half a sen'
    fake_openai.enqueue(tool_call(partial, finish_reason="length"))

    reply = await make_openai_provider().update(update_request())

    assert reply.stop_reason == "max_tokens"
    assert reply.tool_input == partial  # not JSON: handed over raw, for the salvage


async def test_arguments_split_over_several_entries_are_joined(
    fake_openai: FakeOpenAI, make_openai_provider: Factory
):
    encoded = json.dumps(valid_update_input())
    fake_openai.enqueue(tool_call(encoded, split=(1, 17, 18, len(encoded) - 3)))

    reply = await make_openai_provider().update(update_request())

    assert len(fake_openai.requests) == 1
    assert reply.tool_input == valid_update_input()


async def test_text_content_beside_the_call_is_kept(
    fake_openai: FakeOpenAI, make_openai_provider: Factory
):
    fake_openai.enqueue(tool_call(valid_update_input(), text="Here are the ops."))

    reply = await make_openai_provider().update(update_request())

    assert reply.tool_input == valid_update_input()
    assert reply.text == "Here are the ops."


# -- what compatible backends do, through the recovery chain ---------------------------------------


async def test_backend_ignoring_tool_choice_is_salvaged_from_its_text(
    fake_openai: FakeOpenAI, make_openai_provider: Factory
):
    arguments = json.dumps(valid_update_input(), indent=1)
    fake_openai.enqueue(text_only(f"Sure, here you go:\n```json\n{arguments}\n```"))

    generation = await generate_working_memory(
        make_openai_provider(), previous_document=PREVIOUS_WM, messages=short_messages()
    )

    assert generation.mode == "update"
    assert generation.calls == (Purpose.UPDATE,)  # usable as salvaged: no repair needed
    assert parse_document(generation.document)["Current State"] == NEW_STATE
    assert any("plain text" in problem for problem in generation.problems)


async def test_raw_wrapped_arguments_are_unwrapped(
    fake_openai: FakeOpenAI, make_openai_provider: Factory
):
    fake_openai.enqueue(tool_call(raw=json.dumps(valid_update_input())))

    generation = await generate_working_memory(
        make_openai_provider(), previous_document=PREVIOUS_WM, messages=short_messages()
    )

    assert parse_document(generation.document)["Current State"] == NEW_STATE
    assert "ledgerline/db.py — schema, untouched" in generation.document
    assert any("{'raw': ...}" in problem for problem in generation.problems)


async def test_prose_then_repair_then_valid_call(
    fake_openai: FakeOpenAI, make_openai_provider: Factory
):
    fake_openai.enqueue(text_only("The memory looks fine to me."), tool_call(valid_update_input()))

    generation = await generate_working_memory(
        make_openai_provider(), previous_document=PREVIOUS_WM, messages=short_messages()
    )

    assert generation.calls == (Purpose.UPDATE, Purpose.REPAIR)
    assert parse_document(generation.document)["Current State"] == NEW_STATE
    repair = fake_openai.requests[1]
    assert "The memory looks fine to me." in repair.user_text
    assert generation.usage.llm_calls == 2


async def test_creation_written_as_plain_json_text_is_read(
    fake_openai: FakeOpenAI, make_openai_provider: Factory
):
    bodies = {name: f"body of {name}" for name in SECTIONS}
    fake_openai.enqueue(text_only(json.dumps(bodies)))

    generation = await generate_working_memory(
        make_openai_provider(), previous_document=None, messages=short_messages()
    )

    assert generation.mode == "create"
    assert parse_document(generation.document)["Key Facts & Decisions"] == (
        "body of Key Facts & Decisions"
    )


# -- errors --------------------------------------------------------------------------------------


async def test_429_retry_after_is_honoured_then_succeeds(
    fake_openai: FakeOpenAI, make_openai_provider: Factory
):
    fake_openai.enqueue(error(429, retry_after=0.3), tool_call(valid_update_input()))

    started = time.monotonic()
    reply = await make_openai_provider(max_retries=2).update(update_request())

    assert reply.tool_input == valid_update_input()
    assert len(fake_openai.requests) == 2
    assert time.monotonic() - started >= 0.3 - TIMER_TICK  # the SDK waited as told


@pytest.mark.parametrize(
    ("status", "kind"), [(429, "requests"), (500, "server_error"), (529, "server_error")]
)
async def test_transient_statuses_are_retryable_after_the_sdk_retries(
    fake_openai: FakeOpenAI, make_openai_provider: Factory, status: int, kind: str
):
    fake_openai.set_default(error(status, headers=FAST_RETRY))

    with pytest.raises(LlmError) as caught:
        await make_openai_provider(max_retries=2).update(update_request())

    assert caught.value.retryable is True
    assert f"HTTP {status} {kind}" in str(caught.value)
    assert len(fake_openai.requests) == 3  # one attempt and the SDK's two retries


@pytest.mark.parametrize("status", [400, 401, 403, 404])
async def test_client_errors_are_not_retryable(
    fake_openai: FakeOpenAI, make_openai_provider: Factory, status: int
):
    fake_openai.set_default(error(status, message_text="nope"))

    with pytest.raises(LlmError) as caught:
        await make_openai_provider(max_retries=2).update(update_request())

    assert caught.value.retryable is False
    assert f"HTTP {status}" in str(caught.value) and "nope" in str(caught.value)
    assert len(fake_openai.requests) == 1  # the SDK does not retry these either


async def test_a_rejected_request_points_at_the_strict_setting(
    fake_openai: FakeOpenAI, make_openai_provider: Factory
):
    fake_openai.set_default(error(400, message_text="Unknown parameter: 'strict'"))

    with pytest.raises(LlmError, match="WM_OPENAI_STRICT=false"):
        await make_openai_provider().update(update_request())
    with pytest.raises(LlmError) as caught:
        await make_openai_provider(strict=False).update(update_request())
    assert "WM_OPENAI_STRICT" not in str(caught.value)


async def test_timeout_is_retryable(fake_openai: FakeOpenAI, make_openai_provider: Factory):
    fake_openai.set_default(slow(tool_call(valid_update_input()), 30.0))

    started = time.monotonic()
    with pytest.raises(LlmError) as caught:
        await make_openai_provider(timeout=0.3, max_retries=1).update(update_request())

    assert caught.value.retryable is True
    assert "no answer within 0.3s" in str(caught.value)
    assert len(fake_openai.requests) == 2
    # gave up on its own timeout (two of 0.3 s and a backoff), long before the server's 30 s;
    # the bound leaves room for a loaded machine
    assert time.monotonic() - started < 10


async def test_connection_reset_is_retryable_and_retried(
    fake_openai: FakeOpenAI, make_openai_provider: Factory
):
    fake_openai.enqueue(connection_reset(), tool_call(valid_update_input()))
    reply = await make_openai_provider(max_retries=1).update(update_request())
    assert reply.tool_input == valid_update_input()

    fake_openai.set_default(connection_reset())
    with pytest.raises(LlmError) as caught:
        await make_openai_provider(max_retries=0).update(update_request())
    assert caught.value.retryable is True


async def test_openai_base_url_environment_is_honoured(
    fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    fake_openai.enqueue(tool_call(valid_update_input()))
    provider = OpenAIProvider(
        api_key="k", model="llama3.1:8b", max_tokens=1024, timeout=2.0, max_retries=0
    )
    try:
        reply = await provider.update(update_request())
    finally:
        await provider.aclose()

    assert reply.tool_input == valid_update_input()
    assert fake_openai.requests[0].model == "llama3.1:8b"


def test_context_window_from_the_table_or_given():
    def window(model: str, given: int | None = None) -> int | None:
        provider = OpenAIProvider(
            api_key="k", model=model, max_tokens=1024, timeout=1.0, max_retries=0,
            base_url="http://127.0.0.1:9/v1", context_window=given,
        )  # fmt: skip
        return provider.context_window

    assert window("gpt-4o-mini") == 128_000
    assert window("gpt-4o-2024-08-06") == 128_000  # a dated snapshot of its family
    assert window("gpt-4.1-mini") == 1_047_576
    assert window("llama3.1:8b") is None
    assert window("llama3.1:8b", 32_768) == 32_768
