"""Fixtures of the reliability suite: a fake model API (each vendor's in turn, see
``llm_backends``), and servers configured like production (settings read from the
environment, the real SDK, loopback only)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from llm_backends import BACKENDS, Backend
from reliability_support import LlmServer

from support.fake_http import FakeApi
from support.sqlite_template import migrated_data_dir
from wm_server.app import Application, start_application
from wm_server.config import load_settings


@pytest.fixture(params=BACKENDS, ids=[backend.name for backend in BACKENDS])
def backend(request: pytest.FixtureRequest) -> Backend:
    """The model API a test runs against (every test that uses it runs once per vendor)."""
    chosen: Backend = request.param
    return chosen


@pytest.fixture
def fake(backend: Backend) -> Iterator[FakeApi]:
    """The local model API; whatever a test forgets to queue fails loudly."""
    with backend.fake_class() as server:
        yield server


def server_env(data_dir: Path, backend: Backend, base_url: str, **overrides: str) -> dict[str, str]:
    """The environment of a server whose Phase 2 talks to ``base_url`` through the real SDK."""
    env = {
        "WM_ADDRESS": "127.0.0.1:0",
        "WM_DATA_DIR": str(data_dir),
        **backend.env(base_url),
        "WM_PHASE2_MAX_ATTEMPTS": "2",
        "WM_PHASE2_RETRY_BASE_DELAY": "0.05",
        "WM_HEARTBEAT_SECONDS": "0.5",
        "WM_SHUTDOWN_GRACE_SECONDS": "0.5",
        "WM_LOG_LEVEL": "warning",
    }
    env.update(overrides)
    return env


@pytest.fixture
async def llm_server(
    tmp_path: Path, backend: Backend, fake: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[LlmServer]:
    """Start an in-process server whose settings come from the environment, as in production
    (``load_settings``), with Phase 2 on the backend's provider pointed at ``fake``."""
    started: list[Application] = []

    async def start(**overrides: str) -> Application:
        for name, value in server_env(tmp_path, backend, fake.base_url, **overrides).items():
            monkeypatch.setenv(name, value)
        if "WM_DATABASE_URL" not in overrides:
            migrated_data_dir(tmp_path)  # at this checkout's schema, not migrated again
        app = await start_application(load_settings())
        assert app.provider.name == backend.name
        started.append(app)
        return app

    yield start
    for app in started:
        await app.stop(grace=0.5)
