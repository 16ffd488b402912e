"""The storage suite runs unchanged against every engine: ``store`` is parametrized by engine.

PostgreSQL runs on a throwaway server (``support.postgres``), a fresh database per test;
its parameter carries the ``postgres`` marker (``-m "not postgres"`` leaves it out).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from support.postgres import postgres_server, postgres_url  # noqa: F401 (fixtures)
from wm_server.storage.port import Store
from wm_server.storage.sqlite import SqliteStore

ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.fixture(params=ENGINES)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    engine: Store
    if request.param == "sqlite":
        engine = SqliteStore(tmp_path / "wm.sqlite3")
    elif request.param == "postgresql":
        from wm_server.storage.postgres import PostgresStore

        engine = PostgresStore(request.getfixturevalue("postgres_url"))
    else:  # pragma: no cover - engines are added to ENGINES with their factory
        raise ValueError(request.param)
    await engine.open()
    yield engine
    await engine.close()
