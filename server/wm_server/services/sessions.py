"""Sessions and their messages: create, read, list, delete, add a batch, the window counters."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from wm_core import ExternalOutput, Message, externalize, pending_delta, rebuild_rule
from wm_server.errors import AlreadyExists, session_not_found
from wm_server.services import idempotency, paging, validation
from wm_server.services.transactions import retry_conflicts
from wm_server.storage.database import Database
from wm_server.storage.records import AddResult, SessionRecord, StoredMessage
from wm_server.storage.repositories import SessionRow
from wm_server.storage.unit_of_work import UnitOfWork
from wm_server.tenancy import current_tenant


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
        make_id: Callable[[], str] = validation.new_message_id,
        on_deleted: Callable[[], None] = lambda: None,
        tool_output_inline_chars: int = 20_000,
    ) -> None:
        self._db = database
        self._make_id = make_id
        self._on_deleted = on_deleted
        self._inline_chars = tool_output_inline_chars

    @retry_conflicts
    async def create(
        self, session_id: str, request_id: str, fingerprint: str = ""
    ) -> tuple[SessionRecord, bool]:
        sid = validation.session_id(session_id) if session_id else validation.new_session_id()
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
            row = await uow.sessions.create(current_tenant(), sid, time.time())
            if row is None:
                raise AlreadyExists(
                    f"session {sid!r} already exists",
                    reason="SESSION_EXISTS",
                    metadata={"session_id": sid},
                )
            await idempotency.remember(uow, req, row.sid, {"session_id": sid})
            await uow.commit()
        return row.record, True

    async def get(self, session_id: str) -> SessionRecord:
        sid = validation.session_id(session_id)
        async with self._db.reader() as uow:
            return (await find_session(uow, sid)).record

    async def list(self, page_size: int, page_token: str) -> tuple[list[SessionRecord], str]:
        size = paging.page_size(page_size)
        cursor = paging.decode("sessions", page_token)
        async with self._db.reader() as uow:
            rows = await uow.sessions.page(current_tenant(), cursor, size + 1)
        more = len(rows) > size
        rows = rows[:size]
        token = paging.encode("sessions", rows[-1].sid) if more else ""
        return [r.record for r in rows], token

    @retry_conflicts
    async def delete(self, session_id: str, request_id: str, fingerprint: str = "") -> None:
        """Unlink the session in one short transaction (NOT_FOUND at once, its id free);
        its rows are purged in the background in bounded chunks."""
        sid = validation.session_id(session_id)
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
        name = validation.session_id(session_id)
        named = [m if m.id else _with_id(m, self._make_id()) for m in messages]
        taken: dict[str, tuple[ExternalOutput, ...]] = {}
        if self._inline_chars:
            for index, message in enumerate(named):
                short, parts = externalize(message, self._inline_chars, f"out.{message.id}.")
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
                    row.record, tuple(prior["added"]), tuple(prior["duplicates"]), prior["created"]
                )
            created = False
            if row is None:
                if not create_if_missing:
                    raise session_not_found(name)
                row = await uow.sessions.create(current_tenant(), name, time.time())
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
                await uow.messages.insert(row.sid, fresh, now)
                outputs = [(p, m.id, o) for p, m in fresh for o in taken.get(m.id, ())]
                if outputs:
                    await uow.tool_outputs.insert(row.sid, outputs, now)
                calls = {tid: pos for pos, m in fresh for tid in m.tool_use_ids()}
                if calls:
                    await uow.tool_calls.upsert(row.sid, calls)
                pending, stored = pending_delta(
                    row.first_live, row.next_position, session.keep_recent_count, fresh
                )
                if stored is not None:
                    pending += await uow.messages.token_sum(row.sid, *stored)
                tokens = sum(m.estimated_tokens for _, m in fresh)
                await uow.sessions.grow(row.sid, position, len(fresh), tokens, pending, now)
                # What the row now holds: the session is locked, so nothing else moved it.
                s = session
                session = SessionRecord(
                    s.tenant, s.session_id, s.create_time, now, s.message_count + len(fresh),
                    s.total_message_count + len(fresh), s.pending_tokens + pending,
                    s.live_tokens + tokens, s.keep_recent_count, s.archive_count, s.wm_version,
                )  # fmt: skip
            outcome = {"added": added, "duplicates": duplicates, "created": created}
            await idempotency.remember(uow, req, row.sid, outcome)
            await uow.commit()
        return AddResult(session, tuple(added), tuple(duplicates), created)

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
