"""A new Phase 2 job wakes one idle claiming loop, not all of them.

Real SQLite file, the real worker with four loops, the offline provider; the claims are
counted on the job store the worker uses (every call goes on to the real claim).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from wm_core import CommitState, Message, Role, TextPart
from wm_server.api.commit_event_encoder import encode_event
from wm_server.llm.offline import OfflineProvider
from wm_server.phase2.settings import WorkerSettings
from wm_server.phase2.state import ClaimedJob
from wm_server.phase2.store import JobStore
from wm_server.phase2.worker import Phase2Worker
from wm_server.security.tenancy import set_tenant
from wm_server.services.commit_event_log import EventLog
from wm_server.services.commit_wakeups import EventBus
from wm_server.services.commits import CommitService
from wm_server.services.paging import PageTokens
from wm_server.services.sessions import SessionService
from wm_server.storage.sqlite import SqliteDatabase


async def _until(check: Callable[[], Awaitable[bool]], within: float = 30.0) -> None:
    for _ in range(int(within / 0.01)):
        if await check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not reached in time")


async def test_each_new_job_costs_one_claim_and_two_empty_looks(tmp_path: Path) -> None:
    set_tenant("t")
    database = SqliteDatabase(tmp_path / "wm.sqlite3")
    await database.open()
    bus, log = EventBus(), EventLog(encode_event)
    tokens = PageTokens.random()
    sessions = SessionService(database, log=log, tokens=tokens)
    commits = CommitService(database, bus, log, heartbeat_seconds=1.0, tokens=tokens)
    store = JobStore(database, log)
    claims: list[ClaimedJob | None] = []
    claim = store.claim

    async def counted(lease_seconds: float) -> ClaimedJob | None:
        job = await claim(lease_seconds)
        claims.append(job)
        return job

    store.claim = counted  # type: ignore[method-assign]
    # Polls an hour apart: every claim below is one a wake-up caused.
    settings = WorkerSettings(concurrency=4, poll_seconds=3600.0)
    worker = Phase2Worker(store, OfflineProvider(), bus, settings)
    await worker.start()
    try:

        async def looked() -> bool:  # each loop looks once at start, finds nothing, waits
            return len(claims) == 4

        await _until(looked)
        for round_ in range(3):
            del claims[:]
            text = (TextPart(f"We chose PostgreSQL 16 for the ledger, round {round_}."),)
            await sessions.add_messages(
                "s", [Message(f"m{round_}", Role.USER, text)], create_if_missing=True,
                request_id="",
            )  # fmt: skip
            record, _ = await commits.phase1("s", 0, None)
            worker.wake()
            commit_id = record.commit_id

            async def completed(commit_id: str = commit_id) -> bool:
                return (await commits.get("s", commit_id)).state is CommitState.COMPLETED

            await _until(completed)
            await asyncio.sleep(0.1)  # the looks the job caused are over by now
            # One loop took the job and rang once more, so one other loop looked and found
            # nothing; the first one looked again after the job. Not every loop.
            assert [job.commit_id if job else None for job in claims] == [commit_id, None, None], (
                claims
            )
    finally:
        await worker.stop()
        await database.close()
