"""The lexical ranking of archived messages: BM25 in process over the searched sessions'
analyzed rows (``wm_server.search.bm25`` says why, with the measurements), kept current here.

Each session's rows are held as BM25 segments, read once from the full-text index's content
table and then kept current from the archives table alone: every query compares the
searched sessions' archive states (count, newest, sum of text versions: one aggregate over
one row per commit) with what it holds, and reads only the archives that are new or were
written again (a Phase 2 chunk, a re-index), as a segment of their own; a session's segments
are merged when they pass ``MAX_SEGMENTS``. So a replica sees another's commits at its next
query, and a long session's commit costs reading that commit's rows, not the session's.
Sessions are evicted least recently used past ``max_bytes``.

An archive whose full-text rows are not written yet (``text_version`` 0: Phase 1 writes
none, Phase 2 writes them with its completion) is read from its messages, analyzed here by
the rule that writes the rows (``ArchiveRepository.search_rows``), so a message is found
from the moment it is archived; its version changes when its rows are written, and the
segment is read again from them.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from wm_server.search import bm25
from wm_server.storage.lexical_rows import State
from wm_server.storage.records import StoredMessage
from wm_server.storage.text_index import term_count
from wm_server.storage.unit_of_work import UnitOfWork

# A session's segments beyond this are merged into one (a query visits each segment).
MAX_SEGMENTS = 4


@dataclass(frozen=True, slots=True)
class _Session:
    state: State
    versions: dict[int, int]  # {seq: text_version} the segments hold
    segments: tuple[bm25.Segment, ...]

    @property
    def weight(self) -> int:
        return sum(s.nbytes for s in self.segments)


class LexicalIndex:
    # 100,000 archived rows take about 16 MB (bench/hybrid_recall_bench.py's rows).
    def __init__(self, max_bytes: int = 128 * 1024 * 1024) -> None:
        self._items: OrderedDict[int, _Session] = OrderedDict()
        self._weight = 0
        self._max = max_bytes

    @property
    def weight(self) -> int:
        """Bytes of the segments held."""
        return self._weight

    @property
    def max_bytes(self) -> int:
        """What it holds at most; past it the least recently used goes."""
        return self._max

    @property
    def filled(self) -> bool:
        """Three quarters of ``max_bytes`` held: warming more would evict what it warmed."""
        return self._weight * 4 >= self._max * 3

    def holds(self, sid: int) -> bool:
        """The session's rows are held (as of some state)."""
        return sid in self._items

    async def ranked(
        self, uow: UnitOfWork, sids: Sequence[int], terms: list[str], only: int | None, limit: int
    ) -> tuple[list[tuple[int, int, StoredMessage, float]], int]:
        """(sid, seq, message, score) of the best ``limit`` archived messages of the sessions
        ``sids`` (of archive ``only`` if given) with any of the analyzed ``terms``, best
        first, newest first among equal scores; and how many have any of them. The same
        contract as ``ArchiveRepository.ranked``; the scores are BM25 over the searched rows'
        statistics on both engines."""
        if not sids or not terms:
            return [], 0
        return await self.rank(uow, await self.segments(uow, sids), terms, only, limit)

    @staticmethod
    async def rank(
        uow: UnitOfWork,
        segments: Sequence[tuple[int, bm25.Segment]],
        terms: list[str],
        only: int | None,
        limit: int,
    ) -> tuple[list[tuple[int, int, StoredMessage, float]], int]:
        """As ``ranked``, over ``segments`` read already."""
        hits, total = bm25.rank(segments, terms, only, limit)
        read = await uow.messages.at([(h.key, h.position) for h in hits])
        out = [
            (h.key, h.seq, read[(h.key, h.position)], h.score)
            for h in hits
            if (h.key, h.position) in read  # a session being purged: its rows go first
        ]
        return out, total

    async def segments(
        self, uow: UnitOfWork, sids: Sequence[int]
    ) -> list[tuple[int, bm25.Segment]]:
        """(sid, segment) of the sessions' archived rows, current as of ``uow``."""
        states = await uow.lexical.states(sids)
        out: list[tuple[int, bm25.Segment]] = []
        for sid in sids:
            state = states.get(sid)
            if state is None:
                self._drop(sid)
                continue
            item = self._items.get(sid)
            if item is None or item.state != state:
                item = await self._refresh(uow, sid, item)
                self._put(sid, item)
            else:
                self._items.move_to_end(sid)
            out.extend((sid, s) for s in item.segments)
        return out

    async def _refresh(self, uow: UnitOfWork, sid: int, item: _Session | None) -> _Session:
        versions = await uow.lexical.versions(sid)
        state = (len(versions), max(versions, default=0), sum(versions.values()))
        if item is None:
            rows = await _rows(uow, sid, versions, None)
            segments: tuple[bm25.Segment, ...] = (await _built(rows),)
            return _Session(state, versions, segments)
        held = item.versions
        changed = frozenset(s for s, v in held.items() if versions.get(s) != v)
        fresh = sorted(s for s, v in versions.items() if held.get(s) != v)
        kept = [bm25.without(s, changed) if changed else s for s in item.segments]
        segments = tuple(s for s in kept if s.size)
        if fresh:
            segments = (*segments, await _built(await _rows(uow, sid, versions, fresh)))
        if len(segments) > MAX_SEGMENTS:
            segments = (bm25.merge(segments),)
        return _Session(state, versions, segments)

    def _put(self, sid: int, item: _Session) -> None:
        self._drop(sid)
        self._items[sid] = item
        self._weight += item.weight
        while self._weight > self._max and len(self._items) > 1:
            _, old = self._items.popitem(last=False)
            self._weight -= old.weight

    def _drop(self, sid: int) -> None:
        old = self._items.pop(sid, None)
        if old is not None:
            self._weight -= old.weight


async def _rows(
    uow: UnitOfWork, sid: int, versions: dict[int, int], seqs: Sequence[int] | None
) -> list[bm25.Row]:
    """The analyzed rows of the session's archives ``seqs`` (None: all): the written ones,
    and those of archives not indexed yet (version 0) analyzed from their messages."""
    wanted = versions if seqs is None else {s: versions[s] for s in seqs}
    unindexed = sorted(s for s, v in wanted.items() if v == 0)
    # Rows written under an archive still at version 0 (Phase 2's earlier chunks) are left
    # out: its messages are read whole.
    written = None if seqs is None and not unindexed else [s for s in wanted if wanted[s]]
    rows = await uow.lexical.rows(sid, written)
    for seq in unindexed:
        bounds = await uow.archives.bounds(sid, seq)
        if bounds is not None:
            rows.extend(
                bm25.Row(seq, r.position, r.archive_time, r.body, term_count(r.body))
                for r in await uow.archives.search_rows(sid, seq, *bounds)
            )
    return rows


async def _built(rows: list[bm25.Row]) -> bm25.Segment:
    """A segment of ``rows``; a large one is built off the event loop (100,000 rows take
    seconds on a busy machine, which other requests should not wait for)."""
    if len(rows) < 2000:
        return bm25.build(rows)
    return await asyncio.to_thread(bm25.build, rows)


def row_count(segments: Sequence[tuple[int, bm25.Segment]], only: int | None) -> int:
    """How many rows ``segments`` hold (of archive ``only`` if given)."""
    if only is None:
        return sum(s.size for _, s in segments)
    return sum(int((s.seqs == only).sum()) for _, s in segments)
