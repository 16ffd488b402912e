"""Row access for a memory's lifecycle (issue 35): supersession links and validity, expiry,
and what consolidation reads. The columns are the ``memories`` table's (SQLite migration 11,
PostgreSQL 12); when a memory expires is ``memory_expiry``'s rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from wm_server.storage.memory_expiry import Retention, alive, expiry
from wm_server.storage.repository import Repository


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """A memory's lifecycle columns."""

    supersedes: tuple[str, ...] = ()
    superseded_by: str = ""
    valid_until: float | None = None
    expire_time: float | None = None


NO_LIFECYCLE = Lifecycle()


@dataclass(frozen=True, slots=True)
class Candidate:
    """An active memory as consolidation compares it."""

    mid: int
    memory_id: str
    type: str
    text: str
    search_text: str
    version: int
    create_time: float


class LifecycleRepository(Repository):
    async def of(self, mids: Sequence[int]) -> dict[int, Lifecycle]:
        if not mids:
            return {}
        members, values = self._dialect.in_list("mids", mids)
        rows = await self._conn.all(
            "SELECT mid, supersedes, superseded_by, valid_until, expire_time FROM memories"
            f" WHERE mid {members}",
            values,
        )
        return {
            int(mid): Lifecycle(
                tuple(str(before).split()),
                str(after),
                None if until is None else float(until),
                None if expire is None else float(expire),
            )
            for mid, before, after, until, expire in rows
        }

    async def set_expiry(self, mid: int, expire_time: float | None) -> None:
        await self._conn.run(
            "UPDATE memories SET expire_time = :expire WHERE mid = :mid",
            {"expire": expire_time, "mid": mid},
        )

    async def link(self, mid: int, supersedes: Sequence[str]) -> None:
        """Record the memories ``mid`` replaces (added to those it already names)."""
        row = await self._conn.one("SELECT supersedes FROM memories WHERE mid = :mid", {"mid": mid})
        known = str(row[0]).split() if row else []
        merged = [*known, *(s for s in supersedes if s not in known)]
        await self._conn.run(
            "UPDATE memories SET supersedes = :ids WHERE mid = :mid",
            {"ids": " ".join(merged), "mid": mid},
        )

    async def supersede(self, mid: int, by: str, until: float, now: float) -> bool:
        """Mark ``mid`` superseded by memory ``by``, holding until ``until``; False when it
        was no longer active (a concurrent writer superseded or retired it first)."""
        changed = await self._conn.run(
            "UPDATE memories SET state = 'superseded', superseded_by = :by,"
            " valid_until = :until, update_time = :now WHERE mid = :mid AND state = 'active'",
            {"by": by, "until": until, "now": now, "mid": mid},
        )
        return changed == 1

    async def expired(self, at: float, retention: Retention, limit: int) -> list[int]:
        """Up to ``limit`` memories (any state, any tenant) expired at ``at``."""
        when, params = expiry(retention)
        rows = await self._conn.all(
            f"SELECT m.mid FROM memories m WHERE {when} <= :at ORDER BY m.mid LIMIT :limit",
            {**params, "at": at, "limit": limit},
        )
        return [int(r[0]) for r in rows]

    async def owners_changed(
        self, since: float, after: tuple[str, str], limit: int
    ) -> list[tuple[str, str]]:
        """(tenant, owner) of the active memories written at or after ``since``, in order,
        from the first after ``after``."""
        rows = await self._conn.all(
            "SELECT DISTINCT tenant, owner FROM memories WHERE state = 'active'"
            " AND update_time >= :since AND (tenant > :tenant OR (tenant = :tenant"
            " AND owner > :owner)) ORDER BY tenant, owner LIMIT :limit",
            {"since": since, "tenant": after[0], "owner": after[1], "limit": limit},
        )
        return [(str(t), str(o)) for t, o in rows]

    async def states(self, mids: Sequence[int]) -> dict[int, tuple[str, int]]:
        """(state, version) of each memory still stored."""
        if not mids:
            return {}
        members, values = self._dialect.in_list("mids", mids)
        rows = await self._conn.all(
            f"SELECT mid, state, version FROM memories WHERE mid {members}", values
        )
        return {int(m): (str(s), int(v)) for m, s, v in rows}

    async def candidates(
        self, tenant: str, owner: str, at: float, retention: Retention, limit: int
    ) -> list[Candidate]:
        """The owner's newest ``limit`` active, unexpired memories, oldest first."""
        condition, params = alive(at, retention)
        rows = await self._conn.all(
            "SELECT m.mid, m.memory_id, m.type, m.text, m.search_text, m.version,"
            " m.create_time FROM memories m WHERE m.tenant = :tenant AND m.owner = :owner"
            f" AND m.state = 'active' AND {condition} ORDER BY m.mid DESC LIMIT :limit",
            {**params, "tenant": tenant, "owner": owner, "limit": limit},
        )
        found = [
            Candidate(int(a), str(b), str(c), str(d), str(e), int(f), float(g))
            for a, b, c, d, e, f, g in rows
        ]
        return found[::-1]

    async def next_version(self, mid: int, version: int, now: float) -> None:
        """Advance the version with the content unchanged (a decision was recorded)."""
        await self._conn.run(
            "UPDATE memories SET version = :version, update_time = :now WHERE mid = :mid",
            {"version": version, "now": now, "mid": mid},
        )

    async def mids_of_owner(self, tenant: str, owner: str, limit: int) -> list[int]:
        """Up to ``limit`` memories of an owner, in any state (PurgeUserData deletes them)."""
        rows = await self._conn.all(
            "SELECT mid FROM memories WHERE tenant = :tenant AND owner = :owner"
            " ORDER BY mid LIMIT :limit",
            {"tenant": tenant, "owner": owner, "limit": limit},
        )
        return [int(r[0]) for r in rows]
