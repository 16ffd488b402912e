"""Phase 1 on a locked session: what CreateCommit, CompactSession and automatic commits run.

It archives the oldest live messages in the caller's unit of work, so a commit that an
AddMessages write triggers lands in that write's transaction, and one started by the idle
sweeper under the lock it re-checked the session with.
"""

from __future__ import annotations

import time
from dataclasses import replace

from wm_core import (
    CommitState,
    NeedRows,
    SkipReason,
    SplitRow,
    Trigger,
    is_request,
    rebuild_rule,
    split_boundary,
    turn_aligned,
    turn_start,
)
from wm_server import contract
from wm_server.errors import NotFound
from wm_server.services import validation
from wm_server.services.commit_event_log import EventLog, Phase1Finished
from wm_server.storage.records import CommitRecord
from wm_server.storage.sessions import SessionRow
from wm_server.storage.unit_of_work import UnitOfWork


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


MAX_KEEP_TURNS = contract.MAX_KEEP_TURNS


async def archive(
    uow: UnitOfWork,
    log: EventLog,
    row: SessionRow,
    keep: int,
    request_id: str | None,
    trigger: Trigger,
    *,
    turns: int = 0,
    skip_if_empty: bool = False,
) -> CommitRecord | None:
    """Archive all but the newest ``keep`` messages of the locked session, or with ``turns``
    all but the newest turns (never splitting a tool call from its result, nor a turn),
    remember how many messages were kept, reset pending, enqueue Phase 2 and store the first
    event; the commit, with its last sequence. With ``skip_if_empty`` (an automatic commit)
    nothing at all is stored when there is nothing to archive: None."""
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
    if (total == 0 or archived <= 0) and skip_if_empty:
        return None
    if total == 0 or archived <= 0:
        reason = SkipReason.NO_MESSAGES if total == 0 else SkipReason.WITHIN_KEEP_WINDOW
        await uow.commits.insert(
            commit_id, row.sid, state=CommitState.SKIPPED, keep=keep, archive_seq=None,
            archived=0, kept=total, archived_tokens=0, skip_reason=reason,
            request_id=request_id, trigger=trigger, now=now,
        )  # fmt: skip
    else:
        archives += 1
        archived_tokens = row.record.live_tokens - sum(kept)
        await uow.archives.insert(
            row.sid, archives, commit_id, message_count=archived, tokens=archived_tokens,
            first=first, last=boundary - 1, now=now,
        )  # fmt: skip
        # No full-text rows here: Phase 2 writes them with its completion, and the search
        # reads an archive not indexed yet from its messages (services/lexical_index.py), so
        # a message is found the moment it is archived and this transaction stays short.
        await uow.commits.insert(
            commit_id, row.sid, state=CommitState.PENDING, keep=keep,
            archive_seq=archives, archived=archived, kept=total - archived,
            archived_tokens=archived_tokens, skip_reason=None, request_id=request_id,
            trigger=trigger, now=now,
        )  # fmt: skip
        await uow.jobs.enqueue(commit_id, row.sid, archives, now)
    pending, live = rebuild_rule(kept, keep)  # the window may have a new keep
    await uow.sessions.set_window(
        row.sid, first_live=boundary, message_count=total - archived,
        archive_count=archives, keep=keep, pending=pending, live=live, now=now,
    )  # fmt: skip
    record = await session_commit(uow, row, commit_id)
    last = await log.append(
        uow, row.record.session_id, commit_id, record.last_sequence, Phase1Finished(record)
    )
    return replace(record, last_sequence=last)
