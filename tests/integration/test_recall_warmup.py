"""The recall indexes are warmed after a restart (issue 34): a real server on a real SQLite
file or a real PostgreSQL, stopped and started again over the same data, reads the memories
of the owners written last and the archived rows of the sessions archived last into its
in-process indexes in the background, counts them in its metrics, and the first search then
finds them held."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from support import commit_flow, wm_names
from support.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from support.production import settings_for
from support.providers import ProgrammableProvider
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application

ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


async def _serve(tmp_path: Path, extra: dict[str, object]) -> Application:
    return await start_application(
        settings_for(tmp_path, heartbeat_seconds=0.5, **extra), provider=ProgrammableProvider()
    )


def _warmed(app: Application, kind: str) -> float:
    assert app.metrics is not None
    value = app.metrics.registry.get_sample_value("wm_recall_warmed_total", {"kind": kind})
    return value or 0.0


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_restart_warms_the_recall_indexes(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    extra: dict[str, object] = {}
    if engine == "postgresql":
        extra["database_url"] = request.getfixturevalue("postgres_url")
    app = await _serve(tmp_path, extra)
    owner = wm_names.user("u1")
    try:
        async with grpc.aio.insecure_channel(app.address) as channel:
            stub = service_grpc.WorkingMemoryServiceStub(channel)
            await stub.CreateSession(
                api.CreateSessionRequest(session_id="s", session=pb.Session(user_id="u1"))
            )
            await stub.AddMessages(
                api.AddMessagesRequest(
                    parent=wm_names.session("s"),
                    messages=[
                        pb.Message(id="m1", role=pb.ROLE_USER, parts=[pb.Part(text="The ledger")]),
                        pb.Message(id="m2", role=pb.ROLE_USER, parts=[pb.Part(text="runs on PG")]),
                    ],
                )
            )
            _, events = await commit_flow.commit(stub, "s")
            stages = [e.stage for e in events]
            assert stages[-1] == pb.COMMIT_STAGE_COMPLETED
            for text in ("Started a pottery class", "The ledger runs on PostgreSQL"):
                await stub.CreateMemory(
                    api.CreateMemoryRequest(
                        owner=owner, memory=pb.Memory(type=pb.MEMORY_TYPE_EVENT, text=text)
                    )
                )
    finally:
        await app.stop(grace=0.5)

    app = await _serve(tmp_path, extra)
    try:
        assert app.warmup is not None
        await asyncio.wait_for(app.warmup.finished.wait(), 30)
        recall = app.warmup.recall
        async with app.database.reader() as uow:
            session = await uow.sessions.find("default", "s")
        assert session is not None
        # Held before any search asked for them, and counted.
        assert recall.memory_index.holds("default", "user:u1")
        assert recall.lexical.holds(session.sid)
        assert _warmed(app, "memories") == 1
        assert _warmed(app, "sessions") == 1
        async with grpc.aio.insecure_channel(app.address) as channel:
            stub = service_grpc.WorkingMemoryServiceStub(channel)
            found = await stub.SearchMemories(
                api.SearchMemoriesRequest(owner=owner, query="pottery", page_size=1)
            )
            assert found.hits[0].memory.text == "Started a pottery class"
    finally:
        await app.stop(grace=0.5)


async def test_the_recall_indexes_hold_what_wm_recall_cache_mb_gives_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WM_RECALL_CACHE_MB", "48")
    app = await _serve(tmp_path, {})
    try:
        assert app.warmup is not None
        recall = app.warmup.recall
        mib = 1024 * 1024
        # A sixth, a third and a half of 48 MiB; the default is 768 MiB in the same shares.
        assert (
            recall.lexical.max_bytes,
            recall.cache.max_bytes,
            recall.memory_index.max_bytes,
        ) == (8 * mib, 16 * mib, 24 * mib)
    finally:
        await app.stop(grace=0.5)
