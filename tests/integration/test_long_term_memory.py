"""Long-term memory over the real API on both engines (issue 20): a memory of user U made in
session 1 is searched and recalled in session 2 of U, never for another user or tenant;
forget removes it everywhere; corrections keep history; ranked archive search; errors,
paging and idempotent retries. A real server on loopback, a real SQLite file, a real
PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import field_mask_pb2, json_format
from google.protobuf.timestamp_pb2 import Timestamp

from support import commit_flow, wm_names
from support.errors import details
from support.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from support.production import settings_for as make_settings
from support.providers import ProgrammableProvider
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application

Stub = service_grpc.WorkingMemoryServiceStub
ALPHA_KEY = "alpha-0123456789abcdef-key"
BETA_KEY = "beta-fedcba9876543210-key"
ALPHA = (("authorization", f"Bearer {ALPHA_KEY}"),)
BETA = (("authorization", f"Bearer {BETA_KEY}"),)
ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.fixture(params=ENGINES)
async def app(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Application]:
    extra: dict[str, object] = {}
    if request.param == "postgresql":
        extra["database_url"] = request.getfixturevalue("postgres_url")
    settings = make_settings(
        tmp_path, api_keys=f"alpha:{ALPHA_KEY}, beta:{BETA_KEY}", heartbeat_seconds=0.5, **extra
    )
    application = await start_application(settings, provider=ProgrammableProvider())
    yield application
    await application.stop(grace=0.5)


@pytest.fixture
async def stub(app: Application) -> AsyncIterator[Stub]:
    async with grpc.aio.insecure_channel(app.address) as channel:
        yield Stub(channel)


def _user(text: str, mid: str) -> pb.Message:
    return pb.Message(id=mid, role=pb.ROLE_USER, parts=[pb.Part(text=text)])


async def _session(stub: Stub, name: str, user: str = "", md: object = ALPHA) -> None:
    await stub.CreateSession(
        api.CreateSessionRequest(session_id=name, session=pb.Session(user_id=user)), metadata=md
    )


async def _remember(stub: Stub, text: str, session: str, rid: str = "") -> pb.Memory:
    reply = await stub.CreateMemory(
        api.CreateMemoryRequest(
            owner=wm_names.session(session),
            memory=pb.Memory(type=pb.MEMORY_TYPE_PREFERENCE, text=text),
            request_id=rid,
        ),
        metadata=ALPHA,
    )
    return reply.memory


async def _assemble(stub: Stub, session: str, md: object = ALPHA) -> api.AssembleContextResponse:
    return await stub.AssembleContext(
        api.AssembleContextRequest(
            name=wm_names.session(session),
            token_budget=50_000,
            memory_recall=api.MemoryRecall(enabled=True),
        ),
        metadata=md,
    )


async def _search(stub: Stub, query: str, owner: str) -> list[str]:
    reply = await stub.SearchMemories(
        api.SearchMemoriesRequest(owner=owner, query=query), metadata=ALPHA
    )
    return [h.memory.name for h in reply.hits]


async def _code(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    return caught.value.code()


async def test_a_users_memory_is_found_and_recalled_in_their_next_session_only(
    stub: Stub,
) -> None:
    await _session(stub, "s1", "u1")
    memory = await _remember(stub, "Prefers answers in Portuguese", "s1", rid="r1")
    assert memory.owner == "users/u1" and memory.sources[0].session == "sessions/s1"
    again = await _remember(stub, "Prefers answers in Portuguese", "s1", rid="r1")
    assert again.name == memory.name  # the retry answers the same
    await _session(stub, "s2", "u1")
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session("s2"),
            messages=[_user("Which language do I prefer for answers?", "q")],
        ),
        metadata=ALPHA,
    )
    assert await _search(stub, "language answers", wm_names.session("s2")) == [memory.name]
    context = await _assemble(stub, "s2")
    assert list(context.recalled_memories) == [memory.name]
    assert "Prefers answers in Portuguese" in context.system_prompt_addition
    recalled = [p for p in context.parts if p.part == api.CONTEXT_PART_RECALLED_MEMORIES]
    assert context.memory_tokens > 0 and context.memory_tokens == recalled[0].kept_tokens
    off = await stub.AssembleContext(
        api.AssembleContextRequest(name=wm_names.session("s2"), token_budget=50_000), metadata=ALPHA
    )
    assert "Portuguese" not in off.system_prompt_addition and not off.recalled_memories
    assert off.memory_tokens == 0
    # Another user's session, and another tenant's session of the same user id: nothing.
    await _session(stub, "other", "u2")
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session("other"), messages=[_user("answers language?", "q")]
        ),
        metadata=ALPHA,
    )
    assert not (await _assemble(stub, "other")).recalled_memories
    await _session(stub, "s2", "u1", md=BETA)
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session("s2"), messages=[_user("answers language?", "q")]
        ),
        metadata=BETA,
    )
    assert not (await _assemble(stub, "s2", md=BETA)).recalled_memories
    code = await _code(
        stub.GetMemory(api.GetMemoryRequest(name=wm_names.memory(memory.name)), metadata=BETA)
    )
    assert code == grpc.StatusCode.NOT_FOUND
    # Forget: gone from search, assembly and history.
    await stub.DeleteMemory(
        api.DeleteMemoryRequest(name=wm_names.memory(memory.name)), metadata=ALPHA
    )
    assert await _search(stub, "language answers", wm_names.user("u1")) == []
    assert not (await _assemble(stub, "s2")).recalled_memories
    code = await _code(
        stub.GetMemory(api.GetMemoryRequest(name=wm_names.memory(memory.name)), metadata=ALPHA)
    )
    assert code == grpc.StatusCode.NOT_FOUND


async def test_a_correction_keeps_history_and_lists_page(stub: Stub) -> None:
    await _session(stub, "s", "u1")
    first = await _remember(stub, "Lives in Lisbon", "s")
    updated = await stub.UpdateMemory(
        api.UpdateMemoryRequest(
            memory=pb.Memory(name=first.name, text="Lives in Porto"),
            update_mask=field_mask_pb2.FieldMask(paths=["text"]),
            reason="moved",
            request_id="u-1",
        ),
        metadata=ALPHA,
    )
    assert updated.text == "Lives in Porto" and updated.version == 2
    got = await stub.GetMemory(
        api.GetMemoryRequest(name=wm_names.memory(first.name)), metadata=ALPHA
    )
    assert [(v.text, v.reason) for v in got.history] == [("Lives in Lisbon", "moved")]
    for n in range(4):
        await _remember(stub, f"Fact {n}", "s")
    page = await stub.ListMemories(
        api.ListMemoriesRequest(owner=wm_names.user("u1"), page_size=3), metadata=ALPHA
    )
    rest = await stub.ListMemories(
        api.ListMemoriesRequest(
            owner=wm_names.user("u1"), page_size=3, page_token=page.next_page_token
        ),
        metadata=ALPHA,
    )
    assert len(page.memories) == 3 and len(rest.memories) == 2 and not rest.next_page_token
    assert rest.memories[-1].name == first.name


async def test_a_retired_memory_is_kept_with_its_reason_and_no_longer_recalled(
    stub: Stub,
) -> None:
    await _session(stub, "s", "u1")
    memory = await _remember(stub, "Deploys go out on Fridays", "s")
    owner = wm_names.user("u1")
    found = await stub.SearchMemories(
        api.SearchMemoriesRequest(owner=owner, query="deploys Fridays"), metadata=ALPHA
    )
    assert [h.memory.name for h in found.hits] == [memory.name]
    for reason in ("  ", "x" * 501):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.RetireMemory(
                api.RetireMemoryRequest(name=wm_names.memory(memory.name), reason=reason),
                metadata=ALPHA,
            )
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert details(refused.value)[1] == ["reason"]
    retire = api.RetireMemoryRequest(
        name=wm_names.memory(memory.name), reason="we deploy daily now", request_id="r-1"
    )
    retired = await stub.RetireMemory(retire, metadata=ALPHA)
    assert retired.state == pb.MEMORY_STATE_RETIRED
    assert retired.retire_reason == "we deploy daily now"
    assert (await stub.RetireMemory(retire, metadata=ALPHA)) == retired  # a retry: same answer
    again = await stub.RetireMemory(
        api.RetireMemoryRequest(
            name=wm_names.memory(memory.name), reason="another", request_id="r-2"
        ),
        metadata=ALPHA,
    )
    assert again.retire_reason == "we deploy daily now"  # already retired: unchanged
    found = await stub.SearchMemories(
        api.SearchMemoriesRequest(owner=owner, query="deploys Fridays"), metadata=ALPHA
    )
    assert not found.hits
    listed = await stub.ListMemories(
        api.ListMemoriesRequest(owner=owner, state=pb.MEMORY_STATE_RETIRED), metadata=ALPHA
    )
    assert [m.name for m in listed.memories] == [memory.name]
    # The same text may be remembered again: a retired memory is no duplicate.
    fresh = await _remember(stub, "Deploys go out on Fridays", "s")
    assert fresh.name != memory.name
    missing = stub.RetireMemory(
        api.RetireMemoryRequest(name=wm_names.memory("mem_00000000000000000000"), reason="gone"),
        metadata=ALPHA,
    )
    assert await _code(missing) == grpc.StatusCode.NOT_FOUND
    foreign = stub.RetireMemory(
        api.RetireMemoryRequest(name=wm_names.memory(memory.name), reason="not yours"),
        metadata=BETA,
    )
    assert await _code(foreign) == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [(253_402_300_800, 0), (-(2**40), 0), (0, -1), (0, 1_000_000_000), (2**62, 0)],
)
async def test_times_a_timestamp_cannot_carry_are_refused_naming_the_field(
    stub: Stub, seconds: int, nanos: int
) -> None:
    await _session(stub, "s", "u1")
    when = Timestamp(seconds=seconds, nanos=nanos)
    memory = await _remember(stub, "Started pottery classes", "s")
    calls = {
        "memory.event_time": [
            stub.CreateMemory(
                api.CreateMemoryRequest(
                    owner=wm_names.session("s"),
                    memory=pb.Memory(type=pb.MEMORY_TYPE_EVENT, text="x", event_time=when),
                ),
                metadata=ALPHA,
            ),
            stub.UpdateMemory(
                api.UpdateMemoryRequest(
                    memory=pb.Memory(name=memory.name, event_time=when),
                    update_mask=field_mask_pb2.FieldMask(paths=["event_time"]),
                ),
                metadata=ALPHA,
            ),
        ],
        "start_time": [
            stub.SearchMemories(
                api.SearchMemoriesRequest(
                    owner=wm_names.user("u1"), query="pottery", start_time=when
                ),
                metadata=ALPHA,
            )
        ],
    }
    for field, pending in calls.items():
        for call in pending:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert details(refused.value)[1] == [field]
    got = await stub.GetMemory(
        api.GetMemoryRequest(name=wm_names.memory(memory.name)), metadata=ALPHA
    )
    assert not got.HasField("event_time") and got.version == 1  # nothing changed
    edge = await stub.CreateMemory(  # the last second a Timestamp carries is fine
        api.CreateMemoryRequest(
            owner=wm_names.session("s"),
            memory=pb.Memory(
                type=pb.MEMORY_TYPE_EVENT,
                text="At the end of time",
                event_time=Timestamp(seconds=253_402_300_799, nanos=999_999_999),
            ),
        ),
        metadata=ALPHA,
    )
    assert edge.memory.event_time.seconds == 253_402_300_799


async def test_a_time_stored_out_of_range_never_poisons_a_read(
    app: Application, stub: Stub
) -> None:
    """A memory an older server stored with a time no Timestamp carries reads as undated:
    GetMemory, ListMemories, SearchMemories and AssembleContext's recall all answer."""
    await _session(stub, "s", "u1")
    far = await _remember(stub, "Pottery class on Tuesdays", "s")
    early = await _remember(stub, "Pottery kiln bought", "s")
    # One row per transaction: the embedding backfill updates the same rows meanwhile, and two
    # transactions taking the two rows in opposite orders deadlock on PostgreSQL.
    for memory, value in ((far, 1e12), (early, -(2.0**40))):
        async with app.database.unit_of_work() as uow:
            await uow._conn.run(
                "UPDATE memories SET event_time = :t WHERE memory_id = :m",
                {"t": value, "m": wm_names.last_segment(memory.name)},
            )
            await uow.commit()
    got = await stub.GetMemory(api.GetMemoryRequest(name=wm_names.memory(far.name)), metadata=ALPHA)
    assert not got.HasField("event_time") and got.text == "Pottery class on Tuesdays"
    json_format.MessageToJson(got)  # what the HTTP door writes: no ValueError
    listed = await stub.ListMemories(
        api.ListMemoriesRequest(owner=wm_names.user("u1")), metadata=ALPHA
    )
    assert {m.name for m in listed.memories} == {far.name, early.name}
    json_format.MessageToJson(listed)
    assert set(await _search(stub, "pottery", wm_names.user("u1"))) == {far.name, early.name}
    await stub.AddMessages(
        api.AddMessagesRequest(parent=wm_names.session("s"), messages=[_user("pottery?", "m1")]),
        metadata=ALPHA,
    )
    context = await _assemble(stub, "s")
    assert set(context.recalled_memories) == {far.name, early.name}


async def test_bad_requests_say_which_field(stub: Stub) -> None:
    await _session(stub, "s", "u1")
    cases = [
        stub.SearchMemories(api.SearchMemoriesRequest(query="x"), metadata=ALPHA),
        stub.SearchMemories(
            api.SearchMemoriesRequest(owner=wm_names.user("u1"), query="x", page_size=51),
            metadata=ALPHA,
        ),
        stub.CreateMemory(
            api.CreateMemoryRequest(owner=wm_names.user("u1"), memory=pb.Memory(text="no type")),
            metadata=ALPHA,
        ),
        stub.GetMemory(api.GetMemoryRequest(name=wm_names.memory("nope")), metadata=ALPHA),
        stub.CreateSession(
            api.CreateSessionRequest(session=pb.Session(user_id="bad user")), metadata=ALPHA
        ),
    ]
    for call in cases:
        assert await _code(call) == grpc.StatusCode.INVALID_ARGUMENT
    missing = stub.DeleteMemory(
        api.DeleteMemoryRequest(name=wm_names.memory("mem_00000000000000000000")), metadata=ALPHA
    )
    assert await _code(missing) == grpc.StatusCode.NOT_FOUND


async def test_ranked_archive_search_finds_what_literal_search_misses(stub: Stub) -> None:
    await _session(stub, "s", "u1")
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session("s"),
            messages=[
                _user("we decided to move the ledger to Postgres", "a"),
                _user("lunch is at noon", "b"),
                _user("Die Straße ist lang", "c"),
            ],
        ),
        metadata=ALPHA,
    )
    started = await stub.CreateCommit(
        api.CreateCommitRequest(parent=wm_names.session("s")), metadata=ALPHA
    )
    assert started.archive  # Phase 1 archived the messages
    query = "ledger Postgres decided"
    literal = await stub.SearchArchives(
        api.SearchArchivesRequest(parent=wm_names.session("s"), query=query), metadata=ALPHA
    )
    assert not literal.hits
    ranked = await stub.SearchArchives(
        api.SearchArchivesRequest(
            parent=wm_names.session("s"), query=query, mode=api.SEARCH_MODE_RANKED
        ),
        metadata=ALPHA,
    )
    assert [h.message for h in ranked.hits] == ["sessions/s/messages/a"]
    assert ranked.hits[0].score > 0
    owner = await stub.SearchArchives(
        api.SearchArchivesRequest(
            parent="sessions/-", query="ledger", mode=api.SEARCH_MODE_RANKED, user_id="u1"
        ),
        metadata=ALPHA,
    )
    assert [h.archive for h in owner.hits] == ["sessions/s/archives/archive_001"]
    for query in ("STRASSE", "strasse"):
        folded = await stub.SearchArchives(
            api.SearchArchivesRequest(parent=wm_names.session("s"), query=query), metadata=ALPHA
        )
        assert [h.message for h in folded.hits] == ["sessions/s/messages/c"]


async def test_memory_tools_are_served(stub: Stub) -> None:
    reply = await stub.GetToolDefinitions(api.GetToolDefinitionsRequest(), metadata=ALPHA)
    names = {t.name for t in reply.tools}
    assert {"memory_search", "memory_store", "memory_forget"} <= names


async def test_a_large_archive_is_searchable_whole_once_its_commit_completes(stub: Stub) -> None:
    # Phase 1 indexes the first messages of an archive; Phase 2 indexes the rest in
    # chunks before the commit completes.
    await _session(stub, "big", "u1")
    texts = [f"routine step {n} of the migration" for n in range(1_200)]
    texts[1_150] = "the quokka threshold was raised to nine"
    for start in range(0, len(texts), 400):
        await stub.AddMessages(
            api.AddMessagesRequest(
                parent=wm_names.session("big"),
                messages=[
                    _user(t, f"m{start + i}") for i, t in enumerate(texts[start : start + 400])
                ],
            ),
            metadata=ALPHA,
        )
    _, events = await commit_flow.commit(stub, "big", metadata=ALPHA)
    stages = [e.stage for e in events]
    assert stages[-1] == pb.COMMIT_STAGE_COMPLETED
    ranked = await stub.SearchArchives(
        api.SearchArchivesRequest(
            parent=wm_names.session("big"), query="quokka", mode=api.SEARCH_MODE_RANKED
        ),
        metadata=ALPHA,
    )
    assert [h.message for h in ranked.hits] == ["sessions/big/messages/m1150"]
    everything = await stub.SearchArchives(
        api.SearchArchivesRequest(
            parent=wm_names.session("big"), query="routine", mode=api.SEARCH_MODE_RANKED
        ),
        metadata=ALPHA,
    )
    assert everything.total_matches == 1_199  # once each: no chunk indexed twice


async def test_a_ranked_query_over_the_size_limit_names_the_field(stub: Stub) -> None:
    """Ranked archive search and memory search refuse a query over 1,000 characters with
    INVALID_ARGUMENT naming ``query``, before any search runs."""
    await _session(stub, "s", "u1")
    long = "ledger " * 150
    calls = [
        stub.SearchArchives(
            api.SearchArchivesRequest(
                parent=wm_names.session("s"), query=long, mode=api.SEARCH_MODE_RANKED
            ),
            metadata=ALPHA,
        ),
        stub.SearchMemories(
            api.SearchMemoriesRequest(owner=wm_names.user("u1"), query=long),
            metadata=ALPHA,
        ),
    ]
    for call in calls:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        info, fields = details(caught.value)
        assert fields == ["query"] and info.reason
