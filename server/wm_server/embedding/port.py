"""The embedder port: texts in, one float32 vector per text out.

Recall by meaning needs vectors for stored rows (embedded off the request path: Phase 2, memory
writes, the background backfill) and for the query (on the request path, so it must be cheap
or fail fast). Every provider speaks this one protocol; the search never knows which it has.
A provider that cannot answer raises :class:`EmbedderUnavailable`; the search then degrades to
lexical ranking and says so, it never fails the call.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


class TextRole(StrEnum):
    """What a text is: some models embed a question differently from a stored passage."""

    QUERY = "query"
    PASSAGE = "passage"


class EmbedderUnavailable(Exception):
    """The embedder failed, timed out, or its breaker is open (degrade, do not fail)."""


@runtime_checkable
class Embedder(Protocol):
    @property
    def model_id(self) -> str:
        """Recorded with every stored vector: a change of model means re-embedding."""
        ...

    @property
    def dimensions(self) -> int: ...

    @property
    def relevance_floor(self) -> float:
        """The cosine below which a row found by meaning alone is noise, not a hit (each
        model's cosines live on their own scale)."""
        ...

    async def embed(self, texts: list[str], role: TextRole) -> Vectors:
        """One L2-normalized row per text, ``(len(texts), dimensions)`` float32."""
        ...

    async def close(self) -> None: ...


def normalized(vectors: Vectors) -> Vectors:
    """Rows scaled to unit length (a zero row stays zero), so a dot product is the cosine."""
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix.reshape(1, -1)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Vectors = (matrix / norms).astype(np.float32, copy=False)
    return out
