"""The storage contract of long-term memory (issue 20) on every engine: memories with their
versions and sources, the full-text indexes kept in the writing transaction, ranked search
over memories and archived messages, and the plan that extraction applies."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

import pytest
from storage_support import ENGINES, Services, build_services, make_database

from wm_core import (
    MemoryOp,
    MemoryOpKind,
    MemoryPlan,
    MemoryType,
    Message,
    Role,
    TextPart,
    message_tokens,
)
from wm_server.errors import AlreadyExists, InvalidArgument, NotFound
from wm_server.security.tenancy import current_tenant, set_tenant
from wm_server.services.memories import OwnerSpec
from wm_server.services.memory_content import MemoryContent, MemoryOwner, owner_of, similar_memories
from wm_server.services.memory_writes import MemorySources, apply_plan
from wm_server.services.sessions import find_session
from wm_server.storage.sqlite import SqliteDatabase

USER = OwnerSpec(user_id="u1")
_ids = itertools.count()


def _say(mid: str, text: str, role: Role = Role.USER) -> Message:
    parts = (TextPart(text),)
    return Message(mid, role, parts, message_tokens(parts))


async def _archive(services: Services, session: str, *texts: str) -> None:
    messages = [_say(f"{session}-{next(_ids)}", t) for t in texts]
    await services.sessions.add_messages(
        session, messages, create_if_missing=True, request_id="", fingerprint=""
    )
    await services.commits.phase1(session, 0, None)


async def _create(services: Services, text: str, kind: MemoryType = MemoryType.PREFERENCE) -> str:
    view, _ = await services.memories.create(USER, MemoryContent(kind, text), "", "")
    return view.row.memory_id


async def test_a_memory_is_ranked_found_and_deduplicated(services: Services) -> None:
    first = await _create(services, "Prefers answers in German")
    await _create(services, "Deploys on Fridays are forbidden", MemoryType.DECISION)
    again, existed = await services.memories.create(
        USER, MemoryContent(MemoryType.PREFERENCE, "  prefers ANSWERS in german. "), "", ""
    )
    assert existed and again.row.memory_id == first
    hits = await services.memories.search(USER, "which language? german", [], None, None, 5)
    assert [h.view.row.memory_id for h in hits] == [first] and hits[0].score > 0
    assert "German" in hits[0].snippet
    decisions = await services.memories.search(USER, "german fridays", ["decision"], None, None, 5)
    assert [h.view.row.text for h in decisions] == ["Deploys on Fridays are forbidden"]
    # Another owner and another tenant see nothing.
    assert (
        await services.memories.search(OwnerSpec(user_id="u2"), "german", [], None, None, 5) == []
    )
    set_tenant("other")
    assert await services.memories.search(USER, "german", [], None, None, 5) == []
    with pytest.raises(NotFound):
        await services.memories.get(first)
    set_tenant("t")


async def test_an_update_keeps_history_and_a_delete_forgets_everything(services: Services) -> None:
    mid = await _create(services, "Lives in Lisbon", MemoryType.PROFILE)
    view = await services.memories.update(mid, {"text": "Lives in Porto"}, "", "rid-1", "fp")
    assert view.row.text == "Lives in Porto" and view.row.version == 2
    assert [(v.version, v.text, v.reason) for v in view.history] == [
        (1, "Lives in Lisbon", "user correction")
    ]
    again = await services.memories.update(mid, {"text": "Lives in Porto"}, "", "rid-1", "fp")
    assert again.row.version == 2  # a retry changes nothing
    assert await services.memories.search(USER, "lisbon", [], None, None, 5) == []
    assert len(await services.memories.search(USER, "porto", [], None, None, 5)) == 1
    other = await _create(services, "Works at Acme", MemoryType.PROFILE)
    with pytest.raises(AlreadyExists):
        await services.memories.update(other, {"text": "lives in porto"}, "", "", "")
    await services.memories.delete(mid, "del-1", "fp")
    await services.memories.delete(mid, "del-1", "fp")  # the retry answers the same
    with pytest.raises(NotFound):
        await services.memories.get(mid)
    with pytest.raises(NotFound):
        await services.memories.delete(mid, "", "")
    assert await services.memories.search(USER, "porto lisbon", [], None, None, 5) == []
    async with services.database.reader() as uow:
        assert await uow.memories.versions(view.row.mid) == []
        assert await uow.memories.sources([view.row.mid], 5) == {}


async def test_lists_page_by_owner_type_and_state(services: Services) -> None:
    ids = [await _create(services, f"Fact number {n}", MemoryType.ENTITY) for n in range(5)]
    page, token = await services.memories.list(USER, ["entity"], "active", 3, "")
    assert [v.row.memory_id for v in page] == ids[::-1][:3] and token
    rest, end = await services.memories.list(USER, ["entity"], "active", 3, token)
    assert [v.row.memory_id for v in rest] == ids[::-1][3:] and end == ""
    with pytest.raises(InvalidArgument):
        await services.memories.list(USER, ["profile"], "active", 3, token)  # other filters
    with pytest.raises(InvalidArgument):
        await services.memories.list(OwnerSpec(), [], "active", 3, "")
    assert (await services.memories.list(USER, [], "retired", 3, ""))[0] == []


async def test_a_plan_creates_updates_merges_and_retires_with_history(services: Services) -> None:
    await _archive(services, "s1", "hello")
    async with services.database.unit_of_work() as uow:
        session = await find_session(uow, "s1")
        owner = owner_of(session)
        assert owner.sid == session.sid  # no user, no agent: the session owns them
        plan = MemoryPlan(
            (
                MemoryOp(MemoryOpKind.CREATE, MemoryType.DECISION, "Ledger moves to Postgres",
                         source_message_ids=("m1",)),
                MemoryOp(MemoryOpKind.CREATE, MemoryType.ENTITY, "Service billing-api"),
                MemoryOp(MemoryOpKind.CREATE, MemoryType.ENTITY, "Service billing-api."),
            ),
            (),
        )  # fmt: skip
        diff = await apply_plan(
            uow, tenant="t", owner=owner, plan=plan, sources=MemorySources("s1", 1)
        )
        await uow.commit()
    assert len(diff.created) == 2 and diff.deduplicated == (diff.created[1],)
    ledger, billing = diff.created
    async with services.database.reader() as uow:
        similar = await similar_memories(
            uow, tenant="t", owner=owner, text="when did the ledger move?"
        )
    assert [m.id for m in similar] == [ledger] and similar[0].type is MemoryType.DECISION
    async with services.database.unit_of_work() as uow:
        plan = MemoryPlan(
            (
                MemoryOp(MemoryOpKind.UPDATE, text="Ledger moved to Postgres 16 in March",
                         target_ids=(ledger,), event_time="2026-03-01"),
                MemoryOp(MemoryOpKind.MERGE, MemoryType.ENTITY, "Service billing-api (Go)",
                         target_ids=(billing, ledger)),
                MemoryOp(MemoryOpKind.RETIRE, target_ids=("mem_00000000000000000000",),
                         reason="gone"),
            ),
            (),
        )  # fmt: skip
        diff = await apply_plan(
            uow, tenant="t", owner=owner, plan=plan, sources=MemorySources("s1", 1)
        )
        await uow.commit()
    assert diff.updated == (ledger,) and diff.merged == (billing,) and diff.retired == (ledger,)
    assert [i for i, _ in diff.skipped] == [2]
    kept = await services.memories.get(billing)
    assert kept.row.text == "Service billing-api (Go)" and kept.row.version == 2
    assert [v.text for v in kept.history] == ["Service billing-api"]
    assert {s.archive_seq for s in kept.sources} == {1}
    gone = await services.memories.get(ledger)
    assert gone.row.state == "retired" and gone.row.retire_reason == f"merged into {billing}"
    assert [v.text for v in gone.history] == ["Ledger moves to Postgres"]
    assert gone.row.event_time is not None
    spec = OwnerSpec(session_id="s1")
    assert [h.view.row.memory_id for h in await services.memories.search(
        spec, "ledger billing", [], None, None, 5)] == [billing]  # fmt: skip
    # The session owns them: deleting and purging it removes them.
    await services.sessions.delete("s1", "", "")
    await services.maintenance.purge_deleted()
    async with services.database.reader() as uow:
        assert await uow.memories.by_mid(kept.row.mid) is None


async def test_ranked_archive_search_finds_keywords_that_literal_search_misses(
    services: Services,
) -> None:
    await services.sessions.create("a", "", user_id="u1")
    await _archive(services, "a", "we decided to move the ledger to Postgres", "lunch at noon")
    await _archive(services, "a", "the ledger is large")
    await services.sessions.add_messages(
        "a", [_say("live", "ledger Postgres decided live")], create_if_missing=False,
        request_id="", fingerprint="",
    )  # fmt: skip
    literal, _ = await services.archive_search.search("a", "ledger Postgres decided", "", 10, False)
    assert literal == []
    ranked, total = await services.archive_search.ranked(
        "a", "ledger Postgres decided", "", 10, False
    )
    assert total == 2  # archived messages only: the live one is not indexed
    assert ranked[0][0].message.parts[0].text.startswith("we decided")  # type: ignore[union-attr]
    assert ranked[0][0].score > ranked[1][0].score and ranked[0][0].archive_seq == 1
    await services.sessions.create("b", "", user_id="u2")
    await _archive(services, "b", "the ledger of u2")
    mine, _ = await services.archive_search.ranked("", "ledger", "", 10, True, user_id="u1")
    assert {m.session_id for m, _ in mine} == {"a"}
    everyone, _ = await services.archive_search.ranked("", "ledger", "", 10, True)
    assert {m.session_id for m, _ in everyone} == {"a", "b"}
    only, _ = await services.archive_search.ranked("a", "ledger", "archive_002", 10, False)
    assert [m.archive_seq for m, _ in only] == [2]


async def test_equal_scores_come_newest_first(services: Services) -> None:
    await _archive(services, "s", "alpha beta")
    await _archive(services, "s", "alpha beta")
    ranked, _ = await services.archive_search.ranked("s", "alpha", "", 10, False)
    assert [m.archive_seq for m, _ in ranked] == [2, 1]


@pytest.mark.parametrize(
    ("stored", "query"),
    [
        ("Die Straße ist lang", "STRASSE"),
        ("Die Straße ist lang", "strasse"),
        ("DIE STRASSE IST LANG", "straße"),
        ("open the \ufb01le now", "file"),
        ("open the file now", "\ufb01le"),
        ("ＦＵＬＬ width", "full"),
    ],
)
async def test_literal_search_folds_case_and_compatibility_forms(
    services: Services, stored: str, query: str
) -> None:
    await _archive(services, "s", stored)
    found, total = await services.archive_search.search("s", query, "", 10, False)
    assert total == 1 and found[0][1] == stored


async def test_a_long_message_snippet_is_centred_on_a_folded_match(services: Services) -> None:
    text = "x" * 3000 + " Straße " + "y" * 3000
    await _archive(services, "s", text)
    found, _ = await services.archive_search.search("s", "STRASSE", "", 10, False)
    assert len(found[0][1]) <= 1500 and "Straße" in found[0][1]


@pytest.mark.parametrize("engine", ENGINES)
async def test_archives_made_before_the_index_are_indexed_by_the_upgrade(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A database at the schema before long-term memory, with an archive, upgrades in place
    and its archived messages are found by ranked search."""
    from wm_server.storage import schema_postgres, schema_sqlite

    database = make_database(engine, request, tmp_path, empty=True)
    last_old = 6 if engine == "sqlite" else 7
    migrations = schema_sqlite.MIGRATIONS if engine == "sqlite" else schema_postgres.MIGRATIONS
    whole = type(database).__module__
    import importlib

    module = importlib.import_module(whole)
    saved = module.MIGRATIONS  # type: ignore[attr-defined]
    module.MIGRATIONS = tuple(m for m in migrations if m[0] <= last_old)  # type: ignore[attr-defined]
    try:
        await database.open()
        async with database.unit_of_work() as uow:
            conn = uow._conn
            await conn.run(
                "INSERT INTO sessions (tenant, session_id, create_time, update_time)"
                " VALUES ('t', 'old', 1, 1)",
                {},
            )
            row = await conn.one("SELECT sid FROM sessions WHERE session_id = 'old'", {})
            assert row is not None
            parts = '[{"t":"we decided to move the ledger to Postgres"}]'
            await conn.run(
                "INSERT INTO messages (sid, position, message_id, role, parts_json, tokens,"
                " create_time) VALUES (:sid, 1, 'old-1', 'user', :parts, 10, 1)",
                {"sid": row[0], "parts": parts},
            )
            await conn.run(
                "INSERT INTO archives (sid, seq, commit_id, message_count, tokens,"
                " first_position, last_position, create_time)"
                " VALUES (:sid, 1, 'c1', 1, 10, 1, 1, 1)",
                {"sid": row[0]},
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
        ranked, total = await services.archive_search.ranked("old", "ledger", "", 10, False)
        assert total == 1 and ranked[0][0].message.id.startswith("old-")
    finally:
        await database.close()
    if engine == "sqlite":
        conn = sqlite3.connect(tmp_path / "wm.sqlite3")
        assert conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0] >= 7
        conn.close()


async def test_session_owner_ids_are_kept(services: Services) -> None:
    """(Their shape is the proto's owner_id rule, refused at the edge: test_edge_rules.)"""
    record, _ = await services.sessions.create("x", "", user_id="u1", agent_id="a1")
    assert (record.user_id, record.agent_id) == ("u1", "a1")
    assert (await services.sessions.get("x")).user_id == "u1"
    assert current_tenant() == "t"


async def test_common_words_score_without_selecting_and_sparse_results_fall_back(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the engine counts rows per word, a ranked query selects by its rarest words only
    (common ones still score); when those select fewer rows than asked, all words select."""
    from wm_server.storage import memories

    monkeypatch.setattr(memories, "CANDIDATES", 3)
    monkeypatch.setattr(memories, "ENOUGH", 1)
    for n in range(6):
        await _create(services, f"common filler {n}", MemoryType.ENTITY)
    both = await _create(services, "common rare", MemoryType.ENTITY)
    hits = await services.memories.search(USER, "common rare", [], None, None, 1)
    assert [h.view.row.memory_id for h in hits] == [both]
    wide = await services.memories.search(USER, "common rare", [], None, None, 5)
    assert wide[0].view.row.memory_id == both and len(wide) == 5  # fell back to every word


async def test_a_ranked_search_no_memory_has_a_word_of_finds_none_without_ranking(
    services: Services,
) -> None:
    """Where the engine counts rows per word (SQLite's FTS5), a search whose words are in
    no memory at all asks for the counts only: the ranked statement would find nothing."""
    owner = MemoryOwner("user:u1")
    ranked: list[str] = []
    database = services.database
    if isinstance(database, SqliteDatabase):
        database._connection().conn.set_trace_callback(
            lambda sql: (
                ranked.append(sql) if sql.startswith("SELECT") and " MATCH " in sql else None
            )
        )  # our ranked statements (FTS5's own inner ones start with "--")

    async def similar(text: str) -> list[str]:
        async with database.reader() as uow:
            found = await similar_memories(uow, tenant="t", owner=owner, text=text)
        return [m.text for m in found]

    assert await similar("ledger billing postgres") == []  # an empty index
    assert ranked == []
    await _create(services, "The ledger moved to Postgres")
    await services.memories.create(
        OwnerSpec(user_id="u2"), MemoryContent(MemoryType.ENTITY, "Kiwi orchard"), "", ""
    )
    assert await similar("zebra stripes canary") == []  # words of no memory of anyone's
    assert ranked == []
    assert await similar("kiwi zebra") == []  # another owner's word: ranked, none of u1's
    assert await similar("when did the ledger move") == ["The ledger moved to Postgres"]
    assert await similar("kiwi ledger") == ["The ledger moved to Postgres"]
    assert await similar("Äpfel und Birnen") == []  # not ASCII: ranked all the same
    if isinstance(database, SqliteDatabase):
        assert len(ranked) == 4
