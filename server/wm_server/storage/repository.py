"""What every repository is: one connection and the dialect, and the fragments several table
families share (a key above every key, the "may contain" filter of literal search)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from wm_server.storage.connection import Connection, Dialect
    from wm_server.storage.statements import Read

T = TypeVar("T")


LAST = 2**62  # "no upper bound" for positions and keys


def may_contain(dialect: Dialect, column: str, param: str) -> str:
    """The row may hold the folded ASCII literal ``param``: its ASCII lower case has it, or it
    has a character beyond ASCII, which Unicode folding could turn into it ("ﬁ", "ß", "Ｆ");
    those rows are decided by the caller, on folded text."""
    contains = dialect.contains.format(column=column, param=param)
    return f"({contains} OR {dialect.non_ascii.format(column=column)})"


class Repository:
    def __init__(self, conn: Connection, dialect: Dialect) -> None:
        self._conn = conn
        self._dialect = dialect

    async def _read(self, read: Read[T]) -> T:
        """A read on its own (``UnitOfWork.read`` sends several together)."""
        return read.answer(await self._conn.all(read.sql, read.params))

    def terms(self, query: str) -> list[str]:
        """The analyzed terms a ranked query of this database searches for."""
        return self._dialect.text_index.terms(query)
