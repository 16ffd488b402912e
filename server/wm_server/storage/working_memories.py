"""Working-memory versions and the pending items the guards refused."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from wm_core import (
    PendingItem,
)
from wm_server.storage.records import (
    WorkingMemoryRecord,
)
from wm_server.storage.repository import Repository
from wm_server.storage.statements import Read, Row, Write

if TYPE_CHECKING:
    from wm_server.storage.sessions import SessionRow

    pass


_WM = "version, document, archive_seq, commit_id, estimated_tokens, create_time, decisions_json"


class WorkingMemoryRepository(Repository):
    def inserting(
        self,
        sid: int,
        version: int,
        document: str,
        *,
        archive_seq: int | None,
        covered_seq: int,
        commit_id: str | None,
        tokens: int,
        now: float,
        decisions_json: str = "[]",
    ) -> Write:
        """A new version, with the guard decisions of the change that made it (JSON)."""
        return Write(
            "INSERT INTO working_memories (sid, version, document, archive_seq, covered_seq,"
            " commit_id, estimated_tokens, create_time, decisions_json) VALUES (:sid, :version,"
            " :document, :seq, :covered, :commit_id, :tokens, :now, :decisions)",
            {
                "sid": sid,
                "version": version,
                "document": document,
                "seq": archive_seq,
                "covered": covered_seq,
                "commit_id": commit_id,
                "tokens": tokens,
                "now": now,
                "decisions": decisions_json,
            },
        )

    async def get(self, session: SessionRow, version: int) -> WorkingMemoryRecord | None:
        """The given version (none below 1)."""
        record = session.record
        return await self._read(
            self.getting(session.sid, record.tenant, record.session_id, version)
        )

    def getting(
        self, sid: int, tenant: str, session_id: str, version: int
    ) -> Read[WorkingMemoryRecord | None]:
        """``get`` as a read, of the session ``sid`` named ``tenant``/``session_id``."""

        def answer(rows: list[Row]) -> WorkingMemoryRecord | None:
            if not rows:
                return None
            version, document, archive_seq, commit_id, tokens, created, decisions = rows[0]
            return WorkingMemoryRecord(
                tenant, session_id, int(version), document, archive_seq, commit_id,
                int(tokens), created, decisions,
            )  # fmt: skip

        return Read(
            f"SELECT {_WM} FROM working_memories WHERE sid = :sid AND version = :version",
            {"sid": sid, "version": version},
            answer,
        )

    async def covered_seq(self, sid: int, version: int) -> int:
        """The highest archive number the version covers (0 for none, or no version)."""
        row = await self._conn.one(
            "SELECT covered_seq FROM working_memories WHERE sid = :sid AND version = :version",
            {"sid": sid, "version": version},
        )
        return int(row[0]) if row else 0


class PendingItemRepository(Repository):
    """A session's pending items (wm_core.carry_pending decides them), in order."""

    async def of_session(self, sid: int) -> list[PendingItem]:
        return await self._read(self.reading(sid))

    def reading(self, sid: int) -> Read[list[PendingItem]]:
        """``of_session`` as a read."""
        with_commits = self._with_commits(sid)
        return Read(
            with_commits.sql,
            with_commits.params,
            lambda rows: [item for item, _ in with_commits.answer(rows)],
        )

    async def with_commits(self, sid: int) -> list[tuple[PendingItem, str | None]]:
        """The items and the commit whose archive refused each (None: no archive, as for
        the overflow item)."""
        return await self._read(self._with_commits(sid))

    def _with_commits(self, sid: int) -> Read[list[tuple[PendingItem, str | None]]]:
        return Read(
            "SELECT p.section, p.item, p.source, p.archive_seq, a.commit_id FROM pending_items p"
            " LEFT JOIN archives a ON a.sid = p.sid AND a.seq = p.archive_seq"
            " WHERE p.sid = :sid ORDER BY p.batch, p.position",
            {"sid": sid},
            lambda rows: [
                (PendingItem(str(a), str(b), str(c), int(d)), str(e) if e is not None else None)
                for a, b, c, d, e in rows
            ],
        )

    def replacing(self, sid: int, batch: int, items: Sequence[PendingItem]) -> list[Write]:
        """The writes that make ``items`` the session's pending items; ``batch`` (the archive
        of a completion, minus the version for ApplyWorkingMemoryOps) differs from every
        earlier one, so the new keys never collide
        with the rows deleted in the same statement."""
        writes = [Write("DELETE FROM pending_items WHERE sid = :sid", {"sid": sid})]
        if items:
            writes.append(
                Write(
                    "INSERT INTO pending_items (sid, batch, position, section, item, source,"
                    " archive_seq) VALUES (:sid, :batch, :position, :section, :item, :source,"
                    " :seq)",
                    rows=[
                        (sid, batch, n, i.section, i.text, i.source, i.archive_seq)
                        for n, i in enumerate(items)
                    ],
                )
            )
        return writes
