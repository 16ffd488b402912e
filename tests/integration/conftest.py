"""A real server on a loopback port with a real SQLite file, and real gRPC clients."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from support.production import migrated_settings
from support.providers import ProgrammableProvider
from wm_proto.v1 import working_memory_service_pb2_grpc as service_grpc
from wm_server.app import Application, start_application
from wm_server.config import Settings


def make_settings(data_dir: Path, **overrides: object) -> Settings:
    """A server's settings on ``data_dir`` (``support.production.migrated_settings``)."""
    return migrated_settings(data_dir, **overrides)


@pytest.fixture
def provider() -> ProgrammableProvider:
    return ProgrammableProvider()


@pytest.fixture
async def app(tmp_path: Path, provider: ProgrammableProvider) -> AsyncIterator[Application]:
    application = await start_application(
        make_settings(tmp_path, phase2_retry_base_delay=0.05, heartbeat_seconds=0.5),
        provider=provider,
    )
    yield application
    await application.stop(grace=0.5)


@pytest.fixture
async def channel(app: Application) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(app.address) as ch:
        yield ch


@pytest.fixture
def stub(channel: grpc.aio.Channel) -> service_grpc.WorkingMemoryServiceStub:
    return service_grpc.WorkingMemoryServiceStub(channel)
