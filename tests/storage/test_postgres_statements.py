"""What PostgreSQL does per AddMessages, checked on the server's own backend (a pool of one
connection): the statements stay prepared across units that only read, and the session's
counter update stays a HOT update. Both were lost once without any test failing: a job
claim that found nothing ended with ROLLBACK, on which psycopg drops every statement it
prepared on the connection; an indexed column written on every call made each update a new
entry in every index of ``sessions`` (a third more WAL per call)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from storage_support import Services, build_services

from wm_core import Message, Role, TextPart, message_tokens
from wm_server.security.tenancy import set_tenant
from wm_server.storage.postgres import PostgresDatabase
from wm_server.storage.records import SearchRow

pytestmark = pytest.mark.postgres


def _text(n: int) -> Message:
    parts = (TextPart(f"message {n} " * 20),)
    return Message("", Role.USER, parts, message_tokens(parts))


@pytest.fixture
async def single(postgres_url: str) -> AsyncIterator[tuple[PostgresDatabase, Services]]:
    database = PostgresDatabase(postgres_url, min_connections=1, max_connections=1)
    await database.open()
    set_tenant("t")
    yield database, build_services(database)
    await database.close()


async def _scalar(database: PostgresDatabase, sql: str) -> int:
    async with database.reader() as uow:
        row = await uow._conn.one(sql, {})
    assert row is not None
    return int(row[0])


async def _add(services: Services, n: int) -> None:
    await services.sessions.add_messages("s", [_text(n)], create_if_missing=True, request_id="")


async def test_a_unit_that_only_read_keeps_the_prepared_statements(
    single: tuple[PostgresDatabase, Services],
) -> None:
    database, services = single
    for n in range(8):  # psycopg prepares a statement on its fifth run
        await _add(services, n)
    prepared = await _scalar(database, "SELECT count(*) FROM pg_prepared_statements")
    assert prepared >= 2
    assert await services.jobs.claim(60) is None  # a write unit that found nothing to do
    await _add(services, 8)
    assert await _scalar(database, "SELECT count(*) FROM pg_prepared_statements") >= prepared


async def test_a_unit_that_wrote_and_failed_is_rolled_back(
    single: tuple[PostgresDatabase, Services],
) -> None:
    database, services = single
    await _add(services, 0)
    with pytest.raises(RuntimeError):
        async with database.unit_of_work() as uow:
            await uow._conn.run("UPDATE sessions SET message_count = 1000", {})
            raise RuntimeError("the use case gave up")
    assert await _scalar(database, "SELECT message_count FROM sessions") == 1


async def test_adding_messages_updates_the_session_row_in_place(
    single: tuple[PostgresDatabase, Services],
) -> None:
    database, services = single
    for n in range(30):
        await _add(services, n)
    await _scalar(database, "SELECT count(*) FROM (SELECT pg_stat_force_next_flush()) f")
    updated = await _scalar(
        database, "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'sessions'"
    )
    hot = await _scalar(
        database, "SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'sessions'"
    )
    assert updated >= 30
    assert hot == updated


async def test_a_batch_sends_what_its_rows_share_once(
    single: tuple[PostgresDatabase, Services],
) -> None:
    database, services = single
    for batch in range(6):  # prepared on its fifth run: its parameter types can be read
        messages = [_text(batch * 10 + n) for n in range(10)]
        await services.sessions.add_messages("s", messages, create_if_missing=True, request_id="")
    async with database.reader() as uow:
        stored = await uow._conn.one(
            "SELECT count(*), count(DISTINCT position), count(DISTINCT create_time),"
            " min(position), max(position) FROM messages",
            {},
        )
        types = await uow._conn.all(
            "SELECT parameter_types::text[] FROM pg_prepared_statements"
            " WHERE statement LIKE '%INSERT INTO messages%'",
            {},
        )
    assert stored == (60, 60, 6, 1, 60)  # each row whole; a batch shares its time
    assert len(types) == 1
    (parameters,) = types[0]
    # The positions vary: an array (of the integer type psycopg picks for the values).
    assert {"smallint[]", "integer[]", "bigint[]"} & set(parameters)
    assert "double precision[]" not in parameters  # the batch's time: one value
    assert "double precision" in parameters


async def test_a_batch_keeps_every_character_of_its_rows(
    single: tuple[PostgresDatabase, Services],
) -> None:
    # Array parameters go in binary form: what text form had to quote and escape arrives as is.
    database, services = single
    texts = ['say "hi"', "back\\slash \\\\ and \\n", "{a, b}", "NULL", " ", "tab\there",
             "naïve café 日本語", "\u3000ideographic space", "a,b;c", "'single'"]  # fmt: skip
    parts = [(TextPart(t),) for t in texts]
    batch = [Message("", Role.USER, p, message_tokens(p)) for p in parts]
    await services.sessions.add_messages("s", batch, create_if_missing=True, request_id="")
    async with database.reader() as uow:
        row = await uow.sessions.find("t", "s")
        assert row is not None
        stored = await uow.messages.between(row.sid, 0, None)
    assert [s.message.parts for s in stored] == parts


async def test_a_batch_of_computed_values_goes_as_one_statement(
    single: tuple[PostgresDatabase, Services],
) -> None:
    """An archive's full-text rows (each vector computed by ``to_tsvector`` from its text) go
    as one INSERT over arrays, not a statement per row, and each row gets the vector of its
    own text."""
    database, services = single
    await services.sessions.add_messages("s", [_text(1)], create_if_missing=True, request_id="")
    index = database.dialect.text_index
    for seq in range(1, 7):  # prepared on its fifth run: its text can be read
        rows = [SearchRow(p, 1.0, index.indexed(f"word{seq}x{p} common")) for p in range(1, 4)]
        async with database.unit_of_work() as uow:
            session = await uow.sessions.find("t", "s")
            assert session is not None
            await uow.write(*uow.archives.indexing(session.sid, seq, rows))
            await uow.commit()
    async with database.reader() as uow:
        prepared = await uow._conn.all(
            "SELECT statement FROM pg_prepared_statements"
            " WHERE statement LIKE '%INSERT INTO archived_texts%'",
            {},
        )
        stored = await uow._conn.all(
            "SELECT seq, position, search::text FROM archived_texts ORDER BY seq, position", {}
        )
    assert len(prepared) == 1 and "unnest" in prepared[0][0]
    assert [(s, p) for s, p, _ in stored] == [(s, p) for s in range(1, 7) for p in range(1, 4)]
    assert all(text == f"'common':2 'word{s}x{p}':1" for s, p, text in stored)


async def test_working_memory_documents_are_compressed_with_lz4(
    single: tuple[PostgresDatabase, Services],
) -> None:
    """Every Phase 2 writes a document of tens of kilobytes: lz4 compresses it in a third
    of pglz's time (this cluster is built with lz4), and the document reads back whole."""
    database, services = single
    await services.sessions.create("s", "")
    document = "# Working Memory\n" + "".join(f"- fact {n}: port {8000 + n}\n" for n in range(2000))
    async with database.unit_of_work() as uow:
        session = await uow.sessions.find("t", "s")
        assert session is not None
        inserting = uow.working_memories.inserting(
            session.sid, 1, document, archive_seq=None, covered_seq=0, commit_id=None,
            tokens=1, now=1.0, decisions_json="[]",
        )  # fmt: skip
        await uow.write(inserting)
        await uow.commit()
    async with database.reader() as uow:
        method = await uow._conn.one(
            "SELECT attcompression FROM pg_attribute"
            " WHERE attrelid = 'working_memories'::regclass AND attname = 'document'",
            {},
        )
        stored = await uow._conn.one(
            "SELECT pg_column_compression(document), document FROM working_memories", {}
        )
    assert method == ("l",)
    assert stored == ("lz4", document)
