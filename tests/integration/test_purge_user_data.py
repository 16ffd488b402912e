"""PurgeUserData over the real API on both engines (issue 35 point 4): every memory of the
user and every session of the user (with its messages, archives and tool outputs) is gone
from every read path when it answers, the counts say how much, another user's and an agent's
data stay, a retry with the same request id answers the same counts, bad input changes
nothing. The rows themselves are purged by the maintenance loop (checked in the tables)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from support import commit_flow, wm_names
from support.errors import details
from support.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from support.production import settings_for as make_settings
from support.providers import ProgrammableProvider
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application
from wm_server.services import user_data

Stub = service_grpc.WorkingMemoryServiceStub
ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.fixture(params=ENGINES)
async def app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Application]:
    extra: dict[str, object] = {}
    if request.param == "postgresql":
        extra["database_url"] = request.getfixturevalue("postgres_url")
    settings = make_settings(tmp_path, tool_output_inline_chars=1000, **extra)
    application = await start_application(settings, provider=ProgrammableProvider())
    yield application
    await application.stop(grace=0.5)


@pytest.fixture
async def stub(app: Application) -> AsyncIterator[Stub]:
    async with grpc.aio.insecure_channel(app.address) as channel:
        yield Stub(channel)


async def _remember(stub: Stub, owner: str, text: str) -> pb.Memory:
    reply = await stub.CreateMemory(
        api.CreateMemoryRequest(
            owner=owner, memory=pb.Memory(type=pb.MEMORY_TYPE_ENTITY, text=text)
        )
    )
    return reply.memory


async def _session_with_history(stub: Stub, session_id: str, user_id: str) -> None:
    """A session of the user with an archive and a stored tool output."""
    await stub.CreateSession(
        api.CreateSessionRequest(session_id=session_id, session=pb.Session(user_id=user_id))
    )
    long_output = "\n".join(f"line {n} of the {session_id} build log" for n in range(200))
    messages = [
        pb.Message(id="m0", role=pb.ROLE_USER, parts=[pb.Part(text=f"build {session_id}")]),
        pb.Message(
            id="m1",
            role=pb.ROLE_ASSISTANT,
            parts=[pb.Part(tool_use=pb.ToolUse(id="t1", name="sh", input_json="{}"))],
        ),
        pb.Message(
            id="m2",
            role=pb.ROLE_TOOL,
            parts=[pb.Part(tool_result=pb.ToolResult(tool_use_id="t1", content=long_output))],
        ),
        pb.Message(id="m3", role=pb.ROLE_ASSISTANT, parts=[pb.Part(text="the build passed")]),
    ]
    await stub.AddMessages(
        api.AddMessagesRequest(parent=wm_names.session(session_id), messages=messages)
    )
    _, events = await commit_flow.commit(stub, session_id)
    assert events[-1].terminal


async def _memory_texts(stub: Stub, owner: str) -> list[str]:
    texts = []
    for state in (pb.MEMORY_STATE_ACTIVE, pb.MEMORY_STATE_RETIRED, pb.MEMORY_STATE_SUPERSEDED):
        reply = await stub.ListMemories(api.ListMemoriesRequest(owner=owner, state=state))
        texts += [m.text for m in reply.memories]
    return sorted(texts)


async def _rows(app: Application, table: str) -> int:
    async with app.database.reader() as uow:
        row = await uow._conn.one(f"SELECT COUNT(*) FROM {table}", {})
    assert row is not None
    return int(row[0])


async def _code(call: object) -> grpc.StatusCode:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def test_purging_a_user_removes_their_memories_and_sessions(
    app: Application, stub: Stub
) -> None:
    u1, u2 = wm_names.user("u1"), wm_names.user("u2")
    agent = wm_names.agent("helper")
    old = await _remember(stub, u1, "Dana's ledger runs on MySQL")
    await _remember(stub, u1, "Dana lives in Lisbon")
    await stub.CreateMemory(
        api.CreateMemoryRequest(
            owner=u1,
            memory=pb.Memory(
                type=pb.MEMORY_TYPE_ENTITY,
                text="Dana's ledger runs on PostgreSQL",
                supersedes=[old.name],
            ),
        )
    )
    retired = await _remember(stub, u1, "Dana works on Fridays")
    await stub.RetireMemory(api.RetireMemoryRequest(name=retired.name, reason="moved"))
    await _remember(stub, u2, "Kim lives in Oslo")
    await _remember(stub, agent, "The helper answers in English")
    await _session_with_history(stub, "u1-a", "u1")
    await _session_with_history(stub, "u1-b", "u1")
    await _session_with_history(stub, "u2-a", "u2")
    assert len(await _memory_texts(stub, u1)) == 4  # superseded and retired ones count too
    assert await _rows(app, "tool_outputs") == 3  # one stored output per session
    assert await _rows(app, "archives") == 3

    request = api.PurgeUserDataRequest(user_id="u1", request_id="forget-u1")
    reply = await stub.PurgeUserData(request)
    assert (reply.purged_memory_count, reply.purged_session_count) == (4, 2)

    assert await _memory_texts(stub, u1) == []
    for session in ("u1-a", "u1-b"):
        for call in (
            stub.GetSession(api.GetSessionRequest(name=wm_names.session(session))),
            stub.ListArchives(api.ListArchivesRequest(parent=wm_names.session(session))),
            stub.SearchArchives(
                api.SearchArchivesRequest(parent=wm_names.session(session), query="build")
            ),
        ):
            assert await _code(call) is grpc.StatusCode.NOT_FOUND
    hits = await stub.SearchMemories(api.SearchMemoriesRequest(owner=u1, query="Dana ledger"))
    assert list(hits.hits) == []
    # Another user's and the agent's data stay.
    assert await _memory_texts(stub, u2) == ["Kim lives in Oslo"]
    assert await _memory_texts(stub, agent) == ["The helper answers in English"]
    kept = await stub.ListArchives(api.ListArchivesRequest(parent=wm_names.session("u2-a")))
    assert len(kept.archives) == 1
    listed = await stub.ListSessions(api.ListSessionsRequest())
    assert [s.name for s in listed.sessions] == ["sessions/u2-a"]

    # A retry answers the first counts; a new call finds nothing left.
    assert await stub.PurgeUserData(request) == reply
    again = await stub.PurgeUserData(api.PurgeUserDataRequest(user_id="u1"))
    assert (again.purged_memory_count, again.purged_session_count) == (0, 0)

    # The maintenance loop purges the sessions' rows: nothing of u1 is left in the tables.
    assert app.maintenance is not None
    await app.maintenance.round()
    async with app.database.reader() as uow:
        left = await uow.memory_lifecycle.mids_of_owner("default", "user:u1", 10)
        sessions = await uow.sessions.keys("default", user_id="u1")
        unlinked = await uow.sessions.unlinked()
    assert (left, sessions, unlinked) == ([], [], [])
    for table in ("tool_outputs", "archives", "sessions"):
        assert await _rows(app, table) == 1, table  # u2's
    assert await _rows(app, "messages") == 4
    # A user id used again starts afresh.
    await _session_with_history(stub, "u1-a", "u1")
    assert (
        len(
            (
                await stub.ListArchives(api.ListArchivesRequest(parent=wm_names.session("u1-a")))
            ).archives
        )
        == 1
    )


async def test_a_bad_user_id_is_invalid_and_purges_nothing(stub: Stub) -> None:
    owner = wm_names.user("u1")
    await _remember(stub, owner, "Dana lives in Lisbon")
    for bad in ("", "not a user/id", "u" * 129):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.PurgeUserData(api.PurgeUserDataRequest(user_id=bad))
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert details(caught.value)[1] == ["user_id"]
    assert await _memory_texts(stub, owner) == ["Dana lives in Lisbon"]


async def test_a_user_with_many_memories_is_purged_in_chunks(
    stub: Stub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More memories than a chunk (a unit of work each): all go, counted once."""
    monkeypatch.setattr(user_data, "CHUNK", 4)
    owner = wm_names.user("many")
    for n in range(11):
        await _remember(stub, owner, f"fact number {n} about the many user")
    reply = await stub.PurgeUserData(api.PurgeUserDataRequest(user_id="many"))
    assert (reply.purged_memory_count, reply.purged_session_count) == (11, 0)
    assert await _memory_texts(stub, owner) == []
