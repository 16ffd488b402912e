"""Session Title stability: a title changes only when the topic really changed.

A rewrite is accepted when it shares at least one meaningful word with the old title. Unlike
the reference, a "word" needs two letters: version digits ("v2"), numbers, punctuation and
single letters are not evidence of the same topic. Titles in scripts without spaces (CJK) are
compared by character pairs, since they have no words to split on.
"""

from __future__ import annotations

import re
from typing import Final

from wm_core.guards.verdict import Verdict
from wm_core.ops import KEEP, OpKind, SectionOp

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


def guard_title(op: SectionOp, old: str) -> Verdict | None:
    if op.kind != OpKind.UPDATE:
        return None
    old_tokens = title_tokens(old)
    if not old_tokens:
        return None  # nothing meaningful to compare with
    new = op.content.strip()
    if old_tokens & title_tokens(new):
        return None
    return Verdict(
        KEEP,
        "title drift: the new title shares no meaningful word with the current one",
        dropped=(new,),
    )
