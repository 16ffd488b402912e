"""Ranked search through the one text analyzer (issue 34) on every engine: stemmed terms and
stop words on both sides, one ranking for a fixed corpus on SQLite and PostgreSQL, rows stored
before the analyzer re-indexed at start, a language change re-indexing; and literal search
finding a literal that spans a tool call's name and input."""

from __future__ import annotations

import importlib
import itertools
from pathlib import Path

import pytest
from storage_support import ENGINES, Services, build_services, make_database

from wm_core import Message, Role, TextPart, ToolUsePart, message_tokens
from wm_server.storage.database import Database
from wm_server.storage.postgres import PostgresDatabase
from wm_server.storage.sqlite import SqliteDatabase
from wm_server.tenancy import set_tenant

_ids = itertools.count()


def _say(text: str) -> Message:
    parts = (TextPart(text),)
    return Message(f"m{next(_ids)}", Role.USER, parts, message_tokens(parts))


async def _archive(services: Services, session: str, *messages: Message) -> None:
    await services.sessions.add_messages(
        session, list(messages), create_if_missing=True, request_id="", fingerprint=""
    )
    await services.commits.phase1(session, 0, None)


async def _ranked(services: Services, session: str, query: str) -> list[str]:
    found, total = await services.context.ranked(session, query, "", 10, False)
    assert total == len(found)
    return [m.message.parts[0].text for m, _ in found]  # type: ignore[union-attr]


async def test_ranked_search_matches_stems_and_ignores_stop_words(services: Services) -> None:
    await _archive(services, "s", _say("We deployed the ledgers yesterday"), _say("lunch at noon"))
    assert await _ranked(services, "s", "deploying a ledger") == [
        "We deployed the ledgers yesterday"
    ]
    assert await _ranked(services, "s", "the what and") == []  # stop words only: no term


# A fixed corpus and queries whose BM25 order is clear-cut; both engines must agree on it.
_CORPUS = (
    "the ledger moved to postgres",
    "ledger ledger ledger archive notes",
    "postgres replication lag on the ledger cluster",
    "lunch menu for friday",
    "deploys on friday are forbidden for the ledger team",
)
_ORDERS = {
    "postgres ledger": [2, 0, 1, 4],
    "friday deploys": [4, 3],
    "replication": [2],
}


@pytest.mark.parametrize("query", sorted(_ORDERS))
async def test_both_engines_rank_a_fixed_corpus_the_same_way(
    services: Services, query: str
) -> None:
    await _archive(services, "s", *(_say(text) for text in _CORPUS))
    assert await _ranked(services, "s", query) == [_CORPUS[i] for i in _ORDERS[query]]


async def test_literal_search_finds_a_literal_across_a_tool_calls_name_and_input(
    services: Services,
) -> None:
    parts = (ToolUsePart("toolu_1", "grep", '{"pattern": "TODO"}'),)
    call = Message("call", Role.ASSISTANT, parts, message_tokens(parts))
    await _archive(services, "s", call, _say("grep is a tool"))
    for literal in ("grep {", 'grep {"', 'grep {"pattern": "todo"}', "GREP {"):
        found, total = await services.context.search("s", literal, "", 10, False)
        assert total == 1 and found[0][0].message.id == "call", literal
    found, total = await services.context.search("s", "grep }", "", 10, False)
    assert total == 0 and found == []


def _with_language(engine: str, request: pytest.FixtureRequest, tmp: Path, lang: str) -> Database:
    if engine == "sqlite":
        return SqliteDatabase(tmp / "wm.sqlite3", lock_timeout=0.5, text_language=lang)
    return PostgresDatabase(request.getfixturevalue("postgres_url"), text_language=lang)


@pytest.mark.parametrize("engine", ENGINES)
async def test_a_change_of_language_re_indexes_at_start(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    english = _with_language(engine, request, tmp_path, "english")
    await english.open()
    set_tenant("t")
    try:
        await _archive(build_services(english), "s", _say("Die alten Häuser am Fluss"))
        assert await _ranked(build_services(english), "s", "Haus") == []  # not an English stem
    finally:
        await english.close()
    german = _with_language(engine, request, tmp_path, "german")
    await german.open()
    try:
        assert await _ranked(build_services(german), "s", "Haus") == ["Die alten Häuser am Fluss"]
    finally:
        await german.close()


@pytest.mark.parametrize("engine", ENGINES)
async def test_rows_indexed_before_the_analyzer_are_re_indexed_by_the_upgrade(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A database at the schema before the analyzer (SQLite 8, PostgreSQL 9), whose archived
    messages and memories were indexed as raw words, is analyzed again at start: a stemmed
    query finds them."""
    from wm_server.storage import schema_postgres, schema_sqlite

    last_old = 8 if engine == "sqlite" else 9
    old = schema_sqlite.MIGRATIONS if engine == "sqlite" else schema_postgres.MIGRATIONS
    database = make_database(engine, request, tmp_path)
    module = importlib.import_module(type(database).__module__)
    saved = module.MIGRATIONS  # type: ignore[attr-defined]
    module.MIGRATIONS = tuple(m for m in old if m[0] <= last_old)  # type: ignore[attr-defined]
    try:
        await database.open()
        set_tenant("t")
        services = build_services(database)
        await _archive(services, "s", _say("We deployed the ledgers yesterday"))
        async with database.unit_of_work() as uow:
            conn = uow._conn  # what the code before the analyzer stored: the raw words
            raw = "We deployed the ledgers yesterday"
            if engine == "sqlite":
                await conn.run("DELETE FROM archived_texts", {})
                await conn.run(
                    "INSERT INTO archived_texts (sid, seq, position, archive_time, body)"
                    " SELECT sid, 1, position, 1, :raw FROM messages",
                    {"raw": raw},
                )
            else:
                await conn.run("UPDATE archived_texts SET search = to_tsvector('simple', :raw)",
                               {"raw": raw})  # fmt: skip
            await conn.run("DELETE FROM server_secrets WHERE name = 'text_analyzer'", {})
            await uow.commit()
        assert await _ranked(services, "s", "deploying") == []  # the raw index misses stems
        await database.close()
    finally:
        module.MIGRATIONS = saved  # type: ignore[attr-defined]
    database = make_database(engine, request, tmp_path)
    await database.open()
    try:
        services = build_services(database)
        assert await _ranked(services, "s", "deploying") == ["We deployed the ledgers yesterday"]
        async with database.reader() as uow:
            row = await uow._conn.one("SELECT MAX(version) FROM schema_migrations", {})
            assert row is not None and int(row[0]) >= last_old + 1
    finally:
        await database.close()
