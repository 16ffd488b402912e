"""What both engines share: the column lists, row mapping, and the window arithmetic.

The engines differ in how they lock and talk to their database, not in what a row means or
how pending_tokens moves, so those live here once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wm_core import Message
from wm_server.errors import NotFound
from wm_server.storage.records import (
    CommitRecord,
    CommitState,
    SessionRecord,
    SkipReason,
    WorkingMemoryRecord,
)

SESSION_COLUMNS = (
    "sid, tenant, session_id, create_time, update_time, message_count, total_message_count, "
    "pending_tokens, live_tokens, keep_recent_count, archive_count, wm_version"
)
COMMIT_COLUMNS = (
    "c.commit_id, s.tenant, s.session_id, c.state, c.keep_recent_count, c.archive_seq, "
    "c.archived_message_count, c.kept_message_count, c.archived_tokens, c.skip_reason, "
    "c.request_id, c.attempt_count, c.error_reason, c.error_message, c.covered_by_seq, "
    "(SELECT x.commit_id FROM commits x WHERE x.sid = c.sid AND x.archive_seq = c.covered_by_seq), "
    "COALESCE(a.abstract, ''), c.wm_version, c.usage_json, c.decisions_json, c.last_sequence, "
    "c.create_time, c.complete_time"
)
COMMIT_FROM = (
    "commits c JOIN sessions s ON s.sid = c.sid "
    "LEFT JOIN archives a ON a.sid = c.sid AND a.seq = c.archive_seq"
)


def session_from_row(row: Sequence[Any]) -> SessionRecord:
    """A row of SESSION_COLUMNS (its first column, the internal key, is dropped)."""
    return SessionRecord(*row[1:])


def commit_from_row(row: Sequence[Any]) -> CommitRecord:
    """A row of COMMIT_COLUMNS."""
    values = list(row)
    values[3] = CommitState(values[3])
    values[9] = SkipReason(values[9]) if values[9] else None
    return CommitRecord(*values)


def wm_from_row(tenant: str, session_id: str, row: Sequence[Any]) -> WorkingMemoryRecord:
    """A row of (version, document, archive_seq, commit_id, estimated_tokens, create_time)."""
    version, document, archive_seq, commit_id, tokens, created = row
    return WorkingMemoryRecord(
        tenant, session_id, version, document, archive_seq, commit_id, tokens, created
    )


def rebuild_rule(tokens: list[int], keep: int) -> tuple[int, int]:
    """The reference rebuild rule: (pending, live) of the live messages' token counts, in
    order; keep 0 → all of them are pending, else the first (total − keep)."""
    live = sum(tokens)
    keep = max(0, int(keep))
    if keep == 0:
        return live, live
    return sum(tokens[: max(0, len(tokens) - keep)]), live


def pending_delta(
    first_live: int, next_pos: int, keep: int, fresh: list[tuple[int, Message]]
) -> tuple[int, tuple[int, int] | None]:
    """Tokens that cross out of the keep window because of this batch: O(batch).

    With keep k, the live messages outside the window are those at positions up to
    last - k. The batch moves ``last`` forward, so exactly the positions in
    (old_last - k, new_last - k] cross out: some in the batch (returned as a sum), the rest
    stored already (returned as the position range whose tokens must be added).
    """
    if not fresh:
        return 0, None
    if keep <= 0:
        return sum(m.estimated_tokens for _, m in fresh), None
    old_last = next_pos - 1
    new_last = fresh[-1][0]
    lo = max(old_last - keep + 1, first_live)
    hi = new_last - keep
    if hi < lo:
        return 0, None
    in_batch = sum(m.estimated_tokens for pos, m in fresh if lo <= pos <= hi)
    return in_batch, ((lo, min(hi, old_last)) if lo <= old_last else None)


def commit_not_found(session_id: str, commit_id: str) -> NotFound:
    return NotFound(
        f"commit {commit_id!r} not found in session {session_id!r}",
        reason="COMMIT_NOT_FOUND",
        metadata={"session_id": session_id, "commit_id": commit_id},
    )


def with_id(message: Message, message_id: str) -> Message:
    return Message(message_id, message.role, message.parts, message.estimated_tokens)
