"""What both engines share: the column lists and the row mapping.

The engines differ in how they lock and talk to their database, not in what a row means, so
that lives here once; how pending_tokens moves is a domain rule, in wm_core.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wm_core import Message

# The window rules are the domain's; the engines import them from here with the rest.
from wm_core import pending_delta as pending_delta
from wm_core import rebuild_rule as rebuild_rule
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


def commit_not_found(session_id: str, commit_id: str) -> NotFound:
    return NotFound(
        f"commit {commit_id!r} not found in session {session_id!r}",
        reason="COMMIT_NOT_FOUND",
        metadata={"session_id": session_id, "commit_id": commit_id},
    )


def with_id(message: Message, message_id: str) -> Message:
    return Message(message_id, message.role, message.parts, message.estimated_tokens)
