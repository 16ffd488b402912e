"""A new Phase 2 job wakes one idle claiming loop, not all of them; a claim wakes another
loop only when it saw another claimable job.

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
from wm_server.llm.port import LlmProvider
from wm_server.llm.scripted import ScriptedProvider, ScriptedResponse
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


class _Rig:
    """A real SQLite file, the services, and the real worker (four loops, polls an hour
    apart: every claim is one a wake-up caused), its claims recorded in order."""

    def __init__(self, tmp_path: Path) -> None:
        set_tenant("t")
        self.database = SqliteDatabase(tmp_path / "wm.sqlite3")
        self.bus = EventBus()
        self.log = EventLog(encode_event, self.bus)
        tokens = PageTokens.random()
        self.sessions = SessionService(self.database, log=self.log, tokens=tokens)
        self.commits = CommitService(
            self.database, self.bus, self.log, heartbeat_seconds=1.0, tokens=tokens
        )
        self.claims: list[ClaimedJob | None] = []

    async def start(self, provider: LlmProvider) -> Phase2Worker:
        await self.database.open()
        store = JobStore(self.database, self.log)
        claim = store.claim

        async def counted(lease_seconds: float) -> ClaimedJob | None:
            job = await claim(lease_seconds)
            self.claims.append(job)
            return job

        store.claim = counted  # type: ignore[method-assign]
        settings = WorkerSettings(concurrency=4, poll_seconds=3600.0)
        worker = Phase2Worker(store, provider, settings)
        await worker.start()
        await _until(self.looked)  # each loop looks once at start, finds nothing, waits
        return worker

    async def looked(self) -> bool:
        return len(self.claims) == 4

    async def commit(self, session: str, text: str) -> str:
        """Phase 1 of a commit of one message (its job queued, no loop woken)."""
        message = Message(f"m-{session}-{len(self.claims)}", Role.USER, (TextPart(text),))
        await self.sessions.add_messages(session, [message], create_if_missing=True, request_id="")
        record, _ = await self.commits.phase1(session, 0, None)
        return record.commit_id

    async def state(self, session: str, commit_id: str) -> CommitState:
        return (await self.commits.get(session, commit_id)).state


async def test_each_new_job_costs_one_claim_and_one_empty_look(tmp_path: Path) -> None:
    rig = _Rig(tmp_path)
    worker = await rig.start(OfflineProvider())
    claims, commits, sessions = rig.claims, rig.commits, rig.sessions
    try:
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
            # One loop took the job; its claim saw no other job, so it woke no other loop;
            # it looked again after the job. Not every loop.
            assert [job.commit_id if job else None for job in claims] == [commit_id, None], claims
    finally:
        await worker.stop()
        await rig.database.close()


async def test_a_claim_that_sees_another_job_wakes_another_loop(tmp_path: Path) -> None:
    """Two sessions' jobs queued, one wake-up: the loop that claims the first wakes another,
    which claims the second while the first still runs (its model call takes a second)."""
    rig = _Rig(tmp_path)
    slow = ScriptedProvider(
        [ScriptedResponse(tool_input="not a tool call", text="no")], delay=1.0, loop=True
    )
    worker = await rig.start(slow)
    try:
        del rig.claims[:]
        first = await rig.commit("a", "We chose PostgreSQL 16 for the ledger.")
        second = await rig.commit("b", "We chose SQLite for the cache.")
        worker.wake()

        async def both_claimed() -> bool:
            return len([job for job in rig.claims if job is not None]) == 2

        await _until(both_claimed, within=0.9)  # before the first model call answered
        assert [job.commit_id for job in rig.claims[:2] if job] == [first, second]
        assert await rig.state("a", first) is CommitState.RUNNING
        assert await rig.state("b", second) is CommitState.RUNNING
    finally:
        await worker.stop()
        await rig.database.close()
