"""The clients against real servers on loopback: in-process (Python client and engine, with a
provider whose answers and pace the test controls) and as a child process (the CLI's server,
resume). The CLI runs in the test's process (client_support.run_cli: its real entry point,
argv, streams and environment) unless a test proves what only the installed script shows."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from client_support import Run, run_cli

from support.production import migrated_settings
from support.providers import ProgrammableProvider
from support.server_process import ServerProcess
from wm_client import WmClient
from wm_server.app import Application, start_application
from wm_server.config import Settings


def settings(data_dir: Path, **overrides: object) -> Settings:
    """A server's settings on ``data_dir`` (``support.production.migrated_settings``), with the
    short grace, retry delay and heartbeat of the clients' tests."""
    quick: dict[str, object] = {
        "shutdown_grace_seconds": 0.5,
        "phase2_retry_base_delay": 0.05,
        "heartbeat_seconds": 0.5,
    }
    return migrated_settings(data_dir, **{**quick, **overrides})


@pytest.fixture
def provider() -> ProgrammableProvider:
    return ProgrammableProvider()


@pytest.fixture
async def app(tmp_path: Path, provider: ProgrammableProvider) -> AsyncIterator[Application]:
    application = await start_application(settings(tmp_path), provider=provider)
    yield application
    await application.stop(grace=0.5)


@pytest.fixture
async def client(app: Application) -> AsyncIterator[WmClient]:
    async with WmClient(app.address) as wm:
        yield wm


# --- the CLI (in-process) against a server process ----------------------------------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One offline-provider server for a whole test module."""
    process = ServerProcess(tmp_path_factory.mktemp("server")).start()
    yield process
    process.terminate()


@pytest.fixture
def wm(server: ServerProcess) -> Run:
    def run(*args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
        return run_cli(server.address, *args, stdin=stdin, **env)

    return run
