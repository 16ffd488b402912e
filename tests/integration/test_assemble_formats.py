"""AssembleContext's format enum on a real server: the rendered context pairs tool calls and
results as each API requires, the real ``openai`` SDK sends the Chat Completions rendering as
it is, and an unknown format is refused."""

from __future__ import annotations

import json

import grpc
import openai
import pytest

from support import builders as b
from support.errors import details
from support.fake_openai import FakeOpenAI, completion
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc

Stub = service_grpc.WorkingMemoryServiceStub


async def _session(stub: Stub) -> str:
    two_calls = pb.Message(
        role=pb.ROLE_ASSISTANT,
        parts=[
            pb.Part(text="Looking."),
            pb.Part(tool_use=pb.ToolUse(id="c1", name="ls", input_json='{"dir": "."}')),
            pb.Part(tool_use=pb.ToolUse(id="c2", name="cat", input_json='{"f": "a"}')),
        ],
    )
    results = pb.Message(
        role=pb.ROLE_USER,
        parts=[
            pb.Part(tool_result=pb.ToolResult(tool_use_id="c1", content="a b")),
            pb.Part(tool_result=pb.ToolResult(tool_use_id="c2", content="no", is_error=True)),
        ],
    )
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent="sessions/fmt",
            create_session_if_missing=True,
            messages=[b.user("List the files."), two_calls, results, b.assistant("Two files.")],
        )
    )
    return "sessions/fmt"


async def _rendered(stub: Stub, session: str, fmt: int) -> api.AssembleContextResponse:
    return await stub.AssembleContext(
        api.AssembleContextRequest(
            name=session,
            token_budget=50_000,
            system_prompt="Be brief.",
            format=fmt,  # type: ignore[arg-type]
        )
    )


async def test_each_format_pairs_calls_with_results(stub: Stub) -> None:
    session = await _session(stub)
    chat = await _rendered(stub, session, api.CONTEXT_FORMAT_OPENAI_CHAT_COMPLETIONS)
    messages = json.loads(chat.rendered_json)
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert messages[0]["content"].startswith("Be brief.")
    assert [c["id"] for c in messages[2]["tool_calls"]] == ["c1", "c2"]
    assert [(m["tool_call_id"], m["content"]) for m in messages[3:5]] == [
        ("c1", "a b"),
        ("c2", "[tool error] no"),
    ]

    responses = await _rendered(stub, session, api.CONTEXT_FORMAT_OPENAI_RESPONSES)
    items = json.loads(responses.rendered_json)
    assert [i["type"] for i in items] == [
        "message", "message", "message", "function_call", "function_call",
        "function_call_output", "function_call_output", "message",
    ]  # fmt: skip
    assert [i["call_id"] for i in items if "call_id" in i] == ["c1", "c2", "c1", "c2"]

    anthropic = await _rendered(stub, session, api.CONTEXT_FORMAT_ANTHROPIC_MESSAGES)
    blocks = json.loads(anthropic.rendered_json)
    assert [m["role"] for m in blocks] == ["user", "assistant", "user", "assistant"]
    assert [b["id"] for b in blocks[1]["content"] if b["type"] == "tool_use"] == ["c1", "c2"]
    assert [b["type"] for b in blocks[2]["content"]] == ["tool_result", "tool_result"]

    plain = await _rendered(stub, session, api.CONTEXT_FORMAT_UNSPECIFIED)
    assert plain.rendered_json == ""
    assert len(plain.messages) == 4


async def test_the_openai_sdk_sends_the_chat_rendering_as_it_is(stub: Stub) -> None:
    session = await _session(stub)
    reply = await _rendered(stub, session, api.CONTEXT_FORMAT_OPENAI_CHAT_COMPLETIONS)
    messages = json.loads(reply.rendered_json)
    with FakeOpenAI() as fake:
        fake.enqueue(completion({"content": "ok"}, finish_reason="stop"))
        client = openai.AsyncOpenAI(api_key="test", base_url=fake.base_url, max_retries=0)
        answer = await client.chat.completions.create(model="m", messages=messages)
        await client.close()
        assert answer.choices[0].message.content == "ok"
        assert fake.requests[0].body["messages"] == messages


async def test_an_unknown_format_is_invalid_argument(stub: Stub) -> None:
    session = await _session(stub)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _rendered(stub, session, 42)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    _, fields = details(caught.value)
    assert fields == ["format"]
