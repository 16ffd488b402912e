"""The seven sections of a working memory and the guard class each one belongs to.

The names, their order and their guard classes are part of the contract with the reference
system: documents written by either side must read the same way. Everything that needs to
recognise a section name written by an LLM or a person goes through :func:`canonical_name`, so
that the tolerance rules (case, heading decoration, "and" for "&") live in one place.
"""

from __future__ import annotations

import re
from enum import StrEnum
from types import MappingProxyType
from typing import Final

SESSION_TITLE: Final = "Session Title"
CURRENT_STATE: Final = "Current State"
TASK_GOALS: Final = "Task & Goals"
KEY_FACTS: Final = "Key Facts & Decisions"
FILES_CONTEXT: Final = "Files & Context"
ERRORS_CORRECTIONS: Final = "Errors & Corrections"
OPEN_ISSUES: Final = "Open Issues"

SECTIONS: Final[tuple[str, ...]] = (
    SESSION_TITLE,
    CURRENT_STATE,
    TASK_GOALS,
    KEY_FACTS,
    FILES_CONTEXT,
    ERRORS_CORRECTIONS,
    OPEN_ISSUES,
)


class GuardClass(StrEnum):
    """How much a section is protected against an LLM rewrite."""

    ANCHORED = "anchored"  # identity of the session: changes only on a real topic pivot
    VOLATILE = "volatile"  # free to rewrite
    ACCUMULATING = "accumulating"  # grows; consolidation allowed only when it keeps the facts
    REFERENTIAL = "referential"  # references must not vanish
    APPEND_ONLY = "append_only"  # history: never rewritten
    TRACKING = "tracking"  # items leave only when marked resolved; dropped ones come back


GUARD_CLASSES: Final = MappingProxyType(
    {
        SESSION_TITLE: GuardClass.ANCHORED,
        CURRENT_STATE: GuardClass.VOLATILE,
        TASK_GOALS: GuardClass.VOLATILE,
        KEY_FACTS: GuardClass.ACCUMULATING,
        FILES_CONTEXT: GuardClass.REFERENTIAL,
        ERRORS_CORRECTIONS: GuardClass.APPEND_ONLY,
        OPEN_ISSUES: GuardClass.TRACKING,
    }
)

# Sections whose size reminders would only invite the model to rewrite history.
APPEND_ONLY_SECTIONS: Final = frozenset({ERRORS_CORRECTIONS})

# What each section is for, in our words. Used as the per-section description of the creation
# tool so a model filling it knows what goes where.
SECTION_PURPOSES: Final = MappingProxyType(
    {
        SESSION_TITLE: "A short, distinctive title for the session (about 5 to 10 words).",
        CURRENT_STATE: (
            "Where things stand right now: latest status, pending work and the immediate next "
            "steps, in 2 to 5 sentences. Not a list of facts."
        ),
        TASK_GOALS: "What the session is for: its topic, the objectives, and the framing decisions.",
        KEY_FACTS: (
            "Durable facts, one bullet each: people and relationships, preferences, constraints, "
            "technical choices with their reasons, commitments, dates and quantities."
        ),
        FILES_CONTEXT: (
            "Resources a later answer may need (file paths, documents, important URLs), each "
            "with why it matters. No bulk lists of media or links."
        ),
        ERRORS_CORRECTIONS: (
            "Mistakes, misunderstandings, failed approaches and corrections by the user, with "
            "how each was resolved."
        ),
        OPEN_ISSUES: "Unresolved questions, blockers, follow-ups and risks.",
    }
)

_DECORATION = re.compile(r"[*_`]+")
_LEADING_NUMBER = re.compile(r"^\d+[.)]\s*")


def _fold(name: str) -> str:
    text = _DECORATION.sub("", name).strip()
    text = _LEADING_NUMBER.sub("", text).rstrip(":").strip()
    text = " ".join(text.split()).casefold()
    return text.replace(" and ", " & ")


_BY_FOLDED: Final = MappingProxyType({_fold(name): name for name in SECTIONS})
_BY_EXACT: Final = MappingProxyType({name: name for name in SECTIONS})


def canonical_name(name: str) -> str | None:
    """The canonical section a heading or an ops key refers to, or None.

    Models and people write "## key facts and decisions:" or "### 4. **Open Issues**"; all of
    those name a canonical section and must not be mistaken for a foreign one.
    """
    exact = _BY_EXACT.get(name)
    if exact is not None:
        return exact
    return _BY_FOLDED.get(_fold(name))
