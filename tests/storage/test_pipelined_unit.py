"""A pipelined unit of work (``Database.unit_of_work(pipelined=True)``, Phase 2's completion):
on PostgreSQL its writes are only queued until a statement needs an answer, so what a later
read sees, what the commit keeps and what a failed write undoes must stay what a plain unit
gives, on both engines."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from wm_server.storage.database import Database
from wm_server.storage.statements import Write


def _secret(name: str, value: str | None) -> Write:
    return Write(
        "INSERT INTO server_secrets (name, value) VALUES (:name, :value)",
        {"name": name, "value": value},
    )


async def _secrets(database: Database) -> dict[str, str]:
    async with database.reader() as uow:
        rows = await uow._conn.all("SELECT name, value FROM server_secrets", {})
    return {str(n): str(v) for n, v in rows if str(n).startswith("pipe")}


async def test_queued_writes_are_read_back_and_committed(database: Database) -> None:
    async with database.unit_of_work(pipelined=True) as uow:
        await uow.write(_secret("pipe-a", "1"), _secret("pipe-b", "2"))
        await uow.write(
            Write(
                "INSERT INTO server_secrets (name, value) VALUES (:name, :value)",
                rows=[("pipe-c", "3"), ("pipe-d", "4")],
            )
        )
        await uow.write(
            Write("UPDATE server_secrets SET value = '5' WHERE name = :name", {"name": "pipe-a"})
        )
        row = await uow._conn.one(
            "SELECT count(*) FROM server_secrets WHERE name LIKE 'pipe%' AND value <> '1'", {}
        )
        assert row is not None and int(row[0]) == 4
        await uow.commit()
    assert await _secrets(database) == {"pipe-a": "5", "pipe-b": "2", "pipe-c": "3", "pipe-d": "4"}


async def test_a_failed_queued_write_undoes_the_unit(database: Database) -> None:
    with pytest.raises((psycopg.errors.NotNullViolation, sqlite3.IntegrityError)):
        async with database.unit_of_work(pipelined=True) as uow:
            await uow.write(_secret("pipe-a", "1"))
            await uow.write(_secret("pipe-b", None))  # NOT NULL: fails, here or at the next read
            await uow._conn.one("SELECT count(*) FROM server_secrets", {})
            await uow.commit()
    assert await _secrets(database) == {}
    # The connection went back to the pool usable, out of pipeline mode.
    async with database.unit_of_work() as uow:
        await uow.write(_secret("pipe-c", "3"))
        await uow.commit()
    assert await _secrets(database) == {"pipe-c": "3"}


async def test_a_pipelined_unit_left_without_commit_keeps_nothing(database: Database) -> None:
    async with database.unit_of_work(pipelined=True) as uow:
        await uow.write(_secret("pipe-a", "1"))
    assert await _secrets(database) == {}
    async with database.unit_of_work(pipelined=True) as uow:
        await uow.write(_secret("pipe-b", "2"))
        await uow.commit()
    assert await _secrets(database) == {"pipe-b": "2"}
