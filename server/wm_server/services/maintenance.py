"""Background upkeep: purge deleted sessions in bounded chunks, forget expired request ids.

DeleteSession only unlinks a session (one short transaction); its rows go here, a chunk per
unit of work, so a session of a million messages never holds the writer (SQLite runs its
transactions on the event loop) or a PostgreSQL lock for long. Sessions left unlinked by a
crash are purged after the next start. Request records older than the retention window are
pruned the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import structlog

from wm_server.services.transactions import retry_conflicts
from wm_server.storage.database import Database
from wm_server.storage.repositories import PURGE_ORDER

log = structlog.get_logger("wm_server.maintenance")

CHUNK = 2000


class Maintenance:
    def __init__(
        self, database: Database, *, retention_seconds: float, interval_seconds: float = 60.0
    ) -> None:
        self._db = database
        self._retention = retention_seconds
        self._interval = interval_seconds
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        """A session was deleted: purge it soon."""
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="wm-maintenance")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.purge_deleted()
                await self.prune_requests()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # an outage: try again on the next round
                log.warning("maintenance_failed", error=str(error))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval)

    async def purge_deleted(self) -> int:
        """Remove every unlinked session's rows; the number of rows removed."""
        async with self._db.reader() as uow:
            sids = await uow.sessions.unlinked()
        removed = 0
        for sid in sids:
            for table, key in PURGE_ORDER:
                while True:
                    count = await self._purge_chunk(table, key, sid)
                    removed += count
                    await asyncio.sleep(0)  # let other work run between chunks
                    if count < CHUNK:
                        break
        return removed

    @retry_conflicts
    async def _purge_chunk(self, table: str, key: str, sid: int) -> int:
        async with self._db.unit_of_work() as uow:
            count = await uow.sessions.purge(table, key, sid, CHUNK)
            await uow.commit()
        return count

    async def prune_requests(self) -> int:
        """Forget request ids older than the retention window; the number forgotten."""
        before = time.time() - self._retention
        pruned = 0
        while True:
            count = await self._prune_chunk(before)
            pruned += count
            await asyncio.sleep(0)
            if count < CHUNK:
                return pruned

    @retry_conflicts
    async def _prune_chunk(self, before: float) -> int:
        async with self._db.unit_of_work() as uow:
            count = await uow.requests.prune(before, CHUNK)
            await uow.commit()
        return count
