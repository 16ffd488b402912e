"""The idle sweeper: sessions whose auto-commit policy has an idle timeout are committed whole
once nothing arrived for that long.

Every replica sweeps; the database decides (``CommitService.commit_idle`` locks and checks
each session again), so one commit is made per idle session whatever the number of replicas.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from wm_server.services.commits import CommitService

log = structlog.get_logger("wm_server.auto_commit")


class IdleSweeper:
    def __init__(self, commits: CommitService, *, interval_seconds: float) -> None:
        self._commits = commits
        self._interval = interval_seconds
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="wm-idle-sweeper")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                for record in await self._commits.commit_idle():
                    log.info(
                        "auto_commit",
                        trigger="idle",
                        session_id=record.session_id,
                        commit_id=record.commit_id,
                        archived=record.archived_message_count,
                    )
            except asyncio.CancelledError:
                raise
            except Exception as error:  # an outage: sweep again on the next round
                log.warning("idle_sweep_failed", error=str(error))
            await asyncio.sleep(self._interval)
