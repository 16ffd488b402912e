"""The storage contract: every use case over every engine, through the services that own the
rules and the repositories that hold the rows."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import itertools
import json
import sqlite3
import time
import uuid
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storage_support import ENGINES, Services, build_services, make_database

from wm_core import (
    AutoCommitPolicy,
    CommitState,
    MemoryType,
    Message,
    OpKind,
    PendingItem,
    Role,
    SectionOp,
    SessionSettings,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    Trigger,
    anthropic_json,
    message_tokens,
)
from wm_server.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    StorageFull,
    StorageUnavailable,
)
from wm_server.phase2.state import ClaimedJob, Phase2Completion
from wm_server.phase2.store import JobStore, LeaseLost
from wm_server.security.tenancy import set_tenant
from wm_server.services import paging
from wm_server.services.commit_event_log import EventLog, Phase2Started
from wm_server.services.commits import CommitService
from wm_server.services.context_formats import ContextFormat
from wm_server.services.memories import OwnerSpec
from wm_server.services.memory_content import MemoryContent, MemoryOwner
from wm_server.storage.database import Database
from wm_server.storage.records import StoredEvent
from wm_server.storage.sqlite import SqliteDatabase
from wm_server.storage.statements import Write

_ids = itertools.count()


def _text(tokens: int, mid: str = "") -> Message:
    parts = (TextPart("x" * (tokens * 4)),)
    return Message(mid, Role.USER, parts, message_tokens(parts))


async def _add(services: Services, session: str, *messages: Message, rid: str = "") -> None:
    await services.sessions.add_messages(
        session, messages, create_if_missing=True, request_id=rid, fingerprint=rid and "fp"
    )


def _completion(document: str, seqs: tuple[int, ...]) -> Phase2Completion:
    return Phase2Completion(document, 3, "abstract", "[]", "{}", seqs)


async def _claim(services: Services, lease: float = 60) -> ClaimedJob:
    job = await services.jobs.claim(lease)
    assert job is not None
    return job


async def _sequences(services: Services, commit_id: str) -> list[int]:
    async with services.database.reader() as uow:
        return [e.sequence for e in await uow.events.after(commit_id, 0)]


async def test_sessions_are_scoped_by_tenant(services: Services) -> None:
    set_tenant("a")
    await services.sessions.create("same", "")
    await _add(services, "same", _text(10))
    set_tenant("b")
    await services.sessions.create("same", "")
    assert (await services.sessions.get("same")).message_count == 0
    set_tenant("a")
    assert (await services.sessions.get("same")).message_count == 1
    await services.sessions.delete("same", "")
    with pytest.raises(NotFound):
        await services.sessions.get("same")
    set_tenant("b")
    assert (await services.sessions.get("same")).session_id == "same"
    with pytest.raises(AlreadyExists):
        await services.sessions.create("same", "")


async def test_list_sessions_pages(services: Services) -> None:
    for i in range(5):
        await services.sessions.create(f"s{i}", "")
    page, token = await services.sessions.list(3, "")
    assert [s.session_id for s in page] == ["s4", "s3", "s2"] and token
    rest, end = await services.sessions.list(3, token)
    assert [s.session_id for s in rest] == ["s1", "s0"] and end == ""


def _page_token_refused(error: pytest.ExceptionInfo[InvalidArgument]) -> bool:
    value = error.value
    return value.reason == "PAGE_TOKEN_INVALID" and value.violations[0].field == "page_token"


async def test_page_token_key_is_made_once_and_shared_by_replicas(database: Database) -> None:
    """Without WM_PAGE_TOKEN_KEY the first start stores a random key; a second server on the
    same database (a replica, or a restart) reads the same key, so its tokens stay valid."""
    first = await paging.load_tokens(database, None)
    second = await paging.load_tokens(database, None)
    token = first.encode("sessions", 42)
    assert second.decode("sessions", token) == 42
    configured = await paging.load_tokens(database, "a-configured-key-0123456789")
    with pytest.raises(InvalidArgument) as refused:
        configured.decode("sessions", token)
    assert _page_token_refused(refused)
    async with database.reader() as uow:  # the stored key is unchanged by a configured one
        assert await uow.secrets.get_or_create(paging.KEY_NAME, "other") != "other"


async def test_page_tokens_are_bound_to_the_list_session_and_tenant(database: Database) -> None:
    services = build_services(database, tokens=await paging.load_tokens(database, None))
    sessions, commits, archives = services.sessions, services.commits, services.archives
    for name in ("a", "b", "c"):
        await sessions.create(name, "")
        for _ in range(3):
            await sessions.add_messages(name, [_text(5)], create_if_missing=False, request_id="")
            await commits.phase1(name, 0, None)
    _, session_token = await sessions.list(1, "")
    _, commit_token = await commits.list("a", 1, "")
    _, archive_token = await archives.list("a", 1, "")
    assert session_token and commit_token and archive_token
    assert len((await commits.list("a", 1, commit_token))[0]) == 1  # valid where issued
    refusals = [
        sessions.list(1, commit_token),  # another list
        commits.list("b", 1, commit_token),  # another session's list
        archives.list("a", 1, commit_token),
        commits.list("a", 1, archive_token),
        commits.list("a", 1, commit_token[:-2] + ("A" if commit_token[-2] != "A" else "B") + "A"),
        commits.list("a", 1, "not a token"),
        commits.list("a", 1, "\ud800"),
        commits.list("a", 1, "A" * 10_000),
    ]
    for call in refusals:
        with pytest.raises(InvalidArgument) as refused:
            await call
        assert _page_token_refused(refused)
    set_tenant("intruder")  # another tenant replaying a token it saw
    await sessions.create("a", "")
    with pytest.raises(InvalidArgument) as refused:
        await sessions.list(1, session_token)
    assert _page_token_refused(refused)


async def test_a_signed_cursor_beyond_the_store_is_invalid_not_internal(
    database: Database,
) -> None:
    """Even with the key (a leaked WM_PAGE_TOKEN_KEY), a cursor of 2**63 or more never reaches
    the store, whose integers are signed 64-bit."""
    key = "a-configured-key-0123456789"
    sessions = build_services(database, tokens=await paging.load_tokens(database, key)).sessions
    await sessions.create("s", "")
    for cursor in (2**63, 2**64 - 1):
        packed = cursor.to_bytes(8, "big")
        bound = b"\x01" + packed + b"\x00" + "\x00".join(("sessions", "t", "")).encode()
        mac = hmac.new(key.encode(), bound, hashlib.sha256).digest()[:16]
        token = base64.urlsafe_b64encode(b"\x01" + packed + mac).decode().rstrip("=")
        with pytest.raises(InvalidArgument) as refused:
            await sessions.list(1, token)
        assert _page_token_refused(refused)
    # the same construction with an in-range cursor is accepted: the forgery above was exact
    packed = (2**63 - 1).to_bytes(8, "big")
    bound = b"\x01" + packed + b"\x00" + "\x00".join(("sessions", "t", "")).encode()
    mac = hmac.new(key.encode(), bound, hashlib.sha256).digest()[:16]
    token = base64.urlsafe_b64encode(b"\x01" + packed + mac).decode().rstrip("=")
    assert [r.session_id for r in (await sessions.list(1, token))[0]] == ["s"]


async def test_batch_is_atomic_and_duplicates_are_skipped(services: Services) -> None:
    await _add(services, "s", _text(1, "a"), _text(1, "b"))
    result = await services.sessions.add_messages(
        "s", [_text(1, "b"), _text(2, "c"), _text(2, "c")],
        create_if_missing=False, request_id="r", fingerprint="f1",
    )  # fmt: skip
    assert result.added_ids == ("c",) and result.duplicate_ids == ("b", "c")
    again = await services.sessions.add_messages(
        "s", [_text(1, "b"), _text(2, "c"), _text(2, "c")],
        create_if_missing=False, request_id="r", fingerprint="f1",
    )  # fmt: skip
    assert (again.added_ids, again.duplicate_ids) == (("c",), ("b", "c"))  # the stored outcome
    with pytest.raises(FailedPrecondition) as reused:
        await services.sessions.add_messages(
            "s", [_text(5, "d")], create_if_missing=False, request_id="r", fingerprint="other"
        )
    assert reused.value.reason == "REQUEST_ID_REUSED"
    assert reused.value.metadata == {"request_id": "r", "method": "AddMessages"}
    assert (await services.sessions.get("s")).message_count == 3  # nothing changed
    with pytest.raises(NotFound):
        await services.sessions.add_messages(
            "absent", [_text(1)], create_if_missing=False, request_id=""
        )


async def test_a_batch_is_stored_and_counted_in_one_step(services: Services) -> None:
    """The batch's rows, its tool calls and the counters land together (on PostgreSQL as one
    statement): the answer is the session as stored, and the latest call with an id wins."""
    call = Message("c1", Role.ASSISTANT, (ToolUsePart("t1", "read", "{}"),), 5)
    first = await services.sessions.add_messages(
        "s", [_text(3, "a"), call], create_if_missing=True, request_id=""
    )
    again = Message("c2", Role.ASSISTANT, (ToolUsePart("t1", "read", '{"n": 2}'),), 6)
    second = await services.sessions.add_messages(
        "s", [_text(4, "b"), again, _text(2, "d")], create_if_missing=False, request_id=""
    )
    stored = await services.sessions.get("s")
    assert second.session == stored
    assert (first.session.message_count, stored.message_count) == (2, 5)
    assert stored.live_tokens == 3 + 5 + 4 + 6 + 2
    async with services.database.reader() as uow:
        row = await uow.sessions.find("t", "s")
        assert row is not None
        assert await uow.tool_calls.positions(row.sid, ["t1"]) == {"t1": row.next_position - 2}
        assert [m.message.id for m in await uow.messages.between(row.sid, 0, None)] == [
            "a", "c1", "b", "c2", "d",
        ]  # fmt: skip


async def test_chained_writes_of_any_shape_land_together(services: Services) -> None:
    """Rows with a NULL (no array per column), several typed rows, one row: each chain runs
    whole, and a write never depends on another one of its chain."""
    await services.sessions.create("s", "")
    async with services.database.reader() as uow:
        row = await uow.sessions.find("t", "s")
    assert row is not None
    insert = (
        "INSERT INTO requests (request_key, sid, fingerprint, outcome, create_time)"
        " VALUES (:key, :sid, :fingerprint, :outcome, :now)"
    )
    update = "UPDATE requests SET outcome = :outcome WHERE request_key = :key"
    rounds = [
        ([("k1", None, "f", "{}", 1.0), ("k2", row.sid, "f", "{}", 2.0)], "k0"),
        ([("k3", row.sid, "f", "{}", 3.0), ("k4", row.sid, "f", "{}", 4.0)], "k1"),
        ([("k5", row.sid, "f", "{}", 5.0)], "k3"),
    ]
    for rows, updated in rounds:
        async with services.database.unit_of_work() as uow:
            await uow.write(
                Write(insert, rows=rows), Write(update, {"outcome": "[1]", "key": updated})
            )
            await uow.commit()
    async with services.database.reader() as uow:
        found = {k: await uow.requests.find(k) for k in ("k1", "k2", "k3", "k4", "k5")}
    assert {k: f.outcome if f else None for k, f in found.items()} == {
        "k1": "[1]", "k2": "{}", "k3": "[1]", "k4": "{}", "k5": "{}",
    }  # fmt: skip


async def test_sessions_commit_themselves_by_their_policy(services: Services) -> None:
    policy = AutoCommitPolicy(message_count_threshold=3, keep_recent_count=1)
    record, _ = await services.sessions.create("s", "", config=SessionSettings(auto_commit=policy))
    assert record.config.auto_commit == policy and record.keep_recent_count == 1
    results = [await services.sessions.add_messages(
        "s", [_text(2)], create_if_missing=False, request_id=""
    ) for _ in range(5)]  # fmt: skip
    started = [r.auto_commit_id for r in results]
    assert [bool(c) for c in started] == [False, False, True, False, True]
    assert results[2].session.message_count == 1  # the answer is the session after the commit
    commit = await services.commits.get("s", started[2])
    assert commit.trigger is Trigger.MESSAGE_COUNT and commit.archived_message_count == 2
    idle = AutoCommitPolicy(idle_timeout_seconds=1.0)
    updated = await services.sessions.update_config(
        "s", lambda current: replace(current, auto_commit=idle), "", ""
    )
    assert updated.config.auto_commit == idle and updated.keep_recent_count == 10
    assert await services.commits.commit_idle() == []  # a message arrived just now
    await asyncio.sleep(1.1)
    committed = await services.commits.commit_idle()
    assert [(c.session_id, c.trigger, c.archived_message_count) for c in committed] == [
        ("s", Trigger.IDLE, 1)
    ]
    assert await services.commits.commit_idle() == []  # nothing live is left


async def test_phase1_keeps_tool_pairs_together_and_numbers_archives(services: Services) -> None:
    use = (ToolUsePart("t1", "bash", "{}"),)
    result = (ToolResultPart("t1", "ok"),)
    await _add(
        services, "s", _text(1, "u"), Message("a", Role.ASSISTANT, use, 3),
        Message("r", Role.USER, result, 2), _text(1, "z"),
    )  # fmt: skip
    first, created = await services.commits.phase1("s", 2, None)
    assert created and first.archive_id == "archive_001" and first.last_sequence == 1
    assert (first.archived_message_count, first.kept_message_count) == (1, 3)
    _, wm = await services.archives.get("s", "archive_001")
    page = await services.archives.messages("s", "archive_001", 0, "")
    assert [m.message.id for m in page.messages] == ["u"] and wm is None
    assert not page.next_page_token
    second, _ = await services.commits.phase1("s", 0, None)
    assert second.archive_id == "archive_002" and second.archived_message_count == 3
    skipped, _ = await services.commits.phase1("s", 0, None)
    assert skipped.state is CommitState.SKIPPED and skipped.complete_time is not None
    listed, _ = await services.archives.list("s", 10, "")
    assert [a.archive_id for a in listed] == ["archive_001", "archive_002"]
    commits, _ = await services.commits.list("s", 10, "")
    assert [c.commit_id for c in commits] == [skipped.commit_id, second.commit_id, first.commit_id]
    assert await _sequences(services, first.commit_id) == [1]
    assert await _sequences(services, skipped.commit_id) == [1]


async def test_commit_request_id_returns_the_first_commit(services: Services) -> None:
    await _add(services, "s", _text(3, "m1"), _text(3, "m2"))
    first, created = await services.commits.phase1("s", 0, "c", "fp")
    again, created_again = await services.commits.phase1("s", 0, "c", "fp")
    assert (created, created_again) == (True, False)
    assert again.commit_id == first.commit_id
    with pytest.raises(FailedPrecondition, match="request_id"):
        await services.commits.phase1("s", 1, "c", "another")
    assert (await services.sessions.get("s")).archive_count == 1


async def test_jobs_run_in_archive_order_per_session(services: Services) -> None:
    names = []
    for _ in range(2):
        await _add(services, "s", _text(1))
        names.append((await services.commits.phase1("s", 0, None))[0].commit_id)
    job = await _claim(services)
    assert job.commit_id == names[0] and await services.jobs.open_count() == 2
    assert await services.jobs.claim(60) is None  # the second waits for the first
    await services.jobs.release(job)
    again = await _claim(services)
    assert again.commit_id == names[0] and again.attempts == 1  # a release is not an attempt
    data = await services.jobs.read_input(again)
    assert data.previous is None and data.covered_seqs == (1,) and len(data.messages) == 1
    done = await services.jobs.complete(again, _completion("# Working Memory\n", (1,)))
    assert done is not None and done[1].version == 1 and done[0].state is CommitState.COMPLETED
    # Phase 1, each claim's Phase2Started (the released one's too), stored, completed.
    assert done[0].last_sequence == 5 == len(await _sequences(services, names[0]))
    with pytest.raises(LeaseLost):
        await services.jobs.record(again, Phase2Started(1, True, 0, (1,)))
    nxt = await _claim(services)
    assert nxt.commit_id == names[1]
    data = await services.jobs.read_input(nxt)
    assert data.previous is not None and data.previous.version == 1
    assert await services.jobs.renew(nxt, 60)


async def test_a_unit_of_one_statement_commits_it_and_reports_what_it_changed(
    services: Services,
) -> None:
    """``Database.statement``: one data-modifying statement, sent by ``commit_with``, atomic
    by itself (PostgreSQL runs it in autocommit, SQLite in a transaction of its own); one
    that fails keeps nothing."""
    await _add(services, "s", _text(1))
    commit, _ = await services.commits.phase1("s", 0, None)
    database = services.database
    async with database.statement() as uow:
        write = uow.commits.setting_state(commit.commit_id, CommitState.FAILED, 1)
        assert await uow.commit_with(write) == 1
    assert (await services.commits.get("s", commit.commit_id)).state is CommitState.FAILED
    async with database.reader() as uow:
        row = await uow.sessions.find("t", "s")
    assert row is not None
    with pytest.raises((sqlite3.IntegrityError, psycopg.errors.NotNullViolation)):
        async with database.statement() as uow:
            unfit = uow.working_memories.inserting(
                row.sid, 1, "doc", archive_seq=None, covered_seq=None, commit_id=None,
                tokens=1, now=1.0, decisions_json="[]",
            )  # fmt: skip
            await uow.commit_with(unfit)
    async with database.reader() as uow:
        kept = await uow._conn.one(
            "SELECT COUNT(*) FROM working_memories WHERE sid = :sid", {"sid": row.sid}
        )
    assert kept is not None and kept[0] == 0


async def test_an_engine_reports_no_event_this_process_stored(services: Services) -> None:
    """This process's stored events reach its streams from the unit of work that stored them
    (``EventLog``), not from the engine: PostgreSQL drops the notifications its own pooled
    connections sent (another replica's: ``test_postgres_replicas``), SQLite has none."""
    heard: asyncio.Queue[str] = asyncio.Queue()
    services.database.subscribe_events(heard.put_nowait)
    await _add(services, "s", _text(1))
    await services.commits.phase1("s", 0, None)
    job = await _claim(services)
    await services.jobs.record(job, Phase2Started(1, True, 0, (1,)))
    await asyncio.sleep(0.3)
    assert heard.empty()


async def test_a_stream_sends_the_events_this_process_stored_without_reading_them(
    services: Services,
) -> None:
    """The events a unit of work stored reach this process's streams once it committed
    (``EventLog`` hands them to the bus): the stream reads the log once, when it starts,
    and sends the job's events after that from what it was handed."""
    commits = CommitService(
        services.database, services.bus, services.log, heartbeat_seconds=3600,
        tokens=paging.PageTokens.random(),
    )  # fmt: skip
    read_from: list[int] = []
    read = commits._events_after

    async def counted(commit_id: str, after: int) -> list[StoredEvent]:
        read_from.append(after)
        return await read(commit_id, after)

    commits._events_after = counted  # type: ignore[method-assign]
    await _add(services, "s", _text(1))
    commit, _ = await services.commits.phase1("s", 0, None)
    stream = commits.watch("s", commit.commit_id, 0)
    first = await asyncio.wait_for(anext(stream), 10)
    assert read_from == [0] and not first[1]
    job = await _claim(services)
    started = Phase2Started(1, True, 0, (1,))
    job = await services.jobs.record(job, started)
    sent = [await asyncio.wait_for(anext(stream), 10) for _ in range(2)]
    assert [terminal for _, terminal in sent] == [False, False]
    assert await services.jobs.complete(job, _completion("doc", (1,))) is not None
    rest = [event async for event in stream]
    assert rest[-1][1] and not any(terminal for _, terminal in rest[:-1])
    assert read_from == [0]  # nothing read after the start
    async with services.database.reader() as uow:  # what was sent is what was stored
        stored = await uow.events.after(commit.commit_id, 0)
    assert [payload for payload, _ in [first, *sent, *rest]] == [e.payload for e in stored]


async def test_a_claim_says_whether_another_job_is_claimable(services: Services) -> None:
    """What the worker wakes another claiming loop for: a job claimable beside the claimed
    one (another session's), not one that waits for it (the same session's next)."""
    for session in ("s", "s", "t"):
        await _add(services, session, _text(1))
        await services.commits.phase1(session, 0, None)
    first = await _claim(services)
    assert first.session_id == "s" and first.others_claimable  # "t"'s job is claimable
    second = await _claim(services)
    assert second.session_id == "t" and not second.others_claimable  # "s"'s next one waits
    assert await services.jobs.claim(60) is None


async def test_phase2_indexes_the_archive_it_read_as_the_search_reads_it(
    services: Services,
) -> None:
    """The search rows Phase 2 writes come from the archive ``read_input`` read, without a
    second read; they are the rows the search makes of an archive not indexed yet."""
    use = (ToolUsePart("t1", "bash", '{"cmd": "ls /srv/ledger"}'),)
    result = (ToolResultPart("t1", "ledger.db invoices.csv", is_error=True),)
    await _add(
        services, "s", Message("u", Role.USER, (TextPart("Ports: 8080 and 9090"),), 3),
        Message("a", Role.ASSISTANT, use, 3), Message("r", Role.USER, result, 2), _text(1, "z"),
    )  # fmt: skip
    await services.commits.phase1("s", 1, None)
    job = await _claim(services)
    data = await services.jobs.read_input(job)
    rows = services.jobs.search_rows(data)
    async with services.database.reader() as uow:
        bounds = await uow.archives.bounds(data.sid, job.archive_seq)
        assert bounds == (1, 3)
        assert rows == await uow.archives.search_rows(data.sid, job.archive_seq, *bounds)
    assert [r.position for r in rows] == [1, 2, 3] and all(r.body for r in rows)
    assert rows[0].archive_time > 0


async def test_expired_lease_is_claimed_again(services: Services) -> None:
    await _add(services, "s", _text(1))
    await services.commits.phase1("s", 0, None)
    first = await _claim(services, 0.01)
    await asyncio.sleep(0.05)
    second = await _claim(services)
    assert second.commit_id == first.commit_id and second.attempts == 2
    assert not await services.jobs.renew(first, 60)
    with pytest.raises(LeaseLost):
        await services.jobs.complete(first, _completion("doc", (1,)))


async def test_events_go_in_only_while_the_number_and_the_condition_hold(
    services: Services,
) -> None:
    """``EventLog.append_if`` (a progress write on SQLite): the events are stored only while
    the commit's last event number is the one given and the condition (here the lease)
    holds; otherwise nothing is written and it says so."""
    await _add(services, "s", _text(1))
    await services.commits.phase1("s", 0, None)
    job = await _claim(services)

    async def append(after: int, token: str) -> int | None:
        async with services.database.unit_of_work() as uow:
            last = await services.log.append_if(
                uow, "s", job.commit_id, after, [Phase2Started(1, True, 0, (1,))],
                uow.jobs.held(), {"token": token},
            )  # fmt: skip
            if last is not None:
                await uow.commit()
        return last

    assert await append(job.last_sequence, "another lease") is None
    assert await append(job.last_sequence - 1, job.lease_token) is None
    assert await _sequences(services, job.commit_id) == [1, 2]
    assert await append(job.last_sequence, job.lease_token) == job.last_sequence + 1 == 3
    assert await _sequences(services, job.commit_id) == [1, 2, 3]


async def test_progress_events_go_after_the_commits_last_event(services: Services) -> None:
    """A progress write trusts the attempt's own last event number (one statement where a
    statement is a round trip; on SQLite the statement that moves the number checks the
    lease, with no read first); with a stale one it stores nothing and the events go after
    the commit's real last event, numbered without a gap."""
    await _add(services, "s", _text(1))
    commit, _ = await services.commits.phase1("s", 0, None)
    job = await _claim(services)
    assert job.last_sequence == 2  # Phase 1, the claim's Phase2Started
    asked: list[str] = []
    database = services.database
    if isinstance(database, SqliteDatabase):
        database._connection().conn.set_trace_callback(asked.append)
    job = await services.jobs.record(job, Phase2Started(1, True, 0, (1,)))
    assert job.last_sequence == 3
    if isinstance(database, SqliteDatabase):
        database._connection().conn.set_trace_callback(None)
        assert [sql.split(" ")[0] for sql in asked] == ["BEGIN", "UPDATE", "INSERT", "COMMIT"]
    events = (Phase2Started(1, True, 0, (1,)), Phase2Started(1, True, 0, (1,)))
    stale = await services.jobs.record(replace(job, last_sequence=1), *events)
    assert stale.last_sequence == 5
    assert await _sequences(services, commit.commit_id) == [1, 2, 3, 4, 5]
    assert (await services.commits.get("s", commit.commit_id)).last_sequence == 5
    await services.jobs.release(stale)
    with pytest.raises(LeaseLost):  # the number is right, the lease is gone
        await services.jobs.record(stale, Phase2Started(1, True, 0, (1,)))
    assert await _sequences(services, commit.commit_id) == [1, 2, 3, 4, 5]


async def test_memory_context_reads_the_similar_memories_of_the_sessions_owner(
    services: Services,
) -> None:
    """Extraction's context: the owner's memories like the archive's messages. The owner the
    input was read with lets them be read with the session (one round trip on PostgreSQL);
    a wrong one is checked against the session and the memories read for the right one."""
    await services.sessions.create("s", "", user_id="u1")
    for text in ("Kiwi pie recipe from grandma", "The build uses port 8080"):
        await services.memories.create(
            OwnerSpec(user_id="u1"), MemoryContent(MemoryType.ENTITY, text), "", ""
        )
    await services.memories.create(
        OwnerSpec(user_id="u2"), MemoryContent(MemoryType.ENTITY, "Kiwi jam"), "", ""
    )
    parts = (TextPart("bake the kiwi pie tonight"),)
    await _add(services, "s", Message("m", Role.USER, parts, message_tokens(parts)))
    await services.commits.phase1("s", 0, None)
    job = await _claim(services)
    data = await services.jobs.read_input(job)
    assert data.owner == MemoryOwner("user:u1")
    contexts = [
        await services.jobs.memory_context(job, data.messages, enabled_by_server=True, owner=owner)
        for owner in (data.owner, None, MemoryOwner("user:u2"))
    ]
    for context in contexts:
        assert context.enabled and context.owner == MemoryOwner("user:u1")
        assert [m.text for m in context.existing] == ["Kiwi pie recipe from grandma"]
    off = await services.jobs.memory_context(
        job, data.messages, enabled_by_server=False, owner=data.owner
    )
    assert not off.enabled and off.existing == ()


async def test_phase2_reads_take_the_session_row_the_claim_read(services: Services) -> None:
    """The input is read with the session's row as the claim read it, and extraction's
    context with that row too: neither reads the session again (on SQLite: the statements
    asked), and a session whose extraction is off asks nothing for its context at all."""
    await services.sessions.create("s", "", user_id="u1")
    await services.sessions.create("off", "", config=SessionSettings(memory_extraction=False))
    await services.memories.create(
        OwnerSpec(user_id="u1"), MemoryContent(MemoryType.ENTITY, "Kiwi pie recipe"), "", ""
    )
    asked: list[str] = []
    database = services.database
    if isinstance(database, SqliteDatabase):
        database._connection().conn.set_trace_callback(
            lambda sql: asked.append(sql) if not sql.startswith("--") else None
        )  # our statements (FTS5's own inner ones start with "--")
    parts = (TextPart("bake the kiwi pie tonight"),)
    for name in ("s", "off"):
        await _add(services, name, Message("m", Role.USER, parts, message_tokens(parts)))
        await services.commits.phase1(name, 0, None)
    contexts = []
    for name in ("s", "off"):
        job = await _claim(services)
        assert job.session_id == name
        asked.clear()
        data = await services.jobs.read_input(job)
        assert data.session is not None and data.session.record.session_id == name
        read_input, asked[:] = list(asked), []
        contexts.append(
            await services.jobs.memory_context(
                job, data.messages, enabled_by_server=True, owner=data.owner, session=data.session
            )
        )
        if isinstance(database, SqliteDatabase):
            sessions = [q for q in read_input + asked if "FROM sessions" in q.split(" WHERE")[0]]
            assert sessions == [] and len(read_input) == 4
            assert (asked == []) is (name == "off")
    on, off = contexts
    assert on.enabled and on.owner == MemoryOwner("user:u1")
    assert [m.text for m in on.existing] == ["Kiwi pie recipe"]
    assert not off.enabled and off.off_reason == "memory extraction is off for this session"


async def test_wm_conflict_is_detected(services: Services) -> None:
    await _add(services, "s", _text(1))
    await services.commits.phase1("s", 0, None)
    job = await _claim(services)
    op = SectionOp(OpKind.UPDATE, "Tidy the storage layer.")
    applied, _ = await services.memory.apply("s", {"Current State": op}, 0, "w", "fp")
    assert applied.version == 1
    replayed, _ = await services.memory.apply("s", {"Current State": op}, 0, "w", "fp")
    assert replayed.version == 1  # the request id's stored outcome, not a second version
    assert await services.jobs.complete(job, _completion("doc", (1,))) is None
    assert (await services.memory.get("s", 0)).record.version == 1


async def test_retry_and_coverage_of_failed_commits(services: Services) -> None:
    await _add(services, "s", _text(1, "a"))
    failed, _ = await services.commits.phase1("s", 0, None)
    job = await _claim(services)
    await services.jobs.schedule_retry(job, 0, "the model is away")
    job = await _claim(services)
    assert job.attempts == 2
    record = await services.jobs.fail(job, "LLM_UNAVAILABLE", "still away")
    # Phase 1, started, retry scheduled, started again, failed.
    assert record.state is CommitState.FAILED and record.last_sequence == 5
    retried = await services.commits.retry("s", failed.commit_id, "r1", "fp")
    again = await services.commits.retry("s", failed.commit_id, "r1", "fp")
    assert retried.state is CommitState.PENDING and again.commit_id == retried.commit_id
    assert await _sequences(services, failed.commit_id) == [1, 2, 3, 4, 5, 6]  # one retry event
    with pytest.raises(FailedPrecondition) as not_failed:
        await services.commits.retry("s", failed.commit_id, "", "")
    assert not_failed.value.reason == "COMMIT_NOT_FAILED"
    job = await _claim(services)
    await services.jobs.fail(job, "LLM_UNAVAILABLE", "away again")
    await _add(services, "s", _text(1, "b"))
    later, _ = await services.commits.phase1("s", 0, None)
    job = await _claim(services)
    data = await services.jobs.read_input(job)
    assert data.covered_seqs == (1, 2) and [m.id for m in data.messages] == ["a", "b"]
    await services.jobs.complete(job, _completion("doc", data.covered_seqs))
    covered = await services.commits.get("s", failed.commit_id)
    assert covered.covered_by_commit_id == later.commit_id
    with pytest.raises(FailedPrecondition) as already:
        await services.commits.retry("s", failed.commit_id, "", "")
    assert already.value.reason == "COMMIT_ALREADY_COVERED"
    with pytest.raises(NotFound):
        await services.commits.get("s", "c-none")


async def test_pending_items_are_replaced_by_each_completion_and_read_in_order(
    services: Services,
) -> None:
    items = (
        PendingItem("Key Facts & Decisions", "Port 8443 chosen on 2025-03-01", "key_facts", 1),
        PendingItem("Files & Context", "`src/a.py`: read", "bound", 1),
        PendingItem("", "[Key Facts & Decisions] Port 9000 chosen", "overflow", 0),
    )
    first_commit = ""
    for step, pending in enumerate([items, items[1:], None, ()], start=1):
        await _add(services, "s", _text(1, f"m{step}"))
        commit, _ = await services.commits.phase1("s", 0, None)
        first_commit = first_commit or commit.commit_id
        job = await _claim(services)
        data = await services.jobs.read_input(job)
        completion = replace(_completion(f"doc {step}", data.covered_seqs), pending=pending)
        done = await services.jobs.complete(job, completion)
        assert done is not None
        async with services.database.reader() as uow:
            row = await uow.sessions.find(job.tenant, "s")
            assert row is not None
            stored = await uow.pending_items.of_session(row.sid)
            shown = await uow.pending_items.with_commits(row.sid)
        expected = {1: items, 2: items[1:], 3: items[1:], 4: ()}[step]  # None: left as is
        assert tuple(stored) == expected
        # Each item names the commit of the archive that refused it; the overflow item none.
        commits = {1: first_commit, 0: None}
        assert shown == [(item, commits[item.archive_seq]) for item in expected]
    await _add(services, "s", _text(1, "m5"))
    await services.commits.phase1("s", 0, None)
    job = await _claim(services)
    assert (await services.jobs.read_input(job)).pending == ()


async def test_a_failed_event_write_leaves_no_gap(database: Database) -> None:
    fail_next = {"on": False}
    normal = build_services(database)

    def encode(session_id: str, commit_id: str, sequence: int, event: object) -> bytes:
        if fail_next["on"] and isinstance(event, Phase2Started):
            raise OSError("the encoder broke")
        return normal.log.encode(session_id, commit_id, sequence, event)  # type: ignore[arg-type]

    jobs = JobStore(database, EventLog(encode))
    await _add(normal, "s", _text(1))
    commit, _ = await normal.commits.phase1("s", 0, None)
    fail_next["on"] = True
    with pytest.raises(OSError):
        await jobs.claim(60)  # its Phase2Started could not be stored: no lease either
    fail_next["on"] = False
    job = await jobs.claim(60)
    assert job is not None and job.attempts == 1
    await jobs.record(job, Phase2Started(job.attempts, True, 0, (1,)))
    await jobs.complete(job, _completion("doc", (1,)))
    assert await _sequences(normal, commit.commit_id) == [1, 2, 3, 4, 5]
    stored = await normal.commits.get("s", commit.commit_id)
    assert stored.last_sequence == 5 and stored.state is CommitState.COMPLETED


async def test_search_is_literal_and_newest_archive_first(services: Services) -> None:
    await _add(services, "s", Message("m1", Role.USER, (TextPart("cost is $5.00 (approx)"),), 5))
    await services.commits.phase1("s", 0, None)
    await _add(services, "s", Message("m2", Role.USER, (TextPart("COST IS $5.00 (APPROX) again"),), 5))  # fmt: skip
    await services.commits.phase1("s", 0, None)
    found, total = await services.archive_search.search("s", "$5.00 (approx)", "", 10, False)
    assert total == 2 and [(m.archive_seq, m.message.id) for m, _ in found] == [
        (2, "m2"),
        (1, "m1"),
    ]
    everywhere, _ = await services.archive_search.search("", "again", "", 10, True)
    assert [m.message.id for m, _ in everywhere] == ["m2"]
    only, _ = await services.archive_search.search("s", "cost", "archive_001", 10, False)
    assert [m.message.id for m, _ in only] == ["m1"]


async def test_assembly_reads_what_the_wm_does_not_cover(services: Services) -> None:
    await _add(services, "s", _text(5, "a"), _text(5, "b"))
    await services.commits.phase1("s", 1, None)
    job = await _claim(services)
    await services.jobs.complete(job, _completion("# Working Memory\n", (1,)))
    await _add(services, "s", _text(5, "c"))
    await services.commits.phase1("s", 1, None)
    built = await services.context.assemble("s", 100_000, "")
    assert built.budget == 100_000
    wm = built.working_memory
    assert wm is not None and wm.version == 1 and built.uncovered == [2]
    assert built.context.included_source_messages == 2  # b (archive 2, uncovered) and c (live)
    assert built.recall.semantic is None and not built.recall.ids  # no recall was asked
    live = await services.sessions.live_messages("s")
    assert [m.message.id for m in live] == ["c"]
    assert built.rendered_json == "" and built.memory_tokens == 0
    blocks = await services.context.assemble(
        "s", 100_000, "Be brief.", fmt=ContextFormat.ANTHROPIC_MESSAGES
    )
    assert json.loads(blocks.rendered_json) == json.loads(anthropic_json(blocks.context.messages))
    copies = await services.context.assemble(
        "s", 100_000, "Be brief.", fmt=ContextFormat.OPENAI_RESPONSES
    )
    items = json.loads(copies.rendered_json)
    assert items[0]["role"] == "system" and "Be brief." in items[0]["content"]
    assert copies.context.messages == blocks.context.messages == built.context.messages


async def test_delete_unlinks_at_once_and_purges_in_the_background(services: Services) -> None:
    await services.sessions.create("s", "create-1", "fp")
    await _add(services, "s", *[_text(1, f"m{i}") for i in range(5)], rid="add-1")
    await services.commits.phase1("s", 2, None)
    await services.sessions.delete("s", "del-1", "fp")
    await services.sessions.delete("s", "del-1", "fp")  # a retry answers the same
    with pytest.raises(NotFound):
        await services.sessions.delete("s", "", "")
    assert await services.jobs.claim(60) is None  # its job went with it
    # Created again: the old request ids belong to the deleted session and match nothing.
    _, created = await services.sessions.create("s", "create-1", "fp")
    assert created
    result = await services.sessions.add_messages(
        "s", [_text(1, "m0")], create_if_missing=False, request_id="add-1", fingerprint="fp"
    )
    assert result.added_ids == ("m0",) and result.session.total_message_count == 1
    assert await services.maintenance.purge_deleted() > 5
    assert await services.maintenance.purge_deleted() == 0
    async with services.database.reader() as uow:
        assert await uow.sessions.unlinked() == []
    await services.sessions.delete("s", "del-1", "fp")  # still the remembered outcome
    assert (await services.sessions.get("s")).total_message_count == 1


async def test_a_large_session_is_purged_in_bounded_chunks(services: Services) -> None:
    from wm_server.services import maintenance

    count = maintenance.CHUNK * 2 + 10
    await _add(services, "big", *[_text(1, f"m{i}") for i in range(count)])
    async with services.database.reader() as uow:
        row = await uow.sessions.find("t", "big")
    assert row is not None
    await services.sessions.delete("big", "")
    with pytest.raises(NotFound):  # gone at once, its rows not yet
        await services.sessions.get("big")
    async with services.database.reader() as uow:
        assert await uow.sessions.unlinked() == [row.sid]
        assert len(await uow.messages.between(row.sid, 1, None)) == count
    chunks: list[int] = []
    purge = services.maintenance._purge_chunk

    async def counting(table: str, key: str, sid: int) -> int:
        removed = await purge(table, key, sid)
        chunks.append(removed)
        return removed

    services.maintenance._purge_chunk = counting  # type: ignore[method-assign]
    assert await services.maintenance.purge_deleted() == count + 1  # the messages, the row
    assert max(chunks) == maintenance.CHUNK and len(chunks) > 3
    async with services.database.reader() as uow:
        assert await uow.messages.between(row.sid, 1, None) == []
        assert await uow.sessions.by_sid(row.sid) is None


async def test_request_ids_expire_after_the_retention(database: Database) -> None:
    from wm_server.services import maintenance

    services = build_services(database, retention=3600.0)
    await services.sessions.create("s", "rid", "fp")
    assert await services.maintenance.prune_requests() == 0  # within the retention: kept
    await asyncio.sleep(0.1)
    # A second maintenance with a retention the request has outlived (two of them rather
    # than one retention of 0.05 s for both checks: under load, the first check came more
    # than 0.05 s after the create and found it expired already).
    expiring = maintenance.Maintenance(database, retention_seconds=0.05)
    assert await expiring.prune_requests() == 1
    with pytest.raises(AlreadyExists):  # forgotten: a retry is a new request
        await services.sessions.create("s", "rid", "fp")


async def test_storage_errors_are_classified(database: Database, tmp_path: Path) -> None:
    busy = sqlite3.OperationalError("database is locked")
    busy.sqlite_errorcode = sqlite3.SQLITE_BUSY  # type: ignore[attr-defined]
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = sqlite3.SQLITE_FULL  # type: ignore[attr-defined]
    if isinstance(database, SqliteDatabase):
        assert isinstance(database.classify(busy), StorageUnavailable)
        assert isinstance(database.classify(full), StorageFull)
    else:
        from psycopg import OperationalError, errors

        assert isinstance(database.classify(errors.DiskFull("no space")), StorageFull)
        assert isinstance(database.classify(OperationalError("gone")), StorageUnavailable)
        assert isinstance(database.classify(errors.DeadlockDetected()), StorageUnavailable)
    assert database.classify(ValueError("a bug")) is None


async def test_a_foreign_writer_makes_writes_unavailable_without_blocking(
    tmp_path: Path,
) -> None:
    database = SqliteDatabase(tmp_path / "wm.sqlite3", lock_timeout=0.3)
    await database.open()
    services = build_services(database)
    set_tenant("t")
    foreign = sqlite3.connect(tmp_path / "wm.sqlite3", isolation_level=None)
    try:
        foreign.execute("BEGIN IMMEDIATE")
        ticks = 0

        async def heartbeat() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        beat = asyncio.create_task(heartbeat())
        started = time.monotonic()
        with pytest.raises(StorageUnavailable) as unavailable:
            await services.sessions.create("s", "")
        beat.cancel()
        assert unavailable.value.reason == "STORAGE_UNAVAILABLE"
        assert time.monotonic() - started >= 0.3
        assert ticks >= 10  # the loop kept running while the write waited
        foreign.execute("ROLLBACK")
        record, _ = await services.sessions.create("s", "")  # recovered
        assert record.session_id == "s"
    finally:
        foreign.close()
        await database.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.lists(st.integers(0, 50), min_size=1, max_size=8)),
            st.tuples(st.just("commit"), st.integers(0, 6)),
        ),
        max_size=12,
    )
)
async def test_pending_counter_always_equals_the_rebuild(
    services: Services, steps: list[tuple[str, object]]
) -> None:
    set_tenant("t")
    session = f"p-{uuid.uuid4().hex[:8]}"
    await services.sessions.create(session, "")
    expected_archives = 0
    for kind, value in steps:
        if kind == "add":
            await _add(services, session, *[_text(n) for n in value])  # type: ignore[union-attr]
        else:
            record, _ = await services.commits.phase1(session, int(value), None)  # type: ignore[call-overload]
            if record.state is not CommitState.SKIPPED:
                expected_archives += 1
                assert record.archive_seq == expected_archives
        counted = await services.sessions.get(session)
        pending, live = await services.sessions.rebuild_pending_tokens(session)
        assert (counted.pending_tokens, counted.live_tokens) == (pending, live)
        live_messages = await services.sessions.live_messages(session)
        assert counted.message_count == len(live_messages)
        assert live == sum(m.message.estimated_tokens for m in live_messages)


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_database_of_the_first_schema_upgrades_in_place(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A database made by the previous release (schema version 1, with a session in it)
    opens, migrates and keeps its rows."""
    from wm_server.storage import schema_postgres, schema_sqlite

    old = "INSERT INTO sessions (tenant, session_id, create_time, update_time)"
    old += " VALUES ('t', 'old', 1, 1)"
    setup = ["CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY)"]
    if engine == "sqlite":
        conn = sqlite3.connect(tmp_path / "wm.sqlite3", isolation_level=None)
        version1 = str(schema_sqlite.MIGRATIONS[0][1])
        run = conn.execute
    else:
        import psycopg

        conn = psycopg.connect(request.getfixturevalue("empty_postgres_url"), autocommit=True)
        version1 = str(schema_postgres.MIGRATIONS[0][1])
        run = conn.execute  # type: ignore[assignment]
    setup += [s for s in version1.split(";") if s.strip()]
    for statement in [*setup, "INSERT INTO schema_migrations VALUES (1)", old]:
        run(statement)
    conn.close()
    database = make_database(engine, request, tmp_path, empty=True)
    await database.open()
    try:
        set_tenant("t")
        services = build_services(database)
        assert (await services.sessions.get("old")).session_id == "old"
        await services.sessions.create("new", "rid", "fp")  # the new requests table works
        async with database.reader() as uow:
            assert await uow.requests.find('["t", "CreateSession", "", "rid"]') is not None
    finally:
        await database.close()


# --- tool outputs stored whole (issue 18) ------------------------------------------------------

_LOG = "".join(f"step {n}: ok é\n" for n in range(4000)) + "ERROR: ledger out of balance\n"


async def test_large_tool_outputs_are_stored_whole_and_the_window_sees_the_synopsis(
    services: Services,
) -> None:
    big_input = '{"path": "dump.json", "rows": "' + "r" * 30_000 + '"}'
    messages = [
        Message("c1", Role.ASSISTANT, (ToolUsePart("t1", "write", big_input),), 0),
        Message("r1", Role.USER, (ToolResultPart("t1", _LOG, True),), 0),
    ]
    await _add(services, "s", *messages, rid="add-1")
    await _add(services, "s", *messages, rid="add-2")  # duplicates: nothing stored twice
    live = [m.message for m in await services.sessions.live_messages("s")]
    (result,) = live[1].parts
    assert isinstance(result, ToolResultPart) and result.is_error
    assert result.content.startswith("[Tool output out.r1.0 stored in full")
    assert "ERROR: ledger out of balance" in result.content
    session = await services.sessions.get("s")
    assert session.live_tokens == sum(m.estimated_tokens for m in live) < 4000
    assert (await services.sessions.rebuild_pending_tokens("s"))[1] == session.live_tokens
    page = await services.tool_outputs.read("s", "out.r1.0", "lines", 4001, 0, "")
    assert page.content == "ERROR: ledger out of balance\n" and page.start_line == 4001
    assert page.output.kind == "result" and page.output.format == "text"
    assert page.output.size_bytes == len(_LOG.encode()) and page.output.line_count == 4001
    use = await services.tool_outputs.read("s", "out.c1.0", "bytes", 0, 0, "")
    assert use.content == big_input and use.output.kind == "input"
    with pytest.raises(NotFound):
        await services.tool_outputs.read("s", "out.r9.0", "lines", 0, 0, "")


async def test_tool_output_pages_cover_a_range_exactly_on_character_boundaries(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wm_server.services import tool_outputs

    monkeypatch.setattr(tool_outputs, "MAX_PAGE_BYTES", 1000)
    monkeypatch.setattr(tool_outputs, "MAX_PAGE_LINES", 100)
    await _add(services, "s", Message("r", Role.USER, (ToolResultPart("t", _LOG),), 0))
    whole = b""
    token = ""
    pages = 0
    while True:
        page = await services.tool_outputs.read("s", "out.r.0", "bytes", 0, 0, token)
        assert page.byte_count <= 1000 and page.start_byte == len(whole)
        whole += page.content.encode()
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert whole == _LOG.encode() and pages > len(whole) // 1000
    page = await services.tool_outputs.read("s", "out.r.0", "lines", 10, 150, "")
    assert page.start_line == 10
    text = ""
    while True:  # pages of whole lines, each within 1000 bytes, that continue one another
        assert page.content.endswith("\n") and page.line_count == page.content.count("\n")
        assert len(page.content.encode()) <= 1000 and page.start_line == 10 + text.count("\n")
        text += page.content
        if not page.next_page_token:
            break
        page = await services.tool_outputs.read("s", "out.r.0", "", 0, 0, page.next_page_token)
    assert text == "".join(_LOG.splitlines(keepends=True)[9:159])
    inside = await services.tool_outputs.read("s", "out.r.0", "bytes", 12, 40, "")
    assert inside.start_byte == 13  # byte 12 is inside "é" (11-12): the page starts after it
    assert inside.content.encode() == _LOG.encode()[13:52]
    other = await services.tool_outputs.read("s", "out.r.0", "bytes", 0, 0, "")
    with pytest.raises(InvalidArgument):  # a token of one output does not read another
        await services.tool_outputs.read("s", "out.x.0", "", 0, 0, other.next_page_token)


async def test_tool_outputs_are_searched_whole_and_go_with_their_session(
    services: Services,
) -> None:
    for n in range(10):  # more outputs than one search batch
        log = _LOG.replace("ledger", f"ledger-{n}")
        await _add(services, "s", Message(f"r{n}", Role.USER, (ToolResultPart("t", log),), 0))
    hits, total = await services.tool_outputs.search("s", "Ledger-7 OUT", "", 0)
    assert total == 1 and [(h.output_id, h.line) for h in hits] == [("out.r7.0", 4001)]
    assert hits[0].snippet == "ERROR: ledger-7 out of balance"
    hits, total = await services.tool_outputs.search("s", "of balance", "", 3)
    assert total == 10 and [h.message_id for h in hits] == ["r0", "r1", "r2"]
    hits, total = await services.tool_outputs.search("s", "é", "out.r3.0", 0)
    assert total == 4000 and {h.output_id for h in hits} == {"out.r3.0"}
    async with services.database.reader() as uow:
        sid = (await uow.sessions.find("t", "s")).sid  # type: ignore[union-attr]
    await services.sessions.delete("s", "", "")
    assert await services.maintenance.purge_deleted() > 10
    async with services.database.reader() as uow:
        assert await uow.tool_outputs.get(sid, "out.r0.0") is None


async def test_an_archive_is_read_in_pages_of_bounded_count_and_size(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wm_server.services import archives

    await _add(services, "s", *[_text(100, f"m{i}") for i in range(450)])  # 400 bytes each
    await services.commits.phase1("s", 0, None)
    ids: list[str] = []
    token = ""
    while True:
        page = await services.archives.messages("s", "archive_001", 0, token)
        assert len(page.messages) == 450 or token  # no count limit by default: one page
        ids.extend(m.message.id for m in page.messages)
        token = page.next_page_token
        if not token:
            break
    assert ids == [f"m{i}" for i in range(450)]
    monkeypatch.setattr(archives, "PAGE_BYTES", 10_000)  # 20 messages of 480 bytes
    sizes: list[int] = []
    positions: list[int] = []
    token = ""
    while True:
        page = await services.archives.messages("s", "archive_001", 30, token)
        sizes.append(len(page.messages))
        positions.append(page.messages[0].position)
        token = page.next_page_token
        if not token:
            break
    assert sizes == [20] * 22 + [10] and positions == list(range(1, 451, 20))
    page = await services.archives.messages("s", "archive_001", 7, "")
    assert len(page.messages) == 7
    with pytest.raises(InvalidArgument):
        await services.archives.messages("s", "archive_001", -1, "")
    other = await services.archives.messages("s", "archive_001", 1, "")
    await _add(services, "s", _text(1, "late"))
    await services.commits.phase1("s", 0, None)
    with pytest.raises(InvalidArgument):  # a token of archive 1 does not read archive 2
        await services.archives.messages("s", "archive_002", 0, other.next_page_token)


async def test_a_commit_keeping_turns_splits_on_a_turn_boundary(services: Services) -> None:
    def call(mid: str, tid: str) -> Message:
        return Message(mid, Role.ASSISTANT, (ToolUsePart(tid, "bash", "{}"),), 1)

    def result(mid: str, tid: str) -> Message:  # a user message, but not a request
        return Message(mid, Role.USER, (ToolResultPart(tid, "ok"),), 1)

    conversation = [
        _text(1, "q1"), call("a1", "t1"), result("r1", "t1"), Message("s1", Role.ASSISTANT, (TextPart("done"),), 1),
        _text(1, "q2"), call("a2", "t2"), result("r2", "t2"), call("a3", "t3"), result("r3", "t3"),
        _text(1, "q3"), Message("s3", Role.ASSISTANT, (TextPart("sure"),), 1),
    ]  # fmt: skip
    await _add(services, "s", *conversation)
    record, _ = await services.commits.phase1("s", 0, None, turns=2)
    assert (record.archived_message_count, record.kept_message_count) == (4, 7)  # q2 on
    assert record.keep_recent_count == 7 and (await services.sessions.get("s")).pending_tokens == 0
    # A kept tool result whose call is in an older turn pulls that whole turn in.
    await _add(
        services, "t", _text(1, "p1"), call("b1", "u1"), _text(1, "p2"), result("b2", "u1"),
        Message("b3", Role.ASSISTANT, (TextPart("both done"),), 1),
    )  # fmt: skip
    skipped, _ = await services.commits.phase1("t", 0, None, turns=1)
    assert skipped.state is CommitState.SKIPPED  # p2's turn holds u1's result: keep p1 on
    record, _ = await services.commits.phase1("t", 0, None, turns=5)
    assert record.state is CommitState.SKIPPED  # fewer turns than asked: everything stays
