"""Fixtures of the reliability suite: a fake Messages API, and servers configured like
production (settings read from the environment, the real Anthropic SDK, loopback only)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from reliability_support import AnthropicServer

from support.fake_anthropic import FakeAnthropic
from wm_server.app import Application, start_application
from wm_server.config import load_settings


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    """The local Messages API; whatever a test forgets to queue fails loudly."""
    with FakeAnthropic() as server:
        yield server


def anthropic_env(data_dir: Path, base_url: str, **overrides: str) -> dict[str, str]:
    """The environment of a server that talks to ``base_url`` through the real SDK.

    Retries and timeouts are small so that a fault costs milliseconds, not minutes, but
    every layer still runs: the SDK's own retries, then Phase 2's backoff.
    """
    env = {
        "WM_ADDRESS": "127.0.0.1:0",
        "WM_DATA_DIR": str(data_dir),
        "WM_LLM_PROVIDER": "anthropic",
        "ANTHROPIC_API_KEY": "sk-ant-test-reliability",
        "ANTHROPIC_BASE_URL": base_url,
        "WM_ANTHROPIC_MODEL": "claude-reliability-test",
        "WM_ANTHROPIC_MAX_RETRIES": "1",
        "WM_ANTHROPIC_TIMEOUT": "0.5",
        "WM_PHASE2_MAX_ATTEMPTS": "2",
        "WM_PHASE2_RETRY_BASE_DELAY": "0.05",
        "WM_HEARTBEAT_SECONDS": "0.5",
        "WM_SHUTDOWN_GRACE_SECONDS": "0.5",
        "WM_LOG_LEVEL": "warning",
    }
    env.update(overrides)
    return env


@pytest.fixture
async def anthropic_server(
    tmp_path: Path, fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[AnthropicServer]:
    """Start an in-process server whose settings come from the environment, as in production
    (``load_settings``), with Phase 2 on the Anthropic provider pointed at ``fake``."""
    started: list[Application] = []

    async def start(**overrides: str) -> Application:
        for name, value in anthropic_env(tmp_path, fake.base_url, **overrides).items():
            monkeypatch.setenv(name, value)
        app = await start_application(load_settings())
        started.append(app)
        return app

    yield start
    for app in started:
        await app.stop(grace=0.5)
