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

from wm_core._document.sections import SECTIONS
from wm_core._messages import (
    Message,
    Role,
    TextPart,
    ToolUsePart,
)
from wm_core._session.cutting import CUT_INPUT_KEY as CUT_INPUT_KEY
from wm_core._session.cutting import Cut, cut_to_fit, fit_turn
from wm_core._session.cutting import cut_text as cut_text
from wm_core._session.prompt import MEMORY_TOOLS as MEMORY_TOOLS
from wm_core._session.prompt import RECALL_TOOLS as RECALL_TOOLS
from wm_core._session.prompt import system_prompt_addition as system_prompt_addition
from wm_core._session.summary_trim import SUMMARY_HEADER as SUMMARY_HEADER
from wm_core._session.summary_trim import SummaryTrim
from wm_core._session.summary_trim import trim_working_memory as trim_working_memory
from wm_core._session.turns import (
    OMITTED_NOTE,
    current_turn,
    normalize,
    tool_units,
    total_tokens,
    units_cost,
)
from wm_core._tokens.estimate import estimate_tokens

WM_MAX_TOKENS = 8000


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
    units = tool_units(messages)
    turn = current_turn(messages, units)
    wm = _Summary(working_memory, budget.working_memory) if working_memory else None
    costs = _Costs(messages, units)  # older units' costs never change
    fit: _Picked | None = None
    # Whether every message fits beside the whole summary: the units' costs summed at once.
    everything = sum(m.estimated_tokens for m in messages) + len(messages)
    if usable > 0 and everything <= usable - _bounded(wm):
        shares = _Shares(list(messages), set(range(len(units))))  # nothing is trimmed
        if wm is not None:
            shares.give_summary(wm, wm.bound)
        output = normalize(shares.summary + shares.work)
        if output and total_tokens(output) <= usable:
            fit = _Picked(shares.work, list(range(len(units))), [], shares.work, output)
    if fit is None:
        shares = _share(usable, wm, messages, units, costs, turn, pointers)
        picked = shares.picked(units)
        output = normalize(shares.summary + picked)
        fit = _Picked(shares.work, sorted(shares.keep), shares.cuts, picked, output)
    summary = shares.summary
    while total_tokens(fit.output) > usable and fit.order:
        fit.order.pop(0)
        fit.picked = [fit.work[i] for u in fit.order for i in units[u]]
        fit.output = normalize(summary + fit.picked)
    if fit.cuts and fit.order and fit.order[0] >= turn[0]:
        fit = _regrow_turn(usable, summary, messages, units, turn, pointers, fit)
    if wm is not None and summary and shares.trimmed:
        fit = _regrow_summary(usable, wm, shares, fit)
        summary = shares.summary
    if not fit.cuts and fit.order and fit.order[0] > 0:
        fit = _regrow_older(usable, summary, units, fit, pointers)
    kept_ids = {m.id for m in fit.picked}
    parts = _usage(
        messages,
        fit.work,
        units,
        turn[0],
        set(fit.order),
        live_from,
        wm.need if wm is not None else 0,
        total_tokens(summary),
        shares.trimmed,
    )
    return AssembledContext(
        system_prompt_addition=addition,
        messages=fit.output,
        estimated_tokens=total_tokens(fit.output) + instruction_tokens,
        reply_reserve=budget.reply_reserve,
        working_memory_tokens=total_tokens(summary),
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
    room = sum(units_cost(fit.work, units[u]) for u in fit.order)
    step = (
        usable - total_tokens(fit.output) - len(fit.picked)
    )  # the room counts a token per message
    for _ in range(5):
        if step <= 0:
            break
        work, chosen, cuts = fit_turn(messages, units, turn, room + step, pointers)
        picked = [work[i] for u in chosen for i in units[u]]
        retry = normalize(summary + picked)
        if total_tokens(fit.output) < total_tokens(retry) <= usable:
            fit = _Picked(work, chosen, cuts, picked, retry)
            room += step
            step = usable - total_tokens(fit.output) - len(fit.picked)
        else:
            step //= 2
    return fit


def _regrow_summary(usable: int, wm: _Summary, shares: _Shares, fit: _Picked) -> _Picked:
    """A trimmed summary given back the room the context left unused, when that is over 5 %
    of ``usable``: the room held for an omitted-note the context did not need, and a token a
    message for merging neighbours, which merging the summary with the user messages after
    it gives back (ten empty messages: 29 of 188 tokens idle). A few passes, each within
    ``usable``."""
    step = usable - total_tokens(fit.output)
    if step <= usable // 20:
        return fit
    for _ in range(4):
        if step <= 0:
            break
        room = min(total_tokens(shares.summary) + step, wm.bound)
        dropped, tokens = wm.tokens_at(room)
        if dropped is None or tokens <= total_tokens(shares.summary):
            break  # no bullet comes back within the room: nothing to gain
        text, trimmed = wm.trim.render(dropped)
        summary = [_summary_message(text, tokens)]
        retry = normalize(summary + fit.picked)
        if total_tokens(retry) <= usable:
            shares.summary, shares.trimmed = summary, trimmed
            fit.output = retry
            step = usable - total_tokens(retry)
        else:
            step //= 2
    return fit


def _regrow_older(
    usable: int,
    summary: list[Message],
    units: Sequence[list[int]],
    fit: _Picked,
    pointers: Mapping[str, str],
) -> _Picked:
    """The newest dropped units taken back while the context leaves over 5 % of ``usable``
    idle: whole, one by one, while each still fits once normalized (the room held for an
    omitted-note and a token a message for merging neighbours is not always needed: without
    a summary, a 76-token message stayed out with 106 of 506 tokens idle); then the next one
    cut to the room that is left (the room was sized before normalizing, so a 2,003-token
    unit stayed out with 512 of 9,877 tokens idle). The kept units stay the newest ones, in
    one run."""
    while fit.order and fit.order[0] > 0:
        idle = usable - total_tokens(fit.output)
        unit = fit.order[0] - 1
        if idle <= usable // 20:
            return fit
        if sum(fit.work[i].estimated_tokens for i in units[unit]) > idle:
            break
        order = [unit, *fit.order]
        picked = [fit.work[i] for u in order for i in units[u]]
        output = normalize(summary + picked)
        if total_tokens(output) > usable:
            break
        fit = _Picked(fit.work, order, fit.cuts, picked, output)
    if not fit.order or fit.order[0] == 0:
        return fit
    unit = fit.order[0] - 1
    room = usable - total_tokens(fit.output) - len(units[unit])  # a token a message for merging
    for _ in range(4):
        if room <= usable // 20:
            break
        work = list(fit.work)
        cuts = cut_to_fit(work, units[unit], room, pointers)
        if units_cost(work, units[unit]) > room:
            break  # not even its cut form fits: it stays out
        order = [unit, *fit.order]
        picked = [work[i] for u in order for i in units[u]]
        output = normalize(summary + picked)
        if total_tokens(output) <= usable:
            return _Picked(work, order, fit.cuts + cuts, picked, output)
        room -= total_tokens(output) - usable  # normalizing cost more than estimated: cut more
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
        shares.work, chosen, shares.cuts = fit_turn(messages, units, turn, room, pointers)
        shares.keep.update(chosen)
    left = usable - overhead - sum(units_cost(shares.work, units[u]) for u in shares.keep)
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
        slack = (
            left - total_tokens(shares.summary) - sum(costs[u] for u in shares.keep if u < turn[0])
        )
    dropped_units = [u for u in older if u not in shares.keep]
    if dropped_units and not shares.cuts and slack > usable // 20:
        # The newest older unit that did not fit comes in cut, when its cut form fits.
        trial = list(shares.work)
        more = cut_to_fit(trial, units[dropped_units[-1]], slack, pointers)
        if units_cost(trial, units[dropped_units[-1]]) <= slack:
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
            cost = self._known[unit] = units_cost(self._messages, self._units[unit])
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
