"""Reading the working memory, and applying ops that a runtime's own model produced.

Client-supplied ops pass through exactly the guards Phase 2 uses (``wm_core.merge``), so a
runtime that runs its own model cannot lose more than the service's model could.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from wm_core import SECTIONS, Decision, Guard, SectionOp, estimate_tokens, merge, render_document
from wm_server.errors import Aborted, NotFound, invalid
from wm_server.services import validation
from wm_server.storage.port import Store
from wm_server.storage.records import WorkingMemoryRecord
from wm_server.tenancy import current_tenant


class WorkingMemoryService:
    def __init__(self, store: Store) -> None:
        self._store = store

    async def get(self, session_id: str, version: int) -> WorkingMemoryRecord:
        sid = validation.session_id(session_id)
        if version < 0:
            raise invalid("version", "must not be negative", "OUT_OF_RANGE")
        record = await self._store.get_working_memory(current_tenant(), sid, version)
        if record is None:
            what = f"version {version}" if version else "a working memory"
            raise NotFound(
                f"session {sid!r} has no {what} yet",
                reason="WORKING_MEMORY_NOT_FOUND",
                metadata={"session_id": sid, "version": str(version)},
            )
        return record

    async def apply(
        self,
        session_id: str,
        ops: Mapping[str, SectionOp],
        expected_version: int,
        request_id: str,
    ) -> tuple[WorkingMemoryRecord, list[Decision]]:
        sid = validation.session_id(session_id)
        rid = validation.request_id(request_id)
        tenant = current_tenant()
        if expected_version < 0:
            raise invalid("expected_version", "must not be negative", "OUT_OF_RANGE")
        method = f"ApplyWorkingMemoryOps/{sid}"
        if rid:
            prior = await self._store.remembered(tenant, method, rid)
            if prior is not None:
                saved = json.loads(prior)
                record = await self._store.get_working_memory(tenant, sid, saved["version"])
                assert record is not None
                return record, [_decision(d) for d in saved["decisions"]]
        current = await self._store.get_working_memory(tenant, sid, 0)
        current_version = current.version if current else 0
        if expected_version and expected_version != current_version:
            raise _version_conflict(sid, expected_version, current_version)
        previous = current.document if current else render_document({s: "" for s in SECTIONS})
        result = merge(previous, dict(ops))
        stored = await self._store.store_working_memory(
            tenant, sid, current_version, result.document, estimate_tokens(result.document)
        )
        if stored is None:
            raise _version_conflict(sid, expected_version or current_version, -1)
        decisions = list(result.decisions)
        if rid:
            await self._store.remember(
                tenant,
                method,
                rid,
                json.dumps(
                    {"version": stored.version, "decisions": [d.to_dict() for d in decisions]}
                ),
            )
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
