"""The snippet a search hit shows: at most SNIPPET characters of the matching text, centred
on the match, so a hit is readable without expanding its archive or output."""

from __future__ import annotations

from collections.abc import Sequence

from wm_core import Message
from wm_server.services.literal_search import Literal
from wm_server.storage.codec import searchable_text

SNIPPET = 1500


def centred(text: str, at: int, width: int, size: int = SNIPPET) -> str:
    """At most ``size`` characters of ``text`` centred on the match at ``at`` of ``width``."""
    if len(text) <= size:
        return text
    start = max(0, min(at + width // 2 - size // 2, len(text) - size))
    return text[start : start + size]


def snippet(message: Message, literal: Literal) -> str:
    """At most SNIPPET characters of the message's first chunk that holds the literal,
    centred on the match."""
    for chunk in searchable_text(message):
        found = literal.find(chunk)
        if found is not None:
            return centred(chunk, *found)
    return ""


def ranked_snippet(message: Message, words: Sequence[str]) -> str:
    """At most SNIPPET characters of the message's text around its first word of the query."""
    text = " ".join(searchable_text(message))
    lowered = text.lower()
    found = [(at, len(w)) for w in words if (at := lowered.find(w)) >= 0]
    at, width = min(found) if found else (0, 0)
    return centred(text, at, width)
