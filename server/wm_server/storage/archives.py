"""Archives: the ranges of archived messages, their full-text rows and the SQL form of the
ranked search."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from wm_server.search.bm25 import BM25_B, BM25_K1
from wm_server.storage.codec import body_of, message_body
from wm_server.storage.messages import MESSAGE_COLUMNS, stored_message
from wm_server.storage.records import SearchRow, StoredMessage
from wm_server.storage.repository import Repository
from wm_server.storage.statements import Read, Write
from wm_server.storage.text_index import TextIndex, term_count

if TYPE_CHECKING:
    pass


def search_rows_of(
    index: TextIndex, archive_time: float, messages: Sequence[StoredMessage]
) -> list[SearchRow]:
    """The full-text rows of an archive's ``messages`` already read (``search_rows`` reads
    them from their rows): the same body, analyzed by the same ``index``."""
    return [
        SearchRow(m.position, archive_time, index.indexed(body_of(m.message))) for m in messages
    ]


class ArchiveRepository(Repository):
    async def insert(
        self,
        sid: int,
        seq: int,
        commit_id: str,
        *,
        message_count: int,
        tokens: int,
        first: int,
        last: int,
        now: float,
    ) -> None:
        await self._conn.run(
            "INSERT INTO archives (sid, seq, commit_id, message_count, tokens, first_position,"
            " last_position, create_time) VALUES (:sid, :seq, :commit_id, :count, :tokens,"
            " :first, :last, :now)",
            {
                "sid": sid,
                "seq": seq,
                "commit_id": commit_id,
                "count": message_count,
                "tokens": tokens,
                "first": first,
                "last": last,
                "now": now,
            },
        )

    async def bounds(self, sid: int, seq: int) -> tuple[int, int] | None:
        row = await self._conn.one(
            "SELECT first_position, last_position FROM archives WHERE sid = :sid AND seq = :seq",
            {"sid": sid, "seq": seq},
        )
        return (int(row[0]), int(row[1])) if row else None

    def placements(self, sid: int, seqs: Sequence[int]) -> Read[dict[int, tuple[int, int, float]]]:
        """``bounds`` of the archives ``seqs`` that exist and the time each was made (what
        its search rows carry), by seq in order."""
        members, values = self._dialect.in_list("seqs", seqs)
        return Read(
            "SELECT seq, first_position, last_position, create_time FROM archives"
            f" WHERE sid = :sid AND seq {members} ORDER BY seq",
            {"sid": sid, **values},
            lambda rows: {int(s): (int(a), int(b), float(t)) for s, a, b, t in rows},
        )

    async def listing(self, sid: int, only: int | None) -> list[tuple[int, int, int]]:
        """(seq, first, last) of the session's archives (or just ``only``), newest first."""
        rows = await self._conn.all(
            "SELECT seq, first_position, last_position FROM archives WHERE sid = :sid"
            " AND (CAST(:only AS BIGINT) IS NULL OR seq = :only) ORDER BY seq DESC",
            {"sid": sid, "only": only},
        )
        return [(int(s), int(f), int(last)) for s, f, last in rows]

    async def search_rows(self, sid: int, seq: int, first: int, last: int) -> list[SearchRow]:
        """The full-text rows of archive ``seq``'s messages at positions first..last: their
        text analyzed here (``TextIndex.indexed``), the one rule of what a row holds, read
        by Phase 2 before it writes them (``indexing``) and by the search for an archive
        whose rows are not written yet (``LexicalRowRepository.unindexed``)."""
        rows = await self._conn.all(
            "SELECT m.position, a.create_time, m.message_id, m.role, m.parts_json"
            " FROM messages m JOIN archives a ON a.sid = m.sid AND a.seq = :seq"
            " WHERE m.sid = :sid AND m.position BETWEEN :first AND :last ORDER BY m.position",
            {"sid": sid, "seq": seq, "first": first, "last": last},
        )
        index = self._dialect.text_index
        return [
            SearchRow(int(position), float(time), index.indexed(message_body(mid, role, parts)))
            for position, time, mid, role, parts in rows
        ]

    def indexing(self, sid: int, seq: int, rows: Sequence[SearchRow]) -> list[Write]:
        """Put ``rows`` of archive ``seq`` into the archive's full-text index, in place of
        what an earlier attempt put at their positions (live messages are never indexed).
        The archive counts as indexed only once ``indexed`` is written too."""
        value = self._dialect.text_index.value("archived", ":body")
        assert value is not None  # the archive index always has its own column
        if not rows:
            return []
        chunk = {"sid": sid, "seq": seq, "first": rows[0].position, "last": rows[-1].position}
        return [
            Write(
                "DELETE FROM archived_texts WHERE sid = :sid AND seq = :seq"
                " AND position BETWEEN :first AND :last",
                chunk,
            ),
            Write(
                f"INSERT INTO archived_texts (sid, seq, position, archive_time, terms, {value[0]})"
                f" VALUES (:sid, :seq, :position, :time, :terms, {value[1]})",
                rows=[
                    (sid, seq, r.position, r.archive_time, term_count(r.body), r.body) for r in rows
                ],
            ),
        ]

    def indexed(self, sid: int, seq: int, *, abstract: str | None = None) -> Write:
        """Mark archive ``seq``'s full-text rows written: its ``text_version`` leaves 0 (not
        indexed: the search reads its messages) and changes, so the in-process BM25 index
        reads the archive again (services/lexical_index.py); with ``abstract``, that is set
        by the same statement (``setting_abstract``: the completion's one write of the row)."""
        if abstract is None:
            return Write(
                "UPDATE archives SET text_version = text_version + 1"
                " WHERE sid = :sid AND seq = :seq",
                {"sid": sid, "seq": seq},
            )
        return Write(
            "UPDATE archives SET text_version = text_version + 1, abstract = :abstract"
            " WHERE sid = :sid AND seq = :seq",
            {"sid": sid, "seq": seq, "abstract": abstract},
        )

    async def bm25_ranked(
        self, sids: Sequence[int], terms: list[str], only: int | None, limit: int
    ) -> tuple[list[tuple[int, int, StoredMessage, float]], int]:
        """(sid, seq, message, score) of the best ``limit`` archived messages of ``sids`` (of
        archive ``only`` if given) with any of ``terms``, best first, and how many match:
        the SQL statement of what the search computes in process
        (``services/lexical_index.py``, which the tests compare with it; this reads every
        posting of every term: 0.5-0.7 s for common words at 100,000 rows of one owner).

        One statement, the same on both engines: BM25 (``BM25_K1``, ``BM25_B``, idf
        ln(1 + (N - df + 0.5) / (df + 0.5))) computed from the engine's postings
        (``TextIndex.postings``) with statistics of the searched sessions only, so rows of
        other owners or tenants never change a ranking and both engines rank alike; the
        messages and the count come with it."""
        if not sids or not terms:
            return [], 0
        index = self._dialect.text_index
        members, values = self._dialect.in_list("sids", sids)
        term_list, term_values = self._dialect.in_list("terms", terms)
        where = f"x.sid {members} AND (CAST(:only AS BIGINT) IS NULL OR x.seq = :only)"
        rows = await self._conn.all(
            f"WITH tf AS ({index.postings(where, term_list)}),"
            " df AS (SELECT term, COUNT(*) AS df FROM tf GROUP BY term),"
            " stats AS (SELECT COUNT(*) AS n, AVG(x.terms) AS avgdl FROM archived_texts x"
            f" WHERE {where}),"
            " scored AS (SELECT tf.id, SUM(ln(1 + (st.n - df.df + 0.5) / (df.df + 0.5))"
            f" * tf.tf * {BM25_K1 + 1} / (tf.tf + {BM25_K1} * ({1 - BM25_B}"
            f" + {BM25_B} * x.terms / CASE WHEN st.avgdl > 0 THEN st.avgdl ELSE 1 END)))"
            " AS score FROM tf JOIN df ON df.term = tf.term"
            " JOIN archived_texts x ON x.id = tf.id CROSS JOIN stats st GROUP BY tf.id)"
            " SELECT x.sid, x.seq, sc.score, COUNT(*) OVER (),"
            f" {', '.join('m.' + c for c in MESSAGE_COLUMNS.split(', '))}"
            " FROM scored sc JOIN archived_texts x ON x.id = sc.id"
            " JOIN messages m ON m.sid = x.sid AND m.position = x.position"
            " ORDER BY sc.score DESC, x.archive_time DESC, x.position DESC LIMIT :limit",
            {"only": only, "limit": limit, "query": index.query(terms), **values, **term_values},
        )
        total = int(rows[0][3]) if rows else 0
        return [(int(r[0]), int(r[1]), stored_message(r[4:]), float(r[2])) for r in rows], total

    def setting_abstract(self, sid: int, seq: int, abstract: str) -> Write:
        return Write(
            "UPDATE archives SET abstract = :abstract WHERE sid = :sid AND seq = :seq",
            {"abstract": abstract, "sid": sid, "seq": seq},
        )
