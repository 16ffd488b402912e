"""A commit as a test drives it on wm.v1: CreateCommit (or CompactSession), then WatchCommit.

The streaming Commit RPC is gone: the unary call stores Phase 1 and answers the Commit, and
WatchCommit replays its events from the first one and tails it until the terminal event.
These helpers compose the two with the generated classes, nothing else, so a test reads as
before: the commit and every event it produced (heartbeats left out).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from support.wm_names import session
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc

Stub = service_grpc.WorkingMemoryServiceStub
Metadata = Sequence[tuple[str, str]] | None


def create_request(
    session_id: str, keep: int = 0, request_id: str = "", turns: int = 0
) -> api.CreateCommitRequest:
    return api.CreateCommitRequest(
        parent=session(session_id),
        keep_recent_count=keep,
        keep_recent_turns=turns,
        request_id=request_id,
    )


async def events(
    stub: Stub,
    commit: str,
    *,
    after: int = 0,
    within: float | None = 30.0,
    metadata: Metadata = None,
) -> list[pb.CommitEvent]:
    """Every non-heartbeat event of the commit named ``commit`` after ``after``, until the
    terminal one."""
    call: Any = stub.WatchCommit(
        api.WatchCommitRequest(name=commit, after_sequence=after),
        timeout=within,
        metadata=metadata,
    )
    return [e async for e in call if e.stage != pb.COMMIT_STAGE_HEARTBEAT]


async def commit(
    stub: Stub,
    session_id: str,
    keep: int = 0,
    *,
    request_id: str = "",
    turns: int = 0,
    within: float | None = 30.0,
    metadata: Metadata = None,
) -> tuple[pb.Commit, list[pb.CommitEvent]]:
    """CreateCommit then WatchCommit to the end: the commit as Phase 1 stored it, and its
    events."""
    started: pb.Commit = await stub.CreateCommit(
        create_request(session_id, keep, request_id, turns), timeout=within, metadata=metadata
    )
    return started, await events(stub, started.name, within=within, metadata=metadata)


async def compact(
    stub: Stub,
    session_id: str,
    *,
    request_id: str = "",
    within: float | None = 30.0,
    metadata: Metadata = None,
) -> tuple[pb.Commit, list[pb.CommitEvent]]:
    """CompactSession then WatchCommit to the end."""
    started: pb.Commit = await stub.CompactSession(
        api.CompactSessionRequest(name=session(session_id), request_id=request_id),
        timeout=within,
        metadata=metadata,
    )
    return started, await events(stub, started.name, within=within, metadata=metadata)


def commit_sync(
    stub: Stub, session_id: str, keep: int = 0, *, within: float | None = 30.0
) -> tuple[pb.Commit, list[pb.CommitEvent]]:
    """:func:`commit` on a blocking channel."""
    started: pb.Commit = stub.CreateCommit(create_request(session_id, keep), timeout=within)
    call: Any = stub.WatchCommit(api.WatchCommitRequest(name=started.name), timeout=within)
    return started, [e for e in call if e.stage != pb.COMMIT_STAGE_HEARTBEAT]
