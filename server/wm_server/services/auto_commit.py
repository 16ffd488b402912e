"""The idle sweeper: sessions whose auto-commit policy has an idle timeout are committed whole
once nothing arrived for that long.

Every replica sweeps; the database decides (``CommitService.commit_idle`` locks and checks
each session again), so one commit is made per idle session whatever the number of replicas.
"""

from __future__ import annotations

from wm_server.services.background import BackgroundLoop
from wm_server.services.commits import CommitService


class IdleSweeper(BackgroundLoop):
    name = "idle_sweep"

    def __init__(self, commits: CommitService, *, interval_seconds: float) -> None:
        super().__init__(interval_seconds)
        self._commits = commits

    async def round(self) -> None:
        for record in await self._commits.commit_idle():
            self._log.info(
                "auto_commit",
                trigger="idle",
                session_id=record.session_id,
                commit_id=record.commit_id,
                archived=record.archived_message_count,
            )
