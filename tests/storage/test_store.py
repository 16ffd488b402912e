"""The storage contract: every use case over every engine, through the services that own the
rules and the repositories that hold the rows."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storage_support import (
    ENGINES,
    EXERCISED,
    Services,
    build_services,
    make_database,
    public_methods,
)

from wm_core import (
    Message,
    OpKind,
    PendingItem,
    Role,
    SectionOp,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    message_tokens,
)
from wm_server.errors import (
    AlreadyExists,
    FailedPrecondition,
    NotFound,
    StorageFull,
    StorageUnavailable,
)
from wm_server.services.events import EventLog, Phase2Started
from wm_server.services.jobs import JobService, LeaseLost
from wm_server.storage.database import Database
from wm_server.storage.records import ClaimedJob, CommitState, Phase2Completion
from wm_server.storage.sqlite import SqliteDatabase
from wm_server.storage.statements import Write
from wm_server.tenancy import set_tenant

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
    _, messages, wm = await services.archives.get("s", "archive_001")
    assert [m.id for m in messages] == ["u"] and wm is None
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
    await services.jobs.start(again, data)
    done = await services.jobs.complete(again, 0, _completion("# Working Memory\n", (1,)))
    assert done is not None and done[1].version == 1 and done[0].state is CommitState.COMPLETED
    assert done[0].last_sequence == 4 == len(await _sequences(services, names[0]))
    with pytest.raises(LeaseLost):
        await services.jobs.record(again, Phase2Started(1, True, 0, (1,)))
    nxt = await _claim(services)
    assert nxt.commit_id == names[1]
    data = await services.jobs.read_input(nxt)
    assert data.previous is not None and data.previous.version == 1
    assert await services.jobs.renew(nxt, 60)


async def test_expired_lease_is_claimed_again(services: Services) -> None:
    await _add(services, "s", _text(1))
    await services.commits.phase1("s", 0, None)
    first = await _claim(services, 0.01)
    await asyncio.sleep(0.05)
    second = await _claim(services)
    assert second.commit_id == first.commit_id and second.attempts == 2
    assert not await services.jobs.renew(first, 60)
    with pytest.raises(LeaseLost):
        await services.jobs.complete(first, 0, _completion("doc", (1,)))


async def test_wm_conflict_is_detected(services: Services) -> None:
    await _add(services, "s", _text(1))
    await services.commits.phase1("s", 0, None)
    job = await _claim(services)
    op = SectionOp(OpKind.UPDATE, "Tidy the storage layer.")
    applied, _ = await services.memory.apply("s", {"Current State": op}, 0, "w", "fp")
    assert applied.version == 1
    replayed, _ = await services.memory.apply("s", {"Current State": op}, 0, "w", "fp")
    assert replayed.version == 1  # the request id's stored outcome, not a second version
    assert await services.jobs.complete(job, 0, _completion("doc", (1,))) is None
    assert (await services.memory.get("s", 0)).version == 1


async def test_retry_and_coverage_of_failed_commits(services: Services) -> None:
    await _add(services, "s", _text(1, "a"))
    failed, _ = await services.commits.phase1("s", 0, None)
    job = await _claim(services)
    await services.jobs.schedule_retry(job, 0, "the model is away")
    job = await _claim(services)
    assert job.attempts == 2
    record = await services.jobs.fail(job, "LLM_UNAVAILABLE", "still away")
    assert record.state is CommitState.FAILED and record.last_sequence == 3
    retried = await services.commits.retry("s", failed.commit_id, "r1", "fp")
    again = await services.commits.retry("s", failed.commit_id, "r1", "fp")
    assert retried.state is CommitState.PENDING and again.commit_id == retried.commit_id
    assert await _sequences(services, failed.commit_id) == [1, 2, 3, 4]  # one retry event
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
    await services.jobs.complete(job, 0, _completion("doc", data.covered_seqs))
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
    )
    for step, pending in enumerate([items, items[1:], None, ()], start=1):
        await _add(services, "s", _text(1, f"m{step}"))
        await services.commits.phase1("s", 0, None)
        job = await _claim(services)
        data = await services.jobs.read_input(job)
        completion = replace(_completion(f"doc {step}", data.covered_seqs), pending=pending)
        done = await services.jobs.complete(job, step - 1, completion)
        assert done is not None
        async with services.database.reader() as uow:
            row = await uow.sessions.find(job.tenant, "s")
            assert row is not None
            stored = await uow.pending_items.of_session(row.sid)
        expected = {1: items, 2: items[1:], 3: items[1:], 4: ()}[step]  # None: left as is
        assert tuple(stored) == expected
    await _add(services, "s", _text(1, "m5"))
    await services.commits.phase1("s", 0, None)
    job = await _claim(services)
    assert (await services.jobs.read_input(job)).pending == ()


async def test_a_failed_event_write_leaves_no_gap(database: Database) -> None:
    fail_next = {"on": False}
    normal = build_services(database)

    def encode(commit_id: str, sequence: int, event: object) -> bytes:
        if fail_next["on"] and isinstance(event, Phase2Started):
            raise OSError("the encoder broke")
        return normal.log.encode(commit_id, sequence, event)  # type: ignore[arg-type]

    jobs = JobService(database, EventLog(encode))
    await _add(normal, "s", _text(1))
    commit, _ = await normal.commits.phase1("s", 0, None)
    job = await _claim(normal)
    data = await jobs.read_input(job)
    await jobs.start(job, data)
    fail_next["on"] = True
    with pytest.raises(OSError):
        await jobs.start(job, data)
    fail_next["on"] = False
    await jobs.record(job, Phase2Started(job.attempts, True, 0, (1,)))
    await jobs.complete(job, 0, _completion("doc", (1,)))
    assert await _sequences(normal, commit.commit_id) == [1, 2, 3, 4, 5]
    stored = await normal.commits.get("s", commit.commit_id)
    assert stored.last_sequence == 5 and stored.state is CommitState.COMPLETED


async def test_search_is_literal_and_newest_archive_first(services: Services) -> None:
    await _add(services, "s", Message("m1", Role.USER, (TextPart("cost is $5.00 (approx)"),), 5))
    await services.commits.phase1("s", 0, None)
    await _add(services, "s", Message("m2", Role.USER, (TextPart("COST IS $5.00 (APPROX) again"),), 5))  # fmt: skip
    await services.commits.phase1("s", 0, None)
    found, total = await services.context.search("s", "$5.00 (approx)", "", 10, False)
    assert total == 2 and [(m.archive_seq, m.message.id) for m, _ in found] == [
        (2, "m2"),
        (1, "m1"),
    ]
    everywhere, _ = await services.context.search("", "again", "", 10, True)
    assert [m.message.id for m, _ in everywhere] == ["m2"]
    only, _ = await services.context.search("s", "cost", "archive_001", 10, False)
    assert [m.message.id for m, _ in only] == ["m1"]


async def test_assembly_reads_what_the_wm_does_not_cover(services: Services) -> None:
    await _add(services, "s", _text(5, "a"), _text(5, "b"))
    await services.commits.phase1("s", 1, None)
    job = await _claim(services)
    await services.jobs.complete(job, 0, _completion("# Working Memory\n", (1,)))
    await _add(services, "s", _text(5, "c"))
    await services.commits.phase1("s", 1, None)
    result, wm, uncovered = await services.context.assemble("s", 100_000, "")
    assert wm is not None and wm.version == 1 and uncovered == [2]
    assert result.included_source_messages == 2  # b (archive 2, uncovered) and c (live)
    live = await services.sessions.live_messages("s")
    assert [m.message.id for m in live] == ["c"]


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
    services = build_services(database, retention=0.05)
    await services.sessions.create("s", "rid", "fp")
    assert await services.maintenance.prune_requests() == 0
    await asyncio.sleep(0.1)
    assert await services.maintenance.prune_requests() == 1
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


def test_every_port_method_is_exercised(request: pytest.FixtureRequest) -> None:
    """Collected last: every repository and engine method ran on every engine tested."""
    ran = [e for e in ("sqlite", "postgresql") if e in EXERCISED]
    storage_items = [i for i in request.session.items if "tests/storage" in str(i.path)]
    if len(storage_items) < 10 or not ran:
        pytest.skip("only part of the storage suite ran")
    for engine in ran:
        missing = sorted(public_methods() - EXERCISED[engine])
        assert not missing, f"{engine}: never exercised: {missing}"


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

        conn = psycopg.connect(request.getfixturevalue("postgres_url"), autocommit=True)
        version1 = str(schema_postgres.MIGRATIONS[0][1])
        run = conn.execute  # type: ignore[assignment]
    setup += [s for s in version1.split(";") if s.strip()]
    for statement in [*setup, "INSERT INTO schema_migrations VALUES (1)", old]:
        run(statement)
    conn.close()
    database = make_database(engine, request, tmp_path)
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
