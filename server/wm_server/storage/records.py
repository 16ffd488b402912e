"""What the store returns: plain immutable records, independent of the engine and of gRPC."""

from __future__ import annotations

from dataclasses import dataclass

from wm_core import (
    CommitState,
    Message,
    PendingItem,
    SessionSettings,
    SkipReason,
    Trigger,
    archive_name,
)

# A session that never set anything (what records built without a config carry).
UNCONFIGURED = SessionSettings()


@dataclass(frozen=True, slots=True)
class SessionRecord:
    tenant: str
    session_id: str
    create_time: float
    update_time: float
    message_count: int
    total_message_count: int
    pending_tokens: int
    live_tokens: int
    keep_recent_count: int
    archive_count: int
    wm_version: int
    config: SessionSettings = UNCONFIGURED
    user_id: str = ""
    agent_id: str = ""


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A message with its place in the session and, once archived, its archive number."""

    position: int
    message: Message
    create_time: float
    archive_seq: int | None = None


@dataclass(frozen=True, slots=True)
class AddResult:
    session: SessionRecord
    added_ids: tuple[str, ...]
    duplicate_ids: tuple[str, ...]
    created: bool
    auto_commit_id: str = ""  # the commit the session's auto-commit policy started


@dataclass(frozen=True, slots=True)
class CommitRecord:
    """A commit and, when it archived messages, its archive."""

    commit_id: str
    tenant: str
    session_id: str
    state: CommitState
    keep_recent_count: int
    archive_seq: int | None
    archived_message_count: int
    kept_message_count: int
    archived_tokens: int
    skip_reason: SkipReason | None
    request_id: str | None
    attempt_count: int
    error_reason: str | None
    error_message: str | None
    covered_by_seq: int | None
    covered_by_commit_id: str | None
    abstract: str
    wm_version: int
    usage_json: str
    decisions_json: str
    last_sequence: int
    create_time: float
    complete_time: float | None
    trigger: Trigger | None = None
    memory_diff_json: str = ""  # what Phase 2's memory extraction did ("" before it ran)
    memory_state: str = ""  # how it ended; "recovered" once a later commit extracted it

    @property
    def archive_id(self) -> str:
        return archive_name(self.archive_seq) if self.archive_seq is not None else ""


@dataclass(frozen=True, slots=True)
class StoredEvent:
    commit_id: str
    sequence: int
    payload: bytes
    terminal: bool


@dataclass(frozen=True, slots=True)
class WorkingMemoryRecord:
    tenant: str
    session_id: str
    version: int
    document: str
    archive_seq: int | None
    commit_id: str | None
    estimated_tokens: int
    create_time: float
    # The guard decisions of the change that stored it (JSON list of Decision.to_dict()).
    decisions_json: str = "[]"


@dataclass(frozen=True, slots=True)
class PendingItemView:
    """A pending item as a client reads it: with the commit whose Phase 2 refused it
    (None for the overflow item, and for an item of an archive no longer stored)."""

    item: PendingItem
    commit_id: str | None


@dataclass(frozen=True, slots=True)
class WorkingMemoryView:
    """A working memory as GetWorkingMemory returns it: the latest version comes with the
    session's pending items and their bound (0: not read, an older version)."""

    record: WorkingMemoryRecord
    pending: tuple[PendingItemView, ...] = ()
    pending_limit: int = 0


@dataclass(frozen=True, slots=True)
class SearchRow:
    """An archived message's row of the full-text index: where it is, when its archive was
    made, and the analyzer's terms of its text (space-separated)."""

    position: int
    archive_time: float
    body: str


@dataclass(frozen=True, slots=True)
class SearchMatch:
    session_id: str
    archive_seq: int
    message: Message
    score: float = 0.0  # ranked search only


@dataclass(frozen=True, slots=True)
class MemoryRow:
    """A stored memory. ``owner`` is "user:U", "agent:A" or "session:SID" (a session with
    neither owns its memories; ``session_id`` then names it)."""

    mid: int
    memory_id: str
    tenant: str
    owner: str
    session_id: str
    type: str
    text: str
    fields: dict[str, str]
    event_time: float | None
    record_time: float
    create_time: float
    update_time: float
    state: str
    version: int
    retire_reason: str

    @property
    def active(self) -> bool:
        return self.state == "active"


@dataclass(frozen=True, slots=True)
class MemoryVersionRow:
    """A superseded text of a memory."""

    version: int
    type: str
    text: str
    reason: str
    supersede_time: float


@dataclass(frozen=True, slots=True)
class MemorySourceRow:
    """Where a memory was learned."""

    session_id: str
    archive_seq: int | None
    message_ids: tuple[str, ...]
    create_time: float


@dataclass(frozen=True, slots=True)
class ToolOutputRecord:
    """A tool output stored whole; ``content`` is empty when only its description was read."""

    output_id: str
    message_id: str
    position: int
    part_index: int
    tool_use_id: str
    kind: str
    format: str
    size_bytes: int
    line_count: int
    synopsis: str
    create_time: float
    content: str = ""
