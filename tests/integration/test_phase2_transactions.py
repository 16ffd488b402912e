"""How many write transactions one commit's Phase 2 makes (issue 39): a real server on
loopback with the offline provider and the default embedder, a real SQLite file or a real
PostgreSQL, real gRPC clients; the writes counted at the engine (support/write_count.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from support import commit_flow, wm_names
from support.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from support.production import settings_for
from support.write_count import counting_writes
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application

ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
CONVERSATION = [
    (pb.ROLE_USER, "I prefer tabs over spaces. We decided to ship the parser on Friday."),
    (pb.ROLE_ASSISTANT, "Noted: the parser ships on Friday. I renamed src/parser.py."),
    (pb.ROLE_USER, "My manager Dana Ito reviews the release on 2026-12-04."),
    (pb.ROLE_ASSISTANT, "Dana Ito reviews it on 2026-12-04; the release notes are drafted."),
]


@pytest.fixture(params=ENGINES)
async def app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Application]:
    extra: dict[str, object] = {}
    if request.param == "postgresql":
        extra["database_url"] = request.getfixturevalue("postgres_url")
    # The model boundary's write is the first request's; a later one writes again only a
    # progress period after it, which a loaded machine could reach between the two calls.
    application = await start_application(
        settings_for(tmp_path, phase2_progress_seconds=60.0, **extra)
    )
    yield application
    await application.stop(grace=0.5)


async def _commit(
    stub: service_grpc.WorkingMemoryServiceStub, session: str, user: str
) -> list[pb.CommitEvent]:
    await stub.CreateSession(
        api.CreateSessionRequest(session_id=session, session=pb.Session(user_id=user))
    )
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session(session),
            messages=[
                pb.Message(role=role, parts=[pb.Part(text=text)]) for role, text in CONVERSATION
            ],
        )
    )
    started = await stub.CreateCommit(commit_flow.create_request(session))
    return [e async for e in stub.WatchCommit(api.WatchCommitRequest(name=started.name))]


async def test_a_one_call_commit_writes_three_transactions_in_phase2(app: Application) -> None:
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = service_grpc.WorkingMemoryServiceStub(channel)
        await _commit(stub, "warm", "u0")  # the first commit of a process loads what it needs
        with counting_writes(app.database) as writes:
            events = await _commit(stub, "counted", "u1")
    assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED
    stages = [e.stage for e in events]
    # The commit made the model calls whose events are counted here: the update and the
    # memory extraction, each started and finished, and the extraction wrote memories.
    assert stages.count(pb.COMMIT_STAGE_LLM_REQUEST_SENT) == 2
    assert stages.count(pb.COMMIT_STAGE_LLM_RESPONSE_RECEIVED) == 2
    extracted = next(e for e in events if e.stage == pb.COMMIT_STAGE_MEMORIES_EXTRACTED)
    assert extracted.memories_extracted.created_memories
    # Claim, the durable boundary before the model is asked, completion.
    assert writes.phase2 == [
        "wm_server.phase2.store.claim",
        "wm_server.phase2.store.record",
        "wm_server.phase2.store.complete",
    ], writes.by
