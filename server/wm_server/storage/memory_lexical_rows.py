"""What the in-process index of an owner's memories (``services/memory_index.py``) reads: the
owner's change marker, and the rows written since a marker, with their analyzed terms and
their current vector.

Every write of a memory (insert, rewrite, retire, supersede, expiry, any UPDATE) and of its
vector stamps the row with a new ``change_version`` and records it in the owner's row of
``memory_owners`` with their count of memories; a delete bumps the owner's version and count
(SQLite migration 16, PostgreSQL 17: triggers, so no writer can forget). So a search learns
with one point read whether anything changed, and reads only the rows written since; rows
deleted since show as a count that disagrees, and only then are the owner's keys read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wm_server.storage.connection import Connection, Dialect

# (version of the owner's latest write, number of their memories).
OwnerState = tuple[int, int]


@dataclass(frozen=True, slots=True)
class IndexedMemory:
    """One memory as the index holds it: what a filter and the rankings need, no text."""

    mid: int
    state: str
    type: str
    time: float  # COALESCE(event_time, record_time): what a search's time range filters on
    expire_time: float | None
    create_time: float
    terms: str  # the analyzer's terms, space-separated (``memories.search_text``)
    vector: bytes | None  # of the index's model and the memory's current version


class MemoryIndexRowRepository:
    def __init__(self, conn: Connection, dialect: Dialect) -> None:
        self._conn = conn
        self._dialect = dialect

    async def state(self, tenant: str, owner: str) -> OwnerState | None:
        """The owner's ``OwnerState``; None when they have no memory."""
        row = await self._conn.one(
            "SELECT version, memories FROM memory_owners WHERE tenant = :tenant AND owner = :owner",
            {"tenant": tenant, "owner": owner},
        )
        return (int(row[0]), int(row[1])) if row else None

    async def written_since(
        self,
        tenant: str,
        owner: str,
        after: int,
        model: str | None,
        after_mid: int = 0,
        limit: int = 1 << 62,
    ) -> list[IndexedMemory]:
        """The owner's memories (any state) written after version ``after``, with the vector
        of ``model`` of their current version (None: not embedded yet, or no model): the
        first ``limit`` in key order after ``after_mid`` (a page: the caller holds a page's
        vectors at a time, not every one of 100,000 as bytes at once)."""
        vector = "v.vector" if model is not None else "NULL"
        join = (
            " LEFT JOIN memory_vectors v ON v.mid = m.mid AND v.model = :model"
            " AND v.version = m.version"
            if model is not None
            else ""
        )
        rows = await self._conn.all(
            "SELECT m.mid, m.state, m.type, COALESCE(m.event_time, m.record_time),"
            f" m.expire_time, m.create_time, m.search_text, {vector} FROM memories m{join}"
            " WHERE m.tenant = :tenant AND m.owner = :owner AND m.change_version > :after"
            " AND m.mid > :after_mid ORDER BY m.mid LIMIT :limit",
            {
                "tenant": tenant,
                "owner": owner,
                "after": after,
                "model": model,
                "after_mid": after_mid,
                "limit": limit,
            },
        )
        return [
            IndexedMemory(
                int(a), str(b), str(c), float(d), None if e is None else float(e), float(f),
                str(g or ""), None if h is None else bytes(h),
            )
            for a, b, c, d, e, f, g, h in rows
        ]  # fmt: skip

    async def mids(self, tenant: str, owner: str) -> list[int]:
        """The keys of every memory of the owner (to see which were deleted)."""
        rows = await self._conn.all(
            "SELECT mid FROM memories WHERE tenant = :tenant AND owner = :owner",
            {"tenant": tenant, "owner": owner},
        )
        return [int(r[0]) for r in rows]

    async def recent_owners(self, limit: int) -> list[tuple[str, str]]:
        """(tenant, owner) of the ``limit`` owners whose memories were written last (the
        versions come from one clock), newest first: what a start warms first."""
        rows = await self._conn.all(
            "SELECT tenant, owner FROM memory_owners ORDER BY version DESC LIMIT :limit",
            {"limit": limit},
        )
        return [(str(t), str(o)) for t, o in rows]
