"""Commits: Phase 1 in one transaction, then a stream of the stored progress events.

The stream is a view over the event log, never the work itself: Phase 2 runs in the worker,
so a client that cancels or loses its stream changes nothing, and any client can re-attach
with WatchCommit from the last sequence it saw. When the server shuts down, an open stream
sends what is stored and ends UNAVAILABLE (reason SHUTTING_DOWN, with ``last_sequence``) rather
than hanging until the grace period cuts it, so the client resumes on another replica at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from wm_server.errors import Unavailable, invalid
from wm_server.services import events, paging, validation
from wm_server.services.event_bus import EventBus
from wm_server.storage.port import Store
from wm_server.storage.records import CommitRecord
from wm_server.tenancy import current_tenant

# A stream yields stored event bytes, or a heartbeat it builds itself.
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


class CommitService:
    def __init__(
        self,
        store: Store,
        bus: EventBus,
        *,
        heartbeat_seconds: float,
        on_enqueued: Callable[[], None] = lambda: None,
    ) -> None:
        self._store = store
        self._bus = bus
        self._heartbeat = min(heartbeat_seconds, 15.0)
        self._on_enqueued = on_enqueued

    async def commit(
        self, session_id: str, keep_recent_count: int, request_id: str
    ) -> tuple[CommitRecord, EventStream]:
        """Run Phase 1 now; return the commit and the stream of all its events."""
        sid = validation.session_id(session_id)
        if not 0 <= keep_recent_count <= validation.MAX_KEEP_RECENT:
            raise invalid(
                "keep_recent_count", f"must be 0-{validation.MAX_KEEP_RECENT}", "OUT_OF_RANGE"
            )
        rid = validation.request_id(request_id)
        result = await self._store.commit_phase1(
            current_tenant(), sid, keep_recent_count, rid, validation.new_commit_id(), events.phase1
        )
        if result.created and not result.commit.state.terminal:
            self._on_enqueued()
        return result.commit, self.watch(sid, result.commit.commit_id, 0)

    async def watch(self, session_id: str, commit_id: str, after_sequence: int) -> EventStream:
        """Replay stored events after ``after_sequence``, then tail until the terminal one."""
        tenant = current_tenant()
        record = await self._store.get_commit(tenant, session_id, commit_id)
        if after_sequence < 0:
            raise invalid("after_sequence", "must not be negative", "OUT_OF_RANGE")
        last = after_sequence
        if record.state.terminal and record.last_sequence <= last:
            return
        with self._bus.subscribe(commit_id) as wake:
            while True:
                wake.clear()
                stored = await self._store.events_after(commit_id, last)
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
                    if not await self._store.events_after(commit_id, last):
                        record = await self._store.get_commit(tenant, session_id, commit_id)
                        yield events.heartbeat(commit_id, last, record.state).SerializeToString()

    async def get(self, session_id: str, commit_id: str) -> CommitRecord:
        sid = validation.session_id(session_id)
        if not commit_id:
            raise invalid("commit_id", "required", "REQUIRED")
        return await self._store.get_commit(current_tenant(), sid, commit_id)

    async def list(
        self, session_id: str, page_size: int, page_token: str
    ) -> tuple[list[CommitRecord], str]:

        sid = validation.session_id(session_id)
        size = paging.page_size(page_size)
        offset = paging.decode("commits", page_token) or 0
        records = await self._store.list_commits(current_tenant(), sid, size + 1, offset)
        more = len(records) > size
        return records[:size], paging.encode("commits", offset + size) if more else ""

    async def retry(self, session_id: str, commit_id: str, request_id: str) -> CommitRecord:
        sid = validation.session_id(session_id)
        if not commit_id:
            raise invalid("commit_id", "required", "REQUIRED")
        rid = validation.request_id(request_id)
        tenant = current_tenant()
        if rid and await self._store.remembered(tenant, f"RetryCommit/{commit_id}", rid):
            return await self._store.get_commit(tenant, sid, commit_id)
        record = await self._store.retry_commit(
            tenant, sid, commit_id, lambda seq: events.retry_requested(commit_id, seq)
        )
        if rid:
            await self._store.remember(tenant, f"RetryCommit/{commit_id}", rid, "{}")
        self._bus.publish(commit_id)
        self._on_enqueued()
        return record
