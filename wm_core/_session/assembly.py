"""Building the next model context within a token budget (pure: no I/O).

Layers, in order: one user message "[Session History Summary]" with the latest completed
working memory (trimmed to its own budget, never silently), then the raw messages that no
completed working memory covers yet (archives still pending, running or failed), then the live
messages. The result always alternates roles starting with the user, and every tool call
travels with its result, so it can be sent to the Messages API as it is.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from wm_core._document.sections import SECTIONS
from wm_core._messages import (
    Message,
    Part,
    Role,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    message_tokens,
)
from wm_core._session.summary_trim import SUMMARY_HEADER as SUMMARY_HEADER
from wm_core._session.summary_trim import SummaryTrim
from wm_core._session.summary_trim import trim_working_memory as trim_working_memory
from wm_core._tokens.estimate import estimate_tokens

OMITTED_NOTE = "[Earlier conversation omitted to fit the context budget.]"
WM_MAX_TOKENS = 8000
# A part is never cut below this many characters: its head and tail must still say what it is.
MIN_CUT_KEEP = 400
# The key under which a cut tool input keeps its head and tail (the input must stay an object).
CUT_INPUT_KEY = "cut_input"

# The tools the system-prompt addition may tell the model to use (GetToolDefinitions serves
# them); a runtime that registered only some gets an addition that names only those.
ARCHIVE_SEARCH = "archive_search"
ARCHIVE_EXPAND = "archive_expand"
TOOL_OUTPUT_READ = "tool_output_read"
RECALL_TOOLS = (ARCHIVE_SEARCH, ARCHIVE_EXPAND, TOOL_OUTPUT_READ)
# Long-term memory tools: named in the addition only when a runtime registered them.
MEMORY_SEARCH = "memory_search"
MEMORY_STORE = "memory_store"
MEMORY_FORGET = "memory_forget"
MEMORY_TOOLS = (MEMORY_SEARCH, MEMORY_STORE, MEMORY_FORGET)

_SUMMARY_GUIDE = """\
This conversation continues a longer session. Its history reaches you in two layers:
1. A message headed [Session History Summary]: a structured working memory that condenses
   everything earlier than the messages that follow it. It is lossy but curated: use it as
   background knowledge of what happened, what was decided and what is still open.
2. The messages after it: the most recent part of the session, verbatim.
How to use them:
- When the summary and a recent message disagree, the recent message is right.
- Do not invent details the summary does not state."""


def system_prompt_addition(has_summary: bool, tools: Collection[str] | None = None) -> str:
    """How to read the summary and recall what it condensed, naming only ``tools`` (None:
    every recall tool). Empty without a summary and without a tool to mention."""
    names = set(RECALL_TOOLS if tools is None else tools)
    lines: list[str] = []
    if has_summary:
        lines.append(_SUMMARY_GUIDE)
        check = (
            "- Before saying that something was never mentioned, re-read every section of the"
            "\n  summary (look for synonyms and indirect references)"
        )
        if ARCHIVE_SEARCH in names:
            check += (
                ", then call archive_search with two or three\n  concrete keywords from the"
                " question (names, paths, numbers), trying at least two variants."
            )
        else:
            check += "."
        lines.append(check)
        if ARCHIVE_EXPAND in names:
            found = "use archive_search, then " if ARCHIVE_SEARCH in names else "use "
            lines.append(
                "- When the summary names a topic but lacks the exact detail (a command, a"
                f" path, a value),\n  {found}archive_expand on the archive it points to."
            )
    if TOOL_OUTPUT_READ in names:
        lines.append(
            "- A tool output headed [Tool output ID stored in full ...] is a synopsis of a"
            " larger output;\n  call tool_output_read with that id (and the lines you need)"
            " before relying on what it does not show."
        )
    if has_summary:
        lines.append("Only after these checks conclude that the information is not available.")
    memory = _memory_guide(set(tools or ()))
    if memory:
        lines.append(memory)
    return "\n".join(lines) if has_summary or memory else ""


def _memory_guide(names: set[str]) -> str:
    """What to do with long-term memories, for the memory tools a runtime registered."""
    lines: list[str] = []
    if MEMORY_SEARCH in names:
        lines.append(
            "- Long-term memories outlive this session: call memory_search with the question's"
            " key words\n  before asking the user for something they may have told you before."
        )
    if MEMORY_STORE in names:
        lines.append(
            "- When the user states a lasting preference, fact about themselves or a decision,"
            "\n  call memory_store with one short sentence."
        )
    if MEMORY_FORGET in names:
        lines.append(
            "- When the user asks you to forget something, call memory_forget with its memory id."
        )
    return "\n".join(lines)


SYSTEM_PROMPT_ADDITION = system_prompt_addition(True)


@dataclass(frozen=True, slots=True)
class Budget:
    """How a context budget is spent: what the reply and the instructions need comes first,
    so the history never crowds out the answer; ``usable`` is what the context's parts share
    (see :func:`assemble` for how), and the working memory never takes more than
    ``working_memory`` (its own bound, WM_MAX_TOKENS)."""

    total: int
    reply_reserve: int
    instructions: int
    usable: int
    working_memory: int


def plan_budget(total: int, instruction_tokens: int) -> Budget:
    """15 % (at least 20,000 tokens from 40,000 on) is held back for the reply; the rest,
    after the instructions, is usable by the context's parts."""
    reserve = math.ceil(total * 0.15)
    if total >= 40_000:
        reserve = max(reserve, 20_000)
    reserve = min(total, reserve)
    usable = max(total - reserve - instruction_tokens, 0)
    return Budget(total, reserve, instruction_tokens, usable, min(usable, WM_MAX_TOKENS))


# The parts of a context a report names (AssembleContextResponse.parts); the recalled
# memories are the server's (they travel in the instructions), the others assemble()'s.
RECALLED_MEMORIES = "recalled_memories"
WORKING_MEMORY = "working_memory"
UNCOVERED_ARCHIVES = "uncovered_archives"
LIVE_MESSAGES = "live_messages"
CURRENT_TURN = "current_turn"


@dataclass(frozen=True, slots=True)
class PartUsage:
    """One part of the context: the tokens it needed whole, the tokens it got, and how many
    of its items (working-memory bullets, messages, cut parts of the current turn) it lost."""

    part: str
    needed_tokens: int
    kept_tokens: int
    dropped_items: int


@dataclass
class AssembledContext:
    """The context ready to send, with the figures a caller needs to trust it: what was
    trimmed, cut or dropped is reported, never left out silently."""

    system_prompt_addition: str
    messages: list[Message]
    estimated_tokens: int
    reply_reserve: int
    working_memory_tokens: int
    trimmed_items: list[str] = field(default_factory=list)
    included_source_messages: int = 0
    dropped_source_messages: int = 0
    working_memory_included: bool = False
    cut_parts: list[str] = field(default_factory=list)
    # Per part: what it needed, kept and lost (WORKING_MEMORY, UNCOVERED_ARCHIVES, ...).
    parts: list[PartUsage] = field(default_factory=list)
    # Of ``usable_tokens`` (the budget less the reply reserve and the instructions).
    usable_tokens: int = 0


def _units(messages: Sequence[Message]) -> list[list[int]]:
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


def _current_turn(messages: Sequence[Message], units: Sequence[list[int]]) -> tuple[int, int]:
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


def _normalize(messages: Sequence[Message]) -> list[Message]:
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


def _cost(messages: Sequence[Message], indexes: Sequence[int]) -> int:
    # One token of slack per message: merging neighbours re-rounds their estimate.
    return sum(messages[i].estimated_tokens + 1 for i in indexes)


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


def _cut_to_fit(
    messages: list[Message],
    indexes: Sequence[int],
    room: int,
    pointers: Mapping[str, str],
) -> list[Cut]:
    """Cut the largest parts of ``messages[indexes]`` (in place) until they cost at most
    ``room`` tokens, each to no less than MIN_CUT_KEEP characters; returns what was cut."""
    report: list[Cut] = []
    done: set[tuple[int, int]] = set()
    while _cost(messages, indexes) > room:
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
        excess = _cost(messages, indexes) - room
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


def _smallest(message: Message, pointer: str) -> int:
    """The estimate of ``message`` with every part cut as far as cutting goes."""
    parts = tuple(
        _with_text(p, cut_text(_part_text(p), MIN_CUT_KEEP, pointer), True)
        if len(_part_text(p)) > MIN_CUT_KEEP
        else p
        for p in message.parts
    )
    return message_tokens(parts) + 1


def _fit_turn(
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
        u: sum(_smallest(messages[i], pointers.get(messages[i].id, "")) for i in units[u])
        for u in range(first, len(units))
    }
    floor = sum(smallest[u] for u in fixed)
    while middle and floor + sum(smallest[u] for u in middle) > room:
        middle.pop(0)
    while True:
        kept = sorted(fixed + middle)
        work = list(messages)
        cuts = _cut_to_fit(work, [i for u in kept for i in units[u]], room, pointers)
        if _cost(work, [i for u in kept for i in units[u]]) <= room:
            return work, kept, cuts
        if not middle:
            break
        middle.pop(0)
    stay: list[int] = []
    spent = 0
    for u in reversed(kept):
        cost = _cost(work, units[u])
        if spent + cost <= room:
            stay.append(u)
            spent += cost
    return work, sorted(stay), cuts


def assemble(
    token_budget: int,
    system_prompt: str,
    working_memory: str | None,
    messages: Sequence[Message],
    pointers: Mapping[str, str] | None = None,
    tools: Collection[str] | None = None,
    live_from: int | None = None,
) -> AssembledContext:
    """The next model context: summary, uncovered history, then live messages.

    The split is adaptive. The reply reserve and the instructions come off first; the parts
    share the rest (``usable``). When everything fits, everything goes in as it is (the
    working memory up to its own bound, WM_MAX_TOKENS). Otherwise one pass hands the room
    out as a running budget (:func:`_share`): the current turn (the newest request and every
    step since) takes what it needs, its largest parts cut only when it would not fit beside
    the smallest summary (title and state); then the working memory takes all it needs when
    the older messages fit beside it, else at least half of what is left, trimmed by section
    priority; the older messages fill the rest, newest first; room a part leaves unused goes
    to the other (trimmed bullets come back; the newest message that did not fit comes in
    cut). What each part needed, kept and lost is reported (``parts``). Tool calls and
    results are kept or dropped as units and roles are normalized, so the Messages API
    accepts the result as it is. ``messages`` from ``live_from`` on are live (before:
    archived, not covered by the working memory); the system-prompt addition names only the
    recall ``tools`` the runtime registered (None: all of them)."""
    addition = system_prompt_addition(bool(working_memory), tools)
    instruction_tokens = estimate_tokens(system_prompt) + estimate_tokens(addition)
    budget = plan_budget(token_budget, instruction_tokens)
    usable = budget.usable
    live_from = len(messages) if live_from is None else live_from
    pointers = pointers if pointers is not None else {}
    units = _units(messages)
    turn = _current_turn(messages, units)
    wm = _Summary(working_memory, budget.working_memory) if working_memory else None
    costs = _Costs(messages, units)  # older units' costs never change
    fit: _Picked | None = None
    # Whether every message fits beside the whole summary: the units' costs summed at once.
    everything = sum(m.estimated_tokens for m in messages) + len(messages)
    if usable > 0 and everything <= usable - _bounded(wm):
        shares = _Shares(list(messages), set(range(len(units))))  # nothing is trimmed
        if wm is not None:
            shares.give_summary(wm, wm.bound)
        output = _normalize(shares.summary + shares.work)
        if output and _total(output) <= usable:
            fit = _Picked(shares.work, list(range(len(units))), [], shares.work, output)
    if fit is None:
        shares = _share(usable, wm, messages, units, costs, turn, pointers)
        picked = shares.picked(units)
        output = _normalize(shares.summary + picked)
        fit = _Picked(shares.work, sorted(shares.keep), shares.cuts, picked, output)
    summary = shares.summary
    while _total(fit.output) > usable and fit.order:
        fit.order.pop(0)
        fit.picked = [fit.work[i] for u in fit.order for i in units[u]]
        fit.output = _normalize(summary + fit.picked)
    if fit.cuts and fit.order and fit.order[0] >= turn[0]:
        fit = _regrow_turn(usable, summary, messages, units, turn, pointers, fit)
    if wm is not None and summary and shares.trimmed:
        fit = _regrow_summary(usable, wm, shares, fit)
        summary = shares.summary
    if not fit.cuts and fit.order and fit.order[0] > 0:
        fit = _regrow_older(usable, summary, units, fit)
    kept_ids = {m.id for m in fit.picked}
    parts = _usage(
        messages,
        fit.work,
        units,
        turn[0],
        set(fit.order),
        live_from,
        wm.need if wm is not None else 0,
        _total(summary),
        shares.trimmed,
    )
    return AssembledContext(
        system_prompt_addition=addition,
        messages=fit.output,
        estimated_tokens=_total(fit.output) + instruction_tokens,
        reply_reserve=budget.reply_reserve,
        working_memory_tokens=_total(summary),
        trimmed_items=shares.trimmed,
        included_source_messages=len(fit.picked),
        dropped_source_messages=len(messages) - len(fit.picked),
        working_memory_included=bool(summary),
        cut_parts=[cut.note for cut in fit.cuts if cut.message_id in kept_ids],
        parts=parts,
        usable_tokens=usable,
    )


@dataclass(slots=True)
class _Picked:
    """Messages chosen for the context: ``work`` (the session's messages, some cut), the
    units kept in ``order``, the ``cuts``, the kept messages and the normalized output."""

    work: list[Message]
    order: list[int]
    cuts: list[Cut]
    picked: list[Message]
    output: list[Message]


def _regrow_turn(
    usable: int,
    summary: list[Message],
    messages: Sequence[Message],
    units: Sequence[list[int]],
    turn: tuple[int, int],
    pointers: Mapping[str, str],
    fit: _Picked,
) -> _Picked:
    """A cut current turn given back the room held for notes and merging that the context
    did not need (cut a little less), in a few passes that each stay within ``usable``: the
    cut is sized on estimates, so one pass can leave more than 5 % of a small budget idle."""
    room = sum(_cost(fit.work, units[u]) for u in fit.order)
    step = usable - _total(fit.output) - len(fit.picked)  # the room counts a token per message
    for _ in range(5):
        if step <= 0:
            break
        work, chosen, cuts = _fit_turn(messages, units, turn, room + step, pointers)
        picked = [work[i] for u in chosen for i in units[u]]
        retry = _normalize(summary + picked)
        if _total(fit.output) < _total(retry) <= usable:
            fit = _Picked(work, chosen, cuts, picked, retry)
            room += step
            step = usable - _total(fit.output) - len(fit.picked)
        else:
            step //= 2
    return fit


def _regrow_summary(usable: int, wm: _Summary, shares: _Shares, fit: _Picked) -> _Picked:
    """A trimmed summary given back the room the context left unused, when that is over 5 %
    of ``usable``: the room held for an omitted-note the context did not need, and a token a
    message for merging neighbours, which merging the summary with the user messages after
    it gives back (ten empty messages: 29 of 188 tokens idle). A few passes, each within
    ``usable``."""
    step = usable - _total(fit.output)
    if step <= usable // 20:
        return fit
    for _ in range(4):
        if step <= 0:
            break
        room = min(_total(shares.summary) + step, wm.bound)
        dropped, tokens = wm.tokens_at(room)
        if dropped is None or tokens <= _total(shares.summary):
            break  # no bullet comes back within the room: nothing to gain
        text, trimmed = wm.trim.render(dropped)
        summary = [_summary_message(text, tokens)]
        retry = _normalize(summary + fit.picked)
        if _total(retry) <= usable:
            shares.summary, shares.trimmed = summary, trimmed
            fit.output = retry
            step = usable - _total(retry)
        else:
            step //= 2
    return fit


def _regrow_older(
    usable: int, summary: list[Message], units: Sequence[list[int]], fit: _Picked
) -> _Picked:
    """The newest dropped units taken back, one by one, while the context leaves over 5 % of
    ``usable`` idle and each still fits once normalized: the room held for an omitted-note
    and a token a message for merging neighbours is not always needed (without a summary, a
    76-token message stayed out with 106 of 506 tokens idle). The kept units stay the
    newest ones, in one run."""
    while fit.order and fit.order[0] > 0:
        idle = usable - _total(fit.output)
        unit = fit.order[0] - 1
        if idle <= usable // 20 or sum(fit.work[i].estimated_tokens for i in units[unit]) > idle:
            break
        order = [unit, *fit.order]
        picked = [fit.work[i] for u in order for i in units[u]]
        output = _normalize(summary + picked)
        if _total(output) > usable:
            break
        fit = _Picked(fit.work, order, fit.cuts, picked, output)
    return fit


class _Summary:
    """The working memory as the summary message, at whatever room the assembly gives it:
    trimmed once (:class:`SummaryTrim`), each room a lookup, rendered when used."""

    def __init__(self, document: str, bound: int) -> None:
        self.trim = SummaryTrim(document)
        self.bound = bound  # its own bound (WM_MAX_TOKENS within the usable tokens)
        self.need = self.tokens_at(bound)[1]  # what it needs whole, within its bound

    def tokens_at(self, room: int) -> tuple[int | None, int]:
        """(bullets dropped, tokens) of the summary within ``room``; (None, need of the
        smallest) when not even title and state fit."""
        dropped = self.trim.fit(room)
        tokens = self.trim.summary_tokens(dropped)
        return (dropped if tokens <= room else None), tokens


def _bounded(wm: _Summary | None) -> int:
    """The summary's tokens when it gets all it needs (0 when even that is over its bound)."""
    if wm is None:
        return 0
    return wm.need if wm.need <= wm.bound else 0


@dataclass(slots=True)
class _Shares:
    """What the parts got: the messages (``work``, some cut) and the units kept, the cuts,
    and the summary with the bullets it lost."""

    work: list[Message]
    keep: set[int] = field(default_factory=set)
    cuts: list[Cut] = field(default_factory=list)
    summary: list[Message] = field(default_factory=list)
    trimmed: list[str] = field(default_factory=list)

    def give_summary(self, wm: _Summary, room: int) -> None:
        """The summary within ``room`` tokens (the trimmed bullets reported), or none (every
        section reported trimmed) when even title and state do not fit."""
        dropped, tokens = wm.tokens_at(room)
        if dropped is None:
            self.summary, self.trimmed = [], [f"{s}: (whole section)" for s in SECTIONS]
            return
        text, self.trimmed = wm.trim.render(dropped)
        self.summary = [_summary_message(text, tokens)]

    def picked(self, units: Sequence[list[int]]) -> list[Message]:
        return [self.work[i] for u in sorted(self.keep) for i in units[u]]


def _share(
    usable: int,
    wm: _Summary | None,
    messages: Sequence[Message],
    units: Sequence[list[int]],
    costs: _Costs,
    turn: tuple[int, int],
    pointers: Mapping[str, str],
) -> _Shares:
    """When the whole does not fit (see :func:`assemble`): the room handed out in one pass,
    ``left`` the running budget. The summary's size at each room it is offered is a lookup;
    it is rendered once, at the room it ends with."""
    overhead = estimate_tokens(OMITTED_NOTE) + 2  # the omitted-note and normalizing prefixes
    older = list(range(turn[0]))
    floor = wm.trim.floor_tokens if wm is not None else 0
    shares = _Shares(list(messages))
    room = usable - overhead - (floor if floor + overhead < usable else 0)
    if turn[0] < len(units) and room > 0:
        shares.work, chosen, shares.cuts = _fit_turn(messages, units, turn, room, pointers)
        shares.keep.update(chosen)
    left = usable - overhead - sum(_cost(shares.work, units[u]) for u in shares.keep)
    older_fits = costs.within(reversed(older), left)  # summed newest first, stops past left
    older_need = costs.summed
    spent = 0
    summary_room = 0
    trimmed = False
    if wm is not None:
        need = wm.need
        share = (
            need
            if older_fits and need + older_need <= left
            else max(min(need, left // 2), left - older_need)
        )
        summary_room = min(max(share, floor), left, wm.bound)  # title and state when they fit
        dropped, tokens = wm.tokens_at(summary_room)
        spent = tokens if dropped is not None else 0
        summary_tokens = spent
        trimmed = dropped is None or dropped > 0
    # A turn that had to be cut took the room: older units would only take it from it.
    for index in [] if shares.cuts else reversed(older):
        cost = costs[index]
        if spent + cost > left:
            break
        spent += cost
        shares.keep.add(index)
    slack = left - spent
    if wm is not None and trimmed and slack > 0:  # the messages left room: the summary takes it
        summary_room = min(summary_tokens + slack, wm.bound)
    if wm is not None:
        shares.give_summary(wm, summary_room)
        slack = left - _total(shares.summary) - sum(costs[u] for u in shares.keep if u < turn[0])
    dropped_units = [u for u in older if u not in shares.keep]
    if dropped_units and not shares.cuts and slack > usable // 20:
        # The newest older unit that did not fit comes in cut, when its cut form fits.
        trial = list(shares.work)
        more = _cut_to_fit(trial, units[dropped_units[-1]], slack, pointers)
        if _cost(trial, units[dropped_units[-1]]) <= slack:
            shares.work, shares.cuts = trial, shares.cuts + more
            shares.keep.add(dropped_units[-1])
    return shares


class _Costs:
    """Units' costs, worked out when first asked (a long session under a small budget only
    ever looks at its newest units)."""

    def __init__(self, messages: Sequence[Message], units: Sequence[list[int]]) -> None:
        self._messages = messages
        self._units = units
        self._known: dict[int, int] = {}
        self.summed = 0  # of the last ``within``

    def __getitem__(self, unit: int) -> int:
        cost = self._known.get(unit)
        if cost is None:
            cost = self._known[unit] = _cost(self._messages, self._units[unit])
        return cost

    def within(self, units: Iterable[int], room: int) -> bool:
        """Whether ``units`` cost at most ``room`` together (summing stops once past it)."""
        self.summed = 0
        for unit in units:
            self.summed += self[unit]
            if self.summed > room:
                return False
        return True


def _summary_message(text: str, tokens: int) -> Message:
    return Message("working-memory", Role.USER, (TextPart(f"{SUMMARY_HEADER}\n{text}"),), tokens)


def _usage(
    messages: Sequence[Message],
    work: Sequence[Message],
    units: Sequence[list[int]],
    turn_start: int,
    kept: set[int],
    live_from: int,
    wm_need: int,
    wm_kept: int,
    trimmed: Sequence[str],
) -> list[PartUsage]:
    """What each part needed, kept and lost. The parts are index ranges of ``messages``
    (uncovered archives, live messages, then the current turn), so each is a slice."""
    first = units[turn_start][0] if turn_start < len(units) else len(messages)
    split = min(live_from, first)
    got = [0, 0, 0]
    count = [0, 0, 0]
    for u in kept:
        for i in units[u]:
            part = 0 if i < split else 1 if i < first else 2
            got[part] += work[i].estimated_tokens
            count[part] += 1
    usage = [PartUsage(WORKING_MEMORY, wm_need, wm_kept, len(trimmed))]
    for part, (name, start, end) in enumerate(
        (
            (UNCOVERED_ARCHIVES, 0, split),
            (LIVE_MESSAGES, split, first),
            (CURRENT_TURN, first, len(messages)),
        )
    ):
        need = sum(m.estimated_tokens for m in messages[start:end])
        usage.append(PartUsage(name, need, got[part], end - start - count[part]))
    return usage


def _total(messages: Sequence[Message]) -> int:
    return sum(m.estimated_tokens for m in messages)


def anthropic_json(messages: Sequence[Message]) -> str:
    """The messages as the Messages API's ``messages`` array."""
    out: list[dict[str, object]] = []
    for message in messages:
        content: list[dict[str, object]] = []
        for part in message.parts:
            if isinstance(part, TextPart):
                content.append({"type": "text", "text": part.text})
            elif isinstance(part, ToolUsePart):
                content.append(
                    {
                        "type": "tool_use",
                        "id": part.id,
                        "name": part.name,
                        "input": json.loads(part.input_json or "{}"),
                    }
                )
            else:
                content.append(
                    {
                        "type": "tool_result",
                        "tool_use_id": part.tool_use_id,
                        "content": part.content,
                        "is_error": part.is_error,
                    }
                )
        out.append({"role": message.role.value, "content": content})
    return json.dumps(out, ensure_ascii=False)
