"""Sorting a conversation into the seven sections, each item into one section.

What it takes from the messages alone:

- Session Title: the first user request, shortened (only when there is no title yet);
- Current State: the latest assistant text, at most three sentences;
- Task & Goals: user sentences that ask for something or state a requirement;
- Key Facts & Decisions: sentences with decision markers ("decided", "we'll use", "must", …);
- Files & Context: paths and URLs in tool inputs, tool results and text, with how they were used;
- Errors & Corrections: failed tool results (their decisive line and what came next), error
  lines elsewhere, and the user's objections;
- Open Issues: user questions no later assistant text answers, trailing assistant questions,
  and TODO-like lines.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from wm_core._document.items import item_key
from wm_core._document.sentences import sentences
from wm_core._messages import Message, Role, ToolResultPart, ToolUsePart
from wm_core._summary.spellings import PathSpellings, is_workdir_key
from wm_core._summary.text import (
    CORRECTION,
    DATA,
    DECISION,
    TODO,
    answered,
    clip,
    core_text,
    is_question,
    is_request,
    stems,
    strip_lead,
    summary_title,
    text_parts,
)
from wm_core._summary.traces import (
    MAX_PATHS_PER_TOOL_RESULT,
    Files,
    call_summary,
    error_lines,
    failure_lines,
    find_paths,
    strings,
    use_label,
)

MAX_STATE_SENTENCES: Final = 3


@dataclass(frozen=True, slots=True)
class Summary:
    """What the messages say, sorted by section (items are plain text, without bullets).

    ``spellings`` is how paths were spelled (the same rules apply to the paths an earlier
    document already lists, when deciding what is new).
    """

    title: str = ""
    current_state: str = ""
    goals: tuple[str, ...] = ()
    facts: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    open_issues: tuple[str, ...] = ()
    # False when no assistant text was archived: current_state is then only the open work,
    # to be added to the earlier state rather than replace it.
    state_from_assistant: bool = True
    spellings: PathSpellings = field(default_factory=lambda: PathSpellings(()), compare=False)


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    seen: set[str] = set()
    kept: list[str] = []
    for item in items:
        key = item_key(item)
        if key and key not in seen:
            seen.add(key)
            kept.append(item)
    return tuple(kept)


def _claimer(claimed: set[str]) -> Callable[[list[str], str, str], None]:
    """Adds an item to a section unless its core text already went to some section."""

    def claim(target: list[str], item: str, core: str) -> None:
        key = item_key(core_text(core))
        if key and key not in claimed:
            claimed.add(key)
            target.append(item)

    return claim


def summarize(messages: Sequence[Message], known_paths: Iterable[str] = ()) -> Summary:
    """Sort what the messages say into the seven sections, each item into one section.

    A sentence goes to the first section whose rule it matches, in this order: a user's
    objection (Errors & Corrections), a TODO (Open Issues), a user question (Open Issues
    while no later reply answers it), a decision or constraint (Key Facts & Decisions), a
    user request (Task & Goals). ``known_paths`` (those of an earlier document) take part in
    choosing one spelling per path.
    """
    calls: dict[str, ToolUsePart] = {}
    mentions: list[tuple[str, str]] = []  # (path as written, how it was used), in order
    workdirs: list[str] = []
    goals: list[str] = []
    facts: list[str] = []
    errors: list[str] = []
    issues: list[str] = []
    claimed: set[str] = set()
    claim = _claimer(claimed)
    title = ""
    questions: list[tuple[int, str]] = []  # (message index, user question)

    assistant_texts: list[tuple[int, str]] = [
        (i, "\n".join(text_parts(m))) for i, m in enumerate(messages) if m.role == Role.ASSISTANT
    ]
    assistant_texts = [(i, t) for i, t in assistant_texts if t.strip()]

    for index, message in enumerate(messages):
        speaker = message.role.value
        for part in message.parts:
            if isinstance(part, ToolUsePart):
                calls[part.id] = part
                try:
                    decoded = json.loads(part.input_json) if part.input_json.strip() else {}
                except ValueError:
                    decoded = part.input_json
                for key, text in strings(decoded):
                    if is_workdir_key(key):
                        workdirs.append(text.strip())
                    use = use_label(part.name, key)
                    mentions.extend((path, use) for path in find_paths(text))
            elif isinstance(part, ToolResultPart):
                call = calls.get(part.tool_use_id)
                tool = call.name if call else "tool"
                label = f"in {tool} error output" if part.is_error else f"in {tool} output"
                for path in find_paths(part.content)[:MAX_PATHS_PER_TOOL_RESULT]:
                    mentions.append((path, label))
                if part.is_error:
                    if call is not None:
                        head = f"{tool} failed ({call_summary(tool, call.input_json)})"
                    else:  # the call was archived earlier
                        head = f"tool call {part.tool_use_id} failed"
                    for line in failure_lines(part.content):
                        item = f"{head}: {line}"
                        follow = _next_assistant_sentence(messages, index)
                        item = clip(f"{item} — next: {follow}" if follow else item)
                        claim(errors, item, item)
                else:
                    for line in error_lines(part.content):
                        item = clip(f"{line} (in {tool} output)")
                        claim(errors, item, item)
        texts = text_parts(message)
        if not texts or message.role == Role.SYSTEM:
            continue  # a system prompt instructs the agent; it is not what happened
        text = "\n".join(texts)
        mentions.extend((path, f"mentioned by {speaker}") for path in find_paths(text))
        noted = error_lines(text)
        for line in noted:
            claim(errors, clip(f"{line} (reported by {speaker})"), clip(line))
        is_user = message.role == Role.USER
        asked = len(goals)
        prose = "\n".join(line for line in text.splitlines() if line.strip() not in noted)
        for sentence in sentences(prose):
            core = clip(strip_lead(sentence))
            if is_user and CORRECTION.match(sentence):
                claim(errors, clip(f"User correction: {sentence}"), core)
            elif TODO.search(sentence):
                claim(issues, core, core)
            elif is_user and is_question(sentence):
                key = item_key(core)
                if key and key not in claimed:
                    claimed.add(key)  # reserved: listed below while no reply answers it
                    questions.append((index, core))
            elif DECISION.search(sentence):
                claim(facts, core, core)
            elif is_user and is_request(sentence):
                claim(goals, core, core)
            elif is_user and DATA.search(core) and len(core.split()) >= 4:
                claim(facts, core, core)
        if is_user:
            if not title:
                candidate = summary_title(text)
                title = candidate if len(candidate.split()) >= 2 else ""  # not "Ok" or "Thanks"
            first = sentences(text)
            if len(goals) == asked and not goals and first and len(first[0].split()) >= 3:
                # The first substantial user message states the task even without a request verb.
                core = clip(strip_lead(first[0]))
                claim(goals, core, core)

    state, from_assistant = _current_state(messages, calls, claimed, goals)
    reply_stems = [(i, stems(t)) for i, t in assistant_texts]
    for index, question in questions:
        later = [stems for i, stems in reply_stems if i > index]
        if not answered(question, later):
            issues.append(f"Unanswered question from the user: {question}")
    for item in _trailing_assistant_questions(messages):
        claim(issues, item, item)

    spellings = PathSpellings([p for p, _ in mentions] + list(known_paths), workdirs)
    files = Files()
    for path, use in mentions:
        files.add(spellings.canonical(path), use)

    return Summary(
        title=title,
        current_state=clip(state, 1200),
        goals=tuple(goals),
        facts=tuple(facts),
        files=tuple(files.items()),
        errors=tuple(errors),
        open_issues=_unique(issues),
        state_from_assistant=from_assistant,
        spellings=spellings,
    )


def _current_state(
    messages: Sequence[Message],
    calls: Mapping[str, ToolUsePart],
    claimed: set[str],
    goals: Sequence[str],
) -> tuple[str, bool]:
    """The latest assistant text, then the work still open after it.

    The assistant's sentences that went to another section (a decision, a TODO) are left to
    that section unless nothing else is left. What happened after the latest text is what
    makes a summary lag behind if left out: the last tool call's outcome (a failure is open
    work) and a user request not answered yet. Returns the text and whether it starts from
    an assistant text.
    """
    last = max(
        (i for i, m in enumerate(messages) if m.role == Role.ASSISTANT and text_parts(m)),
        default=-1,
    )
    parts: list[str] = []
    if last >= 0:
        found = sentences("\n".join(text_parts(messages[last])))
        own = [s for s in found if item_key(clip(strip_lead(s))) not in claimed] or found[:1]
        parts.extend(own[:MAX_STATE_SENTENCES])
    parts.extend(_open_work(messages[last + 1 :], calls, {item_key(goal) for goal in goals}))
    return " ".join(parts), last >= 0


def _open_work(
    after: Sequence[Message], calls: Mapping[str, ToolUsePart], goals: set[str]
) -> list[str]:
    results = [p for m in after for p in m.parts if isinstance(p, ToolResultPart)]
    notes: list[str] = []
    if results:
        result = results[-1]
        call = calls.get(result.tool_use_id)
        what = (
            f"{call.name} ({call_summary(call.name, call.input_json)})" if call else "a tool call"
        )
        if result.is_error:
            notes.append(f"Open: {what} failed: {failure_lines(result.content)[0]}")
        else:
            notes.append(f"Last step: {what} succeeded.")
    requests = [
        clip(strip_lead(s))
        for m in after
        if m.role == Role.USER
        for s in sentences("\n".join(text_parts(m)))
        if is_request(s) and item_key(clip(strip_lead(s))) in goals
    ]
    if requests:
        notes.append(f"Asked next: {requests[0]}")
    return notes


def _next_assistant_sentence(messages: Sequence[Message], index: int) -> str:
    """The first sentence the assistant wrote after a failure: usually what it made of it."""
    for message in messages[index + 1 :]:
        if message.role == Role.ASSISTANT:
            for text in text_parts(message):
                found = sentences(text)
                if found:
                    return clip(found[0], 200)
            return ""
        if message.role == Role.USER and text_parts(message):
            return ""
    return ""


def _trailing_assistant_questions(messages: Sequence[Message]) -> list[str]:
    """Questions the assistant asked that no later user text responds to."""
    start = len(messages)
    while start > 0 and not (
        messages[start - 1].role == Role.USER and text_parts(messages[start - 1])
    ):
        start -= 1
    found: list[str] = []
    for message in messages[start:]:
        if message.role == Role.ASSISTANT:
            for text in text_parts(message):
                found.extend(
                    f"Waiting for the user: {clip(s)}" for s in sentences(text) if s.endswith("?")
                )
    return found
