"""Long-term memory extraction, the Phase 2 step after the working memory is made.

The step has three parts, split by what they touch:

- the reads (``memory_subject``, ``backlog_messages``, ``memory_context``): is extraction on
  for the session, whose memories (the owner), the messages of earlier archives whose
  extraction failed (offered again, at most ``MAX_BACKLOG_ARCHIVES`` of them: a long read,
  apart from the short ones) and which memories are most similar to the archive (the only
  ones the model may name);
- ``extract`` (no storage): the provider's ``update_memories`` call per input chunk, the
  answers read by ``wm_core.parse_memory_ops`` and judged by ``wm_core.guard_memory_ops``
  into one plan. A provider outage propagates (Phase 2 waits it out like the working-memory
  call); any other failure, or an answer with nothing readable, is an extraction that FAILED,
  with its reason: the working memory is stored all the same;
- the plan is applied by ``services.memory_writes.apply_plan`` inside the completion's unit of
  work (``phase2.store.JobStore.complete``), so the memories, their index and the completed commit are
  one transaction: a retried or re-claimed Phase 2 never applies a plan twice, and a commit
  seen terminal has its memories searchable.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, NotRequired, TypedDict

from wm_core import (
    MemoryDecision,
    MemoryOp,
    MemoryPlan,
    MemoryRecord,
    MemoryVerdict,
    Message,
    PendingItem,
    archive_text,
    chunk_messages,
    guard_memory_ops,
    parse_memory_ops,
    safekeeping_ops,
)
from wm_server.llm.chain import ChainEvent, LlmCallFinished, LlmCallStarted
from wm_server.llm.port import LlmError, LlmProvider, MemoryRequest, Purpose, Usage, usage_record
from wm_server.services.memory_content import (
    MemoryOwner,
    owner_of,
    similar_memories,
    similar_reading,
)
from wm_server.services.memory_writes import MemoryDiff
from wm_server.storage.records import StoredMessage
from wm_server.storage.sessions import SessionRow
from wm_server.storage.statements import Read
from wm_server.storage.unit_of_work import UnitOfWork

# Existing memories shown to the model (and the only ones it may change).
SIMILAR_MEMORIES = 20
# Characters of the archive used as the similarity query (its words, ranked by BM25).
QUERY_CHARS = 4000
# Earlier archives whose failed extraction a commit offers again.
MAX_BACKLOG_ARCHIVES = 3
# Refusals and problems kept in a diff.
MAX_LISTED = 50
# Tokens of one extraction call's messages (the rest of the window: prompt, memories, answer).
MAX_CHUNK_TOKENS = 60_000


class MemoryState(StrEnum):
    """How one commit's extraction ended (mirrors wm.v1.MemoryExtractionState)."""

    EXTRACTED = "extracted"
    OFF = "off"
    FAILED = "failed"
    RECOVERED = "recovered"  # set on an earlier commit when a later one extracted it


class EmptyReason(StrEnum):
    """Why an extraction wrote nothing (mirrors wm.v1.MemoryExtractionEmptyReason): a commit
    that keeps no memory says which of these it was, in its diff and in a metric."""

    NOTHING_NEW = "nothing_new"  # nothing proposed, or only duplicates
    ALL_REFUSED = "all_refused"  # every op that was not a duplicate was refused
    NO_TOOL_CALL = "no_tool_call"  # the provider answered without the memory tool
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class MemoryContext:
    """What extraction reads before the model call."""

    enabled: bool
    off_reason: str = ""
    owner: MemoryOwner | None = None
    existing: tuple[MemoryRecord, ...] = ()
    backlog: tuple[Message, ...] = ()  # messages of earlier archives whose extraction failed
    backlog_seqs: tuple[int, ...] = ()
    backlog_dates: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Extraction:
    """The outcome of the step, before its plan is applied."""

    state: MemoryState
    owner: MemoryOwner | None = None
    plan: MemoryPlan = field(default_factory=lambda: MemoryPlan((), ()))
    message: str = ""  # why it was off or failed
    problems: tuple[str, ...] = ()
    usage: Usage = field(default_factory=Usage)
    recovered_seqs: tuple[int, ...] = ()  # earlier archives this extraction covered
    no_tool_call: bool = False  # every answer came without the memory tool


def empty_reason(extraction: Extraction, diff: MemoryDiff | None) -> EmptyReason | None:
    """Why ``extraction`` (applied as ``diff``; None for a dry run, where what the guards
    accept is what would be written) wrote nothing; None when it wrote something or was off."""
    if extraction.state is MemoryState.OFF:
        return None
    if extraction.state is MemoryState.FAILED:
        return EmptyReason.NO_TOOL_CALL if extraction.no_tool_call else EmptyReason.FAILED
    if diff is not None:
        wrote = bool(diff.created or diff.updated or diff.merged or diff.retired)
    else:
        wrote = bool(extraction.plan.ops)
    if wrote:
        return None
    verdicts = {d.verdict for d in extraction.plan.decisions}
    if MemoryVerdict.REFUSED in verdicts or (diff is not None and diff.skipped):
        return EmptyReason.ALL_REFUSED
    return EmptyReason.NOTHING_NEW


@dataclass(frozen=True, slots=True)
class MemorySubject:
    """Whose memories a commit's extraction works on, and the earlier archives whose
    extraction failed (the backlog it takes on too)."""

    sid: int
    owner: MemoryOwner
    backlog_seqs: tuple[int, ...]


async def memory_subject(
    uow: UnitOfWork,
    *,
    tenant: str,
    session_id: str,
    sid: int,
    archive_seq: int,
    enabled_by_server: bool,
    owner: MemoryOwner | None = None,
    messages: Sequence[Message] = (),
    session: SessionRow | None = None,
) -> MemorySubject | MemoryContext | None:
    """The step's subject, read in ``uow`` (short reads, together); the context itself when
    extraction is off; None when the session ``sid`` is gone (no longer found by name).

    With ``owner``, the session's owner when the commit's input was read, the memories
    similar to ``messages`` are read with them (where that is one read: one round trip
    instead of two on PostgreSQL), and the context is returned when that is still the
    owner and there is no backlog (whose messages would join the query).

    ``session``, the session's row as the commit's input read it a moment before, is used
    as it is (its owner for ``owner``): no second read of it."""
    enabled = enabled_by_server
    if session is not None:
        if session.sid != sid:
            return None
        if (off := _off(session, enabled)) is not None:
            return off  # nothing to read
        owner = owner_of(session)
    similar = (
        similar_reading(
            uow,
            tenant=tenant,
            owner=owner,
            text=lambda: memory_query(messages),
            limit=SIMILAR_MEMORIES,
        )
        if owner is not None and enabled
        else None
    )
    failed = uow.commits.reading_memory_failed(sid, archive_seq, MAX_BACKLOG_ARCHIVES)
    reads: list[Read[Any]] = [failed] if similar is None else [failed, similar]
    if session is None:
        reads.insert(0, uow.sessions.finding(tenant, session_id))
    answers = await uow.read_each(reads)
    row: SessionRow | None = session if session is not None else answers.pop(0)
    backlog_seqs: list[int] = answers[0]
    found: list[MemoryRecord] | None = answers[1] if similar is not None else None
    if row is None or row.sid != sid:
        return None
    if (off := _off(row, enabled)) is not None:
        return off
    subject = MemorySubject(row.sid, owner_of(row), tuple(backlog_seqs))
    if found is not None and subject.owner == owner and not subject.backlog_seqs:
        return _context(subject, found)
    return subject


def _off(session: SessionRow, enabled_by_server: bool) -> MemoryContext | None:
    """The context of a session whose extraction is off, by the server or its own config."""
    if not enabled_by_server:
        return MemoryContext(False, "memory extraction is off on this server")
    if session.record.config.memory_extraction is False:
        return MemoryContext(False, "memory extraction is off for this session")
    return None


async def backlog_messages(uow: UnitOfWork, subject: MemorySubject) -> list[StoredMessage]:
    """The messages of the subject's backlog archives, in order (a long read)."""
    stored: list[StoredMessage] = []
    for seq in subject.backlog_seqs:
        bounds = await uow.archives.bounds(subject.sid, seq)
        if bounds is not None:
            stored.extend(await uow.messages.between(subject.sid, *bounds))
    return stored


async def memory_context(
    uow: UnitOfWork,
    subject: MemorySubject,
    *,
    tenant: str,
    messages: Sequence[Message],
    backlog: Sequence[StoredMessage] = (),
) -> MemoryContext:
    """What the step needs: the owner's memories most similar to the backlog and
    ``messages``, read in ``uow``, with the backlog."""
    older = [m.message for m in backlog]
    existing = await similar_memories(
        uow, tenant=tenant, owner=subject.owner, text=memory_query([*older, *messages]),
        limit=SIMILAR_MEMORIES,
    )  # fmt: skip
    return _context(subject, existing, backlog)


def memory_query(messages: Sequence[Message]) -> str:
    """What the owner's memories are ranked against: the messages' text, bounded."""
    return archive_text(messages)[:QUERY_CHARS]


def _context(
    subject: MemorySubject,
    existing: Sequence[MemoryRecord],
    backlog: Sequence[StoredMessage] = (),
) -> MemoryContext:
    return MemoryContext(
        True, "", subject.owner, tuple(existing), tuple(m.message for m in backlog),
        subject.backlog_seqs, message_dates(backlog),
    )  # fmt: skip


def message_dates(stored: Sequence[StoredMessage]) -> dict[str, str]:
    """Message id → the UTC date the server stored it: what extraction resolves "yesterday"
    and "next Friday" against (wm_core reads no clock)."""
    return {
        m.message.id: datetime.fromtimestamp(m.create_time, UTC).date().isoformat() for m in stored
    }


EventSink = Callable[[ChainEvent], Awaitable[None]]


async def extract(
    provider: LlmProvider,
    context: MemoryContext,
    *,
    messages: Sequence[Message],
    pending: Sequence[PendingItem],
    archive_id: str,
    input_tokens: int,
    on_event: EventSink | None = None,
    message_dates: Mapping[str, str] | None = None,
    dropped: Sequence[PendingItem] = (),
) -> Extraction:
    """The plan for the archive's (and the backlog's) messages; see the module docstring.

    ``dropped`` are the pending items this commit takes off the session's list (its bound):
    the model is shown them with the others, and each one its accepted ops do not hold is
    written as a memory all the same (``wm_core.safekeeping_ops``), so that what a guard
    refused stays reachable.

    Raises the provider's :class:`LlmError` only for an outage (``transient``).
    """
    if not context.enabled:
        return Extraction(MemoryState.OFF, message=context.off_reason)
    everything = [*context.backlog, *messages]
    shown = [*pending, *(item for item in dropped if item not in pending)]
    budget = max(min(input_tokens // 2, MAX_CHUNK_TOKENS), 1_000)
    chunks = chunk_messages(everything, budget) if everything else ((),)
    ops: list[MemoryOp] = []
    problems: list[str] = []
    usage = Usage()
    usable = False
    tool_calls = 0
    for index, chunk in enumerate(chunks):
        request = MemoryRequest(
            messages=chunk,
            existing=context.existing,
            pending=shown if index == len(chunks) - 1 else (),
            archive_id=archive_id,
            message_dates={**context.backlog_dates, **(message_dates or {})},
        )
        if on_event is not None:
            await on_event(LlmCallStarted(Purpose.MEMORY, provider.name, provider.model))
        started = time.monotonic()
        try:
            reply = await provider.extract_memories(request)
        except LlmError as error:
            elapsed = int((time.monotonic() - started) * 1000)
            if on_event is not None:
                await on_event(
                    LlmCallFinished(Purpose.MEMORY, "error", Usage(), elapsed, error=str(error))
                )
            if error.transient:
                raise
            return Extraction(
                MemoryState.FAILED,
                context.owner,
                message=f"the provider refused the extraction call: {error}",
                problems=tuple(problems),
                usage=usage,
            )
        elapsed = int((time.monotonic() - started) * 1000)
        usage = usage + reply.usage
        if on_event is not None:
            await on_event(LlmCallFinished(Purpose.MEMORY, reply.stop_reason, reply.usage, elapsed))
        tool_calls += reply.tool_input is not None
        parsed = parse_memory_ops(reply.tool_input)
        prefix = f"chunk {index + 1}: " if len(chunks) > 1 else ""
        problems.extend(prefix + problem for problem in parsed.problems)
        usable = usable or parsed.usable
        ops.extend(parsed.ops)
    if not usable:
        return Extraction(
            MemoryState.FAILED,
            context.owner,
            message="the extraction answer had nothing readable: " + "; ".join(problems[:5]),
            problems=tuple(problems[:MAX_LISTED]),
            usage=usage,
            no_tool_call=tool_calls == 0,
        )
    judged_against = archive_text(everything, shown)
    plan = guard_memory_ops(ops, context.existing, judged_against)
    kept = safekeeping_ops(dropped, plan.ops, context.existing)
    if kept:  # judged with the model's ops, so a duplicate of one of them is deduplicated
        plan = guard_memory_ops([*ops, *kept], context.existing, judged_against)
    return Extraction(
        MemoryState.EXTRACTED,
        context.owner,
        plan,
        problems=tuple(problems[:MAX_LISTED]),
        usage=usage,
        recovered_seqs=context.backlog_seqs,
    )


class StoredRefusal(TypedDict):
    """One op the guards refused (or the store could not apply: ``op_index`` -1), as a
    stored diff lists it."""

    op_index: int
    op: str
    text: str
    target_ids: list[str]
    reason: str
    duplicate: NotRequired[bool]  # written for the guards' refusals only


class StoredDiff(TypedDict, total=False):
    """A commit's memory diff as ``diff_json`` stores it (its memory_diff_json column). Every
    key is written; a row stored before a key existed lacks it, so readers default it."""

    state: str  # a MemoryState value
    created: list[str]
    updated: list[str]
    merged: list[str]
    retired: list[str]
    deduplicated: list[str]
    superseded: list[str]
    refused: list[StoredRefusal]
    message: str
    problems: list[str]
    recovered_seqs: list[int]
    usage: dict[str, int]  # llm.port.usage_record
    empty_reason: str | None  # an EmptyReason value


def _refusal(decision: MemoryDecision) -> StoredRefusal:
    op = decision.op
    return {
        "op_index": decision.op_index,
        "op": op.kind.name,
        "text": op.text,
        "target_ids": list(op.target_ids),
        "reason": decision.reason,
        "duplicate": decision.verdict is MemoryVerdict.DEDUPLICATED,
    }


def read_diff(text: str) -> StoredDiff:
    """A stored diff (empty text: none, every key absent)."""
    diff: StoredDiff = json.loads(text) if text else {}
    return diff


def diff_json(extraction: Extraction, diff: MemoryDiff | None) -> str:
    """The commit's stored memory diff (``StoredDiff``): what changed, what was refused, how
    it ended."""
    applied = diff or MemoryDiff()
    refused = [
        _refusal(d) for d in extraction.plan.decisions if d.verdict is not MemoryVerdict.ACCEPTED
    ]
    refused.extend(
        StoredRefusal(op_index=-1, op="", text="", target_ids=[], reason=f"not applied: {why}")
        for _, why in applied.skipped
    )
    reason = empty_reason(extraction, applied)
    stored: StoredDiff = {
        "state": extraction.state.value,
        "created": list(applied.created),
        "updated": list(applied.updated),
        "merged": list(applied.merged),
        "retired": list(applied.retired),
        "deduplicated": list(applied.deduplicated),
        "superseded": list(applied.superseded),
        "refused": refused[:MAX_LISTED],
        "message": extraction.message,
        "problems": list(extraction.problems[:MAX_LISTED]),
        "recovered_seqs": list(extraction.recovered_seqs),
        "usage": usage_record(extraction.usage),
        "empty_reason": reason and reason.value,
    }
    return json.dumps(stored, ensure_ascii=False)
