"""Vectors held in memory as int16 codes with one scale per row, and their cosine to a query.

Why: an owner's 100,000 memories with 256-d float32 vectors held 102 MB of the recall index's
125 MB, and the server's RSS after 50 SearchMemories was 588 MB against the 500 MB target
(bench/memory_search_bench.py). Codes take half of that. float16 would too, but numpy converts
float16 without SIMD here: the cosine over 100,000 rows took 55-85 ms, against 8-13 ms in
float32 and 6-6.5 ms from int16 codes converted to float32 a block at a time (the product is
bound by memory, and a block fits the cache).

Each row is scaled by its largest magnitude (``code = round(32767 * x / max|x|)``) and the
query stays float32, so a row's cosine is off by at most ``max|x| / 65534`` times the query's
L1 norm, under 1e-4 for unit 256-d vectors (measured on real text: under 1e-5). int8 codes (a quarter of
float32, 5-5.5 ms) were measured too and refused: their error (up to 0.002) reordered the
top 10 of one question in ten on bench/recall's splits (R@10 the same or 0.6 better), while
int16's top 10 is float32's for every question, ties aside (bench/quantized_agreement_bench.py).
The stored vectors (float32 BLOBs) are unchanged: only what the server holds is coded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from wm_server.embedding.port import Vectors

# Rows converted to float32 at a time in ``Codes.cosine``: 2,048 x 256 floats (2 MB) was the
# fastest of 256 to 8,192 over 100,000 rows here (CPU 6.2-6.7 ms p50; 4,096: 6.4-7.0).
BLOCK = 2048
_LEVELS = 32767.0


@dataclass(frozen=True, slots=True, eq=False)
class Codes:
    """Rows of int16 codes (``codes``) and the float32 ``scales`` that bring them back:
    ``vector ~= codes * scale``. A row of zeros (no vector) has scale 0."""

    codes: np.ndarray  # int16 (rows, dims)
    scales: np.ndarray  # float32 (rows,)

    @property
    def rows(self) -> int:
        return int(self.codes.shape[0])

    @property
    def dims(self) -> int:
        return int(self.codes.shape[1])

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes + self.scales.nbytes)

    def take(self, keep: np.ndarray) -> Codes:
        """The rows ``keep`` (a boolean mask or indexes) selects."""
        return Codes(self.codes[keep], self.scales[keep])

    def cosine(self, query: Vectors) -> np.ndarray:
        """float32 cosine of every row to the unit-length float32 ``query`` (0 for a row of
        zeros), a block of rows converted at a time: no float32 copy of the matrix."""
        out = np.empty(self.rows, dtype=np.float32)
        if self.dims == 0:
            out[:] = 0.0
            return out
        query = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        buffer = np.empty((min(BLOCK, self.rows), self.dims), dtype=np.float32)
        for start in range(0, self.rows, BLOCK):
            end = min(start + BLOCK, self.rows)
            block = buffer[: end - start]
            np.copyto(block, self.codes[start:end], casting="unsafe")
            np.matmul(block, query, out=out[start:end])
        out *= self.scales
        return out


def empty(dims: int) -> Codes:
    return Codes(np.zeros((0, dims), dtype=np.int16), np.zeros(0, dtype=np.float32))


def quantize(matrix: Vectors) -> Codes:
    """The codes of float32 ``matrix`` (rows, dims)."""
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.shape[0] == 0 or matrix.shape[1] == 0:
        return Codes(np.zeros(matrix.shape, dtype=np.int16), np.zeros(matrix.shape[0], np.float32))
    peaks = np.abs(matrix).max(axis=1)
    scales = (peaks / _LEVELS).astype(np.float32)
    divisor = np.where(peaks > 0, scales, np.float32(1.0))
    codes = np.rint(matrix / divisor[:, None]).astype(np.int16)
    return Codes(codes, scales)


def concatenate(parts: Sequence[Codes]) -> Codes:
    return Codes(
        np.concatenate([p.codes for p in parts]), np.concatenate([p.scales for p in parts])
    )
