"""Cutting parts of messages to fit a budget: the head and tail of a part around a marker
that says how much is missing and where the whole is (a pointer the model can follow), never
below MIN_CUT_KEEP characters; and the current turn fitted to a room, middle steps evicted
only when even their cut forms do not fit. Pure: no I/O."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from wm_core._messages import Message, Part, TextPart, ToolResultPart, ToolUsePart, message_tokens
from wm_core._session.turns import units_cost
from wm_core._tokens.estimate import estimate_tokens

# A part is never cut below this many characters: its head and tail must still say what it is.
MIN_CUT_KEEP = 400
# The key under which a cut tool input keeps its head and tail (the input must stay an object).
CUT_INPUT_KEY = "cut_input"


def _part_text(part: Part) -> str:
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, ToolUsePart):
        return part.input_json
    return part.content


def _with_text(part: Part, text: str, cut: bool) -> Part:
    if isinstance(part, TextPart):
        return TextPart(text)
    if isinstance(part, ToolUsePart):
        # A cut input must stay a JSON object: the head and tail of its text, as one string.
        return ToolUsePart(part.id, part.name, json.dumps({CUT_INPUT_KEY: text}) if cut else text)
    return ToolResultPart(part.tool_use_id, text, part.is_error)


def cut_marker(characters: int, pointer: str) -> str:
    """The line that replaces the middle of a cut part; it says how much is missing and where
    the whole text can be read, so the model can fetch it instead of guessing."""
    where = pointer or "the session's stored messages"
    return f"\n[… {characters:,} characters cut here to fit the context budget; full text: {where} …]\n"


def cut_text(text: str, keep: int, pointer: str) -> str:
    """The first and last ``keep`` // 2 characters of ``text`` around a cut marker (the tail
    gets the odd one: the end of a log or a traceback is where its outcome is)."""
    if keep >= len(text):
        return text
    head = keep // 2
    tail = keep - head
    return text[:head] + cut_marker(len(text) - keep, pointer) + (text[-tail:] if tail else "")


class Cut(NamedTuple):
    """A part cut to fit the budget: the message it belongs to and what was cut."""

    message_id: str
    note: str


def cut_to_fit(
    messages: list[Message],
    indexes: Sequence[int],
    room: int,
    pointers: Mapping[str, str],
) -> list[Cut]:
    """Cut the largest parts of ``messages[indexes]`` (in place) until they cost at most
    ``room`` tokens, each to no less than MIN_CUT_KEEP characters; returns what was cut."""
    report: list[Cut] = []
    done: set[tuple[int, int]] = set()
    while units_cost(messages, indexes) > room:
        best: tuple[int, int, int] | None = None  # (tokens, message index, part index)
        for i in indexes:
            for j, part in enumerate(messages[i].parts):
                text = _part_text(part)
                if (i, j) in done or len(text) <= MIN_CUT_KEEP:
                    continue
                tokens = estimate_tokens(text)
                if best is None or tokens > best[0]:
                    best = (tokens, i, j)
        if best is None:
            break  # nothing left to cut: the caller evicts
        tokens, i, j = best
        done.add((i, j))
        message = messages[i]
        part = message.parts[j]
        text = _part_text(part)
        excess = units_cost(messages, indexes) - room
        pointer = pointers.get(message.id, f"message {message.id}")
        marker = estimate_tokens(cut_marker(len(text), pointer)) + 8  # + JSON quoting of an input
        wanted = max(tokens - excess - marker, 0)
        keep = max(MIN_CUT_KEEP, len(text) * wanted // max(tokens, 1))
        if keep >= len(text):
            continue
        parts = list(message.parts)
        parts[j] = _with_text(part, cut_text(text, keep, pointer), True)
        frozen = tuple(parts)
        messages[i] = Message(message.id, message.role, frozen, message_tokens(frozen))
        report.append(
            Cut(message.id, f"message {message.id} part {j}: {len(text):,} → {keep:,} characters")
        )
    return report


def smallest_tokens(message: Message, pointer: str) -> int:
    """The estimate of ``message`` with every part cut as far as cutting goes."""
    parts = tuple(
        _with_text(p, cut_text(_part_text(p), MIN_CUT_KEEP, pointer), True)
        if len(_part_text(p)) > MIN_CUT_KEEP
        else p
        for p in message.parts
    )
    return message_tokens(parts) + 1


def fit_turn(
    messages: Sequence[Message],
    units: Sequence[list[int]],
    turn: tuple[int, int],
    room: int,
    pointers: Mapping[str, str],
) -> tuple[list[Message], list[int], list[Cut]]:
    """The messages with the current turn's largest parts cut so that it fits ``room``, the
    turn's units that stay, and what was cut. Middle steps are evicted oldest first only
    while even their cut forms do not fit; when the request and the latest step alone do
    not fit cut, the units that fit stay, newest first."""
    first, must = turn
    middle = list(range(first + 1, must)) if first < must else []
    fixed = [first, *range(max(must, first + 1), len(units))]
    smallest = {
        u: sum(smallest_tokens(messages[i], pointers.get(messages[i].id, "")) for i in units[u])
        for u in range(first, len(units))
    }
    floor = sum(smallest[u] for u in fixed)
    while middle and floor + sum(smallest[u] for u in middle) > room:
        middle.pop(0)
    while True:
        kept = sorted(fixed + middle)
        work = list(messages)
        cuts = cut_to_fit(work, [i for u in kept for i in units[u]], room, pointers)
        if units_cost(work, [i for u in kept for i in units[u]]) <= room:
            return work, kept, cuts
        if not middle:
            break
        middle.pop(0)
    stay: list[int] = []
    spent = 0
    for u in reversed(kept):
        cost = units_cost(work, units[u])
        if spent + cost <= room:
            stay.append(u)
            spent += cost
    return work, sorted(stay), cuts
