"""Round trips of Phase 2's transactions on PostgreSQL, counted on the wire (Syncs in libpq's
trace of the one pooled connection), with what each transaction stores: a claim is three
(the job found; the lease with the reads it needs; the state, the event and COMMIT), a
completion three (the locks; the writes with the commit's record; the events and COMMIT).
The events that go with a COMMIT are stored only after the number the unit read: a stale
one fails the unit, which keeps nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import pytest
from storage_support import Services, build_services, frontend_messages

from wm_core import CommitState, Message, Role, TextPart, message_tokens
from wm_proto.v1 import resources_pb2 as pb
from wm_server.api.commit_event_encoder import encode_event
from wm_server.errors import StorageConflict
from wm_server.phase2.state import Phase2Completion
from wm_server.security.tenancy import set_tenant
from wm_server.services.commit_event_log import EventLog, Phase2Started
from wm_server.storage.postgres import PostgresDatabase

T = TypeVar("T")
pytestmark = pytest.mark.postgres


@pytest.fixture
async def single(postgres_url: str) -> AsyncIterator[Services]:
    """Services over a database of one pooled connection, so every unit of work uses it."""
    database = PostgresDatabase(postgres_url, min_connections=1, max_connections=1)
    await database.open()
    set_tenant("t")
    yield build_services(database)
    await database.close()


async def _sent(services: Services, call: Callable[[], Awaitable[T]]) -> tuple[T, list[str]]:
    """What ``call`` returns, and the messages it sent on the pool's one connection."""
    async with services.database.reader() as uow:
        conn = uow._conn.conn  # type: ignore[attr-defined]
    with frontend_messages(conn) as sent:
        found = await call()
    return found, sent


async def _round_trips(services: Services, call: Callable[[], Awaitable[T]]) -> tuple[T, int]:
    """What ``call`` returns, and the Syncs it sent on the pool's one connection."""
    found, sent = await _sent(services, call)
    return found, sum(1 for m in sent if m.startswith("Sync"))


async def _archive(services: Services, session: str) -> str:
    parts = (TextPart("the parser ships on Friday"),)
    messages = [Message("", Role.USER, parts, message_tokens(parts)) for _ in range(2)]
    await services.sessions.add_messages(
        session, messages, create_if_missing=True, request_id="", fingerprint=""
    )
    commit, _ = await services.commits.phase1(session, 0, None)
    return commit.commit_id


async def test_a_claim_is_three_round_trips(single: Services) -> None:
    commit_id = await _archive(single, "s")
    job, syncs = await _round_trips(single, lambda: single.jobs.claim(60))
    assert syncs == 3  # 8 when each statement went on its own
    assert job is not None and job.commit_id == commit_id and job.attempts == 1
    assert job.covered_seqs == (1,) and job.previous_version == 0 and job.last_sequence == 2
    record = await single.commits.get("s", commit_id)
    assert record.state is CommitState.RUNNING and record.last_sequence == 2
    async with single.database.reader() as uow:
        holder = await uow.jobs.holder(commit_id)
        stored = await uow.events.after(commit_id, 1)
    assert holder == (job.lease_token, 2)
    event = pb.CommitEvent.FromString(stored[0].payload)
    assert event.stage == pb.COMMIT_STAGE_PHASE2_STARTED
    assert list(event.phase2_started.covered_archives) == ["sessions/s/archives/archive_001"]
    # A progress write after it is one round trip, one statement in autocommit (no BEGIN or
    # COMMIT): the claim's last number is the commit's.
    started = Phase2Started(1, True, 0, (1,))
    claimed = job
    after, sent = await _sent(single, lambda: single.jobs.record(claimed, started))
    assert sum(1 for m in sent if m.startswith("Sync")) == 1 and after.last_sequence == 3
    assert [m for m in sent if m.startswith(("Execute", "Query"))] == ["Execute"]
    async with single.database.reader() as uow:
        assert [e.sequence for e in await uow.events.after(commit_id, 0)] == [1, 2, 3]


async def test_a_completion_is_three_round_trips(single: Services) -> None:
    commit_id = await _archive(single, "s")
    job = await single.jobs.claim(60)
    assert job is not None
    completion = Phase2Completion("# Session Title\nparser", 3, "parser", "[]", "{}", (1,))
    done, syncs = await _round_trips(single, lambda: single.jobs.complete(job, completion))
    assert syncs == 3  # 4 when the events had a round trip of their own
    assert done is not None
    record, wm = done
    assert record.state is CommitState.COMPLETED and record.last_sequence == 4
    assert wm.version == 1 and wm.document == completion.document
    async with single.database.reader() as uow:
        stored = await uow.events.after(commit_id, 2)
        assert await uow.jobs.holder(commit_id) is None  # done
    stages = [pb.CommitEvent.FromString(e.payload).stage for e in stored]
    assert stages == [pb.COMMIT_STAGE_WORKING_MEMORY_STORED, pb.COMMIT_STAGE_COMPLETED]
    assert [e.terminal for e in stored] == [False, True]


async def test_events_sent_with_the_commit_after_a_stale_number_keep_nothing(
    single: Services,
) -> None:
    commit_id = await _archive(single, "s")
    job = await single.jobs.claim(60)
    assert job is not None and job.last_sequence == 2
    log = EventLog(encode_event)
    with pytest.raises(StorageConflict):
        async with single.database.unit_of_work(pipelined=True) as uow:
            await uow.write(uow.commits.setting_state(commit_id, CommitState.FAILED, 1))
            write, _ = log.appending(uow, "s", commit_id, 1, (Phase2Started(1, True, 0, (1,)),))
            await uow.commit_with(write)
    record = await single.commits.get("s", commit_id)
    assert record.state is CommitState.RUNNING and record.last_sequence == 2
    async with single.database.reader() as uow:
        assert [e.sequence for e in await uow.events.after(commit_id, 0)] == [1, 2]
