"""Recall by meaning on every engine (issue 34): vectors stored with the rows (float32 BLOB /
bytea, model id and dimensions each), embedded off the request path (the backfill, Phase 2's
step, memory writes), re-embedded on a model change, refused at start with the wrong length,
and the fused search that degrades to lexical with a flag."""

from __future__ import annotations

import itertools
import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from storage_support import Services, build_services

from wm_core import MemoryType, Message, Role, TextPart, message_tokens
from wm_server.config import ConfigurationError
from wm_server.embedding.embedded import WordLlamaEmbedder
from wm_server.embedding.fusion import to_blob
from wm_server.embedding.openai_embeddings import OpenAIEmbedder
from wm_server.embedding.port import TextRole, Vectors
from wm_server.errors import InvalidArgument
from wm_server.security.tenancy import set_tenant
from wm_server.services.archive_search import ArchiveSearchService
from wm_server.services.embedding_index import EmbeddingIndexer, store_message_vectors
from wm_server.services.memories import MemoryService, OwnerSpec
from wm_server.services.memory_content import MemoryContent
from wm_server.services.paging import PageTokens
from wm_server.services.recall import HybridRecall, Semantic
from wm_server.services.sessions import find_session
from wm_server.storage.schema_sqlite import MIGRATIONS
from wm_server.storage.sqlite import SqliteDatabase
from wm_server.storage.vectors import VectorRepository

USER = OwnerSpec(user_id="u1")
_ids = itertools.count()


@pytest.fixture(scope="module")
def wordllama() -> Iterator[WordLlamaEmbedder]:
    yield WordLlamaEmbedder()


class Renamed:
    """The same model under another id: what a change of WM_EMBEDDER looks like to storage."""

    def __init__(self, inner: WordLlamaEmbedder, model_id: str) -> None:
        self._inner = inner
        self.model_id = model_id
        self.dimensions = inner.dimensions
        self.relevance_floor = inner.relevance_floor
        self.calls = 0

    async def embed(self, texts: list[str], role: TextRole) -> Vectors:
        self.calls += 1
        return await self._inner.embed(texts, role)

    async def close(self) -> None:
        return None


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _say(text: str) -> Message:
    parts = (TextPart(text),)
    return Message(f"m{next(_ids)}", Role.USER, parts, message_tokens(parts))


CONVERSATION = [
    "We settled on PostgreSQL for the ledger service because of its transactions.",
    "The flaky integration test in the billing module was fixed yesterday.",
    "Please rename the helper in utils so it reads better.",
    "My sister just started a pottery class on Tuesday evenings.",
    "Run the linter before you push the branch.",
]


async def _archive(services: Services, session: str, texts: list[str]) -> None:
    await services.sessions.add_messages(
        session, [_say(t) for t in texts], create_if_missing=True, request_id="", fingerprint=""
    )
    await services.commits.phase1(session, 0, None)


async def _vector_rows(services: Services, table: str) -> list[tuple[str, int, int]]:
    async with services.database.reader() as uow:
        rows = await uow._conn.all(  # the stored columns themselves
            f"SELECT model, dims, LENGTH(vector) FROM {table}", {}
        )
    return [(str(a), int(b), int(c)) for a, b, c in rows]


async def test_backfill_stores_float32_vectors_with_model_and_dimensions_and_hybrid_finds_by_meaning(
    services: Services, wordllama: WordLlamaEmbedder
) -> None:
    await _archive(services, "s", CONVERSATION)
    recall = HybridRecall(wordllama)
    context = ArchiveSearchService(services.database, recall)
    before = await context.hybrid("s", "which database did we choose for the ledger", "", 5, False)
    assert before.status is Semantic.PARTIAL and before.unembedded == len(CONVERSATION)

    indexer = EmbeddingIndexer(services.database, wordllama)
    await indexer.round()
    rows = await _vector_rows(services, "message_vectors")
    assert rows == [(wordllama.model_id, 256, 256 * 4)] * len(CONVERSATION)

    answer = await context.hybrid("s", "when did she begin ceramics lessons", "", 3, False)
    assert answer.status is Semantic.FULL and answer.unembedded == 0
    top, _, fused = answer.hits[0]
    assert "pottery" in top.message.parts[0].text  # type: ignore[union-attr]
    assert fused.lexical == 0 and fused.dense > 0  # no shared word: found by meaning alone
    assert all(abs(f.score - (f.lexical + f.dense)) < 1e-9 for _, _, f in answer.hits)
    assert [f.score for _, _, f in answer.hits] == sorted(
        (f.score for _, _, f in answer.hits), reverse=True
    )
    # A hit found by one signal alone scores at most that signal's weight (0.5 here).
    strict = await context.hybrid(
        "s", "when did she begin ceramics lessons", "", 3, False, min_score=0.45
    )
    assert [m.message.id for m, _, _ in strict.hits] == [top.message.id]
    assert strict.total == 1
    with pytest.raises(InvalidArgument):
        await context.hybrid("s", "ceramics", "", 3, False, min_score=1.5)


async def test_phase2_embeds_the_archive_in_its_completions_unit_of_work(
    services: Services, wordllama: WordLlamaEmbedder
) -> None:
    await _archive(services, "p", CONVERSATION[:3])
    indexer = EmbeddingIndexer(services.database, wordllama)
    async with services.database.scanner() as uow:
        row = await find_session(uow, "p")
        bounds = await uow.archives.bounds(row.sid, 1)
        assert bounds is not None
        archive = await uow.messages.between(row.sid, *bounds)
    rows = await indexer.message_vectors(row.sid, 1, archive)
    assert [r[1] for r in rows] == [m.position for m in archive]
    async with services.database.unit_of_work() as uow:
        await store_message_vectors(uow, indexer.model, rows)
        await uow.commit()
    assert len(await _vector_rows(services, "message_vectors")) == 3
    async with services.database.reader() as uow:
        assert await uow.vectors.unembedded_messages([row.sid], None, wordllama.model_id) == 0


async def test_a_model_change_re_embeds_in_the_background(
    services: Services, wordllama: WordLlamaEmbedder
) -> None:
    await _archive(services, "m", CONVERSATION)
    await services.memories.create(USER, MemoryContent(MemoryType.PREFERENCE, "Likes tea"), "", "")
    await EmbeddingIndexer(services.database, wordllama).round()
    other = Renamed(wordllama, "wordllama/another")
    context = ArchiveSearchService(services.database, HybridRecall(other))
    answer = await context.hybrid("m", "ledger database", "", 3, False)
    assert answer.status is Semantic.PARTIAL and answer.unembedded == len(CONVERSATION)
    assert answer.hits  # still found, lexically
    recall = HybridRecall(other)
    await EmbeddingIndexer(services.database, other).round()
    context = ArchiveSearchService(services.database, recall)
    models = {m for m, _, _ in await _vector_rows(services, "message_vectors")}
    models |= {m for m, _, _ in await _vector_rows(services, "memory_vectors")}
    assert models == {"wordllama/another"}
    assert (await context.hybrid("m", "ledger database", "", 3, False)).status is Semantic.FULL


async def test_vectors_stored_later_are_read_for_their_archive_only(
    services: Services, wordllama: WordLlamaEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session's matrix is read once: vectors stored afterwards (by this process's loop or
    any other replica's) are read for their archive only, by its vector version, and
    appended to it (a re-embedded position replaced), not read again whole."""
    await _archive(services, "h", CONVERSATION[:3])
    recall = HybridRecall(wordllama)
    indexer = EmbeddingIndexer(services.database, wordllama)
    await indexer.round()
    context = ArchiveSearchService(services.database, recall)
    assert (await context.hybrid("h", "ledger", "", 3, False)).status is Semantic.FULL
    reads: list[object] = []
    real = VectorRepository.messages

    async def counted(self: VectorRepository, *args: object) -> object:
        reads.append(args[1])  # the archive read (None: the whole session)
        return await real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(VectorRepository, "messages", counted)
    await _archive(services, "h", CONVERSATION[3:])
    await indexer.round()
    answer = await context.hybrid("h", "when did she begin ceramics lessons", "", 3, False)
    assert reads == [2]  # the second archive's vectors, once
    assert answer.status is Semantic.FULL and answer.unembedded == 0
    assert "pottery" in answer.hits[0][0].message.parts[0].text  # type: ignore[union-attr]
    async with services.database.reader() as uow:
        row = await find_session(uow, "h")
        stored = await real(uow.vectors, [row.sid], None, wordllama.model_id)
    (item,) = [recall.cache._items[row.sid]]
    assert sorted(item.positions.tolist()) == sorted(p for _, _, p, _ in stored)
    codes = item.vectors  # int16 codes with a scale per row (embedding/quantized.py)
    held = dict(zip(item.positions.tolist(), codes.codes * codes.scales[:, None], strict=True))
    for _, _, position, blob in stored:
        assert np.allclose(held[position], np.frombuffer(blob, dtype="<f4"), rtol=0, atol=1e-4)
    # The same positions stored again (a retry): replaced, not doubled.
    rows = [(row.sid, p, seq, wordllama.model_id, 256, b) for _, seq, p, b in stored]
    async with services.database.unit_of_work() as uow:
        await uow.vectors.store_messages(rows[:2])
        await uow.commit()
    await context.hybrid("h", "ledger", "", 3, False)
    assert recall.cache._items[row.sid].count == len(CONVERSATION)
    assert reads == [2, 1]


async def _marks(services: Services) -> list[str]:
    async with services.database.reader() as uow:
        rows = await uow._conn.all("SELECT embedded_model FROM archives ORDER BY sid, seq", {})
    return [str(r[0]) for r in rows]


async def test_the_backfill_counts_and_finds_what_is_missing_from_the_archives(
    services: Services, wordllama: WordLlamaEmbedder
) -> None:
    """An archive is marked embedded once its every message has a vector of the model, so
    the backfill's count (and its search for rows) reads the archives, not every archived
    message; an archive embedded before the marks (or by another path) is marked by the next
    round; a model change unmarks everything at once."""
    model = wordllama.model_id
    await _archive(services, "a", CONVERSATION[:2])
    await _archive(services, "a", CONVERSATION[2:])
    indexer = EmbeddingIndexer(services.database, wordllama)
    async with services.database.reader() as uow:
        assert await uow.vectors.missing_count(model) == len(CONVERSATION)
    assert await indexer.embed_batch() == len(CONVERSATION)  # marks both archives
    assert await _marks(services) == [model, model]
    async with services.database.reader() as uow:
        assert await uow.vectors.missing_count(model) == 0
        assert await uow.vectors.missing_messages(model, 10) == []
    # A mark wiped (a database from before the marks): the rows are not embedded again,
    # the round marks the archive and the count is right.
    async with services.database.unit_of_work() as uow:
        await uow._conn.run("UPDATE archives SET embedded_model = ''", {})
        await uow.commit()
    async with services.database.reader() as uow:
        assert await uow.vectors.missing_count(model) == len(CONVERSATION)  # an upper bound
    counting = Renamed(wordllama, model)
    await EmbeddingIndexer(services.database, counting).round()
    assert counting.calls == 0 and await _marks(services) == [model, model]
    # A third archive: counted until the round embeds it.
    await _archive(services, "a", ["one more turn about the ledger"])
    async with services.database.reader() as uow:
        assert await uow.vectors.missing_count(model) == 1
    await indexer.round()
    assert await _marks(services) == [model] * 3
    async with services.database.reader() as uow:
        assert await uow.vectors.missing_count("wordllama/another") == len(CONVERSATION) + 1


async def test_a_stored_vector_of_another_length_is_refused_at_start(
    services: Services, wordllama: WordLlamaEmbedder
) -> None:
    await _archive(services, "d", CONVERSATION[:1])
    async with services.database.reader() as uow:
        row = await find_session(uow, "d")
    async with services.database.unit_of_work() as uow:
        vector = to_blob(np.ones(128, dtype=np.float32))
        await uow.vectors.store_messages([(row.sid, 1, 1, wordllama.model_id, 128, vector)])
        await uow.commit()
    with pytest.raises(ConfigurationError, match="do not have 256 dimensions"):
        await EmbeddingIndexer(services.database, wordllama).check_dimensions()
    other = Renamed(wordllama, "wordllama/another")
    await EmbeddingIndexer(services.database, other).check_dimensions()  # another model: fine


async def test_memories_are_embedded_when_written_and_searched_by_meaning(
    services: Services, wordllama: WordLlamaEmbedder
) -> None:
    indexer = EmbeddingIndexer(services.database, wordllama)
    memories = MemoryService(
        services.database,
        tokens=PageTokens.random(),
        recall=HybridRecall(wordllama),
        written=indexer.wake,
    )
    await memories.create(USER, MemoryContent(MemoryType.EVENT, "Started a pottery class"), "", "")
    await memories.create(
        USER, MemoryContent(MemoryType.DECISION, "Ledger runs on Postgres"), "", ""
    )
    assert indexer._wake.is_set()  # the write woke the loop; it embeds, not the write
    hits, status, unembedded = await memories.search_fused(USER, "ceramics", [], None, None, 5)
    assert status is Semantic.PARTIAL and unembedded == 2
    await indexer.round()
    assert [m for m, _, _ in await _vector_rows(services, "memory_vectors")] == [
        wordllama.model_id
    ] * 2
    hits, status, unembedded = await memories.search_fused(USER, "ceramics", [], None, None, 1)
    assert status is Semantic.FULL and unembedded == 0
    assert hits[0].view.row.text == "Started a pottery class" and hits[0].dense > 0
    only = await memories.search_fused(USER, "ceramics", ["decision"], None, None, 5)
    assert only[0] == []  # the event found by meaning is not a decision: filtered out
    unrelated = await memories.search_fused(USER, "review demo account", [], None, None, 5)
    assert unrelated[0] == []  # below the model's relevance floor: no hit by meaning alone


async def test_an_embedder_that_fails_degrades_to_lexical_with_the_flag(
    services: Services,
) -> None:
    await _archive(services, "f", CONVERSATION)
    down = OpenAIEmbedder(
        base_url=f"http://127.0.0.1:{_dead_port()}/v1", model="m", dimensions=8,
        api_key=None, timeout=0.5, max_retries=0,
    )  # fmt: skip
    degraded: list[str] = []

    class Observer:
        def recall_degraded(self, reason: str) -> None:
            degraded.append(reason)

        def recall_empty(self, kind: str) -> None:
            return None

    context = ArchiveSearchService(services.database, HybridRecall(down, observer=Observer()))
    answer = await context.hybrid("f", "ledger PostgreSQL", "", 3, False)
    assert answer.status is Semantic.DEGRADED and degraded == ["unavailable"]
    assert "ledger" in answer.hits[0][0].message.parts[0].text  # type: ignore[union-attr]
    assert answer.hits[0][2].dense == 0
    off = await ArchiveSearchService(services.database, HybridRecall(None)).hybrid(
        "f", "ledger", "", 3, False
    )
    assert off.status is Semantic.OFF and off.hits
    await down.close()


async def test_sqlite_keeps_message_vectors_in_a_rowid_table_across_the_migration(
    tmp_path: Path,
) -> None:
    """A database whose message vectors are in the earlier WITHOUT ROWID table is migrated
    to the rowid table with a unique key (1 KB rows: three to a page there), its vectors
    kept; they are replaced on their key as before."""
    path = tmp_path / "wm.sqlite3"
    database = SqliteDatabase(path)
    await database.open()
    services = build_services(database)
    set_tenant("t")
    await services.sessions.create("s", "")
    await database.close()
    raw = sqlite3.connect(path, isolation_level=None)
    [old] = [sql for version, sql in MIGRATIONS if version == 12]
    raw.execute("DROP TABLE message_vectors")
    raw.execute(old[0])  # as version 12 made it
    raw.execute("DELETE FROM schema_migrations WHERE version = 19")
    rows = [(1, p, 1, "m", 2, bytes([p]) * 8) for p in range(5)]
    raw.executemany("INSERT INTO message_vectors VALUES (?, ?, ?, ?, ?, ?)", rows)
    assert "WITHOUT ROWID" in _table_sql(raw)
    raw.close()

    database = SqliteDatabase(path)
    await database.open()
    try:
        async with database.unit_of_work() as uow:
            await uow.vectors.store_messages([(1, 4, 1, "m", 2, b"new")])
            await uow.commit()
    finally:
        await database.close()
    raw = sqlite3.connect(path)
    assert "WITHOUT ROWID" not in _table_sql(raw) and "UNIQUE (sid, position)" in _table_sql(raw)
    stored = raw.execute("SELECT * FROM message_vectors ORDER BY sid, position").fetchall()
    assert stored == [*rows[:4], (1, 4, 1, "m", 2, b"new")]
    raw.close()


def _table_sql(conn: sqlite3.Connection) -> str:
    [(sql,)] = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'message_vectors'"
    ).fetchall()
    return str(sql)
