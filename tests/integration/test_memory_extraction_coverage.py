"""Issue 35 points 1 and 2 on a real server over gRPC (SQLite file and PostgreSQL): the offline
extractor keeps the issue's conversation as a profile, a preference and a decision with its
reason, found from a new session of the user; a commit that keeps nothing says why (diff and
metric); PreviewMemoryExtraction shows the ops and verdicts and writes nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from integration.conftest import make_settings

from support import builders as b
from support import commit_flow, wm_names
from support.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from wm_core import MemoryOp, MemoryOpKind, memory_tool_arguments
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application
from wm_server.llm.offline import OfflineProvider
from wm_server.llm.port import MemoryRequest, ModelReply, Usage

Stub = service_grpc.WorkingMemoryServiceStub
ENGINES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]

ISSUE_TURNS = [
    b.user("I prefer tabs over spaces, and my name is Dana Whitfield.", "t1"),
    b.assistant("Nice to meet you, Dana. What are we building?", "t2"),
    b.user("A ledger for the shop's double-entry books.", "t3"),
    b.assistant("Which database should the ledger use?", "t4"),
    b.user("We decided to use PostgreSQL 16 for the ledger because of logical replication.", "t5"),
    b.assistant("Good, let's go with that.", "t6"),
    b.user("Thanks.", "t7"),
]


class Answering(OfflineProvider):
    """The offline provider, whose memory answer a test can replace."""

    def __init__(self) -> None:
        self.answer: ModelReply | None = None

    async def extract_memories(self, request: MemoryRequest) -> ModelReply:
        if self.answer is not None:
            return self.answer
        return await super().extract_memories(request)


@pytest.fixture(params=ENGINES)
def database_url(request: pytest.FixtureRequest) -> str | None:
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return None


@pytest.fixture
def provider() -> Answering:
    return Answering()


@pytest.fixture
async def served(
    tmp_path: Path, database_url: str | None, provider: Answering
) -> AsyncIterator[tuple[Stub, Application]]:
    settings = make_settings(tmp_path, database_url=database_url, heartbeat_seconds=0.5)
    app = await start_application(settings, provider=provider)
    try:
        async with grpc.aio.insecure_channel(app.address) as channel:
            yield Stub(channel), app
    finally:
        await app.stop(grace=0.5)


async def _session(stub: Stub, user: str) -> str:
    name = f"s-{uuid.uuid4().hex[:10]}"
    await stub.CreateSession(
        api.CreateSessionRequest(session_id=name, session=pb.Session(user_id=user))
    )
    return name


async def _commit(stub: Stub, session: str) -> pb.MemoryDiff:
    """Commit everything; the diff its MEMORIES_EXTRACTED event streamed."""
    started = await stub.CreateCommit(commit_flow.create_request(session), timeout=60)
    call = stub.WatchCommit(api.WatchCommitRequest(name=started.name), timeout=60)
    diff = None
    async for event in call:
        if event.stage == pb.COMMIT_STAGE_MEMORIES_EXTRACTED:
            diff = event.memories_extracted
        if event.terminal:
            break
    assert diff is not None
    return diff


async def _memories(stub: Stub, user: str) -> list[pb.Memory]:
    found = await stub.ListMemories(api.ListMemoriesRequest(owner=wm_names.user(user)))
    return list(found.memories)


def _empty_count(app: Application, reason: str) -> float:
    assert app.metrics is not None
    value = app.metrics.registry.get_sample_value(
        "wm_memory_extraction_empty_total", {"reason": reason}
    )
    return value or 0.0


async def _counted(app: Application, reason: str, expected: float) -> float:
    """The counter once it reads ``expected`` (or after 10 s): the worker counts an empty
    extraction once its completion is committed, and the terminal event can reach the client
    first (PostgreSQL's notification wakes the watcher before the worker runs on)."""
    deadline = asyncio.get_running_loop().time() + 10
    while (value := _empty_count(app, reason)) != expected:
        if asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.01)
    return value


async def test_the_issue_conversation_is_kept_as_profile_preference_and_decision(
    served: tuple[Stub, Application],
) -> None:
    stub, _ = served
    first = await _session(stub, "u1")
    await stub.AddMessages(
        api.AddMessagesRequest(parent=wm_names.session(first), messages=ISSUE_TURNS)
    )
    diff = await _commit(stub, first)
    assert len(diff.created_memories) == 3
    assert diff.empty_reason == pb.MEMORY_EXTRACTION_EMPTY_REASON_UNSPECIFIED
    kept = {m.type: m for m in await _memories(stub, "u1")}
    assert kept[pb.MEMORY_TYPE_PROFILE].text == "The user's name is Dana Whitfield."
    assert kept[pb.MEMORY_TYPE_PREFERENCE].text == "The user prefers tabs over spaces."
    decision = kept[pb.MEMORY_TYPE_DECISION]
    assert "PostgreSQL 16" in decision.text and "logical replication" in decision.text
    assert decision.fields["reason"] == "of logical replication"
    assert decision.fields["agreed_by"] == "assistant"
    # provenance: the session, the archive and the two messages (the statement, the agreement)
    (source,) = decision.sources
    assert (source.session, source.archive) == (
        wm_names.session(first),
        wm_names.archive(first, "archive_001"),
    )
    assert list(source.messages) == [f"sessions/{first}/messages/{m}" for m in ("t5", "t6")]

    later = await _session(stub, "u1")
    hits = await stub.SearchMemories(
        api.SearchMemoriesRequest(
            owner=wm_names.session(later),
            query="which database did we decide on for the ledger",
        )
    )
    assert hits.hits and hits.hits[0].memory.name == decision.name


async def test_a_commit_that_keeps_nothing_says_why_in_its_diff_and_a_metric(
    served: tuple[Stub, Application], provider: Answering
) -> None:
    stub, app = served
    session = await _session(stub, "u2")
    chat = [b.user("What's the difference between a list and a tuple?"), b.assistant("Mutability.")]
    await stub.AddMessages(api.AddMessagesRequest(parent=wm_names.session(session), messages=chat))
    before = _empty_count(app, "nothing_new")
    diff = await _commit(stub, session)
    assert not diff.created_memories
    assert diff.state == pb.MEMORY_EXTRACTION_STATE_EXTRACTED
    assert diff.empty_reason == pb.MEMORY_EXTRACTION_EMPTY_REASON_NOTHING_NEW
    commits = await stub.ListCommits(api.ListCommitsRequest(parent=wm_names.session(session)))
    stored = await stub.GetCommit(api.GetCommitRequest(name=commits.commits[0].name))
    assert stored.memory_diff.empty_reason == pb.MEMORY_EXTRACTION_EMPTY_REASON_NOTHING_NEW
    assert await _counted(app, "nothing_new", before + 1) == before + 1

    # every op refused: a RETIRE of a memory the owner does not have
    provider.answer = ModelReply(
        memory_tool_arguments(
            [MemoryOp(MemoryOpKind.RETIRE, target_ids=("mem_" + "0" * 20,), reason="gone")]
        ),
        "tool_use",
        Usage(llm_calls=1),
    )
    await stub.AddMessages(api.AddMessagesRequest(parent=wm_names.session(session), messages=chat))
    diff = await _commit(stub, session)
    assert diff.empty_reason == pb.MEMORY_EXTRACTION_EMPTY_REASON_ALL_REFUSED
    assert diff.refused and await _counted(app, "all_refused", 1) == 1

    # the provider answered in prose, without the tool
    provider.answer = ModelReply(None, "end_turn", Usage(llm_calls=1), text="Nothing to keep.")
    await stub.AddMessages(api.AddMessagesRequest(parent=wm_names.session(session), messages=chat))
    diff = await _commit(stub, session)
    assert diff.state == pb.MEMORY_EXTRACTION_STATE_FAILED
    assert diff.empty_reason == pb.MEMORY_EXTRACTION_EMPTY_REASON_NO_TOOL_CALL
    assert await _counted(app, "no_tool_call", 1) == 1


async def test_preview_shows_ops_and_verdicts_and_writes_nothing(
    served: tuple[Stub, Application],
) -> None:
    stub, _ = served
    session = await _session(stub, "u3")
    await stub.AddMessages(
        api.AddMessagesRequest(parent=wm_names.session(session), messages=ISSUE_TURNS)
    )
    before = await stub.GetSession(api.GetSessionRequest(name=wm_names.session(session)))

    live = await stub.PreviewMemoryExtraction(
        api.PreviewMemoryExtractionRequest(name=wm_names.session(session))
    )
    assert live.message_count == len(ISSUE_TURNS)
    assert live.state == pb.MEMORY_EXTRACTION_STATE_EXTRACTED
    assert [(op.kind, op.type, op.verdict) for op in live.ops] == [
        (pb.MEMORY_OP_KIND_CREATE, pb.MEMORY_TYPE_PREFERENCE, pb.MEMORY_OP_VERDICT_ACCEPTED),
        (pb.MEMORY_OP_KIND_CREATE, pb.MEMORY_TYPE_PROFILE, pb.MEMORY_OP_VERDICT_ACCEPTED),
        (pb.MEMORY_OP_KIND_CREATE, pb.MEMORY_TYPE_DECISION, pb.MEMORY_OP_VERDICT_ACCEPTED),
    ]
    assert live.ops[2].fields["reason"] == "of logical replication"
    # nothing written: no memory, no commit, the session as it was
    assert await _memories(stub, "u3") == []
    commits = await stub.ListCommits(api.ListCommitsRequest(parent=wm_names.session(session)))
    assert list(commits.commits) == []
    after = await stub.GetSession(api.GetSessionRequest(name=wm_names.session(session)))
    assert after == before

    # after the commit, a preview of its archive finds only what is already remembered
    await _commit(stub, session)
    again = await stub.PreviewMemoryExtraction(
        api.PreviewMemoryExtractionRequest(
            name=wm_names.session(session), archives=[wm_names.archive(session, "archive_001")]
        )
    )
    assert again.message_count == len(ISSUE_TURNS) and list(again.ops) == []
    assert again.empty_reason == pb.MEMORY_EXTRACTION_EMPTY_REASON_NOTHING_NEW

    # given messages, resolved against today
    given = await stub.PreviewMemoryExtraction(
        api.PreviewMemoryExtractionRequest(
            name=wm_names.session(session), messages=[b.user("My sister Laura lives in Toronto.")]
        )
    )
    assert [(op.type, op.text) for op in given.ops] == [
        (pb.MEMORY_TYPE_ENTITY, "The user's sister Laura lives in Toronto.")
    ]
    assert len(await _memories(stub, "u3")) == 3


async def test_preview_rejects_bad_requests_clearly(served: tuple[Stub, Application]) -> None:
    stub, _ = served
    session = await _session(stub, "u4")
    cases: list[tuple[api.PreviewMemoryExtractionRequest, grpc.StatusCode]] = [
        (
            api.PreviewMemoryExtractionRequest(
                name=wm_names.session(session),
                archives=[wm_names.archive(session, "archive_001")],
                messages=[b.user("hi")],
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            api.PreviewMemoryExtractionRequest(
                name=wm_names.session(session), archives=[wm_names.archive(session, "nope")]
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            api.PreviewMemoryExtractionRequest(
                name=wm_names.session(session), archives=[wm_names.archive(session, "archive_009")]
            ),
            grpc.StatusCode.NOT_FOUND,
        ),
        (
            api.PreviewMemoryExtractionRequest(name=wm_names.session("missing")),
            grpc.StatusCode.NOT_FOUND,
        ),
    ]
    for request, code in cases:
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await stub.PreviewMemoryExtraction(request)
        assert error.value.code() == code, request
