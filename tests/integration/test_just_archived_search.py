"""A message is found by SearchArchives from the moment Phase 1 archives it (issue 39):
Phase 1 writes no full-text rows, and the search reads an archive that Phase 2 has not
indexed yet from its messages. A real server on loopback, a real SQLite file or a real
PostgreSQL, real gRPC clients; the Phase 2 worker is stopped so no job can index first."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from support import commit_flow
from support import wm_names as names
from support.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from support.production import settings_for
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application

ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
MODES = (api.SEARCH_MODE_LITERAL, api.SEARCH_MODE_RANKED, api.SEARCH_MODE_HYBRID)


@pytest.fixture(params=ENGINES)
async def app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Application]:
    extra: dict[str, object] = {}
    if request.param == "postgresql":
        extra["database_url"] = request.getfixturevalue("postgres_url")
    application = await start_application(settings_for(tmp_path, heartbeat_seconds=0.5, **extra))
    yield application
    await application.stop(grace=0.5)


def _said(i: int, text: str) -> pb.Message:
    return pb.Message(id=f"m{i}", role=pb.ROLE_USER, parts=[pb.Part(text=text)])


async def _search(
    stub: service_grpc.WorkingMemoryServiceStub, query: str, mode: int
) -> tuple[list[str], int]:
    answer = await stub.SearchArchives(
        api.SearchArchivesRequest(parent="sessions/s", query=query, mode=mode, page_size=5)  # type: ignore[arg-type]
    )
    return [names.last_segment(h.message) for h in answer.hits], answer.total_matches


async def _found_first(
    stub: service_grpc.WorkingMemoryServiceStub, query: str, wanted: str
) -> None:
    """Every mode finds ``wanted`` first; the literal and ranked ones find nothing else (the
    hybrid one adds the nearest messages by meaning)."""
    for mode in MODES:
        hits, total = await _search(stub, query, mode)
        assert hits[:1] == [wanted], mode
        if mode != api.SEARCH_MODE_HYBRID:
            assert (hits, total) == ([wanted], 1), mode


async def test_a_just_archived_message_is_found_by_every_mode_before_phase2(
    app: Application,
) -> None:
    await app.worker.stop()  # every job waits: nothing but Phase 1 has run
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = service_grpc.WorkingMemoryServiceStub(channel)
        await stub.CreateSession(api.CreateSessionRequest(session_id="s"))
        # Over 500 messages (the most a Phase 1 indexed itself before), the needle last.
        messages = [_said(i, f"routine status note number {i}") for i in range(600)]
        messages.append(_said(600, "The zeppelin hangar lease ends in March."))
        for start in range(0, len(messages), 200):
            await stub.AddMessages(
                api.AddMessagesRequest(parent="sessions/s", messages=messages[start : start + 200])
            )
        first = await stub.CreateCommit(commit_flow.create_request("s"))
        assert first.archived_message_count == 601  # Phase 1 is stored; nobody watches
        await _found_first(stub, "zeppelin hangar", "m600")
        # The first archive's earlier messages are found as well, each once.
        hits, total = await _search(stub, "routine status", api.SEARCH_MODE_RANKED)
        assert total == 600 and len(hits) == 5
        commit = await stub.GetCommit(api.GetCommitRequest(name=first.name))
        assert commit.state == pb.COMMIT_STATE_PENDING  # Phase 2 has not run


async def test_once_phase2_indexed_it_the_message_is_found_the_same(app: Application) -> None:
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = service_grpc.WorkingMemoryServiceStub(channel)
        await stub.CreateSession(api.CreateSessionRequest(session_id="s"))
        await stub.AddMessages(
            api.AddMessagesRequest(
                parent="sessions/s",
                messages=[_said(0, "The zeppelin hangar lease ends in March."), _said(1, "ok")],
            )
        )
        _, events = await commit_flow.commit(stub, "s")
        assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED  # its rows are written
        await _found_first(stub, "zeppelin hangar", "m0")
