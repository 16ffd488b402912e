"""Commits and the events each one streams."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from wm_core import (
    CommitState,
    SkipReason,
    Trigger,
)
from wm_server.storage.records import (
    CommitRecord,
    StoredEvent,
)
from wm_server.storage.repository import Repository
from wm_server.storage.statements import Params, Read, Row, Write

if TYPE_CHECKING:
    pass


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


def _commit(row: Row) -> CommitRecord:
    values = list(row)
    values[3] = CommitState(values[3])
    values[9] = SkipReason(values[9]) if values[9] else None
    values[23] = Trigger(values[23]) if values[23] else None
    return CommitRecord(*values)


class CommitRepository(Repository):
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
            {
                "id": commit_id,
                "sid": sid,
                "state": state.value,
                "keep": keep,
                "seq": archive_seq,
                "archived": archived,
                "kept": kept,
                "tokens": archived_tokens,
                "skip": skip_reason.value if skip_reason else None,
                "request_id": request_id,
                "trigger": trigger.value,
                "now": now,
                "done": now if state.terminal else None,
            },
        )

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

    def failed_uncovered(self, sid: int, seq: int) -> Read[list[int]]:
        """The archives before ``seq`` whose commits failed and that no later Phase 2
        covered, in order."""
        return Read(
            "SELECT archive_seq FROM commits WHERE sid = :sid AND state = :failed"
            " AND covered_by_seq IS NULL AND archive_seq < :seq ORDER BY archive_seq",
            {"sid": sid, "failed": CommitState.FAILED.value, "seq": seq},
            lambda rows: [int(s) for (s,) in rows],
        )

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
        write = self.setting_state(commit_id, state, attempts, error=error, now=now)
        await self._conn.run(write.sql, write.params or {})

    def setting_state(
        self,
        commit_id: str,
        state: CommitState,
        attempts: int,
        *,
        error: tuple[str, str] | None = None,
        now: float | None = None,
    ) -> Write:
        """``set_state`` as a write."""
        return Write(
            "UPDATE commits SET state = :state, attempt_count = :attempts, error_reason = :reason,"
            " error_message = :message, complete_time = :now WHERE commit_id = :id",
            {
                "state": state.value,
                "attempts": attempts,
                "reason": error[0] if error else None,
                "message": error[1][:2000] if error else None,
                "now": now,
                "id": commit_id,
            },
        )

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
            {
                "state": CommitState.COMPLETED.value,
                "attempts": attempts,
                "now": now,
                "version": version,
                "usage": usage_json,
                "decisions": decisions_json,
                "diff": memory_diff_json,
                "memory": memory_state,
                "id": commit_id,
            },
        )

    async def memory_failed_before(self, sid: int, seq: int, limit: int) -> list[int]:
        """The newest ``limit`` archives before ``seq`` whose memory extraction failed and
        that no later extraction has covered, oldest first."""
        return await self._read(self.reading_memory_failed(sid, seq, limit))

    def reading_memory_failed(self, sid: int, seq: int, limit: int) -> Read[list[int]]:
        """``memory_failed_before`` as a read."""
        return Read(
            "SELECT archive_seq FROM commits WHERE sid = :sid AND memory_state = 'failed'"
            " AND archive_seq < :seq ORDER BY archive_seq DESC LIMIT :limit",
            {"sid": sid, "seq": seq, "limit": limit},
            lambda rows: sorted(int(s) for (s,) in rows),
        )

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
        row = await self._conn.chain(storing, _moving(commit_id, after, last, None, {}))
        return row is not None

    async def extend_events_if(
        self,
        commit_id: str,
        after: int,
        last: int,
        condition: str,
        params: Params,
        *,
        storing: Sequence[Write],
    ) -> bool:
        """``extend_events`` only while ``condition`` (SQL, with ``params``) holds too: the
        number is moved first and ``storing`` run only if it moved, so a False leaves
        nothing written (for a writer that knows ``after`` without reading it)."""
        moving = _moving(commit_id, after, last, condition, params)
        if await self._conn.one(moving.sql, moving.params or {}) is None:
            return False
        await self._conn.write(storing)
        return True

    def extending_if(
        self,
        commit_id: str,
        after: int,
        events: Sequence[tuple[int, bytes, bool]],
        condition: str,
        params: Params,
    ) -> Write:
        """``extend_events`` and the events' rows as one statement, only while the commit's
        last event number is ``after`` and ``condition`` (SQL, with ``params``) holds: it
        changes one row per event, or none. A data-modifying CTE: PostgreSQL only."""
        return _extending(commit_id, after, events, condition, params)

    def extending(
        self, commit_id: str, after: int, events: Sequence[tuple[int, bytes, bool]]
    ) -> Write:
        """``extend_events`` as one statement that fails rather than store nothing, for a
        writer that read ``after`` in its unit and may send this with its COMMIT: the rows
        go in numbered after ``after`` whatever the commit's number is, so once it moved on
        they meet the numbers stored since (a unique violation: a conflict, the unit runs
        again), and numbers never go back. PostgreSQL only."""
        return _extending(commit_id, after, events, None, {})


def _moving(commit_id: str, after: int, last: int, condition: str | None, params: Params) -> Write:
    """The commit's last event number moved from ``after`` to ``last`` (and, with
    ``condition``, only while it holds), returning a row when it moved."""
    return Write(
        "UPDATE commits SET last_sequence = :last WHERE commit_id = :id"
        f" AND last_sequence = :after{f' AND {condition}' if condition else ''}"
        " RETURNING last_sequence",
        {**params, "last": last, "id": commit_id, "after": after},
    )


def _extending(
    commit_id: str,
    after: int,
    events: Sequence[tuple[int, bytes, bool]],
    condition: str | None,
    params: Params,
) -> Write:
    """The commit's last event number moved from ``after`` and its events stored, in one
    statement: with ``condition``, only where the number is ``after`` and it holds (the
    events' rows come from the moved row); without, the rows whatever the number is."""
    source = "moved.commit_id" if condition else ":id"
    return Write(
        "WITH moved AS (UPDATE commits SET last_sequence = :last WHERE commit_id = :id"
        f" AND last_sequence = :after{f' AND {condition}' if condition else ''}"
        " RETURNING commit_id)"
        " INSERT INTO commit_events (commit_id, sequence, terminal, payload)"
        f" SELECT {source}, u.sequence, u.terminal, u.payload FROM"
        f"{' moved,' if condition else ''}"
        " unnest(:sequences::bigint[], :terminals::boolean[], :payloads::bytea[])"
        " AS u(sequence, terminal, payload)",
        {
            **params,
            "id": commit_id,
            "after": after,
            "last": events[-1][0],
            "sequences": [s for s, _, _ in events],
            "terminals": [t for _, _, t in events],
            "payloads": [p for _, p, _ in events],
        },
    )


class EventRepository(Repository):
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
