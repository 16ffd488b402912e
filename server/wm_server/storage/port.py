"""The storage port: every persistent operation the services need, one transaction each.

Operations are coarse on purpose (add a batch, run Phase 1, claim a job, complete Phase 2):
each engine implements one as a single transaction, so invariants such as "archive numbers
are contiguous" or "pending_tokens equals its rebuild" hold on SQLite and PostgreSQL alike
without a unit-of-work layer in between.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

from wm_core import Message
from wm_server.storage.records import (
    AddResult,
    ClaimedJob,
    CommitRecord,
    Phase1Result,
    Phase2Completion,
    Phase2Input,
    SearchMatch,
    SessionRecord,
    StoredEvent,
    StoredMessage,
    WorkingMemoryRecord,
)

# Builds the serialized first event of a commit once its record exists (inside the transaction).
FirstEventBuilder = Callable[[CommitRecord], bytes]
# Builds the closing events of Phase 2 from the final commit and WM: (sequence, payload, terminal).
ClosingEventsBuilder = Callable[
    [CommitRecord, WorkingMemoryRecord | None], Sequence[tuple[int, bytes, bool]]
]


class LeaseLost(Exception):
    """This worker no longer holds the job's lease (it expired and another took it)."""


class Store(ABC):
    """Persistent state of the service. Every method is scoped by tenant."""

    @abstractmethod
    async def open(self) -> None:
        """Connect and apply pending migrations."""

    @abstractmethod
    async def close(self) -> None: ...

    def subscribe_events(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(commit_id)`` when any process stores events of a commit.

        Only an engine shared by several replicas has something to report (PostgreSQL relays
        LISTEN/NOTIFY); with one process its own worker already wakes the streams, so the
        default does nothing.
        """
        del callback

    # --- sessions and messages -------------------------------------------------------------
    @abstractmethod
    async def create_session(
        self, tenant: str, session_id: str, request_id: str | None
    ) -> tuple[SessionRecord, bool]:
        """Create; return (session, created). ALREADY_EXISTS unless request_id matches."""

    @abstractmethod
    async def get_session(self, tenant: str, session_id: str) -> SessionRecord: ...

    @abstractmethod
    async def list_sessions(
        self, tenant: str, limit: int, before_key: int | None
    ) -> tuple[list[SessionRecord], int | None]:
        """Newest first; returns the page and the key to continue from (None at the end)."""

    @abstractmethod
    async def delete_session(self, tenant: str, session_id: str) -> None: ...

    @abstractmethod
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
        """Store a batch atomically; ids already stored are duplicates, not errors."""

    @abstractmethod
    async def live_messages(self, tenant: str, session_id: str) -> list[StoredMessage]: ...

    @abstractmethod
    async def rebuild_pending_tokens(self, tenant: str, session_id: str) -> tuple[int, int]:
        """Re-derive (pending_tokens, live_tokens) from the messages and store them."""

    # --- commits ---------------------------------------------------------------------------
    @abstractmethod
    async def commit_phase1(
        self,
        tenant: str,
        session_id: str,
        keep_recent_count: int,
        request_id: str | None,
        commit_id: str,
        first_event: FirstEventBuilder,
    ) -> Phase1Result:
        """Archive, remember keep, reset pending, enqueue Phase 2, store the first event."""

    @abstractmethod
    async def get_commit(self, tenant: str, session_id: str, commit_id: str) -> CommitRecord: ...

    @abstractmethod
    async def list_commits(
        self, tenant: str, session_id: str, limit: int, offset: int
    ) -> list[CommitRecord]: ...

    @abstractmethod
    async def events_after(self, commit_id: str, after_sequence: int) -> list[StoredEvent]: ...

    @abstractmethod
    async def append_events(
        self, job: ClaimedJob, events: Sequence[tuple[int, bytes, bool]], running: bool
    ) -> None:
        """Store progress events of a job this worker holds (fails if the lease was lost)."""

    @abstractmethod
    async def retry_commit(
        self, tenant: str, session_id: str, commit_id: str, event: Callable[[int], bytes]
    ) -> CommitRecord:
        """Put a failed, uncovered commit back in the queue."""

    # --- Phase 2 jobs ----------------------------------------------------------------------
    @abstractmethod
    async def claim_job(self, lease_seconds: float) -> ClaimedJob | None:
        """Claim the oldest runnable job: its session has no earlier unfinished archive."""

    @abstractmethod
    async def renew_lease(self, job: ClaimedJob, lease_seconds: float) -> bool: ...

    @abstractmethod
    async def release_job(self, job: ClaimedJob) -> None:
        """Give the job back to the queue (shutdown) without counting an attempt."""

    @abstractmethod
    async def phase2_input(self, job: ClaimedJob) -> Phase2Input: ...

    @abstractmethod
    async def complete_phase2(
        self,
        job: ClaimedJob,
        expected_previous_version: int,
        completion: Phase2Completion,
        closing_events: ClosingEventsBuilder,
    ) -> tuple[CommitRecord, WorkingMemoryRecord] | None:
        """Store the WM and mark the commit completed, in one transaction. None when the WM
        changed since Phase 2 read it (the job must run again on the newer WM)."""

    @abstractmethod
    async def schedule_retry(
        self, job: ClaimedJob, delay_seconds: float, events: Sequence[tuple[int, bytes, bool]]
    ) -> None: ...

    @abstractmethod
    async def fail_commit(
        self, job: ClaimedJob, reason: str, message: str, closing_events: ClosingEventsBuilder
    ) -> CommitRecord: ...

    @abstractmethod
    async def open_job_count(self) -> int: ...

    # --- working memory --------------------------------------------------------------------
    @abstractmethod
    async def get_working_memory(
        self, tenant: str, session_id: str, version: int
    ) -> WorkingMemoryRecord | None:
        """The given version, or the latest when version is 0; None when there is none."""

    @abstractmethod
    async def latest_coverage(
        self, tenant: str, session_id: str
    ) -> tuple[WorkingMemoryRecord | None, int]:
        """The latest WM and the highest archive number it covers (0 when none)."""

    @abstractmethod
    async def store_working_memory(
        self,
        tenant: str,
        session_id: str,
        expected_version: int,
        document: str,
        estimated_tokens: int,
    ) -> WorkingMemoryRecord | None:
        """Store a client-applied WM; None when the latest version is not expected_version."""

    # --- archives --------------------------------------------------------------------------
    @abstractmethod
    async def list_archives(
        self, tenant: str, session_id: str, limit: int, after_seq: int
    ) -> list[CommitRecord]: ...

    @abstractmethod
    async def archive_messages(self, tenant: str, session_id: str, seq: int) -> list[Message]: ...

    @abstractmethod
    async def uncovered_messages(
        self, tenant: str, session_id: str, covered_seq: int
    ) -> tuple[list[StoredMessage], list[int]]:
        """Archived messages after archive covered_seq, plus the live ones, in order; and the
        numbers of the archives they come from."""

    @abstractmethod
    async def search_archives(
        self,
        tenant: str,
        session_id: str | None,
        archive_seq: int | None,
        matches: Callable[[Message], bool],
        prefilter: str | None,
        limit: int,
    ) -> tuple[list[SearchMatch], int]:
        """Archived messages for which ``matches`` holds, newest archive first, then in
        message order; ``prefilter`` is a lowercase literal the raw row must contain."""

    # --- idempotency -----------------------------------------------------------------------
    @abstractmethod
    async def remembered(self, tenant: str, method: str, request_id: str) -> str | None: ...

    @abstractmethod
    async def remember(self, tenant: str, method: str, request_id: str, result: str) -> None: ...
