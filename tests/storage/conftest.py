"""The storage suite runs unchanged against every engine: ``database`` is parametrized.

The use cases (services) run over each engine's repositories, so one test checks one rule on
SQLite and PostgreSQL alike. PostgreSQL runs on a throwaway server (``support.postgres``), a
fresh database per test; its parameter carries the ``postgres`` marker.

Every public method of every repository and of the engine is wrapped to record that it ran,
per engine; the session fails when one was never exercised (support.port_coverage).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from storage_support import ENGINES, Services, build_services, make_database

from support.postgres import (  # noqa: F401 (fixtures)
    empty_postgres_url,
    postgres_server,
    postgres_url,
)
from wm_server.security.tenancy import set_tenant
from wm_server.storage.database import Database


@pytest.fixture(params=ENGINES)
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    engine = make_database(request.param, request, tmp_path)
    await engine.open()
    set_tenant("t")
    yield engine
    await engine.close()


@pytest.fixture
def services(database: Database) -> Services:
    return build_services(database)
