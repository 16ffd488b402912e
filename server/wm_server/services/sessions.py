"""Sessions and their messages: create, read, list, delete, add a batch, the window counters."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from wm_core import (
    ExternalOutput,
    Message,
    SessionSettings,
    ToolResultPart,
    ToolUsePart,
    externalize,
    pending_delta,
    rebuild_rule,
    threshold_trigger,
)
from wm_server import contract
from wm_server.errors import AlreadyExists, FailedPrecondition, invalid, session_not_found
from wm_server.security.tenancy import current_tenant
from wm_server.services import idempotency, paging, validation
from wm_server.services.commit_event_log import EventLog
from wm_server.services.phase1 import archive
from wm_server.services.transactions import retry_conflicts
from wm_server.storage.codec import message_from_row, parts_to_json
from wm_server.storage.database import Database
from wm_server.storage.records import UNCONFIGURED, AddResult, SessionRecord, StoredMessage
from wm_server.storage.sessions import SessionRow
from wm_server.storage.unit_of_work import UnitOfWork

# RemoveRecentMessages takes back at most this many messages per call: its outcome (the
# messages themselves, for an identical answer to a retry) is remembered with its request id.
MAX_REMOVED = contract.MAX_REMOVED


@dataclass(frozen=True, slots=True)
class Removed:
    """What RemoveRecentMessages took back, and the session after it."""

    session: SessionRecord
    messages: tuple[StoredMessage, ...]


def _removed_outcome(messages: Sequence[StoredMessage]) -> list[list[object]]:
    return [
        [m.position, m.message.id, m.message.role.value, parts_to_json(m.message.parts),
         m.message.estimated_tokens, m.create_time]
        for m in messages
    ]  # fmt: skip


def _removed_from_outcome(rows: Sequence[Sequence[Any]]) -> tuple[StoredMessage, ...]:
    return tuple(
        StoredMessage(int(pos), message_from_row(mid, role, parts, int(tok)), float(created))
        for pos, mid, role, parts, tok, created in rows
    )


@dataclass(frozen=True, slots=True)
class _AutoCommit:
    commit_id: str
    enqueued: bool
    session: SessionRecord


def _longest_output(message: Message) -> int:
    """The longest tool output or tool input of a message, in characters."""
    longest = 0
    for part in message.parts:
        kind = type(part)
        if kind is ToolResultPart:
            longest = max(longest, len(part.content))  # type: ignore[union-attr]
        elif kind is ToolUsePart:
            longest = max(longest, len(part.input_json))  # type: ignore[union-attr]
    return longest


def _with_id(message: Message, message_id: str) -> Message:
    return Message(message_id, message.role, message.parts, message.estimated_tokens)


async def locked_session(uow: UnitOfWork, session_id: str) -> SessionRow:
    """The caller's session, locked against every other writer of it; NOT_FOUND if absent."""
    row = await uow.sessions.lock(current_tenant(), session_id)
    if row is None:
        raise session_not_found(session_id)
    return row


async def find_session(uow: UnitOfWork, session_id: str) -> SessionRow:
    row = await uow.sessions.find(current_tenant(), session_id)
    if row is None:
        raise session_not_found(session_id)
    return row


class SessionService:
    """Use cases on sessions. Validation of ids and pages happens here, before the database."""

    def __init__(
        self,
        database: Database,
        *,
        log: EventLog,
        tokens: paging.PageTokens,
        default_config: SessionSettings = UNCONFIGURED,
        make_id: Callable[[], str] = validation.new_message_id,
        on_deleted: Callable[[], None] = lambda: None,
        on_enqueued: Callable[[], None] = lambda: None,
        tool_output_inline_chars: int = 20_000,
    ) -> None:
        self._db = database
        self._log = log
        self._default = default_config
        self._make_id = make_id
        self._on_deleted = on_deleted
        self._on_enqueued = on_enqueued
        self._tokens = tokens
        self._inline_chars = tool_output_inline_chars

    @retry_conflicts
    async def create(
        self,
        session_id: str,
        request_id: str,
        fingerprint: str = "",
        config: SessionSettings | None = None,
        user_id: str = "",
        agent_id: str = "",
    ) -> tuple[SessionRecord, bool]:
        """``config`` is resolved already (the default under what the request set); None:
        the server's default. ``user_id`` and ``agent_id`` own the session's long-term
        memories and never change afterwards."""
        sid = session_id or validation.new_session_id()
        # A session does not exist before it is created: the tenant is the resource, so a
        # retry without a session_id finds the session made first, and the same id used for
        # another session is a reuse.
        req = idempotency.request(
            "CreateSession", "", validation.request_id(request_id), fingerprint
        )
        async with self._db.unit_of_work() as uow:
            prior = await idempotency.replay(uow, req)
            if prior is not None:
                return (await find_session(uow, prior["session_id"])).record, False
            row = await uow.sessions.create(
                current_tenant(), sid, time.time(), self._default if config is None else config,
                user_id, agent_id,
            )  # fmt: skip
            if row is None:
                raise AlreadyExists(
                    f"session {sid!r} already exists",
                    reason="SESSION_EXISTS",
                    metadata={"session_id": sid},
                )
            await idempotency.remember(uow, req, row.sid, {"session_id": sid})
            await uow.commit()
        return row.record, True

    @retry_conflicts
    async def update_config(
        self,
        session_id: str,
        change: Callable[[SessionSettings], SessionSettings],
        request_id: str,
        fingerprint: str = "",
    ) -> SessionRecord:
        """Store ``change(current config)``; ``change`` validates (raising changes nothing)."""
        sid = session_id
        req = idempotency.request(
            "UpdateSession", sid, validation.request_id(request_id), fingerprint
        )
        async with self._db.unit_of_work() as uow:
            if await idempotency.replay(uow, req) is not None:
                return (await find_session(uow, sid)).record
            row = await locked_session(uow, sid)
            config = change(row.record.config)
            await uow.sessions.set_config(row.sid, config, time.time())
            keep = config.initial_keep
            if row.record.keep_recent_count != keep and config.auto_commit.active:
                # Pending tokens now count outside the window the policy's commits keep.
                tokens = await uow.messages.tokens_from(row.sid, row.first_live)
                pending, live = rebuild_rule(tokens, keep)
                await uow.sessions.set_tokens(row.sid, pending, live, keep)
            await idempotency.remember(uow, req, row.sid, {})
            updated = await find_session(uow, sid)
            await uow.commit()
        return updated.record

    async def get(self, session_id: str) -> SessionRecord:
        sid = session_id
        async with self._db.reader() as uow:
            return (await find_session(uow, sid)).record

    async def list(self, page_size: int, page_token: str) -> tuple[list[SessionRecord], str]:
        size = paging.page_size(page_size)
        cursor = self._tokens.decode("sessions", page_token)
        async with self._db.reader() as uow:
            rows = await uow.sessions.page(current_tenant(), cursor, size + 1)
        more = len(rows) > size
        rows = rows[:size]
        token = self._tokens.encode("sessions", rows[-1].sid) if more else ""
        return [r.record for r in rows], token

    @retry_conflicts
    async def delete(self, session_id: str, request_id: str, fingerprint: str = "") -> None:
        """Unlink the session in one short transaction (NOT_FOUND at once, its id free);
        its rows are purged in the background in bounded chunks."""
        sid = session_id
        req = idempotency.request(
            "DeleteSession", sid, validation.request_id(request_id), fingerprint
        )
        async with self._db.unit_of_work() as uow:
            if await idempotency.replay(uow, req) is not None:
                return
            row = await locked_session(uow, sid)
            await uow.jobs.finish_session(row.sid)
            await uow.sessions.unlink(row.sid)
            await idempotency.remember(uow, req, None, {})  # outlives the session
            await uow.commit()
        self._on_deleted()

    @retry_conflicts
    async def add_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        create_if_missing: bool,
        request_id: str,
        fingerprint: str = "",
    ) -> AddResult:
        """Store a batch atomically; ids already stored are duplicates, not errors. Tool
        outputs over the inline threshold are stored whole and replaced by their synopses
        before the transaction (it would hold the session's lock while they are read)."""
        name = session_id
        named = [m if m.id else _with_id(m, self._make_id()) for m in messages]
        taken: dict[str, tuple[ExternalOutput, ...]] = {}
        longest = [_longest_output(m) for m in named]
        # No threshold (the server's, or the lowest a session may set) is below this.
        floor = min(self._inline_chars or validation.MIN_INLINE_CHARS, validation.MIN_INLINE_CHARS)
        if max(longest, default=0) > floor:
            inline = await self._inline_chars_for(name)
            for index, message in enumerate(named):
                if inline and longest[index] > inline:
                    short, parts = externalize(message, inline, f"out.{message.id}.")
                    if parts:
                        named[index], taken[message.id] = short, parts
        req = idempotency.request(
            "AddMessages", name, validation.request_id(request_id), fingerprint
        )
        async with self._db.unit_of_work() as uow:
            prior = await idempotency.replay(uow, req)
            row = await uow.sessions.lock(current_tenant(), name)
            if prior is not None:
                assert row is not None  # a live record implies its session
                return AddResult(
                    row.record, tuple(prior["added"]), tuple(prior["duplicates"]),
                    prior["created"], prior.get("auto_commit_id", ""),
                )  # fmt: skip
            created = False
            auto: _AutoCommit | None = None
            if row is None:
                if not create_if_missing:
                    raise session_not_found(name)
                row = await uow.sessions.create(current_tenant(), name, time.time(), self._default)
                if row is None:  # created concurrently by another replica: lock that one
                    row = await locked_session(uow, name)
                else:
                    created = True
            given = [m.id for m in messages if m.id]  # server-made ids are new by construction
            existing = await uow.messages.existing_ids(row.sid, given) if given else set()
            added: list[str] = []
            duplicates: list[str] = []
            fresh: list[tuple[int, Message]] = []
            position = row.next_position
            for message in named:
                if message.id in existing:
                    duplicates.append(message.id)
                    continue
                existing.add(message.id)
                added.append(message.id)
                fresh.append((position, message))
                position += 1
            now = time.time()
            session = row.record
            if fresh:
                storing = [uow.messages.inserting(row.sid, fresh, now)]
                outputs = [(p, m.id, o) for p, m in fresh for o in taken.get(m.id, ())]
                if outputs:
                    storing.append(uow.tool_outputs.inserting(row.sid, outputs, now))
                calls = {tid: pos for pos, m in fresh for tid in m.tool_use_ids()}
                if calls:
                    storing.append(uow.tool_calls.upserting(row.sid, calls))
                pending, stored = pending_delta(
                    row.first_live, row.next_position, session.keep_recent_count, fresh
                )
                tokens = sum(m.estimated_tokens for _, m in fresh)
                pending_now = await uow.sessions.grow(
                    row,
                    next_position=position,
                    added=len(fresh),
                    tokens=tokens,
                    pending=pending,
                    stored=stored,
                    now=now,
                    storing=storing,
                )
                # What the row now holds: the session is locked, so nothing else moved it.
                s = session
                session = SessionRecord(
                    s.tenant, s.session_id, s.create_time, now, s.message_count + len(fresh),
                    s.total_message_count + len(fresh), pending_now, s.live_tokens + tokens,
                    s.keep_recent_count, s.archive_count, s.wm_version, s.config,
                )  # fmt: skip
                auto = await self._auto_commit(uow, row, session, now)
                if auto is not None:
                    session = auto.session
            outcome = {"added": added, "duplicates": duplicates, "created": created,
                       "auto_commit_id": auto.commit_id if auto else ""}  # fmt: skip
            await idempotency.remember(uow, req, row.sid, outcome)
            await uow.commit()
        if auto is not None and auto.enqueued:
            self._on_enqueued()
        return AddResult(
            session, tuple(added), tuple(duplicates), created, auto.commit_id if auto else ""
        )

    async def _inline_chars_for(self, session_id: str) -> int:
        """The session's tool-output inline threshold: its config's, else the server's (read
        only for a batch with a part long enough to be externalized by some threshold)."""
        async with self._db.reader() as uow:
            row = await uow.sessions.find(current_tenant(), session_id)
        chars = (row.record.config if row else self._default).tool_output_inline_chars
        return self._inline_chars if chars is None else chars

    async def _auto_commit(
        self, uow: UnitOfWork, row: SessionRow, session: SessionRecord, now: float
    ) -> _AutoCommit | None:
        """Phase 1 in this write's transaction when the write crossed a threshold of the
        session's policy (the session is locked: one commit per crossing, on any replica)."""
        policy = session.config.auto_commit
        if not policy.active:
            return None
        trigger = threshold_trigger(
            policy, pending_tokens=session.pending_tokens, message_count=session.message_count,
            now=now, last_commit_time=row.last_commit_time,
        )  # fmt: skip
        if trigger is None:
            return None
        grown = await uow.sessions.by_sid(row.sid)
        assert grown is not None  # locked by this unit of work
        record = await archive(
            uow, self._log, grown, policy.keep, None, trigger,
            turns=policy.keep_recent_turns or 0, skip_if_empty=True,
        )  # fmt: skip
        if record is None:  # everything live is within the kept turns
            return None
        after = await uow.sessions.by_sid(row.sid)
        assert after is not None
        return _AutoCommit(record.commit_id, not record.state.terminal, after.record)

    async def live_messages(self, session_id: str) -> Sequence[StoredMessage]:
        async with self._db.scanner() as uow:
            row = await find_session(uow, session_id)
            return await uow.messages.between(row.sid, row.first_live, None)

    @retry_conflicts
    async def rebuild_pending_tokens(self, session_id: str) -> tuple[int, int]:
        """Re-derive (pending_tokens, live_tokens) from the messages and store them."""
        async with self._db.unit_of_work() as uow:
            row = await locked_session(uow, session_id)
            tokens = await uow.messages.tokens_from(row.sid, row.first_live)
            pending, live = rebuild_rule(tokens, row.record.keep_recent_count)
            await uow.sessions.set_tokens(row.sid, pending, live)
            await uow.commit()
        return pending, live

    @retry_conflicts
    async def remove_recent(
        self, session_id: str, count: int, *, request_id: str, fingerprint: str = ""
    ) -> Removed:
        """Take back the newest ``count`` live messages, in one unit of work: the messages,
        their stored tool outputs and recorded calls go; the next message takes the first
        removed position again (a session's live positions stay contiguous, which the window
        arithmetic of ``pending_delta`` and the commit split rely on); the token counters are
        re-derived from what stays. Refused, changing nothing, when fewer are live."""
        name = session_id
        if not 1 <= count <= MAX_REMOVED:
            raise invalid("count", f"must be 1-{MAX_REMOVED}")
        req = idempotency.request(
            "RemoveRecentMessages", name, validation.request_id(request_id), fingerprint
        )
        async with self._db.unit_of_work() as uow:
            prior = await idempotency.replay(uow, req)
            row = await locked_session(uow, name)
            if prior is not None:
                return Removed(row.record, _removed_from_outcome(prior["removed"]))
            live = row.record.message_count
            if count > live:
                raise FailedPrecondition(
                    f"session {name!r} has {live} live message(s): only live messages can be"
                    " removed, archived ones stay",
                    reason="MESSAGES_NOT_LIVE",
                    metadata={"session_id": name, "live_message_count": str(live),
                              "count": str(count)},
                )  # fmt: skip
            first = row.next_position - count
            removed = await uow.messages.between(row.sid, first, None)
            assert len(removed) == count and first >= row.first_live  # contiguous positions
            await uow.tool_outputs.remove_from(row.sid, first)
            await uow.tool_calls.remove_from(row.sid, first)
            await uow.messages.remove_from(row.sid, first)
            tokens = await uow.messages.tokens_from(row.sid, row.first_live)
            pending, live_tokens = rebuild_rule(tokens, row.record.keep_recent_count)
            await uow.sessions.shrink(
                row.sid, next_position=first, removed=count, pending=pending, live=live_tokens,
                now=time.time(),
            )  # fmt: skip
            await idempotency.remember(uow, req, row.sid, {"removed": _removed_outcome(removed)})
            after = await uow.sessions.by_sid(row.sid)
            assert after is not None  # locked by this unit of work
            await uow.commit()
        return Removed(after.record, tuple(removed))
