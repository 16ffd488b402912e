"""Stored embedding vectors: one per archived message and one per memory.

A vector is float32 little-endian bytes (BLOB in SQLite, bytea in PostgreSQL) with the model
that made it and its length, so a model change is seen row by row (and re-embedded in the
background) and a length that disagrees with the configured model is refused at start. The
search reads one owner's or one session's vectors and ranks them with numpy (brute force:
about 10 ms per 100,000 rows here, so no index until measurement asks for one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from wm_server.storage.statements import Write

if TYPE_CHECKING:
    from wm_server.storage.connection import Connection, Dialect

_UPSERT_MESSAGE = (
    "INSERT INTO message_vectors (sid, position, seq, model, dims, vector)"
    " VALUES (:sid, :position, :seq, :model, :dims, :vector)"
    " ON CONFLICT (sid, position) DO UPDATE SET seq = excluded.seq, model = excluded.model,"
    " dims = excluded.dims, vector = excluded.vector"
)
_UPSERT_MEMORY = (
    "INSERT INTO memory_vectors (mid, version, model, dims, vector)"
    " VALUES (:mid, :version, :model, :dims, :vector)"
    " ON CONFLICT (mid) DO UPDATE SET version = excluded.version, model = excluded.model,"
    " dims = excluded.dims, vector = excluded.vector"
)
# Archived messages whose vector is missing or was made by another model, in the archives
# not marked embedded by the model (``mark_embedded``): once everything is embedded, finding
# nothing reads the archives only, not every archived message. The messages are an archive's
# range of the messages' key (its full-text rows come only with its Phase 2's completion).
_MISSING_MESSAGES = (
    " FROM archives a JOIN messages x ON x.sid = a.sid"
    " AND x.position BETWEEN a.first_position AND a.last_position"
    " LEFT JOIN message_vectors v ON v.sid = x.sid AND v.position = x.position"
    " WHERE a.embedded_model <> :model AND (v.sid IS NULL OR v.model <> :model)"
)
# Archives not marked embedded by the model whose every message has its vector (a range of
# the vectors' key per archive).
_EMBEDDED = (
    "embedded_model <> :model AND (SELECT COUNT(*) FROM message_vectors v"
    " WHERE v.sid = archives.sid AND v.position BETWEEN archives.first_position"
    " AND archives.last_position AND v.model = :model)"
    " = archives.last_position - archives.first_position + 1"
)
# Active memories whose vector is missing, stale (an older version) or of another model.
_MISSING_MEMORIES = (
    " FROM memories m LEFT JOIN memory_vectors v ON v.mid = m.mid"
    " WHERE m.state = 'active' AND (v.mid IS NULL OR v.model <> :model OR v.version <> m.version)"
)


class VectorRepository:
    def __init__(self, conn: Connection, dialect: Dialect) -> None:
        self._conn = conn
        self._dialect = dialect

    async def store_messages(self, rows: Sequence[tuple[int, int, int, str, int, bytes]]) -> None:
        """(sid, position, seq, model, dims, vector) rows, replacing what was there; their
        archives' ``vector_version`` changes (what every replica's cache compares)."""
        if rows:
            await self._conn.many(_UPSERT_MESSAGE, rows)
            await self._conn.many(
                "UPDATE archives SET vector_version = vector_version + 1"
                " WHERE sid = :sid AND seq = :seq",
                sorted({(r[0], r[2]) for r in rows}),
            )

    async def vector_versions(self, sids: Sequence[int]) -> dict[int, dict[int, int]]:
        """{sid: {seq: vector_version}} of the sessions' archives."""
        if not sids:
            return {}
        members, values = self._dialect.in_list("sids", sids)
        rows = await self._conn.all(
            f"SELECT sid, seq, vector_version FROM archives WHERE sid {members}", values
        )
        out: dict[int, dict[int, int]] = {sid: {} for sid in sids}
        for sid, seq, version in rows:
            out[int(sid)][int(seq)] = int(version)
        return out

    async def store_memories(self, rows: Sequence[tuple[int, int, str, int, bytes]]) -> None:
        """(mid, version, model, dims, vector) rows, replacing what was there."""
        if rows:
            await self._conn.many(_UPSERT_MEMORY, rows)

    async def messages(
        self, sids: Sequence[int], only: int | None, model: str
    ) -> list[tuple[int, int, int, bytes]]:
        """(sid, seq, position, vector) of the sessions' archived messages embedded by
        ``model`` (of archive ``only`` if given)."""
        if not sids:
            return []
        members, values = self._dialect.in_list("sids", sids)
        rows = await self._conn.all(
            f"SELECT sid, seq, position, vector FROM message_vectors WHERE sid {members}"
            " AND model = :model AND (CAST(:only AS BIGINT) IS NULL OR seq = :only)",
            {"model": model, "only": only, **values},
        )
        return [(int(a), int(b), int(c), bytes(d)) for a, b, c, d in rows]

    async def unembedded_messages(self, sids: Sequence[int], only: int | None, model: str) -> int:
        """How many of the sessions' archived messages have no vector of ``model`` yet (the
        search ranks them lexically only, and says so)."""
        if not sids:
            return 0
        members, values = self._dialect.in_list("sids", sids)
        row = await self._conn.one(
            f"SELECT COUNT(*){_MISSING_MESSAGES} AND x.sid {members}"
            " AND (CAST(:only AS BIGINT) IS NULL OR a.seq = :only)",
            {"model": model, "only": only, **values},
        )
        return int(row[0]) if row else 0

    async def missing_messages(
        self, model: str, limit: int, after: tuple[int, int] = (0, 0)
    ) -> list[tuple[int, int, int]]:
        """(sid, seq, position) of archived messages to embed, in key order after ``after``
        (the caller's cursor, so a long backfill never rescans what it has done)."""
        rows = await self._conn.all(
            f"SELECT x.sid, a.seq, x.position{_MISSING_MESSAGES}"
            " AND (x.sid > :sid OR (x.sid = :sid AND x.position > :position))"
            " ORDER BY x.sid, x.position LIMIT :limit",
            {"model": model, "limit": limit, "sid": after[0], "position": after[1]},
        )
        return [(int(a), int(b), int(c)) for a, b, c in rows]

    async def missing_memories(self, model: str, limit: int) -> list[tuple[int, int, str]]:
        """(mid, version, text) of active memories to embed."""
        rows = await self._conn.all(
            f"SELECT m.mid, m.version, m.text{_MISSING_MEMORIES} ORDER BY m.mid LIMIT :limit",
            {"model": model, "limit": limit},
        )
        return [(int(a), int(b), str(c)) for a, b, c in rows]

    async def mark_embedded(self, model: str, sid: int | None = None) -> int:
        """Mark the archives (of session ``sid`` if given) whose every message has a vector
        of ``model``; how many were marked. A model change unmarks them all at once (they
        name the old one)."""
        marking = self.marking_embedded(model, sid)
        return int(await self._conn.run(marking.sql, marking.params or {}))

    def marking_embedded(self, model: str, sid: int | None = None) -> Write:
        """``mark_embedded`` as a write, for a caller that needs no count."""
        # Two statements, not "(:sid IS NULL OR sid = :sid)": a prepared generic plan of
        # that would read every archive for one session's completion.
        if sid is None:
            return Write(
                f"UPDATE archives SET embedded_model = :model WHERE {_EMBEDDED}", {"model": model}
            )
        return Write(
            f"UPDATE archives SET embedded_model = :model WHERE sid = :sid AND {_EMBEDDED}",
            {"model": model, "sid": sid},
        )

    async def missing_count(self, model: str) -> int:
        """Rows of both kinds still to embed with ``model`` (the backfill's progress): the
        messages of the archives not marked embedded (an upper bound while one is half
        done), from the archives alone, and the memories without a current vector."""
        params: dict[str, Any] = {"model": model}
        a = await self._conn.one(
            "SELECT COALESCE(SUM(last_position - first_position + 1), 0) FROM archives"
            " WHERE embedded_model <> :model",
            params,
        )
        b = await self._conn.one(f"SELECT COUNT(*){_MISSING_MEMORIES}", params)
        return (int(a[0]) if a else 0) + (int(b[0]) if b else 0)

    async def memories(self, mids: Sequence[int], model: str) -> list[tuple[int, bytes]]:
        """(mid, vector) of these memories' current versions embedded by ``model``."""
        if not mids:
            return []
        members, values = self._dialect.in_list("mids", mids)
        rows = await self._conn.all(
            "SELECT v.mid, v.vector FROM memory_vectors v JOIN memories m ON m.mid = v.mid"
            f" WHERE v.mid {members} AND v.model = :model AND v.version = m.version",
            {"model": model, **values},
        )
        return [(int(a), bytes(b)) for a, b in rows]

    async def owner_memories(self, tenant: str, owner: str, model: str) -> list[tuple[int, bytes]]:
        """(mid, vector) of the owner's active memories whose current version ``model``
        embedded."""
        rows = await self._conn.all(
            "SELECT v.mid, v.vector FROM memory_vectors v JOIN memories m ON m.mid = v.mid"
            " WHERE m.tenant = :tenant AND m.owner = :owner AND m.state = 'active'"
            " AND v.model = :model AND v.version = m.version",
            {"tenant": tenant, "owner": owner, "model": model},
        )
        return [(int(a), bytes(b)) for a, b in rows]

    async def unembedded_memories(self, tenant: str, owner: str, model: str) -> int:
        """How many of the owner's active memories have no current vector of ``model``."""
        row = await self._conn.one(
            f"SELECT COUNT(*){_MISSING_MEMORIES} AND m.tenant = :tenant AND m.owner = :owner",
            {"tenant": tenant, "owner": owner, "model": model},
        )
        return int(row[0]) if row else 0

    async def wrong_dimensions(self, model: str, dims: int) -> int:
        """Stored vectors of ``model`` whose length is not ``dims`` (refused at start)."""
        params = {"model": model, "dims": dims}
        total = 0
        for table in ("message_vectors", "memory_vectors"):
            row = await self._conn.one(
                f"SELECT COUNT(*) FROM {table} WHERE model = :model AND dims <> :dims", params
            )
            total += int(row[0]) if row else 0
        return total
