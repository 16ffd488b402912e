"""A bounded load run: many concurrent clients on loopback while commits run.

Writers stream batches into shared sessions, committers archive them (Phase 2 runs in the
background on the offline provider), readers assemble context, search, expand archives and
watch commits. The server is started with a low concurrent-RPC limit, so some calls are
refused with RESOURCE_EXHAUSTED, the documented answer to too many RPCs at once; clients
retry those with the same request id and message ids, as the contract allows. The run is
bounded in time and in calls; afterwards every commit must be terminal and completed, and
the stopped server's file must hold every acknowledged message exactly once.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import grpc
from reliability_support import FRESH, Stub, check_store_invariants, settle, turn

from support import builders as b
from support import wm_names
from support.server_process import ServerProcess
from wm_core import CommitState
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc

SESSIONS = [f"load-{i}" for i in range(4)]
SECONDS = 4.0  # wall-clock bound of the run
MAX_CALLS = 4000  # call-count bound of the run
WRITERS, COMMITTERS, READERS = 8, 3, 5
CONCURRENCY_LIMIT = 6  # WM_MAX_CONCURRENT_RPCS: well below the 16 clients, on purpose
# The only error a client may see: the documented "too many concurrent RPCs" refusal.
ALLOWED = {grpc.StatusCode.RESOURCE_EXHAUSTED}

T = TypeVar("T")


class Run:
    """The shared bookkeeping of the run: its bounds, the outcomes, what was acknowledged."""

    def __init__(self) -> None:
        self.deadline = time.monotonic() + SECONDS
        self.calls = 0
        self.codes: Counter[str] = Counter()
        self.acked: dict[str, set[str]] = {s: set() for s in SESSIONS}
        self.archives: dict[str, int] = dict.fromkeys(SESSIONS, 0)

    def going(self) -> bool:
        return time.monotonic() < self.deadline and self.calls < MAX_CALLS

    async def attempt(self, rpc: Callable[[], Awaitable[T]]) -> T | None:
        """One call: its outcome is counted; a documented refusal returns None."""
        self.calls += 1
        try:
            result = await rpc()
        except grpc.aio.AioRpcError as error:
            self.codes[error.code().name] += 1
            assert error.code() in ALLOWED, f"{error.code()}: {error.details()}"
            return None
        self.codes["OK"] += 1
        return result

    async def until_done(self, rpc: Callable[[], Awaitable[T]]) -> T:
        """Retry a mutating call with the same request (ids) until it is acknowledged."""
        for backoff in itertools.count():
            result = await self.attempt(rpc)
            if result is not None:
                return result
            await asyncio.sleep(min(0.2, 0.005 * 2**backoff))
        raise AssertionError("unreachable")


async def writer(stub: Stub, run: Run, number: int, rng: random.Random) -> None:
    """Batches of 1-14 messages (sometimes a tool call pair) into random shared sessions."""
    for batch in itertools.count():
        if not run.going():
            return
        session = rng.choice(SESSIONS)
        prefix = f"w{number}-{batch}"
        messages = [turn(rng, f"{prefix}-{i}", i) for i in range(rng.randint(1, 12))]
        if rng.random() < 0.3:
            messages.append(b.tool_call(f"t-{prefix}", "grep", {"q": "x"}, f"{prefix}-call"))
            messages.append(b.tool_result(f"t-{prefix}", "no match", message_id=f"{prefix}-res"))
        request = api.AddMessagesRequest(
            parent=wm_names.session(session), messages=messages, request_id=f"add-{prefix}"
        )
        reply = await run.until_done(lambda request=request: stub.AddMessages(request, timeout=10))
        ids = {m.id for m in messages}
        assert set(reply.added_message_ids) | set(reply.duplicate_message_ids) == ids
        run.acked[session] |= ids


async def committer(stub: Stub, run: Run, number: int, rng: random.Random) -> None:
    """Commits with varied keep windows, each retried under its own request id."""
    for count in itertools.count():
        if not run.going():
            return
        session = rng.choice(SESSIONS)
        request = api.CreateCommitRequest(
            parent=wm_names.session(session),
            keep_recent_count=rng.choice([0, 2, 5, 20]),
            request_id=f"commit-{number}-{count}",
        )
        # Phase 1 only: CreateCommit answers once it is stored (Phase 2 goes on unwatched).
        first = await run.until_done(lambda request=request: stub.CreateCommit(request, timeout=10))
        assert first.last_sequence >= 1 and (
            first.archive or first.state == pb.COMMIT_STATE_SKIPPED
        )
        await asyncio.sleep(rng.uniform(0.05, 0.2))


async def reader(stub: Stub, run: Run, rng: random.Random) -> None:
    """The read side a runtime uses between turns, while the writers and commits go on."""
    while run.going():
        session = rng.choice(SESSIONS)
        choice = rng.randrange(6)
        if choice == 0:
            request = api.GetSessionRequest(name=wm_names.session(session))
            await run.attempt(partial(stub.GetSession, request, timeout=10))
        elif choice == 1:
            assemble = api.AssembleContextRequest(
                name=wm_names.session(session), token_budget=60_000
            )
            context = await run.attempt(partial(stub.AssembleContext, assemble, timeout=10))
            if context is not None:  # the contract's shape holds under load too
                roles = [m.role for m in context.messages]
                assert all(a != c for a, c in itertools.pairwise(roles))
        elif choice == 2:
            search = api.SearchArchivesRequest(parent=wm_names.session(session), query="module_7")
            await run.attempt(partial(stub.SearchArchives, search, timeout=10))
        elif choice == 3:
            archives = api.ListArchivesRequest(parent=wm_names.session(session))
            listed = await run.attempt(partial(stub.ListArchives, archives, timeout=10))
            if listed is not None and listed.archives:
                archive = rng.choice(list(listed.archives)).name
                expand = api.GetArchiveRequest(name=archive)
                await run.attempt(partial(stub.GetArchive, expand, timeout=10))
                messages = api.ListMessagesRequest(parent=archive)
                await run.attempt(partial(stub.ListMessages, messages, timeout=10))
        elif choice == 4:
            commits = api.ListCommitsRequest(parent=wm_names.session(session))
            page = await run.attempt(partial(stub.ListCommits, commits, timeout=10))
            if page is not None and page.commits:
                get = api.GetCommitRequest(name=rng.choice(list(page.commits)).name)
                await run.attempt(partial(stub.GetCommit, get, timeout=10))
        else:
            tools = api.GetToolDefinitionsRequest()
            await run.attempt(partial(stub.GetToolDefinitions, tools, timeout=10))


async def test_bounded_concurrent_load_loses_nothing(tmp_path: Path) -> None:
    """See the module docstring; figures are printed, never asserted as timings."""
    server = ServerProcess(
        tmp_path,
        WM_MAX_CONCURRENT_RPCS=str(CONCURRENCY_LIMIT),
        WM_PHASE2_CONCURRENCY="2",
        WM_PHASE2_RETRY_BASE_DELAY="0.05",
        WM_HEARTBEAT_SECONDS="0.5",
        WM_LOG_LEVEL="warning",
    ).start()
    run = Run()
    rng = random.Random(7)
    try:
        async with (
            grpc.aio.insecure_channel(server.address, options=FRESH) as first,
            grpc.aio.insecure_channel(server.address, options=FRESH) as second,
        ):
            stubs = [service_grpc.WorkingMemoryServiceStub(ch) for ch in (first, second)]
            for session in SESSIONS:
                await stubs[0].CreateSession(api.CreateSessionRequest(session_id=session))
            run.deadline = time.monotonic() + SECONDS
            started = time.monotonic()
            tasks = [
                *(
                    writer(stubs[i % 2], run, i, random.Random(rng.random()))
                    for i in range(WRITERS)
                ),
                *(
                    committer(stubs[i % 2], run, i, random.Random(rng.random()))
                    for i in range(COMMITTERS)
                ),
                *(reader(stubs[i % 2], run, random.Random(rng.random())) for i in range(READERS)),
            ]
            await asyncio.wait_for(asyncio.gather(*tasks), SECONDS + 30)
            elapsed = time.monotonic() - started
            print(f"load: {run.calls} calls in {elapsed:.1f}s, outcomes {dict(run.codes)}")
            assert run.codes["OK"] > 200  # the run did real work
            await settle(stubs[0], SESSIONS, within=60)
            for session in SESSIONS:
                got = await stubs[0].GetSession(
                    api.GetSessionRequest(name=wm_names.session(session))
                )
                run.archives[session] = got.archive_count
                # Phase 2 completed every archive: one working-memory version each.
                assert got.working_memory_version == got.archive_count
            assert sum(run.archives.values()) > 0  # commits ran while the writers wrote
        assert server.terminate() == 0
    finally:
        server.kill()
    reports = await check_store_invariants(tmp_path / "wm.sqlite3", run.acked)
    for session in SESSIONS:
        report = reports[session]
        assert sorted(report.stored_ids) == sorted(run.acked[session])
        assert report.archive_count == run.archives[session]
        assert set(report.commit_states.values()) <= {CommitState.COMPLETED, CommitState.SKIPPED}
