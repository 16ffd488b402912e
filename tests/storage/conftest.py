"""The storage suite runs unchanged against every engine: ``store`` is parametrized by engine."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from wm_server.storage.port import Store
from wm_server.storage.sqlite import SqliteStore

ENGINES = ["sqlite"]


@pytest.fixture(params=ENGINES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    engine: Store
    if request.param == "sqlite":
        engine = SqliteStore(tmp_path / "wm.sqlite3")
    else:  # pragma: no cover - engines are added to ENGINES with their factory
        raise ValueError(request.param)
    await engine.open()
    yield engine
    await engine.close()
