"""Guards on proposed memory ops: what a model proposes never silently loses a memory.

The rules, each deterministic and each yielding a :class:`MemoryDecision`:

- **Targets.** UPDATE, MERGE and RETIRE name existing memories by id; an id that is not among
  the memories shown to the model is refused, and so is a second op on a memory an earlier op
  of the batch already changed (the order would decide which one wins).
- **RETIRE needs a contradiction in the archive.** Its reason must not be empty, and the
  archive must back it up: at least half of the memory's *subject keys* occur in the archive
  (so the conversation is about the same thing), and at least half of the reason's keys do
  too (so the reason comes from the conversation, not from the model's imagination). A key is
  a word of three or more letters or digits outside the anchor stopwords, compared by its
  first six characters after ``memory_key`` ("prefers" meets "preferred").
- **UPDATE keeps the facts.** The new text must keep every name, date and number the old
  text had (the engine's lexical anchors, ``missing_anchors``); a changed fact is a RETIRE of
  the old memory and a CREATE of the new one, so the old fact stays in history with a reason.
- **MERGE keeps every anchor** of every merged text, and needs two distinct known ids.
- **Duplicates.** A CREATE whose text has the same ``memory_key`` as an existing memory's is
  DEDUPLICATED: nothing is created, the decision names the memory it is already in; two
  equal CREATEs of one batch collapse into the first (their sources joined). An UPDATE that
  does not change the normalized text is DEDUPLICATED too (nothing to store).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Final

from wm_core._guards.key_facts import ANCHOR_STOPWORDS, missing_anchors
from wm_core._guards.pending import PendingItem
from wm_core._memory.model import (
    MemoryDecision,
    MemoryOp,
    MemoryOpKind,
    MemoryPlan,
    MemoryRecord,
    MemoryVerdict,
    memory_key,
)
from wm_core._messages import Message

_WORD: Final = re.compile(r"\w{3,}")
_STEM_CHARS: Final = 6
# Words that say nothing about the subject of a memory or a reason.
_FILLER_TEXT: Final = (
    "user users now longer instead anymore because said says told wants want prefers "
    "prefer likes like does did done make made use uses used any"
)
_FILLER: Final = frozenset(_FILLER_TEXT.split())


def _keys(text: str) -> set[str]:
    words = _WORD.findall(memory_key(text))
    return {
        word[:_STEM_CHARS]
        for word in words
        if word not in ANCHOR_STOPWORDS and word not in _FILLER and not word.startswith("_")
    }


def _covered(keys: set[str], archive: str) -> bool:
    """Whether at least half of ``keys`` (and at least one) occur in the archive."""
    if not keys:
        return False
    found = sum(1 for key in keys if key in archive)
    return found >= max(1, math.ceil(len(keys) / 2))


def archive_text(messages: Sequence[Message], pending: Sequence[PendingItem] = ()) -> str:
    """The text memory ops are judged against (a RETIRE must be backed by it): the text of
    every message and of every pending item offered to extraction."""
    texts = [message.text() for message in messages]
    texts.extend(item.text for item in pending)
    return "\n".join(text for text in texts if text.strip())


def retire_supported(memory: MemoryRecord, reason: str, archive_text: str) -> str | None:
    """Why the archive does not back retiring ``memory`` for ``reason`` (None when it does)."""
    if not reason.strip():
        return "a RETIRE needs a reason"
    archive = memory_key(archive_text)
    if not _covered(_keys(memory.text), archive):
        return "the archive does not mention what the memory is about; nothing contradicts it"
    if not _covered(_keys(reason), archive):
        return "the reason is not supported by the archive's text"
    return None


class _Guard:
    def __init__(self, existing: Sequence[MemoryRecord], archive_text: str) -> None:
        self.by_id = {memory.id: memory for memory in existing}
        self.by_text = {memory_key(m.text): m for m in existing}
        self.archive_text = archive_text
        self.touched: dict[str, int] = {}  # memory id → the op that changed it
        self.created: dict[str, int] = {}  # normalized text → index in ``ops``
        self.ops: list[MemoryOp] = []
        self.decisions: list[MemoryDecision] = []

    def decide(self, index: int, op: MemoryOp, verdict: MemoryVerdict, reason: str) -> None:
        self.decisions.append(MemoryDecision(index, verdict, reason, op))

    def targets(self, index: int, op: MemoryOp) -> list[MemoryRecord] | None:
        unknown = [i for i in op.target_ids if i not in self.by_id]
        if unknown:
            self.decide(index, op, MemoryVerdict.REFUSED, f"unknown memory id(s): {unknown}")
            return None
        again = [i for i in op.target_ids if i in self.touched]
        if again:
            first = self.touched[again[0]]
            self.decide(
                index, op, MemoryVerdict.REFUSED, f"{again[0]} was already changed by op {first}"
            )
            return None
        return [self.by_id[i] for i in op.target_ids]

    def accept(self, index: int, op: MemoryOp, reason: str = "accepted") -> None:
        for target in op.target_ids:
            self.touched[target] = index
        self.ops.append(op)
        self.decide(index, op, MemoryVerdict.ACCEPTED, reason)

    def create(self, index: int, op: MemoryOp) -> None:
        if op.type is None or not op.text.strip():
            self.decide(index, op, MemoryVerdict.REFUSED, "a CREATE needs a type and a text")
            return
        key = memory_key(op.text)
        same = self.by_text.get(key)
        if same is not None:
            self.decide(index, op, MemoryVerdict.DEDUPLICATED, f"already remembered as {same.id}")
            return
        earlier = self.created.get(key)
        if earlier is not None:
            first = self.ops[earlier]
            sources = tuple(dict.fromkeys((*first.source_message_ids, *op.source_message_ids)))
            self.ops[earlier] = replace(first, source_message_ids=sources)
            self.decide(index, op, MemoryVerdict.DEDUPLICATED, "the same text as an earlier CREATE")
            return
        self.created[key] = len(self.ops)
        self.accept(index, op)

    def update(self, index: int, op: MemoryOp) -> None:
        found = self.targets(index, op)
        if found is None:
            return
        if len(found) != 1 or not op.text.strip():
            self.decide(index, op, MemoryVerdict.REFUSED, "an UPDATE needs one target and a text")
            return
        old = found[0]
        if memory_key(op.text) == memory_key(old.text):
            self.decide(index, op, MemoryVerdict.DEDUPLICATED, f"{old.id} already says this")
            return
        lost = missing_anchors(old.text, op.text)
        if lost:
            self.decide(
                index,
                op,
                MemoryVerdict.REFUSED,
                f"the update drops {', '.join(lost)} of {old.id}; a changed fact is a RETIRE "
                "with a reason and a CREATE",
            )
            return
        self.accept(index, replace(op, type=op.type or old.type))

    def merge(self, index: int, op: MemoryOp) -> None:
        if len(set(op.target_ids)) < 2 or not op.text.strip():
            self.decide(
                index, op, MemoryVerdict.REFUSED, "a MERGE needs two or more ids and a text"
            )
            return
        found = self.targets(index, op)
        if found is None:
            return
        lost = sorted({a for memory in found for a in missing_anchors(memory.text, op.text)})
        if lost:
            self.decide(
                index, op, MemoryVerdict.REFUSED, f"the merged text drops {', '.join(lost)}"
            )
            return
        self.accept(index, replace(op, type=op.type or found[0].type))

    def retire(self, index: int, op: MemoryOp) -> None:
        if len(op.target_ids) != 1:
            self.decide(index, op, MemoryVerdict.REFUSED, "a RETIRE needs exactly one target")
            return
        found = self.targets(index, op)
        if found is None:
            return
        why_not = retire_supported(found[0], op.reason, self.archive_text)
        if why_not is not None:
            self.decide(index, op, MemoryVerdict.REFUSED, why_not)
            return
        self.accept(index, op, "the archive contradicts it")


def guard_memory_ops(
    ops: Iterable[MemoryOp], existing: Sequence[MemoryRecord], archive_text: str
) -> MemoryPlan:
    """The ops to apply, and one decision per proposed op (its index in ``ops``).

    ``existing`` are the owner's memories the model was shown; ``archive_text`` the text of
    the archive the ops were proposed from. See the module docstring for the rules.
    """
    guard = _Guard(existing, archive_text)
    handlers = {
        MemoryOpKind.CREATE: guard.create,
        MemoryOpKind.UPDATE: guard.update,
        MemoryOpKind.MERGE: guard.merge,
        MemoryOpKind.RETIRE: guard.retire,
    }
    for index, op in enumerate(ops):
        handlers[op.kind](index, op)
    return MemoryPlan(tuple(guard.ops), tuple(guard.decisions))
