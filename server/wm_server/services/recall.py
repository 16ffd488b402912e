"""One fused search for every recall path: lexical ranking + cosine over stored vectors.

SearchArchives (hybrid mode), SearchMemories, AssembleContext's recall and the recall tools
all come here. The query is embedded first (before any connection is held); then, in the
caller's unit of work, the lexical ranking (BM25 in process: for archived messages
``services/lexical_index.py``, for memories ``services/memory_index.py``; a list of (key,
score)) and the dense ranking (brute-force cosine over the scope's stored vectors) each give
their candidates and :func:`wm_server.embedding.fusion.fuse` merges them.

Never an error, never silently lexical: with no embedder (``WM_EMBEDDER=none``), or one that
fails or times out, the answer is the lexical ranking with ``status`` saying why
(:class:`Semantic`), and the fault is counted. Rows not embedded yet are still found
lexically; the answer says how many there are.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

import numpy as np
import structlog
from threadpoolctl import threadpool_limits

from wm_server.config import RECALL_CACHE_MB
from wm_server.embedding import quantized
from wm_server.embedding.fusion import Fused, candidates, from_blobs, fuse, nearest_scores
from wm_server.embedding.port import Embedder, EmbedderUnavailable, TextRole, Vectors
from wm_server.search import bm25
from wm_server.services.lexical_index import LexicalIndex, row_count
from wm_server.services.memory_index import MemoryIndex
from wm_server.storage.memories import MemoryFilter
from wm_server.storage.records import MemoryRow
from wm_server.storage.unit_of_work import UnitOfWork

log = structlog.get_logger("wm_server.recall")

# How long a query waits for its vector before the search answers lexically.
QUERY_TIMEOUT = 1.0


class Semantic(IntEnum):
    """How much of an answer was ranked by meaning (the proto's SemanticRecall values)."""

    UNSPECIFIED = 0
    FULL = 1  # every row searched had a vector
    PARTIAL = 2  # some rows are not embedded yet: they were ranked lexically only
    OFF = 3  # no embedder configured
    DEGRADED = 4  # the embedder failed or timed out: lexical only


class RecallObserver(Protocol):
    def recall_degraded(self, reason: str) -> None: ...

    def recall_empty(self, kind: str) -> None: ...


class _NoObserver:
    def recall_degraded(self, reason: str) -> None:
        return None

    def recall_empty(self, kind: str) -> None:
        return None


class _Session:
    """One session's archived-message vectors of one model, held as int16 codes
    (``embedding/quantized.py``: half the bytes of float32, the same top 10); rows appended
    in place (the buffers grow by doubling), so an embedded commit costs its own rows."""

    __slots__ = ("_codes", "_positions", "_scales", "_seqs", "count", "model", "versions")

    def __init__(
        self,
        model: str,
        vectors: quantized.Codes,
        seqs: np.ndarray,
        positions: np.ndarray,
        versions: dict[int, int],
    ) -> None:
        self.model = model
        self._codes, self._scales = vectors.codes, vectors.scales
        self._seqs, self._positions = seqs, positions
        self.count = vectors.rows
        self.versions = versions  # {seq: vector_version} of the archives as read

    @property
    def vectors(self) -> quantized.Codes:
        return quantized.Codes(self._codes[: self.count], self._scales[: self.count])

    @property
    def seqs(self) -> np.ndarray:
        return self._seqs[: self.count]

    @property
    def positions(self) -> np.ndarray:
        return self._positions[: self.count]

    @property
    def weight(self) -> int:
        arrays = (self._codes, self._scales, self._seqs, self._positions)
        return sum(int(a.nbytes) for a in arrays)

    def append(self, vectors: quantized.Codes, seqs: np.ndarray, positions: np.ndarray) -> None:
        """Add rows; a position held already takes its new vector."""
        again = np.isin(positions, self.positions)
        if again.any():
            keep = ~np.isin(self.positions, positions)
            joined = quantized.concatenate([self.vectors.take(keep), vectors])
            self._codes, self._scales = joined.codes, joined.scales
            self._seqs = np.concatenate([self.seqs[keep], seqs])
            self._positions = np.concatenate([self.positions[keep], positions])
            self.count = joined.rows
            return
        need = self.count + vectors.rows
        if need > self._codes.shape[0]:
            size = max(need, 2 * self._codes.shape[0], 64)
            grown = np.empty((size, vectors.dims), dtype=self._codes.dtype)
            grown[: self.count] = self._codes[: self.count]
            self._codes = grown
            self._scales = np.resize(self._scales, size)
            self._seqs = np.resize(self._seqs, size)
            self._positions = np.resize(self._positions, size)
        self._codes[self.count : need] = vectors.codes
        self._scales[self.count : need] = vectors.scales
        self._seqs[self.count : need] = seqs
        self._positions[self.count : need] = positions
        self.count = need


class VectorCache:
    """Sessions' vector matrices, least recently used out past ``max_bytes``.

    Reading 100,000 stored vectors back from the database costs far more than the cosine over
    them, so each session's matrix is kept once read, with the ``vector_version`` of each of
    its archives (which changes whenever vectors of the archive are stored, by any replica:
    ``VectorRepository.store_messages``). A search compares them (one statement over the
    searched sessions' archives) and reads again only the archives whose vectors changed,
    appended in place (a session of 100,000 rows is not read again for each commit embedded),
    so a replica searches what another one embedded at its next query.
    """

    # More changed archives than this in one session: the session is read again whole.
    MAX_CHANGED = 8

    def __init__(self, max_bytes: int = 256 * 1024 * 1024) -> None:
        self._items: OrderedDict[int, _Session] = OrderedDict()
        self._weight = 0
        self._max = max_bytes

    @property
    def max_bytes(self) -> int:
        """What it holds at most; past it the least recently used goes."""
        return self._max

    @property
    def filled(self) -> bool:
        """Three quarters of ``max_bytes`` held: warming more would evict what it warmed."""
        return self._weight * 4 >= self._max * 3

    async def session(
        self,
        uow: UnitOfWork,
        sid: int,
        model: str,
        dims: int,
        versions: dict[int, int] | None = None,
    ) -> _Session:
        """The session's vectors of ``model`` as of ``versions`` (its archives' vector
        versions, read here when not given)."""
        if versions is None:
            versions = (await uow.vectors.vector_versions([sid]))[sid]
        item = self._items.get(sid)
        if item is not None and item.model == model and item.versions.keys() <= versions.keys():
            changed = [seq for seq, v in versions.items() if item.versions.get(seq) != v]
            if len(changed) <= self.MAX_CHANGED:
                before = item.weight
                for seq in changed:
                    rows = await uow.vectors.messages([sid], seq, model)
                    if rows:
                        item.append(*_matrix(rows, dims))
                item.versions = dict(versions)
                self._weight += item.weight - before
                self._items.move_to_end(sid)
                return item
        self._drop(sid)
        rows = await uow.vectors.messages([sid], None, model)
        item = _Session(model, *_matrix(rows, dims), dict(versions))
        self._items[sid] = item
        self._weight += item.weight
        while self._weight > self._max and len(self._items) > 1:
            _, old = self._items.popitem(last=False)
            self._weight -= old.weight
        return item

    def _drop(self, sid: int) -> None:
        old = self._items.pop(sid, None)
        if old is not None:
            self._weight -= old.weight


def _matrix(
    rows: Sequence[tuple[int, int, int, bytes]], dims: int
) -> tuple[quantized.Codes, np.ndarray, np.ndarray]:
    """(vectors, seqs, positions) of ``VectorRepository.messages`` rows."""
    return (
        quantized.quantize(from_blobs([r[3] for r in rows], dims)),
        np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows)),
        np.fromiter((r[2] for r in rows), dtype=np.int64, count=len(rows)),
    )


@dataclass(frozen=True, slots=True)
class QueryVector:
    vector: Vectors | None
    status: Semantic


@dataclass(frozen=True, slots=True)
class ArchiveHit:
    sid: int
    seq: int
    position: int
    fused: Fused[tuple[int, int]]


@dataclass(frozen=True, slots=True)
class MemoryFound:
    row: MemoryRow
    fused: Fused[int]


DEFAULT_MAX_BYTES = RECALL_CACHE_MB * 1024 * 1024  # WM_RECALL_CACHE_MB's default, in bytes


class HybridRecall:
    def __init__(
        self,
        embedder: Embedder | None,
        *,
        observer: RecallObserver | None = None,
        timeout: float = QUERY_TIMEOUT,
        cache: VectorCache | None = None,
        lexical: LexicalIndex | None = None,
        memory_index: MemoryIndex | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self._embedder = embedder
        self._observer = observer or _NoObserver()
        self._timeout = timeout
        lexical_bytes, cache_bytes, memory_bytes = self.shares(max_bytes)
        self.cache = cache or VectorCache(cache_bytes)
        # The lexical ranking of archived messages (in-process BM25 per searched sessions).
        self.lexical = lexical or LexicalIndex(lexical_bytes)
        # Owners' memories: in-process BM25 per owner and their vectors.
        self.memory_index = memory_index or (
            MemoryIndex(embedder.model_id, embedder.dimensions, max_bytes=memory_bytes)
            if embedder is not None
            else MemoryIndex(max_bytes=memory_bytes)
        )
        if embedder is not None:
            # The cosine runs on the event loop between other requests: OpenBLAS's own
            # threads only fight the loop for the cores (5,000 x 256 product: 13.5 ms with
            # them on this busy 2-core machine, 0.7-2 ms with one thread).
            threadpool_limits(limits=1, user_api="blas")

    @staticmethod
    def shares(max_bytes: int) -> tuple[int, int, int]:
        """``max_bytes`` (``WM_RECALL_CACHE_MB``) as the three indexes' budgets: archived
        rows' BM25, their vectors, owners' memories, in the proportions 1 : 2 : 3 that the
        defaults had as constants (128, 256 and 384 MiB of 768)."""
        sixth = max_bytes // 6
        return sixth, 2 * sixth, max_bytes - 3 * sixth

    @property
    def model(self) -> str | None:
        return self._embedder.model_id if self._embedder else None

    @property
    def dimensions(self) -> int:
        return self._embedder.dimensions if self._embedder else 0

    async def embed_query(self, text: str) -> QueryVector:
        """The query's vector, or why there is none (counted)."""
        if self._embedder is None:
            return QueryVector(None, Semantic.OFF)
        try:
            vectors = await asyncio.wait_for(
                self._embedder.embed([text], TextRole.QUERY), self._timeout
            )
        except (EmbedderUnavailable, TimeoutError) as error:
            reason = "timeout" if isinstance(error, TimeoutError) else "unavailable"
            self._observer.recall_degraded(reason)
            log.warning("recall_degraded", reason=reason, error=str(error))
            return QueryVector(None, Semantic.DEGRADED)
        return QueryVector(vectors[0], Semantic.FULL)

    def empty(self, kind: str, found: int) -> None:
        if not found:
            self._observer.recall_empty(kind)

    async def archives(
        self,
        uow: UnitOfWork,
        query: QueryVector,
        sids: Sequence[int],
        terms: list[str],
        only: int | None,
        limit: int,
        min_score: float = 0.0,
    ) -> tuple[list[ArchiveHit], int, Semantic, int]:
        """(hits best first, candidates that passed ``min_score``, status, rows searched
        lexically only) of the archived messages of ``sids``."""
        want = candidates(limit)
        segments = await self.lexical.segments(uow, sids)
        # The candidates' messages are not read here: the caller reads its hits' at once.
        lexical, _ = bm25.rank(segments, terms, only, want)
        seqs = {(h.key, h.position): h.seq for h in lexical}
        lexical_list = [((h.key, h.position), h.score) for h in lexical]
        dense_list: list[tuple[tuple[int, int], float]] = []
        status, unembedded = query.status, 0
        if query.vector is not None and self.model is not None:
            dense_list, held = await self._dense_messages(uow, query.vector, sids, only, want, seqs)
            # The rows the lexical index holds are the archived rows searched.
            unembedded = max(row_count(segments, only) - held, 0)
            status = Semantic.PARTIAL if unembedded else Semantic.FULL
        fused = fuse(lexical_list, dense_list, want, min_score=min_score)
        hits = [ArchiveHit(f.key[0], seqs[f.key], f.key[1], f) for f in fused[:limit]]
        self.empty("archives", len(hits))
        return hits, len(fused), status, unembedded

    async def _dense_messages(
        self,
        uow: UnitOfWork,
        vector: Vectors,
        sids: Sequence[int],
        only: int | None,
        want: int,
        seqs: dict[tuple[int, int], int],
    ) -> tuple[list[tuple[tuple[int, int], float]], int]:
        """The ``want`` archived messages of ``sids`` nearest ``vector`` (one product per
        session's cached matrix, one selection over all the scores), and how many vectors
        were searched."""
        assert self.model is not None
        parts: list[tuple[int, _Session, np.ndarray]] = []
        held = 0
        versions = await uow.vectors.vector_versions(sids)
        for sid in sids:
            item = await self.cache.session(uow, sid, self.model, vector.shape[0], versions[sid])
            if item.count:
                scores = item.vectors.cosine(vector)
                if only is not None:
                    scores = np.where(item.seqs == only, scores, -np.inf)
                    held += int(np.count_nonzero(item.seqs == only))
                else:
                    held += item.count
                parts.append((sid, item, scores))
        if not parts:
            return [], 0
        scores = np.concatenate([p[2] for p in parts])
        owners = np.concatenate([np.full(p[2].shape[0], i) for i, p in enumerate(parts)])
        offsets = np.concatenate([np.arange(p[2].shape[0]) for p in parts])
        out: list[tuple[tuple[int, int], float]] = []
        # No relevance floor here: on the recall evaluation's dev split the floor cost 6-8
        # points of hybrid R@10 (archived turns are short and their cosines low); memories
        # keep it (a search with nothing related stays empty there).
        for index, cosine in nearest_scores(scores, want):
            sid, item, _ = parts[int(owners[index])]
            row = int(offsets[index])
            key = (sid, int(item.positions[row]))
            seqs[key] = int(item.seqs[row])
            out.append((key, cosine))
        return out, held

    async def memories(
        self,
        uow: UnitOfWork,
        query: QueryVector,
        where: MemoryFilter,
        terms: list[str],
        limit: int,
        min_score: float = 0.0,
    ) -> tuple[list[MemoryFound], Semantic, int]:
        """(memories best first, status, memories searched lexically only) for ``where``:
        BM25 over the memories ``where`` admits (their statistics only) and the cosine of
        their vectors, from the owner's in-process index, one snapshot of both."""
        want = candidates(limit)
        held = await self.memory_index.owner(uow, where.tenant, where.owner)
        if held is None:
            self.empty("memories", 0)
            return [], query.status, 0
        masks = held.admitted(where)
        lexical = held.lexical(terms, masks, want) if terms else []
        dense_list: list[tuple[int, float]] = []
        status, unembedded = query.status, 0
        if query.vector is not None and self.model is not None:
            near, unembedded = held.nearest(query.vector, masks, want)
            floor = self._embedder.relevance_floor if self._embedder else 0.0
            dense_list = [(mid, c) for mid, c in near if c >= floor]
            status = Semantic.PARTIAL if unembedded else Semantic.FULL
        fused = fuse(lexical, dense_list, want, min_score=min_score)
        found = await _rows(uow, where, fused, limit)
        self.empty("memories", len(found))
        return found, status, unembedded

    async def ranked_memories(
        self, uow: UnitOfWork, where: MemoryFilter, terms: list[str], limit: int
    ) -> list[tuple[MemoryRow, float]]:
        """The best ``limit`` memories ``where`` admits with any of ``terms`` by BM25 alone,
        best first, newest first among equal scores."""
        held = await self.memory_index.owner(uow, where.tenant, where.owner) if terms else None
        if held is None:
            return []
        lexical = held.lexical(terms, held.admitted(where), limit)
        found = await _rows(uow, where, fuse(lexical, [], limit, weight=0.0), limit)
        scores = dict(lexical)
        return [(f.row, scores[f.row.mid]) for f in found]


async def _rows(
    uow: UnitOfWork, where: MemoryFilter, fused: list[Fused[int]], limit: int
) -> list[MemoryFound]:
    """The rows of the best ``limit`` of ``fused`` (keys of memories), read only for those:
    the database applies the filter again, and a memory it no longer admits (written since
    the index's snapshot) gives its place to the next one."""
    found: list[MemoryFound] = []
    start = 0
    while len(found) < limit and start < len(fused):
        chunk = fused[start : start + limit - len(found)]
        start += len(chunk)
        rows = {row.mid: row for row in await uow.memories.among(where, [f.key for f in chunk])}
        found.extend(MemoryFound(rows[f.key], f) for f in chunk if f.key in rows)
    return found


def no_vector() -> QueryVector:
    """A query without a vector (lexical ranking only), for callers that have none."""
    return QueryVector(None, Semantic.OFF)
