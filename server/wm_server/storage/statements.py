"""What the repositories hand to a connection: rows, named parameters, and writes and reads
that an engine may send together (``Connection.chain``, ``Connection.fetch``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

Row = tuple[Any, ...]
Params = Mapping[str, Any]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Write:
    """A data-modifying statement: one execution with ``params``, or, with ``rows``, an
    ``INSERT … VALUES (:a, :b, …)`` run once per row (each row holds the values of the
    names in order)."""

    sql: str
    params: Params | None = None
    rows: Sequence[Row] | None = None


@dataclass(frozen=True, slots=True)
class Read(Generic[T]):
    """A SELECT and what its rows mean (``answer``): reads that do not depend on each other
    go together (``UnitOfWork.read``), in one round trip where each statement is one."""

    sql: str
    params: Params
    answer: Callable[[list[Row]], T]
