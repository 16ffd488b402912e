"""What writes a memory, written once for both writers: Phase 2's extraction, whose plan is
applied here inside the completion's unit of work, and the RPCs (CreateMemory, UpdateMemory)
of ``services.memories``, which store and supersede one memory through the same two steps.

``await apply_plan(uow, tenant=..., owner=..., plan=..., sources=MemorySources(...))`` applies
a ``wm_core.MemoryPlan`` in the caller's open unit of work (the caller commits): CREATE stores
a memory (or, when an active memory of the owner has the same ``wm_core.memory_key``, adds the
source to it: ``deduplicated``); UPDATE keeps the old text as a version and writes the new
one; MERGE keeps the first target with the new text (every old text a version) and retires
the others into it, moving their sources; RETIRE retires with the op's reason; a new fact of
a subject the owner has a memory of supersedes it (``services.memory_lifecycle``). The
full-text index follows in the same transaction. Ops whose targets are not active memories
of the owner are skipped and listed in ``skipped`` (the plan's guards should have refused
them). Returns a ``MemoryDiff`` of memory ids.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from wm_core import (
    MemoryOp,
    MemoryOpKind,
    MemoryPlan,
    MemoryType,
    memory_key,
)
from wm_server.services.memory_content import (
    MAX_FIELDS,
    MAX_REASON,
    MAX_SOURCE_MESSAGES,
    MAX_TEXT,
    MemoryContent,
    MemoryOwner,
    iso_to_epoch,
    new_memory_id,
)
from wm_server.services.memory_lifecycle import (
    plan_supersessions,
    supersede_current,
)
from wm_server.storage.records import MemoryRow
from wm_server.storage.unit_of_work import UnitOfWork


@dataclass(frozen=True, slots=True)
class MemorySources:
    """Where the memories of one plan were learned (each op adds its source_message_ids)."""

    session_id: str
    archive_seq: int | None = None


@dataclass(frozen=True, slots=True)
class MemoryDiff:
    """What a plan changed, by memory id."""

    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    merged: tuple[str, ...] = ()  # the memory each MERGE kept
    retired: tuple[str, ...] = ()  # RETIRE targets and the memories a MERGE absorbed
    deduplicated: tuple[str, ...] = ()  # existing memories a CREATE turned out to repeat
    skipped: tuple[tuple[int, str], ...] = ()  # (op index, why) of ops not applied
    superseded: tuple[str, ...] = ()  # memories a new fact replaced (memory_lifecycle)


async def store_memory(
    uow: UnitOfWork,
    tenant: str,
    owner: MemoryOwner,
    content: MemoryContent,
    source: tuple[str, int | None, Sequence[str]] | None,
    now: float,
) -> tuple[MemoryRow, bool]:
    """Create a memory, or find the active one of the owner with the same key (adding the
    source to it); (the memory, whether it existed)."""
    key = memory_key(content.text)
    existing = await uow.memories.with_key(tenant, owner.key, key)
    if existing is not None:
        mid = existing.mid
    else:
        mid = await uow.memories.insert(
            memory_id=new_memory_id(), tenant=tenant, owner=owner.key, sid=owner.sid,
            type=content.type.value, text=content.text, search_text=content.search_text,
            key=key, fields=dict(content.fields), event_time=content.event_time, now=now,
        )  # fmt: skip
    if source is not None:
        name, seq, ids = source
        await uow.memories.add_source(mid, name, seq, list(ids)[:MAX_SOURCE_MESSAGES], now)
    if existing is not None:
        return existing, True
    row = await uow.memories.by_mid(mid)
    assert row is not None  # written just above, in this transaction
    return row, False


async def supersede_text(
    uow: UnitOfWork, row: MemoryRow, content: MemoryContent, reason: str, now: float
) -> None:
    """Keep the current text as a version, then write ``content`` as the next one."""
    await uow.memories.add_version(row.mid, row.version, row.type, row.text, reason, now)
    await uow.memories.rewrite(
        row.mid, type=content.type.value, text=content.text, search_text=content.search_text,
        key=memory_key(content.text), fields=dict(content.fields),
        event_time=content.event_time, version=row.version + 1, now=now,
    )  # fmt: skip


def content_of(op: MemoryOp, fallback: MemoryRow | None) -> MemoryContent:
    kind = op.type or (MemoryType(fallback.type) if fallback else MemoryType.ENTITY)
    text = " ".join(op.text.split())[:MAX_TEXT] or (fallback.text if fallback else "")
    fields = dict(list(op.fields.items())[:MAX_FIELDS]) if op.fields else {}
    if not fields and fallback is not None:
        fields = dict(fallback.fields)
    event = iso_to_epoch(op.event_time)
    if event is None and fallback is not None:
        event = fallback.event_time
    return MemoryContent(kind, text, fields, event)


async def apply_plan(
    uow: UnitOfWork,
    *,
    tenant: str,
    owner: MemoryOwner,
    plan: MemoryPlan,
    sources: MemorySources,
    now: float | None = None,
) -> MemoryDiff:
    """Apply ``plan`` in the caller's unit of work (see the module docstring)."""
    now = time.time() if now is None else now
    replacing, folded = await plan_supersessions(uow, tenant, owner, plan.ops)
    superseded: list[str] = []
    created: list[str] = []
    updated: list[str] = []
    merged: list[str] = []
    retired: list[str] = []
    deduplicated: list[str] = []
    skipped: list[tuple[int, str]] = []
    for index, op in enumerate(plan.ops):
        source = (sources.session_id, sources.archive_seq, op.source_message_ids)
        targets = {
            r.memory_id: r for r in await uow.memories.of_owner(tenant, owner.key, op.target_ids)
        }
        missing = [t for t in op.target_ids if t not in targets or not targets[t].active]
        if missing:
            skipped.append((index, f"not an active memory of the owner: {', '.join(missing)}"))
            continue
        if index in folded:
            continue  # its target is superseded by the CREATE that replaces it
        if index in replacing:  # a new fact: stored as a new memory superseding the old ones
            fallback = targets.get(op.target_ids[0]) if op.target_ids else None
            content = content_of(op, None)
            if fallback is not None and op.type is None:
                content = replace(content, type=MemoryType(fallback.type))
            row, existed = await store_memory(uow, tenant, owner, content, source, now)
            (deduplicated if existed else created).append(row.memory_id)
            superseded.extend(
                await supersede_current(uow, tenant, owner.key, row, replacing[index], now)
            )
            continue
        if op.kind is MemoryOpKind.CREATE:
            if not op.text.strip():
                skipped.append((index, "no text"))
                continue
            row, existed = await store_memory(uow, tenant, owner, content_of(op, None), source, now)
            (deduplicated if existed else created).append(row.memory_id)
            continue
        if not op.target_ids:
            skipped.append((index, "no target"))
            continue
        first = targets[op.target_ids[0]]
        if op.kind is MemoryOpKind.RETIRE:
            await uow.memories.retire(first.mid, op.reason[:MAX_REASON] or "retired", now)
            retired.append(first.memory_id)
            continue
        content = content_of(op, first)
        twin = await uow.memories.with_key(tenant, owner.key, memory_key(content.text))
        absorbed = [targets[t] for t in op.target_ids[1:]] if op.kind is MemoryOpKind.MERGE else []
        if twin is not None and twin.mid != first.mid and twin not in absorbed:
            # The new text is another active memory's: that one stays, this one joins it.
            absorbed, first = [first, *absorbed], twin
        for other in absorbed:
            await uow.memories.retire(other.mid, f"merged into {first.memory_id}", now)
            await uow.memories.move_sources(other.mid, first.mid)
            retired.append(other.memory_id)
        reason = op.reason[:MAX_REASON] or ("merge" if absorbed else "update")
        if memory_key(content.text) != memory_key(first.text) or content.type.value != first.type:
            await supersede_text(uow, first, content, reason, now)
        await uow.memories.add_source(
            first.mid, source[0], source[1], list(source[2])[:MAX_SOURCE_MESSAGES], now
        )
        (merged if absorbed else updated).append(first.memory_id)
    return MemoryDiff(
        tuple(created), tuple(updated), tuple(merged), tuple(retired), tuple(deduplicated),
        tuple(skipped), tuple(superseded),
    )  # fmt: skip
