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
from collections.abc import Sequence
from dataclasses import dataclass, field

from wm_core._document.markdown import parse_document, render_document
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
from wm_core._tokens.estimate import estimate_tokens

SUMMARY_HEADER = "[Session History Summary]"
OMITTED_NOTE = "[Earlier conversation omitted to fit the context budget.]"
WM_MAX_TOKENS = 8000

SYSTEM_PROMPT_ADDITION = """\
This conversation continues a longer session. Its history reaches you in two layers:
1. A message headed [Session History Summary]: a structured working memory that condenses
   everything earlier than the messages that follow it. It is lossy but curated: use it as
   background knowledge of what happened, what was decided and what is still open.
2. The messages after it: the most recent part of the session, verbatim.
How to use them:
- When the summary and a recent message disagree, the recent message is right.
- Do not invent details the summary does not state.
- Before saying that something was never mentioned, re-read every section of the summary
  (look for synonyms and indirect references), then call archive_search with two or three
  concrete keywords from the question (names, paths, numbers), trying at least two variants.
- When the summary names a topic but lacks the exact detail (a command, a path, a value),
  use archive_search, then archive_expand on the archive it points to.
Only after these checks conclude that the information is not available."""

# Trimming order when the working memory exceeds its budget: first listed, first trimmed.
# Session Title and Current State are never trimmed.
TRIM_ORDER = (
    "Files & Context",
    "Errors & Corrections",
    "Key Facts & Decisions",
    "Task & Goals",
    "Open Issues",
)


@dataclass(frozen=True, slots=True)
class Budget:
    """How a context budget is spent: what the reply and the instructions need comes first,
    so the history never crowds out the answer; the working memory gets a bounded share."""

    total: int
    reply_reserve: int
    instructions: int
    usable: int
    working_memory: int


def plan_budget(total: int, instruction_tokens: int) -> Budget:
    """15 % (at least 20,000 tokens from 40,000 on) is held back for the reply, and the
    summary may take 15 % of what is left, at most WM_MAX_TOKENS, so that a long working
    memory cannot push out the recent messages the model needs verbatim."""
    reserve = math.ceil(total * 0.15)
    if total >= 40_000:
        reserve = max(reserve, 20_000)
    reserve = min(total, reserve)
    usable = max(total - reserve - instruction_tokens, 0)
    return Budget(
        total, reserve, instruction_tokens, usable, min(int(usable * 0.15), WM_MAX_TOKENS)
    )


@dataclass
class AssembledContext:
    """The context ready to send, with the figures a caller needs to trust it: what was
    trimmed or dropped is reported, never left out silently."""

    system_prompt_addition: str
    messages: list[Message]
    estimated_tokens: int
    reply_reserve: int
    working_memory_tokens: int
    trimmed_items: list[str] = field(default_factory=list)
    included_source_messages: int = 0
    dropped_source_messages: int = 0
    working_memory_included: bool = False


def _bullets(body: str) -> list[tuple[int, int]]:
    """(start_line, end_line) of each bullet item, continuation lines included."""
    lines = body.split("\n")
    spans: list[tuple[int, int]] = []
    for index, line in enumerate(lines):
        stripped = line.lstrip()
        if stripped.startswith(("- ", "* ", "+ ")) and len(line) - len(stripped) < 2:
            spans.append((index, index))
        elif spans and line.strip() and line.startswith((" ", "\t")):
            start, _ = spans[-1]
            spans[-1] = (start, index)
    return spans


def trim_working_memory(document: str, budget: int) -> tuple[str, list[str]]:
    """Drop the oldest bullets of lower-priority sections until the summary fits."""
    header_tokens = estimate_tokens(SUMMARY_HEADER + "\n")
    if estimate_tokens(document) + header_tokens <= budget:
        return document, []
    bodies = parse_document(document)
    trimmed: list[str] = []
    for section in TRIM_ORDER:
        lines = bodies.get(section, "").split("\n")
        for start, end in _bullets(bodies.get(section, "")):
            if estimate_tokens(render_document(bodies)) + header_tokens <= budget:
                return render_document(bodies), trimmed
            item = "\n".join(lines[start : end + 1]).strip()
            trimmed.append(f"{section}: {item.lstrip('-*+ ').strip()}")
            for i in range(start, end + 1):
                lines[i] = "\x00"
            bodies[section] = "\n".join(line for line in lines if line != "\x00")
    rendered = render_document({s: bodies.get(s, "") for s in SECTIONS})
    return rendered, trimmed


def _units(messages: Sequence[Message]) -> list[list[int]]:
    """Indexes grouped so that a tool call and every message answering it stay together."""
    result_at: dict[str, int] = {}
    for index, message in enumerate(messages):
        for tool_id in message.tool_result_ids():
            result_at.setdefault(tool_id, index)
    units: list[list[int]] = []
    index = 0
    while index < len(messages):
        end = index
        cursor = index
        while cursor <= end:
            for tool_id in messages[cursor].tool_use_ids():
                end = max(end, result_at.get(tool_id, cursor))
            cursor += 1
        units.append(list(range(index, end + 1)))
        index = end + 1
    return units


def _api_role(role: Role) -> Role:
    return Role.ASSISTANT if role is Role.ASSISTANT else Role.USER


def _normalize(messages: Sequence[Message]) -> list[Message]:
    """Pair tool calls with results, map roles to user/assistant, merge neighbours."""
    used = {tid for m in messages for tid in m.tool_use_ids()}
    answered = {tid for m in messages for tid in m.tool_result_ids()}
    out: list[Message] = []
    for message in messages:
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
            out[-1] = Message(out[-1].id, role, merged, message_tokens(merged))
        else:
            frozen = tuple(parts)
            out.append(Message(message.id, role, frozen, message_tokens(frozen)))
    if out and out[0].role is not Role.USER:
        note = (TextPart(OMITTED_NOTE),)
        out.insert(0, Message("omitted", Role.USER, note, message_tokens(note)))
    return out


def assemble(
    token_budget: int,
    system_prompt: str,
    working_memory: str | None,
    messages: Sequence[Message],
) -> AssembledContext:
    """The next model context: summary, uncovered history, then live messages, newest
    kept first when the budget runs short. Tool calls and results are kept or dropped as
    units and roles are normalized, so the Messages API accepts the result as it is."""
    addition = SYSTEM_PROMPT_ADDITION if working_memory else ""
    instruction_tokens = estimate_tokens(system_prompt) + estimate_tokens(addition)
    budget = plan_budget(token_budget, instruction_tokens)
    summary: list[Message] = []
    trimmed: list[str] = []
    wm_tokens = 0
    if working_memory:
        text, trimmed = trim_working_memory(working_memory, budget.working_memory)
        parts = (TextPart(f"{SUMMARY_HEADER}\n{text}"),)
        wm_tokens = message_tokens(parts)
        if wm_tokens <= budget.working_memory:
            summary = [Message("working-memory", Role.USER, parts, wm_tokens)]
        else:  # even title and state do not fit: leave the summary out, and say so
            trimmed = [f"{s}: (whole section)" for s in SECTIONS]
            wm_tokens = 0
    room = budget.usable - wm_tokens
    units = _units(messages)
    start = len(units)
    spent = 0
    for index in range(len(units) - 1, -1, -1):
        # One token of slack per message: merging neighbours re-rounds their estimate.
        cost = sum(messages[i].estimated_tokens + 1 for i in units[index])
        if spent + cost > room:
            break
        spent += cost
        start = index
    picked = [messages[i] for unit in units[start:] for i in unit]
    output = _normalize(summary + picked)
    while _total(output) > budget.usable and start < len(units):
        start += 1
        picked = [messages[i] for unit in units[start:] for i in unit]
        output = _normalize(summary + picked)
    return AssembledContext(
        system_prompt_addition=addition,
        messages=output,
        estimated_tokens=_total(output) + instruction_tokens,
        reply_reserve=budget.reply_reserve,
        working_memory_tokens=wm_tokens,
        trimmed_items=trimmed,
        included_source_messages=len(picked),
        dropped_source_messages=len(messages) - len(picked),
        working_memory_included=bool(summary),
    )


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
