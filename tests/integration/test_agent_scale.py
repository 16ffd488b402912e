"""Agent-scale sessions (issue 18) on a real server, on SQLite and on PostgreSQL: huge tool
outputs, a context that always keeps the question, and tool inputs JSON cannot carry."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from support import builders as b
from support import commit_flow
from support import wm_names as names
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
def server_settings() -> dict[str, object]:
    """Settings of the test's server (a test overrides it with parametrize)."""
    return {}


# The cut path of assembly, with externalization off: the output stays in the message.
INLINE = pytest.mark.parametrize("server_settings", [{"tool_output_inline_chars": 0}])


@pytest.fixture
async def app(
    engine: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    provider: ProgrammableProvider,
    server_settings: dict[str, object],
) -> AsyncIterator[Application]:
    application = await _server(engine, request, tmp_path, provider, **server_settings)
    try:
        yield application
    finally:
        await application.stop(grace=0.5)


@pytest.fixture
def app_address(app: Application) -> str:
    return app.address


@pytest.fixture
async def stub(app: Application) -> AsyncIterator[Stub]:
    async with grpc.aio.insecure_channel(app.address) as channel:
        yield service_grpc.WorkingMemoryServiceStub(channel)


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


@INLINE
async def test_a_100k_token_tool_result_keeps_the_question_and_the_call(stub: Stub) -> None:
    """The issue's reproduction: at a 64,000-token budget the context used to be the
    omitted note and "Here it is"."""
    log = "platform linux -- Python 3.11\n" + "." * 400_000 + "\nFAILED test_ledger - 1 failed"
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent="sessions/big", messages=_agent_turn(log), create_session_if_missing=True
        )
    )
    reply = await stub.AssembleContext(
        api.AssembleContextRequest(
            name="sessions/big", token_budget=64_000, format=api.CONTEXT_FORMAT_ANTHROPIC_MESSAGES
        )
    )
    blocks = _blocks(reply)
    assert blocks[0] == QUESTION and "tool_use:toolu_1" in blocks and blocks[-1] == "Here it is"
    assert reply.estimated_tokens + reply.reply_reserve_tokens <= 64_000
    assert reply.dropped_message_count == 0
    anthropic = json.loads(reply.rendered_json)
    assert [m["role"] for m in anthropic] == ["user", "assistant", "user", "assistant"]
    (result,) = anthropic[2]["content"]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_1"
    content = result["content"]
    assert content.startswith("platform linux") and content.endswith("1 failed")
    assert "characters cut here to fit the context budget" in content
    assert len(reply.cut_parts) == 1 and reply.cut_parts[0].startswith("message r1 part 0: ")


@INLINE
async def test_a_cut_message_says_where_its_whole_text_is(
    stub: Stub, provider: ProgrammableProvider
) -> None:
    """Live, it names the message; in an archive no working memory covers (Phase 2 failed),
    it names the archive to expand."""
    turn = _agent_turn("z" * 300_000)
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent="sessions/arch", messages=turn, create_session_if_missing=True
        )
    )
    request = api.AssembleContextRequest(name="sessions/arch", token_budget=40_000)
    live = "\n".join(_blocks(await stub.AssembleContext(request)))
    assert "full text: message r1 …]" in live
    provider.default_create = Answer(error=LlmError("down", retryable=False))
    _, events = await commit_flow.commit(stub, "arch")
    assert events[-1].stage == pb.COMMIT_STAGE_FAILED
    reply = await stub.AssembleContext(request)
    assert list(reply.uncovered_archives) == ["sessions/arch/archives/archive_001"]
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
        api.AddMessagesRequest(
            parent="sessions/mix", messages=messages, create_session_if_missing=True
        )
    )
    reply = await stub.AssembleContext(
        api.AssembleContextRequest(
            name="sessions/mix", token_budget=50_000, format=api.CONTEXT_FORMAT_ANTHROPIC_MESSAGES
        )
    )
    last = json.loads(reply.rendered_json)[-1]
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
            api.AddMessagesRequest(
                parent="sessions/bad", messages=[bad], create_session_if_missing=True
            )
        )
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    _, fields = details(caught.value)
    assert fields == ["messages[0].parts[0].tool_use.input_json"]
    # nothing was stored, and the session still assembles
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await stub.GetSession(api.GetSessionRequest(name="sessions/bad"))
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
            parent="sessions/ok",
            messages=[b.user("go", "u1"), good, b.tool_result("t1", "done")],
            create_session_if_missing=True,
        )
    )
    reply = await stub.AssembleContext(
        api.AssembleContextRequest(
            name="sessions/ok", token_budget=50_000, format=api.CONTEXT_FORMAT_ANTHROPIC_MESSAGES
        )
    )
    call = json.loads(reply.rendered_json)[1]["content"][0]
    assert call["input"]["emoji"] == "😀"


# --- the tool-output store (point 1) ------------------------------------------------------------

CI_LOG = (
    "".join(f"tests/test_{n:04d}.py::test_case PASSED [{n % 100:3d}%]\n" for n in range(9000))
    + "tests/test_ledger.py::test_balance FAILED\nE   AssertionError: 10 != 12\n"
)  # ~100,000 tokens


async def _ingest_big_turn(stub: Stub, session: str) -> api.AddMessagesResponse:
    return await stub.AddMessages(
        api.AddMessagesRequest(
            parent=names.session(session),
            messages=_agent_turn(CI_LOG),
            create_session_if_missing=True,
        )
    )


async def test_a_huge_tool_result_is_stored_whole_and_the_session_sees_its_synopsis(
    stub: Stub,
) -> None:
    added = await _ingest_big_turn(stub, "store")
    session = await stub.GetSession(api.GetSessionRequest(name="sessions/store"))
    assert session.live_tokens < 3000 and added.pending_tokens == session.pending_tokens
    reply = await stub.AssembleContext(
        api.AssembleContextRequest(name="sessions/store", token_budget=64_000)
    )
    assert [m.role for m in reply.messages][:1] == [pb.ROLE_USER] and not reply.cut_parts
    blocks = _blocks(reply)
    assert blocks[0] == QUESTION and blocks[-1] == "Here it is" and "tool_use:toolu_1" in blocks
    synopsis = blocks[2]
    assert synopsis.startswith("[Tool output out.r1.0 stored in full, not shown here:")
    assert f"{len(CI_LOG.encode()):,} bytes" in synopsis and "9,002 lines" in synopsis
    assert "L9001: tests/test_ledger.py::test_balance FAILED" in synopsis
    assert "L9002: E   AssertionError: 10 != 12" in synopsis
    (result_message,) = [m for m in reply.messages if m.tool_outputs]
    assert list(result_message.tool_outputs) == ["sessions/store/toolOutputs/out.r1.0"]
    # Read whole, page by page, and by lines around the failure.
    first = await stub.GetToolOutput(
        api.GetToolOutputRequest(name="sessions/store/toolOutputs/out.r1.0")
    )
    output = first.tool_output
    assert output.kind == pb.TOOL_OUTPUT_KIND_RESULT and output.format == "text"
    assert output.line_count == 9002 and output.synopsis == synopsis
    assert first.content == CI_LOG and not first.next_page_token  # < 1 MiB: one page
    near = await stub.GetToolOutput(
        api.GetToolOutputRequest(
            name="sessions/store/toolOutputs/out.r1.0", lines=api.LineRange(start=9001, count=5)
        )
    )
    assert near.content.splitlines() == CI_LOG.splitlines()[9000:]
    assert near.start_line == 9001 and near.line_count == 2
    found = await stub.SearchToolOutputs(
        api.SearchToolOutputsRequest(parent="sessions/store", query="assertionerror")
    )
    assert found.total_matches == 1
    assert [(h.tool_output, h.message, h.line) for h in found.hits] == [
        ("sessions/store/toolOutputs/out.r1.0", "sessions/store/messages/r1", 9002)
    ]
    assert found.hits[0].snippet == "E   AssertionError: 10 != 12"


async def test_tool_outputs_are_archived_with_their_ids_and_deleted_with_the_session(
    stub: Stub,
) -> None:
    await _ingest_big_turn(stub, "gone")
    _, events = await commit_flow.compact(stub, "gone")
    assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED
    archive = await stub.ListMessages(
        api.ListMessagesRequest(parent="sessions/gone/archives/archive_001")
    )
    assert [list(m.tool_outputs) for m in archive.messages] == [
        [], [], ["sessions/gone/toolOutputs/out.r1.0"], []
    ]  # fmt: skip
    read = api.GetToolOutputRequest(name="sessions/gone/toolOutputs/out.r1.0")
    assert (await stub.GetToolOutput(read)).content == CI_LOG  # archived, still readable
    await stub.DeleteSession(api.DeleteSessionRequest(name="sessions/gone"))
    await _ingest_big_turn(stub, "gone")  # the same name again: a new session, new outputs
    await stub.DeleteSession(api.DeleteSessionRequest(name="sessions/gone"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GetToolOutput(read)
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND


async def test_unknown_outputs_and_bad_ranges_are_clear_errors(stub: Stub) -> None:
    await _ingest_big_turn(stub, "errs")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GetToolOutput(api.GetToolOutputRequest(name="sessions/errs/toolOutputs/out.x.0"))
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND
    assert details(caught.value)[0].reason == "TOOL_OUTPUT_NOT_FOUND"
    bad = api.GetToolOutputRequest(
        name="sessions/errs/toolOutputs/out.r1.0", bytes=api.ByteRange(offset=-1)
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GetToolOutput(bad)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert details(caught.value)[1] == ["bytes.offset"]  # the rule is on the offset
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.SearchToolOutputs(
            api.SearchToolOutputsRequest(parent="sessions/errs", query=" ")
        )
    assert details(caught.value)[1] == ["query"]


@pytest.mark.parametrize("server_settings", [{"max_message_bytes": 24 * 1024 * 1024}])
async def test_an_output_larger_than_the_transport_limit_reads_in_pages(stub: Stub) -> None:
    """20 MiB stored (the server's send limit is 16 MiB): every page fits, and they add up."""
    line = "x" * 99 + "\n"
    huge = line * (20 * 1024 * 1024 // 100)
    message = b.tool_result("toolu_h", huge, message_id="h1")
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent="sessions/huge", messages=[message], create_session_if_missing=True
        )
    )
    total = 0
    token = ""
    pages = 0
    while True:
        page = await stub.GetToolOutput(
            api.GetToolOutputRequest(
                name="sessions/huge/toolOutputs/out.h1.0", bytes=api.ByteRange(), page_token=token
            )
        )
        assert page.start_byte == total and page.byte_count <= 1024 * 1024
        total += page.byte_count
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert total == len(huge) and pages == 20


# --- reads that always fit (point 4) ------------------------------------------------------------

CONTRACT_LIMIT = 16 * 1024 * 1024  # no response exceeds it


async def _fill(stub: Stub, session: str, megabytes: int) -> list[str]:
    """``megabytes`` of plain text (never externalized), in messages of 0.9 MB."""
    ids: list[str] = []
    for batch in range(0, megabytes, 3):
        messages = []
        for n in range(batch, min(batch + 3, megabytes)):
            role = pb.ROLE_USER if n % 2 == 0 else pb.ROLE_ASSISTANT
            messages.append(b.text(role, f"part {n} " + "w" * 900_000, f"big{n}"))
            ids.append(f"big{n}")
        await stub.AddMessages(
            api.AddMessagesRequest(
                parent=names.session(session), messages=messages, create_session_if_missing=True
            )
        )
    return ids


async def test_an_archive_larger_than_the_transport_limit_reads_in_pages(
    stub: Stub, app_address: str
) -> None:
    ids = await _fill(stub, "huge-archive", 20)  # 18 MB
    _, events = await commit_flow.compact(stub, "huge-archive", within=60)
    assert events[0].phase1.archived_message_count == 20
    archive = "sessions/huge-archive/archives/archive_001"
    options = [("grpc.max_receive_message_length", CONTRACT_LIMIT)]
    async with grpc.aio.insecure_channel(app_address, options=options) as channel:
        small = service_grpc.WorkingMemoryServiceStub(channel)
        about = await small.GetArchive(api.GetArchiveRequest(name=archive))
        assert about.message_count == 20
        seen: list[str] = []
        token = ""
        while True:
            page = await small.ListMessages(
                api.ListMessagesRequest(parent=archive, page_token=token)
            )
            assert page.ByteSize() <= CONTRACT_LIMIT
            assert page.messages[0].position == len(seen) + 1
            seen.extend(m.id for m in page.messages)
            token = page.next_page_token
            if not token:
                break
        assert seen == ids
        two = await small.ListMessages(api.ListMessagesRequest(parent=archive, page_size=2))
        assert [m.id for m in two.messages] == ids[:2] and two.messages[1].position == 2


async def test_a_ten_million_token_budget_still_fits_in_one_response(
    stub: Stub, app_address: str
) -> None:
    await _fill(stub, "huge-live", 20)
    options = [("grpc.max_receive_message_length", CONTRACT_LIMIT)]
    async with grpc.aio.insecure_channel(app_address, options=options) as channel:
        small = service_grpc.WorkingMemoryServiceStub(channel)
        for with_json in (False, True):
            reply = await small.AssembleContext(
                api.AssembleContextRequest(
                    name="sessions/huge-live",
                    token_budget=10_000_000,
                    format=api.CONTEXT_FORMAT_ANTHROPIC_MESSAGES
                    if with_json
                    else api.CONTEXT_FORMAT_UNSPECIFIED,
                )
            )
            assert reply.ByteSize() <= CONTRACT_LIMIT
            assert 0 < reply.effective_token_budget < 10_000_000
            assert reply.included_message_count > 3 and reply.dropped_message_count > 0
            assert reply.messages[-1].parts[0].text.startswith("part 19 ")  # the newest stays
    small_budget = await stub.AssembleContext(
        api.AssembleContextRequest(name="sessions/huge-live", token_budget=100_000)
    )
    assert small_budget.effective_token_budget == 100_000
