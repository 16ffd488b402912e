"""Background upkeep: purge deleted sessions in bounded chunks, forget expired request ids,
erase what was deleted from the database files.

DeleteSession only unlinks a session (one short transaction); its rows go here, a chunk per
unit of work, so a session of a million messages never holds the writer (SQLite runs its
transactions on the event loop) or a PostgreSQL lock for long. Sessions left unlinked by a
crash are purged after the next start. Request records older than the retention window are
pruned the same way. After a purge, or a memory forgotten (``forgotten``), the engine erases:
the deleted text must not stay readable in its files (``Database.erase``).
"""

from __future__ import annotations

import asyncio
import time

from wm_server.services.background import BackgroundLoop
from wm_server.services.memory_lifecycle import MemoryUpkeep
from wm_server.services.transactions import retry_conflicts
from wm_server.storage.database import Database
from wm_server.storage.sessions import PURGE_ORDER

CHUNK = 2000


class Maintenance(BackgroundLoop):
    name = "maintenance"

    def __init__(
        self,
        database: Database,
        *,
        retention_seconds: float,
        interval_seconds: float = 60.0,
        memories: MemoryUpkeep | None = None,
    ) -> None:
        super().__init__(interval_seconds)
        self._db = database
        self._retention = retention_seconds
        self._memories = memories  # expiry and consolidation (memory_lifecycle)
        self._erase = False  # something was deleted since the last erasure
        self.erasures = 0  # completed (read by tests)

    def forgotten(self) -> None:
        """A memory was deleted: erase it from the files at the next round (soon)."""
        self._erase = True
        self.wake()

    async def round(self) -> None:
        """A session was deleted or a memory forgotten (``wake``), or the interval passed:
        purge, prune, and erase what was deleted."""
        if await self.purge_deleted():
            self._erase = True
        await self.prune_requests()
        if self._memories is not None:
            if await self._memories.expire():
                self._erase = True  # an expired memory is forgotten as DeleteMemory forgets
            await self._memories.consolidate()
        if self._erase:
            self._erase = False
            await self._db.erase()
            self.erasures += 1

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
