"""Each working-memory version keeps the guard decisions of the change that stored it
(schema SQLite 9 / PostgreSQL 10): a version stored before keeps its commit's after the
upgrade, and a client's ops are kept on their version."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from storage_support import ENGINES, build_services, make_database

from wm_core import SectionOp
from wm_server.security.tenancy import set_tenant

DECISION = {
    "section": "Files & Context",
    "requested": "UPDATE",
    "applied": "UPDATE",
    "guard": "files",
    "reason": "paths dropped by the update were re-appended",
    "items_dropped": [],
    "items_restored": ["- app/db.py"],
    "items_refused": [],
}


@pytest.mark.parametrize("engine", ENGINES)
async def test_versions_stored_before_the_upgrade_get_their_commits_decisions(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    from wm_server.storage import schema_postgres, schema_sqlite

    database = make_database(engine, request, tmp_path, empty=True)
    last_old = 8 if engine == "sqlite" else 9
    migrations = schema_sqlite.MIGRATIONS if engine == "sqlite" else schema_postgres.MIGRATIONS
    module = importlib.import_module(type(database).__module__)
    saved = module.MIGRATIONS  # type: ignore[attr-defined]
    module.MIGRATIONS = tuple(m for m in migrations if m[0] <= last_old)  # type: ignore[attr-defined]
    try:
        await database.open()
        async with database.unit_of_work() as uow:
            conn = uow._conn
            await conn.run(
                "INSERT INTO sessions (tenant, session_id, create_time, update_time, wm_version)"
                " VALUES ('t', 'old', 1, 1, 2)",
                {},
            )
            row = await conn.one("SELECT sid FROM sessions WHERE session_id = 'old'", {})
            assert row is not None
            await conn.run(
                "INSERT INTO commits (commit_id, sid, state, keep_recent_count, archive_seq,"
                " decisions_json, wm_version, create_time) VALUES ('c1', :sid, 'completed', 0,"
                " 1, :decisions, 1, 1)",
                {"sid": row[0], "decisions": json.dumps([DECISION])},
            )
            for version, commit_id in ((1, "c1"), (2, None)):
                await conn.run(
                    "INSERT INTO working_memories (sid, version, document, archive_seq,"
                    " covered_seq, commit_id, estimated_tokens, create_time) VALUES (:sid,"
                    " :version, '## Session Title\nold', NULL, 0, :commit_id, 3, 1)",
                    {"sid": row[0], "version": version, "commit_id": commit_id},
                )
            await uow.commit()
        await database.close()
    finally:
        module.MIGRATIONS = saved  # type: ignore[attr-defined]
    database = make_database(engine, request, tmp_path, empty=True)
    await database.open()
    try:
        set_tenant("t")
        services = build_services(database)
        first = await services.memory.get("old", 1)
        second = await services.memory.get("old", 2)
        assert json.loads(first.record.decisions_json) == [DECISION]
        assert json.loads(second.record.decisions_json) == []  # a client version: none known
    finally:
        await database.close()


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_clients_ops_keep_their_decisions_on_the_version(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    database = make_database(engine, request, tmp_path)
    await database.open()
    try:
        set_tenant("t")
        services = build_services(database)
        await services.sessions.create("s", "r0")
        files = SectionOp.update("- app/db.py — the schema\n- app/cli.py — entry point")
        await services.memory.apply("s", {"Files & Context": files}, 0, "r1")
        dropped = SectionOp.update("- app/cli.py — entry point")
        stored, decisions = await services.memory.apply("s", {"Files & Context": dropped}, 0, "r2")
        assert [d.guard.value for d in decisions] == ["files"]
        again = await services.memory.get("s", stored.version)
        kept = json.loads(again.record.decisions_json)
        assert [d["guard"] for d in kept] == ["files"]
        assert any("app/db.py" in item for item in kept[0]["items_restored"])
        first = await services.memory.get("s", 1)
        assert json.loads(first.record.decisions_json) == []  # nothing to refuse then
    finally:
        await database.close()
