"""Sessions, the window counters on their rows, and the purge of a deleted session (the
order in which its rows of every table go)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wm_core import (
    SessionSettings,
)
from wm_server.storage.records import (
    SessionRecord,
)
from wm_server.storage.repository import LAST, Repository
from wm_server.storage.statements import Read, Row, Write

if TYPE_CHECKING:
    pass


# A deleted session keeps its rows until the background purge removes them; it is moved
# out of every tenant at once, so its id is free and every lookup misses it.
DELETED_TENANT = ""

# The tokens of a session's stored messages at positions first..last.
_CROSSED = (
    "(SELECT COALESCE(SUM(tokens), 0) FROM messages WHERE sid = :sid"
    " AND position BETWEEN :first AND :last)"
)


SESSION_COLUMNS = (
    "sid, first_live_position, next_position, last_add_time, last_commit_time, tenant,"
    " session_id, create_time, update_time, message_count, total_message_count,"
    " pending_tokens, live_tokens, keep_recent_count, archive_count, wm_version, config_json,"
    " user_id, agent_id"
)


@dataclass(frozen=True, slots=True)
class SessionRow:
    """A session with the internal keys the services need (its public record inside)."""

    sid: int
    first_live: int
    next_position: int
    last_add_time: float | None
    last_commit_time: float | None
    record: SessionRecord


def _first_session(rows: list[Row]) -> SessionRow | None:
    return _session(rows[0]) if rows else None


def _session(row: Row) -> SessionRow:
    tenant, name, created, updated, count, total, pending, live, keep, archives, wm = row[5:16]
    record = SessionRecord(
        tenant,
        name,
        created,
        updated,
        count,
        total,
        pending,
        live,
        keep,
        archives,
        wm,
        SessionSettings.from_json(row[16]),
        row[17],
        row[18],
    )
    return SessionRow(int(row[0]), int(row[1]), int(row[2]), row[3], row[4], record)


class SessionRepository(Repository):
    async def create(
        self,
        tenant: str,
        session_id: str,
        now: float,
        config: SessionSettings,
        user_id: str = "",
        agent_id: str = "",
    ) -> SessionRow | None:
        """None when the id is taken (also by a concurrent creator)."""
        row = await self._conn.one(
            "INSERT INTO sessions (tenant, session_id, create_time, update_time, config_json,"
            " auto_idle_seconds, keep_recent_count, user_id, agent_id) VALUES (:tenant,"
            " :session_id, :now, :now, :config, :idle, :keep, :user_id, :agent_id)"
            f" ON CONFLICT (tenant, session_id) DO NOTHING RETURNING {SESSION_COLUMNS}",
            {
                "tenant": tenant,
                "session_id": session_id,
                "now": now,
                "config": config.to_json(),
                "idle": config.auto_commit.idle_timeout_seconds,
                "keep": config.initial_keep,
                "user_id": user_id,
                "agent_id": agent_id,
            },
        )
        return _session(row) if row else None

    async def set_config(self, sid: int, config: SessionSettings, now: float) -> None:
        await self._conn.run(
            # Without an idle timeout last_add_time is not kept up (add_messages): one that
            # is turned on counts from the session's last change (never earlier than its
            # last message).
            "UPDATE sessions SET config_json = :config, auto_idle_seconds = :idle,"
            " last_add_time = CASE WHEN auto_idle_seconds IS NULL THEN update_time"
            " ELSE last_add_time END, update_time = :now WHERE sid = :sid",
            {
                "config": config.to_json(),
                "idle": config.auto_commit.idle_timeout_seconds,
                "now": now,
                "sid": sid,
            },
        )

    async def idle(self, now: float, limit: int) -> list[tuple[str, str]]:
        """(tenant, session id) of sessions with live messages and an idle timeout that
        received nothing for that long, the longest idle first."""
        rows = await self._conn.all(
            "SELECT tenant, session_id FROM sessions WHERE auto_idle_seconds IS NOT NULL"
            " AND message_count > 0 AND last_add_time + auto_idle_seconds <= :now"
            " ORDER BY last_add_time LIMIT :limit",
            {"now": now, "limit": limit},
        )
        return [(str(t), str(n)) for t, n in rows]

    async def find(self, tenant: str, session_id: str) -> SessionRow | None:
        return await self._read(self.finding(tenant, session_id))

    def finding(
        self, tenant: str, session_id: str, *, lock: bool = False
    ) -> Read[SessionRow | None]:
        """``find`` as a read; ``lock``: ``lock``'s."""
        return Read(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE tenant = :tenant AND session_id = :session_id"
            + (self._dialect.lock_row if lock else ""),
            {"tenant": tenant, "session_id": session_id},
            _first_session,
        )

    async def lock(self, tenant: str, session_id: str) -> SessionRow | None:
        """Find and serialize against every other writer of the session until commit."""
        return await self._read(self.finding(tenant, session_id, lock=True))

    async def by_sid(self, sid: int) -> SessionRow | None:
        return await self._read(self.by_sid_reading(sid))

    def by_sid_reading(self, sid: int) -> Read[SessionRow | None]:
        """``by_sid`` as a read."""
        return Read(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE sid = :sid", {"sid": sid}, _first_session
        )

    async def page(self, tenant: str, before_sid: int | None, limit: int) -> list[SessionRow]:
        rows = await self._conn.all(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE tenant = :tenant AND sid < :before"
            " ORDER BY sid DESC LIMIT :limit",
            {
                "tenant": tenant,
                "before": LAST if before_sid is None else before_sid,
                "limit": limit,
            },
        )
        return [_session(r) for r in rows]

    async def keys(
        self, tenant: str, user_id: str | None = None, agent_id: str | None = None
    ) -> list[tuple[int, str]]:
        """(sid, session_id) of every session of the tenant (only of that user or agent, if
        given), newest first."""
        rows = await self._conn.all(
            "SELECT sid, session_id FROM sessions WHERE tenant = :tenant"
            " AND (CAST(:user_id AS TEXT) IS NULL OR user_id = :user_id)"
            " AND (CAST(:agent_id AS TEXT) IS NULL OR agent_id = :agent_id) ORDER BY sid DESC",
            {"tenant": tenant, "user_id": user_id, "agent_id": agent_id},
        )
        return [(int(sid), str(name)) for sid, name in rows]

    async def grow(
        self,
        session: SessionRow,
        *,
        next_position: int,
        added: int,
        tokens: int,
        pending: int,
        stored: tuple[int, int] | None,
        now: float,
        storing: Sequence[Write],
    ) -> int:
        """Account for ``added`` new messages; return the session's pending tokens now.

        ``pending`` tokens of the batch crossed out of the window, and so did the stored
        messages at positions ``stored`` (inclusive). ``storing`` are the writes that store
        the batch: the engine may send them together with this update, so none of them
        reads another's rows. Where a statement costs a round trip the crossed tokens are
        summed inside the update, which returns the total; elsewhere a plain read is
        cheaper than ``RETURNING``.
        """
        first, last = stored if stored is not None else (1, 0)
        params = {
            "next": next_position,
            "added": added,
            "tokens": tokens,
            "pending": pending,
            "first": first,
            "last": last,
            "now": now,
            "sid": session.sid,
        }
        if self._dialect.round_trips:
            crossed, returning = _CROSSED, " RETURNING pending_tokens"
        else:
            # nothing stored crossed out (the usual batch): no range to sum
            summed = await self._conn.one(f"SELECT {_CROSSED}", params) if stored else None
            crossed, returning = ":crossed", ""
            params["crossed"] = int(summed[0]) if summed else 0
        row = await self._conn.chain(
            storing,
            Write(
                "UPDATE sessions SET next_position = :next,"
                " message_count = message_count + :added,"
                " total_message_count = total_message_count + :added,"
                " live_tokens = live_tokens + :tokens,"
                f" pending_tokens = pending_tokens + :pending + {crossed},"
                # last_add_time moves only for a session with an idle timeout: it is the
                # key of the sessions_idle index, and an update that changes an indexed
                # column cannot be a HOT update on PostgreSQL (a new entry in every index
                # of sessions, a third more WAL per AddMessages)
                " update_time = :now, last_add_time = CASE WHEN auto_idle_seconds IS NULL"
                f" THEN last_add_time ELSE :now END WHERE sid = :sid{returning}",
                params,
            ),
        )
        if returning:
            assert row is not None  # the caller holds the session's lock
            return int(row[0])
        return session.record.pending_tokens + pending + int(params["crossed"])

    async def set_window(
        self,
        sid: int,
        *,
        first_live: int,
        message_count: int,
        archive_count: int,
        keep: int,
        pending: int,
        live: int,
        now: float,
    ) -> None:
        await self._conn.run(
            "UPDATE sessions SET first_live_position = :first, message_count = :count,"
            " archive_count = :archives, keep_recent_count = :keep, pending_tokens = :pending,"
            " live_tokens = :live, update_time = :now, last_commit_time = :now WHERE sid = :sid",
            {
                "first": first_live,
                "count": message_count,
                "archives": archive_count,
                "keep": keep,
                "pending": pending,
                "live": live,
                "now": now,
                "sid": sid,
            },
        )

    async def set_tokens(self, sid: int, pending: int, live: int, keep: int | None = None) -> None:
        """The window's token counters (and, given ``keep``, the window they count with)."""
        await self._conn.run(
            "UPDATE sessions SET pending_tokens = :pending, live_tokens = :live,"
            " keep_recent_count = COALESCE(:keep, keep_recent_count) WHERE sid = :sid",
            {"pending": pending, "live": live, "keep": keep, "sid": sid},
        )

    async def shrink(
        self, sid: int, *, next_position: int, removed: int, pending: int, live: int, now: float
    ) -> None:
        """Account for the ``removed`` newest live messages taken back: the next message
        takes ``next_position`` again, and the token counters are the re-derived ones."""
        await self._conn.run(
            "UPDATE sessions SET next_position = :next, message_count = message_count - :removed,"
            " total_message_count = total_message_count - :removed, pending_tokens = :pending,"
            " live_tokens = :live, update_time = :now WHERE sid = :sid",
            {
                "next": next_position,
                "removed": removed,
                "pending": pending,
                "live": live,
                "now": now,
                "sid": sid,
            },
        )

    def setting_wm_version(self, sid: int, version: int, now: float) -> Write:
        return Write(
            "UPDATE sessions SET wm_version = :version, update_time = :now WHERE sid = :sid",
            {"version": version, "now": now, "sid": sid},
        )

    async def unlink(self, sid: int) -> None:
        """Move the session out of its tenant: NOT_FOUND from now on, its id free again."""
        await self._conn.run(
            "UPDATE sessions SET tenant = :gone, session_id = :name WHERE sid = :sid",
            {"gone": DELETED_TENANT, "name": f"deleted-{sid}", "sid": sid},
        )

    async def unlinked(self) -> list[int]:
        rows = await self._conn.all(
            "SELECT sid FROM sessions WHERE tenant = :gone", {"gone": DELETED_TENANT}
        )
        return [int(sid) for (sid,) in rows]

    async def purge(self, table: str, key: str, sid: int, limit: int) -> int:
        """Delete up to ``limit`` rows of an unlinked session from one table (or, for
        ``sessions``, the row itself): bounded work per transaction."""
        if (table, key) not in _PURGED:
            raise ValueError(f"not a purged table: {table}")
        return await self._conn.run(
            f"DELETE FROM {table} WHERE sid = :sid AND {key} IN"
            f" (SELECT {key} FROM {table} WHERE sid = :sid LIMIT :limit)",
            {"sid": sid, "limit": limit},
        )


# What a purge removes, children first; deleting a commit cascades to its events and job.
PURGE_ORDER: tuple[tuple[str, str], ...] = (
    ("archived_texts", "id"),
    ("message_vectors", "position"),
    ("memories", "mid"),  # those the session owns (its sid); versions and sources cascade
    ("messages", "position"),
    ("tool_calls", "tool_use_id"),
    ("tool_outputs", "output_id"),
    ("commits", "commit_id"),
    ("archives", "seq"),
    ("working_memories", "version"),
    ("pending_items", "position"),
    ("requests", "request_key"),
    ("sessions", "sid"),
)


_PURGED = frozenset(PURGE_ORDER)
