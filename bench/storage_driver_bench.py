"""Storage driver benchmark: raw drivers against SQLAlchemy 2 Core, on the service's schema.

Usage: python bench/storage_driver_bench.py [--database postgresql://…] [--rounds N] [--scale F]

Issue 16 recommends SQLAlchemy 2 Core on async engines for the storage layer unless
measurements show it cannot hold the service's figures; this prints those measurements, so
the choice of raw drivers (stdlib sqlite3 inline on the event loop, psycopg 3 async with
psycopg_pool) is backed by numbers anyone can reproduce. It needs the bench-only packages
``sqlalchemy[asyncio]>=2`` and ``aiosqlite`` (not service dependencies) and exits 2 without.

What is timed is the transaction shape of AddMessages on the real tables (created by the
engines' own MIGRATIONS; SQLAlchemy's Table objects are reflected from them): BEGIN (SQLite:
BEGIN IMMEDIATE), SELECT the session row (PostgreSQL: FOR NO KEY UPDATE), SELECT the batch's
ids already stored, INSERT the batch (executemany), UPDATE the session counters, INSERT an
requests row (the idempotency record), COMMIT — for batches of 1 and of 100 messages of ~200 bytes; and the
GetSession read (one session row by tenant and session id). Every variant is an awaited call
inside one asyncio loop, as in the server:

  a  sqlite3      stdlib sqlite3 inline on the loop (what the service does)
  b  sa-sqlite    SQLAlchemy Core, sync pysqlite engine, inline on the loop
  c  sa-aiosqlite SQLAlchemy Core, async engine on aiosqlite (a thread hop per statement)
  d  psycopg      psycopg 3 AsyncConnection from psycopg_pool (what the service does)
  e  sa-psycopg   SQLAlchemy Core, async engine on postgresql+psycopg, same pool size

The SQLAlchemy variants use Core Table objects and statements built once (the engine's
compiled cache then serves every execution). Raw and SQLAlchemy variants of one engine send
the same statements over the same number of round trips (checked with a libpq trace on
PostgreSQL), so the differences are the layer's own cost. (The service's PostgreSQL engine
sends three statements inside BEGIN/COMMIT: the lock, one SELECT for the prior outcome and
the stored ids, one UPDATE carrying the inserts as CTEs; the shape here is the same for all.)
The PostgreSQL variants also run with 8 concurrent callers over their 8 connections (‖8).

The machine's speed drifts, so the variants run interleaved in short phases, round after
round, in a rotating order; the "added" table pairs each SQLAlchemy variant with its raw
driver within the same round and takes the median over rounds. CPU time is this process's
(time.process_time, all threads); PostgreSQL's server CPU is not in it. Figures are printed,
never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psycopg
from psycopg_pool import AsyncConnectionPool

from wm_server.storage import schema_postgres, schema_sqlite
from wm_server.storage.database import migration_statements
from wm_server.storage.sessions import SESSION_COLUMNS

try:
    import sqlalchemy as sa
    from sqlalchemy import event
    from sqlalchemy.dialects import postgresql as sa_pg
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
except ImportError:
    sa = None  # type: ignore[assignment]
try:
    import aiosqlite
except ImportError:
    aiosqlite = None  # type: ignore[assignment]
# Bench-only packages (greenlet is SQLAlchemy's asyncio extra), not service dependencies.
BENCH_PACKAGES = ("sqlalchemy", "aiosqlite", "greenlet")

SESSIONS = 64
POOL_SIZE = 8
TEXT = "lorem ipsum " * 16  # with the JSON around it, ~200 bytes of parts_json per message
# The embedded engine's connection settings (storage/sqlite.py opens its file the same way).
SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA foreign_keys=ON",
    "PRAGMA busy_timeout=10000",
    "PRAGMA cache_size=-65536",
)
TABLES = ("sessions", "messages", "tool_calls", "requests")
SESSION_COLUMN_NAMES = tuple(c.strip() for c in SESSION_COLUMNS.split(","))
# One message as the use case receives it: id, role, parts_json, tokens.
Msg = tuple[str, str, str, int]


# --- the use case, once: what every variant computes between its statements ----------------
@dataclass(frozen=True)
class Plan:
    """The writes of one AddMessages transaction, as plain tuples."""

    rows: list[tuple[int, int, str, str, str, int, float, str]]
    update: tuple[int, int, int, int, int, float, int]  # next, n, n, tokens, tokens, now, sid
    idempotency: tuple[
        str, int, str, str, float
    ]  # the requests row: key, sid, fingerprint, outcome, time


def plan(
    tenant: str,
    session_id: str,
    request_id: str,
    batch: Sequence[Msg],
    session: Sequence[Any],
    existing: set[str],
) -> Plan:
    """The use case's arithmetic between its reads and writes, shared by every variant so
    only the way statements reach the database differs."""
    sid, next_pos = int(session[0]), int(session[2])
    now = time.time()
    fresh = [m for m in batch if m[0] not in existing]
    rows = [
        (sid, next_pos + i, mid, role, parts, tokens, now, "")
        for i, (mid, role, parts, tokens) in enumerate(fresh)
    ]
    tokens = sum(m[3] for m in fresh)
    outcome = json.dumps({"added": [m[0] for m in fresh], "duplicates": sorted(existing)})
    return Plan(
        rows,
        (next_pos + len(fresh), len(fresh), len(fresh), tokens, tokens, now, sid),
        (f"{tenant}/AddMessages/{session_id}/{request_id}", sid, request_id, outcome, now),
    )


def make_batch(tag: str, start: int, size: int) -> list[Msg]:
    return [
        (f"{tag}-{start + i}", "user", json.dumps([{"text": f"message {start + i}: {TEXT}"}]), 50)
        for i in range(size)
    ]


# --- SQL text of the raw drivers (paramstyle and lock differ, shapes do not) ----------------
@dataclass(frozen=True)
class RawSql:
    lookup: str
    existing: Callable[[int], str]
    insert: str
    update: str
    idempotency: str
    get: str


def _raw_sql(mark: str, lock: str, any_ids: bool) -> RawSql:
    def existing(n: int) -> str:
        if any_ids:
            return (
                f"SELECT message_id FROM messages WHERE sid = {mark} AND message_id = ANY({mark})"
            )
        return (
            f"SELECT message_id FROM messages WHERE sid = {mark}"
            f" AND message_id IN ({','.join([mark] * n)})"
        )

    return RawSql(
        lookup="SELECT sid, first_live_position, next_position, keep_recent_count FROM sessions"
        f" WHERE tenant = {mark} AND session_id = {mark}{lock}",
        existing=existing,
        insert="INSERT INTO messages (sid, position, message_id, role, parts_json, tokens,"
        f" create_time, result_ids) VALUES ({', '.join([mark] * 8)})",
        update=f"UPDATE sessions SET next_position = {mark}, message_count = message_count + {mark},"
        f" total_message_count = total_message_count + {mark}, live_tokens = live_tokens + {mark},"
        f" pending_tokens = pending_tokens + {mark}, update_time = {mark} WHERE sid = {mark}",
        idempotency=f"INSERT INTO requests VALUES ({', '.join([mark] * 5)})",
        get=f"SELECT {SESSION_COLUMNS} FROM sessions WHERE tenant = {mark} AND session_id = {mark}",
    )


SQLITE_SQL = _raw_sql("?", "", any_ids=False)
POSTGRES_SQL = _raw_sql("%s", " FOR NO KEY UPDATE", any_ids=True)


class Variant(Protocol):
    key: str
    name: str
    tenant: str

    async def open(self) -> None: ...
    async def add(self, session_id: str, request_id: str, batch: Sequence[Msg]) -> None: ...
    async def get(self, session_id: str) -> Sequence[Any]: ...
    async def close(self) -> None: ...


def session_ids() -> list[str]:
    return [f"s{i}" for i in range(SESSIONS)]


def _sqlite_schema(path: Path, tenant: str) -> None:
    """The embedded engine's migrations and the bench's sessions, on a fresh file."""
    conn = sqlite3.connect(path, isolation_level=None)
    for pragma in SQLITE_PRAGMAS:
        conn.execute(pragma)
    for _, sql in schema_sqlite.MIGRATIONS:
        for statement in migration_statements(sql):
            conn.execute(statement)
    now = time.time()
    conn.executemany(
        "INSERT INTO sessions (tenant, session_id, create_time, update_time) VALUES (?, ?, ?, ?)",
        [(tenant, s, now, now) for s in session_ids()],
    )
    conn.close()


# --- a: stdlib sqlite3 inline ---------------------------------------------------------------
class RawSqlite:
    key, name, tenant = "a", "sqlite3 inline", "bench-a"

    def __init__(self, directory: Path) -> None:
        self._path = directory / "a.sqlite3"
        self._conn: sqlite3.Connection | None = None

    async def open(self) -> None:
        _sqlite_schema(self._path, self.tenant)
        self._conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        for pragma in SQLITE_PRAGMAS:
            self._conn.execute(pragma)

    def _c(self) -> sqlite3.Connection:
        assert self._conn is not None
        return self._conn

    async def add(self, session_id: str, request_id: str, batch: Sequence[Msg]) -> None:
        conn, q = self._c(), SQLITE_SQL
        conn.execute("BEGIN IMMEDIATE")
        try:
            session = conn.execute(q.lookup, (self.tenant, session_id)).fetchone()
            ids = [m[0] for m in batch]
            existing = {r[0] for r in conn.execute(q.existing(len(ids)), (session[0], *ids))}
            p = plan(self.tenant, session_id, request_id, batch, session, existing)
            conn.executemany(q.insert, p.rows)
            conn.execute(q.update, p.update)
            conn.execute(q.idempotency, p.idempotency)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    async def get(self, session_id: str) -> Sequence[Any]:
        row: Sequence[Any] = self._c().execute(SQLITE_SQL.get, (self.tenant, session_id)).fetchone()
        return row

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


# --- SQLAlchemy Core: the statements, once per reflected schema -----------------------------
@dataclass
class CoreStatements:
    lookup: Any
    existing: Any
    insert: Any
    insert_keys: tuple[str, ...]
    update: Any
    idempotency: Any
    idempotency_keys: tuple[str, ...]
    get: Any


def core_statements(meta: Any, postgres: bool) -> CoreStatements:
    s, m, i = meta.tables["sessions"], meta.tables["messages"], meta.tables["requests"]
    by_key = (s.c.tenant == sa.bindparam("tenant")) & (s.c.session_id == sa.bindparam("sid_"))
    lookup = sa.select(
        s.c.sid, s.c.first_live_position, s.c.next_position, s.c.keep_recent_count
    ).where(by_key)
    if postgres:
        lookup = lookup.with_for_update(key_share=True)  # FOR NO KEY UPDATE
        ids = m.c.message_id == sa.any_(sa.bindparam("ids", type_=sa_pg.ARRAY(sa.Text)))
    else:
        ids = m.c.message_id.in_(sa.bindparam("ids", expanding=True))
    existing = sa.select(m.c.message_id).where(m.c.sid == sa.bindparam("sid"), ids)
    update = (
        sa.update(s)
        .where(s.c.sid == sa.bindparam("p_sid"))
        .values(
            next_position=sa.bindparam("p_next"),
            message_count=s.c.message_count + sa.bindparam("p_n"),
            total_message_count=s.c.total_message_count + sa.bindparam("p_total"),
            live_tokens=s.c.live_tokens + sa.bindparam("p_live"),
            pending_tokens=s.c.pending_tokens + sa.bindparam("p_pending"),
            update_time=sa.bindparam("p_now"),
        )
    )
    return CoreStatements(
        lookup=lookup,
        existing=existing,
        insert=sa.insert(m),
        insert_keys=MESSAGE_KEYS,
        update=update,
        idempotency=sa.insert(i),
        idempotency_keys=("request_key", "sid", "fingerprint", "outcome", "create_time"),
        get=sa.select(*(s.c[name] for name in SESSION_COLUMN_NAMES)).where(by_key),
    )


MESSAGE_KEYS = (
    "sid", "position", "message_id", "role", "parts_json", "tokens", "create_time", "result_ids",
)  # fmt: skip
UPDATE_KEYS = ("p_next", "p_n", "p_total", "p_live", "p_pending", "p_now", "p_sid")


def core_params(
    q: CoreStatements, p: Plan
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    return (
        [dict(zip(q.insert_keys, r, strict=True)) for r in p.rows],
        dict(zip(UPDATE_KEYS, p.update, strict=True)),
        dict(zip(q.idempotency_keys, p.idempotency, strict=True)),
    )


def _sqlite_events(sync_engine: Any) -> None:
    """SQLAlchemy's documented recipe for SQLite transactions it does not mangle: the driver
    in autocommit, BEGIN IMMEDIATE emitted when a transaction begins — except on the reader
    connection (AUTOCOMMIT, its ROLLBACK skipped), whose single statements need no
    transaction, as in the service."""

    @event.listens_for(sync_engine, "connect")
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in SQLITE_PRAGMAS:
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(sync_engine, "begin")
    def on_begin(conn: Any) -> None:
        if not conn.info.get("wm_reader"):
            conn.exec_driver_sql("BEGIN IMMEDIATE")


def _check_write_lock(path: Path, *, held: bool) -> None:
    """Prove the SQLAlchemy variants hold SQLite's write lock in a write transaction (and
    the reader does not), so they time the same transactions as the raw driver."""
    probe = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        locked = False
    except sqlite3.OperationalError:
        locked = True
    finally:
        probe.close()
    if locked != held:
        raise RuntimeError(f"{path.name}: write lock {'not ' if held else ''}held as expected")


# --- b: SQLAlchemy Core, sync pysqlite engine inline ----------------------------------------
class CoreSqlite:
    key, name, tenant = "b", "SA Core pysqlite inline", "bench-b"

    def __init__(self, directory: Path) -> None:
        self._path = directory / "b.sqlite3"
        self._engine: Any = None
        self._writer: Any = None
        self._reader: Any = None
        self._q: CoreStatements | None = None

    async def open(self) -> None:
        _sqlite_schema(self._path, self.tenant)
        self._engine = sa.create_engine(
            f"sqlite:///{self._path}", pool_size=2, skip_autocommit_rollback=True
        )
        _sqlite_events(self._engine)
        # Both connections are held for the whole run: ``info`` belongs to the pooled DBAPI
        # connection, so only the reader may ever carry the mark.
        self._writer = self._engine.connect()
        self._reader = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        self._reader.info["wm_reader"] = True
        meta = sa.MetaData()
        meta.reflect(self._writer, only=TABLES)
        self._writer.commit()
        self._q = core_statements(meta, postgres=False)
        with self._writer.begin():
            self._writer.execute(self._q.lookup, {"tenant": self.tenant, "sid_": "s0"}).one()
            _check_write_lock(self._path, held=True)
        self._reader.execute(self._q.get, {"tenant": self.tenant, "sid_": "s0"}).one()
        _check_write_lock(self._path, held=False)
        self._reader.rollback()

    async def add(self, session_id: str, request_id: str, batch: Sequence[Msg]) -> None:
        conn, q = self._writer, self._q
        assert q is not None
        with conn.begin():
            session = conn.execute(q.lookup, {"tenant": self.tenant, "sid_": session_id}).one()
            ids = [m[0] for m in batch]
            existing = set(conn.execute(q.existing, {"sid": session[0], "ids": ids}).scalars())
            p = plan(self.tenant, session_id, request_id, batch, session, existing)
            rows, update, idem = core_params(q, p)
            conn.execute(q.insert, rows)
            conn.execute(q.update, update)
            conn.execute(q.idempotency, idem)

    async def get(self, session_id: str) -> Sequence[Any]:
        assert self._q is not None
        row: Sequence[Any] = self._reader.execute(
            self._q.get, {"tenant": self.tenant, "sid_": session_id}
        ).one()
        self._reader.rollback()
        return row

    async def close(self) -> None:
        for conn in (self._writer, self._reader):
            if conn is not None:
                conn.close()
        if self._engine is not None:
            self._engine.dispose()


# --- c: SQLAlchemy Core, async engine on aiosqlite ------------------------------------------
class CoreAiosqlite:
    key, name, tenant = "c", "SA Core aiosqlite", "bench-c"

    def __init__(self, directory: Path) -> None:
        self._path = directory / "c.sqlite3"
        self._engine: AsyncEngine | None = None
        self._writer: AsyncConnection | None = None
        self._reader: AsyncConnection | None = None
        self._q: CoreStatements | None = None

    async def open(self) -> None:
        _sqlite_schema(self._path, self.tenant)
        self._engine = create_async_engine(
            f"sqlite+aiosqlite:///{self._path}", pool_size=2, skip_autocommit_rollback=True
        )
        _sqlite_events(self._engine.sync_engine)
        self._writer = await self._engine.connect()
        self._reader = await (await self._engine.connect()).execution_options(
            isolation_level="AUTOCOMMIT"
        )
        self._reader.info["wm_reader"] = True
        meta = sa.MetaData()
        await self._writer.run_sync(lambda c: meta.reflect(c, only=TABLES))
        await self._writer.commit()
        self._q = core_statements(meta, postgres=False)
        async with self._writer.begin():
            key = {"tenant": self.tenant, "sid_": "s0"}
            (await self._writer.execute(self._q.lookup, key)).one()
            _check_write_lock(self._path, held=True)
        (await self._reader.execute(self._q.get, key)).one()
        _check_write_lock(self._path, held=False)
        await self._reader.rollback()

    async def add(self, session_id: str, request_id: str, batch: Sequence[Msg]) -> None:
        conn, q = self._writer, self._q
        assert conn is not None and q is not None
        async with conn.begin():
            session = (
                await conn.execute(q.lookup, {"tenant": self.tenant, "sid_": session_id})
            ).one()
            ids = [m[0] for m in batch]
            existing = set(
                (await conn.execute(q.existing, {"sid": session[0], "ids": ids})).scalars()
            )
            p = plan(self.tenant, session_id, request_id, batch, session, existing)
            rows, update, idem = core_params(q, p)
            await conn.execute(q.insert, rows)
            await conn.execute(q.update, update)
            await conn.execute(q.idempotency, idem)

    async def get(self, session_id: str) -> Sequence[Any]:
        assert self._reader is not None and self._q is not None
        result = await self._reader.execute(
            self._q.get, {"tenant": self.tenant, "sid_": session_id}
        )
        row: Sequence[Any] = result.one()
        await self._reader.rollback()
        return row

    async def close(self) -> None:
        for conn in (self._writer, self._reader):
            if conn is not None:
                await conn.close()
        if self._engine is not None:
            await self._engine.dispose()


# --- PostgreSQL: schema and sessions ----------------------------------------------------------
async def postgres_schema(url: str) -> None:
    """Fresh tables from the scale-out engine's migrations, sessions for every tenant."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for table in TABLES:
            await conn.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
        for table in ("commit_events", "phase2_jobs", "working_memories", "archives", "commits"):
            await conn.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
        for _, sql in schema_postgres.MIGRATIONS:
            for statement in migration_statements(sql):
                await conn.execute(statement)
        now = time.time()
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO sessions (tenant, session_id, create_time, update_time)"
                " VALUES (%s, %s, %s, %s)",
                [(t, s, now, now) for t in ("bench-d", "bench-e") for s in session_ids()],
            )
        await conn.execute("VACUUM ANALYZE")


# --- d: psycopg 3 async on psycopg_pool -----------------------------------------------------
class RawPsycopg:
    key, name, tenant = "d", "psycopg pool", "bench-d"

    def __init__(self, url: str) -> None:
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[tuple[Any, ...]]] = (
            AsyncConnectionPool(
                url,
                min_size=POOL_SIZE,
                max_size=POOL_SIZE,
                open=False,
                kwargs={"autocommit": True},
                name="bench",
            )
        )

    async def open(self) -> None:
        await self._pool.open(wait=True, timeout=30)

    async def add(self, session_id: str, request_id: str, batch: Sequence[Msg]) -> None:
        q = POSTGRES_SQL
        async with self._pool.connection() as conn, conn.transaction():
            cur = await conn.execute(q.lookup, (self.tenant, session_id))
            session = await cur.fetchone()
            assert session is not None
            ids = [m[0] for m in batch]
            cur = await conn.execute(q.existing(len(ids)), (session[0], ids))
            existing = {r[0] for r in await cur.fetchall()}
            p = plan(self.tenant, session_id, request_id, batch, session, existing)
            async with conn.cursor() as many:
                await many.executemany(q.insert, p.rows)
            await conn.execute(q.update, p.update)
            await conn.execute(q.idempotency, p.idempotency)

    async def get(self, session_id: str) -> Sequence[Any]:
        async with self._pool.connection() as conn:
            cur = await conn.execute(POSTGRES_SQL.get, (self.tenant, session_id))
            row = await cur.fetchone()
            assert row is not None
            return row

    async def close(self) -> None:
        await self._pool.close()


# --- e: SQLAlchemy Core, async engine on psycopg --------------------------------------------
class CorePsycopg:
    key, name, tenant = "e", "SA Core psycopg async", "bench-e"

    def __init__(self, url: str) -> None:
        self._url = sa.make_url(url).set(drivername="postgresql+psycopg")
        self._engine: AsyncEngine | None = None
        self._read_engine: AsyncEngine | None = None
        self._q: CoreStatements | None = None

    async def open(self) -> None:
        self._engine = create_async_engine(
            self._url, pool_size=POOL_SIZE, max_overflow=0, skip_autocommit_rollback=True
        )
        # Reads as the service does them: one statement, no BEGIN/ROLLBACK around it.
        self._read_engine = self._engine.execution_options(isolation_level="AUTOCOMMIT")
        meta = sa.MetaData()
        async with self._engine.connect() as conn:
            await conn.run_sync(lambda c: meta.reflect(c, only=TABLES))
        self._q = core_statements(meta, postgres=True)
        # Fill the pool, as psycopg_pool does at open.
        conns = [await self._engine.connect() for _ in range(POOL_SIZE)]
        for conn in conns:
            await conn.close()

    async def add(self, session_id: str, request_id: str, batch: Sequence[Msg]) -> None:
        assert self._engine is not None and self._q is not None
        q = self._q
        async with self._engine.begin() as conn:
            session = (
                await conn.execute(q.lookup, {"tenant": self.tenant, "sid_": session_id})
            ).one()
            ids = [m[0] for m in batch]
            existing = set(
                (await conn.execute(q.existing, {"sid": session[0], "ids": ids})).scalars()
            )
            p = plan(self.tenant, session_id, request_id, batch, session, existing)
            rows, update, idem = core_params(q, p)
            await conn.execute(q.insert, rows)
            await conn.execute(q.update, update)
            await conn.execute(q.idempotency, idem)

    async def get(self, session_id: str) -> Sequence[Any]:
        assert self._read_engine is not None and self._q is not None
        async with self._read_engine.connect() as conn:
            result = await conn.execute(self._q.get, {"tenant": self.tenant, "sid_": session_id})
            row: Sequence[Any] = result.one()
            return row

    async def close(self) -> None:
        if self._engine is not None:
            await self._engine.dispose()


# --- timing ---------------------------------------------------------------------------------
@dataclass
class Phase:
    """One variant's figures for one operation, accumulated over rounds."""

    calls: int = 0
    wall: float = 0.0
    cpu: float = 0.0
    latencies: list[float] = field(default_factory=list)
    round_means: list[float] = field(default_factory=list)  # wall s per call, per round
    round_cpu: list[float] = field(default_factory=list)  # CPU s per call, per round


@dataclass(frozen=True)
class Op:
    label: str
    batch: int  # messages per call; 0 for the read
    calls: int  # per round and variant
    concurrency: int


class Driver:
    """Runs a variant's calls, handing out fresh message ids and request ids."""

    def __init__(self, variant: Variant) -> None:
        self.variant = variant
        self._next = 0
        self._sessions = session_ids()

    def call(self, op: Op, worker: int, i: int) -> Callable[[], Awaitable[object]]:
        # Workers touch disjoint sessions, so concurrent calls never wait for a row lock.
        share = len(self._sessions) // op.concurrency
        session = self._sessions[worker + op.concurrency * (i % share)]
        if op.batch == 0:
            return lambda: self.variant.get(session)
        start, self._next = self._next, self._next + op.batch
        batch = make_batch(f"{self.variant.key}m", start, op.batch)
        return lambda: self.variant.add(session, f"{self.variant.key}r{start}", batch)


async def run_phase(driver: Driver, op: Op, into: Phase | None) -> None:
    """``op.calls`` calls spread over ``op.concurrency`` tasks; each call timed alone."""
    per_worker = max(1, op.calls // op.concurrency)
    latencies: list[float] = []
    # Batches are built before the clock starts: what differs between variants is timed only.
    calls = [[driver.call(op, w, i) for i in range(per_worker)] for w in range(op.concurrency)]

    async def worker(w: int) -> None:
        for call in calls[w]:
            t0 = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - t0)

    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(op.concurrency)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if into is not None:
        n = per_worker * op.concurrency
        into.calls += n
        into.wall += wall
        into.cpu += cpu
        into.latencies.extend(latencies)
        into.round_means.append(wall / n)
        into.round_cpu.append(cpu / n)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# Each SQLAlchemy variant against the raw driver of its engine.
PAIRS = (("b", "a"), ("c", "a"), ("e", "d"))


def report(
    variants: Sequence[Variant], ops: Sequence[Op], figures: dict[tuple[str, str], Phase]
) -> None:
    print()
    print(
        f"  {'variant':<26} {'operation':<22} {'tx/s':>9} {'msg/s':>9} {'p50 µs':>8}"
        f" {'p99 µs':>8} {'CPU µs/tx':>10}"
    )
    for op in ops:
        for v in variants:
            ph = figures.get((v.key, op.label))
            if ph is None or ph.calls == 0:
                continue
            tps = ph.calls / ph.wall
            msgs = f"{tps * op.batch:9,.0f}" if op.batch else f"{'':>9}"
            print(
                f"  {v.key} {v.name:<24} {op.label:<22} {tps:9,.0f} {msgs} "
                f"{quantile(ph.latencies, 0.5) * 1e6:8,.0f} {quantile(ph.latencies, 0.99) * 1e6:8,.0f}"
                f" {ph.cpu / ph.calls * 1e6:10,.0f}"
            )
        print()
    keys = {v.key for v in variants}
    print("  Added per call by SQLAlchemy over the raw driver (median over rounds of the")
    print("  same-round difference of mean wall time per call; CPU likewise), and the ratio:")
    print(f"  {'pair':<8} {'operation':<22} {'wall +µs':>9} {'CPU +µs':>9} {'wall ×':>7}")
    for sa_key, raw_key in PAIRS:
        if sa_key not in keys or raw_key not in keys:
            continue
        for op in ops:
            a, b = figures.get((sa_key, op.label)), figures.get((raw_key, op.label))
            if a is None or b is None or not a.round_means:
                continue
            dwall = statistics.median(
                x - y for x, y in zip(a.round_means, b.round_means, strict=True)
            )
            dcpu = statistics.median(x - y for x, y in zip(a.round_cpu, b.round_cpu, strict=True))
            ratio = statistics.median(
                x / y for x, y in zip(a.round_means, b.round_means, strict=True)
            )
            print(
                f"  {sa_key} vs {raw_key:<3} {op.label:<22} {dwall * 1e6:9,.0f} {dcpu * 1e6:9,.0f}"
                f" {ratio:7.2f}"
            )


async def main_async(args: argparse.Namespace) -> None:
    scale: float = args.scale
    directory = Path(tempfile.mkdtemp(prefix="wm-driver-bench-"))
    sqlite_variants: list[Variant] = [
        RawSqlite(directory),
        CoreSqlite(directory),
        CoreAiosqlite(directory),
    ]
    pg_variants: list[Variant] = []
    if args.database:
        await postgres_schema(args.database)
        pg_variants = [RawPsycopg(args.database), CorePsycopg(args.database)]
    variants = sqlite_variants + pg_variants
    for v in variants:
        await v.open()

    def n(x: int) -> int:
        return max(POOL_SIZE, int(x * scale))

    ops = [
        Op("AddMessages ×1", 1, n(600), 1),
        Op("AddMessages ×100", 100, n(60), 1),
        Op("GetSession", 0, n(2000), 1),
    ]
    pg_ops = [
        Op(f"AddMessages ×1 ‖{POOL_SIZE}", 1, n(800), POOL_SIZE),
        Op(f"AddMessages ×100 ‖{POOL_SIZE}", 100, n(80), POOL_SIZE),
        Op(f"GetSession ‖{POOL_SIZE}", 0, n(2400), POOL_SIZE),
    ]
    plan_ops: list[tuple[Op, list[Variant]]] = [(op, variants) for op in ops]
    if pg_variants:
        plan_ops += [(op, pg_variants) for op in pg_ops]
    drivers = {v.key: Driver(v) for v in variants}
    figures: dict[tuple[str, str], Phase] = {}
    print(
        f"storage driver bench: Python {platform.python_version()}, SQLAlchemy {sa.__version__},"
        f" aiosqlite {aiosqlite.__version__}, psycopg {psycopg.__version__},"
        f" sqlite {sqlite3.sqlite_version}; {args.rounds} rounds, scale {scale}",
        flush=True,
    )
    try:
        for op, vs in plan_ops:  # warm-up: caches, pools, compiled statements
            for v in vs:
                await run_phase(
                    drivers[v.key],
                    Op(op.label, op.batch, max(op.concurrency, op.calls // 10), op.concurrency),
                    None,
                )
        for r in range(args.rounds):
            for op, vs in plan_ops:
                order = vs[r % len(vs) :] + vs[: r % len(vs)]
                for v in order:
                    await run_phase(
                        drivers[v.key], op, figures.setdefault((v.key, op.label), Phase())
                    )
            print(f"  round {r + 1}/{args.rounds} done", flush=True)
    finally:
        for v in variants:
            await v.close()
        shutil.rmtree(directory, ignore_errors=True)
    report(variants, ops + (pg_ops if pg_variants else []), figures)
    if not args.database:
        print("  (PostgreSQL variants d, e skipped: pass --database postgresql://…)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", help="PostgreSQL URL; without it d and e are skipped")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies the calls per phase")
    args = parser.parse_args()
    if any(importlib.util.find_spec(name) is None for name in BENCH_PACKAGES):
        print(
            "storage_driver_bench needs the bench-only packages SQLAlchemy 2 and aiosqlite:\n"
            "  .venv/bin/pip install 'sqlalchemy[asyncio]>=2' aiosqlite",
            file=sys.stderr,
        )
        sys.exit(2)
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
