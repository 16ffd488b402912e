"""Ranked search through the one text analyzer (issue 34) on every engine: stemmed terms and
stop words on both sides, one ranking for a fixed corpus on SQLite and PostgreSQL, rows stored
before the analyzer re-indexed at start, a language change re-indexing; and literal search
finding a literal that spans a tool call's name and input."""

from __future__ import annotations

import importlib
import itertools
import math
from pathlib import Path

import pytest
from storage_support import ENGINES, Services, build_services, make_database

from wm_core import Message, Role, TextPart, ToolUsePart, message_tokens
from wm_server.phase2.state import ArchiveIndex, Phase2Completion
from wm_server.phase2.store import INDEX_CHUNK
from wm_server.search.analyzer import analyze
from wm_server.search.bm25 import BM25_B, BM25_K1
from wm_server.security.tenancy import current_tenant, set_tenant
from wm_server.storage.database import Database
from wm_server.storage.postgres import PostgresDatabase
from wm_server.storage.sqlite import SqliteDatabase

_ids = itertools.count()


def _say(text: str) -> Message:
    parts = (TextPart(text),)
    return Message(f"m{next(_ids)}", Role.USER, parts, message_tokens(parts))


async def _archive(
    services: Services, session: str, *messages: Message, written: bool = True
) -> None:
    """Archive ``messages``; ``written``: with the archive's full-text rows, as Phase 2's
    completion writes them (Phase 1 writes none: the search reads the messages until then)."""
    await services.sessions.add_messages(
        session, list(messages), create_if_missing=True, request_id="", fingerprint=""
    )
    await services.commits.phase1(session, 0, None)
    if not written:
        return
    async with services.database.unit_of_work() as uow:
        row = await uow.sessions.find(current_tenant(), session)
        assert row is not None
        seq = row.record.archive_count
        bounds = await uow.archives.bounds(row.sid, seq)
        assert bounds is not None
        rows = await uow.archives.search_rows(row.sid, seq, *bounds)
        await uow.write(*uow.archives.indexing(row.sid, seq, rows))
        await uow.write(uow.archives.indexed(row.sid, seq))
        await uow.commit()


async def _ranked(services: Services, session: str, query: str) -> list[str]:
    return [text for text, _ in await _scored(services, session, query)]


async def _scored(
    services: Services, session: str, query: str, user: str = ""
) -> list[tuple[str, float]]:
    """The default ranked search (in-process BM25) of one session, or of every session of
    ``user`` when ``session`` is empty: (text, score), best first."""
    found, total = await services.archive_search.ranked(
        session, query, "", 10, not session, user_id=user
    )
    assert total == len(found) or len(found) == 10
    return [(m.message.parts[0].text, m.score) for m, _ in found]  # type: ignore[union-attr]


async def test_ranked_search_matches_stems_and_ignores_stop_words(services: Services) -> None:
    await _archive(services, "s", _say("We deployed the ledgers yesterday"), _say("lunch at noon"))
    assert await _ranked(services, "s", "deploying a ledger") == [
        "We deployed the ledgers yesterday"
    ]
    assert await _ranked(services, "s", "the what and") == []  # stop words only: no term


# A fixed corpus; both engines must rank it as BM25 does (``_bm25``, written out here).
_CORPUS = (
    "the ledger moved to postgres",
    "ledger ledger ledger archive notes",
    "postgres replication lag on the ledger cluster",
    "lunch menu for friday",
    "deploys on friday are forbidden for the ledger team",
    "a friday deploy broke the ledger, and postgres too, on a friday",
)


def _bm25(query: str, corpus: tuple[str, ...]) -> list[tuple[str, float]]:
    """Okapi BM25 (k1 ``BM25_K1``, b ``BM25_B``, idf ln(1 + (N - df + 0.5) / (df + 0.5))),
    best first."""
    docs = [analyze(text) for text in corpus]
    terms = list(dict.fromkeys(analyze(query)))
    avgdl = sum(map(len, docs)) / len(docs)
    scores = []
    for text, doc in zip(corpus, docs, strict=True):
        score = 0.0
        for term in terms:
            df = sum(1 for d in docs if term in d)
            tf = doc.count(term)
            if tf:
                idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
                norm = BM25_K1 * (1 - BM25_B + BM25_B * len(doc) / avgdl)
                score += idf * tf * (BM25_K1 + 1) / (tf + norm)
        if score:
            scores.append((text, score))
    return sorted(scores, key=lambda pair: -pair[1])


async def _bm25_ranked(services: Services, query: str, *sessions: str) -> list[tuple[str, float]]:
    """``ArchiveRepository.bm25_ranked`` over ``sessions``: (message id, score), best first."""
    async with services.database.reader() as uow:
        rows = [await uow.sessions.find(current_tenant(), name) for name in sessions]
        sids = [row.sid for row in rows if row is not None]
        found, total = await uow.archives.bm25_ranked(sids, uow.archives.terms(query), None, 10)
    assert total == len(found)
    return [(message.message.parts[0].text, score) for _, _, message, score in found]  # type: ignore[union-attr]


@pytest.mark.parametrize("query", ["postgres ledger", "friday deploys", "replication", "notes"])
async def test_both_engines_rank_a_fixed_corpus_as_bm25_does(
    services: Services, query: str
) -> None:
    await _archive(services, "s", *(_say(text) for text in _CORPUS))
    expected = _bm25(query, _CORPUS)
    # The default ranking (in process) and the SQL statement both compute it.
    for got in (await _scored(services, "s", query), await _bm25_ranked(services, query, "s")):
        assert [t for t, _ in got] == [t for t, _ in expected]
        assert [s for _, s in got] == pytest.approx([s for _, s in expected], rel=1e-9, abs=1e-9)


async def test_other_owners_rows_change_no_bm25_score(services: Services) -> None:
    """BM25's statistics are those of the searched sessions: a crowd of another owner's (or
    tenant's) rows full of the query's words changes neither the order nor the scores, in the
    default search (an owner's sessions, one session) as in the SQL statement."""
    await services.sessions.create("mine", "", user_id="u1")
    await _archive(services, "mine", *(_say(text) for text in _CORPUS))
    query = "postgres ledger"
    before = await _bm25_ranked(services, query, "mine")
    mine, session = await _scored(services, "", query, "u1"), await _scored(services, "mine", query)
    assert mine == session
    assert [t for t, _ in mine] == [t for t, _ in before]
    assert [s for _, s in mine] == pytest.approx([s for _, s in before], abs=1e-9)
    await services.sessions.create("theirs", "", user_id="u2")
    await _archive(services, "theirs", *(_say("postgres postgres notes") for _ in range(30)))
    set_tenant("other")
    await _archive(services, "elsewhere", *(_say("ledger postgres") for _ in range(30)))
    set_tenant("t")
    assert await _bm25_ranked(services, query, "mine") == before
    assert await _scored(services, "", query, "u1") == mine
    assert await _scored(services, "mine", query) == session
    # Searched together, the other owner's rows do count (and change the scores).
    together = await _scored(services, "", query)
    assert "postgres postgres notes" in dict(together) and together[0] != mine[0]


async def test_the_default_ranking_follows_new_and_re_indexed_archives(
    services: Services,
) -> None:
    """The in-process index reads what changed since its last query: a new archive, an
    archive Phase 2 finished indexing (its rows past the ones Phase 1 indexed), a deleted
    session's rows."""
    await _archive(services, "s", _say("ledger notes"), _say("lunch at noon"))
    assert await _ranked(services, "s", "ledger") == ["ledger notes"]
    await _archive(services, "s", _say("the ledger moved to postgres"))
    assert await _ranked(services, "s", "ledger") == [
        "ledger notes",
        "the ledger moved to postgres",
    ]
    # A large archive: found from its messages at once, from its rows once Phase 2 wrote
    # them (in chunks, the archive indexed with the last).
    many = INDEX_CHUNK + 5
    filler = (_say(f"filler {i}") for i in range(many))
    await _archive(services, "big", *filler, _say("zeppelin"), written=False)
    assert await _ranked(services, "big", "zeppelin") == ["zeppelin"]
    while (job := await services.jobs.claim(30.0)) is not None and job.session_id != "big":
        pass
    assert job is not None
    data = await services.jobs.read_input(job)
    rows = services.jobs.search_rows(data)
    assert len(rows) == many + 1
    await services.jobs.index_chunk(job, data.sid, rows[:INDEX_CHUNK], "", [])
    assert await _ranked(services, "big", "zeppelin") == ["zeppelin"]  # still read whole
    _, total = await services.archive_search.ranked("big", "filler", "", 10, False)
    assert total == many  # the chunk written is not counted twice
    completion = Phase2Completion("# Working Memory\n", 3, "a", "[]", "{}", (job.archive_seq,))
    index = ArchiveIndex(tuple(rows[INDEX_CHUNK:]))
    done = await services.jobs.complete(job, completion, index=index)
    assert done is not None and done[0].abstract == "a"  # set with the archive's index mark
    assert (await services.commits.get("big", job.commit_id)).abstract == "a"
    assert await _ranked(services, "big", "zeppelin") == ["zeppelin"]
    _, total = await services.archive_search.ranked("big", "filler", "", 10, False)
    assert total == many  # each row once: the written ones, no longer the messages read
    await services.sessions.delete("s", "")
    assert await _ranked(services, "", "ledger") == []


async def test_literal_search_finds_a_literal_across_a_tool_calls_name_and_input(
    services: Services,
) -> None:
    parts = (ToolUsePart("toolu_1", "grep", '{"pattern": "TODO"}'),)
    call = Message("call", Role.ASSISTANT, parts, message_tokens(parts))
    await _archive(services, "s", call, _say("grep is a tool"))
    for literal in ("grep {", 'grep {"', 'grep {"pattern": "todo"}', "GREP {"):
        found, total = await services.archive_search.search("s", literal, "", 10, False)
        assert total == 1 and found[0][0].message.id == "call", literal
    found, total = await services.archive_search.search("s", "grep }", "", 10, False)
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
    """A database at the schema before the analyzer (SQLite 9, PostgreSQL 10), whose archived
    messages and memories were indexed as raw words, is analyzed again at start: a stemmed
    query finds them."""
    from wm_server.storage import schema_postgres, schema_sqlite

    last_old = 9 if engine == "sqlite" else 10
    old = schema_sqlite.MIGRATIONS if engine == "sqlite" else schema_postgres.MIGRATIONS
    database = make_database(engine, request, tmp_path, empty=True)
    module = importlib.import_module(type(database).__module__)
    saved = module.MIGRATIONS  # type: ignore[attr-defined]
    module.MIGRATIONS = tuple(m for m in old if m[0] <= last_old)  # type: ignore[attr-defined]
    try:
        await database.open()
        set_tenant("t")
        raw = "We deployed the ledgers yesterday"
        async with database.unit_of_work() as uow:
            conn = uow._conn  # what the code before the analyzer stored: the raw words
            await conn.run(
                "INSERT INTO sessions (tenant, session_id, create_time, update_time)"
                " VALUES ('t', 's', 1, 1)",
                {},
            )
            row = await conn.one("SELECT sid FROM sessions WHERE session_id = 's'", {})
            assert row is not None
            await conn.run(
                "INSERT INTO messages (sid, position, message_id, role, parts_json, tokens,"
                " create_time) VALUES (:sid, 1, 'old-1', 'user', :parts, 10, 1)",
                {"sid": row[0], "parts": '[{"t":"' + raw + '"}]'},
            )
            await conn.run(
                "INSERT INTO archives (sid, seq, commit_id, message_count, tokens,"
                " first_position, last_position, create_time)"
                " VALUES (:sid, 1, 'c1', 1, 10, 1, 1, 1)",
                {"sid": row[0]},
            )
            column, value = ("body", ":raw") if engine == "sqlite" else (
                "search", "to_tsvector('simple', :raw)")  # fmt: skip
            await conn.run(
                f"INSERT INTO archived_texts (sid, seq, position, archive_time, {column})"
                f" VALUES (:sid, 1, 1, 1, {value})",
                {"sid": row[0], "raw": raw},
            )
            await conn.run("DELETE FROM server_secrets WHERE name = 'text_analyzer'", {})
            await uow.commit()
        await database.close()
    finally:
        module.MIGRATIONS = saved  # type: ignore[attr-defined]
    database = make_database(engine, request, tmp_path, empty=True)
    await database.open()
    try:
        services = build_services(database)
        assert await _ranked(services, "s", "deploying") == ["We deployed the ledgers yesterday"]
        async with database.reader() as uow:
            row = await uow._conn.one("SELECT MAX(version) FROM schema_migrations", {})
            assert row is not None and int(row[0]) >= last_old + 1
    finally:
        await database.close()
