"""When a new fact replaces an older one: the rule the extractor and supersession share.

Why it exists: the offline extractor (``extract``) turns a new statement about a remembered
subject into an update of that memory, and supersession (``supersede``) stores a new fact that
replaces an older one as a new memory linked to it; both must agree on which older memory a
fact replaces, so the rule is written here once.

A fact is about a *subject* (its ``subject`` field: a preference's object, a decision's
choice, a profile attribute). Some subjects hold one value at a time: a preference, a
decision, and the profile attributes of ``SINGLE_VALUED`` (the user's name, home, age, role,
organization); a later fact about one of them replaces the earlier one of the same kind.
Two subjects are one when they are equal or share at least half of their content words
("tabs over spaces" and "spaces over tabs").

A change may also name what it replaces in its ``replaces`` field (``REPLACES``): "we
switched the ledger from PostgreSQL to CockroachDB" is about "CockroachDB for the ledger" and
replaces "PostgreSQL"; "I don't prefer tabs any more, I now prefer spaces" is about "spaces"
and replaces "tabs". Such a fact replaces an older one whose choice names every word of the
replaced value, unless both say what the choice is for ("… for the ledger", "… for
analytics") and those share no word.

Pure: text in, answers out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from wm_core._memory.model import MemoryRecord, MemoryType, memory_key

# Profile attributes that hold one value at a time: a new one replaces the old.
SINGLE_VALUED: Final = frozenset({"name", "age", "home", "role", "organization"})
# The field in which a change names the earlier value it replaces.
REPLACES: Final = "replaces"

_SUBJECT_STOP_TEXT: Final = (
    "the a an to of for in on at with and or my our your their it this that these those be "
    "is are was were use using when over than instead rather always never please do not "
    "don't user user's team team's from"
)
_SUBJECT_STOP: Final = frozenset(_SUBJECT_STOP_TEXT.split())
# What a choice is for: "CockroachDB for the ledger".
_FOR: Final = re.compile(r"\s+for\s+", re.IGNORECASE)


def subject_words(text: str) -> frozenset[str]:
    """The content words a subject is compared by (normalized, cut to six characters)."""
    words = re.findall(r"[\w'.\-]+", memory_key(text))
    return frozenset(w.strip(".'-")[:6] for w in words if w.strip(".'-") not in _SUBJECT_STOP)


def same_subject(a: str, b: str) -> bool:
    """Subjects match when they are equal, or share at least half of their words."""
    if memory_key(a) == memory_key(b):
        return True
    left, right = subject_words(a), subject_words(b)
    if not left or not right:
        return False
    return len(left & right) * 2 >= max(len(left), len(right))


def single_valued(kind: MemoryType | None, subject: str) -> bool:
    """Whether a later fact about ``subject`` replaces an earlier one (see the docstring)."""
    if not subject:
        return False
    if kind in (MemoryType.PREFERENCE, MemoryType.DECISION):
        return True
    return kind is MemoryType.PROFILE and subject in SINGLE_VALUED


def subject_of(memory: MemoryRecord) -> str:
    """A stored memory's subject: its ``subject`` field, else its text without the opening
    that says whose it is ("The user prefers …")."""
    subject = memory.fields.get("subject")
    if subject:
        return subject
    return re.sub(
        r"^(?:the\s+)?user(?:'s)?\s+(?:prefers|likes|loves|hates|does not \w+|wants the assistant to|"
        r"works (?:at|on)|is|name is)\s+",
        "",
        memory.text,
        flags=re.IGNORECASE,
    )


def _choice_and_scope(subject: str) -> tuple[frozenset[str], frozenset[str]]:
    parts = _FOR.split(subject, maxsplit=1)
    return subject_words(parts[0]), subject_words(parts[1] if len(parts) > 1 else "")


def _names_replaced(replaced: str, subject: str, earlier_subject: str) -> bool:
    """Whether an earlier subject is the value a change replaces (see the docstring)."""
    was = subject_words(replaced)
    earlier_choice, earlier_scope = _choice_and_scope(earlier_subject)
    if not was or not was <= earlier_choice:
        return False
    _, scope = _choice_and_scope(subject)
    return not scope or not earlier_scope or bool(scope & earlier_scope)


def replaces(
    kind: MemoryType | None,
    subject: str,
    fields: Mapping[str, str],
    earlier_kind: MemoryType | None,
    earlier_subject: str,
) -> bool:
    """Whether a new fact (its kind, subject and fields) replaces an earlier one of
    ``earlier_kind`` about ``earlier_subject`` (see the module docstring)."""
    if kind is not earlier_kind or not single_valued(kind, subject):
        return False
    if same_subject(earlier_subject, subject):
        return True
    replaced = fields.get(REPLACES, "")
    return bool(replaced) and _names_replaced(replaced, subject, earlier_subject)


def replaces_memory(
    kind: MemoryType | None, subject: str, fields: Mapping[str, str], memory: MemoryRecord
) -> bool:
    """``replaces`` against a stored memory."""
    return replaces(kind, subject, fields, memory.type, subject_of(memory))
