"""The recall index's int16 vectors (wm_server/embedding/quantized.py): their cosine is the
float32 cosine to within 1e-4, across the blocks it converts at a time; rows without a vector
score 0; rows taken and joined stay aligned with their scales."""

from __future__ import annotations

import numpy as np

from wm_server.embedding.quantized import BLOCK, Codes, concatenate, empty, quantize


def _unit(rows: int, dims: int, seed: int = 3) -> np.ndarray:
    matrix = np.random.default_rng(seed).standard_normal((rows, dims)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def test_cosine_is_the_float32_cosine_across_blocks() -> None:
    matrix = _unit(2 * BLOCK + 17, 64)
    query = _unit(1, 64, seed=4)[0]
    codes = quantize(matrix)
    assert (
        codes.codes.dtype == np.int16 and codes.nbytes == matrix.nbytes // 2 + 4 * matrix.shape[0]
    )
    exact = matrix @ query
    coded = codes.cosine(query)
    assert coded.dtype == np.float32 and coded.shape == exact.shape
    assert float(np.abs(coded - exact).max()) < 1e-4
    assert list(np.argsort(-coded)[:10]) == list(np.argsort(-exact)[:10])


def test_rows_without_a_vector_score_zero() -> None:
    matrix = _unit(3, 8)
    matrix[1] = 0.0
    codes = quantize(matrix)
    assert codes.scales[1] == 0 and not codes.codes[1].any()
    scores = codes.cosine(matrix[0])
    assert scores[1] == 0 and abs(scores[0] - 1.0) < 1e-4


def test_taken_and_joined_rows_keep_their_scales() -> None:
    matrix = _unit(6, 8) * np.array([[1], [2], [3], [4], [5], [6]], dtype=np.float32)
    codes = quantize(matrix)
    keep = np.array([True, False, True, False, False, True])
    joined = concatenate([codes.take(keep), codes.take(~keep)])
    order = np.concatenate([np.flatnonzero(keep), np.flatnonzero(~keep)])
    query = _unit(1, 8, seed=9)[0]
    assert np.allclose(joined.cosine(query), matrix[order] @ query, atol=1e-3)


def test_no_rows_and_no_dimensions() -> None:
    assert empty(8).cosine(np.ones(8, dtype=np.float32)).shape == (0,)
    none = Codes(np.zeros((3, 0), dtype=np.int16), np.zeros(3, dtype=np.float32))
    assert list(none.cosine(np.zeros(0, dtype=np.float32))) == [0.0, 0.0, 0.0]
    assert quantize(np.zeros((0, 4), dtype=np.float32)).rows == 0
