"""Messages as the Messages API takes them: tool units (a call travels with every message
answering it), the current turn (what a context must always keep), and normalization (roles
mapped to user/assistant, neighbours merged, tool results first, orphans left out, an
omitted-note when the context would not start with the user). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Sequence

from wm_core._messages import (
    Message,
    Part,
    Role,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    message_tokens,
)

OMITTED_NOTE = "[Earlier conversation omitted to fit the context budget.]"


def tool_units(messages: Sequence[Message]) -> list[list[int]]:
    """Indexes grouped so that a tool call and every message answering it stay together."""
    # Parts are walked once, inline (not through Message.tool_*_ids): this runs on every
    # message of every AssembleContext.
    result_at: dict[str, int] = {}
    uses: list[tuple[int, str]] = []
    for index, message in enumerate(messages):
        for part in message.parts:
            if type(part) is ToolResultPart:
                result_at.setdefault(part.tool_use_id, index)
            elif type(part) is ToolUsePart:
                uses.append((index, part.id))
    # How far each message reaches: its own index, or the first answer to a call it makes.
    reach = list(range(len(messages)))
    for index, call in uses:
        answer = result_at.get(call, index)
        if answer > reach[index]:
            reach[index] = answer
    units: list[list[int]] = []
    index = 0
    while index < len(messages):
        end = reach[index]
        cursor = index + 1
        while cursor <= end:
            if reach[cursor] > end:
                end = reach[cursor]
            cursor += 1
        units.append(list(range(index, end + 1)))
        index = end + 1
    return units


def is_request(message: Message) -> bool:
    """A user message that asks something: it has text of its own, not only tool results.
    A turn starts at each request; the runtime's tool results reach us as user messages too."""
    return message.role is Role.USER and any(
        isinstance(p, TextPart) and p.text.strip() for p in message.parts
    )


def current_turn(messages: Sequence[Message], units: Sequence[list[int]]) -> tuple[int, int]:
    """(first unit of the current turn, first unit that must stay): the turn runs from the
    newest request (or the latest assistant step, if that is older) to the end; the request's
    unit and everything from the latest assistant step on must stay; the steps in between
    are kept too while cutting can make room, and evicted oldest first when it cannot.
    (len(units), len(units)) when there is neither."""

    def unit_of(index: int) -> int:
        # Units are runs of consecutive indexes, and the messages asked about are the newest:
        # searched from the end, not mapped for every message.
        return next(u for u in range(len(units) - 1, -1, -1) if units[u][0] <= index)

    request = next((i for i in range(len(messages) - 1, -1, -1) if is_request(messages[i])), None)
    step = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i].role is Role.ASSISTANT), None
    )
    if request is None and step is None:
        return len(units), len(units)
    firsts = [unit_of(i) for i in (request, step) if i is not None]
    last_step = unit_of(step) if step is not None else len(units)
    return min(firsts), max(min(firsts), min(last_step, len(units)))


def _api_role(role: Role) -> Role:
    return Role.ASSISTANT if role is Role.ASSISTANT else Role.USER


def _results_first(parts: Sequence[Part]) -> tuple[Part, ...]:
    """The Messages API wants a user message's tool_result blocks before anything else."""
    results = [p for p in parts if isinstance(p, ToolResultPart)]
    if not results:
        return tuple(parts)
    return tuple(results) + tuple(p for p in parts if not isinstance(p, ToolResultPart))


def _as_is(message: Message, used: set[str], answered: set[str]) -> bool:
    """Whether normalizing leaves ``message`` itself (most messages: checked cheaply)."""
    role = message.role
    if role is Role.SYSTEM or role is Role.TOOL:
        return False
    seen_other = False
    for part in message.parts:
        kind = type(part)
        if kind is ToolUsePart:
            if part.id not in answered:  # type: ignore[union-attr]
                return False
            seen_other = True
        elif kind is ToolResultPart:
            if part.tool_use_id not in used or seen_other:  # type: ignore[union-attr]
                return False  # an orphan, or a result after other blocks of a user message
        else:
            seen_other = True
    return True


def normalize(messages: Sequence[Message]) -> list[Message]:
    """Pair tool calls with results, map roles to user/assistant, merge neighbours, put
    tool results first in user messages."""
    used: set[str] = set()
    answered: set[str] = set()
    for m in messages:
        for p in m.parts:
            if type(p) is ToolUsePart:
                used.add(p.id)
            elif type(p) is ToolResultPart:
                answered.add(p.tool_use_id)
    out: list[Message] = []
    for message in messages:
        if _as_is(message, used, answered) and not (out and out[-1].role is message.role):
            out.append(message)  # unchanged: its estimate stands (most messages, cheaply)
            continue
        parts: list[Part] = []
        for part in message.parts:
            if isinstance(part, ToolUsePart) and part.id not in answered:
                continue
            if isinstance(part, ToolResultPart) and part.tool_use_id not in used:
                continue
            if message.role is Role.SYSTEM and isinstance(part, TextPart):
                part = TextPart(f"[System note] {part.text}")
            parts.append(part)
        if not parts:
            continue
        role = _api_role(message.role)
        if out and out[-1].role is role:
            merged = out[-1].parts + tuple(parts)
            if role is Role.USER:
                merged = _results_first(merged)
            out[-1] = Message(out[-1].id, role, merged, message_tokens(merged))
        else:
            frozen = _results_first(parts) if role is Role.USER else tuple(parts)
            if role is message.role and frozen == message.parts:
                out.append(message)
            else:
                out.append(Message(message.id, role, frozen, message_tokens(frozen)))
    if out and out[0].role is not Role.USER:
        note = (TextPart(OMITTED_NOTE),)
        out.insert(0, Message("omitted", Role.USER, note, message_tokens(note)))
    return out


def units_cost(messages: Sequence[Message], indexes: Sequence[int]) -> int:
    # One token of slack per message: merging neighbours re-rounds their estimate.
    return sum(messages[i].estimated_tokens + 1 for i in indexes)


def total_tokens(messages: Sequence[Message]) -> int:
    return sum(m.estimated_tokens for m in messages)
