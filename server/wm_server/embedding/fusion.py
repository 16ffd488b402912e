"""Fusing the lexical and dense lists into one ranking, and cosine over stored vectors.

Normalized weighted score fusion: each list's scores are scaled to [0, 1] by its own best
and worst candidate (min-max), and a row's fused score is ``w * dense + (1 - w) * lexical``,
a row missing from one list taking 0 there. Reciprocal rank fusion (k = 60) throws the scores
away; on data like ours it fell below BM25 alone (see bench/recall_bench.py), while weighted
scores keep how far ahead the best candidate is.

DENSE_WEIGHT was chosen on development splits only: bench/recall_bench.py's dev split (R@10
with wordllama: lexical 67.0, dense 81.2; hybrid 76.8 at 0.5, 84.5 at 0.7, 84.8 at 0.8) and our
generated one (bench/embedder_choice_bench.py seed 4242: 98.8 at 0.5, 98.1 at 0.7); 0.7 does well
on both. Checked once on the held-out split: hybrid R@10 85.1 against lexical 73.2 (+11.9).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from wm_server.embedding.port import Vectors

DENSE_WEIGHT = 0.7
# Candidates taken from each list before fusing, per hit asked for (at least MIN_CANDIDATES).
CANDIDATES_PER_HIT = 4
MIN_CANDIDATES = 50

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Fused(Generic[K]):
    """One fused hit: its key, its fused score and each signal's part of it."""

    key: K
    score: float
    lexical: float  # the lexical part: (1 - w) * normalized lexical score
    dense: float  # the dense part: w * normalized cosine


def candidates(limit: int) -> int:
    return max(limit * CANDIDATES_PER_HIT, MIN_CANDIDATES)


def _scaled(scores: Sequence[float]) -> list[float]:
    if not scores:
        return []
    low, high = min(scores), max(scores)
    if high <= low:
        return [1.0 if high > 0 else 0.0 for _ in scores]
    return [(s - low) / (high - low) for s in scores]


def fuse(
    lexical: Sequence[tuple[K, float]],
    dense: Sequence[tuple[K, float]],
    limit: int,
    *,
    weight: float = DENSE_WEIGHT,
    min_score: float = 0.0,
) -> list[Fused[K]]:
    """The best ``limit`` keys of both lists, best first; ties keep the lexical list's order
    (the engine's own tie-break, newest first), then the dense list's."""
    parts: dict[K, list[float]] = {}
    order: dict[K, int] = {}
    for (key, _), value in zip(lexical, _scaled([s for _, s in lexical]), strict=True):
        parts.setdefault(key, [0.0, 0.0])[0] = (1.0 - weight) * value
        order.setdefault(key, len(order))
    for (key, _), value in zip(dense, _scaled([s for _, s in dense]), strict=True):
        parts.setdefault(key, [0.0, 0.0])[1] = weight * value
        order.setdefault(key, len(order))
    fused = [Fused(key, lex + den, lex, den) for key, (lex, den) in parts.items()]
    if min_score > 0:
        fused = [f for f in fused if f.score >= min_score]
    fused.sort(key=lambda f: (-f.score, order[f.key]))
    return fused[:limit]


def rrf(
    lists: Iterable[Sequence[tuple[K, float]]], limit: int, k: int = 60
) -> list[tuple[K, float]]:
    """Reciprocal rank fusion (measured against, not used by the service)."""
    total: dict[K, float] = {}
    for ranked in lists:
        for rank, (key, _) in enumerate(ranked, start=1):
            total[key] = total.get(key, 0.0) + 1.0 / (k + rank)
    return sorted(total.items(), key=lambda item: -item[1])[:limit]


def nearest(query: Vectors, matrix: Vectors, limit: int) -> list[tuple[int, float]]:
    """(row index, cosine) of the ``limit`` rows nearest the unit-length ``query``: brute
    force, one matrix-vector product (about 10 ms per 100,000 rows of 256 floats here)."""
    if matrix.shape[0] == 0:
        return []
    scores = matrix @ query.reshape(-1)
    take = min(limit, scores.shape[0])
    best = np.argpartition(-scores, take - 1)[:take]
    best = best[np.argsort(-scores[best], kind="stable")]
    return [(int(i), float(scores[i])) for i in best]


def nearest_scores(scores: np.ndarray, limit: int) -> list[tuple[int, float]]:
    """(index, score) of the ``limit`` best finite scores, best first."""
    take = min(limit, scores.shape[0])
    if take <= 0:
        return []
    best = np.argpartition(-scores, take - 1)[:take]
    best = best[np.argsort(-scores[best], kind="stable")]
    return [(int(i), float(scores[i])) for i in best if np.isfinite(scores[i])]


def to_blob(vector: Vectors) -> bytes:
    """A vector as stored: little-endian float32."""
    return np.asarray(vector, dtype="<f4").tobytes()


def from_blobs(blobs: Sequence[bytes], dimensions: int) -> Vectors:
    """Stored vectors as one matrix (rows of another length are refused before this)."""
    if not blobs:
        return np.zeros((0, dimensions), dtype=np.float32)
    joined = b"".join(bytes(b) for b in blobs)
    # A copy, native and aligned: a matrix over the bytes object's buffer is read-only and
    # unaligned, which sends the product down numpy's slow loop instead of BLAS (50x here).
    matrix = np.frombuffer(joined, dtype="<f4").astype(np.float32, copy=True)
    return matrix.reshape(len(blobs), dimensions)
