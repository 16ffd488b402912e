"""The commit event log: typed domain events, numbered in the transaction that stores them.

``EventLog.append`` is the only place that assigns a sequence number: it reserves the next
numbers on the commit row (``last_sequence + 1, …``, row-locked until commit) in the same
unit of work that checked the lease or locked the session, and derives ``terminal`` from the
event type. A failed write rolls its numbers back with it, so sequences have no gaps
whatever fails. (PostgreSQL tells the other replicas with a trigger on the stored rows.)
The wire form is made by one encoder, given by the composition root, so
storage and services never build ``wm.v1`` messages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from wm_core import CommitState, Decision
from wm_server.errors import StorageConflict
from wm_server.llm.chain import LlmCallFinished, LlmCallStarted, OpsParsed
from wm_server.services.commit_wakeups import EventBus
from wm_server.storage.records import CommitRecord
from wm_server.storage.statements import Params, Write
from wm_server.storage.unit_of_work import UnitOfWork


@dataclass(frozen=True, slots=True)
class Phase1Finished:
    """The first event of every commit: what Phase 1 archived, or why it skipped."""

    commit: CommitRecord


@dataclass(frozen=True, slots=True)
class Phase2Started:
    attempt: int
    create: bool  # no previous working memory: create one rather than update
    previous_version: int
    covered_seqs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class GuardDecided:
    decision: Decision


@dataclass(frozen=True, slots=True)
class WorkingMemoryStored:
    version: int
    estimated_tokens: int
    abstract: str
    pending_items: int = 0  # refused items the session keeps for the next update
    pending_dropped: int = (
        0  # past their bound with nowhere to go (extraction off or failing): lost
    )


@dataclass(frozen=True, slots=True)
class MemoriesExtracted:
    """What extraction did to the owner's memories: the commit's stored memory diff (JSON,
    as ``services.extraction.diff_json`` writes it), in the completion's transaction."""

    diff_json: str


@dataclass(frozen=True, slots=True)
class RetryScheduled:
    """Phase 2 will run again: after a transient failure, or because RetryCommit asked."""

    attempt: int
    delay_seconds: float
    reason: str
    next_attempt_at: float | None = None  # epoch seconds
    provider_unavailable: bool = False  # waiting out an outage, not counting attempts
    wait_remaining_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Completed:
    commit: CommitRecord


@dataclass(frozen=True, slots=True)
class Failed:
    commit: CommitRecord


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Not stored: sent to a stream that has waited without news."""

    state: CommitState


CommitEvent = (
    Phase1Finished
    | Phase2Started
    | LlmCallStarted
    | LlmCallFinished
    | OpsParsed
    | GuardDecided
    | WorkingMemoryStored
    | MemoriesExtracted
    | RetryScheduled
    | Completed
    | Failed
    | Heartbeat
)
# (session id, commit id, sequence, event) → the bytes a client receives.
Encoder = Callable[[str, str, int, CommitEvent], bytes]
# An event as stored: (sequence, wire bytes, terminal).
StoredRow = tuple[int, bytes, bool]

RETRY_REQUESTED = "RetryCommit requested"


def is_terminal(event: CommitEvent) -> bool:
    """The last event of a commit: completed, failed, or a skipped Phase 1."""
    if isinstance(event, Phase1Finished):
        return event.commit.state is CommitState.SKIPPED
    return isinstance(event, Completed | Failed)


class EventLog:
    def __init__(self, encode: Encoder, bus: EventBus | None = None) -> None:
        self.encode = encode
        # This process's streams: handed the events a unit stored once it commits, so they
        # send them without reading them back (``EventBus.handed``).
        self._bus = bus

    async def append(
        self, uow: UnitOfWork, session_id: str, commit_id: str, after: int, *events: CommitEvent
    ) -> int:
        """Store ``events`` after the commit's last one, ``after`` (read under the lock that
        every writer of the commit takes); return the new last sequence.

        Numbers, payloads and the commit's counter go in one step, so a failure anywhere
        leaves no number used up. Should ``after`` be stale all the same, nothing is kept:
        the unit of work runs again (``StorageConflict``).
        """
        if not events:
            return after
        rows = self._rows(session_id, commit_id, after, events)
        last = rows[-1][0]
        stored = await uow.commits.extend_events(
            commit_id, after, last, storing=[uow.events.inserting(commit_id, rows)]
        )
        if not stored:
            raise StorageConflict(f"events of commit {commit_id} were appended concurrently")
        self._hand_over(uow, commit_id, rows)
        return last

    async def append_if(
        self,
        uow: UnitOfWork,
        session_id: str,
        commit_id: str,
        after: int,
        events: Sequence[CommitEvent],
        condition: str,
        params: Params,
    ) -> int | None:
        """``append`` only while the commit's last event is still ``after`` and
        ``condition`` holds, checked by the statement that moves the number
        (``CommitRepository.extend_events_if``): the new last sequence, or None with
        nothing written. For a writer that knows ``after`` without reading it (the lease
        holder) where a statement is no round trip (``append_if_and_commit`` where it is)."""
        rows = self._rows(session_id, commit_id, after, events)
        last = rows[-1][0]
        stored = await uow.commits.extend_events_if(
            commit_id, after, last, condition, params,
            storing=[uow.events.inserting(commit_id, rows)],
        )  # fmt: skip
        if not stored:
            return None
        self._hand_over(uow, commit_id, rows)
        return last

    async def append_if_and_commit(
        self,
        uow: UnitOfWork,
        session_id: str,
        commit_id: str,
        after: int,
        events: Sequence[CommitEvent],
        condition: str,
        params: Params,
    ) -> int | None:
        """``append_if`` as one statement (``CommitRepository.extending_if``; where a
        statement is a round trip), run last in ``uow``, which then commits (a
        ``Database.statement`` unit committed as it ran): the new last sequence, or None
        with nothing stored. For a writer that knows ``after`` without reading it (the lease
        holder)."""
        rows = self._rows(session_id, commit_id, after, events)
        write = uow.commits.extending_if(commit_id, after, rows, condition, params)
        if await uow.commit_with(write) != len(rows):
            return None
        if self._bus is not None:  # committed already: no unit left to wait for
            self._bus.handed(commit_id, rows)
        return rows[-1][0]

    async def append_and_commit(
        self,
        uow: UnitOfWork,
        session_id: str,
        commit_id: str,
        after: int,
        events: Sequence[CommitEvent],
        *,
        together: bool,
    ) -> int:
        """``append``, then commit ``uow``; the new last sequence. ``together`` (where a
        statement is a round trip): the events go with the COMMIT (``appending``), one round
        trip fewer."""
        if together and events:
            write, last = self.appending(uow, session_id, commit_id, after, events)
            await uow.commit_with(write)
            return last
        last = await self.append(uow, session_id, commit_id, after, *events)
        await uow.commit()
        return last

    def appending(
        self,
        uow: UnitOfWork,
        session_id: str,
        commit_id: str,
        after: int,
        events: Sequence[CommitEvent],
    ) -> tuple[Write, int]:
        """``append`` as one statement that a unit may send with its COMMIT, for a writer
        that read ``after`` under the lock every writer of the commit takes: should it be
        stale all the same, the statement fails and nothing is kept (``StorageConflict``,
        ``CommitRepository.extending``; PostgreSQL). The write and the new last sequence."""
        rows = self._rows(session_id, commit_id, after, events)
        write = uow.commits.extending(commit_id, after, rows)
        self._hand_over(uow, commit_id, rows)  # a stale ``after`` fails the COMMIT
        return write, rows[-1][0]

    def _hand_over(self, uow: UnitOfWork, commit_id: str, rows: list[StoredRow]) -> None:
        """Hand ``rows`` to this process's streams once ``uow`` has committed them."""
        bus = self._bus
        if bus is not None:
            uow.on_commit(lambda: bus.handed(commit_id, rows))

    def _rows(
        self, session_id: str, commit_id: str, after: int, events: Sequence[CommitEvent]
    ) -> list[StoredRow]:
        """Each event numbered after ``after``: (sequence, wire bytes, terminal)."""
        return [
            (seq, self.encode(session_id, commit_id, seq, event), is_terminal(event))
            for seq, event in enumerate(events, start=after + 1)
        ]
