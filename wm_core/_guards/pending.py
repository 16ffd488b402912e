"""Pending items: what a guard refused is kept until the working memory takes it in.

A fact refused at emergency size, a line cut by the size bound, an item of a rejected
consolidation: each is recorded in a decision, but a decision is history, not memory. Kept
as pending items of the session, they are shown to the model in the next update prompt so
that a consolidation can fold them in. An item leaves the list once the working memory holds
it (its text, or every detail of it: names, numbers, dates) and the list is bounded: the
newest items are kept, the number dropped is reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from wm_core._decisions import Decision
from wm_core._document.items import item_key
from wm_core._document.sections import CURRENT_STATE, SESSION_TITLE
from wm_core._guards.key_facts import is_sentinel, lexical_anchors

# An item is shown and stored at most this long.
MAX_PENDING_CHARS = 500
_SUPERSEDED = frozenset({SESSION_TITLE, CURRENT_STATE})


@dataclass(frozen=True, slots=True)
class PendingItem:
    """One refused item: its section, its text, which guard refused it, and in which archive."""

    section: str
    text: str
    source: str
    archive_seq: int = 0


def _holds(document_lowered: str, text: str) -> bool:
    if text.lower().lstrip("- ").strip() in document_lowered:
        return True
    anchors = lexical_anchors(text)
    return bool(anchors) and all(anchor in document_lowered for anchor in anchors)


def refused_items(decisions: Iterable[Decision], archive_seq: int) -> list[PendingItem]:
    """The items the decisions of one merge refused, in order. The title and Current State
    are left out: what is cut from them is superseded by the next turn, not owed to it."""
    return [
        PendingItem(d.section, item[:MAX_PENDING_CHARS], d.guard.value, archive_seq)
        for d in decisions
        if d.section not in _SUPERSEDED
        for item in d.items_refused
        if item.strip() and not is_sentinel(item)
    ]


def carry_pending(
    previous: Sequence[PendingItem],
    refused: Sequence[PendingItem],
    document: str,
    limit: int,
) -> tuple[tuple[PendingItem, ...], int]:
    """The pending items after a merge, and how many were dropped to stay within ``limit``:
    earlier ones and the newly refused ones, without those the document now holds, each
    once (per section)."""
    lowered = document.lower()
    seen: set[tuple[str, str]] = set()
    kept: list[PendingItem] = []
    for item in [*previous, *refused]:
        key = (item.section, item_key(item.text))
        if key in seen or _holds(lowered, item.text):
            continue
        seen.add(key)
        kept.append(item)
    dropped = max(len(kept) - max(limit, 0), 0)
    return tuple(kept[dropped:]), dropped


def pending_reminder(items: Sequence[PendingItem]) -> str:
    """The block of the update prompt that lists the pending items (empty for none)."""
    if not items:
        return ""
    lines = [f"- [{item.section}] {item.text}" for item in items]
    return (
        "<pending_items>\n"
        "Not yet in the working memory (refused earlier because a section was full or by a "
        "guard). Consolidate them in where they still matter, e.g. in one consolidating "
        "UPDATE of their section:\n" + "\n".join(lines) + "\n</pending_items>"
    )
