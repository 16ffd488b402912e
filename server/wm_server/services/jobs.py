"""The Phase 2 job use cases the worker runs: claim, renew, release, read the input, record
progress, complete, schedule a retry, fail.

Every write of a job holder first checks, in its own unit of work, that this worker still
holds the lease (``LeaseLost`` otherwise: another worker took the expired lease), and stores
its events through the one event log in that same unit of work.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace

from wm_core import CommitState, Message
from wm_server.services.events import (
    CommitEvent,
    Completed,
    EventLog,
    Failed,
    MemoriesExtracted,
    Phase2Started,
    RetryScheduled,
    WorkingMemoryStored,
)
from wm_server.services.extraction import (
    Extraction,
    MemoryContext,
    MemoryState,
    diff_json,
    memory_context,
    message_dates,
)
from wm_server.services.memories import MemorySources, apply_plan
from wm_server.services.transactions import retry_conflicts
from wm_server.storage.database import Database
from wm_server.storage.records import (
    ClaimedJob,
    CommitRecord,
    Phase2Completion,
    Phase2Input,
    WorkingMemoryRecord,
)
from wm_server.storage.unit_of_work import UnitOfWork

# Archived messages Phase 2 puts into the full-text index per transaction (Phase 1 has
# indexed the first ``ArchiveRepository.indexed_at_commit``): tens of microseconds a message.
INDEX_CHUNK = 500


class LeaseLost(Exception):
    """This worker no longer holds the job's lease (it expired and another took it)."""


async def _hold(uow: UnitOfWork, job: ClaimedJob) -> int:
    """Hold the job's row until commit; the commit's last event number."""
    held = await uow.jobs.holder(job.commit_id)
    if held is None or held[0] != job.lease_token:
        raise LeaseLost(job.commit_id)
    return held[1]


class JobService:
    def __init__(self, database: Database, log: EventLog) -> None:
        self._db = database
        self._log = log

    @retry_conflicts
    async def claim(self, lease_seconds: float) -> ClaimedJob | None:
        """The oldest runnable job whose session has no earlier unfinished archive."""
        async with self._db.unit_of_work() as uow:
            found = await uow.jobs.next_claimable()
            if found is None:
                return None
            session = await uow.sessions.by_sid(found.sid)
            assert session is not None
            token = uuid.uuid4().hex
            await uow.jobs.lease(found.commit_id, found.attempts + 1, token, lease_seconds)
            await uow.commit()
        record = session.record
        return ClaimedJob(
            found.commit_id, record.tenant, record.session_id, found.seq, found.attempts + 1,
            token, found.create_time,
        )  # fmt: skip

    @retry_conflicts
    async def renew(self, job: ClaimedJob, lease_seconds: float) -> bool:
        async with self._db.unit_of_work() as uow:
            renewed = await uow.jobs.renew(job.commit_id, job.lease_token, lease_seconds)
            await uow.commit()
        return renewed

    @retry_conflicts
    async def release(self, job: ClaimedJob) -> None:
        """Give the job back to the queue (shutdown) without counting an attempt."""
        async with self._db.unit_of_work() as uow:
            await uow.jobs.release(job.commit_id, job.lease_token)
            await uow.commit()

    async def open_count(self) -> int:
        async with self._db.reader() as uow:
            return await uow.jobs.open_count()

    async def read_input(self, job: ClaimedJob) -> Phase2Input:
        """The previous WM and the messages to cover: this archive and earlier failed,
        uncovered ones, in order."""
        async with self._db.scanner() as uow:
            row = await uow.sessions.find(job.tenant, job.session_id)
            if row is None:
                raise LeaseLost(job.commit_id)
            previous = await uow.working_memories.get(row, row.record.wm_version)
            pending = await uow.pending_items.of_session(row.sid)
            seqs = await uow.commits.failed_uncovered_before(row.sid, job.archive_seq)
            seqs.append(job.archive_seq)
            messages: list[Message] = []
            dates: dict[str, str] = {}
            for seq in seqs:
                bounds = await uow.archives.bounds(row.sid, seq)
                if bounds is not None:
                    stored = await uow.messages.between(row.sid, *bounds)
                    messages.extend(m.message for m in stored)
                    dates.update(message_dates(stored))
        return Phase2Input(
            previous, tuple(messages), tuple(seqs), row.record.config.provider, tuple(pending),
            dates,
        )  # fmt: skip

    @retry_conflicts
    async def index_archive(self, job: ClaimedJob, chunk: int = INDEX_CHUNK) -> None:
        """Put what Phase 1 left of the job's archive into the ranked search index (Phase 1
        indexes the first ``indexed_at_commit``), ``chunk`` messages per transaction,
        before the commit can complete: completed means searchable. SQLite has one writer,
        so one transaction indexing a 5,000-message archive would hold every session's
        writes for a fifth of a second. Each chunk replaces what an earlier attempt put
        there, under the lease."""
        async with self._db.reader() as uow:
            row = await uow.sessions.find(job.tenant, job.session_id)
            if row is None:
                raise LeaseLost(job.commit_id)
            bounds = await uow.archives.bounds(row.sid, job.archive_seq)
            indexed = uow.archives.indexed_at_commit
        if bounds is None:
            return
        first, last = bounds
        for start in range(first + indexed, last + 1, chunk):
            async with self._db.unit_of_work() as uow:
                await _hold(uow, job)
                end = min(start + chunk - 1, last)
                await uow.archives.index_messages(row.sid, job.archive_seq, start, end)
                await uow.commit()

    async def memory_context(
        self, job: ClaimedJob, messages: tuple[Message, ...], *, enabled_by_server: bool
    ) -> MemoryContext:
        """What memory extraction reads before its model call (see services.extraction)."""
        async with self._db.scanner() as uow:
            context = await memory_context(
                uow, tenant=job.tenant, session_id=job.session_id, archive_seq=job.archive_seq,
                messages=messages, enabled_by_server=enabled_by_server,
            )  # fmt: skip
        if context is None:
            raise LeaseLost(job.commit_id)
        return context

    @retry_conflicts
    async def start(self, job: ClaimedJob, data: Phase2Input) -> None:
        """Mark the commit running and say what this attempt covers."""
        previous = data.previous
        started = Phase2Started(
            job.attempts, previous is None, previous.version if previous else 0, data.covered_seqs
        )
        async with self._db.unit_of_work() as uow:
            after = await _hold(uow, job)
            await uow.commits.set_state(job.commit_id, CommitState.RUNNING, job.attempts)
            await self._log.append(uow, job.commit_id, after, started)
            await uow.commit()

    @retry_conflicts
    async def record(self, job: ClaimedJob, *events: CommitEvent) -> None:
        """Store progress events of a job this worker holds."""
        async with self._db.unit_of_work() as uow:
            after = await _hold(uow, job)
            await self._log.append(uow, job.commit_id, after, *events)
            await uow.commit()

    @retry_conflicts
    async def complete(
        self,
        job: ClaimedJob,
        expected_previous_version: int,
        completion: Phase2Completion,
        events: tuple[CommitEvent, ...] = (),
        extraction: Extraction | None = None,
    ) -> tuple[CommitRecord, WorkingMemoryRecord] | None:
        """Store the WM and mark the commit completed, with ``events`` before the closing
        ones. None when the WM changed since Phase 2 read it (run again on the newer one).

        ``extraction``'s plan is applied to the owner's memories in this same transaction
        (memories, versions, sources and their full-text index), and its diff is stored on
        the commit and streamed before the closing events: the commit is terminal only with
        its memories searchable, and a run that loses its lease here applies nothing."""
        async with self._db.unit_of_work() as uow:
            after = await _hold(uow, job)
            row = await uow.sessions.lock(job.tenant, job.session_id)
            if row is None:
                raise LeaseLost(job.commit_id)
            if row.record.wm_version != expected_previous_version:
                return None
            now = time.time()
            memory_writes = []
            memory_events: tuple[CommitEvent, ...] = ()
            diff_text, memory_state = "", ""
            if extraction is not None:
                applied = None
                if extraction.state is MemoryState.EXTRACTED and extraction.owner is not None:
                    applied = await apply_plan(
                        uow, tenant=job.tenant, owner=extraction.owner, plan=extraction.plan,
                        sources=MemorySources(job.session_id, job.archive_seq), now=now,
                    )  # fmt: skip
                    if extraction.recovered_seqs:
                        memory_writes.append(
                            uow.commits.memory_recovering(row.sid, extraction.recovered_seqs)
                        )
                diff_text, memory_state = diff_json(extraction, applied), extraction.state.value
                memory_events = (MemoriesExtracted(diff_text),)
            version = expected_previous_version + 1
            earlier = [s for s in completion.covered_seqs if s != job.archive_seq]
            await uow.write(
                uow.working_memories.inserting(
                    row.sid, version, completion.document, archive_seq=job.archive_seq,
                    covered_seq=job.archive_seq, commit_id=job.commit_id,
                    tokens=completion.estimated_tokens, now=now,
                    decisions_json=completion.decisions_json,
                ),
                uow.sessions.setting_wm_version(row.sid, version, now),
                uow.archives.setting_abstract(row.sid, job.archive_seq, completion.abstract),
                *([uow.commits.covering(row.sid, earlier, job.archive_seq)] if earlier else []),
                *(
                    uow.pending_items.replacing(row.sid, job.archive_seq, completion.pending)
                    if completion.pending is not None
                    else []
                ),
                uow.jobs.finishing(job.commit_id),
                *memory_writes,
                uow.commits.completing(
                    job.commit_id, job.attempts, version=version,
                    usage_json=completion.usage_json, decisions_json=completion.decisions_json,
                    now=now, memory_diff_json=diff_text, memory_state=memory_state,
                ),
            )  # fmt: skip
            record = await uow.commits.get(job.commit_id)
            assert record is not None
            wm = WorkingMemoryRecord(
                job.tenant, job.session_id, version, completion.document, job.archive_seq,
                job.commit_id, completion.estimated_tokens, now, completion.decisions_json,
            )  # fmt: skip
            stored = WorkingMemoryStored(
                version, wm.estimated_tokens, record.abstract,
                len(completion.pending or ()), completion.pending_dropped,
            )  # fmt: skip
            last = await self._log.append(
                uow, job.commit_id, after, *events, stored, *memory_events, Completed(record)
            )
            await uow.commit()
        return _with_last(record, last), wm

    @retry_conflicts
    async def schedule_retry(
        self,
        job: ClaimedJob,
        delay_seconds: float,
        reason: str,
        *,
        next_attempt_at: float | None = None,
        wait_remaining: float | None = None,
    ) -> None:
        """Queue the job again after ``delay_seconds``; ``wait_remaining`` (seconds before
        the job's maximum age) marks the wait for a provider outage."""
        event = RetryScheduled(
            job.attempts,
            delay_seconds,
            reason,
            next_attempt_at if next_attempt_at is not None else time.time() + delay_seconds,
            provider_unavailable=wait_remaining is not None,
            wait_remaining_seconds=wait_remaining or 0.0,
        )
        async with self._db.unit_of_work() as uow:
            after = await _hold(uow, job)
            await uow.jobs.requeue(job.commit_id, delay_seconds, reset_attempts=False)
            await uow.commits.set_state(job.commit_id, CommitState.PENDING, job.attempts)
            await self._log.append(uow, job.commit_id, after, event)
            await uow.commit()

    @retry_conflicts
    async def fail(self, job: ClaimedJob, reason: str, message: str) -> CommitRecord:
        async with self._db.unit_of_work() as uow:
            after = await _hold(uow, job)
            await uow.commits.set_state(
                job.commit_id, CommitState.FAILED, job.attempts, error=(reason, message),
                now=time.time(),
            )  # fmt: skip
            await uow.write(uow.jobs.finishing(job.commit_id))
            record = await uow.commits.get(job.commit_id)
            assert record is not None
            last = await self._log.append(uow, job.commit_id, after, Failed(record))
            await uow.commit()
        return _with_last(record, last)


def _with_last(record: CommitRecord, last: int) -> CommitRecord:
    return replace(record, last_sequence=last)
