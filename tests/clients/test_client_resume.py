"""A commit stream survives a server restart in the middle of a slow Phase 2.

The server runs as a child process with the scripted provider, whose model call takes two
seconds. The client reads the stream while the test kills (SIGKILL) or stops (SIGTERM) the
server after the model request went out, and starts it again on the same port and data. The
client's one stream must re-attach with WatchCommit from its last sequence and deliver every
event once, in order, ending with exactly one terminal event.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from client_support import creation_input, scripted_server

from support import builders as b
from support.server_process import ServerProcess
from wm_client import WmClient
from wm_proto.v1 import resources_pb2 as pb

pytestmark = pytest.mark.slow


def _server(data_dir: Path) -> ServerProcess:
    return scripted_server(
        data_dir,
        [{"tool_input": creation_input(session_title="Survives restarts"), "delay": 2.0}],
        WM_PHASE2_LEASE_SECONDS="1.5",
        WM_HEARTBEAT_SECONDS="0.5",
        WM_SHUTDOWN_GRACE_SECONDS="0.5",
    )


@pytest.mark.parametrize("stop", ["kill", "terminate"])
async def test_stream_resumes_after_a_restart_mid_phase2(tmp_path: Path, stop: str) -> None:
    server = _server(tmp_path).start()
    try:
        async with WmClient(server.address) as client:
            await client.add_messages(
                "resume", [b.user("keep this"), b.assistant("ok")], create_session_if_missing=True
            )
            stream = client.commit("resume", 0)
            seen: list[pb.CommitEvent] = []
            request_sent = asyncio.Event()

            async def read() -> None:
                async for event in stream:
                    seen.append(event)
                    if event.stage == pb.COMMIT_STAGE_LLM_REQUEST_SENT:
                        request_sent.set()

            reader = asyncio.create_task(read())
            await asyncio.wait_for(request_sent.wait(), 20)
            before = stream.last_sequence
            await asyncio.to_thread(server.kill if stop == "kill" else server.terminate)
            await asyncio.sleep(0.5)  # the client is cut off and retrying
            assert not reader.done()
            await asyncio.to_thread(server.start, 60)
            await asyncio.wait_for(reader, 60)
            memory = await client.get_working_memory("resume")
    finally:
        server.kill()
    assert stream.resumes >= 1 and stream.errors
    sequences = [e.sequence for e in seen]
    assert sequences == list(range(1, len(seen) + 1)), "gap-free, no duplicates"
    assert sequences[-1] > before
    assert [e.terminal for e in seen].count(True) == 1
    assert seen[-1].stage == pb.COMMIT_STAGE_COMPLETED and stream.terminal is seen[-1]
    attempts = [e.phase2_started.attempt for e in seen if e.HasField("phase2_started")]
    assert len(attempts) == 2  # the restarted server ran Phase 2 again
    if stop == "kill":
        assert attempts == [1, 2]  # a crash costs an attempt; a graceful stop hands it back
    assert memory.version == 1 and "Survives restarts" in memory.document
