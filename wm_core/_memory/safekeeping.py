"""Safekeeping: a refused item that leaves the pending items becomes a long-term memory.

Pending items are bounded (``wm_core._guards.pending``): under a model that never
consolidates, the oldest must leave the list so that the update prompt stays bounded. A
refused fact is owed a place all the same, so whatever leaves the list is written to the
session owner's long-term memory by the extraction of the same commit: the model is shown
the items and may fold them into memories of its own; every item its accepted ops and the
memories it was shown do not already hold (the same test that takes an item off the pending
list, ``held_in``) gets a CREATE here, with the item's text as written, so no model, however
forgetful, can lose it. The op goes through the memory guards like any other (a duplicate is
deduplicated, which keeps it reachable too).

The memory says where it came from in its fields: the section that refused it
(``section``), ``kept_from: pending_items``, and the archive whose merge refused it. It names
no ``subject``: each refused item is a fact of its own, and a subject would make a later item
of the same section supersede it (``wm_core.supersessions``: a decision holds one value per
subject) and take it out of the owner's active memories.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from wm_core._document.sections import ERRORS_CORRECTIONS, FILES_CONTEXT, KEY_FACTS
from wm_core._guards.pending import MAX_PENDING_CHARS, PendingItem, held_in
from wm_core._memory.model import MemoryOp, MemoryOpKind, MemoryRecord, MemoryType
from wm_core._memory.tool import MAX_MEMORY_TEXT_CHARS

# The value of the ``kept_from`` field of a memory written by safekeeping.
KEPT_FROM_PENDING: Final = "pending_items"
# What a refused item of a section is as a memory; any other section's item is an entity.
_TYPE_OF_SECTION: Final = {
    KEY_FACTS: MemoryType.DECISION,
    ERRORS_CORRECTIONS: MemoryType.EVENT,
    FILES_CONTEXT: MemoryType.ENTITY,
}
assert MAX_PENDING_CHARS <= MAX_MEMORY_TEXT_CHARS  # an item always fits in one memory


def _texts(ops: Iterable[MemoryOp], existing: Iterable[MemoryRecord]) -> str:
    written = [op.text for op in ops if op.kind is not MemoryOpKind.RETIRE]
    return "\n".join([*written, *(memory.text for memory in existing)]).lower()


def safekeeping_ops(
    dropped: Sequence[PendingItem],
    accepted: Sequence[MemoryOp],
    existing: Sequence[MemoryRecord],
) -> tuple[MemoryOp, ...]:
    """A CREATE for each ``dropped`` item that neither the ``accepted`` ops (the model's,
    after the guards) nor the ``existing`` memories hold, each once, in order."""
    held = _texts(accepted, existing)
    ops: list[MemoryOp] = []
    seen: set[str] = set()
    for item in dropped:
        text = " ".join(item.text.split())[:MAX_MEMORY_TEXT_CHARS]
        if not text or text.lower() in seen or held_in(held, text):
            continue
        seen.add(text.lower())
        fields = {"section": item.section or "pending item", "kept_from": KEPT_FROM_PENDING}
        if item.archive_seq:
            fields["refused_in_archive"] = str(item.archive_seq)
        ops.append(
            MemoryOp(
                kind=MemoryOpKind.CREATE,
                type=_TYPE_OF_SECTION.get(item.section, MemoryType.ENTITY),
                text=text,
                fields=fields,
            )
        )
    return tuple(ops)
