"""Commits: Phase 1 in one unit of work, then a stream of the stored progress events.

The stream is a view over the event log, never the work itself: Phase 2 runs in the worker,
so a client that cancels or loses its stream changes nothing, and any client can re-attach
with WatchCommit from the last sequence it saw. When the server shuts down, an open stream
sends what is stored and ends UNAVAILABLE (reason SHUTTING_DOWN, with ``last_sequence``) rather
than hanging until the grace period cuts it, so the client resumes on another replica at once.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from wm_core import CommitState, Trigger, archive_name, idle_due
from wm_server.cancellation import wait_set
from wm_server.errors import FailedPrecondition, OutOfRange, Unavailable, invalid
from wm_server.services import idempotency, paging, validation
from wm_server.services.commit_event_log import (
    RETRY_REQUESTED,
    EventLog,
    Heartbeat,
    RetryScheduled,
)
from wm_server.services.commit_wakeups import EventBus
from wm_server.services.phase1 import archive, session_commit
from wm_server.services.sessions import find_session, locked_session
from wm_server.services.transactions import retry_conflicts
from wm_server.storage.database import Database
from wm_server.storage.records import CommitRecord, StoredEvent

# A stream yields stored event bytes, or a heartbeat it encodes itself.
# (payload, terminal): each event's bytes as stored, and whether it ends the commit now.
EventStream = AsyncIterator[tuple[bytes, bool]]


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


def beyond_the_log(
    session_id: str, commit_id: str, after_sequence: int, last_sequence: int
) -> OutOfRange:
    return OutOfRange(
        f"after_sequence {after_sequence} is beyond the last event ({last_sequence}) of"
        f" commit {commit_id!r}, which has ended",
        reason="SEQUENCE_OUT_OF_RANGE",
        metadata={
            "session_id": session_id,
            "commit_id": commit_id,
            "after_sequence": str(after_sequence),
            "last_sequence": str(last_sequence),
        },
    )


class CommitService:
    def __init__(
        self,
        database: Database,
        bus: EventBus,
        log: EventLog,
        *,
        heartbeat_seconds: float,
        tokens: paging.PageTokens,
        on_enqueued: Callable[[], None] = lambda: None,
    ) -> None:
        self._db = database
        self._tokens = tokens
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
    ) -> CommitRecord:
        """Run Phase 1 now and return the commit (its events: :meth:`watch`). A retry with
        the same request id returns the same commit, in its state now."""
        sid = session_id
        rid = validation.request_id(request_id)
        record, created = await self.phase1(
            sid, keep_recent_count, rid, fingerprint, turns=keep_recent_turns
        )
        if created and not record.state.terminal:
            self._on_enqueued()
        return record

    async def commit_idle(self, limit: int = 100) -> list[CommitRecord]:
        """Commit whole every session idle beyond its auto-commit idle timeout; the commits.

        Candidates come from a plain read; each is then locked and checked again, so when
        several replicas sweep at once the first commits and the others find nothing due.
        """
        async with self._db.reader() as uow:
            due = await uow.sessions.idle(time.time(), limit)
        made = [r for tenant, name in due if (r := await self._commit_idle(tenant, name))]
        if any(not r.state.terminal for r in made):
            self._on_enqueued()
        return made

    @retry_conflicts
    async def _commit_idle(self, tenant: str, session_id: str) -> CommitRecord | None:
        async with self._db.unit_of_work() as uow:
            row = await uow.sessions.lock(tenant, session_id)
            now = time.time()
            if row is None or not idle_due(
                row.record.config.auto_commit, message_count=row.record.message_count,
                last_add_time=row.last_add_time, now=now, last_commit_time=row.last_commit_time,
            ):  # fmt: skip
                return None
            record = await archive(uow, self._log, row, 0, None, Trigger.IDLE, skip_if_empty=True)
            await uow.commit()
        return record

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
        """Phase 1 (``phase1.archive``) for a client's commit; (commit, False) when the
        request id matched an earlier commit."""
        req = idempotency.request("Commit", session_id, request_id, fingerprint)
        async with self._db.unit_of_work() as uow:
            prior = await idempotency.replay(uow, req)
            row = await locked_session(uow, session_id)
            if prior is not None:
                return await session_commit(uow, row, prior["commit_id"]), False
            record = await archive(
                uow, self._log, row, keep, request_id, Trigger.CLIENT, turns=turns
            )
            assert record is not None  # a client's commit is stored even when it skips
            await idempotency.remember(uow, req, row.sid, {"commit_id": record.commit_id})
            await uow.commit()
        return record, True

    async def watch(self, session_id: str, commit_id: str, after_sequence: int) -> EventStream:
        """Replay stored events after ``after_sequence``, then tail until the terminal one.

        A resume point beyond the log is OUT_OF_RANGE at once when the commit has ended (no
        event will ever come); while it runs, the stream waits for that sequence and ends
        with the commit either way, OUT_OF_RANGE if the commit ended before reaching it. So
        no stream outlives its commit's terminal event."""
        record = await self.get(session_id, commit_id)
        if after_sequence < 0:
            raise invalid("after_sequence", "must not be negative", "OUT_OF_RANGE")
        last = after_sequence
        if record.last_sequence < last and record.state.terminal:
            raise beyond_the_log(session_id, commit_id, after_sequence, record.last_sequence)
        if record.state.terminal and record.last_sequence <= last:
            return
        # Only a resume point beyond the log needs the commit's state: no stored event after
        # it would tell that the commit has ended.
        beyond = record.last_sequence < last
        with self._bus.subscribe(commit_id) as news:
            while True:
                # What this process stored comes handed over; the log is read only for
                # what it did not (the first round, other replicas' events, a gap).
                stored, read = news.news(last)
                if read:
                    after = stored[-1].sequence if stored else last
                    stored += await self._events_after(commit_id, after)
                for index, event in enumerate(stored):
                    # A FAILED event a RetryCommit followed ended a run, not the commit.
                    yield event.payload, event.terminal and index == len(stored) - 1
                    last = event.sequence
                if stored and stored[-1].terminal:
                    return
                if beyond and not stored:
                    record = await self.get(session_id, commit_id)
                    if record.state.terminal and record.last_sequence < after_sequence:
                        raise beyond_the_log(
                            session_id, commit_id, after_sequence, record.last_sequence
                        )
                    if record.state.terminal and record.last_sequence == after_sequence:
                        return  # it ended exactly at the resume point: nothing left to send
                    beyond = record.last_sequence < after_sequence
                    # else caught up: what follows the resume point is tailed as usual
                if self._bus.closed:
                    raise shutting_down(session_id, commit_id, last)
                if await wait_set(news.woken, self._heartbeat):
                    continue
                # A heartbeat's tick reads the log (a lost wake-up costs latency, not data)
                # and, finding nothing, tells the client the commit's state.
                found = await self._events_after(commit_id, last)
                if found:
                    news.receive(found)  # exact rows: the next round sends them
                else:
                    record = await self.get(session_id, commit_id)
                    if beyond and record.state.terminal:
                        continue  # the next round answers OUT_OF_RANGE
                    yield (
                        self._log.encode(session_id, commit_id, last, Heartbeat(record.state)),
                        False,
                    )

    async def _events_after(self, commit_id: str, after: int) -> list[StoredEvent]:
        async with self._db.reader() as uow:
            return await uow.events.after(commit_id, after)

    async def get(self, session_id: str, commit_id: str) -> CommitRecord:
        sid = session_id
        if not commit_id:
            raise invalid("commit_id", "required", "REQUIRED")
        async with self._db.reader() as uow:
            return await session_commit(uow, await find_session(uow, sid), commit_id)

    async def list(
        self, session_id: str, page_size: int, page_token: str
    ) -> tuple[list[CommitRecord], str]:
        sid = session_id
        size = paging.page_size(page_size)
        offset = self._tokens.decode("commits", page_token, sid) or 0
        async with self._db.reader() as uow:
            row = await find_session(uow, sid)
            records = await uow.commits.page(row.sid, size + 1, offset)
        more = len(records) > size
        token = self._tokens.encode("commits", offset + size, sid) if more else ""
        return records[:size], token

    async def retry(
        self, session_id: str, commit_id: str, request_id: str, fingerprint: str = ""
    ) -> CommitRecord:
        sid = session_id
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
            last = await self._log.append(
                uow,
                session_id,
                commit_id,
                record.last_sequence,
                RetryScheduled(0, 0, RETRY_REQUESTED),
            )
            record = await session_commit(uow, row, commit_id)
            await idempotency.remember(uow, req, row.sid, {"commit_id": record.commit_id})
            await uow.commit()
        return replace(record, last_sequence=last), True
