"""BM25 over analyzed rows, in process: the lexical ranking of archived messages and of
memories (``services/memory_index.py`` holds an owner's memories as segments too).

Why in process rather than in the engines' full-text indexes (measured on
bench/recall_bench.py at 100,000 archived messages of one user, SQLite): FTS5's bm25() scores
every row a query's words select, over the statistics of every tenant's rows, and the engine
gives no way to score only the newest or only one owner's rows first, so the ranked statement
scored the newest 500 matches (an approximation) and still took 45 ms p50, 126 ms p95;
PostgreSQL's ts_rank_cd is another formula altogether, so the two engines ranked differently;
exact BM25 in SQL over the searched sessions' postings (``ArchiveRepository.bm25_ranked``)
took 0.5-0.7 s on common words. Here the searched sessions' postings are numpy arrays held
by the server (``services/lexical_index.py`` keeps them current): one query is a few array
lookups per term and session, a weighted ``bincount`` and a partial sort, a few milliseconds
at 100,000 rows, with the statistics (row count, average length, each term's row count) of
exactly the rows searched, so other owners and tenants never change a ranking, and SQLite and
PostgreSQL rank the same rows the same way (both give the analyzer's terms back).

Terms are kept as 64-bit hashes of their text (Python's, stable within the process that
builds and queries the index; a collision among a few million terms has odds around 1e-7).
Scores are rounded to 1e-9 so summation order never splits an exact tie, which falls to the
newest row, as the engines' statements did.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

import numpy as np

# BM25's parameters: k1 the usual 1.2; b (length normalization) 0.3 rather than the usual
# 0.75, chosen on bench/recall_bench.py's dev split with k1 at 1.2 (R@5/10/25 62.5/69.3/86.9
# against 60.7/67.6/86.6 at 0.75; archived turns are short, and a long one is seldom long
# for want of relevance) and checked on the held-out split (55.7/73.5/82.1 against
# 56.0/72.9/82.1). A larger k1 gained on dev (2.0: R@10 70.5) and nothing on held-out.
BM25_K1: Final = 1.2
BM25_B: Final = 0.3
_DIGITS: Final = 9  # scores are compared at this many decimals

K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class Row:
    """One analyzed row: its archive, position, archive time, terms (space-separated,
    repeats kept: their number is the term frequency) and length (its number of terms, as
    the engine stored it with the row)."""

    seq: int
    position: int
    time: float
    terms: str
    length: int


@dataclass(frozen=True, slots=True, eq=False)
class Segment:
    """Rows' postings, grouped by term: the rows of term ``vocabulary[i]`` are
    ``docs[starts[i]:starts[i + 1]]`` with their frequencies in ``tfs``."""

    vocabulary: np.ndarray  # int64 term hashes, sorted, distinct
    starts: np.ndarray  # int64, len(vocabulary) + 1
    docs: np.ndarray  # int32 row index within the segment
    tfs: np.ndarray  # float32: whole counts, exact to 2**24, and half the bytes of float64
    lengths: np.ndarray  # float64 terms per row
    seqs: np.ndarray  # int64
    positions: np.ndarray  # int64
    times: np.ndarray  # float64

    @property
    def size(self) -> int:
        return int(self.seqs.shape[0])

    @property
    def nbytes(self) -> int:
        arrays = (self.vocabulary, self.starts, self.docs, self.tfs, self.lengths)
        return sum(a.nbytes for a in (*arrays, self.seqs, self.positions, self.times))

    @property
    def archives(self) -> frozenset[int]:
        return frozenset(int(s) for s in np.unique(self.seqs))


def _grouped(
    terms: np.ndarray, docs: np.ndarray, tfs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(vocabulary, starts, docs, tfs) of postings sorted by term, then row."""
    order = np.lexsort((docs, terms))
    terms, docs, tfs = terms[order], docs[order], tfs[order]
    if terms.shape[0] == 0:
        return terms, np.zeros(1, dtype=np.int64), docs.astype(np.int32), tfs
    first = np.flatnonzero(np.concatenate(([True], terms[1:] != terms[:-1])))
    starts = np.append(first, terms.shape[0]).astype(np.int64)
    return terms[first], starts, docs.astype(np.int32), tfs


def build(rows: Sequence[Row]) -> Segment:
    """The segment of ``rows`` (in any order)."""
    lengths = np.fromiter((r.length for r in rows), dtype=np.float64, count=len(rows))
    counts = np.zeros(len(rows), dtype=np.int64)

    def tokens() -> Iterator[str]:  # one row's words at a time: no list of every token
        for i, row in enumerate(rows):
            words = row.terms.split()
            counts[i] = len(words)
            yield from words

    hashes = np.fromiter(map(hash, tokens()), dtype=np.int64)
    owners = np.repeat(np.arange(len(rows), dtype=np.int64), counts)
    # One posting per (term, row), its frequency the number of repeats.
    order = np.lexsort((owners, hashes))
    hashes, owners = hashes[order], owners[order]
    if hashes.shape[0]:
        new = np.concatenate(([True], (hashes[1:] != hashes[:-1]) | (owners[1:] != owners[:-1])))
        first = np.flatnonzero(new)
        frequencies = np.diff(np.append(first, hashes.shape[0])).astype(np.float32)
        hashes, owners = hashes[first], owners[first]
    else:
        frequencies = np.zeros(0, dtype=np.float32)
    vocabulary, starts, docs, tfs = _grouped(hashes, owners, frequencies)
    return Segment(
        vocabulary, starts, docs, tfs, lengths,
        np.fromiter((r.seq for r in rows), dtype=np.int64, count=len(rows)),
        np.fromiter((r.position for r in rows), dtype=np.int64, count=len(rows)),
        np.fromiter((r.time for r in rows), dtype=np.float64, count=len(rows)),
    )  # fmt: skip


def merge(segments: Sequence[Segment]) -> Segment:
    """One segment of the rows of ``segments`` (their postings re-grouped, no text read)."""
    if len(segments) == 1:
        return segments[0]
    offsets = np.cumsum([0, *(s.size for s in segments)])
    terms = np.concatenate([np.repeat(s.vocabulary, np.diff(s.starts)) for s in segments])
    docs = np.concatenate(
        [s.docs.astype(np.int64) + o for s, o in zip(segments, offsets[:-1], strict=True)]
    )
    tfs = np.concatenate([s.tfs for s in segments])
    vocabulary, starts, docs, tfs = _grouped(terms, docs, tfs)
    return Segment(
        vocabulary, starts, docs, tfs,
        np.concatenate([s.lengths for s in segments]),
        np.concatenate([s.seqs for s in segments]),
        np.concatenate([s.positions for s in segments]),
        np.concatenate([s.times for s in segments]),
    )  # fmt: skip


def without(segment: Segment, seqs: frozenset[int]) -> Segment:
    """``segment`` without the rows of archives ``seqs``."""
    keep = ~np.isin(segment.seqs, np.fromiter(seqs, dtype=np.int64, count=len(seqs)))
    if keep.all():
        return segment
    renumber = np.cumsum(keep) - 1
    posting = keep[segment.docs]
    terms = np.repeat(segment.vocabulary, np.diff(segment.starts))[posting]
    vocabulary, starts, docs, tfs = _grouped(
        terms, renumber[segment.docs[posting]], segment.tfs[posting]
    )
    return Segment(
        vocabulary, starts, docs, tfs, segment.lengths[keep], segment.seqs[keep],
        segment.positions[keep], segment.times[keep],
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Hit(Generic[K]):
    key: K  # whose segment
    seq: int
    position: int
    score: float


@dataclass(slots=True)
class _Matches(Generic[K]):
    key: K
    segment: Segment
    docs: np.ndarray
    tfs: np.ndarray
    terms: np.ndarray  # index of the query term of each posting


def rank(
    segments: Sequence[tuple[K, Segment]],
    terms: Sequence[str],
    only: int | None,
    limit: int,
    masks: Sequence[np.ndarray] | None = None,
) -> tuple[list[Hit[K]], int]:
    """The best ``limit`` rows of ``segments`` (of archive ``only`` if given; of the rows
    each segment's mask in ``masks`` admits, if given) with any of ``terms`` (distinct), best
    first, newest first among equal scores; and how many rows have any of them. BM25 with
    ``BM25_K1``, ``BM25_B`` and idf ln(1 + (N - df + 0.5) / (df + 0.5)) over the statistics
    of those rows only (as ``ArchiveRepository.bm25_ranked``)."""
    if not terms or limit <= 0:
        return [], 0
    wanted = np.fromiter((hash(t) for t in terms), dtype=np.int64, count=len(terms))
    df = np.zeros(len(terms), dtype=np.float64)
    rows = 0
    length = 0.0
    found: list[_Matches[K]] = []
    for n, (key, segment) in enumerate(segments):
        inside: np.ndarray | None = None
        if only is not None:
            inside = segment.seqs == only
        if masks is not None:
            inside = masks[n] if inside is None else inside & masks[n]
        if inside is None:
            rows += segment.size
            length += float(segment.lengths.sum())
        else:
            rows += int(np.count_nonzero(inside))
            length += float(np.sum(segment.lengths, where=inside))
        vocabulary = segment.vocabulary
        if vocabulary.shape[0] == 0:
            continue
        at = np.minimum(np.searchsorted(vocabulary, wanted), vocabulary.shape[0] - 1)
        present = np.flatnonzero(vocabulary[at] == wanted)
        if present.shape[0] == 0:
            continue
        low = segment.starts[at[present]]
        counts = segment.starts[at[present] + 1] - low
        # The postings of every present term, gathered in one index array.
        take = np.arange(int(counts.sum())) + np.repeat(low - np.cumsum(counts) + counts, counts)
        docs = segment.docs[take]
        tfs = segment.tfs[take]
        which = np.repeat(present, counts)
        if inside is not None:
            keep = inside[docs]
            docs, tfs, which = docs[keep], tfs[keep], which[keep]
        df += np.bincount(which, minlength=len(terms))
        found.append(_Matches(key, segment, docs, tfs, which))
    if not found or rows == 0:
        return [], 0
    idf = np.log1p((rows - df + 0.5) / (df + 0.5))
    average = length / rows if length > 0 else 1.0
    total = 0
    parts: list[tuple[K, Segment, np.ndarray, np.ndarray]] = []
    for match in found:
        segment = match.segment
        norm = BM25_K1 * (1 - BM25_B + BM25_B * segment.lengths[match.docs] / average)
        weights = idf[match.terms] * match.tfs * (BM25_K1 + 1) / (match.tfs + norm)
        sums = np.bincount(match.docs, weights=weights, minlength=segment.size)
        hit = np.flatnonzero(sums > 0)
        scores = np.round(sums[hit], _DIGITS)  # only the rows hit: no pass over every row
        total += int(hit.shape[0])
        if hit.shape[0] > limit:
            # Every row as good as the limit-th best stays: a tie falls to the newest.
            floor = np.partition(scores, hit.shape[0] - limit)[hit.shape[0] - limit]
            keep = scores >= floor
            hit, scores = hit[keep], scores[keep]
        parts.append((match.key, segment, hit, scores))
    scores = np.concatenate([p[3] for p in parts])
    times = np.concatenate([p[1].times[p[2]] for p in parts])
    positions = np.concatenate([p[1].positions[p[2]] for p in parts])
    order = np.lexsort((-positions, -times, -scores))[:limit]
    owner = np.concatenate([np.full(p[2].shape[0], i) for i, p in enumerate(parts)])
    rowsof = np.concatenate([p[2] for p in parts])
    out: list[Hit[K]] = []
    for i in order:
        key, segment, _, _ = parts[int(owner[i])]
        row = int(rowsof[i])
        seq, position = int(segment.seqs[row]), int(segment.positions[row])
        out.append(Hit(key, seq, position, float(scores[i])))
    return out, total
