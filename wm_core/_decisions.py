"""Decision records: what the engine did to a requested op, and why.

Nothing the engine changes may go unnoticed. Each intervention produces one record that the
server stores with the archive and counts by section and guard, so an operator can see how
often each guard fires and what it kept out of (or put back into) the working memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NotRequired, TypedDict


class Guard(StrEnum):
    """Which rule intervened. The values are stable: they are stored and used as metric labels."""

    TITLE = "title"  # Session Title stability
    KEY_FACTS = "key_facts"  # Key Facts consolidation and anti-bloat
    FILES = "files"  # Files & Context no-regression
    APPEND_ONLY = "append_only"  # Errors & Corrections
    OPEN_ISSUES = "open_issues"  # Open Issues: restore while unresolved
    EMPTY_UPDATE = "empty_update"  # an UPDATE without content is a KEEP
    OP_SHAPE = "op_shape"  # unknown op, bad items, unknown section key
    DEDUP = "dedup"  # APPEND items already present
    STRUCTURE = "structure"  # headings inside content, foreign sections, preamble
    BOUND = "bound"  # the hard size bound of a section or of the whole document
    BACKFILL = "backfill"  # a section the model left unread, filled by the extractor


class DecisionDict(TypedDict):
    """A decision as the server stores it (a JSON object; ``Decision.to_dict`` writes it).
    The item lists are always written; rows stored before a list existed lack it."""

    section: str
    requested: str
    applied: str
    guard: str
    reason: str
    items_dropped: NotRequired[list[str]]
    items_restored: NotRequired[list[str]]
    items_refused: NotRequired[list[str]]


@dataclass(frozen=True, slots=True)
class Decision:
    """One intervention on one section.

    ``requested`` is the op as asked (``KEEP``, ``UPDATE``, ``APPEND``, or whatever unknown name
    arrived); ``applied`` is the op that took effect. ``items_refused`` holds fresh items that
    the Key Facts throttle would not let in: they are not in the document, only here.
    """

    section: str
    requested: str
    applied: str
    guard: Guard
    reason: str
    items_dropped: tuple[str, ...] = ()
    items_restored: tuple[str, ...] = ()
    items_refused: tuple[str, ...] = ()

    def to_dict(self) -> DecisionDict:
        """A JSON-ready form, for storage next to the archive."""
        return {
            "section": self.section,
            "requested": self.requested,
            "applied": self.applied,
            "guard": self.guard.value,
            "reason": self.reason,
            "items_dropped": list(self.items_dropped),
            "items_restored": list(self.items_restored),
            "items_refused": list(self.items_refused),
        }
