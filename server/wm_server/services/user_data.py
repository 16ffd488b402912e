"""Forgetting a user (PurgeUserData, issue 35 point 4): every memory the user owns and every
session created with that user id, gone from every read path when the call answers and erased
from the files by the maintenance loop soon after.

What is the user's: the memories of owner ``user:U`` (any state, with their versions, sources,
vectors and index entries: ``MemoryRepository.delete``, as DeleteMemory) and the sessions whose
``user_id`` is U (unlinked as DeleteSession unlinks them, so their messages, archives, tool
outputs, commits and working memories are purged in bounded chunks by ``Maintenance``). An
agent's memories are the agent's, whatever session taught them, and stay.

A user may own 100,000 memories: they are deleted a chunk per unit of work (SQLite runs its
transactions on the event loop), then one last unit of work deletes what is left, unlinks the
sessions and records the request id with the counts, so a retry answers the same counts. A
call that fails part way has deleted some chunks: a retry continues and counts what it removed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from wm_server.errors import invalid
from wm_server.security.tenancy import current_tenant
from wm_server.services import idempotency, validation
from wm_server.services.transactions import retry_conflicts
from wm_server.storage.database import Database

CHUNK = 500  # memories deleted per unit of work before the last one


@dataclass(frozen=True, slots=True)
class Purged:
    """What PurgeUserData removed."""

    memories: int
    sessions: int


def user_key(user_id: str) -> str:
    """The memory owner key of a user (as ``memory_content.owner_of`` writes it)."""
    return f"user:{user_id}"


class UserDataService:
    def __init__(
        self, database: Database, *, on_deleted: Callable[[], None] = lambda: None
    ) -> None:
        self._db = database
        self._on_deleted = on_deleted  # purge the sessions' rows and erase the files (soon)

    async def purge(self, user_id: str, request_id: str, fingerprint: str) -> Purged:
        if not user_id:
            raise invalid("user_id", "required", "REQUIRED")
        req = idempotency.request(
            "PurgeUserData", user_id, validation.request_id(request_id), fingerprint
        )
        tenant = current_tenant()
        before = 0
        while True:
            removed = await self._chunk(tenant, user_id, req)
            if removed is None:
                break  # a retry of a completed purge: nothing deleted here
            before += removed
            if removed < CHUNK:
                break
        purged = await self._finish(tenant, user_id, req, before)
        if purged.memories or purged.sessions:
            self._on_deleted()
        return purged

    @retry_conflicts
    async def _chunk(
        self, tenant: str, user_id: str, req: idempotency.Request | None
    ) -> int | None:
        """Delete up to CHUNK of the user's memories; None when the request was answered."""
        async with self._db.unit_of_work() as uow:
            if await idempotency.replay(uow, req) is not None:
                return None
            mids = await uow.memory_lifecycle.mids_of_owner(tenant, user_key(user_id), CHUNK)
            for mid in mids:
                await uow.memories.delete(mid)
            await uow.commit()
        return len(mids)

    @retry_conflicts
    async def _finish(
        self, tenant: str, user_id: str, req: idempotency.Request | None, before: int
    ) -> Purged:
        async with self._db.unit_of_work() as uow:
            prior = await idempotency.replay(uow, req)
            if prior is not None:
                return Purged(int(prior["memories"]), int(prior["sessions"]))
            memories = before
            while mids := await uow.memory_lifecycle.mids_of_owner(
                tenant, user_key(user_id), CHUNK
            ):
                for mid in mids:  # written since the chunks: few
                    await uow.memories.delete(mid)
                memories += len(mids)
            sessions = await uow.sessions.keys(tenant, user_id=user_id)
            for sid, _ in sessions:
                await uow.jobs.finish_session(sid)
                await uow.sessions.unlink(sid)
            purged = Purged(memories, len(sessions))
            outcome = {"memories": purged.memories, "sessions": purged.sessions}
            await idempotency.remember(uow, req, None, outcome)  # outlives the sessions
            await uow.commit()
        return purged
