"""Which memories a plan's new facts supersede (issue 35 point 3): a pass over a guarded plan,
whoever proposed it (the offline extractor or a model), so that a fact that replaces an older
one of the same owner is stored as a new memory linked to the old one, which becomes
SUPERSEDED with a validity interval, instead of being rewritten in place or retired.

A fact replaces another when both are about one *subject* that holds one value at a time: a
preference, a decision, or a profile attribute such as the name (``SINGLE_VALUED``), or when
it names the other's value as the one it replaces (its ``replaces`` field: "switched from
PostgreSQL to CockroachDB"); the rule is the extractor's (``subjects.replaces``). Three shapes
of a plan say so:

- an UPDATE of such a memory whose op names the same subject (the ``subject`` field) and says
  something else: the new text becomes a new memory superseding the target (an UPDATE with no
  subject, or of another kind of memory, stays a correction: the text rewritten, the old one
  in its history);
- a RETIRE of a memory followed by a CREATE of the same type that shares a source message
  with it or names the same subject: the CREATE supersedes it, and the RETIRE is absorbed;
- a CREATE of such a subject while an active memory of the same type holds the same subject
  (``existing``: the owner's memories the caller knows of, e.g. the most similar ones): the
  CREATE supersedes it.

Pure: the caller applies the answer (``services.memory_writes.apply_plan``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from wm_core._memory.model import MemoryOp, MemoryOpKind, MemoryRecord, MemoryType, memory_key
from wm_core._memory.subjects import REPLACES, replaces_memory


@dataclass(frozen=True, slots=True)
class Supersessions:
    """``replacing``: op index (a CREATE, or an UPDATE applied as one) → the ids of the
    existing memories it supersedes; ``absorbed``: RETIRE op indexes whose target one of
    them supersedes instead (not applied on their own)."""

    replacing: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    absorbed: frozenset[int] = frozenset()


def _subject(op: MemoryOp) -> str:
    return op.fields.get("subject", "") if op.fields else ""


def supersession_query(op: MemoryOp) -> str:
    """The text the older memories a new fact may supersede are looked up by (the caller's
    most similar ones): its subject, the value it replaces, its text; empty when it names no
    subject, so supersedes nothing by itself."""
    subject = _subject(op)
    if not subject:
        return ""
    replaced = op.fields.get(REPLACES, "") if op.fields else ""
    return " ".join(part for part in (subject, replaced, op.text) if part)


def _about_the_same(op: MemoryOp, kind: MemoryType | None, memory: MemoryRecord) -> bool:
    return replaces_memory(kind, _subject(op), op.fields or {}, memory)


def supersessions(ops: Sequence[MemoryOp], existing: Sequence[MemoryRecord]) -> Supersessions:
    """The supersessions ``ops`` (a guarded plan) call for; ``existing`` are the owner's active
    memories the caller knows of (the plan's targets among them)."""
    known = {m.id: m for m in existing}
    replacing: dict[int, list[str]] = {}
    absorbed: set[int] = set()
    taken: set[str] = set()  # a memory is superseded by one new fact at most

    def link(index: int, memory_id: str) -> None:
        replacing.setdefault(index, []).append(memory_id)
        taken.add(memory_id)

    for index, op in enumerate(ops):  # UPDATEs that restate a subject with another value
        target = known.get(op.target_ids[0]) if op.target_ids else None
        if op.kind is not MemoryOpKind.UPDATE or target is None or not op.text.strip():
            continue
        if memory_key(op.text) != memory_key(target.text) and _about_the_same(
            op, op.type or target.type, target
        ):
            link(index, target.id)
    for index, op in enumerate(ops):  # a RETIRE and the CREATE that replaces it
        target = known.get(op.target_ids[0]) if op.target_ids else None
        if op.kind is not MemoryOpKind.RETIRE or target is None or target.id in taken:
            continue
        creates = [
            (later, create)
            for later, create in enumerate(ops)
            if create.kind is MemoryOpKind.CREATE
            and create.text.strip()
            and create.type is target.type
            and later not in replacing
        ]
        # the CREATE about the same subject, else the first one from the same message (one
        # message may state another fact of that type too: "I got married, so my name is …")
        same = [later for later, c in creates if _about_the_same(c, c.type, target)]
        shared = [
            later for later, c in creates if set(op.source_message_ids) & set(c.source_message_ids)
        ]
        if same or shared:
            link((same or shared)[0], target.id)
            absorbed.add(index)
    for index, op in enumerate(ops):  # a CREATE about the subject of an active memory
        if op.kind is not MemoryOpKind.CREATE or index in replacing or not op.text.strip():
            continue
        for memory in existing:
            if memory.id in taken or memory_key(memory.text) == memory_key(op.text):
                continue
            if _about_the_same(op, op.type, memory):
                link(index, memory.id)
                break
    return Supersessions({i: tuple(ids) for i, ids in replacing.items()}, frozenset(absorbed))
