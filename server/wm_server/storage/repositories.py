"""Row access for both engines: every statement written once, with ``:name`` parameters.

Each method is one query (or one chunk of one) and holds no product rule: what a commit
means, when a session may be written, how sequences and windows move is decided in the
services. The engine-specific fragments come from the ``Dialect``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wm_core import ExternalOutput, Message, PendingItem, SessionSettings, Trigger
from wm_server.search.bm25 import BM25_B, BM25_K1
from wm_server.storage.codec import message_body, message_from_row, parts_to_json
from wm_server.storage.memory_expiry import Retention, alive
from wm_server.storage.records import (
    CommitRecord,
    CommitState,
    MemoryRow,
    MemorySourceRow,
    MemoryVersionRow,
    SessionRecord,
    SkipReason,
    StoredEvent,
    StoredMessage,
    ToolOutputRecord,
    WorkingMemoryRecord,
)
from wm_server.storage.statements import Row, Write
from wm_server.storage.text_index import (
    CANDIDATES,
    ENOUGH,
    term_count,
)

if TYPE_CHECKING:
    from wm_server.storage.database import Connection, Dialect

# A deleted session keeps its rows until the background purge removes them; it is moved
# out of every tenant at once, so its id is free and every lookup misses it.
DELETED_TENANT = ""
_LAST = 2**62  # "no upper bound" for positions and keys

_SESSION = (
    "sid, first_live_position, next_position, last_add_time, last_commit_time, tenant,"
    " session_id, create_time, update_time, message_count, total_message_count,"
    " pending_tokens, live_tokens, keep_recent_count, archive_count, wm_version, config_json,"
    " user_id, agent_id"
)
_COMMIT = (
    "c.commit_id, s.tenant, s.session_id, c.state, c.keep_recent_count, c.archive_seq,"
    " c.archived_message_count, c.kept_message_count, c.archived_tokens, c.skip_reason,"
    " c.request_id, c.attempt_count, c.error_reason, c.error_message, c.covered_by_seq,"
    " (SELECT x.commit_id FROM commits x WHERE x.sid = c.sid AND x.archive_seq = c.covered_by_seq),"
    " COALESCE(a.abstract, ''), c.wm_version, c.usage_json, c.decisions_json, c.last_sequence,"
    " c.create_time, c.complete_time, c.commit_trigger, c.memory_diff_json, c.memory_state"
    " FROM commits c JOIN sessions s ON s.sid = c.sid"
    " LEFT JOIN archives a ON a.sid = c.sid AND a.seq = c.archive_seq"
)
_WM = "version, document, archive_seq, commit_id, estimated_tokens, create_time, decisions_json"
_MESSAGE = "position, message_id, role, parts_json, tokens, create_time"
# The tokens of a session's stored messages at positions first..last.
_CROSSED = (
    "(SELECT COALESCE(SUM(tokens), 0) FROM messages WHERE sid = :sid"
    " AND position BETWEEN :first AND :last)"
)
_OUTPUT = (
    "output_id, message_id, position, part_index, tool_use_id, kind, format, size_bytes,"
    " line_count, synopsis, create_time"
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


@dataclass(frozen=True, slots=True)
class ClaimableJob:
    commit_id: str
    sid: int
    seq: int
    attempts: int
    create_time: float = 0.0  # when the job was queued (or requeued by RetryCommit)


@dataclass(frozen=True, slots=True)
class RequestRow:
    """A remembered request: ``live`` is False once the session it belongs to is deleted."""

    fingerprint: str
    outcome: str
    live: bool


def remembered_keep(config: SessionSettings) -> int:
    """The keep window a session counts pending tokens with before its first commit: the one
    its auto-commit policy will use, so that the threshold means what that commit archives."""
    return config.auto_commit.keep if config.auto_commit.active else 0


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


def _commit(row: Row) -> CommitRecord:
    values = list(row)
    values[3] = CommitState(values[3])
    values[9] = SkipReason(values[9]) if values[9] else None
    values[23] = Trigger(values[23]) if values[23] else None
    return CommitRecord(*values)


def _stored_message(row: Row) -> StoredMessage:
    pos, mid, role, parts, tokens, created = row
    return StoredMessage(int(pos), message_from_row(mid, role, parts, int(tokens)), created)


def may_contain(dialect: Dialect, column: str, param: str) -> str:
    """The row may hold the folded ASCII literal ``param``: its ASCII lower case has it, or it
    has a character beyond ASCII, which Unicode folding could turn into it ("ﬁ", "ß", "Ｆ");
    those rows are decided by the caller, on folded text."""
    contains = dialect.contains.format(column=column, param=param)
    return f"({contains} OR {dialect.non_ascii.format(column=column)})"


class _Repository:
    def __init__(self, conn: Connection, dialect: Dialect) -> None:
        self._conn = conn
        self._dialect = dialect

    def terms(self, query: str) -> list[str]:
        """The analyzed terms a ranked query of this database searches for."""
        return self._dialect.text_index.terms(query)

    async def _match_queries(self, index: str, words: list[str]) -> list[str]:
        """The match parameters of a ranked query, cheapest first: where the engine counts
        rows per word, the rarest words that select at most CANDIDATES rows (the common rest
        only scoring), then all words; else all words. A caller tries the next one when the
        cheaper one found fewer rows than it wants."""
        text = self._dialect.text_index
        whole = text.query(words)
        counting = text.frequencies(index)
        if counting is None or len(words) < 2:
            return [whole]
        members, values = self._dialect.in_list("words", words)
        counts = dict.fromkeys(words, 0)
        counts.update({str(w): int(n) for w, n in await self._conn.all(
            counting.format(members=members), values)})  # fmt: skip
        ordered = sorted(words, key=lambda w: counts[w])
        chosen: list[str] = []
        rows = 0
        for word in ordered:
            if chosen and rows >= ENOUGH and rows + counts[word] > CANDIDATES:
                break
            chosen.append(word)
            rows += counts[word]
        rest = [w for w in words if w not in chosen]
        return [text.query(chosen, rest), whole] if rest else [whole]


class SessionRepository(_Repository):
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
            f" ON CONFLICT (tenant, session_id) DO NOTHING RETURNING {_SESSION}",
            {"tenant": tenant, "session_id": session_id, "now": now,
             "config": config.to_json(), "idle": config.auto_commit.idle_timeout_seconds,
             "keep": remembered_keep(config), "user_id": user_id, "agent_id": agent_id},
        )  # fmt: skip
        return _session(row) if row else None

    async def set_config(self, sid: int, config: SessionSettings, now: float) -> None:
        await self._conn.run(
            # Without an idle timeout last_add_time is not kept up (add_messages): one that
            # is turned on counts from the session's last change (never earlier than its
            # last message).
            "UPDATE sessions SET config_json = :config, auto_idle_seconds = :idle,"
            " last_add_time = CASE WHEN auto_idle_seconds IS NULL THEN update_time"
            " ELSE last_add_time END, update_time = :now WHERE sid = :sid",
            {"config": config.to_json(), "idle": config.auto_commit.idle_timeout_seconds,
             "now": now, "sid": sid},
        )  # fmt: skip

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
        row = await self._conn.one(
            f"SELECT {_SESSION} FROM sessions WHERE tenant = :tenant AND session_id = :session_id",
            {"tenant": tenant, "session_id": session_id},
        )
        return _session(row) if row else None

    async def lock(self, tenant: str, session_id: str) -> SessionRow | None:
        """Find and serialize against every other writer of the session until commit."""
        row = await self._conn.one(
            f"SELECT {_SESSION} FROM sessions WHERE tenant = :tenant AND session_id = :session_id"
            + self._dialect.lock_row,
            {"tenant": tenant, "session_id": session_id},
        )
        return _session(row) if row else None

    async def by_sid(self, sid: int) -> SessionRow | None:
        row = await self._conn.one(
            f"SELECT {_SESSION} FROM sessions WHERE sid = :sid", {"sid": sid}
        )
        return _session(row) if row else None

    async def page(self, tenant: str, before_sid: int | None, limit: int) -> list[SessionRow]:
        rows = await self._conn.all(
            f"SELECT {_SESSION} FROM sessions WHERE tenant = :tenant AND sid < :before"
            " ORDER BY sid DESC LIMIT :limit",
            {
                "tenant": tenant,
                "before": _LAST if before_sid is None else before_sid,
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
        params = {"next": next_position, "added": added, "tokens": tokens, "pending": pending,
                  "first": first, "last": last, "now": now, "sid": session.sid}  # fmt: skip
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
            {"first": first_live, "count": message_count, "archives": archive_count,
             "keep": keep, "pending": pending, "live": live, "now": now, "sid": sid},
        )  # fmt: skip

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
            {"next": next_position, "removed": removed, "pending": pending, "live": live,
             "now": now, "sid": sid},
        )  # fmt: skip

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


class MessageRepository(_Repository):
    async def existing_ids(self, sid: int, ids: Sequence[str]) -> set[str]:
        members, values = self._dialect.in_list("ids", ids)
        rows = await self._conn.all(
            f"SELECT message_id FROM messages WHERE sid = :sid AND message_id {members}",
            {"sid": sid, **values},
        )
        return {str(r[0]) for r in rows}

    def inserting(self, sid: int, fresh: Sequence[tuple[int, Message]], now: float) -> Write:
        """The write that stores a batch (for ``SessionRepository.grow``)."""
        return Write(
            "INSERT INTO messages (sid, position, message_id, role, parts_json, tokens,"
            " create_time, result_ids) VALUES (:sid, :position, :id, :role, :parts, :tokens,"
            " :now, :results)",
            rows=[
                (sid, pos, m.id, m.role.value, parts_to_json(m.parts), m.estimated_tokens, now,
                 " ".join(m.tool_result_ids()))
                for pos, m in fresh
            ],
        )  # fmt: skip

    async def remove_from(self, sid: int, first: int) -> int:
        """Delete the session's messages at positions ``first`` and after; how many went."""
        return await self._conn.run(
            "DELETE FROM messages WHERE sid = :sid AND position >= :first",
            {"sid": sid, "first": first},
        )

    async def tokens_from(self, sid: int, first: int) -> list[int]:
        rows = await self._conn.all(
            "SELECT tokens FROM messages WHERE sid = :sid AND position >= :first ORDER BY position",
            {"sid": sid, "first": first},
        )
        return [int(t) for (t,) in rows]

    async def between(
        self, sid: int, first: int, last: int | None, limit: int | None = None
    ) -> list[StoredMessage]:
        """Messages at positions first..last (None: to the end), the first ``limit`` if given."""
        rows = await self._conn.all(
            f"SELECT {_MESSAGE} FROM messages WHERE sid = :sid"
            " AND position BETWEEN :first AND :last ORDER BY position LIMIT :limit",
            {"sid": sid, "first": first, "last": _LAST if last is None else last,
             "limit": _LAST if limit is None else limit},
        )  # fmt: skip
        return [_stored_message(r) for r in rows]

    async def at(self, keys: Sequence[tuple[int, int]]) -> dict[tuple[int, int], StoredMessage]:
        """The messages at these (sid, position) keys, in one statement (a search's hits)."""
        if not keys:
            return {}
        params: dict[str, Any] = {}
        terms = []
        for i, (sid, position) in enumerate(keys):
            terms.append(f"(sid = :s{i} AND position = :p{i})")
            params.update({f"s{i}": sid, f"p{i}": position})
        rows = await self._conn.all(
            f"SELECT sid, {_MESSAGE} FROM messages WHERE {' OR '.join(terms)}", params
        )
        return {(int(r[0]), int(r[1])): _stored_message(r[1:]) for r in rows}

    async def user_texts_before(
        self, sid: int, first: int, before: int, limit: int
    ) -> list[StoredMessage]:
        """Up to ``limit`` user messages with a text part at positions [first, before),
        newest first: the candidates for the requests that start turns."""
        text = self._dialect.contains.format(column="parts_json", param="text")
        rows = await self._conn.all(
            f"SELECT {_MESSAGE} FROM messages WHERE sid = :sid AND position >= :first"
            f" AND position < :before AND role = :user AND {text}"
            " ORDER BY position DESC LIMIT :limit",
            {"sid": sid, "first": first, "before": before, "user": "user", "text": '{"t":',
             "limit": limit},
        )  # fmt: skip
        return [_stored_message(r) for r in rows]

    async def results_between(
        self, sid: int, first: int, stop: int
    ) -> list[tuple[int, tuple[str, ...]]]:
        """(position, answered tool_use ids) of the tool results at positions [first, stop)."""
        rows = await self._conn.all(
            "SELECT position, result_ids FROM messages WHERE sid = :sid AND position >= :first"
            " AND position < :stop AND result_ids <> ''",
            {"sid": sid, "first": first, "stop": stop},
        )
        return [(int(pos), tuple(str(ids).split(" "))) for pos, ids in rows]

    async def containing(
        self, sid: int, first: int, last: int, needle: str | None
    ) -> list[Message]:
        """Messages in [first, last]; with ``needle`` only rows that may contain it (see
        ``may_contain``)."""
        where = ""
        if needle:
            where = " AND " + may_contain(self._dialect, "parts_json", "needle")
        rows = await self._conn.all(
            f"SELECT {_MESSAGE} FROM messages WHERE sid = :sid"
            f" AND position BETWEEN :first AND :last{where} ORDER BY position",
            {"sid": sid, "first": first, "last": last, "needle": needle},
        )
        return [_stored_message(r).message for r in rows]


class ToolCallRepository(_Repository):
    def upserting(self, sid: int, calls: dict[str, int]) -> Write:
        """The write that records a batch's tool calls: the latest call with an id wins."""
        return Write(
            "INSERT INTO tool_calls (sid, tool_use_id, position) VALUES (:sid, :id, :position)"
            " ON CONFLICT (sid, tool_use_id) DO UPDATE SET position = excluded.position",
            rows=[(sid, tid, pos) for tid, pos in calls.items()],
        )

    async def remove_from(self, sid: int, first: int) -> int:
        """Forget the calls made by the messages at positions ``first`` and after."""
        return await self._conn.run(
            "DELETE FROM tool_calls WHERE sid = :sid AND position >= :first",
            {"sid": sid, "first": first},
        )

    async def positions(self, sid: int, ids: Sequence[str]) -> dict[str, int]:
        """The position of the latest call of each id (ids never called are absent)."""
        members, values = self._dialect.in_list("ids", ids)
        rows = await self._conn.all(
            f"SELECT tool_use_id, position FROM tool_calls WHERE sid = :sid AND tool_use_id {members}",
            {"sid": sid, **values},
        )
        return {str(tid): int(pos) for tid, pos in rows}


def _tool_output(row: Row) -> ToolOutputRecord:
    oid, mid, pos, part, tool, kind, fmt, size, lines, synopsis, created, *content = row
    return ToolOutputRecord(
        str(oid), str(mid), int(pos), int(part), str(tool), str(kind), str(fmt), int(size),
        int(lines), str(synopsis), float(created), str(content[0]) if content else "",
    )  # fmt: skip


class ToolOutputRepository(_Repository):
    def inserting(
        self, sid: int, outputs: Sequence[tuple[int, str, ExternalOutput]], now: float
    ) -> Write:
        """The write that stores (position, message id, output) triples whole (for
        ``SessionRepository.grow``)."""
        return Write(
            "INSERT INTO tool_outputs (sid, output_id, position, part_index, message_id,"
            " tool_use_id, kind, format, content, size_bytes, line_count, synopsis, create_time)"
            " VALUES (:sid, :id, :position, :part, :message, :tool, :kind, :format, :content,"
            " :size, :lines, :synopsis, :now)",
            rows=[
                (sid, o.output_id, pos, o.part_index, mid, o.tool_use_id, o.kind.value,
                 o.format.value, o.content, len(o.content.encode()), o.line_count, o.synopsis,
                 now)
                for pos, mid, o in outputs
            ],
        )  # fmt: skip

    async def remove_from(self, sid: int, first: int) -> int:
        """Delete the outputs taken out of the messages at positions ``first`` and after."""
        return await self._conn.run(
            "DELETE FROM tool_outputs WHERE sid = :sid AND position >= :first",
            {"sid": sid, "first": first},
        )

    async def get(self, sid: int, output_id: str) -> ToolOutputRecord | None:
        """The output with its content."""
        row = await self._conn.one(
            f"SELECT {_OUTPUT}, content FROM tool_outputs WHERE sid = :sid AND output_id = :id",
            {"sid": sid, "id": output_id},
        )
        return _tool_output(row) if row else None

    async def matching(
        self,
        sid: int,
        needle: str | None,
        only: str | None,
        after: tuple[int, int],
        limit: int,
    ) -> list[ToolOutputRecord]:
        """Up to ``limit`` outputs with their content after (position, part) ``after``, in
        order; only those that may contain ``needle`` if given (``may_contain``), only the
        output ``only`` if given."""
        where = ""
        if needle:
            where = " AND " + may_contain(self._dialect, "content", "needle")
        rows = await self._conn.all(
            f"SELECT {_OUTPUT}, content FROM tool_outputs WHERE sid = :sid"
            " AND (position > :pos OR (position = :pos AND part_index > :part))"
            f" AND (CAST(:only AS TEXT) IS NULL OR output_id = :only){where}"
            " ORDER BY position, part_index LIMIT :limit",
            {"sid": sid, "pos": after[0], "part": after[1], "only": only, "needle": needle,
             "limit": limit},
        )  # fmt: skip
        return [_tool_output(r) for r in rows]


class CommitRepository(_Repository):
    async def insert(
        self,
        commit_id: str,
        sid: int,
        *,
        state: CommitState,
        keep: int,
        archive_seq: int | None,
        archived: int,
        kept: int,
        archived_tokens: int,
        skip_reason: SkipReason | None,
        request_id: str | None,
        trigger: Trigger,
        now: float,
    ) -> None:
        await self._conn.run(
            "INSERT INTO commits (commit_id, sid, state, keep_recent_count, archive_seq,"
            " archived_message_count, kept_message_count, archived_tokens, skip_reason,"
            " request_id, commit_trigger, create_time, complete_time) VALUES (:id, :sid,"
            " :state, :keep, :seq, :archived, :kept, :tokens, :skip, :request_id, :trigger,"
            " :now, :done)",
            {"id": commit_id, "sid": sid, "state": state.value, "keep": keep, "seq": archive_seq,
             "archived": archived, "kept": kept, "tokens": archived_tokens,
             "skip": skip_reason.value if skip_reason else None, "request_id": request_id,
             "trigger": trigger.value, "now": now, "done": now if state.terminal else None},
        )  # fmt: skip

    async def get(self, commit_id: str, sid: int | None = None) -> CommitRecord | None:
        """The commit; with ``sid``, only when it belongs to that session."""
        row = await self._conn.one(
            f"SELECT {_COMMIT} WHERE c.commit_id = :id AND (CAST(:sid AS BIGINT) IS NULL OR c.sid = :sid)",
            {"id": commit_id, "sid": sid},
        )
        return _commit(row) if row else None

    async def page(self, sid: int, limit: int, offset: int) -> list[CommitRecord]:
        rows = await self._conn.all(
            f"SELECT {_COMMIT} WHERE c.sid = :sid"
            f" ORDER BY c.create_time DESC, {self._dialect.commit_order} DESC"
            " LIMIT :limit OFFSET :offset",
            {"sid": sid, "limit": limit, "offset": offset},
        )
        return [_commit(r) for r in rows]

    async def archived_after(self, sid: int, after_seq: int, limit: int) -> list[CommitRecord]:
        rows = await self._conn.all(
            f"SELECT {_COMMIT} WHERE c.sid = :sid AND c.archive_seq > :after"
            " ORDER BY c.archive_seq LIMIT :limit",
            {"sid": sid, "after": after_seq, "limit": limit},
        )
        return [_commit(r) for r in rows]

    async def failed_uncovered_before(self, sid: int, seq: int) -> list[int]:
        rows = await self._conn.all(
            "SELECT archive_seq FROM commits WHERE sid = :sid AND state = :failed"
            " AND covered_by_seq IS NULL AND archive_seq < :seq ORDER BY archive_seq",
            {"sid": sid, "failed": CommitState.FAILED.value, "seq": seq},
        )
        return [int(s) for (s,) in rows]

    async def set_state(
        self,
        commit_id: str,
        state: CommitState,
        attempts: int,
        *,
        error: tuple[str, str] | None = None,
        now: float | None = None,
    ) -> None:
        """Move to ``state``; ``error`` (reason, message) is kept, else cleared; ``now`` is
        the completion time of a terminal state."""
        await self._conn.run(
            "UPDATE commits SET state = :state, attempt_count = :attempts, error_reason = :reason,"
            " error_message = :message, complete_time = :now WHERE commit_id = :id",
            {"state": state.value, "attempts": attempts, "reason": error[0] if error else None,
             "message": error[1][:2000] if error else None, "now": now, "id": commit_id},
        )  # fmt: skip

    def completing(
        self,
        commit_id: str,
        attempts: int,
        *,
        version: int,
        usage_json: str,
        decisions_json: str,
        now: float,
        memory_diff_json: str = "",
        memory_state: str = "",
    ) -> Write:
        """COMPLETED with what Phase 2 produced (the error of an earlier attempt cleared),
        and what its memory extraction did (``memory_state`` "failed" offers the archive to
        the next commit's extraction, see ``memory_failed_before``)."""
        return Write(
            "UPDATE commits SET state = :state, attempt_count = :attempts, error_reason = NULL,"
            " error_message = NULL, complete_time = :now, wm_version = :version,"
            " usage_json = :usage, decisions_json = :decisions, memory_diff_json = :diff,"
            " memory_state = :memory WHERE commit_id = :id",
            {"state": CommitState.COMPLETED.value, "attempts": attempts, "now": now,
             "version": version, "usage": usage_json, "decisions": decisions_json,
             "diff": memory_diff_json, "memory": memory_state, "id": commit_id},
        )  # fmt: skip

    async def memory_failed_before(self, sid: int, seq: int, limit: int) -> list[int]:
        """The newest ``limit`` archives before ``seq`` whose memory extraction failed and
        that no later extraction has covered, oldest first."""
        rows = await self._conn.all(
            "SELECT archive_seq FROM commits WHERE sid = :sid AND memory_state = 'failed'"
            " AND archive_seq < :seq ORDER BY archive_seq DESC LIMIT :limit",
            {"sid": sid, "seq": seq, "limit": limit},
        )
        return sorted(int(s) for (s,) in rows)

    def memory_recovering(self, sid: int, seqs: Sequence[int]) -> Write:
        """The archives ``seqs`` had their memories extracted by a later commit (whose diff
        names them); their own diff keeps why their extraction failed."""
        members, values = self._dialect.in_list("seqs", seqs)
        return Write(
            "UPDATE commits SET memory_state = 'recovered' WHERE sid = :sid"
            f" AND memory_state = 'failed' AND archive_seq {members}",
            {"sid": sid, **values},
        )

    def covering(self, sid: int, seqs: Sequence[int], by_seq: int) -> Write:
        members, values = self._dialect.in_list("seqs", seqs)
        return Write(
            f"UPDATE commits SET covered_by_seq = :by WHERE sid = :sid AND archive_seq {members}",
            {"by": by_seq, "sid": sid, **values},
        )

    async def extend_events(
        self, commit_id: str, after: int, last: int, *, storing: Sequence[Write]
    ) -> bool:
        """Move the commit's last event number from ``after`` to ``last`` with ``storing``,
        the writes that store those events; False (and nothing to commit) when it was not
        ``after`` any more."""
        row = await self._conn.chain(
            storing,
            Write(
                "UPDATE commits SET last_sequence = :last WHERE commit_id = :id"
                " AND last_sequence = :after RETURNING last_sequence",
                {"last": last, "id": commit_id, "after": after},
            ),
        )
        return row is not None


class ArchiveRepository(_Repository):
    @property
    def indexed_at_commit(self) -> int:
        """How many archived messages Phase 1 indexes itself (``Dialect.indexed_at_commit``)."""
        return self._dialect.indexed_at_commit

    async def insert(
        self,
        sid: int,
        seq: int,
        commit_id: str,
        *,
        message_count: int,
        tokens: int,
        first: int,
        last: int,
        now: float,
    ) -> None:
        await self._conn.run(
            "INSERT INTO archives (sid, seq, commit_id, message_count, tokens, first_position,"
            " last_position, create_time) VALUES (:sid, :seq, :commit_id, :count, :tokens,"
            " :first, :last, :now)",
            {"sid": sid, "seq": seq, "commit_id": commit_id, "count": message_count,
             "tokens": tokens, "first": first, "last": last, "now": now},
        )  # fmt: skip

    async def bounds(self, sid: int, seq: int) -> tuple[int, int] | None:
        row = await self._conn.one(
            "SELECT first_position, last_position FROM archives WHERE sid = :sid AND seq = :seq",
            {"sid": sid, "seq": seq},
        )
        return (int(row[0]), int(row[1])) if row else None

    async def listing(self, sid: int, only: int | None) -> list[tuple[int, int, int]]:
        """(seq, first, last) of the session's archives (or just ``only``), newest first."""
        rows = await self._conn.all(
            "SELECT seq, first_position, last_position FROM archives WHERE sid = :sid"
            " AND (CAST(:only AS BIGINT) IS NULL OR seq = :only) ORDER BY seq DESC",
            {"sid": sid, "only": only},
        )
        return [(int(s), int(f), int(last)) for s, f, last in rows]

    async def index_messages(self, sid: int, seq: int, first: int, last: int) -> None:
        """Put the messages at positions first..last of archive ``seq`` into the archive's
        full-text index, in place of what an earlier attempt put there: their text analyzed
        here (``TextIndex.indexed``), then written in one batch (live messages are never
        indexed)."""
        index = self._dialect.text_index
        value = index.value("archived", ":body")
        assert value is not None  # the archive index always has its own column
        chunk = {"sid": sid, "seq": seq, "first": first, "last": last}
        await self._conn.run(
            "DELETE FROM archived_texts WHERE sid = :sid AND seq = :seq"
            " AND position BETWEEN :first AND :last",
            chunk,
        )
        # The in-process BM25 index reads the archive again (services/lexical_index.py).
        await self._conn.run(
            "UPDATE archives SET text_version = text_version + 1 WHERE sid = :sid AND seq = :seq",
            {"sid": sid, "seq": seq},
        )
        rows = await self._conn.all(
            "SELECT m.position, a.create_time, m.message_id, m.role, m.parts_json"
            " FROM messages m JOIN archives a ON a.sid = m.sid AND a.seq = :seq"
            " WHERE m.sid = :sid AND m.position BETWEEN :first AND :last",
            chunk,
        )
        bodies = [index.indexed(message_body(mid, role, parts)) for _, _, mid, role, parts in rows]
        await self._conn.many(
            f"INSERT INTO archived_texts (sid, seq, position, archive_time, terms, {value[0]})"
            f" VALUES (:sid, :seq, :position, :time, :terms, {value[1]})",
            [
                (sid, seq, int(row[0]), row[1], term_count(body), body)
                for row, body in zip(rows, bodies, strict=True)
            ],
        )

    async def bm25_ranked(
        self, sids: Sequence[int], terms: list[str], only: int | None, limit: int
    ) -> tuple[list[tuple[int, int, StoredMessage, float]], int]:
        """(sid, seq, message, score) of the best ``limit`` archived messages of ``sids`` (of
        archive ``only`` if given) with any of ``terms``, best first, and how many match:
        the SQL statement of what the search computes in process
        (``services/lexical_index.py``, which the tests compare with it; this reads every
        posting of every term: 0.5-0.7 s for common words at 100,000 rows of one owner).

        One statement, the same on both engines: BM25 (``BM25_K1``, ``BM25_B``, idf
        ln(1 + (N - df + 0.5) / (df + 0.5))) computed from the engine's postings
        (``TextIndex.postings``) with statistics of the searched sessions only, so rows of
        other owners or tenants never change a ranking and both engines rank alike; the
        messages and the count come with it."""
        if not sids or not terms:
            return [], 0
        index = self._dialect.text_index
        members, values = self._dialect.in_list("sids", sids)
        term_list, term_values = self._dialect.in_list("terms", terms)
        where = f"x.sid {members} AND (CAST(:only AS BIGINT) IS NULL OR x.seq = :only)"
        rows = await self._conn.all(
            f"WITH tf AS ({index.postings(where, term_list)}),"
            " df AS (SELECT term, COUNT(*) AS df FROM tf GROUP BY term),"
            " stats AS (SELECT COUNT(*) AS n, AVG(x.terms) AS avgdl FROM archived_texts x"
            f" WHERE {where}),"
            " scored AS (SELECT tf.id, SUM(ln(1 + (st.n - df.df + 0.5) / (df.df + 0.5))"
            f" * tf.tf * {BM25_K1 + 1} / (tf.tf + {BM25_K1} * ({1 - BM25_B}"
            f" + {BM25_B} * x.terms / CASE WHEN st.avgdl > 0 THEN st.avgdl ELSE 1 END)))"
            " AS score FROM tf JOIN df ON df.term = tf.term"
            " JOIN archived_texts x ON x.id = tf.id CROSS JOIN stats st GROUP BY tf.id)"
            " SELECT x.sid, x.seq, sc.score, COUNT(*) OVER (),"
            f" {', '.join('m.' + c for c in _MESSAGE.split(', '))}"
            " FROM scored sc JOIN archived_texts x ON x.id = sc.id"
            " JOIN messages m ON m.sid = x.sid AND m.position = x.position"
            " ORDER BY sc.score DESC, x.archive_time DESC, x.position DESC LIMIT :limit",
            {"only": only, "limit": limit, "query": index.query(terms), **values,
             **term_values},
        )  # fmt: skip
        total = int(rows[0][3]) if rows else 0
        return [(int(r[0]), int(r[1]), _stored_message(r[4:]), float(r[2])) for r in rows], total

    def setting_abstract(self, sid: int, seq: int, abstract: str) -> Write:
        return Write(
            "UPDATE archives SET abstract = :abstract WHERE sid = :sid AND seq = :seq",
            {"abstract": abstract, "sid": sid, "seq": seq},
        )


class EventRepository(_Repository):
    def inserting(self, commit_id: str, events: Sequence[tuple[int, bytes, bool]]) -> Write:
        """The write that stores events (for ``CommitRepository.extend_events``)."""
        return Write(
            "INSERT INTO commit_events (commit_id, sequence, terminal, payload)"
            " VALUES (:id, :sequence, :terminal, :payload)",
            rows=[(commit_id, s, t, p) for s, p, t in events],
        )

    async def after(self, commit_id: str, after_sequence: int) -> list[StoredEvent]:
        rows = await self._conn.all(
            "SELECT sequence, payload, terminal FROM commit_events WHERE commit_id = :id"
            " AND sequence > :after ORDER BY sequence",
            {"id": commit_id, "after": after_sequence},
        )
        return [StoredEvent(commit_id, int(s), bytes(p), bool(t)) for s, p, t in rows]


class JobRepository(_Repository):
    async def enqueue(self, commit_id: str, sid: int, seq: int, now: float) -> None:
        await self._conn.run(
            "INSERT INTO phase2_jobs (commit_id, sid, seq, state, not_before, create_time)"
            f" VALUES (:id, :sid, :seq, 'queued', {self._dialect.now}, :now)",
            {"id": commit_id, "sid": sid, "seq": seq, "now": now},
        )

    async def next_claimable(self) -> ClaimableJob | None:
        """The oldest runnable job whose session has no earlier unfinished one."""
        row = await self._conn.one(
            "SELECT j.commit_id, j.sid, j.seq, j.attempts, j.create_time FROM phase2_jobs j"
            " WHERE j.state <> 'done'"
            f" AND ((j.state = 'queued' AND j.not_before <= {self._dialect.now})"
            f"  OR (j.state = 'running' AND j.lease_expires < {self._dialect.now}))"
            " AND NOT EXISTS (SELECT 1 FROM phase2_jobs k WHERE k.sid = j.sid"
            "  AND k.seq < j.seq AND k.state <> 'done')"
            " ORDER BY j.not_before, j.create_time LIMIT 1" + self._dialect.skip_locked,
            {},
        )
        if row is None:
            return None
        return ClaimableJob(
            str(row[0]), int(row[1]), int(row[2]), int(row[3]), float(row[4] or 0.0)
        )

    async def lease(self, commit_id: str, attempts: int, token: str, seconds: float) -> None:
        await self._conn.run(
            "UPDATE phase2_jobs SET state = 'running', attempts = :attempts, lease_token = :token,"
            f" lease_expires = {self._dialect.now} + :seconds WHERE commit_id = :id",
            {"attempts": attempts, "token": token, "seconds": seconds, "id": commit_id},
        )

    async def holder(self, commit_id: str) -> tuple[str, int] | None:
        """The lease token of a running job and its commit's last event number, the job's
        row held until commit (so no other writer appends to the commit meanwhile)."""
        row = await self._conn.one(
            "SELECT j.lease_token, c.last_sequence FROM phase2_jobs j"
            " JOIN commits c ON c.commit_id = j.commit_id"
            " WHERE j.commit_id = :id AND j.state = 'running'" + self._dialect.lock_job,
            {"id": commit_id},
        )
        return (str(row[0]), int(row[1])) if row and row[0] is not None else None

    async def renew(self, commit_id: str, token: str, seconds: float) -> bool:
        changed = await self._conn.run(
            f"UPDATE phase2_jobs SET lease_expires = {self._dialect.now} + :seconds"
            " WHERE commit_id = :id AND lease_token = :token AND state = 'running'",
            {"seconds": seconds, "id": commit_id, "token": token},
        )
        return changed == 1

    async def release(self, commit_id: str, token: str) -> None:
        """Back to the queue without counting the attempt."""
        await self._conn.run(
            "UPDATE phase2_jobs SET state = 'queued',"
            " attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END,"
            f" lease_token = NULL, lease_expires = NULL, not_before = {self._dialect.now}"
            " WHERE commit_id = :id AND lease_token = :token AND state = 'running'",
            {"id": commit_id, "token": token},
        )

    async def requeue(self, commit_id: str, delay: float, *, reset_attempts: bool) -> None:
        """Queue the job again after ``delay``; ``reset_attempts`` (RetryCommit) also starts
        its age afresh, so the wait for a provider outage is counted from the retry."""
        now = self._dialect.now
        await self._conn.run(
            "UPDATE phase2_jobs SET state = 'queued', lease_token = NULL, lease_expires = NULL,"
            f" not_before = {now} + :delay,"
            " attempts = CASE WHEN :reset THEN 0 ELSE attempts END,"
            f" create_time = CASE WHEN :reset THEN {now} ELSE create_time END"
            " WHERE commit_id = :id",
            {"delay": delay, "reset": reset_attempts, "id": commit_id},
        )

    def finishing(self, commit_id: str) -> Write:
        return Write(
            "UPDATE phase2_jobs SET state = 'done', lease_token = NULL WHERE commit_id = :id",
            {"id": commit_id},
        )

    async def finish_session(self, sid: int) -> None:
        await self._conn.run(
            "UPDATE phase2_jobs SET state = 'done', lease_token = NULL"
            " WHERE sid = :sid AND state <> 'done'",
            {"sid": sid},
        )

    async def open_count(self) -> int:
        row = await self._conn.one("SELECT COUNT(*) FROM phase2_jobs WHERE state <> 'done'", {})
        return int(row[0]) if row else 0


class PendingItemRepository(_Repository):
    """A session's pending items (wm_core.carry_pending decides them), in order."""

    async def of_session(self, sid: int) -> list[PendingItem]:
        return [item for item, _ in await self.with_commits(sid)]

    async def with_commits(self, sid: int) -> list[tuple[PendingItem, str | None]]:
        """The items and the commit whose archive refused each (None: no archive, as for
        the overflow item)."""
        rows = await self._conn.all(
            "SELECT p.section, p.item, p.source, p.archive_seq, a.commit_id FROM pending_items p"
            " LEFT JOIN archives a ON a.sid = p.sid AND a.seq = p.archive_seq"
            " WHERE p.sid = :sid ORDER BY p.batch, p.position",
            {"sid": sid},
        )
        return [
            (PendingItem(str(a), str(b), str(c), int(d)), str(e) if e is not None else None)
            for a, b, c, d, e in rows
        ]

    def replacing(self, sid: int, batch: int, items: Sequence[PendingItem]) -> list[Write]:
        """The writes that make ``items`` the session's pending items; ``batch`` (the archive
        of a completion, minus the version for ApplyWorkingMemoryOps) differs from every
        earlier one, so the new keys never collide
        with the rows deleted in the same statement."""
        writes = [Write("DELETE FROM pending_items WHERE sid = :sid", {"sid": sid})]
        if items:
            writes.append(
                Write(
                    "INSERT INTO pending_items (sid, batch, position, section, item, source,"
                    " archive_seq) VALUES (:sid, :batch, :position, :section, :item, :source,"
                    " :seq)",
                    rows=[
                        (sid, batch, n, i.section, i.text, i.source, i.archive_seq)
                        for n, i in enumerate(items)
                    ],
                )
            )
        return writes


class WorkingMemoryRepository(_Repository):
    def inserting(
        self,
        sid: int,
        version: int,
        document: str,
        *,
        archive_seq: int | None,
        covered_seq: int,
        commit_id: str | None,
        tokens: int,
        now: float,
        decisions_json: str = "[]",
    ) -> Write:
        """A new version, with the guard decisions of the change that made it (JSON)."""
        return Write(
            "INSERT INTO working_memories (sid, version, document, archive_seq, covered_seq,"
            " commit_id, estimated_tokens, create_time, decisions_json) VALUES (:sid, :version,"
            " :document, :seq, :covered, :commit_id, :tokens, :now, :decisions)",
            {"sid": sid, "version": version, "document": document, "seq": archive_seq,
             "covered": covered_seq, "commit_id": commit_id, "tokens": tokens, "now": now,
             "decisions": decisions_json},
        )  # fmt: skip

    async def get(self, session: SessionRow, version: int) -> WorkingMemoryRecord | None:
        """The given version (none below 1)."""
        row = await self._conn.one(
            f"SELECT {_WM} FROM working_memories WHERE sid = :sid AND version = :version",
            {"sid": session.sid, "version": version},
        )
        if row is None:
            return None
        version, document, archive_seq, commit_id, tokens, created, decisions = row
        record = session.record
        return WorkingMemoryRecord(
            record.tenant, record.session_id, int(version), document, archive_seq, commit_id,
            int(tokens), created, decisions,
        )  # fmt: skip

    async def covered_seq(self, sid: int, version: int) -> int:
        """The highest archive number the version covers (0 for none, or no version)."""
        row = await self._conn.one(
            "SELECT covered_seq FROM working_memories WHERE sid = :sid AND version = :version",
            {"sid": sid, "version": version},
        )
        return int(row[0]) if row else 0


class RequestRepository(_Repository):
    async def lock(self, key: str) -> None:
        """Serialize requests with this key across replicas until commit."""
        if self._dialect.lock_key is not None:
            await self._conn.one(self._dialect.lock_key, {"key": key})

    async def find(self, key: str) -> RequestRow | None:
        row = await self._conn.one(
            "SELECT r.fingerprint, r.outcome, (r.sid IS NULL OR EXISTS (SELECT 1 FROM sessions s"
            " WHERE s.sid = r.sid AND s.tenant <> :gone)) FROM requests r WHERE r.request_key = :key",
            {"key": key, "gone": DELETED_TENANT},
        )
        return RequestRow(str(row[0]), str(row[1]), bool(row[2])) if row else None

    async def remember(
        self,
        key: str,
        sid: int | None,
        fingerprint: str,
        outcome: dict[str, Any],
        now: float,
    ) -> None:
        """Store (or replace a stale record of) a request's outcome."""
        await self._conn.run(
            "INSERT INTO requests (request_key, sid, fingerprint, outcome, create_time)"
            " VALUES (:key, :sid, :fingerprint, :outcome, :now) ON CONFLICT (request_key)"
            " DO UPDATE SET sid = excluded.sid, fingerprint = excluded.fingerprint,"
            " outcome = excluded.outcome, create_time = excluded.create_time",
            {"key": key, "sid": sid, "fingerprint": fingerprint, "outcome": json.dumps(outcome),
             "now": now},
        )  # fmt: skip

    async def prune(self, before: float, limit: int) -> int:
        """Forget up to ``limit`` records older than ``before``."""
        return await self._conn.run(
            "DELETE FROM requests WHERE request_key IN (SELECT request_key FROM requests"
            " WHERE create_time < :before LIMIT :limit)",
            {"before": before, "limit": limit},
        )


class SecretRepository(_Repository):
    async def get_or_create(self, name: str, candidate: str) -> str:
        """The stored value of ``name``; ``candidate`` becomes it if there is none yet (the
        first of several replicas starting at once wins, the others read its value)."""
        await self._conn.run(
            "INSERT INTO server_secrets (name, value) VALUES (:name, :value)"
            " ON CONFLICT (name) DO NOTHING",
            {"name": name, "value": candidate},
        )
        row = await self._conn.one(
            "SELECT value FROM server_secrets WHERE name = :name", {"name": name}
        )
        assert row is not None  # inserted above or by the winner of the race
        return str(row[0])


_MEMORY = (
    "m.mid, m.memory_id, m.tenant, m.owner, COALESCE(s.session_id, ''), m.type, m.text,"
    " m.fields_json, m.event_time, m.record_time, m.create_time, m.update_time, m.state,"
    " m.version, m.retire_reason"
)
_MEMORY_FROM = " FROM memories m LEFT JOIN sessions s ON s.sid = m.sid"


def _memory(row: Row) -> MemoryRow:
    values = list(row[:15])
    values[7] = json.loads(values[7])
    return MemoryRow(*values)


@dataclass(frozen=True, slots=True)
class MemoryFilter:
    """Which of an owner's memories a listing or a search considers."""

    tenant: str
    owner: str
    types: tuple[str, ...] = ()
    state: str = "active"
    start_time: float | None = None  # on COALESCE(event_time, record_time)
    end_time: float | None = None
    alive_at: float | None = None  # only the memories not expired then (memory_expiry)
    retention: Retention = ()


class MemoryRepository(_Repository):
    """Memories, their versions and sources; their full-text index follows every write in
    the same transaction (the dialect's ``text_index``)."""

    def _where(self, where: MemoryFilter) -> tuple[str, dict[str, Any]]:
        sql = " WHERE m.tenant = :tenant AND m.owner = :owner AND m.state = :state"
        params: dict[str, Any] = {"tenant": where.tenant, "owner": where.owner,
                                  "state": where.state}  # fmt: skip
        if where.types:
            members, values = self._dialect.in_list("types", where.types)
            sql += f" AND m.type {members}"
            params.update(values)
        if where.start_time is not None:
            sql += " AND COALESCE(m.event_time, m.record_time) >= :start"
            params["start"] = where.start_time
        if where.end_time is not None:
            sql += " AND COALESCE(m.event_time, m.record_time) < :end"
            params["end"] = where.end_time
        if where.alive_at is not None:
            condition, values = alive(where.alive_at, where.retention)
            sql += f" AND {condition}"
            params.update(values)
        return sql, params

    async def insert(
        self,
        *,
        memory_id: str,
        tenant: str,
        owner: str,
        sid: int | None,
        type: str,
        text: str,
        search_text: str,
        key: str,
        fields: dict[str, str],
        event_time: float | None,
        now: float,
    ) -> int:
        """Store an active memory at version 1; its key."""
        search_text = self._dialect.text_index.indexed(search_text)
        value = self._dialect.text_index.value("memories", ":search_text")
        column, expression = (f", {value[0]}", f", {value[1]}") if value else ("", "")
        row = await self._conn.one(
            "INSERT INTO memories (memory_id, tenant, owner, sid, type, text, search_text,"
            " memory_key, fields_json, event_time, record_time, create_time, update_time,"
            f" state, version{column}) VALUES (:memory_id, :tenant, :owner, :sid, :type, :text,"
            " :search_text, :key, :fields, :event_time, :now, :now, :now, 'active',"
            f" 1{expression}) RETURNING mid",
            {"memory_id": memory_id, "tenant": tenant, "owner": owner, "sid": sid,
             "type": type, "text": text, "search_text": search_text, "key": key,
             "fields": json.dumps(fields, sort_keys=True), "event_time": event_time,
             "now": now},
        )  # fmt: skip
        assert row is not None
        return int(row[0])

    async def get(self, tenant: str, memory_id: str) -> MemoryRow | None:
        row = await self._conn.one(
            f"SELECT {_MEMORY}{_MEMORY_FROM} WHERE m.tenant = :tenant AND m.memory_id = :id",
            {"tenant": tenant, "id": memory_id},
        )
        return _memory(row) if row else None

    async def by_mid(self, mid: int) -> MemoryRow | None:
        row = await self._conn.one(
            f"SELECT {_MEMORY}{_MEMORY_FROM} WHERE m.mid = :mid", {"mid": mid}
        )
        return _memory(row) if row else None

    async def of_owner(self, tenant: str, owner: str, ids: Sequence[str]) -> list[MemoryRow]:
        """The owner's memories among ``ids`` (any state)."""
        if not ids:
            return []
        members, values = self._dialect.in_list("ids", ids)
        rows = await self._conn.all(
            f"SELECT {_MEMORY}{_MEMORY_FROM} WHERE m.tenant = :tenant AND m.owner = :owner"
            f" AND m.memory_id {members}",
            {"tenant": tenant, "owner": owner, **values},
        )
        return [_memory(r) for r in rows]

    async def with_key(self, tenant: str, owner: str, key: str) -> MemoryRow | None:
        """The owner's active memory whose text has this identity key."""
        row = await self._conn.one(
            f"SELECT {_MEMORY}{_MEMORY_FROM} WHERE m.tenant = :tenant AND m.owner = :owner"
            " AND m.memory_key = :key AND m.state = 'active'",
            {"tenant": tenant, "owner": owner, "key": key},
        )
        return _memory(row) if row else None

    async def rewrite(
        self,
        mid: int,
        *,
        type: str,
        text: str,
        search_text: str,
        key: str,
        fields: dict[str, str],
        event_time: float | None,
        version: int,
        now: float,
    ) -> None:
        """Replace the content (the caller keeps the old one as a version first)."""
        search_text = self._dialect.text_index.indexed(search_text)
        value = self._dialect.text_index.value("memories", ":search_text")
        extra = f", {value[0]} = {value[1]}" if value else ""
        await self._conn.run(
            "UPDATE memories SET type = :type, text = :text, search_text = :search_text,"
            " memory_key = :key, fields_json = :fields, event_time = :event_time,"
            f" version = :version, update_time = :now{extra} WHERE mid = :mid",
            {"type": type, "text": text, "search_text": search_text, "key": key,
             "fields": json.dumps(fields, sort_keys=True), "event_time": event_time,
             "version": version, "now": now, "mid": mid},
        )  # fmt: skip

    async def retire(self, mid: int, reason: str, now: float) -> None:
        await self._conn.run(
            "UPDATE memories SET state = 'retired', retire_reason = :reason, update_time = :now"
            " WHERE mid = :mid",
            {"reason": reason, "now": now, "mid": mid},
        )

    async def delete(self, mid: int) -> None:
        """Forget: the row, its index entry, versions and sources, in this transaction."""
        await self._conn.run("DELETE FROM memories WHERE mid = :mid", {"mid": mid})

    async def add_version(
        self, mid: int, version: int, type: str, text: str, reason: str, now: float
    ) -> None:
        await self._conn.run(
            "INSERT INTO memory_versions (mid, version, type, text, reason, supersede_time)"
            " VALUES (:mid, :version, :type, :text, :reason, :now)",
            {"mid": mid, "version": version, "type": type, "text": text, "reason": reason,
             "now": now},
        )  # fmt: skip

    async def versions(self, mid: int) -> list[MemoryVersionRow]:
        """Superseded versions, newest first."""
        rows = await self._conn.all(
            "SELECT version, type, text, reason, supersede_time FROM memory_versions"
            " WHERE mid = :mid ORDER BY version DESC",
            {"mid": mid},
        )
        return [
            MemoryVersionRow(int(v), str(t), str(x), str(r), float(w)) for v, t, x, r, w in rows
        ]

    async def add_source(
        self,
        mid: int,
        session_id: str,
        archive_seq: int | None,
        message_ids: Sequence[str],
        now: float,
    ) -> None:
        await self._conn.run(
            "INSERT INTO memory_sources (mid, n, session_id, archive_seq, message_ids,"
            " create_time) VALUES (:mid, (SELECT COALESCE(MAX(n), 0) + 1 FROM memory_sources"
            " WHERE mid = :mid), :session_id, :seq, :ids, :now)",
            {"mid": mid, "session_id": session_id, "seq": archive_seq,
             "ids": " ".join(message_ids), "now": now},
        )  # fmt: skip

    async def move_sources(self, from_mid: int, to_mid: int) -> None:
        """Give ``to_mid`` the sources of ``from_mid`` too (a merge keeps where all came from)."""
        await self._conn.run(
            "INSERT INTO memory_sources (mid, n, session_id, archive_seq, message_ids,"
            " create_time) SELECT :to, n + (SELECT COALESCE(MAX(n), 0) FROM memory_sources"
            " WHERE mid = :to), session_id, archive_seq, message_ids, create_time"
            " FROM memory_sources WHERE mid = :from",
            {"to": to_mid, "from": from_mid},
        )

    async def sources(self, mids: Sequence[int], per: int) -> dict[int, list[MemorySourceRow]]:
        """The newest ``per`` sources of each memory, newest first."""
        if not mids:
            return {}
        members, values = self._dialect.in_list("mids", mids)
        rows = await self._conn.all(
            "SELECT mid, session_id, archive_seq, message_ids, create_time FROM memory_sources"
            f" WHERE mid {members} ORDER BY mid, n DESC",
            values,
        )
        out: dict[int, list[MemorySourceRow]] = {}
        for mid, name, seq, ids, created in rows:
            found = out.setdefault(int(mid), [])
            if len(found) < per:
                found.append(
                    MemorySourceRow(
                        str(name),
                        None if seq is None else int(seq),
                        tuple(str(ids).split()),
                        float(created),
                    )
                )
        return out

    async def page(self, where: MemoryFilter, before: int | None, limit: int) -> list[MemoryRow]:
        """Newest first (by key), keys below ``before`` if given."""
        sql, params = self._where(where)
        rows = await self._conn.all(
            f"SELECT {_MEMORY}{_MEMORY_FROM}{sql} AND m.mid < :before ORDER BY m.mid DESC"
            " LIMIT :limit",
            {**params, "before": _LAST if before is None else before, "limit": limit},
        )
        return [_memory(r) for r in rows]

    async def among(self, where: MemoryFilter, mids: Sequence[int]) -> list[MemoryRow]:
        """Those of the memories ``mids`` that ``where`` admits (the dense candidates of a
        hybrid search, filtered like the lexical ones)."""
        if not mids:
            return []
        sql, params = self._where(where)
        members, values = self._dialect.in_list("mids", mids)
        rows = await self._conn.all(
            f"SELECT {_MEMORY}{_MEMORY_FROM}{sql} AND m.mid {members}", {**params, **values}
        )
        return [_memory(r) for r in rows]

    async def ranked(
        self, where: MemoryFilter, words: list[str], limit: int
    ) -> list[tuple[MemoryRow, float]]:
        """The best ``limit`` memories that have any of ``words``, best first, newest first
        among equal scores."""
        if not words:
            return []
        index = self._dialect.text_index
        sql, params = self._where(where)
        for query in await self._match_queries("memories", words):
            rows = await self._conn.all(
                f"SELECT {_MEMORY}, {index.score('memories')} FROM memories m"
                f"{index.source('memories')} LEFT JOIN sessions s ON s.sid = m.sid"
                f"{sql} AND {index.match('memories')} ORDER BY 16 DESC, m.mid DESC"
                " LIMIT :limit",
                {**params, "query": query, "limit": limit},
            )
            if len(rows) >= limit:
                break
        return [(_memory(r), float(r[15])) for r in rows]
