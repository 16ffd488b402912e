"""The one-line abstract stored with an archive: what the session is about and where it is.

The reference took the document's first line, which is the "# Working Memory" heading for
every v2 document; ours reads the title and the first sentence of the current state.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from wm_core._document.markdown import parse_document

_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
MAX_ABSTRACT = 240


def _first_line(body: str) -> str:
    for line in body.splitlines():
        text = _BULLET.sub("", line).strip().strip("*_")
        if text:
            return text
    return ""


def abstract_of(document: str, *, bodies: Mapping[str, str] | None = None) -> str:
    """One line for archive listings and search hits: the title says which session, the
    first sentence of the current state says where it stands; bounded to MAX_ABSTRACT.
    ``bodies``: the document's sections when the caller has them (a merge's), which spares
    reading a 12K-token document again (about 0.1 ms)."""
    if bodies is None:
        bodies = parse_document(document)
    title = _first_line(bodies.get("Session Title", ""))
    state = _first_line(bodies.get("Current State", ""))
    state = _SENTENCE_END.split(state, maxsplit=1)[0] if state else ""
    text = " — ".join(part for part in (title, state) if part)
    if not text:
        text = _first_line(bodies.get("Task & Goals", "")) or "working memory updated"
    return text if len(text) <= MAX_ABSTRACT else text[: MAX_ABSTRACT - 1].rstrip() + "…"
