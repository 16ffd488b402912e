"""Reading the working memory, and applying ops that a runtime's own model produced.

Client-supplied ops pass through exactly the guards Phase 2 uses (``wm_core.merge``), so a
runtime that runs its own model cannot lose more than the service's model could.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from wm_core import (
    DEFAULT_LIMITS,
    MAX_PENDING_TOKENS,
    SECTIONS,
    Decision,
    Guard,
    SectionOp,
    WmLimits,
    carry_pending,
    estimate_tokens,
    merge,
    render_document,
)
from wm_server.errors import Aborted, NotFound, invalid
from wm_server.services import idempotency, validation
from wm_server.services.sessions import find_session, locked_session
from wm_server.services.transactions import retry_conflicts
from wm_server.storage.codec import decisions_json
from wm_server.storage.database import Database
from wm_server.storage.records import PendingItemView, WorkingMemoryRecord, WorkingMemoryView


class WorkingMemoryService:
    def __init__(
        self,
        database: Database,
        limits: WmLimits = DEFAULT_LIMITS,
        *,
        max_pending_items: int = 30,
        max_pending_tokens: int = MAX_PENDING_TOKENS,
    ) -> None:
        self._db = database
        self._limits = limits  # a client's ops are bounded like a model's
        # The bound Phase 2 keeps the pending items within (wm_core.carry_pending).
        self._pending_bound = (max_pending_items, max_pending_tokens)

    async def get(self, session_id: str, version: int) -> WorkingMemoryView:
        """The version asked for; the latest comes with the session's pending items, which
        belong to the session now, not to any version."""
        sid = session_id
        if version < 0:
            raise invalid("version", "must not be negative", "OUT_OF_RANGE")
        async with self._db.reader() as uow:
            row = await find_session(uow, sid)
            latest = row.record.wm_version
            record = await uow.working_memories.get(row, version or latest)
            is_latest = record is not None and record.version == latest
            pending = await uow.pending_items.with_commits(row.sid) if is_latest else []
        if record is None:
            if not version or not latest:
                text = f"session {sid!r} has no working memory yet"
            else:
                text = (
                    f"session {sid!r} has no working memory version {version} (latest: v{latest})"
                )
            raise NotFound(
                text,
                reason="WORKING_MEMORY_NOT_FOUND",
                metadata={
                    "session_id": sid,
                    "version": str(version),
                    "latest_version": str(latest),
                },
            )
        if not is_latest:
            return WorkingMemoryView(record)
        return WorkingMemoryView(
            record,
            tuple(PendingItemView(item, commit_id) for item, commit_id in pending),
            self._pending_bound[0],
        )

    @retry_conflicts
    async def apply(
        self,
        session_id: str,
        ops: Mapping[str, SectionOp],
        expected_version: int,
        request_id: str,
        fingerprint: str = "",
    ) -> tuple[WorkingMemoryRecord, list[Decision]]:
        sid = session_id
        rid = validation.request_id(request_id)
        if expected_version < 0:
            raise invalid("expected_version", "must not be negative", "OUT_OF_RANGE")
        req = idempotency.request("ApplyWorkingMemoryOps", sid, rid, fingerprint)
        async with self._db.unit_of_work() as uow:
            prior = await idempotency.replay(uow, req)
            row = await locked_session(uow, sid)
            if prior is not None:
                stored = await uow.working_memories.get(row, prior["version"])
                assert stored is not None
                return stored, [_decision(d) for d in prior["decisions"]]
            current_version = row.record.wm_version
            if expected_version and expected_version != current_version:
                raise _version_conflict(sid, expected_version, current_version)
            current = await uow.working_memories.get(row, current_version)
            previous = current.document if current else render_document({s: "" for s in SECTIONS})
            result = merge(previous, dict(ops), self._limits)
            decisions = list(result.decisions)
            version = current_version + 1
            now = time.time()
            covered = await uow.working_memories.covered_seq(row.sid, current_version)
            # What the client's ops brought into the document is no longer pending; what
            # the guards refused of them is the client's to handle (the decisions say it).
            pending = await uow.pending_items.of_session(row.sid)
            carried, _ = carry_pending(pending, (), result.document, *self._pending_bound)
            changed = uow.pending_items.replacing(row.sid, -version, carried)
            await uow.write(
                uow.working_memories.inserting(
                    row.sid,
                    version,
                    result.document,
                    archive_seq=None,
                    covered_seq=covered,
                    commit_id=None,
                    tokens=estimate_tokens(result.document),
                    now=now,
                    decisions_json=decisions_json(decisions),
                ),
                *(changed if tuple(carried) != tuple(pending) else ()),
                uow.sessions.setting_wm_version(row.sid, version, now),  # last: no rows
            )
            stored = await uow.working_memories.get(row, version)
            assert stored is not None
            outcome = {"version": version, "decisions": [d.to_dict() for d in decisions]}
            await idempotency.remember(uow, req, row.sid, outcome)
            await uow.commit()
        return stored, decisions


def _decision(data: dict[str, object]) -> Decision:
    return Decision(
        section=str(data["section"]),
        requested=str(data["requested"]),
        applied=str(data["applied"]),
        guard=Guard(str(data["guard"])),
        reason=str(data["reason"]),
        items_dropped=tuple(data.get("items_dropped", ())),  # type: ignore[arg-type]
        items_restored=tuple(data.get("items_restored", ())),  # type: ignore[arg-type]
        items_refused=tuple(data.get("items_refused", ())),  # type: ignore[arg-type]
    )


def _version_conflict(session_id: str, expected: int, actual: int) -> Aborted:
    return Aborted(
        f"working memory of {session_id!r} is at version {actual}, not {expected}",
        reason="VERSION_MISMATCH",
        metadata={"session_id": session_id, "expected": str(expected), "actual": str(actual)},
    )
