"""What the repositories hand to a connection: rows, named parameters, and writes that an
engine may send together (``Connection.chain``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Row = tuple[Any, ...]
Params = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Write:
    """A data-modifying statement: one execution with ``params``, or, with ``rows``, an
    ``INSERT … VALUES (:a, :b, …)`` run once per row (each row holds the values of the
    names in order)."""

    sql: str
    params: Params | None = None
    rows: Sequence[Row] | None = None
