"""Long-term memory extraction in Phase 2 (issue 20 point 2), on a real server over gRPC, on
SQLite and PostgreSQL: the offline provider's memories are found by SearchMemories, a later
contradiction updates or retires with history, the diff is streamed and shown by GetCommit,
the terminal event comes with the memories searchable, a re-run after a lost lease creates
no duplicates, extraction can be off, and a failed extraction is picked up by the next
commit."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from integration.conftest import make_settings

from support import builders as b
from support import commit_flow, wm_names
from support.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application
from wm_server.llm.offline import OfflineProvider
from wm_server.llm.port import LlmError, MemoryRequest, ModelReply

Stub = service_grpc.WorkingMemoryServiceStub
ENGINES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


class Flaky(OfflineProvider):
    """The offline provider, with a hook run on each memory call before it answers."""

    def __init__(self) -> None:
        self.memory_calls = 0
        self.before_answer: Callable[[int, MemoryRequest], Any] | None = None

    async def extract_memories(self, request: MemoryRequest) -> ModelReply:
        self.memory_calls += 1
        reply = await super().extract_memories(request)
        if self.before_answer is not None:
            await self.before_answer(self.memory_calls, request)
        return reply


@pytest.fixture(params=ENGINES)
def database_url(request: pytest.FixtureRequest) -> str | None:
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return None


@pytest.fixture
def flaky() -> Flaky:
    return Flaky()


@pytest.fixture
def started() -> list[Application]:
    return []


@pytest.fixture
async def start(
    tmp_path: Path, database_url: str | None, flaky: Flaky, started: list[Application]
) -> AsyncIterator[Callable[..., Any]]:
    async def run(**overrides: object) -> Stub:
        settings = make_settings(
            tmp_path / f"server-{len(started)}",
            database_url=database_url,
            phase2_retry_base_delay=0.05,
            heartbeat_seconds=0.5,
            **overrides,
        )
        app = await start_application(settings, provider=flaky)
        started.append(app)
        channel = grpc.aio.insecure_channel(app.address)
        return Stub(channel)

    yield run
    for app in started:
        await app.stop(grace=0.5)


async def _session(stub: Stub, user: str, **config: Any) -> str:
    name = f"s-{uuid.uuid4().hex[:10]}"
    await stub.CreateSession(
        api.CreateSessionRequest(
            session_id=name,
            session=pb.Session(user_id=user, config=pb.SessionConfig(**config) if config else None),
        )
    )
    return name


async def _say(stub: Stub, session: str, *turns: tuple[str, str]) -> None:
    messages = []
    for user, answer in turns:
        messages += [b.user(user), b.assistant(answer)]
    await stub.AddMessages(
        api.AddMessagesRequest(parent=wm_names.session(session), messages=messages)
    )


async def _search(stub: Stub, user: str, query: str) -> list[pb.Memory]:
    found = await stub.SearchMemories(
        api.SearchMemoriesRequest(owner=wm_names.user(user), query=query, page_size=10)
    )
    return [hit.memory for hit in found.hits]


async def _commit(stub: Stub, session: str, **watch: Any) -> list[pb.CommitEvent]:
    """Commit everything and read the stream to its end; ``watch`` is called on each event
    (to look at the store while the stream is still open)."""
    started = await stub.CreateCommit(commit_flow.create_request(session), timeout=60)
    call = stub.WatchCommit(api.WatchCommitRequest(name=started.name), timeout=60)
    events = []
    async for event in call:
        if event.stage == pb.COMMIT_STAGE_HEARTBEAT:
            continue
        events.append(event)
        if "on_event" in watch:
            await watch["on_event"](event)
    return events


def _diff(events: list[pb.CommitEvent]) -> pb.MemoryDiff:
    [event] = [e for e in events if e.stage == pb.COMMIT_STAGE_MEMORIES_EXTRACTED]
    return event.memories_extracted


async def test_a_preference_is_searchable_when_the_commit_is_terminal(
    start: Callable[..., Any],
) -> None:
    stub = await start()
    session = await _session(stub, "ana")
    await _say(
        stub,
        session,
        ("Hi, my name is Ana Lima. I prefer tabs over spaces.", "Noted."),
        ("We decided to move the ledger to Postgres because SQLite locks under load.", "OK."),
        ("Should I prefer Rust? If I preferred Go we would rewrite it.", "Up to you."),
    )
    seen_at: dict[str, list[str]] = {}

    async def look(event: pb.CommitEvent) -> None:
        if event.stage in (pb.COMMIT_STAGE_MEMORIES_EXTRACTED, pb.COMMIT_STAGE_COMPLETED):
            seen_at[pb.CommitStage.Name(event.stage)] = [
                m.text for m in await _search(stub, "ana", "tabs spaces")
            ]

    events = await _commit(stub, session, on_event=look)

    assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED and events[-1].terminal
    stages = [e.stage for e in events]
    assert stages.index(pb.COMMIT_STAGE_MEMORIES_EXTRACTED) == len(stages) - 2
    # stored in the completion's transaction: searchable as soon as either event is seen
    assert seen_at == {
        "COMMIT_STAGE_MEMORIES_EXTRACTED": ["The user prefers tabs over spaces."],
        "COMMIT_STAGE_COMPLETED": ["The user prefers tabs over spaces."],
    }
    diff = _diff(events)
    assert diff.state == pb.MEMORY_EXTRACTION_STATE_EXTRACTED
    assert len(diff.created_memories) == 3  # name, preference, decision; not the questions
    memories = {m.text: m for m in await _search(stub, "ana", "ledger Postgres Ana tabs")}
    assert set(memories) == {
        "The user's name is Ana Lima.",
        "The user prefers tabs over spaces.",
        "The team decided to move the ledger to Postgres because SQLite locks under load.",
    }
    decision = memories[
        "The team decided to move the ledger to Postgres because SQLite locks under load."
    ]
    assert decision.type == pb.MEMORY_TYPE_DECISION
    assert decision.fields["reason"] == "SQLite locks under load"
    assert decision.sources[0].session == wm_names.session(session)
    assert {m.name for m in memories.values()} == set(diff.created_memories)
    # the diff is the commit's: GetCommit shows it too; another user sees nothing
    commit = await stub.GetCommit(api.GetCommitRequest(name=events[0].commit))
    assert commit.memory_diff == diff
    assert await _search(stub, "bob", "tabs spaces") == []


async def test_a_later_session_supersedes_what_changed(
    start: Callable[..., Any],
) -> None:
    stub = await start()
    first = await _session(stub, "ana")
    await _say(
        stub,
        first,
        ("I prefer tabs over spaces.", "Noted."),
        ("Let's go with Memcached for the cache since it is cheap.", "OK."),
    )
    created = _diff(await _commit(stub, first)).created_memories
    assert len(created) == 2
    [preference] = await _search(stub, "ana", "tabs spaces")
    [cache] = await _search(stub, "ana", "Memcached cache")

    second = await _session(stub, "ana")  # another session of the same user
    await _say(
        stub,
        second,
        ("Actually, I prefer spaces over tabs now.", "Switching."),
        ("Memcached kept evicting keys from the cache.", "I see."),
        ("Let's go with Redis for the cache since it is already deployed.", "Done."),
    )
    diff = _diff(await _commit(stub, second))

    # A changed preference and a changed decision are new facts superseding the old ones
    # (issue 35 point 3): the old memories stay as they were, SUPERSEDED, with their successor.
    assert sorted(diff.superseded_memories) == sorted([preference.name, cache.name])
    assert list(diff.updated_memories) == [] and list(diff.retired_memories) == []
    assert len(diff.created_memories) == 2
    [current] = await _search(stub, "ana", "tabs spaces")
    assert current.text == "The user prefers spaces over tabs."
    assert list(current.supersedes) == [preference.name]
    assert {s.session for s in current.sources} == {wm_names.session(second)}
    old = await stub.GetMemory(api.GetMemoryRequest(name=preference.name))
    assert old.state == pb.MEMORY_STATE_SUPERSEDED and old.superseded_by == current.name
    assert old.text == "The user prefers tabs over spaces."
    replaced = await stub.GetMemory(api.GetMemoryRequest(name=cache.name))
    assert replaced.state == pb.MEMORY_STATE_SUPERSEDED
    assert replaced.superseded_by in diff.created_memories
    assert [m.text for m in await _search(stub, "ana", "cache")] == [
        "The team will go with Redis for the cache since it is already deployed."
    ]


async def test_a_run_that_lost_its_lease_after_extracting_creates_no_duplicates(
    start: Callable[..., Any], flaky: Flaky, started: list[Application]
) -> None:
    stub = await start(phase2_lease_seconds=1.0)
    [app] = started
    session = await _session(stub, "ana")
    await _say(stub, session, ("I prefer dark mode. My name is Ana Lima.", "OK."))
    commit_ids: list[str] = []

    async def steal(call: int, request: MemoryRequest) -> None:
        if call == 1:  # another worker takes the job between extraction and completion
            async with app.database.unit_of_work() as uow:
                await uow.write(uow.jobs.leasing(commit_ids[0], 1, "stolen", 0.3))
                await uow.commit()

    flaky.before_answer = steal
    started = await stub.CreateCommit(commit_flow.create_request(session), timeout=60)
    commit_ids.append(wm_names.last_segment(started.name))
    call = stub.WatchCommit(api.WatchCommitRequest(name=started.name), timeout=60)
    first = await call.read()
    assert isinstance(first, pb.CommitEvent)
    events = [first]
    while not events[-1].terminal:
        event = await call.read()
        assert isinstance(event, pb.CommitEvent)
        if event.stage != pb.COMMIT_STAGE_HEARTBEAT:
            events.append(event)

    assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED
    assert flaky.memory_calls == 2  # extracted twice, applied once
    assert [e.stage for e in events].count(pb.COMMIT_STAGE_MEMORIES_EXTRACTED) == 1
    assert len(_diff(events).created_memories) == 2
    listed = await stub.ListMemories(
        api.ListMemoriesRequest(owner=wm_names.user("ana"), page_size=50)
    )
    assert sorted(m.text for m in listed.memories) == [
        "The user prefers dark mode.",
        "The user's name is Ana Lima.",
    ]


async def test_extraction_off_for_a_session_or_the_server_stores_no_memories(
    start: Callable[..., Any], flaky: Flaky
) -> None:
    stub = await start()
    off = await _session(stub, "ana", memory_extraction=False)
    await _say(stub, off, ("I prefer tabs over spaces.", "Noted."))
    diff = _diff(await _commit(stub, off))
    assert diff.state == pb.MEMORY_EXTRACTION_STATE_OFF
    assert "off for this session" in diff.message
    assert flaky.memory_calls == 0
    assert await _search(stub, "ana", "tabs") == []

    server_off = await start(memory_extraction=False)
    session = await _session(server_off, "bob")
    await _say(server_off, session, ("I prefer tabs over spaces.", "Noted."))
    diff = _diff(await _commit(server_off, session))
    assert diff.state == pb.MEMORY_EXTRACTION_STATE_OFF and "server" in diff.message
    assert await _search(server_off, "bob", "tabs") == []
    assert flaky.memory_calls == 0


async def test_a_refused_extraction_completes_the_commit_and_the_next_one_recovers_it(
    start: Callable[..., Any], flaky: Flaky
) -> None:
    stub = await start()
    session = await _session(stub, "ana")

    async def refuse(call: int, request: MemoryRequest) -> None:
        if call == 1:
            raise LlmError("HTTP 400 invalid_request_error: bad tool", retryable=False)

    flaky.before_answer = refuse
    await _say(stub, session, ("I prefer tabs over spaces.", "Noted."))
    first = await _commit(stub, session)
    assert first[-1].stage == pb.COMMIT_STAGE_COMPLETED  # the working memory is stored
    failed = _diff(first)
    assert failed.state == pb.MEMORY_EXTRACTION_STATE_FAILED
    assert "bad tool" in failed.message
    assert await _search(stub, "ana", "tabs") == []

    await _say(stub, session, ("My name is Ana Lima.", "Hello Ana."))
    second = _diff(await _commit(stub, session))
    assert second.state == pb.MEMORY_EXTRACTION_STATE_EXTRACTED
    assert list(second.recovered_archives) == [wm_names.archive(session, "archive_001")]
    assert len(second.created_memories) == 2
    assert [m.text for m in await _search(stub, "ana", "tabs")] == [
        "The user prefers tabs over spaces."
    ]
    again = await stub.GetCommit(api.GetCommitRequest(name=first[0].commit))
    assert again.memory_diff.state == pb.MEMORY_EXTRACTION_STATE_RECOVERED
    assert "bad tool" in again.memory_diff.message


async def test_a_provider_outage_during_extraction_is_waited_out(
    start: Callable[..., Any], flaky: Flaky
) -> None:
    stub = await start()
    session = await _session(stub, "ana")

    async def outage(call: int, request: MemoryRequest) -> None:
        if call == 1:
            raise LlmError("HTTP 529 overloaded", transient=True)

    flaky.before_answer = outage
    await _say(stub, session, ("I prefer tabs over spaces.", "Noted."))
    events = await _commit(stub, session)
    stages = [e.stage for e in events]
    assert pb.COMMIT_STAGE_RETRY_SCHEDULED in stages
    retry = next(e for e in events if e.stage == pb.COMMIT_STAGE_RETRY_SCHEDULED)
    assert retry.retry_scheduled.provider_unavailable
    assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED
    assert _diff(events).state == pb.MEMORY_EXTRACTION_STATE_EXTRACTED
    assert [m.text for m in await _search(stub, "ana", "tabs")] == [
        "The user prefers tabs over spaces."
    ]
