"""Pending items: what a guard refused is kept until the working memory takes it in.

A fact refused at emergency size, a line cut by the size bound, an item of a rejected
consolidation: each is recorded in a decision, but a decision is history, not memory. Kept
as pending items of the session, they are shown to the model in the next update prompt so
that a consolidation can fold them in. An item leaves the list once the working memory holds
it (its text, or every detail of it: names, dates, numbers, identifiers; names alone are
not enough, see ``_details``).

The list is bounded twice, without forgetting silently. By number: beyond ``limit`` the
oldest items are folded into one *overflow item* (source ``overflow``, one
``[section] text`` line per item), so a model that never consolidates cannot make the list
long, yet every refused fact stays readable and in the prompt. By size: the items together
stay within ``max_tokens`` (by default about what 30 items of 500 characters take, the
bound the number alone used to give); only past that are the oldest lines dropped, and the
number dropped is reported, since the prompt they are shown in must stay bounded too. An
overflow item is unfolded again at every merge, so each of its lines leaves on its own once
the working memory holds it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from wm_core._decisions import Decision
from wm_core._document.items import item_key
from wm_core._document.sections import CURRENT_STATE, SESSION_TITLE
from wm_core._guards.key_facts import is_sentinel, lexical_anchors
from wm_core._tokens.estimate import estimate_tokens

# An item is shown and stored at most this long (the overflow item: each of its lines).
MAX_PENDING_CHARS = 500
# What all pending items of a session may take, in estimated tokens (see the module text).
MAX_PENDING_TOKENS = 4_000
# The source of the item that holds the oldest items beyond the bound on their number.
OVERFLOW = "overflow"
_MARKER = re.compile(r"^[-*+]\s+")  # a cut line's bullet: the item is its text
_TOKEN = re.compile(r"[\w$][\w$./:,-]*")
_SPECIFIC = re.compile(r"[0-9_/]|\w\.\w")
_OVERFLOW_LINE = re.compile(r"^\[(?P<section>[^\]\n]+)\] (?P<text>.+)$")
_SUPERSEDED = frozenset({SESSION_TITLE, CURRENT_STATE})


@dataclass(frozen=True, slots=True)
class PendingItem:
    """One refused item: its section, its text, which guard refused it, and in which archive."""

    section: str
    text: str
    source: str
    archive_seq: int = 0


def _details(text: str) -> set[str]:
    """What a consolidation must keep of an item for the item to be in the document: its
    lexical anchors (names, dates, numbers with units) and every token carrying a digit or
    an identifier's ``_``, ``/`` or ``.`` (a ticket ``HLM-4203``, a bare ``60``,
    ``work_mem``, a path). Names alone are not enough: a document that names the same
    people and the same project does not hold the ticket or the value of this item."""
    lowered = text.lower()
    tokens = {t.strip(".,;:") for t in _TOKEN.findall(lowered)}
    return lexical_anchors(text, lowered) | {t for t in tokens if _SPECIFIC.search(t)}


def held_in(document_lowered: str, text: str) -> bool:
    """Whether a text (lowered) holds the item ``text``: the whole item, or every detail."""
    if text.lower().lstrip("- ").strip() in document_lowered:
        return True
    details = _details(text)
    return bool(details) and all(detail in document_lowered for detail in details)


def refused_items(decisions: Iterable[Decision], archive_seq: int) -> list[PendingItem]:
    """The items the decisions of one merge refused, in order. The title and Current State
    are left out: what is cut from them is superseded by the next turn, not owed to it."""
    return [
        PendingItem(d.section, text[:MAX_PENDING_CHARS], d.guard.value, archive_seq)
        for d in decisions
        if d.section not in _SUPERSEDED
        for item in d.items_refused
        if (text := _MARKER.sub("", item.strip(), count=1)) and not is_sentinel(text)
    ]


def _unfold(items: Iterable[PendingItem]) -> Iterator[PendingItem]:
    """Items with every overflow item split back into the items it holds."""
    for item in items:
        if item.source != OVERFLOW:
            yield item
            continue
        for line in item.text.split("\n"):
            match = _OVERFLOW_LINE.match(line.strip())
            if match:
                yield PendingItem(match["section"], match["text"], OVERFLOW, 0)


def unfold_pending(items: Iterable[PendingItem]) -> tuple[PendingItem, ...]:
    """The items one by one, each overflow item split back into the items it holds: what
    a reader of each item (memory extraction) must see rather than one joined text."""
    return tuple(_unfold(items))


def _overflow_line(item: PendingItem) -> str:
    return f"[{item.section}] " + " ".join(item.text.split())


def _cost(text: str) -> int:
    return estimate_tokens(text) + 1  # its line in the prompt


def carry_pending(
    previous: Sequence[PendingItem],
    refused: Sequence[PendingItem],
    document: str,
    limit: int,
    max_tokens: int = MAX_PENDING_TOKENS,
) -> tuple[tuple[PendingItem, ...], int]:
    """The pending items after a merge, and how many were dropped to stay within
    ``max_tokens`` (:func:`settle_pending`, counting what leaves the list)."""
    kept, dropped = settle_pending(previous, refused, document, limit, max_tokens)
    return kept, len(dropped)


def settle_pending(
    previous: Sequence[PendingItem],
    refused: Sequence[PendingItem],
    document: str,
    limit: int,
    max_tokens: int = MAX_PENDING_TOKENS,
) -> tuple[tuple[PendingItem, ...], tuple[PendingItem, ...]]:
    """The pending items after a merge, and the items that leave the list to keep it
    within ``max_tokens``, oldest first: earlier ones and the newly refused ones, without
    those the document now holds, each once (per section); beyond ``limit`` items the oldest
    are folded into one overflow item, which comes first (see the module text). The caller
    owes the dropped items a place outside the list (Phase 2 writes them to long-term memory,
    ``wm_core.safekeeping_ops``): they leave the prompt, not the session's reach."""
    lowered = document.lower()
    seen: set[tuple[str, str]] = set()
    kept: list[PendingItem] = []
    for item in _unfold([*previous, *refused]):
        key = (item.section, item_key(item.text))
        if key in seen or held_in(lowered, item.text):
            continue
        seen.add(key)
        kept.append(item)
    if limit <= 0:
        return (), tuple(kept)
    folded_count = len(kept) - limit + 1 if len(kept) > limit else 0
    folded = kept[:folded_count]
    rest = kept[folded_count:]
    used = sum(_cost(_overflow_line(item)) for item in folded)
    used += sum(_cost(item.text) for item in rest)
    dropped: list[PendingItem] = []
    while used > max(max_tokens, 0) and (folded or rest):
        if folded:
            item = folded.pop(0)
            used -= _cost(_overflow_line(item))
        else:
            item = rest.pop(0)
            used -= _cost(item.text)
        dropped.append(item)
    if not folded:
        return tuple(rest), tuple(dropped)
    overflow = "\n".join(_overflow_line(item) for item in folded)
    return (PendingItem("", overflow, OVERFLOW, 0), *rest), tuple(dropped)


def pending_reminder(items: Sequence[PendingItem]) -> str:
    """The block of the update prompt that lists the pending items (empty for none)."""
    if not items:
        return ""
    lines = [
        f"- {line}" if item.source == OVERFLOW else f"- [{item.section}] {item.text}"
        for item in items
        for line in (item.text.split("\n") if item.source == OVERFLOW else (item.text,))
    ]
    return (
        "<pending_items>\n"
        "Not yet in the working memory (refused earlier because a section was full or by a "
        "guard). Consolidate them in where they still matter, e.g. in one consolidating "
        "UPDATE of their section:\n" + "\n".join(lines) + "\n</pending_items>"
    )
