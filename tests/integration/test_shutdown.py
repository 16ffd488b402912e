"""Graceful shutdown: health NOT_SERVING and a drain, Phase 2 handed back to the queue, open
commit streams ended at once with where to resume; after a restart the commit completes and
WatchCommit from the last sequence seen finishes it."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from support import builders as b
from support import commit_flow, wm_names
from support.errors import details
from support.production import settings_for as make_settings
from support.providers import ProgrammableProvider
from support.server_process import ServerProcess
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import start_application

Stub = service_grpc.WorkingMemoryServiceStub
FRESH = [("grpc.use_local_subchannel_pool", 1)]  # a restarted server gets a new subchannel
SECTIONS = (
    "Session Title", "Current State", "Task & Goals", "Key Facts & Decisions",
    "Files & Context", "Errors & Corrections", "Open Issues",
)  # fmt: skip


async def _read_until(
    call: grpc.aio.UnaryStreamCall[api.WatchCommitRequest, pb.CommitEvent],
    stage: pb.CommitStage.ValueType,
) -> list[pb.CommitEvent]:
    """Read a commit stream (skipping heartbeats) up to and including an event of ``stage``."""
    seen: list[pb.CommitEvent] = []
    while True:
        event = await call.read()
        assert isinstance(event, pb.CommitEvent), f"stream ended before {stage}: {seen}"
        if event.stage == pb.COMMIT_STAGE_HEARTBEAT:
            continue
        seen.append(event)
        if event.stage == stage:
            return seen


async def _read_to_end(
    call: grpc.aio.UnaryStreamCall[api.WatchCommitRequest, pb.CommitEvent],
    seen: list[pb.CommitEvent],
) -> grpc.aio.AioRpcError:
    """Read the rest of a stream that must end with an error; return the error."""
    try:
        while (event := await call.read()) is not grpc.aio.EOF:
            assert isinstance(event, pb.CommitEvent)
            if event.stage != pb.COMMIT_STAGE_HEARTBEAT:
                seen.append(event)
    except grpc.aio.AioRpcError as error:
        return error
    raise AssertionError(f"the stream ended OK without a terminal event: {seen[-1:]}")


async def _finish_with_watch(
    stub: Stub, session: str, commit_id: str, after: int
) -> list[pb.CommitEvent]:
    """WatchCommit from ``after`` to the terminal event (heartbeats skipped)."""
    return [
        e
        async for e in stub.WatchCommit(
            api.WatchCommitRequest(name=wm_names.commit(session, commit_id), after_sequence=after),
            timeout=30,
        )
        if e.stage != pb.COMMIT_STAGE_HEARTBEAT
    ]


def _assert_resumes(seen: list[pb.CommitEvent], rest: list[pb.CommitEvent]) -> None:
    """The events after the restart continue the sequence and end with one COMPLETED."""
    sequences = [e.sequence for e in seen + rest]
    assert sequences == list(range(1, len(sequences) + 1))
    assert [e.terminal for e in rest].count(True) == 1
    assert rest[-1].stage == pb.COMMIT_STAGE_COMPLETED
    assert pb.COMMIT_STAGE_PHASE2_STARTED in [e.stage for e in rest]  # Phase 2 ran again


# --- in process: the order of the steps ------------------------------------------------------
async def test_stop_drains_then_ends_commit_streams_and_hands_phase2_back(
    tmp_path: Path,
) -> None:
    held = ProgrammableProvider(gate=asyncio.Event())  # Phase 2 waits in its model call
    settings = make_settings(
        tmp_path,
        shutdown_drain_seconds=0.5,
        shutdown_grace_seconds=10.0,
        heartbeat_seconds=0.5,
        phase2_lease_seconds=60.0,  # a restart must not wait for the lease to expire
    )
    app = await start_application(settings, provider=held)
    async with grpc.aio.insecure_channel(app.address) as channel:
        stub = Stub(channel)
        await stub.AddMessages(
            api.AddMessagesRequest(
                parent=wm_names.session("drain"),
                messages=[b.user("hello")],
                create_session_if_missing=True,
            )
        )
        created = await stub.CreateCommit(commit_flow.create_request("drain"), timeout=30)
        commit_id = wm_names.last_segment(created.name)
        watch_request = api.WatchCommitRequest(name=created.name)
        commit = stub.WatchCommit(watch_request, timeout=30)  # as a client's commit() follows it
        seen = await _read_until(commit, pb.COMMIT_STAGE_LLM_REQUEST_SENT)
        watch = stub.WatchCommit(watch_request, timeout=30)
        watched = await _read_until(watch, pb.COMMIT_STAGE_LLM_REQUEST_SENT)

        started = time.monotonic()
        stopping = asyncio.create_task(app.stop())
        await asyncio.sleep(0.1)
        # During the drain: readiness fails, but calls are still served.
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "wm.v1.WorkingMemoryService"):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
        session = await stub.GetSession(
            api.GetSessionRequest(name=wm_names.session("drain")), timeout=5
        )
        assert session.archive_count == 1

        for call, events in ((commit, seen), (watch, watched)):
            error = await _read_to_end(call, events)
            assert error.code() == grpc.StatusCode.UNAVAILABLE
            info, _ = details(error)
            assert info.reason == "SHUTTING_DOWN"
            assert info.metadata["commit_id"] == commit_id
            assert info.metadata["last_sequence"] == str(events[-1].sequence)
        assert [e.SerializeToString() for e in watched] == [e.SerializeToString() for e in seen]
        await stopping
        # Ended by the shutdown itself, not cut at the end of the 10 s grace.
        assert time.monotonic() - started < 5.0

    restarted = await start_application(settings, provider=ProgrammableProvider())
    try:
        async with grpc.aio.insecure_channel(restarted.address) as channel:
            stub = Stub(channel)
            rest = await _finish_with_watch(stub, "drain", commit_id, seen[-1].sequence)
            _assert_resumes(seen, rest)
            got = await stub.GetCommit(
                api.GetCommitRequest(name=wm_names.commit("drain", commit_id))
            )
            assert got.state == pb.COMMIT_STATE_COMPLETED and got.working_memory_version == 1
    finally:
        await restarted.stop(grace=0.5)


# --- a real wm-server process and a real signal ---------------------------------------------
def _slow_script(tmp_path: Path) -> Path:
    """A scripted model; with WM_SCRIPTED_DELAY=60 Phase 2 is mid-call when the signal comes."""
    script = tmp_path / "slow.json"
    answer = {name: f"{name} body" for name in SECTIONS}
    answer["Session Title"] = "Survives a restart"
    script.write_text(json.dumps({"loop": True, "responses": [{"tool_input": answer}]}))
    return script


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_signal_during_commit_stream_and_phase2_then_restart_completes(
    tmp_path: Path, signum: signal.Signals
) -> None:
    server = ServerProcess(
        tmp_path,
        WM_LLM_PROVIDER="scripted",
        WM_SCRIPTED_RESPONSES=str(_slow_script(tmp_path)),
        WM_SCRIPTED_DELAY="60",
        WM_PHASE2_LEASE_SECONDS="60",
        WM_HEARTBEAT_SECONDS="0.5",
        WM_SHUTDOWN_DRAIN_SECONDS="0.2",
        WM_SHUTDOWN_GRACE_SECONDS="10",
    ).start()
    try:
        async with grpc.aio.insecure_channel(server.address, options=FRESH) as channel:
            stub = Stub(channel)
            await stub.AddMessages(
                api.AddMessagesRequest(
                    parent=wm_names.session("sig"),
                    messages=[b.user("hello")],
                    create_session_if_missing=True,
                )
            )
            created = await stub.CreateCommit(commit_flow.create_request("sig"), timeout=60)
            commit_id = wm_names.last_segment(created.name)
            call = stub.WatchCommit(api.WatchCommitRequest(name=created.name), timeout=60)
            seen = await _read_until(call, pb.COMMIT_STAGE_LLM_REQUEST_SENT)
            assert server.proc is not None
            started = time.monotonic()
            server.proc.send_signal(signum)
            error = await _read_to_end(call, seen)
            assert error.code() == grpc.StatusCode.UNAVAILABLE
            assert details(error)[0].reason == "SHUTTING_DOWN"
            assert details(error)[0].metadata["last_sequence"] == str(seen[-1].sequence)
            exit_code = await asyncio.to_thread(server.proc.wait, 30)
            # Neither the 60 s model call nor the 10 s grace was waited out.
            assert time.monotonic() - started < 8.0
    finally:
        server.kill()
    assert exit_code == 0
    names = [e.get("event") for e in server.log_events()]
    for expected in ("shutdown_requested", "phase2_released", "server_stopped"):
        assert expected in names

    restarted = ServerProcess(  # the same model, answering at once this time
        tmp_path,
        port=server.port,
        WM_LLM_PROVIDER="scripted",
        WM_SCRIPTED_RESPONSES=str(tmp_path / "slow.json"),
    ).start()
    try:
        async with grpc.aio.insecure_channel(restarted.address, options=FRESH) as channel:
            stub = Stub(channel)
            rest = await _finish_with_watch(stub, "sig", commit_id, seen[-1].sequence)
            _assert_resumes(seen, rest)
            wm = await stub.GetWorkingMemory(
                api.GetWorkingMemoryRequest(name=wm_names.working_memory("sig"))
            )
            assert wm.version == 1 and "Survives a restart" in wm.document
    finally:
        assert restarted.terminate() == 0
