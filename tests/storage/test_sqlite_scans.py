"""SQLite's scans (``Database.scanner``) on the reader thread: one snapshot per scan, opened
with its first statement and closed without a round trip of its own, so the next scan sees
every write committed before it and a failed scan leaves the reader usable."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from wm_core import Message, Role, TextPart
from wm_server.api.commit_event_encoder import encode_event
from wm_server.security.tenancy import set_tenant
from wm_server.services.commit_event_log import EventLog
from wm_server.services.paging import PageTokens
from wm_server.services.sessions import SessionService
from wm_server.storage.sqlite import SqliteDatabase

TENANT = "t"


def _message(i: int) -> Message:
    return Message(id=f"m{i}", role=Role.USER, parts=(TextPart(f"hello {i}"),))


async def _open(tmp_path: Path) -> tuple[SqliteDatabase, SessionService]:
    set_tenant(TENANT)
    database = SqliteDatabase(tmp_path / "wm.sqlite3")
    await database.open()
    return database, SessionService(
        database, log=EventLog(encode_event), tokens=PageTokens.random()
    )


async def test_a_scan_reads_one_snapshot_and_the_next_one_sees_later_writes(
    tmp_path: Path,
) -> None:
    database, sessions = await _open(tmp_path)
    try:
        await sessions.add_messages("a", [_message(0)], create_if_missing=True, request_id="")
        async with database.scanner() as uow:
            assert await uow.sessions.find(TENANT, "a") is not None
            # Committed on the writer while the scan is open: not in the scan's snapshot.
            await sessions.add_messages("b", [_message(1)], create_if_missing=True, request_id="")
            assert await uow.sessions.find(TENANT, "b") is None
        for _ in range(3):  # each later scan starts from the newest committed state
            async with database.scanner() as uow:
                assert await uow.sessions.find(TENANT, "b") is not None
            await sessions.add_messages("b", [_message(2)], create_if_missing=False, request_id="")
        async with database.scanner() as uow:
            row = await uow.sessions.find(TENANT, "b")
            assert row is not None and row.next_position == 3
    finally:
        await database.close()


async def test_a_failed_or_empty_scan_leaves_the_reader_usable(tmp_path: Path) -> None:
    database, sessions = await _open(tmp_path)
    try:
        await sessions.add_messages("a", [_message(0)], create_if_missing=True, request_id="")
        async with database.scanner():
            pass  # no statement: no snapshot was opened
        with pytest.raises(sqlite3.OperationalError):
            async with database.scanner() as uow:
                assert await uow.sessions.find(TENANT, "a") is not None
                await uow._conn.all("SELECT * FROM no_such_table", {})
        await sessions.add_messages("c", [_message(1)], create_if_missing=True, request_id="")
        async with database.scanner() as uow:
            assert await uow.sessions.find(TENANT, "c") is not None
        reader = database._reader_conn
        assert reader is not None
        async with database.scanner() as uow:  # the snapshot closes behind the scan
            await uow.sessions.find(TENANT, "c")
        await database._reader.all("SELECT 1", {})  # type: ignore[union-attr]  # after it
        assert not reader.in_transaction
    finally:
        await database.close()
