"""Commits: Phase 1 in one unit of work, then a stream of the stored progress events.

The stream is a view over the event log, never the work itself: Phase 2 runs in the worker,
so a client that cancels or loses its stream changes nothing, and any client can re-attach
with WatchCommit from the last sequence it saw. When the server shuts down, an open stream
sends what is stored and ends UNAVAILABLE (reason SHUTTING_DOWN, with ``last_sequence``) rather
than hanging until the grace period cuts it, so the client resumes on another replica at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from wm_core import (
    NeedRows,
    SplitRow,
    is_request,
    rebuild_rule,
    split_boundary,
    turn_aligned,
    turn_start,
)
from wm_server.errors import FailedPrecondition, NotFound, Unavailable, invalid
from wm_server.services import idempotency, paging, validation
from wm_server.services.event_bus import EventBus
from wm_server.services.events import (
    RETRY_REQUESTED,
    EventLog,
    Heartbeat,
    Phase1Finished,
    RetryScheduled,
)
from wm_server.services.sessions import find_session, locked_session
from wm_server.services.transactions import retry_conflicts
from wm_server.storage.database import Database
from wm_server.storage.records import (
    CommitRecord,
    CommitState,
    SkipReason,
    StoredEvent,
    archive_name,
)
from wm_server.storage.repositories import SessionRow
from wm_server.storage.unit_of_work import UnitOfWork

# A stream yields stored event bytes, or a heartbeat it encodes itself.
EventStream = AsyncIterator[bytes]


def shutting_down(session_id: str, commit_id: str, last_sequence: int) -> Unavailable:
    """The stream ends because the server stops; the metadata says where to resume."""
    return Unavailable(
        "the server is shutting down; resume with WatchCommit after last_sequence",
        reason="SHUTTING_DOWN",
        metadata={
            "session_id": session_id,
            "commit_id": commit_id,
            "last_sequence": str(last_sequence),
        },
    )


def commit_not_found(session_id: str, commit_id: str) -> NotFound:
    return NotFound(
        f"commit {commit_id!r} not found in session {session_id!r}",
        reason="COMMIT_NOT_FOUND",
        metadata={"session_id": session_id, "commit_id": commit_id},
    )


async def session_commit(uow: UnitOfWork, row: SessionRow, commit_id: str) -> CommitRecord:
    record = await uow.commits.get(commit_id, row.sid)
    if record is None:
        raise commit_not_found(row.record.session_id, commit_id)
    return record


async def kept_from(uow: UnitOfWork, sid: int, first: int, next_pos: int, keep: int) -> int:
    """The first position a commit keeps (``wm_core.split_boundary``), fetching the rows and
    the tool-call positions the rule asks for."""
    rows: list[SplitRow] = []
    since: int | None = None
    calls: dict[str, int | None] = {}
    while True:
        answer = split_boundary(first, next_pos, keep, rows, since, calls)
        if not isinstance(answer, NeedRows):
            return answer
        if answer.since < answer.until:
            rows.extend(
                SplitRow(position, (), results)
                for position, results in await uow.messages.results_between(
                    sid, answer.since, answer.until
                )
            )
            since = answer.since
        if answer.calls:
            found = await uow.tool_calls.positions(sid, sorted(answer.calls))
            calls.update({tid: found.get(tid) for tid in answer.calls})


async def newest_requests(
    uow: UnitOfWork, sid: int, first: int, before: int, count: int
) -> list[int]:
    """Positions of the newest ``count`` requests (``wm_core.is_request``) in [first, before),
    newest first; fewer when there are fewer."""
    found: list[int] = []
    while len(found) < count and before > first:
        batch = await uow.messages.user_texts_before(sid, first, before, max(count, 16))
        found.extend(m.position for m in batch if is_request(m.message))
        if len(batch) < max(count, 16):
            break
        before = batch[-1].position
    return found[:count]


async def kept_turns_from(uow: UnitOfWork, sid: int, first: int, next_pos: int, turns: int) -> int:
    """The first position a commit keeping the newest ``turns`` turns keeps: the start of a
    turn, moved earlier (to an earlier turn's start) when a kept tool result answers a call
    made before it."""
    start = turn_start(await newest_requests(uow, sid, first, next_pos, turns), turns, first)
    while True:
        boundary = await kept_from(uow, sid, first, next_pos, next_pos - start)
        if boundary >= start:
            return boundary
        aligned = turn_aligned(
            boundary, await newest_requests(uow, sid, first, boundary + 1, 1), first
        )
        if aligned == boundary:
            return boundary
        start = aligned


MAX_KEEP_TURNS = 1000


class CommitService:
    def __init__(
        self,
        database: Database,
        bus: EventBus,
        log: EventLog,
        *,
        heartbeat_seconds: float,
        on_enqueued: Callable[[], None] = lambda: None,
    ) -> None:
        self._db = database
        self._bus = bus
        self._log = log
        self._heartbeat = min(heartbeat_seconds, 15.0)
        self._on_enqueued = on_enqueued

    async def commit(
        self,
        session_id: str,
        keep_recent_count: int,
        request_id: str,
        fingerprint: str = "",
        keep_recent_turns: int = 0,
    ) -> tuple[CommitRecord, EventStream]:
        """Run Phase 1 now; return the commit and the stream of all its events."""
        sid = validation.session_id(session_id)
        if not 0 <= keep_recent_count <= validation.MAX_KEEP_RECENT:
            raise invalid(
                "keep_recent_count", f"must be 0-{validation.MAX_KEEP_RECENT}", "OUT_OF_RANGE"
            )
        if not 0 <= keep_recent_turns <= MAX_KEEP_TURNS:
            raise invalid("keep_recent_turns", f"must be 0-{MAX_KEEP_TURNS}", "OUT_OF_RANGE")
        if keep_recent_turns and keep_recent_count:
            raise invalid(
                "keep_recent_turns", "give keep_recent_count or keep_recent_turns, not both",
                "CONFLICT",
            )  # fmt: skip
        rid = validation.request_id(request_id)
        record, created = await self.phase1(
            sid, keep_recent_count, rid, fingerprint, turns=keep_recent_turns
        )
        if created and not record.state.terminal:
            self._on_enqueued()
        return record, self.watch(sid, record.commit_id, 0)

    @retry_conflicts
    async def phase1(
        self,
        session_id: str,
        keep: int,
        request_id: str | None,
        fingerprint: str = "",
        *,
        turns: int = 0,
    ) -> tuple[CommitRecord, bool]:
        """Archive all but the newest ``keep`` messages, or with ``turns`` all but the newest
        turns (never splitting a tool call from its result, nor a turn), remember how many
        messages were kept, reset pending, enqueue Phase 2 and store the first event;
        (commit, False) when the request id matched an earlier commit."""
        req = idempotency.request("Commit", session_id, request_id, fingerprint)
        async with self._db.unit_of_work() as uow:
            prior = await idempotency.replay(uow, req)
            row = await locked_session(uow, session_id)
            if prior is not None:
                return await session_commit(uow, row, prior["commit_id"]), False
            commit_id = validation.new_commit_id()
            first, next_pos = row.first_live, row.next_position
            total = next_pos - first
            if turns:
                boundary = await kept_turns_from(uow, row.sid, first, next_pos, turns)
                keep = next_pos - boundary  # the window of pending_tokens counts messages
            else:
                boundary = await kept_from(uow, row.sid, first, next_pos, keep)
            archived = boundary - first
            now = time.time()
            kept = await uow.messages.tokens_from(row.sid, boundary)
            archives = row.record.archive_count
            if total == 0 or archived <= 0:
                reason = SkipReason.NO_MESSAGES if total == 0 else SkipReason.WITHIN_KEEP_WINDOW
                await uow.commits.insert(
                    commit_id, row.sid, state=CommitState.SKIPPED, keep=keep, archive_seq=None,
                    archived=0, kept=total, archived_tokens=0, skip_reason=reason,
                    request_id=request_id, now=now,
                )  # fmt: skip
            else:
                archives += 1
                archived_tokens = row.record.live_tokens - sum(kept)
                await uow.archives.insert(
                    row.sid, archives, commit_id, message_count=archived, tokens=archived_tokens,
                    first=first, last=boundary - 1, now=now,
                )  # fmt: skip
                await uow.commits.insert(
                    commit_id, row.sid, state=CommitState.PENDING, keep=keep,
                    archive_seq=archives, archived=archived, kept=total - archived,
                    archived_tokens=archived_tokens, skip_reason=None, request_id=request_id,
                    now=now,
                )  # fmt: skip
                await uow.jobs.enqueue(commit_id, row.sid, archives, now)
            pending, live = rebuild_rule(kept, keep)  # the window may have a new keep
            await uow.sessions.set_window(
                row.sid, first_live=boundary, message_count=total - archived,
                archive_count=archives, keep=keep, pending=pending, live=live, now=now,
            )  # fmt: skip
            record = await session_commit(uow, row, commit_id)
            last = await self._log.append(uow, commit_id, Phase1Finished(record))
            await idempotency.remember(uow, req, row.sid, {"commit_id": commit_id})
            await uow.commit()
        return replace(record, last_sequence=last), True

    async def watch(self, session_id: str, commit_id: str, after_sequence: int) -> EventStream:
        """Replay stored events after ``after_sequence``, then tail until the terminal one."""
        record = await self.get(session_id, commit_id)
        if after_sequence < 0:
            raise invalid("after_sequence", "must not be negative", "OUT_OF_RANGE")
        last = after_sequence
        if record.state.terminal and record.last_sequence <= last:
            return
        with self._bus.subscribe(commit_id) as wake:
            while True:
                wake.clear()
                stored = await self._events_after(commit_id, last)
                for event in stored:
                    yield event.payload
                    last = event.sequence
                if stored and stored[-1].terminal:
                    return
                if self._bus.closed:
                    raise shutting_down(session_id, commit_id, last)
                try:
                    await asyncio.wait_for(wake.wait(), self._heartbeat)
                except TimeoutError:
                    if not await self._events_after(commit_id, last):
                        record = await self.get(session_id, commit_id)
                        yield self._log.encode(commit_id, last, Heartbeat(record.state))

    async def _events_after(self, commit_id: str, after: int) -> list[StoredEvent]:
        async with self._db.reader() as uow:
            return await uow.events.after(commit_id, after)

    async def get(self, session_id: str, commit_id: str) -> CommitRecord:
        sid = validation.session_id(session_id)
        if not commit_id:
            raise invalid("commit_id", "required", "REQUIRED")
        async with self._db.reader() as uow:
            return await session_commit(uow, await find_session(uow, sid), commit_id)

    async def list(
        self, session_id: str, page_size: int, page_token: str
    ) -> tuple[list[CommitRecord], str]:
        sid = validation.session_id(session_id)
        size = paging.page_size(page_size)
        offset = paging.decode("commits", page_token) or 0
        async with self._db.reader() as uow:
            row = await find_session(uow, sid)
            records = await uow.commits.page(row.sid, size + 1, offset)
        more = len(records) > size
        return records[:size], paging.encode("commits", offset + size) if more else ""

    async def retry(
        self, session_id: str, commit_id: str, request_id: str, fingerprint: str = ""
    ) -> CommitRecord:
        sid = validation.session_id(session_id)
        if not commit_id:
            raise invalid("commit_id", "required", "REQUIRED")
        rid = validation.request_id(request_id)
        record, requeued = await self._requeue(sid, commit_id, rid, fingerprint)
        if requeued:
            self._bus.publish(commit_id)
            self._on_enqueued()
        return record

    @retry_conflicts
    async def _requeue(
        self, session_id: str, commit_id: str, request_id: str | None, fingerprint: str
    ) -> tuple[CommitRecord, bool]:
        """Put a failed, uncovered commit back in the queue."""
        req = idempotency.request(
            "RetryCommit", f"{session_id}/{commit_id}", request_id, fingerprint
        )
        async with self._db.unit_of_work() as uow:
            prior = await idempotency.replay(uow, req)
            row = await locked_session(uow, session_id)
            record = await session_commit(uow, row, commit_id)
            if prior is not None:
                return record, False
            if record.covered_by_seq is not None:
                cover = record.covered_by_commit_id
                raise FailedPrecondition(
                    f"commit {commit_id} was covered by commit {cover}"
                    f" ({archive_name(record.covered_by_seq)})",
                    reason="COMMIT_ALREADY_COVERED",
                    metadata={"commit_id": commit_id, "covered_by_commit_id": cover or ""},
                )
            if record.state is not CommitState.FAILED:
                raise FailedPrecondition(
                    f"commit {commit_id} is {record.state.value}, only a failed commit can be"
                    " retried",
                    reason="COMMIT_NOT_FAILED",
                    metadata={"commit_id": commit_id, "state": record.state.value},
                )
            await uow.commits.set_state(commit_id, CommitState.PENDING, 0)
            await uow.jobs.requeue(commit_id, 0, reset_attempts=True)
            last = await self._log.append(uow, commit_id, RetryScheduled(0, 0, RETRY_REQUESTED))
            record = await session_commit(uow, row, commit_id)
            await idempotency.remember(uow, req, row.sid, {"commit_id": commit_id})
            await uow.commit()
        return replace(record, last_sequence=last), True
