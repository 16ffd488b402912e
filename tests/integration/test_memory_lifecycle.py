"""A memory's lifecycle over the real API on both engines (issue 35 point 3): a memory that
replaces older ones marks them superseded with a validity interval and search prefers it;
expiry per memory and per type hides a memory at once and the maintenance loop deletes it;
near-duplicates are merged by the maintenance loop with a decision in the kept memory's
history. A real server on loopback, a real SQLite file, a real PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import field_mask_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from support import wm_names
from support.errors import details
from support.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from support.production import settings_for as make_settings
from support.providers import ProgrammableProvider
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application

Stub = service_grpc.WorkingMemoryServiceStub
ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
USER = wm_names.user("u1")
EVENT_DAYS = 2.0 / 86_400  # events are kept two seconds by default here


@pytest.fixture(params=ENGINES)
async def app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Application]:
    extra: dict[str, object] = {}
    if request.param == "postgresql":
        extra["database_url"] = request.getfixturevalue("postgres_url")
    settings = make_settings(
        tmp_path, memory_retention_days=f"event={EVENT_DAYS!r}", heartbeat_seconds=0.5, **extra
    )
    application = await start_application(settings, provider=ProgrammableProvider())
    yield application
    await application.stop(grace=0.5)


@pytest.fixture
async def stub(app: Application) -> AsyncIterator[Stub]:
    async with grpc.aio.insecure_channel(app.address) as channel:
        yield Stub(channel)


async def _create(stub: Stub, text: str, **memory: object) -> pb.Memory:
    kind = memory.pop("type", pb.MEMORY_TYPE_DECISION)
    reply = await stub.CreateMemory(
        api.CreateMemoryRequest(owner=USER, memory=pb.Memory(type=kind, text=text, **memory))
    )
    return reply.memory


async def _search(stub: Stub, query: str, *, superseded: bool = False) -> list[str]:
    reply = await stub.SearchMemories(
        api.SearchMemoriesRequest(owner=USER, query=query, include_superseded=superseded)
    )
    return [h.memory.text for h in reply.hits]


async def _listed(stub: Stub, state: int = pb.MEMORY_STATE_UNSPECIFIED) -> list[str]:
    reply = await stub.ListMemories(api.ListMemoriesRequest(owner=USER, state=state))
    return [m.text for m in reply.memories]


async def test_a_memory_that_replaces_an_older_one_supersedes_it(stub: Stub) -> None:
    old = await _create(stub, "The ledger runs on MySQL 8")
    when = Timestamp(seconds=1_767_225_600)  # 2026-01-01: the new fact holds from then
    new = await _create(
        stub, "The ledger runs on PostgreSQL 16", supersedes=[old.name], event_time=when
    )
    assert list(new.supersedes) == [old.name]
    assert new.valid_from == when and not new.HasField("valid_until")
    before = await stub.GetMemory(api.GetMemoryRequest(name=old.name))
    assert before.state == pb.MEMORY_STATE_SUPERSEDED
    assert before.superseded_by == new.name
    assert before.valid_until == when and before.valid_from == old.create_time

    assert await _search(stub, "ledger runs on") == ["The ledger runs on PostgreSQL 16"]
    assert await _search(stub, "ledger MySQL", superseded=True) == [
        "The ledger runs on PostgreSQL 16",  # the current one first, though it scores lower
        "The ledger runs on MySQL 8",
    ]
    assert await _listed(stub) == ["The ledger runs on PostgreSQL 16"]
    assert await _listed(stub, pb.MEMORY_STATE_SUPERSEDED) == ["The ledger runs on MySQL 8"]
    await stub.CreateSession(
        api.CreateSessionRequest(session_id="s1", session=pb.Session(user_id="u1"))
    )
    ask = pb.Message(id="q", role=pb.ROLE_USER, parts=[pb.Part(text="what runs the ledger?")])
    await stub.AddMessages(api.AddMessagesRequest(parent=wm_names.session("s1"), messages=[ask]))
    context = await stub.AssembleContext(
        api.AssembleContextRequest(
            name=wm_names.session("s1"),
            token_budget=50_000,
            memory_recall=api.MemoryRecall(enabled=True),
        )
    )
    assert "PostgreSQL 16" in str(context) and "MySQL" not in str(context)  # recall: current

    # Only another active memory of the owner can be superseded; nothing is stored otherwise.
    other = (
        await stub.CreateMemory(
            api.CreateMemoryRequest(
                owner=wm_names.user("u2"),
                memory=pb.Memory(type=pb.MEMORY_TYPE_DECISION, text="u2 uses SQLite"),
            )
        )
    ).memory
    for wrong in (old.name, other.name, "memories/mem_00000000000000000000", "nope"):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _create(stub, "The ledger runs on Oracle", supersedes=[wrong])
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        # A name of no memory is refused by the contract's pattern, at the element.
        field = "memory.supersedes[0]" if wrong == "nope" else "memory.supersedes"
        assert details(caught.value)[1] == [field]
    assert await _listed(stub) == ["The ledger runs on PostgreSQL 16"]


async def test_expired_memories_are_gone_from_reads_then_deleted(
    app: Application, stub: Stub
) -> None:
    soon = Timestamp(seconds=int(time.time()) + 2)
    timed = await _create(stub, "The demo account works until the review", expire_time=soon)
    event = await _create(stub, "The ledger review happened", type=pb.MEMORY_TYPE_EVENT)
    kept = await _create(stub, "The ledger is audited yearly")
    assert timed.expire_time == soon and not event.HasField("expire_time")
    assert len(await _listed(stub)) == 3

    # Retention by type is a default: a memory's own expire_time (set later) wins over it.
    later = Timestamp(seconds=int(time.time()) + 3600)
    updated = await stub.UpdateMemory(
        api.UpdateMemoryRequest(
            memory=pb.Memory(name=kept.name, expire_time=later),
            update_mask=field_mask_pb2.FieldMask(paths=["expire_time"]),
        )
    )
    assert updated.expire_time == later and updated.version == 1  # no new text version

    await asyncio.sleep(2.2)  # past both expiries: hidden before any maintenance round
    assert await _listed(stub) == ["The ledger is audited yearly"]
    assert await _search(stub, "review demo account") == []
    for gone in (timed, event):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetMemory(api.GetMemoryRequest(name=gone.name))
        assert caught.value.code() is grpc.StatusCode.NOT_FOUND

    assert app.maintenance is not None
    await app.maintenance.round()
    async with app.database.reader() as uow:
        rows = await uow.memories.of_owner(
            "default", "user:u1", [wm_names.last_segment(m.name) for m in (timed, event, kept)]
        )
    # deleted, not only hidden
    assert [r.memory_id for r in rows] == [wm_names.last_segment(kept.name)]


async def test_near_duplicates_are_merged_with_a_decision_record(
    app: Application, stub: Stub
) -> None:
    first = await _create(
        stub, "The user prefers tabs over spaces in Python code", type=pb.MEMORY_TYPE_PREFERENCE
    )
    twin = await _create(
        stub, "The user prefers tabs over spaces in all Python code",
        type=pb.MEMORY_TYPE_PREFERENCE,
    )  # fmt: skip
    other = await _create(
        stub, "The user prefers dark mode in every editor", type=pb.MEMORY_TYPE_PREFERENCE
    )
    same_words = await _create(stub, "The user prefers tabs over spaces in Python code now")

    assert app.maintenance is not None
    await app.maintenance.round()
    kept = await stub.GetMemory(api.GetMemoryRequest(name=first.name))
    assert kept.state == pb.MEMORY_STATE_ACTIVE and kept.version == 2
    (decision,) = kept.history
    assert wm_names.last_segment(twin.name) in decision.reason and "token-set" in decision.reason
    assert decision.text == first.text  # the text kept; the decision is the record
    absorbed = await stub.GetMemory(api.GetMemoryRequest(name=twin.name))
    assert absorbed.state == pb.MEMORY_STATE_RETIRED
    assert absorbed.retire_reason == f"merged into {wm_names.last_segment(first.name)}"
    for untouched in (other, same_words):  # not similar enough; another type
        found = await stub.GetMemory(api.GetMemoryRequest(name=untouched.name))
        assert found.state == pb.MEMORY_STATE_ACTIVE and found.version == 1
    assert sorted(await _search(stub, "tabs spaces")) == sorted([first.text, same_words.text])

    await app.maintenance.round()  # nothing new: no second decision
    again = await stub.GetMemory(api.GetMemoryRequest(name=first.name))
    assert again.version == 2


@pytest.mark.postgres
async def test_racing_successors_on_two_replicas_leave_one_consistent_link(
    tmp_path: Path,
    postgres_url: str,  # noqa: F811 (fixture)
) -> None:
    """16 callers at once, on two replicas of one PostgreSQL, each store a new fact
    superseding the same old one: one wins; the others are refused (the old one is no longer
    active) or ABORTED, never INTERNAL; the old memory names exactly the winner."""
    apps = [
        await start_application(
            make_settings(tmp_path / f"r{i}", database_url=postgres_url),
            provider=ProgrammableProvider(),
        )
        for i in range(2)
    ]
    try:
        channels = [grpc.aio.insecure_channel(a.address) for a in apps]
        stubs = [Stub(c) for c in channels]
        old = await _create(stubs[0], "The build runs on Jenkins")
        results = await asyncio.gather(
            *(
                _create(
                    stubs[i % 2],
                    f"The build runs on runner {i}",
                    supersedes=[old.name],
                )
                for i in range(16)
            ),
            return_exceptions=True,
        )
        won = [r for r in results if isinstance(r, pb.Memory)]
        assert len(won) == 1, results
        for error in results:
            if not isinstance(error, pb.Memory):
                assert isinstance(error, grpc.aio.AioRpcError), error
                assert error.code() in (
                    grpc.StatusCode.INVALID_ARGUMENT,
                    grpc.StatusCode.ABORTED,
                ), error
        after = await stubs[1].GetMemory(api.GetMemoryRequest(name=old.name))
        assert after.superseded_by == won[0].name
        assert list(won[0].supersedes) == [old.name]
        assert await _listed(stubs[1]) == [won[0].text]  # the losers stored nothing
        for channel in channels:
            await channel.close()
    finally:
        for application in apps:
            await application.stop(grace=0.5)
