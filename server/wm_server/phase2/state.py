"""What one Phase 2 attempt carries from stage to stage: immutable values, each stage
returning a new ``State`` with its own part filled in (``phase2/stages.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from wm_core import Message, PendingItem
from wm_server.llm.chain import Generation
from wm_server.services.embedding_index import VectorRow
from wm_server.services.extraction import Extraction, MemoryContext
from wm_server.services.memory_content import MemoryOwner, owner_of
from wm_server.storage.records import SearchRow, StoredMessage, WorkingMemoryRecord
from wm_server.storage.sessions import SessionRow


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A Phase 2 job this worker holds the lease of, and what its attempt covers (set by the
    claim's transaction, which told the watchers in a ``Phase2Started`` event)."""

    commit_id: str
    tenant: str
    session_id: str
    archive_seq: int
    attempts: int
    lease_token: str
    queued_at: float = 0.0  # epoch seconds: the job's age bounds how long an outage is waited out
    previous_version: int = 0  # the working memory this attempt updates (0: it creates one)
    covered_seqs: tuple[int, ...] = ()  # the archive and earlier failed, uncovered ones
    sid: int = 0  # the session's key (its reads need no lookup by name first)
    # The commit's last event number as this attempt last wrote it: a hint that lets a
    # progress write check the lease and append in one statement (``JobStore.record``).
    last_sequence: int = 0
    # Whether another job was claimable when the claim found this one: only then does the
    # worker wake another claiming loop (an empty claim is a transaction beside the job's).
    others_claimable: bool = True
    # The session's row as the claim (or a restart) read it: the attempt's input is read
    # without reading it again; the completion checks it afresh, under its lock.
    session: SessionRow | None = None


@dataclass(frozen=True, slots=True)
class Phase2Input:
    """What Phase 2 of one archive reads: the previous WM and the messages to cover."""

    previous: WorkingMemoryRecord | None
    messages: tuple[Message, ...]
    covered_seqs: tuple[int, ...]  # the archive itself plus earlier failed, uncovered ones
    provider: str | None = None  # the session's choice of model provider (None: the default)
    pending: tuple[PendingItem, ...] = ()  # refused earlier, shown in the update prompt
    # message id → ISO date the server stored it ("yesterday" in it is resolved against it)
    message_dates: Mapping[str, str] = field(default_factory=dict)
    sid: int = 0  # the session's key
    archive: tuple[StoredMessage, ...] = ()  # the job's own archive (what is indexed)
    archive_time: float = 0.0  # when that archive was made (its search rows carry it)
    # The session's row as the claim read it (``ClaimedJob.session``): extraction takes its
    # owner (whose memories) and settings from it instead of reading it again
    # (``memory_subject``).
    session: SessionRow | None = None

    @property
    def owner(self) -> MemoryOwner | None:
        """Whose memories, as the session said when this was read."""
        return owner_of(self.session) if self.session is not None else None


@dataclass(frozen=True, slots=True)
class Phase2Completion:
    """The working memory and what goes with it, stored by the completion's transaction."""

    document: str
    estimated_tokens: int
    abstract: str
    decisions_json: str
    usage_json: str
    covered_seqs: tuple[int, ...]
    pending: tuple[PendingItem, ...] | None = None  # the session's new pending items; None: as is
    pending_dropped: int = 0  # past the bound with nowhere to go (extraction off or failing): lost


@dataclass(frozen=True, slots=True)
class ArchiveIndex:
    """What makes the job's archive searchable and is not written yet: the last chunk of
    its full-text rows and of its message vectors (earlier chunks of a long archive are
    written by ``embed_and_index`` itself), stored by the completion."""

    text: tuple[SearchRow, ...] = ()
    vectors: tuple[VectorRow, ...] = ()
    model: str = ""  # the embedder's model id ("" without an embedder)


@dataclass(frozen=True, slots=True)
class State:
    """One attempt so far; each stage's field is None (or empty) until it ran."""

    job: ClaimedJob
    input: Phase2Input | None = None  # bound_input
    generation: Generation | None = None  # update_working_memory
    pending: tuple[PendingItem, ...] = ()  # the session's pending items after this commit
    dropped: tuple[PendingItem, ...] = ()  # taken off the list by its bound
    memories: MemoryContext | None = None  # extraction's reads, beside update_working_memory
    extraction: Extraction | None = None  # extract_memories
    lost: tuple[PendingItem, ...] = ()  # dropped with nowhere to go (counted, logged)
    index: ArchiveIndex | None = None  # embed_and_index

    @property
    def data(self) -> Phase2Input:
        assert self.input is not None, "bound_input runs first"
        return self.input

    @property
    def generated(self) -> Generation:
        assert self.generation is not None, "update_working_memory runs first"
        return self.generation

    @property
    def extracted(self) -> Extraction:
        assert self.extraction is not None, "extract_memories runs first"
        return self.extraction
