"""An owner's memories held in process for recall: BM25 over their analyzed texts (the same
``wm_server.search.bm25`` as archived messages, the same analyzer) and their vectors, kept
current by the owner's change marker (``storage/memory_lexical_rows.py``).

Why: the engines' full-text indexes scored memories over the statistics of every tenant's
and owner's memories (another user's memories changed an owner's ranking, and FTS5's bm25()
and PostgreSQL's ts_rank_cd are different formulas), and the dense side read every vector of
the owner back from the database for each query (100,000 memories on PostgreSQL: 453 ms p50,
1,245 ms p95). Here a search costs one point read of the owner's marker, then numpy: the
BM25 statistics are those of exactly the memories searched (the owner's, as the search's
filter admits them), on both engines alike.

Each owner is held as a few parts (a BM25 segment plus the columns a filter reads and the
vectors, row for row). A search whose marker differs reads only the rows written since
(every write stamps its row: insert, rewrite, retire, supersede, expiry, a vector stored) as
a new part, taking those rows out of the older parts; a count that disagrees means deletes,
and only then are the owner's keys read. Parts are merged past ``MAX_PARTS``. Only reads of
committed data are kept (a read-only unit of work): a writer's own rows could still roll
back. Owners are evicted least recently used past ``max_bytes``.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from wm_server import native_heap
from wm_server.embedding import quantized
from wm_server.embedding.fusion import from_blobs, nearest_scores
from wm_server.embedding.port import Vectors
from wm_server.search import bm25
from wm_server.storage.memories import MemoryFilter
from wm_server.storage.memory_expiry import alive_mask
from wm_server.storage.memory_lexical_rows import IndexedMemory, OwnerState
from wm_server.storage.text_index import term_count
from wm_server.storage.unit_of_work import UnitOfWork

# An owner's parts beyond this are merged into one (a search visits each part).
MAX_PARTS = 4
# Rows built on the event loop at most; more are built on a thread (100,000 take seconds).
_INLINE = 2000
# Rows read per statement: a page's vectors are held as bytes at a time (100,000 at once
# took the server's RSS from 218 to 743 MB for good, bench/memory_search_bench.py).
PAGE = 5000


@dataclass(frozen=True, slots=True, eq=False)
class _Part:
    """Memories row for row: their BM25 segment (``seqs`` and ``positions`` are the keys, so
    equal scores fall to the newest memory), what a filter reads, and their vectors."""

    segment: bm25.Segment
    states: np.ndarray  # int32 codes (``MemoryIndex`` names them)
    kinds: np.ndarray  # int32 codes
    times: np.ndarray  # float64, COALESCE(event_time, record_time)
    expires: np.ndarray  # float64 expire_time, NaN for NULL
    created: np.ndarray  # float64
    vectors: quantized.Codes  # (rows, dims), zeros where not embedded
    embedded: np.ndarray  # bool

    @property
    def mids(self) -> np.ndarray:
        return self.segment.seqs

    @property
    def nbytes(self) -> int:
        columns = (self.states, self.kinds, self.times, self.expires, self.created)
        extra = sum(c.nbytes for c in columns) + self.vectors.nbytes + self.embedded.nbytes
        return self.segment.nbytes + extra

    def without(self, mids: np.ndarray) -> _Part:
        keep = ~np.isin(self.mids, mids)
        if keep.all():
            return self
        gone = frozenset(int(m) for m in self.mids[~keep])
        return _Part(
            bm25.without(self.segment, gone), self.states[keep], self.kinds[keep],
            self.times[keep], self.expires[keep], self.created[keep], self.vectors.take(keep),
            self.embedded[keep],
        )  # fmt: skip


def _merged(parts: list[_Part]) -> _Part:
    """One part of ``parts``, which it empties: a worker thread's call holds its arguments
    until after the caller resumed, so pages passed to ``asyncio.to_thread`` outlived the heap's
    trim that follows a build (measured: 70 MB of 100,000 memories' pages kept)."""

    def joined(column: str) -> np.ndarray:
        return np.concatenate([getattr(p, column) for p in parts])

    merged = _Part(
        bm25.merge([p.segment for p in parts]), joined("states"), joined("kinds"),
        joined("times"), joined("expires"), joined("created"),
        quantized.concatenate([p.vectors for p in parts]), joined("embedded"),
    )  # fmt: skip
    parts.clear()
    return merged


def _built(rows: Sequence[IndexedMemory], codes: dict[str, int], dims: int) -> _Part:
    """A part of ``rows`` (their state and type names registered in ``codes`` already)."""
    count = len(rows)
    segment = bm25.build([bm25.Row(r.mid, r.mid, 0.0, r.terms, term_count(r.terms)) for r in rows])
    embedded = np.fromiter((r.vector is not None for r in rows), dtype=bool, count=count)
    matrix = from_blobs([r.vector for r in rows if r.vector is not None], dims)
    if embedded.all():
        vectors = quantized.quantize(matrix)
    else:
        coded = quantized.quantize(matrix)
        vectors = quantized.Codes(
            np.zeros((count, dims), dtype=np.int16), np.zeros(count, dtype=np.float32)
        )
        vectors.codes[embedded] = coded.codes
        vectors.scales[embedded] = coded.scales
    return _Part(
        segment,
        np.fromiter((codes[r.state] for r in rows), dtype=np.int32, count=count),
        np.fromiter((codes[r.type] for r in rows), dtype=np.int32, count=count),
        np.fromiter((r.time for r in rows), dtype=np.float64, count=count),
        np.array([np.nan if r.expire_time is None else r.expire_time for r in rows], np.float64),
        np.fromiter((r.create_time for r in rows), dtype=np.float64, count=count),
        vectors,
        embedded,
    )


@dataclass(frozen=True, slots=True)
class OwnerMemories:
    """One owner's memories as of their ``state``."""

    state: OwnerState
    parts: tuple[_Part, ...]
    names: tuple[str, ...]  # the state and type names, by code

    @property
    def size(self) -> int:
        return sum(p.segment.size for p in self.parts)

    @property
    def weight(self) -> int:
        return sum(p.nbytes for p in self.parts)

    def admitted(self, where: MemoryFilter) -> list[np.ndarray]:
        """Per part, the rows ``where`` admits (as ``MemoryRepository``'s filter does)."""
        code = {name: n for n, name in enumerate(self.names)}
        state = code.get(where.state, -1)
        kinds = np.array([code.get(t, -1) for t in where.types], dtype=np.int32)
        masks = []
        for part in self.parts:
            mask = part.states == state
            if where.types:
                mask &= np.isin(part.kinds, kinds)
            if where.start_time is not None:
                mask &= part.times >= where.start_time
            if where.end_time is not None:
                mask &= part.times < where.end_time
            if where.alive_at is not None:
                mask &= alive_mask(
                    where.alive_at, where.retention, part.expires, part.created, part.kinds,
                    self.names,
                )  # fmt: skip
            masks.append(mask)
        return masks

    def lexical(
        self, terms: list[str], masks: Sequence[np.ndarray], limit: int
    ) -> list[tuple[int, float]]:
        """(mid, BM25 score) of the best ``limit`` admitted memories with any of ``terms``,
        best first, newest first among equal scores: statistics of the admitted rows only."""
        segments = [(0, p.segment) for p in self.parts]
        hits, _ = bm25.rank(segments, terms, None, limit, masks)
        return [(h.seq, h.score) for h in hits]

    def nearest(
        self, vector: Vectors, masks: Sequence[np.ndarray], limit: int
    ) -> tuple[list[tuple[int, float]], int]:
        """(mid, cosine) of the ``limit`` admitted memories nearest ``vector``, best first;
        and how many admitted memories have no vector yet."""
        scores: list[np.ndarray] = []
        unembedded = 0
        for part, mask in zip(self.parts, masks, strict=True):
            searched = mask & part.embedded
            unembedded += int(np.count_nonzero(mask)) - int(np.count_nonzero(searched))
            product = part.vectors.cosine(vector)
            if not searched.all():
                product[~searched] = -np.inf
            scores.append(product)
        if not scores:
            return [], unembedded
        mids = np.concatenate([p.mids for p in self.parts])
        found = nearest_scores(np.concatenate(scores), limit)
        return [(int(mids[i]), score) for i, score in found], unembedded


class MemoryIndex:
    """Owners' memories for recall, least recently used out past ``max_bytes``: 100,000
    memories with 256-d vectors take about 69 MB (their vectors as int16 codes,
    ``embedding/quantized.py``; 125 MB as float32; bench/memory_search_bench.py)."""

    def __init__(
        self,
        model: str | None = None,
        dims: int = 0,
        max_bytes: int = 384 * 1024 * 1024,
        page: int = PAGE,
    ) -> None:
        self._page = page
        self._model = model
        self._dims = dims if model is not None else 0
        self._items: OrderedDict[tuple[str, str], OwnerMemories] = OrderedDict()
        self._weight = 0
        self._max = max_bytes
        self._codes: dict[str, int] = {}
        self._building: dict[tuple[str, str], asyncio.Lock] = {}

    @property
    def weight(self) -> int:
        """Bytes held."""
        return self._weight

    @property
    def owners(self) -> int:
        """Owners held."""
        return len(self._items)

    @property
    def max_bytes(self) -> int:
        """What it holds at most; past it the least recently used goes."""
        return self._max

    @property
    def filled(self) -> bool:
        """Three quarters of ``max_bytes`` held: warming more would evict what it warmed."""
        return self._weight * 4 >= self._max * 3

    def holds(self, tenant: str, owner: str) -> bool:
        """The owner's memories are held (as of some state)."""
        return (tenant, owner) in self._items

    async def owner(self, uow: UnitOfWork, tenant: str, owner: str) -> OwnerMemories | None:
        """The owner's memories as of ``uow`` (None: they have none)."""
        key = (tenant, owner)
        state = await uow.memory_rows.state(tenant, owner)
        item = self._items.get(key)
        if state is None:
            self._drop(key)
            return None
        if item is not None and item.state == state:
            self._items.move_to_end(key)
            return item
        if not uow.read_only:  # a writer's own rows could still roll back: never kept
            return await self._refreshed(uow, tenant, owner, state, item)
        # One build per owner at a time: a search that comes while the warm-up (or another
        # search) reads the owner waits for it, then reads only what changed since (two
        # builds of 100,000 memories at once doubled their transient memory).
        lock = self._building.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                item = self._items.get(key)
                if item is not None and item.state == state:
                    return item
                fresh = await self._refreshed(uow, tenant, owner, state, item)
                self._put(key, fresh)
                return fresh
        finally:
            if not lock.locked():
                self._building.pop(key, None)

    async def _refreshed(
        self,
        uow: UnitOfWork,
        tenant: str,
        owner: str,
        state: OwnerState,
        item: OwnerMemories | None,
    ) -> OwnerMemories:
        fresh, read = await self._refresh(uow, tenant, owner, state, item)
        if read >= _INLINE:  # what the build freed goes back (native_heap), off the loop
            await asyncio.to_thread(native_heap.release)
        return fresh

    async def _refresh(
        self,
        uow: UnitOfWork,
        tenant: str,
        owner: str,
        state: OwnerState,
        item: OwnerMemories | None,
    ) -> tuple[OwnerMemories, int]:
        """The owner's memories as of ``state``; how many rows were read."""
        after = item.state[0] if item is not None else 0
        read = 0
        pages: list[_Part] = []
        last = 0
        while True:
            rows = await uow.memory_rows.written_since(
                tenant, owner, after, self._model, last, self._page
            )
            if not rows:
                break
            for name in {r.state for r in rows} | {r.type for r in rows}:
                self._codes.setdefault(name, len(self._codes))
            pages.append(await self._build(rows))
            read += len(rows)
            last = rows[-1].mid
            if len(rows) < self._page:
                break
        built = (
            await asyncio.to_thread(_merged, pages)
            if len(pages) > 1
            else (pages[0] if pages else _built([], self._codes, self._dims))
        )
        parts: list[_Part] = []
        if item is not None:
            written = built.mids
            parts = [p.without(written) for p in item.parts]
        parts = [p for p in (*parts, built) if p.segment.size]
        if sum(p.segment.size for p in parts) != state[1]:  # some were deleted
            present = np.array(await uow.memory_rows.mids(tenant, owner), dtype=np.int64)
            held = np.concatenate([p.mids for p in parts]) if parts else present[:0]
            gone = np.setdiff1d(held, present)
            parts = [p.without(gone) for p in parts] if gone.shape[0] else parts
            parts = [p for p in parts if p.segment.size]
        if len(parts) > MAX_PARTS:
            parts = [await asyncio.to_thread(_merged, parts)]
        return OwnerMemories(state, tuple(parts), tuple(self._codes)), read

    async def _build(self, rows: list[IndexedMemory]) -> _Part:
        codes = dict(self._codes)
        if len(rows) < _INLINE:
            return _built(rows, codes, self._dims)
        return await asyncio.to_thread(_built, rows, codes, self._dims)

    def _put(self, key: tuple[str, str], item: OwnerMemories) -> None:
        self._drop(key)
        self._items[key] = item
        self._weight += item.weight
        while self._weight > self._max and len(self._items) > 1:
            _, old = self._items.popitem(last=False)
            self._weight -= old.weight

    def _drop(self, key: tuple[str, str]) -> None:
        old = self._items.pop(key, None)
        if old is not None:
            self._weight -= old.weight
