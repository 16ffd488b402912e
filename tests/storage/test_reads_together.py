"""Reads sent together (``UnitOfWork.read``, ``read_each``; Phase 2's input, its memory
context and its completion's locks): each answers what it answers on its own, in order, a
queued write before them included, on both engines; a failing one fails the unit and leaves
the connection usable; and on PostgreSQL they cost one round trip (one Sync on the wire)."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest
from storage_support import Services, frontend_messages

from wm_core import Message, Role, TextPart, message_tokens
from wm_server.services.sessions import find_session
from wm_server.storage.database import Database
from wm_server.storage.postgres import PostgresDatabase
from wm_server.storage.statements import Read, Write


async def _archive(services: Services, text: str) -> None:
    parts = (TextPart(text),)
    messages = [Message("", Role.USER, parts, message_tokens(parts)) for _ in range(3)]
    await services.sessions.add_messages(
        "s", messages, create_if_missing=True, request_id="", fingerprint=""
    )
    await services.commits.phase1("s", 0, None)


async def test_reads_together_answer_as_each_alone(services: Services, database: Database) -> None:
    await _archive(services, "first archive")
    await _archive(services, "second archive")
    async with database.reader() as uow:
        row = await find_session(uow, "s")
        found, placed, pending, failed = await uow.read(
            uow.sessions.finding("t", "s"),
            uow.archives.placements(row.sid, [2, 99, 1]),  # 99: no such archive
            uow.pending_items.reading(row.sid),
            uow.commits.reading_memory_failed(row.sid, 3, 5),
        )
        assert found == await uow.sessions.find("t", "s")
        assert list(placed) == [1, 2]  # by seq, the missing one left out
        for seq, (first, last, _) in placed.items():
            assert (first, last) == await uow.archives.bounds(row.sid, seq)
        assert pending == await uow.pending_items.of_session(row.sid)
        assert failed == await uow.commits.memory_failed_before(row.sid, 3, 5)
        missing, wm = await uow.read(
            uow.sessions.finding("t", "nobody"), uow.working_memories.getting(row.sid, "t", "s", 1)
        )
        assert missing is None and wm is None
        each = await uow.read_each(
            [
                uow.messages.reading_between(row.sid, first, last)
                for first, last, _ in placed.values()
            ]
        )
        alone = [await uow.messages.between(row.sid, f, last) for f, last, _ in placed.values()]
        assert each == alone and [len(m) for m in each] == [3, 3]
        archived, cut = await uow.read(
            uow.messages.reading_archives(row.sid, [2, 99, 1], 100),
            uow.messages.reading_archives(row.sid, [1, 2], 4),
        )
        assert archived == dict(zip(placed, alone, strict=True))
        assert cut == {1: alone[0], 2: alone[1][:1]}  # the first four, in order


async def test_reads_together_see_the_units_queued_write(
    services: Services, database: Database
) -> None:
    await _archive(services, "an archive")
    async with database.unit_of_work(pipelined=True) as uow:
        row = await find_session(uow, "s")
        await uow.write(
            Write("UPDATE sessions SET keep_recent_count = 7 WHERE sid = :sid", {"sid": row.sid})
        )
        holder, locked = await uow.read(
            uow.jobs.holding("no-such-commit"), uow.sessions.finding("t", "s", lock=True)
        )
        assert holder is None
        assert locked is not None and locked.record.keep_recent_count == 7
        await uow.commit()


async def test_a_failing_read_fails_the_unit_and_the_connection_stays_usable(
    services: Services, database: Database
) -> None:
    await _archive(services, "an archive")
    broken: Read[list[object]] = Read("SELECT * FROM no_such_table", {}, list)
    with pytest.raises((psycopg.errors.UndefinedTable, sqlite3.OperationalError)):
        async with database.reader() as uow:
            await uow.read(uow.sessions.finding("t", "s"), broken)
    for _ in range(3):  # every pooled connection, whichever the failure went back as
        async with database.reader() as uow:
            found, _ = await uow.read(
                uow.sessions.finding("t", "s"), uow.sessions.finding("t", "s")
            )
        assert found is not None


@pytest.mark.postgres
async def test_postgresql_sends_reads_together_in_one_round_trip(postgres_url: str) -> None:
    database = PostgresDatabase(postgres_url, min_connections=1, max_connections=1)
    await database.open()
    try:
        for pipelined in (False, True):  # a reader, then Phase 2's pipelined completion
            unit = database.unit_of_work(pipelined=True) if pipelined else database.reader()
            async with unit as uow:
                reads = [uow.sessions.finding("t", f"s{n}") for n in range(4)]
                conn = uow._conn.conn  # type: ignore[attr-defined]
                with frontend_messages(conn) as sent:
                    assert await uow.read_each(reads) == [None] * 4
                syncs = [m for m in sent if m.startswith("Sync")]
                executes = [m for m in sent if m.startswith("Execute")]
                assert len(executes) == 4 and len(syncs) == 1
                if pipelined:
                    await uow.commit()
    finally:
        await database.close()
