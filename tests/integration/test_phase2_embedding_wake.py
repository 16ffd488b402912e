"""The memories a commit's extraction writes get their vectors right after it (issue 39: the
embedding loop is woken only by a completion that left rows without a vector, so a commit
that wrote no memory does not start a round of four backlog statements). A real server on
loopback with the offline provider and the real default embedder, a real SQLite file or a
real PostgreSQL, real gRPC clients; the loop's own interval (30 s) is far beyond the wait."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from support import commit_flow, wm_names
from support.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from support.production import settings_for
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application

ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
Stub = service_grpc.WorkingMemoryServiceStub


@pytest.fixture(params=ENGINES)
async def app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Application]:
    extra: dict[str, object] = {}
    if request.param == "postgresql":
        extra["database_url"] = request.getfixturevalue("postgres_url")
    application = await start_application(settings_for(tmp_path, **extra))
    assert application.settings.embedder == "wordllama"
    yield application
    await application.stop(grace=0.5)


async def _commit(stub: Stub, session: str, texts: list[str]) -> pb.CommitEvent:
    await stub.CreateSession(
        api.CreateSessionRequest(session_id=session, session=pb.Session(user_id="u1"))
    )
    roles = [pb.ROLE_USER, pb.ROLE_ASSISTANT]
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session(session),
            messages=[
                pb.Message(role=roles[i % 2], parts=[pb.Part(text=text)])
                for i, text in enumerate(texts)
            ],
        )
    )
    started = await stub.CreateCommit(commit_flow.create_request(session))
    events = [e async for e in stub.WatchCommit(api.WatchCommitRequest(name=started.name))]
    assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED
    return next(e for e in events if e.stage == pb.COMMIT_STAGE_MEMORIES_EXTRACTED)


async def _unembedded(stub: Stub) -> int:
    found = await stub.SearchMemories(
        api.SearchMemoriesRequest(owner=wm_names.user("u1"), query="parser")
    )
    return found.unembedded_rows


async def test_memories_a_commit_writes_are_embedded_at_once(app: Application) -> None:
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = Stub(channel)
        quiet = await _commit(stub, "quiet", ["ok", "sure"])
        assert not quiet.memories_extracted.created_memories
        extracted = await _commit(
            stub,
            "facts",
            [
                "I prefer tabs over spaces. We decided to ship the parser on Friday.",
                "Noted: the parser ships on Friday.",
            ],
        )
        assert extracted.memories_extracted.created_memories
        for _ in range(200):  # 10 s at most, a third of the loop's interval
            if await _unembedded(stub) == 0:
                break
            await asyncio.sleep(0.05)
        assert await _unembedded(stub) == 0
