"""Channel settings: keepalive and connection age are set, a second server on a taken port fails
fast (port reuse off), oversized messages and calls beyond the concurrency cap are refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from support import builders as b
from support.production import code_of
from support.production import settings_for as make_settings
from support.providers import ProgrammableProvider
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, server_options, start_application
from wm_server.config import ConfigurationError

Stub = service_grpc.WorkingMemoryServiceStub


def test_options_set_keepalive_connection_age_sizes_and_no_port_reuse(tmp_path: Path) -> None:
    options = dict(server_options(make_settings(tmp_path)))
    assert options["grpc.so_reuseport"] == 0
    assert options["grpc.keepalive_time_ms"] > 0 and options["grpc.keepalive_timeout_ms"] > 0
    assert 0 < options["grpc.max_connection_age_ms"] <= 30 * 60 * 1000
    assert options["grpc.max_connection_age_grace_ms"] > 0
    assert options["grpc.max_receive_message_length"] >= 4 * 1024 * 1024


async def test_a_taken_port_fails_fast_naming_the_variable(
    app: Application, tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError, match="WM_ADDRESS: cannot listen on"):
        await start_application(
            make_settings(tmp_path / "second", address=app.address),
            provider=ProgrammableProvider(),
        )


async def test_an_oversized_request_is_resource_exhausted(stub: Stub) -> None:
    huge = b.text(1, "x" * (5 * 1024 * 1024))
    code = await code_of(
        stub.AddMessages(
            api.AddMessagesRequest(
                parent="sessions/big", messages=[huge], create_session_if_missing=True
            )
        )
    )
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_calls_beyond_the_concurrency_cap_are_resource_exhausted(tmp_path: Path) -> None:
    app = await start_application(
        make_settings(tmp_path, max_concurrent_rpcs=1), provider=ProgrammableProvider()
    )
    try:
        async with grpc.aio.insecure_channel(app.address) as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(service="")
            )
            first = await watch.read()  # the one allowed RPC is now in flight
            assert isinstance(first, health_pb2.HealthCheckResponse)
            code = await code_of(Stub(channel).ListSessions(api.ListSessionsRequest(), timeout=5))
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
            watch.cancel()
            await asyncio.sleep(0.1)
            assert await code_of(Stub(channel).ListSessions(api.ListSessionsRequest())) == (
                grpc.StatusCode.OK
            )
    finally:
        await app.stop(grace=0.5)
