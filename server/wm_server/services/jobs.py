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

from wm_core import Message
from wm_server.services.events import (
    CommitEvent,
    Completed,
    EventLog,
    Failed,
    Phase2Started,
    RetryScheduled,
    WorkingMemoryStored,
)
from wm_server.services.transactions import retry_conflicts
from wm_server.storage.database import Database
from wm_server.storage.records import (
    ClaimedJob,
    CommitRecord,
    CommitState,
    Phase2Completion,
    Phase2Input,
    WorkingMemoryRecord,
)
from wm_server.storage.unit_of_work import UnitOfWork


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
            found.commit_id, record.tenant, record.session_id, found.seq, found.attempts + 1, token
        )

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
            seqs = await uow.commits.failed_uncovered_before(row.sid, job.archive_seq)
            seqs.append(job.archive_seq)
            messages: list[Message] = []
            for seq in seqs:
                bounds = await uow.archives.bounds(row.sid, seq)
                if bounds is not None:
                    messages.extend(m.message for m in await uow.messages.between(row.sid, *bounds))
        return Phase2Input(previous, tuple(messages), tuple(seqs), row.record.config.provider)

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
    ) -> tuple[CommitRecord, WorkingMemoryRecord] | None:
        """Store the WM and mark the commit completed, with ``events`` before the closing
        ones. None when the WM changed since Phase 2 read it (run again on the newer one)."""
        async with self._db.unit_of_work() as uow:
            after = await _hold(uow, job)
            row = await uow.sessions.lock(job.tenant, job.session_id)
            if row is None:
                raise LeaseLost(job.commit_id)
            if row.record.wm_version != expected_previous_version:
                return None
            now = time.time()
            version = expected_previous_version + 1
            earlier = [s for s in completion.covered_seqs if s != job.archive_seq]
            await uow.write(
                uow.working_memories.inserting(
                    row.sid, version, completion.document, archive_seq=job.archive_seq,
                    covered_seq=job.archive_seq, commit_id=job.commit_id,
                    tokens=completion.estimated_tokens, now=now,
                ),
                uow.sessions.setting_wm_version(row.sid, version, now),
                uow.archives.setting_abstract(row.sid, job.archive_seq, completion.abstract),
                *([uow.commits.covering(row.sid, earlier, job.archive_seq)] if earlier else []),
                uow.jobs.finishing(job.commit_id),
                uow.commits.completing(
                    job.commit_id, job.attempts, version=version,
                    usage_json=completion.usage_json, decisions_json=completion.decisions_json,
                    now=now,
                ),
            )  # fmt: skip
            record = await uow.commits.get(job.commit_id)
            assert record is not None
            wm = WorkingMemoryRecord(
                job.tenant, job.session_id, version, completion.document, job.archive_seq,
                job.commit_id, completion.estimated_tokens, now,
            )  # fmt: skip
            stored = WorkingMemoryStored(version, wm.estimated_tokens, record.abstract)
            last = await self._log.append(
                uow, job.commit_id, after, *events, stored, Completed(record)
            )
            await uow.commit()
        return _with_last(record, last), wm

    @retry_conflicts
    async def schedule_retry(self, job: ClaimedJob, delay_seconds: float, reason: str) -> None:
        async with self._db.unit_of_work() as uow:
            after = await _hold(uow, job)
            await uow.jobs.requeue(job.commit_id, delay_seconds, reset_attempts=False)
            await uow.commits.set_state(job.commit_id, CommitState.PENDING, job.attempts)
            await self._log.append(
                uow, job.commit_id, after, RetryScheduled(job.attempts, delay_seconds, reason)
            )
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
