"""Helpers shared by the reliability tests: stream reading and the store invariants.

The invariants are checked on the SQLite file itself, after the server has stopped, so
they say what a restarted server (or an operator) would find on disk, not what a cache or
an in-flight stream pretends.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from support import builders as b
from support import commit_flow, wm_names
from wm_core import CommitState
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.api.commit_event_encoder import encode_event
from wm_server.app import Application
from wm_server.security.tenancy import set_tenant
from wm_server.services.commit_event_log import EventLog
from wm_server.services.paging import PageTokens
from wm_server.services.sessions import SessionService
from wm_server.storage.sqlite import SqliteDatabase

Stub = service_grpc.WorkingMemoryServiceStub
# The ``llm_server`` fixture: starts a server with environment overrides.
LlmServer = Callable[..., Awaitable[Application]]
TENANT = "default"

# gRPC shares subchannels between channels; after a SIGKILL the shared one sits in
# reconnect backoff, so every channel to a (re)started server gets its own pool.
FRESH: list[tuple[str, int]] = [("grpc.use_local_subchannel_pool", 1)]

# Client-side limits large enough that a big but legal response is never refused by the
# client itself (which would look like a server RESOURCE_EXHAUSTED).
BIG_CLIENT: list[tuple[str, int]] = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]


def turn(rng: random.Random, message_id: str, index: int) -> pb.Message:
    """A user request or an assistant answer of varied length that the offline summarizer can
    read (it finds nothing to keep in filler such as "xxxx" and fails the commit)."""
    module = f"src/module_{rng.randrange(20)}.py"
    filler = " and then re-run the whole suite" * rng.randint(0, 8)
    if index % 2 == 0:
        return b.user(f"Please fix the failing test in {module}{filler}.", message_id)
    return b.assistant(f"I changed {module}; the test passes now{filler}.", message_id)


async def wait_terminal(stub: Stub, commit: str, within: float = 30.0) -> list[pb.CommitEvent]:
    """Replay the commit named ``commit`` from its first event and tail it until the
    terminal event (the call's deadline is ``within`` seconds)."""
    return await commit_flow.events(stub, commit, within=within)


def is_retry_request(event: pb.CommitEvent) -> bool:
    """The event RetryCommit stores when it reopens a failed commit (attempt 0)."""
    return event.stage == pb.COMMIT_STAGE_RETRY_SCHEDULED and event.retry_scheduled.attempt == 0


def assert_well_formed(events: list[pb.CommitEvent], *, streamed: bool = True) -> pb.CommitEvent:
    """Sequences 1..n without gaps; the last event is terminal; returns it.

    Every run of Phase 2 ends in exactly one FAILED, COMPLETED or skipped end. A commit that
    RetryCommit reopened has one run per retry: its earlier FAILED event is followed at once
    by the retry request. As stored, each run's end says terminal; as WatchCommit sends them
    (``streamed``), only the last event does (``terminal`` is final in wm.v1).
    """
    assert [e.sequence for e in events] == list(range(1, len(events) + 1)), [
        e.sequence for e in events
    ]
    stages = [pb.CommitStage.Name(e.stage) for e in events]
    assert events and events[-1].terminal, stages
    run_ends = 0
    for index, event in enumerate(events[:-1]):
        if event.stage == pb.COMMIT_STAGE_FAILED:
            assert is_retry_request(events[index + 1]), stages
            run_ends += 1
            assert event.terminal != streamed, stages
        else:
            assert not event.terminal, stages
    runs = 1 + sum(1 for e in events if is_retry_request(e))
    assert run_ends + 1 == runs, stages
    return events[-1]


@dataclass
class SessionReport:
    """What the invariant check found for one session (for further assertions)."""

    stored_ids: list[str] = field(default_factory=list)
    archive_count: int = 0
    commit_states: dict[str, CommitState] = field(default_factory=dict)


async def check_store_invariants(
    db_path: Path, acked: Mapping[str, Iterable[str]]
) -> dict[str, SessionReport]:
    """Open the stopped server's SQLite file and check every invariant of the brief.

    For each session in ``acked`` (its acknowledged message ids):

    * every acknowledged message is stored exactly once, live or archived, and nothing is
      stored twice; positions are 1..total without gaps;
    * archive numbers are 1..n without gaps and match the session's archive_count;
    * every commit is terminal, its stored events are numbered 1..last_sequence without
      gaps, and exactly one of them is terminal: the last;
    * the stored pending_tokens and live_tokens equal the rebuild from the messages.
    """
    database = SqliteDatabase(db_path)
    await database.open()
    set_tenant(TENANT)
    sessions = SessionService(database, log=EventLog(encode_event), tokens=PageTokens.random())
    reports: dict[str, SessionReport] = {}
    try:
        for session_id, ids in acked.items():
            report = SessionReport()
            session = await sessions.get(session_id)
            async with database.scanner() as uow:
                row = await uow.sessions.find(TENANT, session_id)
                assert row is not None, session_id
                archives = await uow.commits.archived_after(row.sid, 0, 1_000_000)
                bounds = [await uow.archives.bounds(row.sid, a.archive_seq or 0) for a in archives]
                archived = [await uow.messages.between(row.sid, *b) for b in bounds if b]
                commits = await uow.commits.page(row.sid, 1_000_000, 0)
                events = {c.commit_id: await uow.events.after(c.commit_id, 0) for c in commits}
            seqs = [a.archive_seq for a in archives]
            assert seqs == list(range(1, len(seqs) + 1)), (session_id, seqs)
            assert session.archive_count == len(seqs), (session_id, session.archive_count)
            stored: list[str] = []
            positions: list[int] = []
            assert len(archived) == len(seqs)
            for messages in archived:
                stored.extend(m.message.id for m in messages)
            live = await sessions.live_messages(session_id)
            stored.extend(m.message.id for m in live)
            positions.extend(m.position for m in live)
            assert len(stored) == len(set(stored)), f"{session_id}: a message is stored twice"
            missing = set(ids) - set(stored)
            assert not missing, f"{session_id}: acknowledged but lost: {sorted(missing)[:10]}"
            assert session.total_message_count == len(stored)
            assert session.message_count == len(live)
            if positions:  # live positions continue right after the archived ones
                assert positions == list(range(len(stored) - len(live) + 1, len(stored) + 1))
            for commit in commits:
                assert commit.state.terminal, (session_id, commit.commit_id, commit.state)
                stored_events = events[commit.commit_id]
                assert stored_events[-1].sequence == commit.last_sequence
                decoded = [pb.CommitEvent.FromString(e.payload) for e in stored_events]
                assert [e.terminal for e in stored_events] == [e.terminal for e in decoded]
                last = assert_well_formed(decoded, streamed=False)
                assert last.state == _STATE_OUT[commit.state], (commit.commit_id, last.state)
                report.commit_states[commit.commit_id] = commit.state
            archived_by_commits = sorted(c.archive_seq for c in commits if c.archive_seq)
            assert archived_by_commits == seqs, (session_id, archived_by_commits)
            before = (session.pending_tokens, session.live_tokens)
            assert before == await sessions.rebuild_pending_tokens(session_id), session_id
            report.stored_ids = stored
            report.archive_count = len(seqs)
            reports[session_id] = report
    finally:
        await database.close()
    return reports


_STATE_OUT = {
    CommitState.PENDING: pb.COMMIT_STATE_PENDING,
    CommitState.RUNNING: pb.COMMIT_STATE_RUNNING,
    CommitState.COMPLETED: pb.COMMIT_STATE_COMPLETED,
    CommitState.FAILED: pb.COMMIT_STATE_FAILED,
    CommitState.SKIPPED: pb.COMMIT_STATE_SKIPPED,
}


async def settle(stub: Stub, session_ids: Iterable[str], within: float = 60.0) -> None:
    """Wait until every commit of the sessions is terminal (Phase 2 drained), at most
    ``within`` seconds in all."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    for session_id in session_ids:
        token = ""
        commits: list[str] = []
        while True:
            page = await stub.ListCommits(
                api.ListCommitsRequest(
                    parent=wm_names.session(session_id), page_size=1000, page_token=token
                )
            )
            commits.extend(c.name for c in page.commits)
            token = page.next_page_token
            if not token:
                break
        for commit in commits:
            remaining = max(1.0, deadline - loop.time())
            await wait_terminal(stub, commit, within=remaining)
