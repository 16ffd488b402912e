"""Warming the recall indexes after a start, in the background.

The search's in-process indexes (``memory_index``: an owner's memories and their vectors;
``lexical_index``: a session's archived rows; the ``VectorCache`` of their vectors) are built
at the first search that needs them: 100,000 memories take seconds to read and build, which
the first query after every restart would wait for. So at start the owners whose memories
were written last and the sessions that archived last are read in, one at a time on readers
(never holding the writer), newest first, until the lists end or an index is three quarters
full (warming more would only evict what was warmed). The server serves meanwhile; a search
that comes first builds its own, as without warming. Progress is logged and counted
(``wm_recall_warmed_total{kind}``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

import structlog

from wm_server.cancellation import cancel_and_wait
from wm_server.services.recall import HybridRecall
from wm_server.storage.database import Database

log = structlog.get_logger("wm_server.recall_warmup")

# How many of the most recently written owners and archived sessions a start warms at most.
OWNERS = 32
SESSIONS = 128


class WarmupObserver(Protocol):
    def recall_warmed(self, kind: str, count: int) -> None: ...


class _NoObserver:
    def recall_warmed(self, kind: str, count: int) -> None:
        return None


class RecallWarmup:
    def __init__(
        self,
        database: Database,
        recall: HybridRecall,
        *,
        observer: WarmupObserver | None = None,
        owners: int = OWNERS,
        sessions: int = SESSIONS,
    ) -> None:
        self._db = database
        self.recall = recall
        self._observer = observer or _NoObserver()
        self._owners = owners
        self._sessions = sessions
        self._task: asyncio.Task[None] | None = None
        self.finished = asyncio.Event()  # set when the warm-up ended (done, or failed)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="recall_warmup")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _run(self) -> None:
        try:
            await self.run()
        except asyncio.CancelledError:
            raise
        except Exception as error:  # an outage: the searches build their own
            log.warning("recall_warmup_failed", error=str(error))
        finally:
            self.finished.set()

    async def run(self) -> tuple[int, int]:
        """Warm the indexes; (owners, sessions) warmed."""
        started = time.monotonic()
        async with self._db.reader() as uow:
            owners = await uow.memory_rows.recent_owners(self._owners)
            sids = await uow.lexical.recent(self._sessions)
        log.info("recall_warmup_started", owners=len(owners), sessions=len(sids))
        memories = self.recall.memory_index
        warmed_owners = 0
        for tenant, owner in owners:
            if memories.filled:
                break
            async with self._db.reader() as uow:
                held = await memories.owner(uow, tenant, owner)
            warmed_owners += 1
            self._observer.recall_warmed("memories", 1)
            log.info(
                "recall_warmup_progress", kind="memories", done=warmed_owners,
                of=len(owners), rows=held.size if held else 0,
                megabytes=round(memories.weight / 1e6, 1),
            )  # fmt: skip
        lexical, cache, model = self.recall.lexical, self.recall.cache, self.recall.model
        warmed_sessions = 0
        for sid in sids:
            if lexical.filled or (model is not None and cache.filled):
                break
            async with self._db.reader() as uow:
                await lexical.segments(uow, [sid])
                if model is not None:
                    await cache.session(uow, sid, model, self.recall.dimensions)
            warmed_sessions += 1
            self._observer.recall_warmed("sessions", 1)
            if warmed_sessions % 16 == 0 or warmed_sessions == len(sids):
                log.info(
                    "recall_warmup_progress", kind="sessions", done=warmed_sessions,
                    of=len(sids), megabytes=round(lexical.weight / 1e6, 1),
                )  # fmt: skip
        log.info(
            "recall_warmup_finished", owners=warmed_owners, sessions=warmed_sessions,
            seconds=round(time.monotonic() - started, 2),
        )  # fmt: skip
        return warmed_owners, warmed_sessions
