"""The embedded engine: one SQLite file in WAL mode.

SQLite allows one writer at a time, and its short transactions (a batch insert, Phase 1, a
row read) take tens to hundreds of microseconds — less than handing them to a thread costs.
So they run inline on the event loop, on one connection: synchronous code cannot interleave,
which serializes every write without locks. Reads that scan many rows (an archive, the
uncovered messages, a search) run on a second, read-only connection in a worker thread; WAL
gives them a consistent snapshot while writes go on. Each write is one
``BEGIN IMMEDIATE … COMMIT``; ``synchronous=NORMAL`` in WAL mode survives a killed process
(the tests SIGKILL the server) though not a power cut between checkpoints.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from wm_core import Message, NeedRows, SplitRow, split_boundary
from wm_server.errors import AlreadyExists, FailedPrecondition, session_not_found
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
from wm_server.storage.schema_sqlite import MIGRATIONS

T = TypeVar("T")


class SqliteStore(Store):
    """Store on one SQLite file."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wm-sqlite-read")
        self._conn: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None

    # --- plumbing --------------------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("store is not open")
        return self._conn

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """A write transaction, inline."""
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    async def _peek(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """A short read, inline: no other writer can run meanwhile, so no transaction."""
        return fn(self._connection())

    async def _scan(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """A long read on the reader connection in its thread, as one snapshot."""

        def run() -> T:
            reader = self._reader
            if reader is None:
                raise RuntimeError("store is not open")
            reader.execute("BEGIN")
            try:
                return fn(reader)
            finally:
                reader.execute("ROLLBACK")

        return await asyncio.get_running_loop().run_in_executor(self._executor, run)

    async def open(self) -> None:
        def connect() -> None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA busy_timeout=10000")
            conn.execute("PRAGMA cache_size=-65536")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY)"
            )
            applied = {v for (v,) in conn.execute("SELECT version FROM schema_migrations")}
            for version, sql in MIGRATIONS:
                if version in applied:
                    continue
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for statement in sql.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    conn.execute("INSERT INTO schema_migrations VALUES (?)", (version,))
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            self._conn = conn

        def connect_reader() -> None:
            reader = sqlite3.connect(f"file:{self._path}?mode=ro", uri=True, isolation_level=None)
            reader.execute("PRAGMA busy_timeout=10000")
            reader.execute("PRAGMA cache_size=-65536")
            self._reader = reader

        connect()
        await asyncio.get_running_loop().run_in_executor(self._executor, connect_reader)

    async def close(self) -> None:
        def close_reader() -> None:
            if self._reader is not None:
                self._reader.close()
                self._reader = None

        await asyncio.get_running_loop().run_in_executor(self._executor, close_reader)
        self._executor.shutdown(wait=True)
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @staticmethod
    def _sid(conn: sqlite3.Connection, tenant: str, session_id: str) -> int:
        row = conn.execute(
            "SELECT sid FROM sessions WHERE tenant = ? AND session_id = ?", (tenant, session_id)
        ).fetchone()
        if row is None:
            raise session_not_found(session_id)
        return int(row[0])

    @staticmethod
    def _session_row(conn: sqlite3.Connection, sid: int) -> SessionRecord:
        row = conn.execute(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE sid = ?", (sid,)
        ).fetchone()
        return session_from_row(row)

    # --- sessions and messages -------------------------------------------------------------
    async def create_session(
        self, tenant: str, session_id: str, request_id: str | None
    ) -> tuple[SessionRecord, bool]:
        def tx(conn: sqlite3.Connection) -> tuple[SessionRecord, bool]:
            row = conn.execute(
                "SELECT sid, create_request_id FROM sessions WHERE tenant = ? AND session_id = ?",
                (tenant, session_id),
            ).fetchone()
            if row is not None:
                if request_id and row[1] == request_id:
                    return self._session_row(conn, row[0]), False
                raise AlreadyExists(
                    f"session {session_id!r} already exists",
                    reason="SESSION_EXISTS",
                    metadata={"session_id": session_id},
                )
            now = time.time()
            cur = conn.execute(
                "INSERT INTO sessions (tenant, session_id, create_time, update_time,"
                " create_request_id) VALUES (?, ?, ?, ?, ?)",
                (tenant, session_id, now, now, request_id),
            )
            return self._session_row(conn, int(cur.lastrowid or 0)), True

        return await self._run(tx)

    async def get_session(self, tenant: str, session_id: str) -> SessionRecord:
        def tx(conn: sqlite3.Connection) -> SessionRecord:
            row = conn.execute(
                f"SELECT {SESSION_COLUMNS} FROM sessions WHERE tenant = ? AND session_id = ?",
                (tenant, session_id),
            ).fetchone()
            if row is None:
                raise session_not_found(session_id)
            return session_from_row(row)

        return await self._peek(tx)

    async def list_sessions(
        self, tenant: str, limit: int, before_key: int | None
    ) -> tuple[list[SessionRecord], int | None]:
        def tx(conn: sqlite3.Connection) -> tuple[list[SessionRecord], int | None]:
            rows = conn.execute(
                f"SELECT {SESSION_COLUMNS} FROM sessions WHERE tenant = ? AND sid < ?"
                " ORDER BY sid DESC LIMIT ?",
                (tenant, before_key if before_key is not None else 2**62, limit + 1),
            ).fetchall()
            more = len(rows) > limit
            rows = rows[:limit]
            return [session_from_row(r) for r in rows], (int(rows[-1][0]) if more else None)

        return await self._peek(tx)

    async def delete_session(self, tenant: str, session_id: str) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            sid = self._sid(conn, tenant, session_id)
            conn.execute("DELETE FROM sessions WHERE sid = ?", (sid,))

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
        def tx(conn: sqlite3.Connection) -> AddResult:
            created = False
            row = conn.execute(
                "SELECT sid, first_live_position, next_position, keep_recent_count"
                " FROM sessions WHERE tenant = ? AND session_id = ?",
                (tenant, session_id),
            ).fetchone()
            if row is None:
                if not create_if_missing:
                    raise session_not_found(session_id)
                now = time.time()
                cur = conn.execute(
                    "INSERT INTO sessions (tenant, session_id, create_time, update_time)"
                    " VALUES (?, ?, ?, ?)",
                    (tenant, session_id, now, now),
                )
                row = (int(cur.lastrowid or 0), 1, 1, 0)
                created = True
            sid, first_live, next_pos, keep = row
            if request_id:
                prior = conn.execute(
                    "SELECT result_json FROM idempotency WHERE tenant = ? AND method = ?"
                    " AND request_id = ?",
                    (tenant, f"AddMessages/{session_id}", request_id),
                ).fetchone()
                if prior is not None:
                    saved = json.loads(prior[0])
                    return AddResult(
                        self._session_row(conn, sid),
                        tuple(saved["added"]),
                        tuple(saved["duplicates"]),
                        False,
                    )
            added: list[str] = []
            duplicates: list[str] = []
            seen: set[str] = set()
            fresh: list[tuple[int, Message]] = []
            position = next_pos
            given = [m.id for m in messages if m.id]
            existing: set[str] = set()
            for start in range(0, len(given), 500):
                chunk = given[start : start + 500]
                marks = ",".join("?" * len(chunk))
                existing.update(
                    r[0]
                    for r in conn.execute(
                        f"SELECT message_id FROM messages WHERE sid = ? AND message_id IN ({marks})",
                        (sid, *chunk),
                    )
                )
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
            conn.executemany(
                "INSERT INTO messages (sid, position, message_id, role, parts_json, tokens,"
                " create_time, result_ids) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        sid,
                        pos,
                        m.id,
                        m.role.value,
                        parts_to_json(m.parts),
                        m.estimated_tokens,
                        now,
                        " ".join(m.tool_result_ids()),
                    )
                    for pos, m in fresh
                ],
            )
            calls = [(sid, tid, pos) for pos, m in fresh for tid in m.tool_use_ids()]
            if calls:
                conn.executemany(
                    "INSERT OR REPLACE INTO tool_calls (sid, tool_use_id, position) VALUES (?, ?, ?)",
                    calls,
                )
            added_tokens = sum(m.estimated_tokens for _, m in fresh)
            pending_delta = self._pending_delta(conn, sid, first_live, next_pos, keep, fresh)
            conn.execute(
                "UPDATE sessions SET next_position = ?, message_count = message_count + ?,"
                " total_message_count = total_message_count + ?, live_tokens = live_tokens + ?,"
                " pending_tokens = pending_tokens + ?, update_time = ? WHERE sid = ?",
                (position, len(fresh), len(fresh), added_tokens, pending_delta, now, sid),
            )
            if request_id:
                conn.execute(
                    "INSERT INTO idempotency VALUES (?, ?, ?, ?, ?)",
                    (
                        tenant,
                        f"AddMessages/{session_id}",
                        request_id,
                        json.dumps({"added": added, "duplicates": duplicates}),
                        now,
                    ),
                )
            return AddResult(self._session_row(conn, sid), tuple(added), tuple(duplicates), created)

        return await self._run(tx)

    @staticmethod
    def _pending_delta(
        conn: sqlite3.Connection,
        sid: int,
        first_live: int,
        next_pos: int,
        keep: int,
        fresh: list[tuple[int, Message]],
    ) -> int:
        in_batch, stored_range = pending_delta(first_live, next_pos, keep, fresh)
        if stored_range is None:
            return in_batch
        stored = conn.execute(
            "SELECT COALESCE(SUM(tokens), 0) FROM messages WHERE sid = ?"
            " AND position BETWEEN ? AND ?",
            (sid, *stored_range),
        ).fetchone()
        return in_batch + int(stored[0])

    async def live_messages(self, tenant: str, session_id: str) -> list[StoredMessage]:
        def tx(conn: sqlite3.Connection) -> list[StoredMessage]:
            sid = self._sid(conn, tenant, session_id)
            return self._messages_from(conn, sid, self._first_live(conn, sid), None)

        return await self._scan(tx)

    @staticmethod
    def _first_live(conn: sqlite3.Connection, sid: int) -> int:
        return int(
            conn.execute(
                "SELECT first_live_position FROM sessions WHERE sid = ?", (sid,)
            ).fetchone()[0]
        )

    @staticmethod
    def _messages_from(
        conn: sqlite3.Connection, sid: int, first: int, last: int | None
    ) -> list[StoredMessage]:
        rows = conn.execute(
            "SELECT position, message_id, role, parts_json, tokens, create_time FROM messages"
            " WHERE sid = ? AND position BETWEEN ? AND ? ORDER BY position",
            (sid, first, last if last is not None else 2**62),
        ).fetchall()
        return [
            StoredMessage(pos, message_from_row(mid, role, parts, tokens), created)
            for pos, mid, role, parts, tokens, created in rows
        ]

    async def rebuild_pending_tokens(self, tenant: str, session_id: str) -> tuple[int, int]:
        def tx(conn: sqlite3.Connection) -> tuple[int, int]:
            sid = self._sid(conn, tenant, session_id)
            pending, live = self._rebuild(conn, sid)
            conn.execute(
                "UPDATE sessions SET pending_tokens = ?, live_tokens = ? WHERE sid = ?",
                (pending, live, sid),
            )
            return pending, live

        return await self._run(tx)

    @staticmethod
    def _rebuild(conn: sqlite3.Connection, sid: int) -> tuple[int, int]:
        first, keep = conn.execute(
            "SELECT first_live_position, keep_recent_count FROM sessions WHERE sid = ?", (sid,)
        ).fetchone()
        tokens = [
            t
            for (t,) in conn.execute(
                "SELECT tokens FROM messages WHERE sid = ? AND position >= ? ORDER BY position",
                (sid, first),
            )
        ]
        return rebuild_rule(tokens, keep)

    # --- commits ---------------------------------------------------------------------------
    def _commit_row(self, conn: sqlite3.Connection, commit_id: str) -> CommitRecord:
        row = conn.execute(
            f"SELECT {COMMIT_COLUMNS} FROM {COMMIT_FROM} WHERE c.commit_id = ?", (commit_id,)
        ).fetchone()
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
        def tx(conn: sqlite3.Connection) -> Phase1Result:
            sid = self._sid(conn, tenant, session_id)
            if request_id:
                row = conn.execute(
                    "SELECT commit_id FROM commits WHERE sid = ? AND request_id = ?",
                    (sid, request_id),
                ).fetchone()
                if row is not None:
                    return Phase1Result(self._commit_row(conn, row[0]), created=False)
            first, next_pos, live_tokens, archive_count = conn.execute(
                "SELECT first_live_position, next_position, live_tokens, archive_count"
                " FROM sessions WHERE sid = ?",
                (sid,),
            ).fetchone()
            total = next_pos - first
            now = time.time()
            boundary = self._split_boundary(conn, sid, first, next_pos, keep_recent_count)
            archived = boundary - first
            if total == 0 or archived <= 0:
                reason = SkipReason.NO_MESSAGES if total == 0 else SkipReason.WITHIN_KEEP_WINDOW
                conn.execute(
                    "INSERT INTO commits (commit_id, sid, state, keep_recent_count,"
                    " kept_message_count, skip_reason, request_id, create_time, complete_time,"
                    " last_sequence) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
                    (commit_id, sid, CommitState.SKIPPED.value, keep_recent_count, total,
                     reason.value, request_id, now, now),
                )  # fmt: skip
                pending, live = self._rebuild_after_keep(conn, sid, keep_recent_count)
            else:
                kept_tokens = int(
                    conn.execute(
                        "SELECT COALESCE(SUM(tokens), 0) FROM messages WHERE sid = ?"
                        " AND position >= ?",
                        (sid, boundary),
                    ).fetchone()[0]
                )
                archived_tokens = live_tokens - kept_tokens
                seq = archive_count + 1
                conn.execute(
                    "INSERT INTO archives (sid, seq, commit_id, message_count, tokens,"
                    " first_position, last_position, create_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (sid, seq, commit_id, archived, archived_tokens, first, boundary - 1, now),
                )
                conn.execute(
                    "INSERT INTO commits (commit_id, sid, state, keep_recent_count, archive_seq,"
                    " archived_message_count, kept_message_count, archived_tokens, request_id,"
                    " create_time, last_sequence) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)",
                    (commit_id, sid, CommitState.PENDING.value, keep_recent_count, seq, archived,
                     total - archived, archived_tokens, request_id, now),
                )  # fmt: skip
                conn.execute(
                    "INSERT INTO phase2_jobs (commit_id, sid, seq, state, not_before, create_time)"
                    " VALUES (?, ?, ?, 'queued', ?, ?)",
                    (commit_id, sid, seq, now, now),
                )
                conn.execute(
                    "UPDATE sessions SET first_live_position = ?, message_count = ?,"
                    " live_tokens = ?, archive_count = ? WHERE sid = ?",
                    (boundary, total - archived, kept_tokens, seq, sid),
                )
                pending, live = self._rebuild_after_keep(conn, sid, keep_recent_count)
            conn.execute(
                "UPDATE sessions SET keep_recent_count = ?, pending_tokens = ?, live_tokens = ?,"
                " update_time = ? WHERE sid = ?",
                (keep_recent_count, pending, live, now, sid),
            )
            record = self._commit_row(conn, commit_id)
            conn.execute(
                "INSERT INTO commit_events VALUES (?, 1, ?, ?)",
                (commit_id, int(record.state.terminal), first_event(record)),
            )
            return Phase1Result(record, created=True)

        return await self._run(tx)

    def _rebuild_after_keep(self, conn: sqlite3.Connection, sid: int, keep: int) -> tuple[int, int]:
        conn.execute("UPDATE sessions SET keep_recent_count = ? WHERE sid = ?", (keep, sid))
        return self._rebuild(conn, sid)

    @staticmethod
    def _split_boundary(
        conn: sqlite3.Connection, sid: int, first: int, next_pos: int, keep: int
    ) -> int:
        """wm_core.split_boundary, fed the rows and call positions it asks for."""
        rows: list[SplitRow] = []
        calls: dict[str, int | None] = {}
        since: int | None = None
        while isinstance(
            need := split_boundary(first, next_pos, keep, rows, since, calls), NeedRows
        ):
            if need.since < need.until:
                rows.extend(
                    SplitRow(int(pos), (), tuple(ids.split(" ")))
                    for pos, ids in conn.execute(
                        "SELECT position, result_ids FROM messages WHERE sid = ?"
                        " AND position >= ? AND position < ? AND result_ids != ''",
                        (sid, need.since, need.until),
                    )
                )
                since = need.since
            wanted = sorted(need.calls)
            calls.update(dict.fromkeys(wanted))
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for tool_id, position in conn.execute(
                    "SELECT tool_use_id, position FROM tool_calls WHERE sid = ?"
                    f" AND tool_use_id IN ({marks})",
                    (sid, *chunk),
                ):
                    calls[tool_id] = int(position)
        return need

    async def get_commit(self, tenant: str, session_id: str, commit_id: str) -> CommitRecord:
        def tx(conn: sqlite3.Connection) -> CommitRecord:
            sid = self._sid(conn, tenant, session_id)
            row = conn.execute(
                f"SELECT {COMMIT_COLUMNS} FROM {COMMIT_FROM} WHERE c.commit_id = ? AND c.sid = ?",
                (commit_id, sid),
            ).fetchone()
            if row is None:
                raise commit_not_found(session_id, commit_id)
            return commit_from_row(row)

        return await self._peek(tx)

    async def list_commits(
        self, tenant: str, session_id: str, limit: int, offset: int
    ) -> list[CommitRecord]:
        def tx(conn: sqlite3.Connection) -> list[CommitRecord]:
            sid = self._sid(conn, tenant, session_id)
            rows = conn.execute(
                f"SELECT {COMMIT_COLUMNS} FROM {COMMIT_FROM} WHERE c.sid = ?"
                " ORDER BY c.create_time DESC, c.rowid DESC LIMIT ? OFFSET ?",
                (sid, limit, offset),
            ).fetchall()
            return [commit_from_row(r) for r in rows]

        return await self._peek(tx)

    async def events_after(self, commit_id: str, after_sequence: int) -> list[StoredEvent]:
        def tx(conn: sqlite3.Connection) -> list[StoredEvent]:
            rows = conn.execute(
                "SELECT sequence, payload, terminal FROM commit_events WHERE commit_id = ?"
                " AND sequence > ? ORDER BY sequence",
                (commit_id, after_sequence),
            ).fetchall()
            return [StoredEvent(commit_id, s, bytes(p), bool(t)) for s, p, t in rows]

        return await self._peek(tx)

    @staticmethod
    def _hold(conn: sqlite3.Connection, job: ClaimedJob) -> None:
        row = conn.execute(
            "SELECT lease_token FROM phase2_jobs WHERE commit_id = ? AND state = 'running'",
            (job.commit_id,),
        ).fetchone()
        if row is None or row[0] != job.lease_token:
            raise LeaseLost(job.commit_id)

    @staticmethod
    def _insert_events(
        conn: sqlite3.Connection, commit_id: str, events: Sequence[tuple[int, bytes, bool]]
    ) -> None:
        if not events:
            return
        conn.executemany(
            "INSERT INTO commit_events VALUES (?, ?, ?, ?)",
            [(commit_id, seq, int(terminal), payload) for seq, payload, terminal in events],
        )
        conn.execute(
            "UPDATE commits SET last_sequence = ? WHERE commit_id = ?",
            (max(seq for seq, _, _ in events), commit_id),
        )

    async def append_events(
        self, job: ClaimedJob, events: Sequence[tuple[int, bytes, bool]], running: bool
    ) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            self._hold(conn, job)
            self._insert_events(conn, job.commit_id, events)
            if running:
                conn.execute(
                    "UPDATE commits SET state = 'running', attempt_count = ? WHERE commit_id = ?",
                    (job.attempts, job.commit_id),
                )

        await self._run(tx)

    async def retry_commit(
        self, tenant: str, session_id: str, commit_id: str, event: Callable[[int], bytes]
    ) -> CommitRecord:
        def tx(conn: sqlite3.Connection) -> CommitRecord:
            sid = self._sid(conn, tenant, session_id)
            row = conn.execute(
                "SELECT state, covered_by_seq, last_sequence FROM commits"
                " WHERE commit_id = ? AND sid = ?",
                (commit_id, sid),
            ).fetchone()
            if row is None:
                raise commit_not_found(session_id, commit_id)
            state, covered_by, last_sequence = row
            if covered_by is not None:
                cover = conn.execute(
                    "SELECT commit_id FROM commits WHERE sid = ? AND archive_seq = ?",
                    (sid, covered_by),
                ).fetchone()
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
            now = time.time()
            conn.execute(
                "UPDATE commits SET state = 'pending', error_reason = NULL, error_message = NULL,"
                " complete_time = NULL, attempt_count = 0 WHERE commit_id = ?",
                (commit_id,),
            )
            conn.execute(
                "UPDATE phase2_jobs SET state = 'queued', attempts = 0, not_before = ?,"
                " lease_token = NULL, lease_expires = NULL WHERE commit_id = ?",
                (now, commit_id),
            )
            self._insert_events(
                conn, commit_id, [(last_sequence + 1, event(last_sequence + 1), False)]
            )
            return self._commit_row(conn, commit_id)

        return await self._run(tx)

    # --- Phase 2 jobs ----------------------------------------------------------------------
    async def claim_job(self, lease_seconds: float) -> ClaimedJob | None:
        def tx(conn: sqlite3.Connection) -> ClaimedJob | None:
            now = time.time()
            row = conn.execute(
                "SELECT j.commit_id, j.sid, j.seq, j.attempts FROM phase2_jobs j"
                " WHERE ((j.state = 'queued' AND j.not_before <= ?)"
                "     OR (j.state = 'running' AND j.lease_expires < ?))"
                " AND NOT EXISTS (SELECT 1 FROM phase2_jobs k WHERE k.sid = j.sid"
                "     AND k.seq < j.seq AND k.state != 'done')"
                " ORDER BY j.not_before, j.create_time LIMIT 1",
                (now, now),
            ).fetchone()
            if row is None:
                return None
            commit_id, sid, seq, attempts = row
            token = uuid.uuid4().hex
            attempts += 1
            conn.execute(
                "UPDATE phase2_jobs SET state = 'running', attempts = ?, lease_token = ?,"
                " lease_expires = ? WHERE commit_id = ?",
                (attempts, token, now + lease_seconds, commit_id),
            )
            tenant, session_id = conn.execute(
                "SELECT tenant, session_id FROM sessions WHERE sid = ?", (sid,)
            ).fetchone()
            return ClaimedJob(commit_id, tenant, session_id, seq, attempts, token)

        return await self._run(tx)

    async def renew_lease(self, job: ClaimedJob, lease_seconds: float) -> bool:
        def tx(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE phase2_jobs SET lease_expires = ? WHERE commit_id = ? AND lease_token = ?"
                " AND state = 'running'",
                (time.time() + lease_seconds, job.commit_id, job.lease_token),
            )
            return cur.rowcount == 1

        return await self._run(tx)

    async def release_job(self, job: ClaimedJob) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE phase2_jobs SET state = 'queued', attempts = MAX(attempts - 1, 0),"
                " lease_token = NULL, lease_expires = NULL, not_before = ?"
                " WHERE commit_id = ? AND lease_token = ? AND state = 'running'",
                (time.time(), job.commit_id, job.lease_token),
            )

        await self._run(tx)

    async def phase2_input(self, job: ClaimedJob) -> Phase2Input:
        def tx(conn: sqlite3.Connection) -> Phase2Input:
            sid = self._sid(conn, job.tenant, job.session_id)
            wm_version = conn.execute(
                "SELECT wm_version FROM sessions WHERE sid = ?", (sid,)
            ).fetchone()[0]
            previous = self._wm_row(conn, sid, job.tenant, job.session_id, wm_version)
            seqs = [
                s
                for (s,) in conn.execute(
                    "SELECT archive_seq FROM commits WHERE sid = ? AND state = 'failed'"
                    " AND covered_by_seq IS NULL AND archive_seq < ? ORDER BY archive_seq",
                    (sid, job.archive_seq),
                )
            ]
            seqs.append(job.archive_seq)
            messages: list[Message] = []
            for seq in seqs:
                messages.extend(self._archive_messages(conn, sid, seq))
            return Phase2Input(previous, tuple(messages), tuple(seqs))

        return await self._scan(tx)

    @staticmethod
    def _archive_messages(conn: sqlite3.Connection, sid: int, seq: int) -> list[Message]:
        first, last = conn.execute(
            "SELECT first_position, last_position FROM archives WHERE sid = ? AND seq = ?",
            (sid, seq),
        ).fetchone()
        return [m.message for m in SqliteStore._messages_from(conn, sid, first, last)]

    @staticmethod
    def _wm_row(
        conn: sqlite3.Connection, sid: int, tenant: str, session_id: str, version: int
    ) -> WorkingMemoryRecord | None:
        if version <= 0:
            return None
        row = conn.execute(
            "SELECT version, document, archive_seq, commit_id, estimated_tokens, create_time"
            " FROM working_memories WHERE sid = ? AND version = ?",
            (sid, version),
        ).fetchone()
        return wm_from_row(tenant, session_id, row) if row else None

    async def complete_phase2(
        self,
        job: ClaimedJob,
        expected_previous_version: int,
        completion: Phase2Completion,
        closing_events: ClosingEventsBuilder,
    ) -> tuple[CommitRecord, WorkingMemoryRecord] | None:
        def tx(conn: sqlite3.Connection) -> tuple[CommitRecord, WorkingMemoryRecord] | None:
            self._hold(conn, job)
            sid = self._sid(conn, job.tenant, job.session_id)
            current = conn.execute(
                "SELECT wm_version FROM sessions WHERE sid = ?", (sid,)
            ).fetchone()[0]
            if current != expected_previous_version:
                return None
            now = time.time()
            version = current + 1
            conn.execute(
                "INSERT INTO working_memories (sid, version, document, archive_seq, covered_seq,"
                " commit_id, estimated_tokens, create_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (sid, version, completion.document, job.archive_seq, job.archive_seq,
                 job.commit_id, completion.estimated_tokens, now),
            )  # fmt: skip
            conn.execute(
                "UPDATE sessions SET wm_version = ?, update_time = ? WHERE sid = ?",
                (version, now, sid),
            )
            conn.execute(
                "UPDATE archives SET abstract = ? WHERE sid = ? AND seq = ?",
                (completion.abstract, sid, job.archive_seq),
            )
            earlier = [s for s in completion.covered_seqs if s != job.archive_seq]
            if earlier:
                marks = ",".join("?" * len(earlier))
                conn.execute(
                    f"UPDATE commits SET covered_by_seq = ? WHERE sid = ? AND archive_seq IN ({marks})",
                    (job.archive_seq, sid, *earlier),
                )
            conn.execute(
                "UPDATE commits SET state = 'completed', wm_version = ?, usage_json = ?,"
                " decisions_json = ?, complete_time = ?, attempt_count = ?,"
                " error_reason = NULL, error_message = NULL WHERE commit_id = ?",
                (version, completion.usage_json, completion.decisions_json, now, job.attempts,
                 job.commit_id),
            )  # fmt: skip
            conn.execute(
                "UPDATE phase2_jobs SET state = 'done', lease_token = NULL WHERE commit_id = ?",
                (job.commit_id,),
            )
            record = self._commit_row(conn, job.commit_id)
            wm = self._wm_row(conn, sid, job.tenant, job.session_id, version)
            assert wm is not None
            events = list(completion.events) + list(closing_events(record, wm))
            self._insert_events(conn, job.commit_id, events)
            return self._commit_row(conn, job.commit_id), wm

        return await self._run(tx)

    async def schedule_retry(
        self, job: ClaimedJob, delay_seconds: float, events: Sequence[tuple[int, bytes, bool]]
    ) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            self._hold(conn, job)
            conn.execute(
                "UPDATE phase2_jobs SET state = 'queued', lease_token = NULL,"
                " lease_expires = NULL, not_before = ? WHERE commit_id = ?",
                (time.time() + delay_seconds, job.commit_id),
            )
            conn.execute(
                "UPDATE commits SET state = 'pending', attempt_count = ? WHERE commit_id = ?",
                (job.attempts, job.commit_id),
            )
            self._insert_events(conn, job.commit_id, events)

        await self._run(tx)

    async def fail_commit(
        self, job: ClaimedJob, reason: str, message: str, closing_events: ClosingEventsBuilder
    ) -> CommitRecord:
        def tx(conn: sqlite3.Connection) -> CommitRecord:
            self._hold(conn, job)
            now = time.time()
            conn.execute(
                "UPDATE commits SET state = 'failed', error_reason = ?, error_message = ?,"
                " complete_time = ?, attempt_count = ? WHERE commit_id = ?",
                (reason, message[:2000], now, job.attempts, job.commit_id),
            )
            conn.execute(
                "UPDATE phase2_jobs SET state = 'done', lease_token = NULL WHERE commit_id = ?",
                (job.commit_id,),
            )
            record = self._commit_row(conn, job.commit_id)
            self._insert_events(conn, job.commit_id, closing_events(record, None))
            return self._commit_row(conn, job.commit_id)

        return await self._run(tx)

    async def open_job_count(self) -> int:
        def tx(conn: sqlite3.Connection) -> int:
            return int(
                conn.execute("SELECT COUNT(*) FROM phase2_jobs WHERE state != 'done'").fetchone()[0]
            )

        return await self._peek(tx)

    # --- working memory --------------------------------------------------------------------
    async def get_working_memory(
        self, tenant: str, session_id: str, version: int
    ) -> WorkingMemoryRecord | None:
        def tx(conn: sqlite3.Connection) -> WorkingMemoryRecord | None:
            sid = self._sid(conn, tenant, session_id)
            wanted = version
            if wanted <= 0:
                wanted = conn.execute(
                    "SELECT wm_version FROM sessions WHERE sid = ?", (sid,)
                ).fetchone()[0]
            return self._wm_row(conn, sid, tenant, session_id, wanted)

        return await self._peek(tx)

    async def latest_coverage(
        self, tenant: str, session_id: str
    ) -> tuple[WorkingMemoryRecord | None, int]:

        def tx(conn: sqlite3.Connection) -> tuple[WorkingMemoryRecord | None, int]:
            sid = self._sid(conn, tenant, session_id)
            version = conn.execute(
                "SELECT wm_version FROM sessions WHERE sid = ?", (sid,)
            ).fetchone()[0]
            wm = self._wm_row(conn, sid, tenant, session_id, version)
            if wm is None:
                return None, 0
            covered = conn.execute(
                "SELECT covered_seq FROM working_memories WHERE sid = ? AND version = ?",
                (sid, version),
            ).fetchone()[0]
            return wm, int(covered)

        return await self._peek(tx)

    async def store_working_memory(
        self,
        tenant: str,
        session_id: str,
        expected_version: int,
        document: str,
        estimated_tokens: int,
    ) -> WorkingMemoryRecord | None:
        def tx(conn: sqlite3.Connection) -> WorkingMemoryRecord | None:
            sid = self._sid(conn, tenant, session_id)
            current = conn.execute(
                "SELECT wm_version FROM sessions WHERE sid = ?", (sid,)
            ).fetchone()[0]
            if current != expected_version:
                return None
            covered = 0
            if current:
                covered = conn.execute(
                    "SELECT covered_seq FROM working_memories WHERE sid = ? AND version = ?",
                    (sid, current),
                ).fetchone()[0]
            now = time.time()
            conn.execute(
                "INSERT INTO working_memories (sid, version, document, archive_seq, covered_seq,"
                " commit_id, estimated_tokens, create_time) VALUES (?, ?, ?, NULL, ?, NULL, ?, ?)",
                (sid, current + 1, document, covered, estimated_tokens, now),
            )
            conn.execute(
                "UPDATE sessions SET wm_version = ?, update_time = ? WHERE sid = ?",
                (current + 1, now, sid),
            )
            return self._wm_row(conn, sid, tenant, session_id, current + 1)

        return await self._run(tx)

    # --- archives --------------------------------------------------------------------------
    async def list_archives(
        self, tenant: str, session_id: str, limit: int, after_seq: int
    ) -> list[CommitRecord]:
        def tx(conn: sqlite3.Connection) -> list[CommitRecord]:
            sid = self._sid(conn, tenant, session_id)
            rows = conn.execute(
                f"SELECT {COMMIT_COLUMNS} FROM {COMMIT_FROM} WHERE c.sid = ?"
                " AND c.archive_seq > ? ORDER BY c.archive_seq LIMIT ?",
                (sid, after_seq, limit),
            ).fetchall()
            return [commit_from_row(r) for r in rows]

        return await self._peek(tx)

    async def archive_messages(self, tenant: str, session_id: str, seq: int) -> list[Message]:
        def tx(conn: sqlite3.Connection) -> list[Message]:
            sid = self._sid(conn, tenant, session_id)
            return self._archive_messages(conn, sid, seq)

        return await self._scan(tx)

    async def uncovered_messages(
        self, tenant: str, session_id: str, covered_seq: int
    ) -> tuple[list[StoredMessage], list[int]]:
        def tx(conn: sqlite3.Connection) -> tuple[list[StoredMessage], list[int]]:
            sid = self._sid(conn, tenant, session_id)
            start = 1
            if covered_seq > 0:
                start = conn.execute(
                    "SELECT last_position + 1 FROM archives WHERE sid = ? AND seq = ?",
                    (sid, covered_seq),
                ).fetchone()[0]
            seqs = [
                s
                for (s,) in conn.execute(
                    "SELECT seq FROM archives WHERE sid = ? AND seq > ? ORDER BY seq",
                    (sid, covered_seq),
                )
            ]
            return self._messages_from(conn, sid, start, None), seqs

        return await self._scan(tx)

    async def search_archives(
        self,
        tenant: str,
        session_id: str | None,
        archive_seq: int | None,
        matches: Callable[[Message], bool],
        prefilter: str | None,
        limit: int,
    ) -> tuple[list[SearchMatch], int]:
        def tx(conn: sqlite3.Connection) -> tuple[list[SearchMatch], int]:
            if session_id is not None:
                sessions = [(self._sid(conn, tenant, session_id), session_id)]
            else:
                sessions = conn.execute(
                    "SELECT sid, session_id FROM sessions WHERE tenant = ? ORDER BY sid DESC",
                    (tenant,),
                ).fetchall()
            found: list[SearchMatch] = []
            total = 0
            for sid, name in sessions:
                query = (
                    "SELECT seq, first_position, last_position FROM archives WHERE sid = ?"
                    + (" AND seq = ?" if archive_seq is not None else "")
                    + " ORDER BY seq DESC"
                )
                params: tuple[Any, ...] = (sid, archive_seq) if archive_seq is not None else (sid,)
                for seq, first, last in conn.execute(query, params).fetchall():
                    sql = (
                        "SELECT message_id, role, parts_json, tokens FROM messages WHERE sid = ?"
                        " AND position BETWEEN ? AND ?"
                    )
                    args: tuple[Any, ...] = (sid, first, last)
                    if prefilter:
                        sql += " AND instr(lower(parts_json), ?) > 0"
                        args = (*args, prefilter)
                    for mid, role, parts, tokens in conn.execute(sql + " ORDER BY position", args):
                        message = message_from_row(mid, role, parts, tokens)
                        if matches(message):
                            total += 1
                            if len(found) < limit:
                                found.append(SearchMatch(name, seq, message))
            return found, total

        return await self._scan(tx)

    # --- idempotency -----------------------------------------------------------------------
    async def remembered(self, tenant: str, method: str, request_id: str) -> str | None:
        def tx(conn: sqlite3.Connection) -> str | None:
            row = conn.execute(
                "SELECT result_json FROM idempotency WHERE tenant = ? AND method = ?"
                " AND request_id = ?",
                (tenant, method, request_id),
            ).fetchone()
            return str(row[0]) if row else None

        return await self._peek(tx)

    async def remember(self, tenant: str, method: str, request_id: str, result: str) -> None:
        def tx(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR IGNORE INTO idempotency VALUES (?, ?, ?, ?, ?)",
                (tenant, method, request_id, result, time.time()),
            )

        await self._run(tx)
