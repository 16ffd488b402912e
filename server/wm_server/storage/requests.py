"""Remembered requests (idempotency) and the server's shared secrets."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wm_server.storage.repository import Repository
from wm_server.storage.sessions import DELETED_TENANT

if TYPE_CHECKING:
    pass


@dataclass(frozen=True, slots=True)
class RequestRow:
    """A remembered request: ``live`` is False once the session it belongs to is deleted."""

    fingerprint: str
    outcome: str
    live: bool


class RequestRepository(Repository):
    async def lock(self, key: str) -> None:
        """Serialize requests with this key across replicas until commit."""
        if self._dialect.lock_key is not None:
            await self._conn.one(self._dialect.lock_key, {"key": key})

    async def find(self, key: str) -> RequestRow | None:
        row = await self._conn.one(
            "SELECT r.fingerprint, r.outcome, (r.sid IS NULL OR EXISTS (SELECT 1 FROM sessions s"
            " WHERE s.sid = r.sid AND s.tenant <> :gone)) FROM requests r WHERE r.request_key = :key",
            {"key": key, "gone": DELETED_TENANT},
        )
        return RequestRow(str(row[0]), str(row[1]), bool(row[2])) if row else None

    async def remember(
        self,
        key: str,
        sid: int | None,
        fingerprint: str,
        outcome: dict[str, Any],
        now: float,
    ) -> None:
        """Store (or replace a stale record of) a request's outcome."""
        await self._conn.run(
            "INSERT INTO requests (request_key, sid, fingerprint, outcome, create_time)"
            " VALUES (:key, :sid, :fingerprint, :outcome, :now) ON CONFLICT (request_key)"
            " DO UPDATE SET sid = excluded.sid, fingerprint = excluded.fingerprint,"
            " outcome = excluded.outcome, create_time = excluded.create_time",
            {
                "key": key,
                "sid": sid,
                "fingerprint": fingerprint,
                "outcome": json.dumps(outcome),
                "now": now,
            },
        )

    async def prune(self, before: float, limit: int) -> int:
        """Forget up to ``limit`` records older than ``before``."""
        return await self._conn.run(
            "DELETE FROM requests WHERE request_key IN (SELECT request_key FROM requests"
            " WHERE create_time < :before LIMIT :limit)",
            {"before": before, "limit": limit},
        )


class SecretRepository(Repository):
    async def get_or_create(self, name: str, candidate: str) -> str:
        """The stored value of ``name``; ``candidate`` becomes it if there is none yet (the
        first of several replicas starting at once wins, the others read its value)."""
        await self._conn.run(
            "INSERT INTO server_secrets (name, value) VALUES (:name, :value)"
            " ON CONFLICT (name) DO NOTHING",
            {"name": name, "value": candidate},
        )
        row = await self._conn.one(
            "SELECT value FROM server_secrets WHERE name = :name", {"name": name}
        )
        assert row is not None  # inserted above or by the winner of the race
        return str(row[0])
