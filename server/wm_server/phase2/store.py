"""The Phase 2 job's transactions and reads: the pipeline's only door to the database.

A commit's Phase 2 writes three transactions when it completes at the first try:

1. ``claim``: the lease, the commit RUNNING, and ``Phase2Started`` saying what it covers;
2. ``record`` at the model boundary: the events up to the first model request, so a watcher
   sees the request go out and a crash during the call loses no event it saw (the worker
   writes again at a later request only when the last write is over a second old);
3. ``complete``: the working memory, the memory plan, the archive's full-text rows and
   vectors, the pending items and every event since, with the commit COMPLETED.

An archive over ``INDEX_CHUNK`` messages adds one short write per further chunk of its
search rows (``index_chunk``), so SQLite's one writer is never held long. An attempt that
does not complete ends with ``schedule_retry``, ``fail`` or ``release`` instead. Every
write first checks, in its own unit of work, that this worker still holds the lease
(``LeaseLost`` otherwise: another worker took the expired lease), and stores its events
through the one event log in that same unit of work; whatever an attempt has not written
when it crashes is made again by the next one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import replace

from wm_core import CommitState, Message
from wm_server.phase2.state import (
    ArchiveIndex,
    ClaimedJob,
    Phase2Completion,
    Phase2Input,
)
from wm_server.services.commit_event_log import (
    CommitEvent,
    Completed,
    EventLog,
    Failed,
    MemoriesExtracted,
    Phase2Started,
    RetryScheduled,
    WorkingMemoryStored,
)
from wm_server.services.embedding_index import VectorRow, store_message_vectors
from wm_server.services.extraction import (
    Extraction,
    MemoryContext,
    MemoryState,
    MemorySubject,
    backlog_messages,
    diff_json,
    memory_context,
    memory_subject,
    message_dates,
)
from wm_server.services.memory_content import MemoryOwner
from wm_server.services.memory_writes import MemorySources, apply_plan
from wm_server.services.transactions import retry_conflicts
from wm_server.storage.archives import search_rows_of
from wm_server.storage.database import Database
from wm_server.storage.records import (
    CommitRecord,
    SearchRow,
    StoredMessage,
    WorkingMemoryRecord,
)
from wm_server.storage.sessions import SessionRow
from wm_server.storage.unit_of_work import UnitOfWork

# The messages Phase 2 reads inline (``Database.reader``) at most: on SQLite a few hundred
# microseconds on the loop, less than the thread hops of a scan; more are scanned, off it.
SHORT_READ = 100
# Archived messages per write of search rows (full-text rows and vectors): tens of
# microseconds a message, so a 5,000-message archive never holds SQLite's writer long.
INDEX_CHUNK = 500


async def _index(
    uow: UnitOfWork,
    sid: int,
    seq: int,
    rows: Sequence[SearchRow],
    *,
    whole: bool,
    abstract: str | None = None,
) -> None:
    """Write ``rows`` of archive ``seq`` (in place of an earlier attempt's), and with the
    last of them (``whole``) mark the archive indexed (and set its ``abstract``, if
    given). Statements of their own: one statement may not write a row twice (PostgreSQL
    runs a chain as one)."""
    if rows:
        await uow.write(*uow.archives.indexing(sid, seq, rows))
    if whole:
        await uow.write(uow.archives.indexed(sid, seq, abstract=abstract))


async def _archived(
    uow: UnitOfWork, sid: int, placed: dict[int, tuple[int, int, float]]
) -> dict[int, list[StoredMessage]]:
    """The messages of the archives ``placed`` (seq → first, last, time), by seq in order:
    read together."""
    found = await uow.read_each(
        [uow.messages.reading_between(sid, first, last) for first, last, _ in placed.values()]
    )
    return dict(zip(placed, found, strict=True))


def _starting(
    job: ClaimedJob, wm_version: int, failed: Sequence[int]
) -> tuple[ClaimedJob, Phase2Started]:
    """The attempt of ``job`` over working memory ``wm_version``, covering the ``failed``
    archives before its own, and the event that says so."""
    job = replace(job, previous_version=wm_version, covered_seqs=(*failed, job.archive_seq))
    return job, Phase2Started(job.attempts, wm_version == 0, wm_version, job.covered_seqs)


class LeaseLost(Exception):
    """This worker no longer holds the job's lease (it expired and another took it)."""


async def _hold(uow: UnitOfWork, job: ClaimedJob) -> int:
    """Hold the job's row until commit; the commit's last event number."""
    return _held(job, await uow.jobs.holder(job.commit_id))


def _held(job: ClaimedJob, holder: tuple[str, int] | None) -> int:
    """The commit's last event number, if ``holder`` (``JobRepository.holder``) is this
    attempt's lease."""
    if holder is None or holder[0] != job.lease_token:
        raise LeaseLost(job.commit_id)
    return holder[1]


def _same(job: ClaimedJob, row: SessionRow | None) -> SessionRow:
    """``row``, the job's session found by name, if it is the claimed one (a session
    deleted, or deleted and made again under its name, has lost its jobs)."""
    if row is None or row.sid != job.sid:
        raise LeaseLost(job.commit_id)
    return row


class JobStore:
    def __init__(self, database: Database, log: EventLog) -> None:
        self._db = database
        self._log = log
        # Where a statement is a round trip, a unit's last events go with its COMMIT.
        self._together = database.dialect.round_trips

    # -- the lease -------------------------------------------------------------------------

    @retry_conflicts
    async def claim(self, lease_seconds: float) -> ClaimedJob | None:
        """The oldest runnable job whose session has no earlier unfinished archive, leased,
        its commit RUNNING and ``Phase2Started`` stored: one transaction, pipelined.

        Where a statement is a round trip, that is three of them: the job found; the lease
        (queued) with the session, the commit's last event number and the failed archives
        it covers, read together; the commit's state (queued) with the event and COMMIT
        (``EventLog.append_and_commit``). Each statement was a round trip of its own (8)."""
        async with self._db.unit_of_work(pipelined=True) as uow:
            found = await uow.jobs.next_claimable()
            if found is None:
                return None
            token = uuid.uuid4().hex
            attempts = found.attempts + 1
            await uow.write(uow.jobs.leasing(found.commit_id, attempts, token, lease_seconds))
            session, holder, seqs = await uow.read(
                uow.sessions.by_sid_reading(found.sid),
                uow.jobs.holding(found.commit_id),
                uow.commits.failed_uncovered(found.sid, found.seq),
            )
            assert session is not None
            record = session.record
            job = ClaimedJob(
                found.commit_id, record.tenant, record.session_id, found.seq, attempts, token,
                found.create_time, sid=found.sid, others_claimable=found.others,
                session=session,
            )  # fmt: skip
            after = _held(job, holder)
            job, started = _starting(job, record.wm_version, seqs)
            await uow.write(uow.commits.setting_state(job.commit_id, CommitState.RUNNING, attempts))
            last = await self._log.append_and_commit(
                uow, job.session_id, job.commit_id, after, (started,), together=self._together
            )
        return replace(job, last_sequence=last)

    async def _started(
        self, uow: UnitOfWork, job: ClaimedJob, sid: int, wm_version: int, after: int
    ) -> ClaimedJob:
        """Mark the commit running and say what this attempt covers (in ``uow``), the
        commit's events numbered after ``after``."""
        [seqs] = await uow.read_each([uow.commits.failed_uncovered(sid, job.archive_seq)])
        job, started = _starting(job, wm_version, seqs)
        await uow.commits.set_state(job.commit_id, CommitState.RUNNING, job.attempts)
        last = await self._log.append(uow, job.session_id, job.commit_id, after, started)
        return replace(job, last_sequence=last)

    @retry_conflicts
    async def restart(self, job: ClaimedJob, events: Sequence[CommitEvent]) -> ClaimedJob:
        """The working memory changed under the attempt (ApplyWorkingMemoryOps): store its
        events and start over from the current one."""
        async with self._db.unit_of_work() as uow:
            row = await uow.sessions.find(job.tenant, job.session_id)
            if row is None:
                raise LeaseLost(job.commit_id)
            after = await _hold(uow, job)
            after = await self._log.append(uow, job.session_id, job.commit_id, after, *events)
            job = await self._started(uow, job, row.sid, row.record.wm_version, after)
            await uow.commit()
        return replace(job, session=row)

    @retry_conflicts
    async def renew(self, job: ClaimedJob, lease_seconds: float) -> bool:
        async with self._db.unit_of_work() as uow:
            renewed = await uow.jobs.renew(job.commit_id, job.lease_token, lease_seconds)
            await uow.commit()
        return renewed

    @retry_conflicts
    async def release(self, job: ClaimedJob, events: Sequence[CommitEvent] = ()) -> None:
        """Give the job back to the queue (shutdown) without counting an attempt."""
        async with self._db.unit_of_work() as uow:
            after = await _hold(uow, job)
            await self._log.append(uow, job.session_id, job.commit_id, after, *events)
            await uow.jobs.release(job.commit_id, job.lease_token)
            await uow.commit()

    async def open_count(self) -> int:
        async with self._db.reader() as uow:
            return await uow.jobs.open_count()

    # -- reads -----------------------------------------------------------------------------

    async def read_input(self, job: ClaimedJob) -> Phase2Input:
        """The working memory the claim named and the messages to cover: this archive and
        the earlier failed, uncovered ones, in order, all read together, with the session
        as the claim read it (``ClaimedJob.session``: not read again). They are a short
        read unless they are over ``SHORT_READ`` messages; then the messages are scanned,
        apart (an archived message never changes: only its session's deletion removes it,
        and the completion finds that out)."""
        async with self._db.reader() as uow:
            previous, pending, placed, prefetched = await uow.read(
                uow.working_memories.getting(
                    job.sid, job.tenant, job.session_id, job.previous_version
                ),
                uow.pending_items.reading(job.sid),
                uow.archives.placements(job.sid, job.covered_seqs),
                uow.messages.reading_archives(job.sid, job.covered_seqs, SHORT_READ),
            )
            found = job.session or await uow.sessions.find(job.tenant, job.session_id)
        row = _same(job, found)
        count = sum(last - first + 1 for first, last, _ in placed.values())
        short = count <= SHORT_READ  # then ``prefetched`` holds them all
        archived = {seq: prefetched.get(seq, []) for seq in placed}
        if not short:
            async with self._db.scanner() as uow:
                archived = await _archived(uow, row.sid, placed)
        messages: list[Message] = []
        dates: dict[str, str] = {}
        for stored in archived.values():
            messages.extend(m.message for m in stored)
            dates.update(message_dates(stored))
        archive = archived.get(job.archive_seq, [])
        archive_time = placed[job.archive_seq][2] if job.archive_seq in placed else 0.0
        return Phase2Input(
            previous, tuple(messages), job.covered_seqs, row.record.config.provider,
            tuple(pending), dates, row.sid, tuple(archive), archive_time, row,
        )  # fmt: skip

    async def memory_context(
        self,
        job: ClaimedJob,
        messages: tuple[Message, ...],
        *,
        enabled_by_server: bool,
        owner: MemoryOwner | None = None,
        session: SessionRow | None = None,
    ) -> MemoryContext:
        """What memory extraction reads before its model call (see services.extraction):
        short reads (with the memories similar to ``messages`` while ``owner`` is still the
        session's), and a scan of its backlog archives when it has one. With ``session``,
        the row ``read_input`` read, the session is not read again (its owner is the one)."""
        async with self._db.reader() as uow:
            subject = await memory_subject(
                uow, tenant=job.tenant, session_id=job.session_id, sid=job.sid,
                archive_seq=job.archive_seq, enabled_by_server=enabled_by_server,
                owner=owner, messages=messages, session=session,
            )  # fmt: skip
            if isinstance(subject, MemorySubject) and not subject.backlog_seqs:
                return await memory_context(uow, subject, tenant=job.tenant, messages=messages)
        if subject is None:
            raise LeaseLost(job.commit_id)
        if isinstance(subject, MemoryContext):
            return subject
        async with self._db.scanner() as uow:
            backlog = await backlog_messages(uow, subject)
        async with self._db.reader() as uow:
            return await memory_context(
                uow, subject, tenant=job.tenant, messages=messages, backlog=backlog
            )

    def search_rows(self, data: Phase2Input) -> list[SearchRow]:
        """The full-text rows of the job's archive, analyzed from the messages ``read_input``
        read (``search_rows_of``): no second read of the archive."""
        return search_rows_of(self._db.dialect.text_index, data.archive_time, data.archive)

    # -- writes of a job holder ------------------------------------------------------------

    @retry_conflicts
    async def record(self, job: ClaimedJob, *events: CommitEvent) -> ClaimedJob:
        """Store progress events of a job this worker holds; the job with its new last
        event number.

        The events go numbered after the attempt's own last one
        (``ClaimedJob.last_sequence``), stored only while the lease is held and that number
        is still the commit's: where a statement is a round trip by one statement that
        commits as it runs (``Database.statement``, ``EventLog.append_if_and_commit``: one
        round trip, no BEGIN or COMMIT), elsewhere by the
        statement that moves the number, the events' rows after it (``EventLog.append_if``:
        no read of the lease first). If that stored nothing, the lease is checked and the
        events appended as every other write does (``LeaseLost``, or the commit's real last
        number)."""
        if not events:
            return job
        log, token = self._log, {"token": job.lease_token}
        if self._db.dialect.round_trips:
            async with self._db.statement() as uow:
                moved = await log.append_if_and_commit(
                    uow, job.session_id, job.commit_id, job.last_sequence, events,
                    uow.jobs.held(), token,
                )  # fmt: skip
            if moved is not None:
                return replace(job, last_sequence=moved)
        else:
            async with self._db.unit_of_work(pipelined=True) as uow:
                moved = await log.append_if(
                    uow, job.session_id, job.commit_id, job.last_sequence, events,
                    uow.jobs.held(), token,
                )  # fmt: skip
                if moved is not None:
                    await uow.commit()
                    return replace(job, last_sequence=moved)
        async with self._db.unit_of_work(pipelined=True) as uow:
            after = await _hold(uow, job)
            last = await self._log.append(uow, job.session_id, job.commit_id, after, *events)
            await uow.commit()
        return replace(job, last_sequence=last)

    @retry_conflicts
    async def index_chunk(
        self,
        job: ClaimedJob,
        sid: int,
        text: Sequence[SearchRow],
        model: str,
        vectors: Sequence[VectorRow],
    ) -> None:
        """Write one chunk of a long archive's search rows before its completion. The
        archive still counts as not indexed (the search reads its messages) until the
        completion writes the last chunk."""
        async with self._db.unit_of_work() as uow:
            await _hold(uow, job)
            await _index(uow, sid, job.archive_seq, text, whole=False)
            if vectors:
                await store_message_vectors(uow, model, vectors)
            await uow.commit()

    @retry_conflicts
    async def complete(
        self,
        job: ClaimedJob,
        completion: Phase2Completion,
        events: Sequence[CommitEvent] = (),
        extraction: Extraction | None = None,
        index: ArchiveIndex | None = None,
    ) -> tuple[CommitRecord, WorkingMemoryRecord] | None:
        """Store the WM and mark the commit completed, with ``events`` before the closing
        ones. None when the WM changed since the claim (run again on the newer one).

        ``extraction``'s plan is applied to the owner's memories in this same transaction
        (memories, versions, sources and their full-text index), and its diff is stored on
        the commit and streamed before the closing events; ``index``'s rows make the
        archive searchable, by its words and by meaning. So the commit is terminal only
        when it is retrievable, and a run that loses its lease here applies nothing.

        Pipelined (``Database.unit_of_work``): its many writes, which read nothing back,
        travel with the read of the commit record, not a round trip each, and the events
        with the COMMIT (``EventLog.append_and_commit``): three round trips in all."""
        async with self._db.unit_of_work(pipelined=True) as uow:
            holder, found = await uow.read(
                uow.jobs.holding(job.commit_id),
                uow.sessions.finding(job.tenant, job.session_id, lock=True),
            )
            after = _held(job, holder)
            row = _same(job, found)
            if row.record.wm_version != job.previous_version:
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
            abstract = completion.abstract
            if index is not None:
                await _index(
                    uow, row.sid, job.archive_seq, index.text, whole=True, abstract=abstract
                )
                if index.vectors:
                    await store_message_vectors(uow, index.model, index.vectors)
            version = job.previous_version + 1
            earlier = [s for s in completion.covered_seqs if s != job.archive_seq]
            await uow.write(
                uow.working_memories.inserting(
                    row.sid, version, completion.document, archive_seq=job.archive_seq,
                    covered_seq=job.archive_seq, commit_id=job.commit_id,
                    tokens=completion.estimated_tokens, now=now,
                    decisions_json=completion.decisions_json,
                ),
                uow.sessions.setting_wm_version(row.sid, version, now),
                *(
                    [uow.archives.setting_abstract(row.sid, job.archive_seq, abstract)]
                    if index is None
                    else []
                ),
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
            closing = (*events, stored, *memory_events, Completed(record))
            last = await self._log.append_and_commit(
                uow, job.session_id, job.commit_id, after, closing, together=self._together
            )
        return _with_last(record, last), wm

    @retry_conflicts
    async def schedule_retry(
        self,
        job: ClaimedJob,
        delay_seconds: float,
        reason: str,
        *,
        events: Sequence[CommitEvent] = (),
        next_attempt_at: float | None = None,
        wait_remaining: float | None = None,
    ) -> None:
        """Queue the job again after ``delay_seconds``, with the attempt's ``events`` first;
        ``wait_remaining`` (seconds before the job's maximum age) marks the wait for a
        provider outage."""
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
            await self._log.append(uow, job.session_id, job.commit_id, after, *events, event)
            await uow.commit()

    @retry_conflicts
    async def fail(
        self, job: ClaimedJob, reason: str, message: str, events: Sequence[CommitEvent] = ()
    ) -> CommitRecord:
        """Mark the commit FAILED, with the attempt's ``events`` first. Its archive is made
        searchable all the same (its messages stay in assembled context until a later
        Phase 2 covers them, and a search finds them)."""
        async with self._db.unit_of_work() as uow:
            after = await _hold(uow, job)
            row = await uow.sessions.find(job.tenant, job.session_id)
            bounds = await uow.archives.bounds(row.sid, job.archive_seq) if row else None
            if row is not None and bounds is not None:
                rows = await uow.archives.search_rows(row.sid, job.archive_seq, *bounds)
                await _index(uow, row.sid, job.archive_seq, rows, whole=True)
            await uow.commits.set_state(
                job.commit_id, CommitState.FAILED, job.attempts, error=(reason, message),
                now=time.time(),
            )  # fmt: skip
            await uow.write(uow.jobs.finishing(job.commit_id))
            record = await uow.commits.get(job.commit_id)
            assert record is not None
            last = await self._log.append(
                uow, job.session_id, job.commit_id, after, *events, Failed(record)
            )
            await uow.commit()
        return _with_last(record, last)


def _with_last(record: CommitRecord, last: int) -> CommitRecord:
    return replace(record, last_sequence=last)
