"""A unit of work cancelled at any step gives its PostgreSQL connection back fit for the next
unit, or closed: never in pipeline mode, in a transaction or out of autocommit, and never
lost to the pool. Units are cancelled in earnest: a gRPC handler whose client's deadline
passed, Phase 2's memory reads stopped when the model call beside them fails.

The loop is kept busy for a moment before each unit, as a loaded machine keeps it: psycopg
then yields to the loop even at a step that completes at once (its ``wait_async`` after
5 ms without yielding), such as entering pipeline mode, and a cancellation can land there.
A connection left in pipeline mode that way went back to the pool (its transaction status
is IDLE), and the next unit's statements were only queued: ``one`` found no result and
answered None (in CI: a session row "missing" under its lock, a fresh name "taken")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
from psycopg import pq

from wm_server.errors import StorageUnavailable
from wm_server.storage.postgres import PostgresDatabase
from wm_server.storage.statements import Read, Write
from wm_server.storage.unit_of_work import UnitOfWork

pytestmark = pytest.mark.postgres

BUSY_SECONDS = 0.006  # the loop held this long: over psycopg's 5 ms, its next wait yields
FINISHED_IN_A_ROW = 3  # a unit not cancelled this many times running: every step was tried
MAX_STEPS = 300


@pytest.fixture
async def single(postgres_url: str) -> AsyncIterator[PostgresDatabase]:
    """A database of one pooled connection: the next unit gets the one a cancelled unit
    gave back (or its replacement), and one connection lost leaves the pool empty."""
    database = PostgresDatabase(postgres_url, min_connections=1, max_connections=1)
    await database.open()
    yield database
    await database.close()


def _number(n: int) -> Read[int]:
    return Read("SELECT :n::bigint", {"n": n}, lambda rows: int(rows[0][0]))


def _secret(name: str) -> Write:
    return Write(
        "INSERT INTO server_secrets (name, value) VALUES (:name, 'v') ON CONFLICT DO NOTHING",
        {"name": name},
    )


async def _reads(uow: UnitOfWork) -> None:
    assert await uow.read(_number(1), _number(2)) == (1, 2)  # together: pipeline mode
    assert await uow.read_each([_number(3)]) == [3]


async def _reader(database: PostgresDatabase, step: int) -> None:
    async with database.reader() as uow:
        await _reads(uow)


async def _scanner(database: PostgresDatabase, step: int) -> None:
    async with database.scanner() as uow:
        await _reads(uow)


async def _writer(database: PostgresDatabase, step: int) -> None:
    async with database.unit_of_work() as uow:
        await uow.write(_secret(f"plain-{step}"))
        await _reads(uow)
        await uow.commit()


async def _pipelined(database: PostgresDatabase, step: int) -> None:
    async with database.unit_of_work(pipelined=True) as uow:
        await uow.write(_secret(f"piped-{step}"))
        await _reads(uow)
        assert await uow.commit_with(_secret(f"piped-last-{step}")) == 1


UNITS: dict[str, Callable[[PostgresDatabase, int], Coroutine[Any, Any, None]]] = {
    "reader": _reader,
    "scanner": _scanner,
    "writer": _writer,
    "pipelined": _pipelined,
}


async def _next_unit_reads_right(database: PostgresDatabase) -> None:
    """The connection the next unit gets is as the pool lends them, and answers right."""
    async with database.unit_of_work() as uow:
        row = await uow._conn.one("SELECT 42", {})
        assert row is not None and row[0] == 42
        row = await uow._conn.one(
            "INSERT INTO server_secrets (name, value) VALUES ('probe', 'v')"
            " ON CONFLICT (name) DO UPDATE SET value = 'w' RETURNING name",
            {},
        )
        assert row is not None and row[0] == "probe"
        await _reads(uow)
    async with database.reader() as uow:
        raw = uow._conn.conn  # type: ignore[attr-defined]
        assert raw.autocommit and raw.pgconn.pipeline_status == pq.PipelineStatus.OFF
        assert raw.pgconn.transaction_status == pq.TransactionStatus.IDLE
        await _reads(uow)


@pytest.mark.parametrize("unit", list(UNITS))
async def test_a_unit_cancelled_at_any_step_leaves_the_pool_lending_sound_connections(
    single: PostgresDatabase, unit: str
) -> None:
    body = UNITS[unit]
    cancelled = finished = 0
    for step in range(MAX_STEPS):
        time.sleep(BUSY_SECONDS)  # noqa: ASYNC251 (the point: a loop busy as under load)
        task = asyncio.create_task(body(single, step))
        for _ in range(step):
            await asyncio.sleep(0)
        if task.done():
            finished += 1
            await task
            if finished == FINISHED_IN_A_ROW:
                break
        else:
            finished = 0
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                cancelled += 1
            except StorageUnavailable:  # psycopg's cancellation of the running statement
                cancelled += 1
        await _next_unit_reads_right(single)
    assert finished == FINISHED_IN_A_ROW, f"still cancelled mid-unit after {MAX_STEPS} steps"
    assert cancelled > 0
