"""The shapes long-term memory is made of, shared by extraction, its guards and the store.

They are pinned here, before either side exists, so that the engine (which proposes and guards
memory ops) and the server (which stores, indexes and searches memories) agree on one vocabulary
and neither translates the other's types.
"""

from __future__ import annotations

import enum
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field


class MemoryType(enum.StrEnum):
    """What a memory is about; the proto's ``MemoryType`` mirrors these names."""

    PROFILE = "profile"  # who the user is: name, role, team, location
    PREFERENCE = "preference"  # how the user wants things done
    ENTITY = "entity"  # a named thing: project, service, person, repository
    EVENT = "event"  # something that happened at a time
    DECISION = "decision"  # a choice made, with its reason
    PROCEDURE = "procedure"  # how something is done, step by step


MEMORY_TYPES: tuple[str, ...] = tuple(t.value for t in MemoryType)


class MemoryOpKind(enum.StrEnum):
    """The four changes a model may propose to an owner's memories."""

    CREATE = "create"
    UPDATE = "update"  # one target id; the new text supersedes the old, which stays in history
    MERGE = "merge"  # two or more target ids become one memory with the new text
    RETIRE = "retire"  # one target id, with a reason; kept in history, no longer recalled


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """An existing memory as extraction sees it (the most similar ones of the owner)."""

    id: str
    type: MemoryType
    text: str
    fields: Mapping[str, str] = field(default_factory=dict)
    event_time: str | None = None  # ISO 8601 date or date-time, when the memory is dated


@dataclass(frozen=True, slots=True)
class MemoryOp:
    """One proposed change. ``target_ids`` is empty for CREATE, one id for UPDATE and RETIRE,
    two or more for MERGE; ``text`` is required except for RETIRE, ``reason`` for RETIRE."""

    kind: MemoryOpKind
    type: MemoryType | None = None
    text: str = ""
    fields: Mapping[str, str] = field(default_factory=dict)
    event_time: str | None = None
    target_ids: tuple[str, ...] = ()
    reason: str = ""
    source_message_ids: tuple[str, ...] = ()


class MemoryVerdict(enum.StrEnum):
    """What the guards did with one proposed op."""

    ACCEPTED = "accepted"
    REFUSED = "refused"
    DEDUPLICATED = "deduplicated"  # a CREATE equal (normalized) to an existing memory: merged


@dataclass(frozen=True, slots=True)
class MemoryDecision:
    """One guard intervention (or acceptance), kept in the commit's memory diff."""

    op_index: int
    verdict: MemoryVerdict
    reason: str
    op: MemoryOp


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """The ops to apply, in order, and a decision for every op proposed."""

    ops: tuple[MemoryOp, ...]
    decisions: tuple[MemoryDecision, ...]

    @property
    def refused(self) -> tuple[MemoryDecision, ...]:
        return tuple(d for d in self.decisions if d.verdict is MemoryVerdict.REFUSED)


def fold_text(text: str) -> str:
    """Text as every case-insensitive comparison of the service sees it: NFKC compatibility
    (the "ﬁ" ligature is "fi", full-width letters are letters) and full Unicode case folding
    ("ß" is "ss"), then NFKC again, which case folding can undo. Applied to both sides of a
    comparison, so "STRASSE", "strasse" and "straße" are one word."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


_EDGE_PUNCTUATION = ".,;:!?…\"'`*_ "


def memory_key(text: str) -> str:
    """The identity of a memory's text: two memories of one owner with the same key are
    duplicates (case, width, whitespace, emphasis marks and edge punctuation ignored)."""
    return " ".join(fold_text(text).split()).strip(_EDGE_PUNCTUATION)
