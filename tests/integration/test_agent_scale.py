"""Agent-scale sessions (issue 18) on a real server, on SQLite and on PostgreSQL: huge tool
outputs, a context that always keeps the question, and tool inputs JSON cannot carry."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from support import builders as b
from support.errors import details
from support.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from support.production import settings_for
from support.providers import Answer, ProgrammableProvider
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application
from wm_server.llm.port import LlmError

Stub = service_grpc.WorkingMemoryServiceStub
ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
QUESTION = "Why does test_ledger fail on CI? Read the whole log."


async def _server(
    engine: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    provider: ProgrammableProvider,
    **settings: object,
) -> Application:
    if engine == "postgresql":
        settings["database_url"] = request.getfixturevalue("postgres_url")
    return await start_application(
        settings_for(tmp_path, phase2_max_attempts=1, **settings), provider=provider
    )


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def provider() -> ProgrammableProvider:
    return ProgrammableProvider()


@pytest.fixture
async def stub(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path, provider: ProgrammableProvider
) -> AsyncIterator[Stub]:
    app = await _server(engine, request, tmp_path, provider)
    try:
        async with grpc.aio.insecure_channel(app.address) as channel:
            yield service_grpc.WorkingMemoryServiceStub(channel)
    finally:
        await app.stop(grace=0.5)


def _agent_turn(output: str) -> list[pb.Message]:
    return [
        b.user(QUESTION, "q1"),
        b.tool_call("toolu_1", "read_file", {"path": "ci/test.log"}, "c1"),
        b.tool_result("toolu_1", output, message_id="r1"),
        b.assistant("Here it is", "a1"),
    ]


def _blocks(reply: api.AssembleContextResponse) -> list[str]:
    out: list[str] = []
    for message in reply.messages:
        for part in message.parts:
            kind = part.WhichOneof("kind")
            if kind == "text":
                out.append(part.text)
            elif kind == "tool_use":
                out.append(f"tool_use:{part.tool_use.id}")
            else:
                out.append(part.tool_result.content)
    return out


async def test_a_100k_token_tool_result_keeps_the_question_and_the_call(stub: Stub) -> None:
    """The issue's reproduction: at a 64,000-token budget the context used to be the
    omitted note and "Here it is"."""
    log = "platform linux -- Python 3.11\n" + "." * 400_000 + "\nFAILED test_ledger - 1 failed"
    await stub.AddMessages(
        api.AddMessagesRequest(
            session_id="big", messages=_agent_turn(log), create_session_if_missing=True
        )
    )
    reply = await stub.AssembleContext(
        api.AssembleContextRequest(
            session_id="big", token_budget=64_000, include_anthropic_json=True
        )
    )
    blocks = _blocks(reply)
    assert blocks[0] == QUESTION and "tool_use:toolu_1" in blocks and blocks[-1] == "Here it is"
    assert reply.estimated_tokens + reply.reply_reserve_tokens <= 64_000
    assert reply.dropped_message_count == 0
    anthropic = json.loads(reply.anthropic_messages_json)
    assert [m["role"] for m in anthropic] == ["user", "assistant", "user", "assistant"]
    (result,) = anthropic[2]["content"]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_1"
    content = result["content"]
    assert content.startswith("platform linux") and content.endswith("1 failed")
    assert "characters cut here to fit the context budget" in content
    assert len(reply.cut_parts) == 1 and reply.cut_parts[0].startswith("message r1 part 0: ")


async def test_a_cut_message_says_where_its_whole_text_is(
    stub: Stub, provider: ProgrammableProvider
) -> None:
    """Live, it names the message; in an archive no working memory covers (Phase 2 failed),
    it names the archive to expand."""
    turn = _agent_turn("z" * 300_000)
    await stub.AddMessages(
        api.AddMessagesRequest(session_id="arch", messages=turn, create_session_if_missing=True)
    )
    request = api.AssembleContextRequest(session_id="arch", token_budget=40_000)
    live = "\n".join(_blocks(await stub.AssembleContext(request)))
    assert "full text: message r1 …]" in live
    provider.default_create = Answer(error=LlmError("down", retryable=False))
    events = [e async for e in stub.Commit(api.CommitRequest(session_id="arch"), timeout=30)]
    assert events[-1].stage == pb.COMMIT_STAGE_FAILED
    reply = await stub.AssembleContext(request)
    assert list(reply.uncovered_archive_ids) == ["archive_001"]
    archived = "\n".join(_blocks(reply))
    assert 'full text: archive_expand(archive_id="archive_001") …]' in archived
    assert archived.startswith(QUESTION)


async def test_tool_results_come_first_when_the_user_also_writes(stub: Stub) -> None:
    messages = [
        b.user("List the files", "u1"),
        b.tool_call("toolu_9", "ls", {}, "c9"),
        b.user("and hurry", "u2"),
        b.tool_result("toolu_9", "a.py b.py", message_id="r9"),
    ]
    await stub.AddMessages(
        api.AddMessagesRequest(session_id="mix", messages=messages, create_session_if_missing=True)
    )
    reply = await stub.AssembleContext(
        api.AssembleContextRequest(
            session_id="mix", token_budget=50_000, include_anthropic_json=True
        )
    )
    last = json.loads(reply.anthropic_messages_json)[-1]
    assert last["role"] == "user"
    assert [block["type"] for block in last["content"]] == ["tool_result", "text"]


@pytest.mark.parametrize(
    "raw",
    [
        '{"path": "\\ud800"}',
        '{"\\udfff": 1}',
        '{"n": NaN}',
        '{"n": [Infinity]}',
        '{"n": -Infinity}',
        '{"n": 1e999}',
    ],
)
async def test_tool_input_json_cannot_carry_is_invalid_argument(stub: Stub, raw: str) -> None:
    bad = pb.Message(
        id="m1",
        role=pb.ROLE_ASSISTANT,
        parts=[pb.Part(tool_use=pb.ToolUse(id="t1", name="run", input_json=raw))],
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.AddMessages(
            api.AddMessagesRequest(session_id="bad", messages=[bad], create_session_if_missing=True)
        )
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    _, fields = details(caught.value)
    assert fields == ["messages[0].parts[0].tool_use.input_json"]
    # nothing was stored, and the session still assembles
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await stub.GetSession(api.GetSessionRequest(session_id="bad"))
    assert missing.value.code() is grpc.StatusCode.NOT_FOUND


async def test_escaped_characters_that_are_real_stay_accepted(stub: Stub) -> None:
    good = b.tool_call("t1", "run", {"emoji": "😀", "n": 1e300, "big": 10**30}, "c1")
    good.parts[
        0
    ].tool_use.input_json = (
        '{"emoji": "\\ud83d\\ude00", "n": 1e300, "big": 1000000000000000000000000000000}'
    )
    await stub.AddMessages(
        api.AddMessagesRequest(
            session_id="ok",
            messages=[b.user("go", "u1"), good, b.tool_result("t1", "done")],
            create_session_if_missing=True,
        )
    )
    reply = await stub.AssembleContext(
        api.AssembleContextRequest(
            session_id="ok", token_budget=50_000, include_anthropic_json=True
        )
    )
    call = json.loads(reply.anthropic_messages_json)[1]["content"][0]
    assert call["input"]["emoji"] == "😀"
