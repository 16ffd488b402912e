"""What the in-process BM25 index (``services/lexical_index.py``) reads: which sessions'
archives changed, from the archives alone, and the analyzed rows of the archives that did.

An archive's ``text_version`` changes with every write of its rows to the full-text index
(``ArchiveRepository.indexed``: Phase 2's completion; a re-index at start), and is 0 until
the first (the search then reads its messages), so a query learns what it must read again
with one aggregate over the searched sessions' archives (one row per commit, not per
message).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from wm_server.search.bm25 import Row

if TYPE_CHECKING:
    from wm_server.storage.connection import Connection, Dialect

# (archives, newest, sum of their versions) of a session: changes when any archive does.
State = tuple[int, int, int]


class LexicalRowRepository:
    def __init__(self, conn: Connection, dialect: Dialect) -> None:
        self._conn = conn
        self._dialect = dialect

    async def states(self, sids: Sequence[int]) -> dict[int, State]:
        """Each session's ``State`` (sessions without archives are absent)."""
        if not sids:
            return {}
        members, values = self._dialect.in_list("sids", sids)
        rows = await self._conn.all(
            "SELECT sid, COUNT(*), MAX(seq), SUM(text_version) FROM archives"
            f" WHERE sid {members} GROUP BY sid",
            values,
        )
        return {int(a): (int(b), int(c), int(d)) for a, b, c, d in rows}

    async def recent(self, limit: int) -> list[int]:
        """The ``limit`` sessions that archived last, newest first (what a start warms)."""
        rows = await self._conn.all(
            "SELECT sid FROM archives GROUP BY sid ORDER BY MAX(create_time) DESC LIMIT :limit",
            {"limit": limit},
        )
        return [int(r[0]) for r in rows]

    async def versions(self, sid: int) -> dict[int, int]:
        """{seq: text_version} of the session's archives."""
        rows = await self._conn.all(
            "SELECT seq, text_version FROM archives WHERE sid = :sid", {"sid": sid}
        )
        return {int(a): int(b) for a, b in rows}

    async def rows(self, sid: int, seqs: Sequence[int] | None) -> list[Row]:
        """The session's analyzed archived rows (of archives ``seqs`` if given)."""
        params: dict[str, Any] = {"sid": sid}
        where = ""
        if seqs is not None:
            if not seqs:
                return []
            members, values = self._dialect.in_list("seqs", seqs)
            where = f" AND x.seq {members}"
            params.update(values)
        rows = await self._conn.all(
            "SELECT x.seq, x.position, x.archive_time,"
            f" {self._dialect.text_index.stored_terms()}, x.terms FROM archived_texts x"
            f" WHERE x.sid = :sid{where}",
            params,
        )
        return [Row(int(a), int(b), float(c), str(d or ""), int(e)) for a, b, c, d, e in rows]
