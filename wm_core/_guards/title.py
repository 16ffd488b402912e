"""Session Title stability: a title is refined, not replaced by the topic of the day.

A rewrite is accepted when it keeps at least half of the old title's meaningful words. The
reference accepts any rewrite that shares a single word, so a session titled "Ledger migration
from MySQL to Postgres" becomes "Provisioning the RDS Postgres instance" after one turn about
provisioning; a refinement ("Debug Session Setup" to "Debug Session Refinement", "Old Title"
to "Old Title (updated)") keeps half of the words or more. Unlike the reference, a "word"
needs two letters: version digits ("v2"), numbers, punctuation and single letters are not
evidence of the same topic. Titles in scripts without spaces (CJK) are compared by character
pairs, since they have no words to split on.

Every rejected and every accepted change is recorded, with the words it kept.
"""

from __future__ import annotations

import math
import re
from typing import Final

from wm_core._guards.verdict import Verdict
from wm_core._ops.section_ops import KEEP, OpKind, SectionOp

_STOPWORD_TEXT: Final = (
    "the a an and or of to in on for with by at from session title working memory plan plans "
    "notes note"
)
STOPWORDS: Final = frozenset(_STOPWORD_TEXT.split())

_CJK_RUN = re.compile(
    "[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+"
)
_WORD = re.compile(r"[^\W_]+")
_MIN_LETTERS: Final = 2
# The share of the old title's meaningful words a new title must keep.
MIN_TITLE_OVERLAP: Final = 0.5
_SHOWN_CHARS: Final = 120


def title_tokens(text: str) -> set[str]:
    """The words of a title that can show two titles are about the same thing."""
    folded = text.casefold()
    tokens: set[str] = set()
    if not folded.isascii():
        for run in _CJK_RUN.findall(folded):
            tokens.update(run[i : i + 2] for i in range(len(run) - 1))
        folded = _CJK_RUN.sub(" ", folded)
    for word in _WORD.findall(folded):
        if word in STOPWORDS or len(word) < _MIN_LETTERS:
            continue
        if word.isalpha() or sum(1 for ch in word if ch.isalpha()) >= _MIN_LETTERS:
            tokens.add(word)
    return tokens


def required_overlap(old_tokens: int) -> int:
    """How many of ``old_tokens`` meaningful words a new title must keep (at least one)."""
    return max(1, math.ceil(old_tokens * MIN_TITLE_OVERLAP))


def _quoted(title: str) -> str:
    return repr(title if len(title) <= _SHOWN_CHARS else title[:_SHOWN_CHARS] + "...")


def guard_title(op: SectionOp, old: str) -> Verdict | None:
    if op.kind is not OpKind.UPDATE:
        return None
    new = op.content.strip()
    old = old.strip()
    if new == old:
        return None  # not a change
    old_tokens = title_tokens(old)
    if not old_tokens:
        return Verdict(op, f"title changed from {_quoted(old)} (it had no meaningful word)")
    shared = old_tokens & title_tokens(new)
    needed = required_overlap(len(old_tokens))
    kept = f"{len(shared)} of the {len(old_tokens)} meaningful words of {_quoted(old)}"
    if shared:
        kept += " (" + ", ".join(sorted(shared)) + ")"
    if len(shared) >= needed:
        return Verdict(op, f"title changed: the new title keeps {kept}")
    return Verdict(
        KEEP,
        f"title drift rejected: the new title keeps {kept}; at least {needed} needed",
        dropped=(new,),
    )
