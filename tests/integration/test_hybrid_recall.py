"""Hybrid recall over the real API (issue 34): a real server on loopback with the embedded
default embedder, a real SQLite file or a real PostgreSQL, real gRPC clients. Phase 2 embeds
what a commit archives, a memory is embedded after it is written, SearchArchives'
SEARCH_MODE_HYBRID and SearchMemories fuse both rankings and report each part, and an
embedder that is off or down answers lexically with the flag set."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from support import commit_flow
from support import wm_names as names
from support.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from support.production import settings_for
from support.providers import ProgrammableProvider
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application
from wm_server.config import ConfigurationError

Stub = service_grpc.WorkingMemoryServiceStub
ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
CONVERSATION = [
    "We settled on PostgreSQL for the ledger service because of its transactions.",
    "The flaky integration test in the billing module was fixed yesterday.",
    "My sister just started a pottery class on Tuesday evenings.",
    "Run the linter before you push the branch.",
]


async def _serve(tmp_path: Path, **settings: object) -> Application:
    return await start_application(
        settings_for(tmp_path, heartbeat_seconds=0.5, **settings), provider=ProgrammableProvider()
    )


@pytest.fixture(params=ENGINES)
async def app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Application]:
    extra: dict[str, object] = {}
    if request.param == "postgresql":
        extra["database_url"] = request.getfixturevalue("postgres_url")
    application = await _serve(tmp_path, **extra)
    yield application
    await application.stop(grace=0.5)


async def _conversation(stub: Stub, session: str = "s") -> None:
    await stub.CreateSession(
        api.CreateSessionRequest(session_id=session, session=pb.Session(user_id="u1"))
    )
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=names.session(session),
            messages=[
                pb.Message(id=f"m{i}", role=pb.ROLE_USER, parts=[pb.Part(text=t)])
                for i, t in enumerate(CONVERSATION)
            ],
        )
    )
    _, events = await commit_flow.commit(stub, session)
    assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED


def _hybrid(query: str, **fields: object) -> api.SearchArchivesRequest:
    return api.SearchArchivesRequest(
        parent="sessions/s", query=query, mode=api.SEARCH_MODE_HYBRID, **fields
    )


async def test_a_completed_commit_is_searchable_by_meaning(app: Application) -> None:
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = Stub(channel)
        await _conversation(stub)
        answer = await stub.SearchArchives(_hybrid("when did she begin ceramics lessons"))
        assert answer.semantic_recall == api.SEMANTIC_RECALL_FULL
        assert answer.unembedded_rows == 0
        assert answer.hits[0].message == "sessions/s/messages/m2"  # no word in common: by meaning
        assert answer.hits[0].dense_score > 0 and answer.hits[0].lexical_score == 0
        for hit in answer.hits:
            assert hit.score == pytest.approx(hit.lexical_score + hit.dense_score)
        both = await stub.SearchArchives(_hybrid("ledger database choice"))
        assert both.hits[0].message == "sessions/s/messages/m0"
        assert both.hits[0].lexical_score > 0 and both.hits[0].dense_score > 0
        strict = await stub.SearchArchives(_hybrid("ledger database choice", min_score=0.9))
        assert [h.message for h in strict.hits] == ["sessions/s/messages/m0"]

        for request, field in (
            (api.SearchArchivesRequest(parent="sessions/s", query="x", mode=7), "mode"),  # type: ignore[arg-type]
            (_hybrid("ledger", min_score=1.5), "min_score"),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.SearchArchives(request)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert field in (caught.value.details() or "")


async def test_a_written_memory_is_embedded_in_the_background(app: Application) -> None:
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = Stub(channel)
        await stub.CreateSession(
            api.CreateSessionRequest(session_id="s", session=pb.Session(user_id="u1"))
        )
        owner = "users/u1"
        for text in ("Started a pottery class", "The ledger runs on PostgreSQL"):
            await stub.CreateMemory(
                api.CreateMemoryRequest(
                    owner=owner, memory=pb.Memory(type=pb.MEMORY_TYPE_EVENT, text=text)
                )
            )
        request = api.SearchMemoriesRequest(owner=owner, query="ceramics", page_size=1)
        for _ in range(100):  # the loop embeds it shortly after the write
            answer = await stub.SearchMemories(request)
            if answer.semantic_recall == api.SEMANTIC_RECALL_FULL:
                break
            await asyncio.sleep(0.05)
        assert answer.semantic_recall == api.SEMANTIC_RECALL_FULL
        assert answer.hits[0].memory.text == "Started a pottery class"
        assert answer.hits[0].dense_score > 0

        # AssembleContext recalls the same way and says how the memories were ranked.
        await stub.AddMessages(_ask("s", "ceramics"))  # as the search above
        context = await stub.AssembleContext(_recalling("s"))
        assert context.semantic_recall == api.SEMANTIC_RECALL_FULL
        assert answer.hits[0].memory.name in context.recalled_memories
        plain = await stub.AssembleContext(
            api.AssembleContextRequest(name="sessions/s", token_budget=8_000)
        )
        assert plain.semantic_recall == api.SEMANTIC_RECALL_UNSPECIFIED  # no recall asked


def _ask(session: str, text: str) -> api.AddMessagesRequest:
    return api.AddMessagesRequest(
        parent=names.session(session),
        messages=[pb.Message(role=pb.ROLE_USER, parts=[pb.Part(text=text)])],
    )


def _recalling(session: str) -> api.AssembleContextRequest:
    return api.AssembleContextRequest(
        name=names.session(session),
        token_budget=8_000,
        memory_recall=api.MemoryRecall(enabled=True),
    )


async def test_a_query_of_symbols_only_is_matched_literally(app: Application) -> None:
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = Stub(channel)
        await stub.CreateSession(api.CreateSessionRequest(session_id="s"))
        texts = ['Then run grep {"pattern": "TODO"} over src/', "No braces in this one."]
        await stub.AddMessages(
            api.AddMessagesRequest(
                parent="sessions/s",
                messages=[
                    pb.Message(id=f"m{i}", role=pb.ROLE_USER, parts=[pb.Part(text=t)])
                    for i, t in enumerate(texts)
                ],
            )
        )
        _, events = await commit_flow.commit(stub, "s")
        assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED
        answer = await stub.SearchArchives(_hybrid('{"'))  # no word for the index to rank
        assert [h.message for h in answer.hits] == ["sessions/s/messages/m0"]
        assert answer.total_matches == 1
        hit = answer.hits[0]
        assert (hit.score, hit.lexical_score, hit.dense_score) == (1.0, 1.0, 0.0)
        assert '{"pattern"' in hit.snippet
        nothing = await stub.SearchArchives(_hybrid("}}}"))
        assert not nothing.hits and nothing.total_matches == 0


async def test_no_embedder_or_a_dead_one_answers_lexically_with_the_flag(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    for settings, flag in (
        ({"embedder": "none"}, api.SEMANTIC_RECALL_OFF),
        (
            {"embedder": "openai", "embedder_base_url": f"http://127.0.0.1:{dead}/v1",
             "embedder_dimensions": 8, "embedder_max_retries": 0},
            api.SEMANTIC_RECALL_DEGRADED,
        ),
    ):  # fmt: skip
        folder = tmp_path / str(flag)
        app = await _serve(folder, **settings)
        try:
            async with grpc.aio.insecure_channel(app.address) as channel:
                stub = Stub(channel)
                await _conversation(stub)
                answer = await stub.SearchArchives(_hybrid("ledger PostgreSQL"))
                assert answer.semantic_recall == flag
                assert answer.hits[0].message == "sessions/s/messages/m0"
                assert answer.hits[0].dense_score == 0
                memories = await stub.SearchMemories(
                    api.SearchMemoriesRequest(owner="users/u1", query="x")
                )
                assert memories.semantic_recall == flag
                await stub.AddMessages(_ask("s", "what did we pick for the ledger?"))
                context = await stub.AssembleContext(_recalling("s"))
                assert context.semantic_recall == flag
            if flag == api.SEMANTIC_RECALL_DEGRADED:
                assert app.metrics is not None
                degraded = app.metrics.registry.get_sample_value(
                    "wm_recall_degraded_total", {"reason": "unavailable"}
                )
                assert degraded is not None and degraded >= 2
        finally:
            await app.stop(grace=0.5)


async def test_a_vector_of_the_wrong_length_is_refused_at_start(tmp_path: Path) -> None:
    app = await _serve(tmp_path)
    try:
        async with grpc.aio.insecure_channel(app.address) as channel:
            await _conversation(Stub(channel))
    finally:
        await app.stop(grace=0.5)
    conn = sqlite3.connect(tmp_path / "wm.sqlite3")
    with conn:
        conn.execute("UPDATE message_vectors SET dims = 300, vector = zeroblob(1200)")
    conn.close()
    with pytest.raises(ConfigurationError, match="do not have 256 dimensions"):
        await _serve(tmp_path)
