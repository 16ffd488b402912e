"""The Anthropic provider through the real SDK, against a local Messages API server."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from llm_samples import PREVIOUS_WM, TEST_MODEL, short_messages, valid_update_input

from support.fake_anthropic import (
    FakeAnthropic,
    connection_reset,
    error,
    slow,
    text_only,
    tool_use,
)
from support.timing import TIMER_TICK
from wm_core import CREATE_TOOL, UPDATE_TOOL
from wm_server.llm.anthropic_provider import SDK_SUPPORTS_STRICT, AnthropicProvider
from wm_server.llm.port import (
    CreateRequest,
    LlmError,
    ModelReply,
    PromptTooLong,
    RepairRequest,
    UpdateRequest,
    Usage,
)
from wm_server.llm.schemas import strict_schema

Factory = Callable[..., AnthropicProvider]

FAST_RETRY = {"retry-after-ms": "5"}  # keeps the SDK's backoff short in these tests


def update_request() -> UpdateRequest:
    return UpdateRequest(
        previous_document=PREVIOUS_WM,
        messages=short_messages(),
        reminders="<section_size_warnings>\nWARNING: test\n</section_size_warnings>",
    )


async def test_update_request_forces_the_update_tool(fake: FakeAnthropic, make_provider: Factory):
    fake.enqueue(tool_use(valid_update_input()))
    provider = make_provider(max_tokens=3000)

    reply = await provider.update(update_request())

    assert reply.tool_input == valid_update_input()
    assert reply.stop_reason == "tool_use"
    [request] = fake.requests
    assert request.path == "/v1/messages"
    assert request.model == TEST_MODEL
    assert request.max_tokens == 3000
    assert request.headers["authorization"] == "Bearer test-key"
    assert [t["name"] for t in request.tools] == ["update_working_memory"]
    # The installed SDK has strict tools: the schema goes in the structured-output dialect.
    assert SDK_SUPPORTS_STRICT
    assert request.tools[0]["strict"] is True
    assert request.tools[0]["input_schema"] == strict_schema(UPDATE_TOOL["input_schema"])
    assert request.tool_choice == {
        "type": "tool",
        "name": "update_working_memory",
        "disable_parallel_tool_use": True,
    }
    assert "temperature" not in request.body  # rejected by the current API version
    # The static instructions are the system prompt, marked for caching.
    [system] = request.system_blocks
    assert system["cache_control"] == {"type": "ephemeral"}
    assert "KEEP over APPEND and APPEND over UPDATE" in system["text"]
    # The dynamic part is the user turn: document, reminders, formatted messages.
    user = request.user_text
    assert "<current_working_memory>" in user and "## Files & Context" in user
    assert "<section_size_warnings>" in user
    assert "[user]: Please import samples/dkb_2025-01.csv again." in user
    assert '[tool:bash (call)] {"command": "ledgerline import x.csv"}' in user
    assert "[tool:bash (error)] sqlite3.IntegrityError" in user


async def test_create_request_forces_the_creation_tool(fake: FakeAnthropic, make_provider: Factory):
    fake.enqueue(tool_use({"Session Title": "x"}, name="create_working_memory"))
    provider = make_provider()

    reply = await provider.create(
        CreateRequest(messages=short_messages(), context_document="# Old summary\nthree turns")
    )

    assert reply.tool_input == {"Session Title": "x"}
    [request] = fake.requests
    assert [t["name"] for t in request.tools] == ["create_working_memory"]
    assert request.tools[0]["input_schema"] == strict_schema(CREATE_TOOL["input_schema"])
    assert request.tool_choice is not None
    assert request.tool_choice["name"] == "create_working_memory"
    assert "create_working_memory" in request.system_text
    assert "<previous_working_memory>\n# Old summary\nthree turns" in request.user_text


async def test_repair_request_shows_the_errors_and_the_rejected_answer(
    fake: FakeAnthropic, make_provider: Factory
):
    fake.enqueue(tool_use(valid_update_input()))
    provider = make_provider()
    rejected = ModelReply(
        tool_input={"sections": {"Bogus": 1}}, stop_reason="max_tokens", usage=Usage()
    )

    await provider.repair(
        RepairRequest(
            update_request(), rejected, ("sections: 'Session Title' is a required property",)
        )
    )

    [request] = fake.requests
    assert request.tool_choice is not None
    assert request.tool_choice["name"] == "update_working_memory"
    assert "'Session Title' is a required property" in request.user_text
    assert '{"sections": {"Bogus": 1}}' in request.user_text
    assert "cut off at the output limit" in request.user_text
    # Repair shares the update system prompt, so the cached prefix is reused.
    assert "KEEP over APPEND and APPEND over UPDATE" in request.system_text


async def test_strict_tools_can_be_turned_off(fake: FakeAnthropic, make_provider: Factory):
    fake.enqueue(tool_use(valid_update_input()))
    provider = make_provider(strict=False)

    await provider.update(update_request())

    assert provider.strict is False
    [tool] = fake.requests[0].tools
    assert "strict" not in tool
    assert tool["input_schema"] == UPDATE_TOOL["input_schema"]


def test_context_window_of_claude_models(make_provider: Factory):
    assert make_provider(model="claude-haiku-4-5").context_window == 200_000
    assert make_provider(model="gpt-4o").context_window is None


async def test_usage_includes_cache_tokens(fake: FakeAnthropic, make_provider: Factory):
    usage = {
        "input_tokens": 900,
        "output_tokens": 210,
        "cache_creation_input_tokens": 1500,
        "cache_read_input_tokens": 4000,
    }
    fake.enqueue(tool_use(valid_update_input(), usage=usage))

    reply = await make_provider().update(update_request())

    assert reply.usage == Usage(900, 210, 4000, 1500, llm_calls=1)
    assert reply.model == TEST_MODEL


async def test_text_only_answer_is_returned_without_tool_input(
    fake: FakeAnthropic, make_provider: Factory
):
    fake.enqueue(text_only("I think the memory is fine as is."))

    reply = await make_provider().update(update_request())

    assert reply.tool_input is None
    assert reply.text == "I think the memory is fine as is."
    assert reply.stop_reason == "end_turn"


async def test_max_tokens_stop_is_reported(fake: FakeAnthropic, make_provider: Factory):
    partial = {"sections": {"Current State": {"op": "UPDATE", "content": "Half a sen"}}}
    fake.enqueue(tool_use(partial, stop_reason="max_tokens"))

    reply = await make_provider().update(update_request())

    assert reply.stop_reason == "max_tokens"
    assert reply.tool_input == partial


async def test_429_retry_after_is_honoured_then_succeeds(
    fake: FakeAnthropic, make_provider: Factory
):
    fake.enqueue(error(429, retry_after=0.3), tool_use(valid_update_input()))
    provider = make_provider(max_retries=2)

    started = time.monotonic()
    reply = await provider.update(update_request())
    elapsed = time.monotonic() - started

    assert reply.tool_input == valid_update_input()
    assert len(fake.requests) == 2
    assert elapsed >= 0.3 - TIMER_TICK  # the SDK waited as told before retrying


@pytest.mark.parametrize(
    ("status", "kind"), [(429, "rate_limit_error"), (500, "api_error"), (529, "overloaded_error")]
)
async def test_transient_statuses_are_retryable_after_the_sdk_retries(
    fake: FakeAnthropic, make_provider: Factory, status: int, kind: str
):
    fake.set_default(error(status, headers=FAST_RETRY))
    provider = make_provider(max_retries=2)

    with pytest.raises(LlmError) as caught:
        await provider.update(update_request())

    assert caught.value.retryable is True
    assert caught.value.transient is True  # an outage: Phase 2 waits it out
    assert str(status) in str(caught.value) and kind in str(caught.value)
    assert len(fake.requests) == 3  # one attempt and the SDK's two retries


async def test_timeout_is_retryable(fake: FakeAnthropic, make_provider: Factory):
    fake.set_default(slow(tool_use(valid_update_input()), 30.0))
    provider = make_provider(timeout=0.3, max_retries=1)

    started = time.monotonic()
    with pytest.raises(LlmError) as caught:
        await provider.update(update_request())

    assert caught.value.retryable is True and caught.value.transient is True
    assert "no answer within 0.3s" in str(caught.value)
    assert len(fake.requests) == 2
    # gave up on its own timeout (two of 0.3 s and a backoff), long before the server's 30 s;
    # the bound leaves room for a loaded machine
    assert time.monotonic() - started < 10


async def test_dropped_connection_is_retryable(fake: FakeAnthropic, make_provider: Factory):
    fake.set_default(connection_reset())

    with pytest.raises(LlmError) as caught:
        await make_provider(max_retries=0).update(update_request())

    assert caught.value.retryable is True and caught.value.transient is True


async def test_connection_reset_then_success(fake: FakeAnthropic, make_provider: Factory):
    fake.enqueue(connection_reset(), tool_use(valid_update_input()))

    reply = await make_provider(max_retries=1).update(update_request())

    assert reply.tool_input == valid_update_input()


@pytest.mark.parametrize("status", [400, 401, 403, 404])
async def test_client_errors_are_not_retryable(
    fake: FakeAnthropic, make_provider: Factory, status: int
):
    fake.set_default(error(status, message_text="nope"))

    with pytest.raises(LlmError) as caught:
        await make_provider(max_retries=2).update(update_request())

    assert caught.value.retryable is False and caught.value.transient is False
    assert not isinstance(caught.value, PromptTooLong)
    assert "nope" in str(caught.value)
    assert len(fake.requests) == 1  # the SDK does not retry these either


@pytest.mark.parametrize(
    ("status", "text", "limit"),
    [
        (400, "prompt is too long: 215304 tokens > 200000 maximum", 200_000),
        (400, "Prompt is too long", None),
        (413, "Request exceeds the maximum allowed number of bytes.", None),
    ],
)
async def test_a_prompt_over_the_context_window_is_told_apart(
    fake: FakeAnthropic, make_provider: Factory, status: int, text: str, limit: int | None
):
    """Phase 2 splits its input and tries again on this error instead of failing."""
    fake.set_default(error(status, message_text=text))

    with pytest.raises(PromptTooLong) as caught:
        await make_provider(max_retries=2).update(update_request())

    assert caught.value.limit == limit and caught.value.retryable is False
    assert len(fake.requests) == 1


def test_the_provider_tells_phase2_its_context_window_and_answer_size(make_provider: Factory):
    provider = make_provider(max_tokens=3000)
    assert provider.max_output_tokens == 3000  # the window comes from llm/models.py


async def test_anthropic_base_url_environment_is_honoured(
    fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
    fake.enqueue(tool_use(valid_update_input()))
    provider = AnthropicProvider(
        api_key="k", model="m", max_tokens=1024, timeout=2.0, max_retries=0, base_url=None
    )
    try:
        reply = await provider.update(update_request())
    finally:
        await provider.aclose()

    assert reply.tool_input == valid_update_input()
    assert len(fake.requests) == 1
