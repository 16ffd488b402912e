"""AssembleContext, archive expand and search, tool definitions, client-applied ops."""

from __future__ import annotations

import asyncio
import itertools
import json

import grpc
import pytest

from support import builders as b
from support import commit_flow
from support import wm_names as names
from support.errors import details
from support.providers import Answer, ProgrammableProvider, creation
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.llm.port import LlmError

Stub = service_grpc.WorkingMemoryServiceStub


async def _add(stub: Stub, session: str, *messages: pb.Message) -> None:
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=names.session(session), messages=messages, create_session_if_missing=True
        )
    )


async def _commit(stub: Stub, session: str, keep: int = 0) -> list[pb.CommitEvent]:
    _, events = await commit_flow.commit(stub, session, keep)
    return events


async def _assemble(stub: Stub, session: str, budget: int = 100_000) -> api.AssembleContextResponse:
    return await stub.AssembleContext(
        api.AssembleContextRequest(
            name=names.session(session),
            token_budget=budget,
            format=api.CONTEXT_FORMAT_ANTHROPIC_MESSAGES,
        )
    )


def _texts(reply: api.AssembleContextResponse) -> str:
    return "\n".join(
        p.text for m in reply.messages for p in m.parts if p.WhichOneof("kind") == "text"
    )


async def test_assemble_layers_summary_then_uncovered_then_live(
    stub: Stub, provider: ProgrammableProvider
) -> None:
    provider.creates.append(
        Answer(creation(session_title="Ship the parser", current_state="Tests green"))
    )
    await _add(stub, "ctx", b.user("archived question", "a1"), b.assistant("archived answer", "a2"))
    await _commit(stub, "ctx")
    provider.gate = asyncio.Event()  # the next Phase 2 stays pending
    await _add(stub, "ctx", b.user("pending question", "p1"), b.assistant("pending answer", "p2"))
    started = await stub.CreateCommit(commit_flow.create_request("ctx"))
    assert started.archive  # Phase 1 is stored when CreateCommit answers
    await _add(stub, "ctx", b.user("live question", "l1"))
    reply = await _assemble(stub, "ctx")
    text = _texts(reply)
    assert text.startswith("[Session History Summary]") and "Ship the parser" in text
    assert "archived question" not in text  # covered by the WM
    assert text.index("pending question") < text.index("live question")  # not lost meanwhile
    assert list(reply.uncovered_archives) == ["sessions/ctx/archives/archive_002"]
    assert reply.working_memory_version == 1 and reply.system_prompt_addition
    roles = [m.role for m in reply.messages]
    assert roles[0] == pb.ROLE_USER and all(a != b_ for a, b_ in itertools.pairwise(roles))
    assert reply.estimated_tokens + reply.reply_reserve_tokens <= 100_000
    anthropic = json.loads(reply.rendered_json)
    assert [m["role"] for m in anthropic] == ["user", "assistant", "user"]
    provider.gate.set()


async def test_failed_archive_stays_in_context_raw(
    stub: Stub, provider: ProgrammableProvider
) -> None:
    provider.default_create = Answer(error=LlmError("down", retryable=False))
    await _add(stub, "raw", b.user("remember the code word heliotrope", "h1"))
    events = await _commit(stub, "raw")
    assert events[-1].stage == pb.COMMIT_STAGE_FAILED
    reply = await _assemble(stub, "raw")
    assert "heliotrope" in _texts(reply)
    assert (
        list(reply.uncovered_archives) == ["sessions/raw/archives/archive_001"]
        and reply.working_memory_version == 0
    )


async def test_assemble_drops_oldest_within_a_small_budget(stub: Stub) -> None:
    await _add(stub, "small", *[b.sized(300, f"s{i}") for i in range(30)])
    reply = await _assemble(stub, "small", budget=4000)
    assert reply.dropped_message_count > 0
    assert reply.included_message_count + reply.dropped_message_count == 30
    assert reply.estimated_tokens + reply.reply_reserve_tokens <= 4000


@pytest.mark.parametrize("budget", [0, -5, 10_000_001])
async def test_assemble_rejects_bad_budgets(stub: Stub, budget: int) -> None:
    await stub.CreateSession(api.CreateSessionRequest(session_id="bud"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _assemble(stub, "bud", budget=budget)
    assert details(caught.value)[1] == ["token_budget"]


async def test_get_archive_expands_any_state(stub: Stub, provider: ProgrammableProvider) -> None:
    await _add(stub, "exp", b.user("one", "e1"), b.tool_call("t9", "bash", {"cmd": "pytest"}, "e2"))
    await _add(stub, "exp", b.tool_result("t9", "1 failed", is_error=True, message_id="e3"))
    await _commit(stub, "exp")
    archive = await stub.GetArchive(api.GetArchiveRequest(name="sessions/exp/archives/archive_001"))
    messages = await stub.ListMessages(api.ListMessagesRequest(parent=archive.name))
    assert [m.id for m in messages.messages] == ["e1", "e2", "e3"]
    assert archive.state == pb.COMMIT_STATE_COMPLETED and archive.working_memory.version == 1
    assert archive.abstract and not archive.abstract.startswith("#")
    provider.default_update = Answer(error=LlmError("no", retryable=False))
    await _add(stub, "exp", b.user("two", "e4"))
    await _commit(stub, "exp")
    failed = await stub.GetArchive(api.GetArchiveRequest(name="sessions/exp/archives/archive_002"))
    assert failed.state == pb.COMMIT_STATE_FAILED and failed.error.message == "no"
    messages = await stub.ListMessages(api.ListMessagesRequest(parent=failed.name))
    assert [m.id for m in messages.messages] == ["e4"]
    for bad, code in (
        ("archive_009", grpc.StatusCode.NOT_FOUND),
        ("nope", grpc.StatusCode.INVALID_ARGUMENT),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetArchive(api.GetArchiveRequest(name=names.archive("exp", bad)))
        assert caught.value.code() == code


async def test_search_is_literal_case_insensitive_newest_first(stub: Stub) -> None:
    await _add(stub, "srch", b.user("The price is $5.00 (approx.) today", "old"))
    await _commit(stub, "srch")
    deep = "x" * 5000 + " NEEDLE $5.00 (APPROX.) " + "y" * 5000
    await _add(stub, "srch", b.tool_call("t1", "grep", {"q": "price"}, "call"))
    await _add(stub, "srch", b.tool_result("t1", deep, message_id="deep"))
    await _add(stub, "srch", b.user("price is $5X00 (approxX) with regex chars", "decoy"))
    await _commit(stub, "srch")
    reply = await stub.SearchArchives(
        api.SearchArchivesRequest(parent="sessions/srch", query="$5.00 (approx.)")
    )
    assert [(h.archive, h.message) for h in reply.hits] == [
        ("sessions/srch/archives/archive_002", "sessions/srch/messages/deep"),
        ("sessions/srch/archives/archive_001", "sessions/srch/messages/old"),
    ]
    assert reply.total_matches == 2
    snippet = reply.hits[0].snippet
    assert len(snippet) <= 1500 and "$5.00 (APPROX.)" in snippet
    only_first = await stub.SearchArchives(
        api.SearchArchivesRequest(
            parent="sessions/srch", query="PRICE", archive=names.archive("srch", "archive_001")
        )
    )
    assert [h.message for h in only_first.hits] == ["sessions/srch/messages/old"]
    none = await stub.SearchArchives(
        api.SearchArchivesRequest(parent="sessions/srch", query="[a-z]+")
    )
    assert not none.hits
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.SearchArchives(api.SearchArchivesRequest(parent="sessions/srch", query="   "))
    assert details(caught.value)[1] == ["query"]


async def test_search_limits_hits_and_can_span_sessions(stub: Stub) -> None:
    for session in ("x1", "x2"):
        await _add(stub, session, *[b.user(f"marker {i} in {session}") for i in range(30)])
        await _commit(stub, session)
    reply = await stub.SearchArchives(
        api.SearchArchivesRequest(parent="sessions/x1", query="marker")
    )
    assert len(reply.hits) == 12 and reply.total_matches == 30
    capped = await stub.SearchArchives(
        api.SearchArchivesRequest(parent="sessions/x1", query="marker", page_size=50)
    )
    assert len(capped.hits) == 30
    with pytest.raises(grpc.aio.AioRpcError) as caught:  # the contract's maximum is 50
        await stub.SearchArchives(
            api.SearchArchivesRequest(parent="sessions/x1", query="marker", page_size=51)
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details(caught.value)[1] == ["page_size"]
    both = await stub.SearchArchives(
        api.SearchArchivesRequest(query="marker", parent="sessions/-", page_size=50)
    )
    sessions = {h.archive.split("/archives/")[0] for h in both.hits}
    assert sessions == {"sessions/x1", "sessions/x2"} and both.total_matches == 60


async def test_tool_definitions_in_each_format(stub: Stub) -> None:
    reply = await stub.GetToolDefinitions(api.GetToolDefinitionsRequest())
    tool_names = [t.name for t in reply.tools]
    assert tool_names == [
        "archive_expand",
        "archive_search",
        "tool_output_read",
        "update_working_memory",
        "memory_search",
        "memory_store",
        "memory_forget",
    ]
    assert all(not t.rendered_json for t in reply.tools)  # no format asked: no rendering
    schemas = {t.name: json.loads(t.input_schema_json) for t in reply.tools}

    async def rendered(fmt: int) -> dict[str, dict[str, object]]:
        answer = await stub.GetToolDefinitions(
            api.GetToolDefinitionsRequest(format=fmt)  # type: ignore[arg-type]
        )
        assert [t.name for t in answer.tools] == tool_names
        return {t.name: json.loads(t.rendered_json) for t in answer.tools}

    anthropic = await rendered(api.TOOL_FORMAT_ANTHROPIC_MESSAGES)
    chat = await rendered(api.TOOL_FORMAT_OPENAI_CHAT_COMPLETIONS)
    responses = await rendered(api.TOOL_FORMAT_OPENAI_RESPONSES)
    for name, schema in schemas.items():
        assert anthropic[name]["name"] == name and anthropic[name]["input_schema"] == schema
        assert schema["type"] == "object"
        function = chat[name]["function"]
        assert chat[name]["type"] == "function" and function["parameters"] == schema  # type: ignore[index]
        assert responses[name]["type"] == "function" and responses[name]["name"] == name
        assert responses[name]["parameters"] == schema


async def test_apply_ops_goes_through_the_guards(stub: Stub) -> None:
    await stub.CreateSession(api.CreateSessionRequest(session_id="ops"))
    first = await stub.ApplyWorkingMemoryOps(
        api.ApplyWorkingMemoryOpsRequest(parent="sessions/ops", ops=[
                pb.SectionOp(section="Session Title", kind=pb.SECTION_OP_KIND_UPDATE, content="Client WM"),
                pb.SectionOp(
                    section="Errors & Corrections", kind=pb.SECTION_OP_KIND_APPEND,
                    items=["Used the wrong port 80; fixed to 8443"],
                ),
            ])
    )  # fmt: skip
    assert first.working_memory.version == 1 and "Client WM" in first.working_memory.document
    second = await stub.ApplyWorkingMemoryOps(
        api.ApplyWorkingMemoryOpsRequest(
            parent="sessions/ops",
            expected_version=1,
            ops=[
                pb.SectionOp(
                    section="Errors & Corrections",
                    kind=pb.SECTION_OP_KIND_UPDATE,
                    content="- all good",
                )
            ],
        )
    )
    assert "wrong port 80" in second.working_memory.document  # append-only guard
    assert any(d.section == "Errors & Corrections" for d in second.decisions)
    stale = pb.SectionOp(section="Session Title", kind=pb.SECTION_OP_KIND_UPDATE, content="Stale")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ApplyWorkingMemoryOps(
            api.ApplyWorkingMemoryOpsRequest(parent="sessions/ops", expected_version=1, ops=[stale])
        )
    assert caught.value.code() == grpc.StatusCode.ABORTED
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ApplyWorkingMemoryOps(api.ApplyWorkingMemoryOpsRequest(parent="sessions/ops"))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details(caught.value)[1] == ["ops"]  # at least one op
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ApplyWorkingMemoryOps(
            api.ApplyWorkingMemoryOpsRequest(
                parent="sessions/ops",
                ops=[pb.SectionOp(section="Bogus", kind=pb.SECTION_OP_KIND_KEEP)],
            )
        )
    assert details(caught.value)[1] == ["ops[0].section"]
    wm = await stub.GetWorkingMemory(
        api.GetWorkingMemoryRequest(name="sessions/ops/workingMemories/1")
    )
    assert wm.version == 1 and next(s.name for s in wm.sections) == "Session Title"


async def test_working_memory_not_found_before_any(stub: Stub) -> None:
    await stub.CreateSession(api.CreateSessionRequest(session_id="nowm"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GetWorkingMemory(
            api.GetWorkingMemoryRequest(name="sessions/nowm/workingMemories/latest")
        )
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert details(caught.value)[0].reason == "WORKING_MEMORY_NOT_FOUND"
