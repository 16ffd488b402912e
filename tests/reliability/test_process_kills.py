"""SIGKILL the real server process mid-work, restart it on the same file, check the invariants.

No shutdown code runs on SIGKILL, so whatever survives is what the SQLite transactions made
durable. After the restart (and after clients re-send what was in flight, as real clients
do) the stopped server's file must show: every acknowledged message stored exactly once,
archive numbers contiguous, every commit terminal exactly once with a gap-free event log,
and pending_tokens equal to their rebuild from the messages.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from pathlib import Path
from typing import Any

import grpc
import pytest
from reliability_support import FRESH, Stub, check_store_invariants, settle, turn

from support import builders as b
from support import commit_flow, wm_names
from support.fake_anthropic import FakeAnthropic, RecordedRequest, Reply, slow, tool_use
from support.server_process import ServerProcess
from wm_core import SECTIONS, CommitState
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc

pytestmark = pytest.mark.slow


def _batch(session: str, number: int, rng: random.Random) -> list[pb.Message]:
    """Ten messages with ids unique in the session; some batches carry a tool call pair, so
    commits have to move their split around it."""
    prefix = f"{session}-{number}"
    messages = [turn(rng, f"{prefix}-{i}", i) for i in range(8)]
    messages.append(b.tool_call(f"t-{prefix}", "read_file", {"path": "a.py"}, f"{prefix}-call"))
    messages.append(b.tool_result(f"t-{prefix}", "print(1)", message_id=f"{prefix}-result"))
    return messages


async def test_sigkill_during_ingest_and_commits(tmp_path: Path) -> None:
    """Writers stream batches into three sessions while commits archive them; the process is
    killed in the middle of it, restarted, and the in-flight batches are re-sent."""
    rng = random.Random(11)
    sessions = ["ingest-a", "ingest-b", "ingest-c"]
    acked: dict[str, set[str]] = {s: set() for s in sessions}
    in_flight: dict[str, tuple[str, list[pb.Message]]] = {}
    # A Phase 2 job leased when the process dies is taken up again once its lease runs out:
    # a short lease keeps that within the settle budget below.
    server = ServerProcess(
        tmp_path, WM_PHASE2_RETRY_BASE_DELAY="0.05", WM_PHASE2_LEASE_SECONDS="1"
    ).start()
    try:
        async with grpc.aio.insecure_channel(server.address, options=FRESH) as channel:
            stub = service_grpc.WorkingMemoryServiceStub(channel)
            enough = asyncio.Event()

            async def writer(session: str) -> None:
                for number in itertools.count():
                    batch = _batch(session, number, rng)
                    request_id = f"{session}-batch-{number}"
                    in_flight[session] = (request_id, batch)
                    await stub.AddMessages(
                        api.AddMessagesRequest(
                            parent=wm_names.session(session),
                            messages=batch,
                            create_session_if_missing=True,
                            request_id=request_id,
                        ),
                        timeout=10,
                    )
                    del in_flight[session]
                    acked[session].update(m.id for m in batch)
                    if sum(len(ids) for ids in acked.values()) >= 600:
                        enough.set()

            async def committer() -> None:
                while True:
                    for session in sessions:
                        if not acked[session]:
                            continue
                        first = await stub.CreateCommit(  # Phase 1; Phase 2 runs on its own
                            commit_flow.create_request(session, rng.randint(0, 6)), timeout=10
                        )
                        assert first.name and first.last_sequence >= 1
                    await asyncio.sleep(0.02)

            tasks = [asyncio.create_task(writer(s)) for s in sessions]
            tasks.append(asyncio.create_task(committer()))
            await asyncio.wait_for(enough.wait(), 60)
            server.kill()
            results = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        server.kill()
    assert len(in_flight) == len(sessions)  # every writer had a batch on the wire
    for result in results:  # every client saw the crash as a failed RPC, nothing else
        assert isinstance(result, grpc.aio.AioRpcError), result
        assert result.code() == grpc.StatusCode.UNAVAILABLE, result

    server.start()
    try:
        async with grpc.aio.insecure_channel(server.address, options=FRESH) as channel:
            stub = service_grpc.WorkingMemoryServiceStub(channel)
            # A client retries what it did not see acknowledged, with the same ids: whether
            # the batch was stored before the kill or not, it is stored exactly once now.
            for session, (request_id, batch) in in_flight.items():
                reply = await stub.AddMessages(
                    api.AddMessagesRequest(
                        parent=wm_names.session(session),
                        messages=batch,
                        create_session_if_missing=True,
                        request_id=request_id,
                    ),
                    timeout=10,
                )
                stored = {*reply.added_message_ids, *reply.duplicate_message_ids}
                assert stored == {m.id for m in batch}
                acked[session].update(m.id for m in batch)
            await settle(stub, sessions)
            archived = 0
            for session in sessions:
                got = await stub.GetSession(api.GetSessionRequest(name=wm_names.session(session)))
                archived += got.archive_count
            assert archived > 0  # commits really ran concurrently with the writers
    finally:
        assert server.terminate() == 0

    reports = await check_store_invariants(tmp_path / "wm.sqlite3", acked)
    for session in sessions:
        assert sorted(reports[session].stored_ids) == sorted(acked[session])
        # Phase 2 of every archive ran to the end, the interrupted ones after the restart.
        outcomes = set(reports[session].commit_states.values())
        assert outcomes <= {CommitState.COMPLETED, CommitState.SKIPPED}, outcomes


SLOW_ANSWER = 0.6  # seconds the fake model takes: long enough to be killed mid-call
SECTION_BODIES = {name: f"- {name} from the fake model" for name in SECTIONS}
SECTION_BODIES["Session Title"] = "Crash-tested session"


def _model(request: RecordedRequest, delay: float) -> Reply:
    """A well-behaved model answering the forced tool of the request after ``delay``."""
    choice = (request.tool_choice or {}).get("name", "")
    if choice == "create_working_memory":
        return slow(tool_use(SECTION_BODIES, name="create_working_memory"), delay)
    sections: dict[str, Any] = {name: {"op": "KEEP"} for name in SECTIONS}
    sections["Key Facts & Decisions"] = {"op": "APPEND", "items": ["One more fact"]}
    return slow(tool_use({"sections": sections}), delay)


async def _commit_phase1(stub: Stub, session: str, number: int) -> tuple[str, str]:
    """Add one message and commit it; returns the acknowledged message id and the commit."""
    message_id = f"{session}-m{number}"
    await stub.AddMessages(
        api.AddMessagesRequest(
            parent=wm_names.session(session),
            messages=[b.user(f"step {number} of {session}", message_id)],
            create_session_if_missing=True,
        ),
        timeout=10,
    )
    first = await stub.CreateCommit(commit_flow.create_request(session), timeout=10)
    assert first.archive  # Phase 1 archived the message
    return message_id, first.name


async def test_sigkill_during_phase2_completes_every_commit_exactly_once(tmp_path: Path) -> None:
    """Phase 2 runs on the real Anthropic SDK against a slow fake model; the server is killed
    twice while model calls are in flight. After the last restart every commit completes
    once: one working-memory version per archive, nothing applied twice, nothing skipped."""
    sessions = ["p2-a", "p2-b", "p2-c"]
    commits: dict[str, list[str]] = {s: [] for s in sessions}
    acked: dict[str, set[str]] = {s: set() for s in sessions}
    numbers = itertools.count()
    with FakeAnthropic(default=lambda request: _model(request, SLOW_ANSWER)) as fake:
        server = ServerProcess(
            tmp_path,
            WM_LLM_PROVIDER="anthropic",
            ANTHROPIC_API_KEY="sk-ant-test-reliability",
            ANTHROPIC_BASE_URL=fake.base_url,
            WM_ANTHROPIC_MAX_RETRIES="1",
            WM_ANTHROPIC_TIMEOUT="5",
            WM_PHASE2_LEASE_SECONDS="1",
            WM_PHASE2_MAX_ATTEMPTS="10",
            WM_PHASE2_RETRY_BASE_DELAY="0.05",
            WM_PHASE2_CONCURRENCY="2",
            WM_HEARTBEAT_SECONDS="0.5",
        )
        try:
            for _cycle in range(2):
                server.start()
                async with grpc.aio.insecure_channel(server.address, options=FRESH) as channel:
                    stub = service_grpc.WorkingMemoryServiceStub(channel)
                    seen = len(fake.requests)
                    for session in sessions:
                        for _ in range(2):
                            message_id, commit_id = await _commit_phase1(
                                stub, session, next(numbers)
                            )
                            acked[session].add(message_id)
                            commits[session].append(commit_id)
                    # Kill while the model is answering: a request has arrived and its slow
                    # answer is not back yet.
                    for _ in range(250):
                        if len(fake.requests) > seen:
                            break
                        await asyncio.sleep(0.02)
                    assert len(fake.requests) > seen, "Phase 2 never called the model"
                    await asyncio.sleep(SLOW_ANSWER / 3)
                    server.kill()
            fake.set_default(lambda request: _model(request, 0.0))
            server.start()
            async with grpc.aio.insecure_channel(server.address, options=FRESH) as channel:
                stub = service_grpc.WorkingMemoryServiceStub(channel)
                await settle(stub, sessions, within=90)
                resumed = 0
                for session in sessions:
                    got = await stub.GetSession(
                        api.GetSessionRequest(name=wm_names.session(session))
                    )
                    assert got.archive_count == len(commits[session]) == 4
                    # Exactly once: one working-memory version per archive, no more.
                    assert got.working_memory_version == got.archive_count
                    for commit_id in commits[session]:
                        commit = await stub.GetCommit(api.GetCommitRequest(name=commit_id))
                        assert commit.state == pb.COMMIT_STATE_COMPLETED, commit
                        resumed += commit.attempt_count > 1
                    wm = await stub.GetWorkingMemory(
                        api.GetWorkingMemoryRequest(name=wm_names.working_memory(session))
                    )
                    assert "Crash-tested session" in wm.document
                assert resumed >= 1, "no kill landed while Phase 2 was running"
            assert server.terminate() == 0
        finally:
            server.kill()
    reports = await check_store_invariants(tmp_path / "wm.sqlite3", acked)
    for session in sessions:
        assert set(reports[session].commit_states.values()) == {CommitState.COMPLETED}
