"""Vectors for stored rows, made off the request path.

Three doors lead here, and one loop does the work so the rule "a row is embedded once per
model" lives in one place:

- Phase 2 (``message_vectors``, stored by ``store_message_vectors`` in its completion's
  transaction) embeds the archive it indexes, so a completed commit is retrievable by
  meaning too. An embedder fault there never fails the commit: the rows stay to the
  backfill and the search ranks them lexically meanwhile.
- Memory writes (``wake``): the loop embeds memories whose vector is missing or older than
  their current version (an UPDATE bumps the version), so AddMessages never waits on a model.
- The backfill (``round``): whatever an existing database holds without a vector of the
  configured model (new installations, a model change, Phase 2 runs whose embedder failed),
  a batch per unit of work, with progress in the log and the backlog as a metric.

A stored vector of the configured model with another length is refused at start
(``check_dimensions``): the search could not compare it, and silently skipping it would hide
rows.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

from wm_server.config import ConfigurationError
from wm_server.embedding.fusion import to_blob
from wm_server.embedding.port import Embedder, EmbedderUnavailable, TextRole
from wm_server.services.background import BackgroundLoop
from wm_server.services.transactions import retry_conflicts
from wm_server.storage.codec import searchable_text
from wm_server.storage.database import Database
from wm_server.storage.records import StoredMessage
from wm_server.storage.unit_of_work import UnitOfWork

BATCH = 64
# What one text contributes to its vector, at most: the models read a few hundred tokens.
MAX_CHARS = 2000


class EmbeddingObserver(Protocol):
    def rows_embedded(self, kind: str, count: int) -> None: ...

    def embedding_backlog(self, count: int) -> None: ...

    def embedding_failed(self, where: str) -> None: ...


class _NoObserver:
    def rows_embedded(self, kind: str, count: int) -> None:
        return None

    def embedding_backlog(self, count: int) -> None:
        return None

    def embedding_failed(self, where: str) -> None:
        return None


# (sid, position, seq, model, dims, vector): a stored message vector.
VectorRow = tuple[int, int, int, str, int, bytes]


async def store_message_vectors(uow: UnitOfWork, model: str, rows: Sequence[VectorRow]) -> None:
    """Store message vectors of ``model`` in ``uow``; an archive whose messages all have their
    vector now is marked, so the backfill's count and search read the archives instead of
    every archived message."""
    await uow.vectors.store_messages(rows)
    await uow.write(
        *(uow.vectors.marking_embedded(model, sid) for sid in sorted({r[0] for r in rows}))
    )


def message_text(item: StoredMessage) -> str:
    """What a message's vector is made of: its text, tool calls and tool output synopses."""
    return " ".join(t for t in searchable_text(item.message) if t)[:MAX_CHARS]


class EmbeddingIndexer(BackgroundLoop):
    name = "embedding_backfill"

    def __init__(
        self,
        database: Database,
        embedder: Embedder,
        *,
        observer: EmbeddingObserver | None = None,
        interval_seconds: float = 30.0,
        batch: int = BATCH,
    ) -> None:
        super().__init__(interval_seconds)
        self._db = database
        self._embedder = embedder
        self._observer = observer or _NoObserver()
        self._batch = batch
        self._cursor = (0, 0)  # the backfill's place: (sid, position) done up to

    @property
    def model(self) -> str:
        return self._embedder.model_id

    async def check_dimensions(self) -> None:
        """Refuse to start over vectors of the configured model with another length."""
        model, dims = self._embedder.model_id, self._embedder.dimensions
        async with self._db.reader() as uow:
            wrong = await uow.vectors.wrong_dimensions(model, dims)
        if wrong:
            raise ConfigurationError(
                f"WM_EMBEDDER: {wrong} stored vectors of model {model!r} do not have"
                f" {dims} dimensions; configure the model that made them (or its"
                " dimensions), or choose another model id so they are re-embedded"
            )

    # -- Phase 2 and the backfill: messages ---------------------------------------------

    async def message_vectors(
        self, sid: int, seq: int, items: Sequence[StoredMessage]
    ) -> list[VectorRow]:
        """The vectors of archive ``seq``'s messages ``items``, a batch per embedder call;
        raises ``EmbedderUnavailable`` (counted, with ``where``) when the embedder is down."""
        model, dims = self._embedder.model_id, self._embedder.dimensions
        rows: list[VectorRow] = []
        for start in range(0, len(items), self._batch):
            chunk = items[start : start + self._batch]
            vectors = await self._embedder.embed([message_text(i) for i in chunk], TextRole.PASSAGE)
            rows.extend(
                (sid, i.position, seq, model, dims, to_blob(v))
                for i, v in zip(chunk, vectors, strict=True)
            )
        return rows

    def failed(self, where: str) -> None:
        """The embedder failed on ``where``'s rows (they stay to the backfill)."""
        self._observer.embedding_failed(where)

    def stored(self, rows: Sequence[VectorRow]) -> None:
        """Message vectors were committed: the metrics learn it (the search's caches learn
        it from the archives' vector_version, on every replica alike)."""
        if rows:
            self._observer.rows_embedded("message", len(rows))

    async def _store_messages(self, sid: int, seq: int, items: Sequence[StoredMessage]) -> None:
        rows = await self.message_vectors(sid, seq, items)
        await self._write_messages(rows)
        self.stored(rows)

    @retry_conflicts
    async def _write_messages(self, rows: list[VectorRow]) -> None:
        async with self._db.unit_of_work() as uow:
            await store_message_vectors(uow, self.model, rows)
            await uow.commit()

    @retry_conflicts
    async def _backlog(self) -> int:
        """What is left to embed, after marking the archives embedded by other paths
        (before the archives were marked, or by another replica). The first count reads
        every archive and active memory: a scan, off SQLite's event loop, since every commit
        wakes this round."""
        async with self._db.scanner() as uow:
            backlog = await uow.vectors.missing_count(self.model)
        if not backlog:
            return 0
        async with self._db.unit_of_work() as uow:
            await uow.vectors.mark_embedded(self.model)
            backlog = await uow.vectors.missing_count(self.model)
            await uow.commit()
        return backlog

    # -- the backfill (and memory writes) --------------------------------------------------

    async def round(self) -> None:
        """Embed everything missing, a batch at a time, logging progress."""
        started = time.monotonic()
        done = 0
        backlog = await self._backlog()
        self._observer.embedding_backlog(backlog)
        if backlog:
            self._log.info("embedding_backfill_started", model=self.model, rows=backlog)
        self._cursor = (0, 0)
        while True:
            count = await self.embed_batch()
            if count == 0:
                break
            done += count
            remaining = max(backlog - done, 0)
            self._observer.embedding_backlog(remaining)
            self._log.info(
                "embedding_backfill_progress", model=self.model, embedded=done,
                remaining=remaining, seconds=round(time.monotonic() - started, 1),
            )  # fmt: skip
        if backlog:
            self._observer.embedding_backlog(0)

    async def embed_batch(self) -> int:
        """One batch of memories, else of archived messages, missing a vector of the model;
        the number embedded (0: nothing left). An embedder fault ends the round (retried at
        the next one)."""
        model = self.model
        items: list[tuple[tuple[int, int], StoredMessage]] = []
        async with self._db.scanner() as uow:
            memories = await uow.vectors.missing_memories(model, self._batch)
            missing = []
            if not memories:
                missing = await uow.vectors.missing_messages(model, self._batch, self._cursor)
            for sid in sorted({sid for sid, _, _ in missing}):
                wanted = {p: seq for s, seq, p in missing if s == sid}
                span = await uow.messages.between(sid, min(wanted), max(wanted))
                items.extend(((sid, wanted[i.position]), i) for i in span if i.position in wanted)
        if missing:
            self._cursor = (missing[-1][0], missing[-1][2])
        try:
            if memories:
                vectors = await self._embedder.embed(
                    [text[:MAX_CHARS] for _, _, text in memories], TextRole.PASSAGE
                )
                dims = self._embedder.dimensions
                rows = [
                    (mid, version, model, dims, to_blob(v))
                    for (mid, version, _), v in zip(memories, vectors, strict=True)
                ]
                await self._write_memories(rows)
                self._observer.rows_embedded("memory", len(rows))
                return len(rows)
            for sid, seq in sorted({key for key, _ in items}):
                chunk = [i for key, i in items if key == (sid, seq)]
                await self._store_messages(sid, seq, chunk)
        except EmbedderUnavailable:
            self._observer.embedding_failed("backfill")
            raise
        return len(items) or len(missing)  # rows gone since: step past them

    @retry_conflicts
    async def _write_memories(self, rows: list[tuple[int, int, str, int, bytes]]) -> None:
        async with self._db.unit_of_work() as uow:
            await uow.vectors.store_memories(rows)
            await uow.commit()
