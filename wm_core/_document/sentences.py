"""Sentences of conversation text, for the deterministic extractors (working memory and
long-term memory): one splitter, so both read a message the same way.

Code blocks are left out (a sentence is never split inside code), a line break always ends a
sentence, and a timestamp an agent runtime puts in front of a line ("[2025-03-10 09:05] ...")
is not part of the sentence; ``stamp_date`` reads that timestamp's date instead.
"""

from __future__ import annotations

import re
from typing import Final

_CODE_FENCE: Final = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
# A title's period ("Mrs. Okafor", "Dr. Lee") does not end a sentence.
_SENTENCE_END: Final = re.compile(
    r"(?<=[.!?])(?<!\bMr\.)(?<!\bMrs\.)(?<!\bMs\.)(?<!\bDr\.)(?<!\bSt\.)(?<!\bProf\.)\s+"
    r"(?=[\"'`(\[*A-Z0-9~/])"
)
_STAMP: Final = re.compile(r"^\[(\d{4}-\d{2}-\d{2})[^\]]{0,24}\]\s*")


def prose(text: str) -> str:
    """Text without code blocks."""
    return _CODE_FENCE.sub(" ", text)


def sentences(text: str) -> list[str]:
    """Sentences of ``text``, line by line, without list markers and timestamps."""
    found: list[str] = []
    for line in prose(text).split("\n"):
        line = _STAMP.sub("", line.strip().lstrip("#-*>").strip())
        if not line:
            continue
        found.extend(s.strip() for s in _SENTENCE_END.split(line) if s.strip())
    return found


def stamp_date(text: str) -> str | None:
    """The ISO date of the timestamp ``text`` starts with, if it starts with one."""
    match = _STAMP.match(text.lstrip())
    return match.group(1) if match else None
