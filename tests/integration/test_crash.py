"""Kill the server (SIGKILL) mid-work, restart it on the same file, check nothing was lost."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
import pytest

from support import builders as b
from support import commit_flow
from support.server_process import ServerProcess
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.api.commit_event_encoder import encode_event
from wm_server.services.commit_event_log import EventLog
from wm_server.services.paging import PageTokens
from wm_server.services.sessions import SessionService
from wm_server.storage.sqlite import SqliteDatabase

pytestmark = pytest.mark.slow

# gRPC shares subchannels between channels; after a kill the shared one is in backoff, so a
# channel to the restarted server gets its own pool.
FRESH = [("grpc.use_local_subchannel_pool", 1)]

SECTIONS = (
    "Session Title", "Current State", "Task & Goals", "Key Facts & Decisions",
    "Files & Context", "Errors & Corrections", "Open Issues",
)  # fmt: skip


async def test_sigkill_during_ingest_loses_no_acknowledged_message(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path).start()
    acked: list[str] = []
    try:
        async with grpc.aio.insecure_channel(server.address, options=FRESH) as channel:
            stub = service_grpc.WorkingMemoryServiceStub(channel)
            await stub.CreateSession(api.CreateSessionRequest(session_id="ingest"))

            enough = asyncio.Event()

            async def writer() -> None:
                batch = 0
                while True:
                    ids = [f"b{batch}-{i}" for i in range(20)]
                    await stub.AddMessages(
                        api.AddMessagesRequest(
                            parent="sessions/ingest",
                            messages=[b.sized(5 + i, mid) for i, mid in enumerate(ids)],
                        ),
                        timeout=5,
                    )
                    acked.extend(ids)
                    batch += 1
                    if len(acked) >= 400:
                        enough.set()

            task = asyncio.create_task(writer())
            await asyncio.wait_for(enough.wait(), 30)
            server.kill()
            with pytest.raises(grpc.aio.AioRpcError):
                await task
    finally:
        server.kill()
    assert len(acked) >= 400
    server.start()  # same data folder, same file
    try:
        async with grpc.aio.insecure_channel(server.address, options=FRESH) as channel:
            stub = service_grpc.WorkingMemoryServiceStub(channel)
            session = await stub.GetSession(api.GetSessionRequest(name="sessions/ingest"))
            assert session.total_message_count >= len(acked)
            assert session.total_message_count % 20 == 0  # batches are all or nothing
    finally:
        server.terminate()
    database = SqliteDatabase(tmp_path / "wm.sqlite3")
    await database.open()
    sessions = SessionService(
        database, log=EventLog(encode_event), tokens=PageTokens.random()
    )  # the default tenant
    try:
        before = await sessions.get("ingest")
        stored = [m.message.id for m in await sessions.live_messages("ingest")]
        assert len(stored) == len(set(stored)) == before.message_count
        assert set(acked) <= set(stored)
        pending, live = await sessions.rebuild_pending_tokens("ingest")
        assert (before.pending_tokens, before.live_tokens) == (pending, live)
    finally:
        await database.close()


async def test_sigkill_during_phase2_resumes_and_completes_once(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    creation = {name: f"{name} body" for name in SECTIONS}
    creation["Session Title"] = "Crash-safe commit"
    script.write_text(
        json.dumps({"loop": True, "responses": [{"tool_input": creation, "delay": 2.0}]})
    )
    env = {
        "WM_LLM_PROVIDER": "scripted",
        "WM_SCRIPTED_RESPONSES": str(script),
        "WM_PHASE2_LEASE_SECONDS": "1.5",
        "WM_HEARTBEAT_SECONDS": "0.5",
    }
    server = ServerProcess(tmp_path, **env).start()
    try:
        async with grpc.aio.insecure_channel(server.address, options=FRESH) as channel:
            stub = service_grpc.WorkingMemoryServiceStub(channel)
            await stub.AddMessages(
                api.AddMessagesRequest(
                    parent="sessions/crash",
                    messages=[b.user("hello")],
                    create_session_if_missing=True,
                )
            )
            started = await stub.CreateCommit(commit_flow.create_request("crash"))
            commit = started.name
            call = stub.WatchCommit(api.WatchCommitRequest(name=commit))
            seen: list[pb.CommitEvent] = []
            async for event in call:
                if event.stage != pb.COMMIT_STAGE_HEARTBEAT:
                    seen.append(event)
                if event.stage == pb.COMMIT_STAGE_LLM_REQUEST_SENT:
                    break
            server.kill()  # mid model call
    finally:
        server.kill()
    server.start()
    try:
        async with grpc.aio.insecure_channel(server.address, options=FRESH) as channel:
            stub = service_grpc.WorkingMemoryServiceStub(channel)
            events = [
                e
                async for e in stub.WatchCommit(api.WatchCommitRequest(name=commit), timeout=30)
                if e.stage != pb.COMMIT_STAGE_HEARTBEAT
            ]
            sequences = [e.sequence for e in events]
            assert sequences == list(range(1, len(events) + 1))
            assert [e.SerializeToString() for e in events[: len(seen)]] == [
                e.SerializeToString() for e in seen
            ]
            assert sum(1 for e in events if e.terminal) == 1
            assert events[-1].stage == pb.COMMIT_STAGE_COMPLETED
            starts = [e for e in events if e.stage == pb.COMMIT_STAGE_PHASE2_STARTED]
            assert [e.phase2_started.attempt for e in starts] == [1, 2]
            stored = await stub.GetCommit(api.GetCommitRequest(name=commit))
            assert stored.state == pb.COMMIT_STATE_COMPLETED and stored.working_memory_version == 1
            wm = await stub.GetWorkingMemory(
                api.GetWorkingMemoryRequest(name="sessions/crash/workingMemories/latest")
            )
            assert wm.version == 1 and "Crash-safe commit" in wm.document
    finally:
        server.terminate()
