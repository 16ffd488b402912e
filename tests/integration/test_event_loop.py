"""The server's event loop: uvloop by default where it is installed, the standard loop on
request, a clear refusal of anything else; on either, calls are served and SIGTERM stops the
server cleanly."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from support.server_process import ServerProcess
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.config import ConfigurationError, EventLoopName
from wm_server.event_loop import loop_factory, running_loop_name


async def _exercise(address: str) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = service_grpc.WorkingMemoryServiceStub(channel)
        reply = await stub.AddMessages(
            api.AddMessagesRequest(
                parent="sessions/loop",
                create_session_if_missing=True,
                messages=[pb.Message(role=pb.ROLE_USER, parts=[pb.Part(text="hello")])],
            ),
            timeout=10,
        )
        assert reply.message_count == 1
        health = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
        assert health.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize(("setting", "expected"), [("", "uvloop"), ("asyncio", "asyncio")])
def test_the_server_runs_on_the_chosen_loop(tmp_path: Path, setting: str, expected: str) -> None:
    env = {"WM_EVENT_LOOP": setting} if setting else {}
    server = ServerProcess(tmp_path, **env).start()
    try:
        asyncio.run(_exercise(server.address))
    finally:
        code = server.terminate()
    assert code == 0
    [started] = [e for e in server.log_events() if e.get("event") == "server_started"]
    assert started["event_loop"] == expected
    assert any(e.get("event") == "server_stopped" for e in server.log_events())


def test_an_unknown_loop_stops_the_start_naming_the_variable(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WM_")}
    env.update(WM_DATA_DIR=str(tmp_path), WM_EVENT_LOOP="trio", WM_LLM_PROVIDER="offline")
    done = subprocess.run(
        [sys.executable, "-m", "wm_server"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "WM_EVENT_LOOP" in done.stderr and "'uvloop' or 'asyncio'" in done.stderr


def test_uvloop_asked_for_but_missing_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # what an absent module imports as
    with pytest.raises(ConfigurationError, match="uvloop is not installed"):
        loop_factory(EventLoopName.UVLOOP)
    assert loop_factory(EventLoopName.AUTO) is asyncio.new_event_loop


async def test_the_suites_async_tests_run_on_the_servers_default_loop() -> None:
    """tests/conftest.py gives pytest-asyncio the server's default loop (uvloop here)."""
    assert running_loop_name() == "uvloop"
