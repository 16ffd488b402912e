"""Where a commit splits the live messages: never between a tool call and its result, and,
when a commit keeps turns, never inside a turn.

The messages API rejects a tool result whose call it has not seen, so the kept part of a
session must hold the call of every result it holds. A commit keeps the last ``keep``
messages; when a kept result answers a call outside them, the boundary moves back to that
call, which may bring in more results, and so on. Sessions are long and commits frequent, so
the rule must read O(keep) rows, not the session: it is written here as a pure function that
a store drives with the rows it fetches on demand, and every store gets the same answer.

The facts, as the stores record them today:
- the call of a tool id is the *latest* stored message that makes a call with that id (a
  reused id points at its newest call), archived messages included;
- a result whose id no stored message calls (unmatched) does not move the boundary;
- a result whose call is already archived moves the boundary to ``first``: nothing more is
  archived while it is kept;
- the boundary never goes below ``first``, the first live position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple


class SplitRow(NamedTuple):
    """One stored message, reduced to what the split rule reads.

    ``tool_use_ids`` lets a store that has the calls at hand answer without index lookups. A
    store that keeps calls only in an index by id leaves them empty for every row and answers
    ``NeedRows.calls`` instead; listing them for some rows and not others is not allowed,
    since a row's call is taken as the latest one when no later row calls the same id.
    """

    position: int
    tool_use_ids: tuple[str, ...]
    tool_result_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NeedRows:
    """What ``split_boundary`` needs before it can answer; call it again with it added.

    Add to ``rows`` every stored message at positions ``since`` ≤ p < ``until`` that has a
    tool call or result (others may be left out) and pass ``since``; add to ``calls`` the
    latest call position of each id in ``calls``, None for an id no stored message calls.
    """

    since: int
    until: int
    calls: frozenset[str]


def split_boundary(
    first: int,
    next_pos: int,
    keep: int,
    rows: Sequence[SplitRow] = (),
    since: int | None = None,
    calls: Mapping[str, int | None] | None = None,
) -> int | NeedRows:
    """The first position a commit keeps, or what must be fetched to know it.

    ``first`` and ``next_pos`` bound the live messages (first ≤ p < next_pos). ``rows``
    holds, for every position from ``since`` (None: nothing fetched yet) to ``next_pos``,
    the messages with tool ids, as ``NeedRows`` describes; ``calls`` the looked-up call
    positions. The function keeps no state: a store starts with no rows and loops, adding
    what each ``NeedRows`` asks for, until it gets an int. In the usual case (every kept
    result's call is close by) it asks for the keep window and one lookup.
    """
    boundary = max(first, next_pos - keep)
    if boundary <= first or boundary >= next_pos:
        return boundary
    covered = next_pos if since is None else since
    if boundary < covered:
        return NeedRows(boundary, covered, frozenset())
    looked_up: Mapping[str, int | None] = calls if calls is not None else {}
    latest: dict[str, int] = {}
    results: list[tuple[int, tuple[str, ...]]] = []
    for row in rows:
        if row.position < covered:
            continue  # only a complete suffix tells which call is the latest
        for tool_id in row.tool_use_ids:
            if latest.get(tool_id, -1) < row.position:
                latest[tool_id] = row.position
        if row.tool_result_ids:
            results.append((row.position, row.tool_result_ids))
    results.sort()
    pending = len(results)  # results[:pending] are below the kept rows examined so far
    while True:
        earliest = boundary
        missing: set[str] = set()
        index = pending
        while index > 0 and results[index - 1][0] >= boundary:
            index -= 1
            for tool_id in results[index][1]:
                if tool_id in latest:
                    earliest = min(earliest, latest[tool_id])
                elif tool_id in looked_up:
                    position = looked_up[tool_id]
                    if position is not None:
                        earliest = min(earliest, position)
                else:
                    missing.add(tool_id)
        if missing:
            return NeedRows(covered, covered, frozenset(missing))
        pending = index
        moved = max(first, earliest)
        if moved in (boundary, first):
            return moved
        boundary = moved
        if boundary < covered:
            return NeedRows(boundary, covered, frozenset())


def turn_start(requests: Sequence[int], keep_turns: int, first: int) -> int:
    """The first position a commit keeping the newest ``keep_turns`` turns keeps.

    A turn starts at a request (``wm_core.is_request``) and runs to the next one, with every
    assistant step and tool exchange between. ``requests`` holds the positions of the
    newest live requests, at least ``keep_turns`` of them when there are that many, in any
    order. With fewer requests than turns to keep, everything is kept (``first``).
    """
    if keep_turns <= 0:
        raise ValueError("keep_turns must be positive")
    newest = sorted((p for p in requests if p >= first), reverse=True)
    if len(newest) < keep_turns:
        return first
    return newest[keep_turns - 1]


def turn_aligned(boundary: int, requests: Sequence[int], first: int) -> int:
    """``boundary`` moved back to the start of the turn it falls in: the latest request at
    or before it, or ``first`` when no request precedes it (the messages before the first
    request answer nothing, so they stay with it). ``requests`` must hold every live request
    position at or before ``boundary``."""
    before = [p for p in requests if first <= p <= boundary]
    return max(before) if before else first
