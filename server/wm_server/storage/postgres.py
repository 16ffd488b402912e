"""The scale-out engine: PostgreSQL shared by several stateless server replicas.

Each unit of work is one READ COMMITTED transaction on a pooled psycopg 3 async connection
(reads run without BEGIN/COMMIT: under READ COMMITTED each statement takes its own snapshot
anyway). What SQLite gets from having a single writer, this engine gets from locks:

- every session writer locks the session row first (``SELECT … FOR NO KEY UPDATE``:
  exclusive among writers, yet it lets foreign-key checks of concurrent inserts through);
  each later statement takes a fresh snapshot, so it sees everything committed before the
  lock was granted;
- a request with a ``request_id`` first takes a transaction advisory lock on its key, so
  concurrent retries on any replica run one after the other and see one outcome;
- Phase 2 jobs are claimed with ``FOR UPDATE SKIP LOCKED`` and a lease on the database
  clock; a job holder's writes re-read its token under a row lock (``FOR UPDATE``). A job is
  claimable only when every earlier job of its session is ``done`` in the claim's snapshot,
  and ``done`` is final, so two replicas never run consecutive jobs of one session at once;
- a trigger on stored events sends ``NOTIFY wm_commit_events, '<commit id>'`` (delivered at
  commit, one per commit and transaction; schema version 3); each replica LISTENs on a
  dedicated connection, reconnecting after a loss, and relays the id of another replica's
  events to its streams (which also re-read on every heartbeat: a lost notification costs
  latency). Its own come back too, from a backend of its own pool: those it drops, for the
  unit of work that stored them has handed them to its streams already
  (``services.commit_wakeups``).

The pool checks a connection before lending it, so after a PostgreSQL restart or failover the
next call reconnects; until then calls answer UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import re
import select
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import structlog
from psycopg import AsyncConnection, AsyncCursor, AsyncPipeline, errors, sql
from psycopg.pq import ExecStatus, PipelineStatus, TransactionStatus
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from wm_server.cancellation import cancel_and_wait
from wm_server.errors import ServiceError, StorageConflict, StorageFull, StorageUnavailable
from wm_server.storage.connection import Connection, Dialect
from wm_server.storage.database import NAMED, Database, Kind, positional, pyformat
from wm_server.storage.schema_postgres import MESSAGE_TEXT, MIGRATIONS
from wm_server.storage.statements import Params, Read, Row, Write
from wm_server.storage.text_index import TsvectorIndex
from wm_server.storage.text_reindex import reindex

log = structlog.get_logger("wm_server.storage.postgres")

# The channel that carries "events of this commit were stored" between replicas.
EVENTS_CHANNEL = "wm_commit_events"
# Two-key advisory lock (its key space never meets the one-key space of request locks) held
# while migrating, so replicas starting together apply each migration exactly once.
_MIGRATION_LOCK = "SELECT pg_advisory_xact_lock(22349, 1)"

DIALECT = Dialect(
    name="postgresql",
    lock_row=" FOR NO KEY UPDATE",
    lock_job=" FOR UPDATE OF j",
    skip_locked=" FOR UPDATE OF j SKIP LOCKED",
    now="EXTRACT(EPOCH FROM clock_timestamp())::float8",
    commit_order="c.cid",
    in_list=lambda name, values: (f"= ANY(:{name})", {name: list(values)}),
    # COLLATE "C": ASCII-only lower-casing, exactly as SQLite's lower().
    contains='strpos(lower({column} COLLATE "C"), :{param}) > 0',
    non_ascii="octet_length({column}) <> char_length({column})",
    lock_key="SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))",
    round_trips=True,
    text_index=TsvectorIndex(),
    message_text=MESSAGE_TEXT,
)

Conn = AsyncConnection[Row]
TUPLES_OK = ExecStatus.TUPLES_OK
IN_TRANSACTION = TransactionStatus.INTRANS
IDLE = TransactionStatus.IDLE
PIPELINE_OFF = PipelineStatus.OFF


_VALUES = re.compile(r"\bVALUES\s*(\([^()]*\))", re.IGNORECASE)
_VALUES_START = re.compile(r"\bVALUES\s*\(", re.IGNORECASE)
_ARRAY_TYPES = {bool: "boolean", int: "bigint", float: "float8", str: "text", bytes: "bytea"}


def _values(sql: str) -> tuple[int, int, list[str]] | None:
    """Where the ``VALUES (…)`` of an INSERT starts and ends, and its items (split at the
    commas outside parentheses and quotes); None without one."""
    match = _VALUES_START.search(sql)
    if match is None:
        return None
    depth, quoted, item = 0, False, match.end()
    items: list[str] = []
    for i in range(match.end() - 1, len(sql)):
        char = sql[i]
        if char == "'":
            quoted = not quoted
        elif quoted:
            continue
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return match.start(), i + 1, [*items, sql[item:i]]
        elif char == "," and depth == 1:
            items.append(sql[item:i])
            item = i + 1
    return None


@functools.cache
def _unnest(
    sql: str, types: tuple[str, ...], shared: tuple[bool, ...], prefix: str
) -> tuple[str, tuple[str, ...]] | None:
    """``INSERT … VALUES (:a, f(:b), …) …`` as an INSERT of every row at once, from one
    array parameter per column (``:{prefix}a``, typed ``types``) or, for a column whose
    value every row shares (``shared``: the session, the time), that one value; with the
    names in column order; None for another shape. An item may be an expression of its one
    parameter (``to_tsvector('simple', :body)``): it is applied to each row's value.

    psycopg then adapts one array per varying column instead of a parameter per value (an
    array costs it microseconds per element, so a shared column is sent once), and
    PostgreSQL plans one statement instead of one per row.
    """
    found = _values(sql)
    if found is None:
        return None
    begin, end, items = found
    named = [NAMED.findall(item) for item in items]
    if len(items) != len(types) or any(len(n) != 1 for n in named):
        return None
    names = tuple(n[0] for n in named)
    if all(shared):
        shared = (False,) * len(shared)  # unnest needs an array to give the number of rows
    columns = list(zip(items, names, types, shared, strict=True))
    values = [
        _named(item.strip(), n, f":{prefix}{n}::{t}" if one else f"u.{n}")
        for item, n, t, one in columns
    ]
    varying = [(n, t) for _, n, t, one in columns if not one]
    arrays = ", ".join(f":{prefix}{n}::{t}[]" for n, t in varying)
    rows = (
        f"SELECT {', '.join(values)} FROM unnest({arrays}) AS u({', '.join(n for n, _ in varying)})"
    )
    return f"{sql[:begin]}{rows}{sql[end:]}", names


def _named(item: str, name: str, value: str) -> str:
    """``item`` with its parameter ``:name`` replaced by ``value``."""
    return NAMED.sub(lambda m: value if m.group(1) == name else m.group(0), item)


def _array_types(row: Row) -> tuple[str, ...] | None:
    """The array type of each column, from a row's values (None: one has no plain type)."""
    types = tuple(_ARRAY_TYPES.get(type(value)) for value in row)
    return None if None in types else types  # type: ignore[return-value]


def _columns(sql: str, rows: Sequence[Row], prefix: str) -> tuple[str, dict[str, Any]] | None:
    """A many-row INSERT as one statement, or None if it has no such form: one row keeps its
    VALUES (arrays cost more to adapt than they save), more go over column arrays, with a
    value all rows share sent once."""
    if len(rows) == 1:
        if _VALUES.search(sql) is None:  # values computed by expressions: row by row
            return None
        statement, names = _named_values(sql, prefix)
        return statement, {prefix + n: v for n, v in zip(names, rows[0], strict=True)}
    types = _array_types(rows[0])
    if types is None:
        return None
    columns = list(zip(*rows, strict=True))
    shared = tuple(all(v == c[0] for v in c) for c in columns)
    folded = _unnest(sql, types, shared, prefix)
    if folded is None:
        return None
    statement, names = folded
    return statement, {
        prefix + n: c[0] if one else list(c)
        for n, c, one in zip(names, columns, shared, strict=True)
    }


_ARRAY_PARAMETER = re.compile(r"%\((\w+)\)s(?=::\w+\[\])")


@functools.cache
def _psycopg_sql(sql: str) -> str:
    """``sql`` in psycopg's parameter style, with every parameter cast to an array type sent
    in binary form: psycopg writes a text array in text form element by element, quoting and
    escaping each (about 25 µs for a message's JSON, 2.5 ms for a batch of 100), and in
    binary form at well under a microsecond an element."""
    return _ARRAY_PARAMETER.sub(r"%(\1)b", pyformat(sql))


@functools.cache
def _named_values(sql: str, prefix: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with its parameters renamed apart, and the names of its VALUES in order."""
    match = _VALUES.search(sql)
    if match is None:
        raise ValueError(f"not an INSERT … VALUES statement: {sql}")
    return _prefixed(sql, prefix), tuple(NAMED.findall(match.group(1)))


@functools.cache
def _prefixed(sql: str, prefix: str) -> str:
    return NAMED.sub(lambda m: f":{prefix}{m.group(1)}", sql)


async def _check(conn: Conn) -> None:
    """Before lending a pooled connection: is it still connected? An idle connection's
    socket turns readable only when the server closed it (a restart, a failover) or sent it
    a notice, so a poll that costs no round trip decides when the real check must run; a
    dead connection is then discarded and the call gets a fresh one."""
    if conn.broken or select.select([conn.pgconn.socket], [], [], 0)[0]:
        await AsyncConnectionPool.check_connection(conn)


def _lendable(conn: Conn) -> bool:
    """Whether the next unit may have ``conn`` as it is: open, idle, in autocommit and out of
    pipeline mode. The pool itself looks only at the transaction status, and a unit
    cancelled as psycopg entered pipeline mode (its ``wait_async`` yields to a loop busy for
    5 ms even at a step that completes at once) leaves the connection IDLE in pipeline mode
    for good: psycopg's pipeline context never exits, so the next unit's statements are
    only queued and ``one`` answers None (a session row "missing" under its lock, a fresh
    name "taken"). Phase 2 cancels its memory reads when the model call beside them fails,
    gRPC a handler whose deadline passed."""
    pgconn = conn.pgconn
    return (
        not conn.closed
        and conn.autocommit
        and pgconn.pipeline_status == PIPELINE_OFF
        and pgconn.transaction_status == IDLE
    )


class _Pg(Connection):
    __slots__ = ("conn", "piped", "piping", "wrote")

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        # Whether a statement other than a SELECT ran: a unit that only read ends with
        # COMMIT rather than ROLLBACK (PostgresDatabase._rollback).
        self.wrote = False
        # psycopg's pipeline mode (``pipeline``) and its context, left when the unit ends.
        self.piped: AsyncPipeline | None = None
        self.piping: contextlib.AbstractAsyncContextManager[AsyncPipeline] | None = None

    async def pipeline(self) -> None:
        """psycopg's pipeline mode: a statement is only queued, and the next one whose answer
        is needed sends the queue and syncs. BEGIN is a statement of ours, queued too (in a
        transaction of its own making psycopg would sync right after it), and COMMIT leaves
        the pipeline with the same sync (``PostgresDatabase._commit``)."""
        if self.piping is None:
            if not self.conn.autocommit:  # a pipelined unit's connection stays in it
                await self.conn.set_autocommit(True)  # no round trip: the connection is idle
            self.piping = self.conn.pipeline()
            self.piped = await self.piping.__aenter__()
            await self.conn.execute("BEGIN", prepare=False)

    async def unpipe(self) -> None:
        """Leave pipeline mode (one more sync, after the unit's COMMIT or ROLLBACK)."""
        piping, self.piping, self.piped = self.piping, None, None
        if piping is not None:
            await piping.__aexit__(None, None, None)

    async def _execute(self, sql: str, params: Params) -> AsyncCursor[Row]:
        """Run ``sql``; in pipeline mode, together with everything queued before it."""
        cur = await self.conn.execute(_psycopg_sql(sql), params)
        if self.piped is not None:
            await self.piped.sync()
        return cur

    async def _send(self, sql: str, params: Params) -> None:
        """Run ``sql`` whose answer nobody reads: in pipeline mode, only queued."""
        self.wrote = True
        await self.conn.execute(_psycopg_sql(sql), params)

    async def last_write(self, write: Write) -> Callable[[], int]:
        """In pipeline mode only queued: the COMMIT's sync sends it, and its count is read
        from its cursor afterwards."""
        if self.piped is None:
            return await super().last_write(write)
        self.wrote = True
        cur = await self.conn.execute(_psycopg_sql(write.sql), write.params or {})
        return lambda: cur.rowcount

    async def one(self, sql: str, params: Params) -> Row | None:
        if not sql.startswith("SELECT"):
            self.wrote = True
        cur = await self._execute(sql, params)
        # The result's status, not ``cur.description``: that builds an object per column.
        result = cur.pgresult
        return await cur.fetchone() if result and result.status == TUPLES_OK else None

    async def all(self, sql: str, params: Params) -> list[Row]:
        if not sql.startswith("SELECT"):
            self.wrote = True
        cur = await self._execute(sql, params)
        return await cur.fetchall()

    async def run(self, sql: str, params: Params) -> int:
        self.wrote = True
        cur = await self._execute(sql, params)
        return cur.rowcount

    async def fetch(self, reads: Sequence[Read[Any]]) -> list[list[Row]]:
        """All of them queued in pipeline mode, then one sync: one round trip. The pipeline
        of a unit that has none is left at once (its exit is that sync)."""
        if len(reads) < 2:
            return await super().fetch(reads)
        conn = self.conn
        if self.piped is not None:
            cursors = [await conn.execute(_psycopg_sql(r.sql), r.params) for r in reads]
            await self.piped.sync()
        else:
            async with conn.pipeline():
                cursors = [await conn.execute(_psycopg_sql(r.sql), r.params) for r in reads]
        return [await cur.fetchall() for cur in cursors]

    async def many(self, sql: str, rows: Sequence[Row]) -> None:
        if not rows:
            return
        self.wrote = True
        folded = _columns(sql, rows, "")
        if folded is None:  # not a plain row of values: row by row
            async with self.conn.cursor() as cur:  # in pipeline mode, only queued
                await cur.executemany(positional(sql, "%s"), rows)
            return
        await self._send(*folded)

    async def write(self, writes: Sequence[Write]) -> None:
        if self.piped is None:
            await super().write(writes)
            return
        *first, last = writes
        if last.rows is not None:  # in pipeline mode a batch costs no round trip of its own
            if first:
                await self.write(first)
            await self.many(last.sql, last.rows)
            return
        chained = self._chained(first, last)
        if chained is None:
            await super().write(writes)
        else:
            await self._send(*chained)

    async def chain(self, writes: Sequence[Write], last: Write) -> Row | None:
        chained = self._chained(writes, last)
        if chained is None:
            return await super().chain(writes, last)
        return await self.one(*chained)

    def _chained(self, writes: Sequence[Write], last: Write) -> tuple[str, dict[str, Any]] | None:
        """One statement: each write becomes a data-modifying CTE of ``last`` (each with its
        parameters renamed apart), so PostgreSQL runs them all over one snapshot; None when
        a batch has no such form."""
        ctes: list[str] = []
        params: dict[str, Any] = {}
        for i, write in enumerate(writes):
            prefix = f"w{i}_"
            if write.rows is not None:
                if not write.rows:
                    continue
                folded = _columns(write.sql, write.rows, prefix)
                if folded is None:
                    return None
                ctes.append(f"w{i} AS ({folded[0]})")
                params.update(folded[1])
            else:
                ctes.append(f"w{i} AS ({_prefixed(write.sql, prefix)})")
                params.update({prefix + k: v for k, v in (write.params or {}).items()})
        params.update(last.params or {})
        head = "WITH " + ", ".join(ctes) + " " if ctes else ""
        return head + last.sql, params


class PostgresDatabase(Database):
    """A PostgreSQL database that several server processes may share."""

    dialect = DIALECT

    def __init__(
        self,
        url: str,
        *,
        min_connections: int = 2,
        max_connections: int = 16,
        wait_seconds: float = 2.0,
        text_language: str = "english",
    ) -> None:
        self._url = url
        self.dialect = dataclasses.replace(DIALECT, text_index=TsvectorIndex(text_language))
        self._pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            url,
            min_size=min_connections,
            max_size=max_connections,
            open=False,
            kwargs={"autocommit": True, "connect_timeout": max(1, int(wait_seconds))},
            check=_check,
            configure=self._configure,
            timeout=wait_seconds,
            reconnect_timeout=0,  # keep trying to refill the pool while the server is away
            name="wm-store",
        )
        self._subscribers: list[Callable[[str], None]] = []
        # The backends of this process's pooled connections, by process id: a notification
        # one of them sent is news of this process's own events (``_relay``).
        self._backends: weakref.WeakValueDictionary[int, Conn] = weakref.WeakValueDictionary()
        self._listener: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()

    async def open(self) -> None:
        try:
            async with await AsyncConnection.connect(self._url, autocommit=True) as conn:
                db = _Pg(conn)
                await db.run("BEGIN", {})
                await db.one(_MIGRATION_LOCK, {})
                await self._migrate(
                    db, MIGRATIONS, lambda v: log.info("migration_applied", version=v)
                )
                await reindex(db, self.dialect.text_index, since=11)
                await db.run("COMMIT", {})
            await self._pool.open(wait=True, timeout=30)
        except Exception as error:
            raise self._translate(error) from error
        self._listener = asyncio.create_task(self._listen(), name="wm-pg-listen")
        # Streams rely on wake-ups from the first event on, so be listening before serving.
        ready = asyncio.create_task(self._listening.wait())
        await asyncio.wait({ready, self._listener}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if not self._listening.is_set():
            listener, self._listener = self._listener, None
            await cancel_and_wait(listener)  # raises the connection error, if that stopped it
            await self._pool.close()
            raise TimeoutError("PostgreSQL: LISTEN did not start within 30 s")

    async def erase(self) -> None:
        """Nothing a running service can do well: PostgreSQL keeps a deleted row's bytes in
        its table files until VACUUM FULL (or pg_repack) rewrites the table, since a plain
        VACUUM only marks the space reusable, and in its WAL segments and archives until
        they are recycled. VACUUM FULL takes an exclusive lock on the table for as long as
        the rewrite lasts, so it is the operator's to schedule (README, "Forgetting")."""

    async def close(self) -> None:
        if self._listener is not None:
            await cancel_and_wait(self._listener)
            self._listener = None
        await self._pool.close()

    def subscribe_events(self, callback: Callable[[str], None]) -> None:
        self._subscribers.append(callback)

    async def _configure(self, conn: Conn) -> None:
        """A new pooled connection: remember its backend (``_backends``)."""
        self._backends[conn.info.backend_pid] = conn

    async def _listen(self) -> None:
        """Relay NOTIFY payloads to the subscribers, reconnecting after a lost connection."""
        delay = 0.5
        first = True
        while True:
            try:
                async with await AsyncConnection.connect(self._url, autocommit=True) as conn:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(EVENTS_CHANNEL)))
                    self._listening.set()
                    if not first:
                        log.info("event_listener_reconnected")
                    first, delay = False, 0.5
                    try:
                        async for note in conn.notifies():
                            own = self._backends.get(note.pid)
                            if own is None or own.closed:  # a process id may be reused
                                self._relay(note.payload)
                    finally:
                        self._listening.clear()
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError) as exc:
                if first:
                    raise
                log.warning("event_listener_lost", error=str(exc), retry_in=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    def _relay(self, commit_id: str) -> None:
        for callback in list(self._subscribers):
            try:
                callback(commit_id)
            except Exception:
                log.exception("event_subscriber_failed")

    async def _acquire(self, kind: Kind, pipelined: bool = False) -> Connection:
        conn = _Pg(await self._pool.getconn())
        if kind is Kind.WRITE and not pipelined:
            # psycopg then sends BEGIN itself before the first statement, and COMMIT or
            # ROLLBACK as bare commands: cheaper than statements of our own. A pipelined
            # unit stays in autocommit, its BEGIN a statement of ours (``_Pg.pipeline``):
            # each switch costs about 50 µs of the loop (psycopg's lock and wait).
            try:
                await conn.conn.set_autocommit(False)
            except BaseException:  # a cancellation too: the pool gets it back
                await self._release(kind, conn)
                raise
        return conn

    async def _release(self, kind: Kind, conn: Connection) -> None:
        """Give the connection back out of pipeline mode and in autocommit, or closed (the
        pool opens another) when that fails, is cancelled half-way, or leaves it unfit for
        the next unit (``_lendable``): whatever happened, the pool gets it back."""
        assert isinstance(conn, _Pg)
        raw = conn.conn
        lendable = False
        try:
            await conn.unpipe()
            if not raw.autocommit:
                await raw.set_autocommit(True)
            lendable = _lendable(raw)
        except psycopg.Error:  # still in a transaction, a lost connection: never lend it
            pass
        finally:
            if not lendable:
                if not raw.closed:
                    log.info("connection_not_lent_again", state=str(raw.pgconn))
                await raw.close()
            await self._pool.putconn(raw)  # the pool discards a closed connection

    async def _commit(self, conn: Connection) -> None:
        assert isinstance(conn, _Pg)
        if conn.piped is None and conn.conn.pgconn.transaction_status == IDLE:
            return  # no transaction (``statement``: committed as it ran)
        if conn.piped is not None:  # the COMMIT, then the sync that leaves the pipeline
            await conn.conn.execute("COMMIT", prepare=False)
            await conn.unpipe()
            return
        await conn.conn.commit()

    async def _rollback(self, conn: Connection) -> None:
        """End a unit that was not committed. One that only read and met no error (a job
        claim that found nothing, a retry answered from its record) ends with COMMIT, which
        is the same for a transaction without writes: psycopg answers a ROLLBACK by
        dropping every statement it prepared on the connection, so the pooled connections'
        next calls would parse their statements again (and send DEALLOCATE ALL)."""
        assert isinstance(conn, _Pg)
        raw = conn.conn
        if conn.piped is not None:  # what was queued runs (or fails) first
            with contextlib.suppress(psycopg.Error):
                if not conn.wrote:  # then COMMIT, in the same sync, unless the queue failed
                    await raw.execute("COMMIT", prepare=False)
                await conn.unpipe()
        if not conn.wrote and raw.pgconn.transaction_status == IN_TRANSACTION:
            await raw.commit()
        else:
            await raw.rollback()

    def classify(self, error: Exception) -> ServiceError | None:
        if isinstance(error, errors.DiskFull):
            return StorageFull(str(error).strip())
        if isinstance(
            error,
            errors.DeadlockDetected
            | errors.SerializationFailure
            # Two transactions raced to store one key (READ COMMITTED saw neither): the one
            # that lost runs again and finds what the other stored.
            | errors.UniqueViolation,
        ):
            return StorageConflict(str(error).strip())
        if isinstance(
            error,
            psycopg.OperationalError  # connection lost or refused, shutdown, lock timeout
            | psycopg.InterfaceError  # the connection is closed
            | errors.InsufficientResources
            | errors.LockNotAvailable
            | errors.QueryCanceled
            | PoolTimeout,
        ):
            return StorageUnavailable(str(error).strip() or type(error).__name__)
        return None
