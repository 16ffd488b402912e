"""The embedded engine: one SQLite file in WAL mode.

SQLite allows one writer at a time, and its short transactions (a batch insert, Phase 1, a
row read) take tens to hundreds of microseconds — less than handing them to a thread costs.
So they run inline on the event loop, on one connection, one transaction at a time; the
statements of a transaction never wait on anything, so nothing else interleaves and writes
need no row locks. ``busy_timeout`` is 0 on that connection: when another process holds the
write lock, ``BEGIN IMMEDIATE`` is retried with an asynchronous backoff (the loop keeps
serving) up to a lock timeout, then the call answers UNAVAILABLE. Long reads (an archive, the
uncovered messages, a search) run on a second, read-only connection in a worker thread, as
one WAL snapshot. ``synchronous=NORMAL`` in WAL mode survives a killed process (the tests
SIGKILL the server) though not a power cut between checkpoints. Checkpoints run on a thread of
their own (``sqlite_checkpoint.py``), not in the COMMIT that crosses SQLite's threshold.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import shutil
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import structlog

from wm_server.errors import ServiceError, StorageFull, StorageUnavailable
from wm_server.storage.connection import Connection, Dialect
from wm_server.storage.database import Database, Kind, positional
from wm_server.storage.schema_sqlite import MESSAGE_TEXT, MIGRATIONS
from wm_server.storage.sqlite_checkpoint import Checkpointer
from wm_server.storage.statements import Params, Read, Row
from wm_server.storage.text_index import Fts5Index
from wm_server.storage.text_reindex import reindex

T = TypeVar("T")
log = structlog.get_logger("wm_server.storage.sqlite")

_FEW = 64
# The full-text tables erase() merges, and the pages one merge step writes at most.
FTS_TABLES = ("memories_fts", "archived_fts")
ERASE_MERGE_PAGES = 256


@functools.cache
def _placeholders(name: str, count: int) -> tuple[str, tuple[str, ...]]:
    keys = tuple(f"{name}_{i}" for i in range(count))
    return "IN (" + ", ".join(f":{k}" for k in keys) + ")", keys


def _in_list(name: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """A few values as parameters (half the cost of a JSON list for the usual one or two);
    more as one JSON array, so no statement ever nears SQLite's parameter limit."""
    if len(values) <= _FEW:
        fragment, keys = _placeholders(name, len(values))
        return fragment, dict(zip(keys, values, strict=True))
    return f"IN (SELECT value FROM json_each(:{name}))", {name: json.dumps(list(values))}


DIALECT = Dialect(
    name="sqlite",
    lock_row="",  # BEGIN IMMEDIATE already made this the only writer
    lock_job="",
    skip_locked="",
    now="((julianday('now') - 2440587.5) * 86400.0)",
    commit_order="c.rowid",
    in_list=_in_list,
    contains="instr(lower({column}), :{param}) > 0",
    non_ascii="length(CAST({column} AS BLOB)) <> length({column})",
    lock_key=None,  # writers are serialized already
    round_trips=False,
    text_index=Fts5Index(),
    message_text=MESSAGE_TEXT,
)

_BUSY = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
_UNAVAILABLE = _BUSY | {
    sqlite3.SQLITE_IOERR,
    sqlite3.SQLITE_CANTOPEN,
    sqlite3.SQLITE_READONLY,
    sqlite3.SQLITE_PROTOCOL,
    sqlite3.SQLITE_NOMEM,
}
_LOW_DISK_BYTES = 1 << 20


def _code(error: sqlite3.Error) -> int:
    return int(getattr(error, "sqlite_errorcode", 0) or 0) & 0xFF


def _vocabularies(conn: sqlite3.Connection) -> None:
    """Per-word row counts of the full-text indexes (``Fts5Index.frequencies``), as
    connection-local views: they hold no data of their own."""
    for name, table in (("memories_vocab", "memories_fts"), ("archived_vocab", "archived_fts")):
        conn.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{name} USING fts5vocab(main, {table}, row)"
        )
    conn.execute(  # each occurrence of a term (Fts5Index.postings)
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.archived_instances"
        " USING fts5vocab(main, archived_fts, instance)"
    )


class _Inline(Connection):
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    async def one(self, sql: str, params: Params) -> Row | None:
        rows = self.conn.execute(sql, params).fetchall()
        return rows[0] if rows else None

    async def all(self, sql: str, params: Params) -> list[Row]:
        return self.conn.execute(sql, params).fetchall()

    async def run(self, sql: str, params: Params) -> int:
        return self.conn.execute(sql, params).rowcount

    async def many(self, sql: str, rows: Sequence[Row]) -> None:
        self.conn.executemany(positional(sql, "?"), rows)


class _Threaded(Connection):
    """The reader: every statement runs in the reader's own thread, one at a time (the
    executor has one worker, so what is handed to it runs in that order).

    A scan's snapshot (BEGIN) is opened in the hop of its first statement and closed
    (ROLLBACK) without waiting for it: each hop is a round trip through the thread and
    back to the loop (0.1-0.3 ms on busy cores), and a Phase 2 makes three scans."""

    def __init__(self, conn: sqlite3.Connection, executor: ThreadPoolExecutor) -> None:
        self._conn = conn
        self._executor = executor
        self._begin = False  # the next statement opens the scan's snapshot first

    def open_snapshot(self) -> None:
        self._begin = True

    def close_snapshot(self) -> None:
        """End the snapshot, if a statement opened one, before anything handed over later."""
        self._begin = False
        self._executor.submit(_end_snapshot, self._conn).add_done_callback(_log_failure)

    async def _call(self, fn: Callable[[], T]) -> T:
        if self._begin:
            self._begin = False
            fn = functools.partial(_in_snapshot, self._conn, fn)
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def one(self, sql: str, params: Params) -> Row | None:
        rows = await self.all(sql, params)
        return rows[0] if rows else None

    async def all(self, sql: str, params: Params) -> list[Row]:
        return await self._call(lambda: self._conn.execute(sql, params).fetchall())

    async def fetch(self, reads: Sequence[Read[Any]]) -> list[list[Row]]:
        """All of them in one hop."""
        conn = self._conn
        return await self._call(lambda: [conn.execute(r.sql, r.params).fetchall() for r in reads])

    async def run(self, sql: str, params: Params) -> int:
        return await self._call(lambda: self._conn.execute(sql, params).rowcount)

    async def many(self, sql: str, rows: Sequence[Row]) -> None:
        await self._call(lambda: self._conn.executemany(positional(sql, "?"), rows))


def _in_snapshot(conn: sqlite3.Connection, fn: Callable[[], T]) -> T:
    if conn.in_transaction:  # a failed ROLLBACK must not wedge the reader
        conn.execute("ROLLBACK")
    conn.execute("BEGIN")
    return fn()


def _end_snapshot(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _log_failure(future: Future[None]) -> None:
    if not future.cancelled() and (error := future.exception()) is not None:
        log.warning("sqlite_read_rollback_failed", error=str(error))


class SqliteDatabase(Database):
    """The database in one SQLite file."""

    dialect = DIALECT

    def __init__(
        self, path: Path, *, lock_timeout: float = 10.0, text_language: str = "english"
    ) -> None:
        self.dialect = dataclasses.replace(DIALECT, text_index=Fts5Index(text_language))
        self._path = path
        self._lock_timeout = lock_timeout
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wm-sqlite-read")
        self._writer: _Inline | None = None
        self._reader: _Threaded | None = None
        self._reader_conn: sqlite3.Connection | None = None
        self._write_lock = asyncio.Lock()
        self._scan_lock = asyncio.Lock()
        self.checkpointer = Checkpointer(path)

    async def open(self) -> None:
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA busy_timeout=0")  # never sleep on the event loop
            conn.execute("PRAGMA cache_size=-65536")
            conn.execute("PRAGMA wal_autocheckpoint=0")  # the checkpointer's thread does it
            # Forgetting erases: a deleted row's bytes are overwritten with zeros in the file,
            # not left in a free page (see erase()).
            conn.execute("PRAGMA secure_delete=ON")
            self._writer = _Inline(conn)
            writer = await self._acquire(Kind.WRITE)
            try:
                await self._migrate(
                    writer, MIGRATIONS, lambda v: log.info("migration_applied", version=v)
                )
                await reindex(writer, self.dialect.text_index, since=10)
                await self._commit(writer)
            finally:
                await self._rollback(writer)
                await self._release(Kind.WRITE, writer)
            _vocabularies(conn)
            self.checkpointer.start()

            def connect_reader() -> sqlite3.Connection:
                reader = sqlite3.connect(
                    f"file:{self._path}?mode=ro", uri=True, isolation_level=None
                )
                reader.execute("PRAGMA busy_timeout=10000")  # its own thread: waiting is fine
                reader.execute("PRAGMA cache_size=-65536")
                _vocabularies(reader)
                return reader

            loop = asyncio.get_running_loop()
            self._reader_conn = await loop.run_in_executor(self._executor, connect_reader)
            self._reader = _Threaded(self._reader_conn, self._executor)
        except Exception as error:
            raise self._translate(error) from error

    async def erase(self) -> None:
        """Make what was deleted unreadable in the files, not only in the tables: the
        full-text indexes keep a deleted row's terms in their older segments until those are
        merged (this SQLite, 3.40, predates FTS5's ``secure-delete`` option, 3.42), so both are
        merged into one segment, a bounded step per transaction; the pages freed on the way
        are zeroed (``secure_delete``); then the log, which still holds the pages as they were
        written, is checkpointed and truncated (by the checkpointer's thread, within a
        period)."""
        for table in FTS_TABLES:
            while True:
                async with self.unit_of_work() as uow:
                    conn = uow._conn
                    before = await conn.one("SELECT total_changes()", {})
                    await conn.run(
                        f"INSERT INTO {table} ({table}, rank) VALUES ('merge', :pages)",
                        {"pages": -ERASE_MERGE_PAGES},
                    )
                    after = await conn.one("SELECT total_changes()", {})
                    await uow.commit()
                assert before is not None and after is not None
                if int(after[0]) - int(before[0]) < 2:  # FTS5: nothing was left to merge
                    break
                await asyncio.sleep(0)  # let requests run between steps
        self.checkpointer.truncate_soon()

    async def close(self) -> None:
        reader, self._reader_conn, self._reader = self._reader_conn, None, None
        if reader is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, reader.close)
        self._executor.shutdown(wait=True)
        if self.checkpointer.started:
            await asyncio.to_thread(self.checkpointer.stop)
        if self._writer is not None:
            self._writer.conn.close()
            self._writer = None

    def _connection(self) -> _Inline:
        if self._writer is None:
            raise RuntimeError("database is not open")
        return self._writer

    async def _acquire(self, kind: Kind, pipelined: bool = False) -> Connection:
        if kind is Kind.READ:
            # No transaction: no write can run between these statements on this connection.
            return self._connection()
        if kind is Kind.SCAN:
            await self._scan_lock.acquire()
            if self._reader is None:
                self._scan_lock.release()
                raise RuntimeError("database is not open")
            self._reader.open_snapshot()
            return self._reader
        await self._write_lock.acquire()  # one transaction at a time on the writer
        try:
            writer = self._connection()
            await self._begin(writer.conn)
        except BaseException:
            self._write_lock.release()
            raise
        return writer

    async def _release(self, kind: Kind, conn: Connection) -> None:
        if kind is Kind.SCAN:
            assert isinstance(conn, _Threaded)
            try:
                conn.close_snapshot()
            finally:
                self._scan_lock.release()
        elif kind is Kind.WRITE:
            self._write_lock.release()

    async def _begin(self, conn: sqlite3.Connection) -> None:
        """BEGIN IMMEDIATE, waiting for a foreign writer asynchronously, up to the timeout."""
        if conn.in_transaction:  # a failed ROLLBACK must not wedge the connection
            conn.execute("ROLLBACK")
        deadline = time.monotonic() + self._lock_timeout
        delay = 0.001
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as error:
                if _code(error) not in _BUSY or time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    async def _commit(self, conn: Connection) -> None:
        assert isinstance(conn, _Inline)
        conn.conn.execute("COMMIT")
        self.checkpointer.written()

    async def _rollback(self, conn: Connection) -> None:
        assert isinstance(conn, _Inline)
        if conn.conn.in_transaction:
            conn.conn.execute("ROLLBACK")

    def classify(self, error: Exception) -> ServiceError | None:
        if isinstance(error, sqlite3.Error):
            code = _code(error)
            if code == sqlite3.SQLITE_FULL or (code == sqlite3.SQLITE_IOERR and self._disk_full()):
                return StorageFull(str(error))
            if code in _UNAVAILABLE:
                return StorageUnavailable(str(error))
        return None

    def _disk_full(self) -> bool:
        with contextlib.suppress(OSError):
            return shutil.disk_usage(self._path.parent).free < _LOW_DISK_BYTES
        return False
