"""The scale-out engine: PostgreSQL shared by several stateless server replicas.

Every writing port method is one READ COMMITTED transaction on a pooled psycopg 3 async
connection, with the same statements and results as the SQLite engine (read-only methods run
their statements without BEGIN/COMMIT, which under READ COMMITTED sees exactly the same
data). What SQLite gets from having a single writer, this engine gets from row locks, so
replicas can share one database:

- AddMessages, Commit Phase 1 and every working-memory write lock the session row first
  (``SELECT … FOR NO KEY UPDATE``: exclusive among themselves, yet it lets foreign-key checks
  of concurrent inserts through). Archive numbers, positions and ``pending_tokens`` are read
  after the lock, so concurrent replicas neither duplicate nor skip an archive number and no
  message or token is lost.
- Phase 2 jobs are claimed with ``FOR UPDATE SKIP LOCKED`` and a lease (token + expiry on the
  database clock, so replica clocks do not matter). Every write of a job holder re-reads its
  token under a row lock, so a worker whose lease another replica took gets ``LeaseLost``.
  Strict archive order per session holds across replicas: a job is claimable only when every
  earlier job of its session is ``done`` in the claim's snapshot; ``done`` is final (a retry
  re-queues only a failed job, as on SQLite), and every snapshot that contains job k contains
  job k-1 (Phase 1 is serialized per session), so two replicas can never run consecutive jobs
  of one session at once. The session row is deliberately not locked by a claim: that would
  make every claim wait for an ingest batch in flight.
- After storing events a transaction sends ``NOTIFY wm_commit_events, '<commit id>'``
  (delivered at commit). Each replica LISTENs on a dedicated connection and hands the commit
  id to its subscribers (the EventBus), which wakes WatchCommit streams; the stored events
  stay the truth, and streams re-read them on each heartbeat, so a lost notification costs
  latency, never data.

Deadlocks (e.g. a session delete against a finishing job) are retried a few times: every
transaction body is safe to run again because nothing is kept from an aborted attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import psycopg
import structlog
from psycopg import AsyncConnection, errors
from psycopg_pool import AsyncConnectionPool

from wm_core import Message, NeedRows, SplitRow, split_boundary
from wm_server.errors import AlreadyExists, FailedPrecondition, NotFound, session_not_found
from wm_server.storage.codec import message_from_row, parts_to_json
from wm_server.storage.port import ClosingEventsBuilder, FirstEventBuilder, LeaseLost, Store
from wm_server.storage.records import (
    AddResult,
    ClaimedJob,
    CommitRecord,
    CommitState,
    Phase1Result,
    Phase2Completion,
    Phase2Input,
    SearchMatch,
    SessionRecord,
    SkipReason,
    StoredEvent,
    StoredMessage,
    WorkingMemoryRecord,
    archive_name,
)
from wm_server.storage.rows import (
    COMMIT_COLUMNS,
    COMMIT_FROM,
    SESSION_COLUMNS,
    commit_from_row,
    commit_not_found,
    pending_delta,
    rebuild_rule,
    session_from_row,
    with_id,
    wm_from_row,
)
from wm_server.storage.schema_postgres import MIGRATIONS

T = TypeVar("T")
Row = tuple[Any, ...]
Conn = AsyncConnection[Row]
Tx = Callable[[Conn], Awaitable[T]]

log = structlog.get_logger("wm_server.storage.postgres")

# The channel that carries "events of this commit were stored" between replicas.
EVENTS_CHANNEL = "wm_commit_events"
# Two-key advisory lock (its key space never meets the one-key space) held while migrating,
# so replicas starting together apply each migration exactly once.
_MIGRATION_LOCK = (0x574D, 1)
# The database clock in epoch seconds: leases and retry times compare against one clock.
_DB_NOW = "EXTRACT(EPOCH FROM clock_timestamp())::float8"
_RETRIED_ERRORS = (errors.DeadlockDetected, errors.SerializationFailure)
_ATTEMPTS = 5


async def _one(conn: Conn, sql: str, params: Sequence[Any] = ()) -> Row | None:
    cur = await conn.execute(sql, params)
    return await cur.fetchone()


async def _all(conn: Conn, sql: str, params: Sequence[Any] = ()) -> list[Row]:
    cur = await conn.execute(sql, params)
    return await cur.fetchall()


async def _value(conn: Conn, sql: str, params: Sequence[Any] = ()) -> Any:
    row = await _one(conn, sql, params)
    assert row is not None, sql
    return row[0]


class PostgresStore(Store):
    """Store on a PostgreSQL database that several server processes may share."""

    def __init__(self, url: str, *, min_connections: int = 2, max_connections: int = 16) -> None:
        self._url = url
        self._pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            url,
            min_size=min_connections,
            max_size=max_connections,
            open=False,
            kwargs={"autocommit": True},
            name="wm-store",
        )
        self._subscribers: list[Callable[[str], None]] = []
        self._listener: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()

    # --- plumbing --------------------------------------------------------------------------
    async def _run(self, fn: Tx[T]) -> T:
        """Run ``fn`` in one transaction; retry it when PostgreSQL chose it as a deadlock
        victim (the aborted attempt left nothing behind)."""
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                async with self._pool.connection() as conn, conn.transaction():
                    return await fn(conn)
            except _RETRIED_ERRORS:
                if attempt == _ATTEMPTS:
                    raise
                await asyncio.sleep(random.uniform(0.005, 0.02) * attempt)
        raise AssertionError("unreachable")

    async def _read(self, fn: Tx[T]) -> T:
        """Run read-only statements without BEGIN/COMMIT: under READ COMMITTED each statement
        takes its own snapshot anyway, so a transaction would only add two round trips."""
        async with self._pool.connection() as conn:
            return await fn(conn)

    async def open(self) -> None:
        await self._migrate()
        await self._pool.open(wait=True, timeout=30)
        self._listener = asyncio.create_task(self._listen(), name="wm-pg-listen")
        # Streams rely on wake-ups from the first event on, so be listening before serving.
        ready = asyncio.create_task(self._listening.wait())
        await asyncio.wait({ready, self._listener}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if not self._listening.is_set():
            listener, self._listener = self._listener, None
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener  # raises the connection error, if that is what stopped it
            await self._pool.close()
            raise TimeoutError("PostgreSQL: LISTEN did not start within 30 s")

    async def _migrate(self) -> None:
        """Apply pending migrations in one transaction, under a lock every replica takes."""
        connect = AsyncConnection.connect(self._url, autocommit=True)
        async with await connect as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", _MIGRATION_LOCK)
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY)"
            )
            cur = await conn.execute("SELECT version FROM schema_migrations")
            applied = {int(v) for (v,) in await cur.fetchall()}
            for version, sql in MIGRATIONS:
                if version in applied:
                    continue
                for statement in sql.split(";"):
                    if statement.strip():
                        await conn.execute(statement)
                await conn.execute("INSERT INTO schema_migrations VALUES (%s)", (version,))
                log.info("migration_applied", engine="postgresql", version=version)

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
            self._listener = None
        await self._pool.close()

    def subscribe_events(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(commit_id)`` whenever any replica stores events of a commit."""
        self._subscribers.append(callback)

    async def _listen(self) -> None:
        """Relay NOTIFY payloads to the subscribers, reconnecting after a lost connection."""
        delay = 0.5
        first = True
        while True:
            try:
                async with await AsyncConnection.connect(self._url, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {EVENTS_CHANNEL}")
                    self._listening.set()
                    if not first:
                        log.info("event_listener_reconnected")
                    first, delay = False, 0.5
                    async for note in conn.notifies():
                        for callback in list(self._subscribers):
                            try:
                                callback(note.payload)
                            except Exception:
                                log.exception("event_subscriber_failed")
            except asyncio.CancelledError:
                raise
            except psycopg.Error as exc:
                if first:
                    raise
                log.warning("event_listener_lost", error=str(exc), retry_in=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)

    @staticmethod
    async def _sid(conn: Conn, tenant: str, session_id: str, *, lock: bool = False) -> int:
        """The session's key; with ``lock``, also serialize against other writers of it."""
        row = await _one(
            conn,
            "SELECT sid FROM sessions WHERE tenant = %s AND session_id = %s"
            + (" FOR NO KEY UPDATE" if lock else ""),
            (tenant, session_id),
        )
        if row is None:
            raise session_not_found(session_id)
        return int(row[0])

    @staticmethod
    async def _session_row(conn: Conn, sid: int) -> SessionRecord:
        row = await _one(conn, f"SELECT {SESSION_COLUMNS} FROM sessions WHERE sid = %s", (sid,))
        assert row is not None
        return session_from_row(row)

    # --- sessions and messages -------------------------------------------------------------
    async def create_session(
        self, tenant: str, session_id: str, request_id: str | None
    ) -> tuple[SessionRecord, bool]:
        async def tx(conn: Conn) -> tuple[SessionRecord, bool]:
            while True:
                row = await _one(
                    conn,
                    "SELECT sid, create_request_id FROM sessions"
                    " WHERE tenant = %s AND session_id = %s",
                    (tenant, session_id),
                )
                if row is not None:
                    if request_id and row[1] == request_id:
                        return await self._session_row(conn, row[0]), False
                    raise AlreadyExists(
                        f"session {session_id!r} already exists",
                        reason="SESSION_EXISTS",
                        metadata={"session_id": session_id},
                    )
                now = time.time()
                inserted = await _one(
                    conn,
                    "INSERT INTO sessions (tenant, session_id, create_time, update_time,"
                    " create_request_id) VALUES (%s, %s, %s, %s, %s)"
                    " ON CONFLICT (tenant, session_id) DO NOTHING RETURNING sid",
                    (tenant, session_id, now, now, request_id),
                )
                if inserted is not None:
                    return await self._session_row(conn, inserted[0]), True
                # Another replica created it between our read and insert: judge that one.

        return await self._run(tx)

    async def get_session(self, tenant: str, session_id: str) -> SessionRecord:
        async def tx(conn: Conn) -> SessionRecord:
            row = await _one(
                conn,
                f"SELECT {SESSION_COLUMNS} FROM sessions WHERE tenant = %s AND session_id = %s",
                (tenant, session_id),
            )
            if row is None:
                raise session_not_found(session_id)
            return session_from_row(row)

        return await self._read(tx)

    async def list_sessions(
        self, tenant: str, limit: int, before_key: int | None
    ) -> tuple[list[SessionRecord], int | None]:
        async def tx(conn: Conn) -> tuple[list[SessionRecord], int | None]:
            rows = await _all(
                conn,
                f"SELECT {SESSION_COLUMNS} FROM sessions WHERE tenant = %s AND sid < %s"
                " ORDER BY sid DESC LIMIT %s",
                (tenant, before_key if before_key is not None else 2**62, limit + 1),
            )
            more = len(rows) > limit
            rows = rows[:limit]
            return [session_from_row(r) for r in rows], (int(rows[-1][0]) if more else None)

        return await self._read(tx)

    async def delete_session(self, tenant: str, session_id: str) -> None:
        async def tx(conn: Conn) -> None:
            row = await _one(
                conn,
                "DELETE FROM sessions WHERE tenant = %s AND session_id = %s RETURNING sid",
                (tenant, session_id),
            )
            if row is None:
                raise session_not_found(session_id)

        await self._run(tx)

    async def add_messages(
        self,
        tenant: str,
        session_id: str,
        messages: Sequence[Message],
        *,
        create_if_missing: bool,
        request_id: str | None,
        make_id: Callable[[], str],
    ) -> AddResult:
        async def tx(conn: Conn) -> AddResult:
            created = False
            lookup = (
                "SELECT sid, first_live_position, next_position, keep_recent_count"
                " FROM sessions WHERE tenant = %s AND session_id = %s FOR NO KEY UPDATE"
            )
            row = await _one(conn, lookup, (tenant, session_id))
            if row is None:
                if not create_if_missing:
                    raise session_not_found(session_id)
                now = time.time()
                row = await _one(
                    conn,
                    "INSERT INTO sessions (tenant, session_id, create_time, update_time)"
                    " VALUES (%s, %s, %s, %s) ON CONFLICT (tenant, session_id) DO NOTHING"
                    " RETURNING sid, first_live_position, next_position, keep_recent_count",
                    (tenant, session_id, now, now),
                )
                if row is not None:
                    created = True
                else:  # created concurrently by another request: use (and lock) that one
                    row = await _one(conn, lookup, (tenant, session_id))
                    if row is None:
                        raise session_not_found(session_id)
            sid, first_live, next_pos, keep = (int(v) for v in row)
            method = f"AddMessages/{session_id}"
            given = [m.id for m in messages if m.id]
            existing: set[str] = set()
            if request_id or given:
                # A statement of its own, after the lock: one that waited for the lock would
                # still read with the snapshot taken before the wait.
                prior, stored = await _one(  # type: ignore[misc]
                    conn,
                    "SELECT (SELECT result_json FROM idempotency WHERE tenant = %s"
                    "   AND method = %s AND request_id = %s),"
                    " ARRAY(SELECT message_id FROM messages WHERE sid = %s"
                    "   AND message_id = ANY(%s))",
                    (tenant, method, request_id or "", sid, given),
                )
                if request_id and prior is not None:
                    saved = json.loads(prior)
                    return AddResult(
                        await self._session_row(conn, sid),
                        tuple(saved["added"]),
                        tuple(saved["duplicates"]),
                        False,
                    )
                existing.update(stored)
            added: list[str] = []
            duplicates: list[str] = []
            seen: set[str] = set()
            fresh: list[tuple[int, Message]] = []
            position = next_pos
            for message in messages:
                mid = message.id or make_id()
                if mid in existing or mid in seen:
                    duplicates.append(mid)
                    continue
                seen.add(mid)
                added.append(mid)
                fresh.append((position, message if message.id else with_id(message, mid)))
                position += 1
            now = time.time()
            # Everything below is one statement: the inserts ride along as CTEs.
            ctes: list[str] = []
            params: list[Any] = []
            if fresh:
                ctes.append(
                    "ins AS (INSERT INTO messages (sid, position, message_id, role, parts_json,"
                    " tokens, create_time, result_ids)"
                    " SELECT %s, u.p, u.i, u.r, u.j, u.t, %s, u.x FROM unnest("
                    "%s::bigint[], %s::text[], %s::text[], %s::text[], %s::bigint[], %s::text[]"
                    ") AS u(p, i, r, j, t, x))"
                )
                params += [
                    sid,
                    now,
                    [pos for pos, _ in fresh],
                    [m.id for _, m in fresh],
                    [m.role.value for _, m in fresh],
                    [parts_to_json(m.parts) for _, m in fresh],
                    [m.estimated_tokens for _, m in fresh],
                    [" ".join(m.tool_result_ids()) for _, m in fresh],
                ]
            # INSERT OR REPLACE semantics: the latest call with an id wins, within the batch too.
            calls = {tid: pos for pos, m in fresh for tid in m.tool_use_ids()}
            if calls:
                ctes.append(
                    "calls AS (INSERT INTO tool_calls (sid, tool_use_id, position)"
                    " SELECT %s, u.i, u.p FROM unnest(%s::text[], %s::bigint[]) AS u(i, p)"
                    " ON CONFLICT (sid, tool_use_id) DO UPDATE SET position = EXCLUDED.position)"
                )
                params += [sid, list(calls), list(calls.values())]
            if request_id:
                ctes.append("idem AS (INSERT INTO idempotency VALUES (%s, %s, %s, %s, %s))")
                params += [
                    tenant,
                    method,
                    request_id,
                    json.dumps({"added": added, "duplicates": duplicates}),
                    now,
                ]
            added_tokens = sum(m.estimated_tokens for _, m in fresh)
            in_batch, stored_range = pending_delta(first_live, next_pos, keep, fresh)
            stored_sum = "0"
            if stored_range is not None:
                # Sees only rows stored before this statement: exactly the range wanted.
                stored_sum = (
                    "(SELECT COALESCE(SUM(tokens), 0) FROM messages WHERE sid = %s"
                    " AND position BETWEEN %s AND %s)"
                )
            update = (
                "UPDATE sessions SET next_position = %s, message_count = message_count + %s,"
                " total_message_count = total_message_count + %s,"
                " live_tokens = live_tokens + %s,"
                f" pending_tokens = pending_tokens + %s + {stored_sum},"
                f" update_time = %s WHERE sid = %s RETURNING {SESSION_COLUMNS}"
            )
            params += [position, len(fresh), len(fresh), added_tokens, in_batch]
            if stored_range is not None:
                params += [sid, *stored_range]
            params += [now, sid]
            sql = ("WITH " + ", ".join(ctes) + " " if ctes else "") + update
            session_row = await _one(conn, sql, params)
            assert session_row is not None
            return AddResult(
                session_from_row(session_row), tuple(added), tuple(duplicates), created
            )

        return await self._run(tx)

    async def live_messages(self, tenant: str, session_id: str) -> list[StoredMessage]:
        async def tx(conn: Conn) -> list[StoredMessage]:
            row = await _one(
                conn,
                "SELECT sid, first_live_position FROM sessions"
                " WHERE tenant = %s AND session_id = %s",
                (tenant, session_id),
            )
            if row is None:
                raise session_not_found(session_id)
            return await self._messages_from(conn, int(row[0]), int(row[1]), None)

        return await self._read(tx)

    @staticmethod
    async def _messages_from(
        conn: Conn, sid: int, first: int, last: int | None
    ) -> list[StoredMessage]:
        rows = await _all(
            conn,
            "SELECT position, message_id, role, parts_json, tokens, create_time FROM messages"
            " WHERE sid = %s AND position BETWEEN %s AND %s ORDER BY position",
            (sid, first, last if last is not None else 2**62),
        )
        return [
            StoredMessage(pos, message_from_row(mid, role, parts, tokens), created)
            for pos, mid, role, parts, tokens, created in rows
        ]

    async def rebuild_pending_tokens(self, tenant: str, session_id: str) -> tuple[int, int]:
        async def tx(conn: Conn) -> tuple[int, int]:
            sid = await self._sid(conn, tenant, session_id, lock=True)
            pending, live = await self._rebuild(conn, sid)
            await conn.execute(
                "UPDATE sessions SET pending_tokens = %s, live_tokens = %s WHERE sid = %s",
                (pending, live, sid),
            )
            return pending, live

        return await self._run(tx)

    @staticmethod
    async def _rebuild(conn: Conn, sid: int) -> tuple[int, int]:
        """The reference rebuild rule over the session's live messages."""
        row = await _one(
            conn,
            "SELECT first_live_position, keep_recent_count FROM sessions WHERE sid = %s",
            (sid,),
        )
        assert row is not None
        first, keep = row
        return rebuild_rule(await PostgresStore._tokens_from(conn, sid, first), keep)

    @staticmethod
    async def _tokens_from(conn: Conn, sid: int, first: int) -> list[int]:
        """Token counts of the messages at ``first`` and after, in order."""
        rows = await _all(
            conn,
            "SELECT tokens FROM messages WHERE sid = %s AND position >= %s ORDER BY position",
            (sid, first),
        )
        return [int(t) for (t,) in rows]

    # --- commits ---------------------------------------------------------------------------
    @staticmethod
    async def _commit_row(conn: Conn, commit_id: str) -> CommitRecord:
        row = await _one(
            conn,
            f"SELECT {COMMIT_COLUMNS} FROM {COMMIT_FROM} WHERE c.commit_id = %s",
            (commit_id,),
        )
        assert row is not None
        return commit_from_row(row)

    async def commit_phase1(
        self,
        tenant: str,
        session_id: str,
        keep_recent_count: int,
        request_id: str | None,
        commit_id: str,
        first_event: FirstEventBuilder,
    ) -> Phase1Result:
        async def tx(conn: Conn) -> Phase1Result:
            # The lock serializes commits and ingest of this session across replicas: the
            # window, the archive number and the counters below are read after it.
            row = await _one(
                conn,
                "SELECT sid, first_live_position, next_position, live_tokens, archive_count"
                " FROM sessions WHERE tenant = %s AND session_id = %s FOR NO KEY UPDATE",
                (tenant, session_id),
            )
            if row is None:
                raise session_not_found(session_id)
            sid, first, next_pos, live_tokens, archive_count = (int(v) for v in row)
            if request_id:
                prior = await _one(
                    conn,
                    "SELECT commit_id FROM commits WHERE sid = %s AND request_id = %s",
                    (sid, request_id),
                )
                if prior is not None:
                    return Phase1Result(await self._commit_row(conn, prior[0]), created=False)
            total = next_pos - first
            now = time.time()
            boundary = await self._split_boundary(conn, sid, first, next_pos, keep_recent_count)
            archived = boundary - first
            if total == 0 or archived <= 0:
                reason = SkipReason.NO_MESSAGES if total == 0 else SkipReason.WITHIN_KEEP_WINDOW
                await conn.execute(
                    "INSERT INTO commits (commit_id, sid, state, keep_recent_count,"
                    " kept_message_count, skip_reason, request_id, create_time, complete_time,"
                    " last_sequence) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 1)",
                    (commit_id, sid, CommitState.SKIPPED.value, keep_recent_count, total,
                     reason.value, request_id, now, now),
                )  # fmt: skip
                # The window may have changed (a new keep): re-derive the counters.
                pending, live = rebuild_rule(
                    await self._tokens_from(conn, sid, first), keep_recent_count
                )
                seq, live_first, live_count = archive_count, first, total
            else:
                kept = await self._tokens_from(conn, sid, boundary)
                archived_tokens = live_tokens - sum(kept)
                seq = archive_count + 1
                # Archive, commit and outbox job: one statement.
                await conn.execute(
                    "WITH archive AS (INSERT INTO archives (sid, seq, commit_id, message_count,"
                    " tokens, first_position, last_position, create_time)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)),"
                    " outbox AS (INSERT INTO phase2_jobs (commit_id, sid, seq, state, not_before,"
                    f" create_time) VALUES (%s, %s, %s, 'queued', {_DB_NOW}, %s))"
                    " INSERT INTO commits (commit_id, sid, state, keep_recent_count, archive_seq,"
                    " archived_message_count, kept_message_count, archived_tokens, request_id,"
                    " create_time, last_sequence)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 1)",
                    (sid, seq, commit_id, archived, archived_tokens, first, boundary - 1, now,
                     commit_id, sid, seq, now,
                     commit_id, sid, CommitState.PENDING.value, keep_recent_count, seq, archived,
                     total - archived, archived_tokens, request_id, now),
                )  # fmt: skip
                pending, live = rebuild_rule(kept, keep_recent_count)
                live_first, live_count = boundary, total - archived
            await conn.execute(
                "UPDATE sessions SET first_live_position = %s, message_count = %s,"
                " archive_count = %s, keep_recent_count = %s, pending_tokens = %s,"
                " live_tokens = %s, update_time = %s WHERE sid = %s",
                (live_first, live_count, seq, keep_recent_count, pending, live, now, sid),
            )
            record = await self._commit_row(conn, commit_id)
            await conn.execute(
                "WITH stored AS (INSERT INTO commit_events VALUES (%s, 1, %s, %s))"
                " SELECT pg_notify(%s, %s)",
                (commit_id, record.state.terminal, first_event(record), EVENTS_CHANNEL, commit_id),
            )
            return Phase1Result(record, created=True)

        return await self._run(tx)

    @staticmethod
    async def _split_boundary(conn: Conn, sid: int, first: int, next_pos: int, keep: int) -> int:
        """wm_core.split_boundary, fed the rows and call positions it asks for."""
        rows: list[SplitRow] = []
        calls: dict[str, int | None] = {}
        since: int | None = None
        while isinstance(
            need := split_boundary(first, next_pos, keep, rows, since, calls), NeedRows
        ):
            if need.since < need.until:
                fetched = await _all(
                    conn,
                    "SELECT position, result_ids FROM messages WHERE sid = %s"
                    " AND position >= %s AND position < %s AND result_ids <> ''",
                    (sid, need.since, need.until),
                )
                rows.extend(SplitRow(int(p), (), tuple(ids.split(" "))) for p, ids in fetched)
                since = need.since
            if need.calls:
                wanted = sorted(need.calls)
                calls.update(dict.fromkeys(wanted))
                for tool_id, position in await _all(
                    conn,
                    "SELECT tool_use_id, position FROM tool_calls WHERE sid = %s"
                    " AND tool_use_id = ANY(%s)",
                    (sid, wanted),
                ):
                    calls[tool_id] = int(position)
        return need

    async def get_commit(self, tenant: str, session_id: str, commit_id: str) -> CommitRecord:
        async def tx(conn: Conn) -> CommitRecord:
            sid = await self._sid(conn, tenant, session_id)
            row = await _one(
                conn,
                f"SELECT {COMMIT_COLUMNS} FROM {COMMIT_FROM} WHERE c.commit_id = %s AND c.sid = %s",
                (commit_id, sid),
            )
            if row is None:
                raise commit_not_found(session_id, commit_id)
            return commit_from_row(row)

        return await self._read(tx)

    async def list_commits(
        self, tenant: str, session_id: str, limit: int, offset: int
    ) -> list[CommitRecord]:
        async def tx(conn: Conn) -> list[CommitRecord]:
            sid = await self._sid(conn, tenant, session_id)
            rows = await _all(
                conn,
                f"SELECT {COMMIT_COLUMNS} FROM {COMMIT_FROM} WHERE c.sid = %s"
                " ORDER BY c.create_time DESC, c.cid DESC LIMIT %s OFFSET %s",
                (sid, limit, offset),
            )
            return [commit_from_row(r) for r in rows]

        return await self._read(tx)

    async def events_after(self, commit_id: str, after_sequence: int) -> list[StoredEvent]:
        async def tx(conn: Conn) -> list[StoredEvent]:
            rows = await _all(
                conn,
                "SELECT sequence, payload, terminal FROM commit_events WHERE commit_id = %s"
                " AND sequence > %s ORDER BY sequence",
                (commit_id, after_sequence),
            )
            return [StoredEvent(commit_id, int(s), bytes(p), bool(t)) for s, p, t in rows]

        return await self._read(tx)

    @staticmethod
    async def _hold(conn: Conn, job: ClaimedJob) -> None:
        """Check (and lock until commit) that this worker still holds the job's lease."""
        row = await _one(
            conn,
            "SELECT lease_token FROM phase2_jobs WHERE commit_id = %s AND state = 'running'"
            " FOR UPDATE",
            (job.commit_id,),
        )
        if row is None or row[0] != job.lease_token:
            raise LeaseLost(job.commit_id)

    @staticmethod
    async def _insert_events(
        conn: Conn,
        commit_id: str,
        events: Sequence[tuple[int, bytes, bool]],
        running_attempts: int | None = None,
    ) -> None:
        """Store events, advance last_sequence (and mark the commit running when asked) and
        NOTIFY the replicas: one statement."""
        running = ", state = 'running', attempt_count = %s" if running_attempts is not None else ""
        if not events:
            if running_attempts is not None:
                await conn.execute(
                    "UPDATE commits SET state = 'running', attempt_count = %s WHERE commit_id = %s",
                    (running_attempts, commit_id),
                )
            return
        params: list[Any] = [
            commit_id,
            [seq for seq, _, _ in events],
            [bool(terminal) for _, _, terminal in events],
            [payload for _, payload, _ in events],
            max(seq for seq, _, _ in events),
        ]
        if running_attempts is not None:
            params.append(running_attempts)
        params += [commit_id, EVENTS_CHANNEL, commit_id]
        await conn.execute(
            "WITH stored AS (INSERT INTO commit_events (commit_id, sequence, terminal, payload)"
            " SELECT %s, u.s, u.t, u.p FROM unnest(%s::bigint[], %s::boolean[], %s::bytea[])"
            " AS u(s, t, p)),"
            f" advanced AS (UPDATE commits SET last_sequence = %s{running} WHERE commit_id = %s)"
            " SELECT pg_notify(%s, %s)",
            params,
        )

    async def append_events(
        self, job: ClaimedJob, events: Sequence[tuple[int, bytes, bool]], running: bool
    ) -> None:
        async def tx(conn: Conn) -> None:
            await self._hold(conn, job)
            await self._insert_events(
                conn, job.commit_id, events, job.attempts if running else None
            )

        await self._run(tx)

    async def retry_commit(
        self, tenant: str, session_id: str, commit_id: str, event: Callable[[int], bytes]
    ) -> CommitRecord:
        async def tx(conn: Conn) -> CommitRecord:
            sid = await self._sid(conn, tenant, session_id)
            # Lock the commit: two replicas retrying it at once must not both re-queue it.
            row = await _one(
                conn,
                "SELECT state, covered_by_seq, last_sequence FROM commits"
                " WHERE commit_id = %s AND sid = %s FOR NO KEY UPDATE",
                (commit_id, sid),
            )
            if row is None:
                raise commit_not_found(session_id, commit_id)
            state, covered_by, last_sequence = row
            if covered_by is not None:
                cover = await _one(
                    conn,
                    "SELECT commit_id FROM commits WHERE sid = %s AND archive_seq = %s",
                    (sid, covered_by),
                )
                assert cover is not None
                raise FailedPrecondition(
                    f"commit {commit_id} was covered by commit {cover[0]} ({archive_name(covered_by)})",
                    reason="COMMIT_ALREADY_COVERED",
                    metadata={"commit_id": commit_id, "covered_by_commit_id": cover[0]},
                )
            if state != CommitState.FAILED.value:
                raise FailedPrecondition(
                    f"commit {commit_id} is {state}, only a failed commit can be retried",
                    reason="COMMIT_NOT_FAILED",
                    metadata={"commit_id": commit_id, "state": state},
                )
            await conn.execute(
                "UPDATE commits SET state = 'pending', error_reason = NULL, error_message = NULL,"
                " complete_time = NULL, attempt_count = 0 WHERE commit_id = %s",
                (commit_id,),
            )
            await conn.execute(
                f"UPDATE phase2_jobs SET state = 'queued', attempts = 0, not_before = {_DB_NOW},"
                " lease_token = NULL, lease_expires = NULL WHERE commit_id = %s",
                (commit_id,),
            )
            await self._insert_events(
                conn, commit_id, [(last_sequence + 1, event(last_sequence + 1), False)]
            )
            return await self._commit_row(conn, commit_id)

        return await self._run(tx)

    # --- Phase 2 jobs ----------------------------------------------------------------------
    async def claim_job(self, lease_seconds: float) -> ClaimedJob | None:
        async def tx(conn: Conn) -> ClaimedJob | None:
            # SKIP LOCKED: replicas claiming at once each take a different job, never wait.
            # A row changed by a claim that committed after our snapshot is re-checked by
            # PostgreSQL against the conditions below before it is locked.
            row = await _one(
                conn,
                "SELECT j.commit_id, j.sid, j.seq, j.attempts FROM phase2_jobs j"
                " WHERE j.state <> 'done'"
                f" AND ((j.state = 'queued' AND j.not_before <= {_DB_NOW})"
                f"     OR (j.state = 'running' AND j.lease_expires < {_DB_NOW}))"
                " AND NOT EXISTS (SELECT 1 FROM phase2_jobs k WHERE k.sid = j.sid"
                "     AND k.seq < j.seq AND k.state <> 'done')"
                " ORDER BY j.not_before, j.create_time LIMIT 1"
                " FOR UPDATE OF j SKIP LOCKED",
            )
            if row is None:
                return None
            commit_id, sid, seq, attempts = row
            token = uuid.uuid4().hex
            attempts = int(attempts) + 1
            await conn.execute(
                "UPDATE phase2_jobs SET state = 'running', attempts = %s, lease_token = %s,"
                f" lease_expires = {_DB_NOW} + %s WHERE commit_id = %s",
                (attempts, token, lease_seconds, commit_id),
            )
            names = await _one(
                conn, "SELECT tenant, session_id FROM sessions WHERE sid = %s", (sid,)
            )
            assert names is not None
            return ClaimedJob(commit_id, names[0], names[1], int(seq), attempts, token)

        return await self._run(tx)

    async def renew_lease(self, job: ClaimedJob, lease_seconds: float) -> bool:
        async def tx(conn: Conn) -> bool:
            row = await _one(
                conn,
                f"UPDATE phase2_jobs SET lease_expires = {_DB_NOW} + %s"
                " WHERE commit_id = %s AND lease_token = %s AND state = 'running' RETURNING 1",
                (lease_seconds, job.commit_id, job.lease_token),
            )
            return row is not None

        return await self._run(tx)

    async def release_job(self, job: ClaimedJob) -> None:
        async def tx(conn: Conn) -> None:
            await conn.execute(
                "UPDATE phase2_jobs SET state = 'queued', attempts = GREATEST(attempts - 1, 0),"
                f" lease_token = NULL, lease_expires = NULL, not_before = {_DB_NOW}"
                " WHERE commit_id = %s AND lease_token = %s AND state = 'running'",
                (job.commit_id, job.lease_token),
            )

        await self._run(tx)

    async def phase2_input(self, job: ClaimedJob) -> Phase2Input:
        async def tx(conn: Conn) -> Phase2Input:
            row = await _one(
                conn,
                "SELECT sid, wm_version FROM sessions WHERE tenant = %s AND session_id = %s",
                (job.tenant, job.session_id),
            )
            if row is None:
                raise session_not_found(job.session_id)
            sid, wm_version = int(row[0]), int(row[1])
            previous = await self._wm_row(conn, sid, job.tenant, job.session_id, wm_version)
            seqs = [
                int(s)
                for (s,) in await _all(
                    conn,
                    "SELECT archive_seq FROM commits WHERE sid = %s AND state = 'failed'"
                    " AND covered_by_seq IS NULL AND archive_seq < %s ORDER BY archive_seq",
                    (sid, job.archive_seq),
                )
            ]
            seqs.append(job.archive_seq)
            messages: list[Message] = []
            for seq in seqs:
                messages.extend(await self._archive_messages(conn, sid, seq))
            return Phase2Input(previous, tuple(messages), tuple(seqs))

        return await self._read(tx)

    @classmethod
    async def _archive_messages(cls, conn: Conn, sid: int, seq: int) -> list[Message]:
        row = await _one(
            conn,
            "SELECT first_position, last_position FROM archives WHERE sid = %s AND seq = %s",
            (sid, seq),
        )
        if row is None:  # callers look the archive up first; this is a race or a bug
            raise NotFound(
                f"archive {archive_name(seq)!r} not found",
                reason="ARCHIVE_NOT_FOUND",
                metadata={"archive_id": archive_name(seq)},
            )
        first, last = row
        return [m.message for m in await cls._messages_from(conn, sid, first, last)]

    @staticmethod
    async def _wm_row(
        conn: Conn, sid: int, tenant: str, session_id: str, version: int
    ) -> WorkingMemoryRecord | None:
        if version <= 0:
            return None
        row = await _one(
            conn,
            "SELECT version, document, archive_seq, commit_id, estimated_tokens, create_time"
            " FROM working_memories WHERE sid = %s AND version = %s",
            (sid, version),
        )
        return wm_from_row(tenant, session_id, row) if row else None

    async def complete_phase2(
        self,
        job: ClaimedJob,
        expected_previous_version: int,
        completion: Phase2Completion,
        closing_events: ClosingEventsBuilder,
    ) -> tuple[CommitRecord, WorkingMemoryRecord] | None:
        async def tx(conn: Conn) -> tuple[CommitRecord, WorkingMemoryRecord] | None:
            # The lease check and the session lock (against a concurrent WM write) at once.
            row = await _one(
                conn,
                "SELECT j.lease_token, s.sid, s.wm_version FROM phase2_jobs j"
                " JOIN sessions s ON s.sid = j.sid"
                " WHERE j.commit_id = %s AND j.state = 'running'"
                " FOR UPDATE OF j FOR NO KEY UPDATE OF s",
                (job.commit_id,),
            )
            if row is None or row[0] != job.lease_token:
                raise LeaseLost(job.commit_id)
            sid, current = int(row[1]), int(row[2])
            if current != expected_previous_version:
                return None
            now = time.time()
            version = current + 1
            await conn.execute(
                "WITH wm AS (INSERT INTO working_memories (sid, version, document, archive_seq,"
                " covered_seq, commit_id, estimated_tokens, create_time)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)),"
                " session AS (UPDATE sessions SET wm_version = %s, update_time = %s"
                "   WHERE sid = %s),"
                " archive AS (UPDATE archives SET abstract = %s WHERE sid = %s AND seq = %s),"
                " job AS (UPDATE phase2_jobs SET state = 'done', lease_token = NULL"
                "   WHERE commit_id = %s)"
                " UPDATE commits SET state = 'completed', wm_version = %s, usage_json = %s,"
                " decisions_json = %s, complete_time = %s, attempt_count = %s,"
                " error_reason = NULL, error_message = NULL WHERE commit_id = %s",
                (sid, version, completion.document, job.archive_seq, job.archive_seq,
                 job.commit_id, completion.estimated_tokens, now,
                 version, now, sid,
                 completion.abstract, sid, job.archive_seq,
                 job.commit_id,
                 version, completion.usage_json, completion.decisions_json, now, job.attempts,
                 job.commit_id),
            )  # fmt: skip
            earlier = [s for s in completion.covered_seqs if s != job.archive_seq]
            if earlier:
                await conn.execute(
                    "UPDATE commits SET covered_by_seq = %s WHERE sid = %s"
                    " AND archive_seq = ANY(%s)",
                    (job.archive_seq, sid, earlier),
                )
            record = await self._commit_row(conn, job.commit_id)
            wm = WorkingMemoryRecord(
                job.tenant, job.session_id, version, completion.document, job.archive_seq,
                job.commit_id, completion.estimated_tokens, now,
            )  # fmt: skip
            events = list(completion.events) + list(closing_events(record, wm))
            await self._insert_events(conn, job.commit_id, events)
            if events:  # what a re-read would return: only last_sequence moved
                record = replace(record, last_sequence=max(seq for seq, _, _ in events))
            return record, wm

        return await self._run(tx)

    async def schedule_retry(
        self, job: ClaimedJob, delay_seconds: float, events: Sequence[tuple[int, bytes, bool]]
    ) -> None:
        async def tx(conn: Conn) -> None:
            await self._hold(conn, job)
            await conn.execute(
                "UPDATE phase2_jobs SET state = 'queued', lease_token = NULL,"
                f" lease_expires = NULL, not_before = {_DB_NOW} + %s WHERE commit_id = %s",
                (delay_seconds, job.commit_id),
            )
            await conn.execute(
                "UPDATE commits SET state = 'pending', attempt_count = %s WHERE commit_id = %s",
                (job.attempts, job.commit_id),
            )
            await self._insert_events(conn, job.commit_id, events)

        await self._run(tx)

    async def fail_commit(
        self, job: ClaimedJob, reason: str, message: str, closing_events: ClosingEventsBuilder
    ) -> CommitRecord:
        async def tx(conn: Conn) -> CommitRecord:
            await self._hold(conn, job)
            await conn.execute(
                "UPDATE commits SET state = 'failed', error_reason = %s, error_message = %s,"
                " complete_time = %s, attempt_count = %s WHERE commit_id = %s",
                (reason, message[:2000], time.time(), job.attempts, job.commit_id),
            )
            await conn.execute(
                "UPDATE phase2_jobs SET state = 'done', lease_token = NULL WHERE commit_id = %s",
                (job.commit_id,),
            )
            record = await self._commit_row(conn, job.commit_id)
            await self._insert_events(conn, job.commit_id, closing_events(record, None))
            return await self._commit_row(conn, job.commit_id)

        return await self._run(tx)

    async def open_job_count(self) -> int:
        async def tx(conn: Conn) -> int:
            return int(await _value(conn, "SELECT COUNT(*) FROM phase2_jobs WHERE state <> 'done'"))

        return await self._read(tx)

    # --- working memory --------------------------------------------------------------------
    async def get_working_memory(
        self, tenant: str, session_id: str, version: int
    ) -> WorkingMemoryRecord | None:
        async def tx(conn: Conn) -> WorkingMemoryRecord | None:
            row = await _one(
                conn,
                "SELECT sid, wm_version FROM sessions WHERE tenant = %s AND session_id = %s",
                (tenant, session_id),
            )
            if row is None:
                raise session_not_found(session_id)
            wanted = version if version > 0 else int(row[1])
            return await self._wm_row(conn, int(row[0]), tenant, session_id, wanted)

        return await self._read(tx)

    async def latest_coverage(
        self, tenant: str, session_id: str
    ) -> tuple[WorkingMemoryRecord | None, int]:
        async def tx(conn: Conn) -> tuple[WorkingMemoryRecord | None, int]:
            row = await _one(
                conn,
                "SELECT s.wm_version, w.version, w.document, w.archive_seq, w.commit_id,"
                " w.estimated_tokens, w.create_time, w.covered_seq FROM sessions s"
                " LEFT JOIN working_memories w ON w.sid = s.sid AND w.version = s.wm_version"
                " WHERE s.tenant = %s AND s.session_id = %s",
                (tenant, session_id),
            )
            if row is None:
                raise session_not_found(session_id)
            if int(row[0]) <= 0 or row[1] is None:
                return None, 0
            return wm_from_row(tenant, session_id, row[1:7]), int(row[7])

        return await self._read(tx)

    async def store_working_memory(
        self,
        tenant: str,
        session_id: str,
        expected_version: int,
        document: str,
        estimated_tokens: int,
    ) -> WorkingMemoryRecord | None:
        async def tx(conn: Conn) -> WorkingMemoryRecord | None:
            row = await _one(
                conn,
                "SELECT sid, wm_version FROM sessions WHERE tenant = %s AND session_id = %s"
                " FOR NO KEY UPDATE",
                (tenant, session_id),
            )
            if row is None:
                raise session_not_found(session_id)
            sid, current = int(row[0]), int(row[1])
            if current != expected_version:
                return None
            covered = 0
            if current:
                covered = int(
                    await _value(
                        conn,
                        "SELECT covered_seq FROM working_memories WHERE sid = %s AND version = %s",
                        (sid, current),
                    )
                )
            now = time.time()
            await conn.execute(
                "INSERT INTO working_memories (sid, version, document, archive_seq, covered_seq,"
                " commit_id, estimated_tokens, create_time)"
                " VALUES (%s, %s, %s, NULL, %s, NULL, %s, %s)",
                (sid, current + 1, document, covered, estimated_tokens, now),
            )
            await conn.execute(
                "UPDATE sessions SET wm_version = %s, update_time = %s WHERE sid = %s",
                (current + 1, now, sid),
            )
            return await self._wm_row(conn, sid, tenant, session_id, current + 1)

        return await self._run(tx)

    # --- archives --------------------------------------------------------------------------
    async def list_archives(
        self, tenant: str, session_id: str, limit: int, after_seq: int
    ) -> list[CommitRecord]:
        async def tx(conn: Conn) -> list[CommitRecord]:
            sid = await self._sid(conn, tenant, session_id)
            rows = await _all(
                conn,
                f"SELECT {COMMIT_COLUMNS} FROM {COMMIT_FROM} WHERE c.sid = %s"
                " AND c.archive_seq > %s ORDER BY c.archive_seq LIMIT %s",
                (sid, after_seq, limit),
            )
            return [commit_from_row(r) for r in rows]

        return await self._read(tx)

    async def archive_messages(self, tenant: str, session_id: str, seq: int) -> list[Message]:
        async def tx(conn: Conn) -> list[Message]:
            sid = await self._sid(conn, tenant, session_id)
            return await self._archive_messages(conn, sid, seq)

        return await self._read(tx)

    async def uncovered_messages(
        self, tenant: str, session_id: str, covered_seq: int
    ) -> tuple[list[StoredMessage], list[int]]:
        async def tx(conn: Conn) -> tuple[list[StoredMessage], list[int]]:
            sid = await self._sid(conn, tenant, session_id)
            start = 1
            if covered_seq > 0:
                start = int(
                    await _value(
                        conn,
                        "SELECT last_position + 1 FROM archives WHERE sid = %s AND seq = %s",
                        (sid, covered_seq),
                    )
                )
            seqs = [
                int(s)
                for (s,) in await _all(
                    conn,
                    "SELECT seq FROM archives WHERE sid = %s AND seq > %s ORDER BY seq",
                    (sid, covered_seq),
                )
            ]
            return await self._messages_from(conn, sid, start, None), seqs

        return await self._read(tx)

    async def search_archives(
        self,
        tenant: str,
        session_id: str | None,
        archive_seq: int | None,
        matches: Callable[[Message], bool],
        prefilter: str | None,
        limit: int,
    ) -> tuple[list[SearchMatch], int]:
        async def tx(conn: Conn) -> tuple[list[SearchMatch], int]:
            sessions: list[Row]
            if session_id is not None:
                sessions = [(await self._sid(conn, tenant, session_id), session_id)]
            else:
                sessions = await _all(
                    conn,
                    "SELECT sid, session_id FROM sessions WHERE tenant = %s ORDER BY sid DESC",
                    (tenant,),
                )
            found: list[SearchMatch] = []
            total = 0
            for sid, name in sessions:
                query = (
                    "SELECT seq, first_position, last_position FROM archives WHERE sid = %s"
                    + (" AND seq = %s" if archive_seq is not None else "")
                    + " ORDER BY seq DESC"
                )
                params: tuple[Any, ...] = (sid, archive_seq) if archive_seq is not None else (sid,)
                for seq, first, last in await _all(conn, query, params):
                    sql = (
                        "SELECT message_id, role, parts_json, tokens FROM messages"
                        " WHERE sid = %s AND position BETWEEN %s AND %s"
                    )
                    args: tuple[Any, ...] = (sid, first, last)
                    if prefilter:
                        # COLLATE "C": ASCII-only lower-casing, exactly as SQLite's lower().
                        sql += ' AND strpos(lower(parts_json COLLATE "C"), %s) > 0'
                        args = (*args, prefilter)
                    for mid, role, parts, tokens in await _all(
                        conn, sql + " ORDER BY position", args
                    ):
                        message = message_from_row(mid, role, parts, tokens)
                        if matches(message):
                            total += 1
                            if len(found) < limit:
                                found.append(SearchMatch(name, int(seq), message))
            return found, total

        return await self._read(tx)

    # --- idempotency -----------------------------------------------------------------------
    async def remembered(self, tenant: str, method: str, request_id: str) -> str | None:
        async def tx(conn: Conn) -> str | None:
            row = await _one(
                conn,
                "SELECT result_json FROM idempotency WHERE tenant = %s AND method = %s"
                " AND request_id = %s",
                (tenant, method, request_id),
            )
            return str(row[0]) if row else None

        return await self._read(tx)

    async def remember(self, tenant: str, method: str, request_id: str, result: str) -> None:
        async def tx(conn: Conn) -> None:
            await conn.execute(
                "INSERT INTO idempotency VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (tenant, method, request_id, result, time.time()),
            )

        await self._run(tx)
