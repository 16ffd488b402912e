"""The offline provider: a deterministic, extractive summarizer that needs no network.

Why it exists: a fresh checkout with no API key must still produce a working memory worth
reading, and tests need a provider whose output is known in advance. It answers the same
calls as a model and in the same shapes (per-section ops for an update, one body per section
for a creation), so its output goes through the same schema check, guards and merge.

What it extracts, from the messages alone:

- Session Title: the first user request, shortened (only when there is no title yet);
- Current State: the latest assistant text, at most three sentences;
- Task & Goals: user sentences that ask for something or state a requirement;
- Key Facts & Decisions: sentences with decision markers ("decided", "we'll use", "must", …);
- Files & Context: paths and URLs in tool inputs, tool results and text, with how they were used;
- Errors & Corrections: failed tool results (their decisive line and what came next), error
  lines elsewhere, and the user's objections;
- Open Issues: user questions no later assistant text answers, trailing assistant questions,
  and TODO-like lines.

Long-term memories come from ``wm_core.extract_memories`` (the offline rules: profile facts,
preferences, decisions with their reason and who agreed, dated events and plans, named people
and things, with times resolved against each message's date), sent as the memory tool's
arguments so they are read and guarded like a model's.

Everything is plain string processing: the same messages always give the same answer.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

from wm_core import (
    CREATE_TOOL,
    CURRENT_STATE,
    ERRORS_CORRECTIONS,
    FILES_CONTEXT,
    KEY_FACTS,
    OPEN_ISSUES,
    SECTIONS,
    SESSION_TITLE,
    TASK_GOALS,
    Message,
    Role,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    bullet_items,
    extract_memories,
    is_working_memory,
    item_key,
    memory_tool_arguments,
    parse_document,
    references,
    sentences,
)
from wm_server.llm.paths import PathSpellings, is_workdir_key
from wm_server.llm.port import (
    CreateRequest,
    MemoryRequest,
    ModelReply,
    RepairRequest,
    UpdateRequest,
    Usage,
)

MAX_ITEM_CHARS: Final = 400
MAX_TITLE_WORDS: Final = 10
MAX_STATE_SENTENCES: Final = 3
# A listing tool output can name hundreds of files; only the first ones are worth keeping.
MAX_PATHS_PER_TOOL_RESULT: Final = 20
MAX_FAILED_LINES: Final = 5

# -- text helpers ------------------------------------------------------------------------------

_GREETING = re.compile(
    r"^\s*(?:hi|hello|hey|hallo|(?:good )?(?:morning|afternoon|evening))(?: there| all| team)?"
    r"(?:[!,.]+\s*|\s+|$)",
    re.IGNORECASE,
)
# A durable statement worth keeping as a fact: it carries a figure or a person's full name.
_DATA = re.compile(r"\d|(?<=\s)[A-Z][a-z]+ [A-Z][a-z]+\b")
_LEAD_IN = re.compile(
    r"^\s*(?:(?:ok(?:ay)?|great|nice|thanks|thank you|perfect|cool|also|and|so|now)\b[,.!]?\s+)+",
    re.IGNORECASE,
)
_REQUEST_LEAD = re.compile(
    r"^\s*(?:please|can you|could you|would you|will you|i want you to|i'd like you to|"
    r"i need you to|help me(?: to)?|let's|let us)\b[,]?\s*(?:please\b\s*)?(?:also\b\s*)?",
    re.IGNORECASE,
)
_IMPERATIVE = re.compile(
    r"^\s*(?:add|fix|make|implement|write|create|update|remove|delete|change|refactor|support|"
    r"ensure|investigate|find|check|explain|rename|move|migrate|upgrade|port|build|run|test|"
    r"document|debug|review|set up|configure|replace|keep|don't|do not|never|always)\b",
    re.IGNORECASE,
)
_REQUIREMENT = re.compile(
    r"\b(?:should|must|needs? to|has to|have to|i want|i need|we need)\b", re.IGNORECASE
)
_DECISION = re.compile(
    r"\b(?:decision|decided|decide to|agreed|we(?:'ll| will) (?:use|keep|go|detect|switch|skip|"
    r"store|stick)|i(?:'ll| will) use|let's (?:use|go with|keep)|going with|settled on|"
    r"prefer(?:s|red)?|must|mustn't|never|always|don't (?:touch|change|use|modify)|"
    r"do not (?:touch|change|use|modify)|won't|switch(?:ed)? to|constraint|requirement|"
    r"convention)\b",
    re.IGNORECASE,
)
_TODO = re.compile(
    r"\b(?:TODO|FIXME|XXX|follow[- ]up|open question|still need to|not yet (?:done|implemented|"
    r"supported)|remaining:|for later|next session)\b",
    re.IGNORECASE,
)
_CORRECTION = re.compile(
    r"^\s*(?:no[,.!]|nope\b|wrong\b|actually[, ]|that'?s (?:not|wrong|incorrect)|"
    r"this is (?:not|wrong)|but wait\b|wait[,!]|don'?t do that|stop\b)",
    re.IGNORECASE,
)
_EXCEPTION_LINE = re.compile(
    r"^\s*(?:E\s+)?((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Failure|Exit|Interrupt)\b.*)$"
)
_SUMMARY_LINE = re.compile(r"^\s*((?:FAILED|ERROR)\b.*)$")
_TOOL_ERROR_LINE = re.compile(
    r"^\s*((?:[\w./-]+: )*(?:error|fatal|panic)(?:\[[\w-]+\])?: .*)$", re.IGNORECASE
)
# An error or correction the agent (or the user) writes down itself: "Error: …", "Correction: …".
_NOTED_ERROR = re.compile(
    r"^\s*(?:[-*]\s+)?((?:error|correction|mistake|wrong assumption)s?\b[^:\n]{0,40}:\s*\S.*)$",
    re.IGNORECASE,
)
_EXIT_LINE = re.compile(r"^\s*(?:exit (?:status|code) \d+|process exited.*)$", re.IGNORECASE)
# Paths the engine's reference finder does not treat as files (home and absolute paths
# without a known extension, such as ~/.local/share/app/data.db or /var/log/syslog).
_EXTRA_PATH = re.compile(
    r"(?<![\w.~/\\:-])(?:~|\.{1,2})?/(?:[\w.@+-]+/)*[\w.@+-]*[A-Za-z][\w.@+-]*"
)
_PATH_TRAILING = ".,;:!?)]}'\"`"
# Tags in front of an item: status markers ("[resolved]") and the summarizer's own labels.
_ITEM_TAGS = re.compile(
    r"^(?:\[[^\]]*\]\s*)*"
    r"(?:unanswered question from the user:|waiting for the user:|user correction:)?\s*",
    re.IGNORECASE,
)
_WORD = re.compile(r"[a-z]+")
_STOPWORD_TEXT: Final = (
    "also there their they them then than that this these those what when where which while "
    "with without would could should shall will have has had does doesn doesnt didn dont isn "
    "aren wasn about into from your yours mine some such only just even every other more most "
    "very much many like able being been were here how why who whom whose way any all can "
    "might must need needs want wants make makes made the and for are but not you our out"
)
_STOPWORDS: Final = frozenset(_STOPWORD_TEXT.split())


def _clip(text: str, limit: int = MAX_ITEM_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _stems(text: str) -> set[str]:
    """Content words cut to six letters: enough to see that a reply talks about a question."""
    return {w[:6] for w in _WORD.findall(text.lower()) if len(w) >= 4 and w not in _STOPWORDS}


def _texts(message: Message) -> list[str]:
    return [p.text for p in message.parts if isinstance(p, TextPart) and p.text.strip()]


def _strings(value: Any) -> Iterator[tuple[str, str]]:
    """(key, string) for every string inside a decoded JSON value."""
    if isinstance(value, str):
        yield "", value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            for inner_key, text in _strings(item):
                yield (inner_key or str(key)), text
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def find_paths(text: str) -> list[str]:
    """Paths and URLs in ``text``, in order of appearance, without duplicates."""
    found = references(text)
    for match in _EXTRA_PATH.finditer(text):
        path = match.group().rstrip(_PATH_TRAILING)
        if path.count("/") >= 2 or path.startswith("~/"):
            found.add(path)
    # order by first position so the Files section reads in the order things happened
    return sorted(found, key=lambda p: (text.find(p) if p in text else len(text), p))


# -- extraction ----------------------------------------------------------------------------------


@dataclass
class _Files:
    order: list[str] = field(default_factory=list)
    uses: dict[str, list[str]] = field(default_factory=dict)

    def add(self, path: str, use: str) -> None:
        if path not in self.uses:
            self.order.append(path)
            self.uses[path] = []
        if use not in self.uses[path]:
            self.uses[path].append(use)

    def items(self) -> list[str]:
        return [f"{path} — {', '.join(self.uses[path])}" for path in self.order]


@dataclass(frozen=True, slots=True)
class Extraction:
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


def _strip_lead(sentence: str) -> str:
    """The sentence without greeting and filler ("Great. Also, …"), capitalized."""
    core = _LEAD_IN.sub("", _GREETING.sub("", sentence)).strip()
    return core[:1].upper() + core[1:]


def title_from(text: str) -> str:
    """A short title from a user request: first sentence, no greeting or "please", ≤10 words."""
    for sentence in sentences(_GREETING.sub("", text)):
        core = _REQUEST_LEAD.sub("", _strip_lead(sentence)).strip()
        if not core:
            continue
        words = core.split()
        for cut in (":", ";", " — ", " - ", " ("):
            index = core.find(cut)
            if index > 0 and len(core[:index].split()) >= 3:
                words = core[:index].split()
                break
        title = " ".join(words[:MAX_TITLE_WORDS]).rstrip(",.:;!?—-")
        if title:
            return title[0].upper() + title[1:]
    return ""


def _is_request(sentence: str) -> bool:
    core = _strip_lead(sentence)
    if _REQUEST_LEAD.match(core) or _IMPERATIVE.match(core):
        return True
    return not core.endswith("?") and bool(_REQUIREMENT.search(core))


def _is_question(sentence: str) -> bool:
    core = _strip_lead(sentence)
    return core.endswith("?") and not _REQUEST_LEAD.match(core)


def _answered(question: str, later_replies: Sequence[set[str]]) -> bool:
    """Whether some later assistant text (given as its stems) shares enough content words."""
    wanted = _stems(question)
    if not wanted:
        return bool(later_replies)
    needed = max(2, round(0.4 * len(wanted))) if len(wanted) >= 2 else 1
    return any(len(wanted & reply) >= needed for reply in later_replies)


def _failure_lines(content: str) -> list[str]:
    """The decisive lines of a failed tool output: test summaries, else the last exception."""
    lines = content.splitlines()
    summaries = [m.group(1).strip() for line in lines if (m := _SUMMARY_LINE.match(line))]
    if summaries:
        return summaries[:MAX_FAILED_LINES]
    for pattern in (_EXCEPTION_LINE, _TOOL_ERROR_LINE):
        matches = [m.group(1).strip() for line in lines if (m := pattern.match(line))]
        if matches:
            return [matches[-1]]
    meaningful = [line.strip() for line in lines if line.strip() and not _EXIT_LINE.match(line)]
    return [meaningful[-1]] if meaningful else ["(no output)"]


def _error_lines(content: str) -> list[str]:
    """Error lines in an output or a text that did not fail as a whole."""
    found: list[str] = []
    for line in content.splitlines():
        for pattern in (_SUMMARY_LINE, _EXCEPTION_LINE, _NOTED_ERROR):
            match = pattern.match(line)
            if match:
                found.append(match.group(1).strip())
                break
    return found


_PATH_KEYS: Final = frozenset({"path", "file_path", "filepath", "filename", "file", "target"})
_TOOL_VERBS: Final = (
    (("read", "view", "open", "cat", "show", "get"), "read"),
    (("write", "create", "new"), "written"),
    (("edit", "replace", "patch", "update", "insert", "modify"), "edited"),
    (("delete", "remove", "rm"), "deleted"),
)


def _use_label(tool: str, key: str) -> str:
    """How a path in a tool input was used: "read", "edited", … or "in <tool> command"."""
    if key.lower() in _PATH_KEYS:
        lowered = tool.lower()
        for verbs, label in _TOOL_VERBS:
            if any(verb in lowered for verb in verbs):
                return label
        return f"{tool} target"
    return f"in {tool} {key}" if key else f"in {tool} input"


def _call_summary(name: str, input_json: str) -> str:
    try:
        value = json.loads(input_json) if input_json.strip() else {}
    except ValueError:
        return _clip(input_json, 120)
    if isinstance(value, Mapping):
        for key in ("command", "cmd", "path", "file_path", "filename", "query", "url"):
            if isinstance(value.get(key), str):
                return _clip(value[key], 120)
    return _clip(json.dumps(value, ensure_ascii=False), 120) if value else name


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    seen: set[str] = set()
    kept: list[str] = []
    for item in items:
        key = item_key(item)
        if key and key not in seen:
            seen.add(key)
            kept.append(item)
    return tuple(kept)


def _core(item: str) -> str:
    """An item without the tags the summarizer or a model put in front of it, for comparing
    items across sections ("Unanswered question from the user: X" is the item X)."""
    return _ITEM_TAGS.sub("", item)


def _claimer(claimed: set[str]) -> Callable[[list[str], str, str], None]:
    """Adds an item to a section unless its core text already went to some section."""

    def claim(target: list[str], item: str, core: str) -> None:
        key = item_key(_core(core))
        if key and key not in claimed:
            claimed.add(key)
            target.append(item)

    return claim


def extract(messages: Sequence[Message], known_paths: Iterable[str] = ()) -> Extraction:
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
        (i, "\n".join(_texts(m))) for i, m in enumerate(messages) if m.role == Role.ASSISTANT
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
                for key, text in _strings(decoded):
                    if is_workdir_key(key):
                        workdirs.append(text.strip())
                    use = _use_label(part.name, key)
                    mentions.extend((path, use) for path in find_paths(text))
            elif isinstance(part, ToolResultPart):
                call = calls.get(part.tool_use_id)
                tool = call.name if call else "tool"
                label = f"in {tool} error output" if part.is_error else f"in {tool} output"
                for path in find_paths(part.content)[:MAX_PATHS_PER_TOOL_RESULT]:
                    mentions.append((path, label))
                if part.is_error:
                    if call is not None:
                        head = f"{tool} failed ({_call_summary(tool, call.input_json)})"
                    else:  # the call was archived earlier
                        head = f"tool call {part.tool_use_id} failed"
                    for line in _failure_lines(part.content):
                        item = f"{head}: {line}"
                        follow = _next_assistant_sentence(messages, index)
                        item = _clip(f"{item} — next: {follow}" if follow else item)
                        claim(errors, item, item)
                else:
                    for line in _error_lines(part.content):
                        item = _clip(f"{line} (in {tool} output)")
                        claim(errors, item, item)
        texts = _texts(message)
        if not texts or message.role == Role.SYSTEM:
            continue  # a system prompt instructs the agent; it is not what happened
        text = "\n".join(texts)
        mentions.extend((path, f"mentioned by {speaker}") for path in find_paths(text))
        noted = _error_lines(text)
        for line in noted:
            claim(errors, _clip(f"{line} (reported by {speaker})"), _clip(line))
        is_user = message.role == Role.USER
        asked = len(goals)
        prose = "\n".join(line for line in text.splitlines() if line.strip() not in noted)
        for sentence in sentences(prose):
            core = _clip(_strip_lead(sentence))
            if is_user and _CORRECTION.match(sentence):
                claim(errors, _clip(f"User correction: {sentence}"), core)
            elif _TODO.search(sentence):
                claim(issues, core, core)
            elif is_user and _is_question(sentence):
                key = item_key(core)
                if key and key not in claimed:
                    claimed.add(key)  # reserved: listed below while no reply answers it
                    questions.append((index, core))
            elif _DECISION.search(sentence):
                claim(facts, core, core)
            elif is_user and _is_request(sentence):
                claim(goals, core, core)
            elif is_user and _DATA.search(core) and len(core.split()) >= 4:
                claim(facts, core, core)
        if is_user:
            if not title:
                candidate = title_from(text)
                title = candidate if len(candidate.split()) >= 2 else ""  # not "Ok" or "Thanks"
            first = sentences(text)
            if len(goals) == asked and not goals and first and len(first[0].split()) >= 3:
                # The first substantial user message states the task even without a request verb.
                core = _clip(_strip_lead(first[0]))
                claim(goals, core, core)

    state, from_assistant = _current_state(messages, calls, claimed, goals)
    reply_stems = [(i, _stems(t)) for i, t in assistant_texts]
    for index, question in questions:
        later = [stems for i, stems in reply_stems if i > index]
        if not _answered(question, later):
            issues.append(f"Unanswered question from the user: {question}")
    for item in _trailing_assistant_questions(messages):
        claim(issues, item, item)

    spellings = PathSpellings([p for p, _ in mentions] + list(known_paths), workdirs)
    files = _Files()
    for path, use in mentions:
        files.add(spellings.canonical(path), use)

    return Extraction(
        title=title,
        current_state=_clip(state, 1200),
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
        (i for i, m in enumerate(messages) if m.role == Role.ASSISTANT and _texts(m)), default=-1
    )
    parts: list[str] = []
    if last >= 0:
        found = sentences("\n".join(_texts(messages[last])))
        own = [s for s in found if item_key(_clip(_strip_lead(s))) not in claimed] or found[:1]
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
            f"{call.name} ({_call_summary(call.name, call.input_json)})" if call else "a tool call"
        )
        if result.is_error:
            notes.append(f"Open: {what} failed: {_failure_lines(result.content)[0]}")
        else:
            notes.append(f"Last step: {what} succeeded.")
    requests = [
        _clip(_strip_lead(s))
        for m in after
        if m.role == Role.USER
        for s in sentences("\n".join(_texts(m)))
        if _is_request(s) and item_key(_clip(_strip_lead(s))) in goals
    ]
    if requests:
        notes.append(f"Asked next: {requests[0]}")
    return notes


def _next_assistant_sentence(messages: Sequence[Message], index: int) -> str:
    """The first sentence the assistant wrote after a failure: usually what it made of it."""
    for message in messages[index + 1 :]:
        if message.role == Role.ASSISTANT:
            for text in _texts(message):
                found = sentences(text)
                if found:
                    return _clip(found[0], 200)
            return ""
        if message.role == Role.USER and _texts(message):
            return ""
    return ""


def _trailing_assistant_questions(messages: Sequence[Message]) -> list[str]:
    """Questions the assistant asked that no later user text responds to."""
    start = len(messages)
    while start > 0 and not (messages[start - 1].role == Role.USER and _texts(messages[start - 1])):
        start -= 1
    found: list[str] = []
    for message in messages[start:]:
        if message.role == Role.ASSISTANT:
            for text in _texts(message):
                found.extend(
                    f"Waiting for the user: {_clip(s)}" for s in sentences(text) if s.endswith("?")
                )
    return found


# -- ops and documents ---------------------------------------------------------------------------


def _known(old: Mapping[str, str]) -> set[str]:
    """The comparison keys of every item an earlier document holds, in any section."""
    return {
        item_key(_core(item))
        for name in SECTIONS
        if name not in (SESSION_TITLE, CURRENT_STATE)
        for item in bullet_items(old.get(name, ""))
    }


def _fresh(items: Iterable[str], known: set[str]) -> list[str]:
    """Items no section of the earlier document holds yet (whole-item comparison, tags
    ignored, as the engine compares items)."""
    return [item for item in items if item_key(_core(item)) not in known]


def _fresh_files(items: Iterable[str], old_body: str, spellings: PathSpellings) -> list[str]:
    """File items whose path the section does not list yet, in any spelling."""
    known = {spellings.canonical(path) for path in references(old_body) | set(find_paths(old_body))}
    return [item for item in items if item.split(" — ", 1)[0] not in known]


def _old_paths(old: Mapping[str, str]) -> list[str]:
    body = old.get(FILES_CONTEXT, "")
    return sorted(references(body) | set(find_paths(body)))


def _append(items: Sequence[str]) -> dict[str, Any]:
    return {"op": "APPEND", "items": list(items)} if items else {"op": "KEEP"}


def update_ops(previous_document: str, messages: Sequence[Message]) -> dict[str, Any]:
    """The ``update_working_memory`` arguments for these messages."""
    old = parse_document(previous_document)
    found = extract(messages, _old_paths(old))
    known = _known(old)
    ops: dict[str, Any] = {}
    if found.title and not old.get(SESSION_TITLE, "").strip():
        ops[SESSION_TITLE] = {"op": "UPDATE", "content": found.title}
    else:
        ops[SESSION_TITLE] = {"op": "KEEP"}
    if found.current_state:
        ops[CURRENT_STATE] = {"op": "UPDATE", "content": _state(old, found)}
    else:
        ops[CURRENT_STATE] = {"op": "KEEP"}
    ops[TASK_GOALS] = _append(_fresh(found.goals, known))
    ops[KEY_FACTS] = _append(_fresh(found.facts, known))
    ops[FILES_CONTEXT] = _append(
        _fresh_files(found.files, old.get(FILES_CONTEXT, ""), found.spellings)
    )
    ops[ERRORS_CORRECTIONS] = _append(_fresh(found.errors, known))
    ops[OPEN_ISSUES] = _open_issues_op(
        old.get(OPEN_ISSUES, ""), _fresh(found.open_issues, known), messages
    )
    return {"sections": {name: ops[name] for name in SECTIONS}}


_ISSUE_BULLET = re.compile(r"^(\s*(?:[-*]|\d+[.)]))\s+(.*)$")
_CLOSED = re.compile(r"^\[(?:resolved|done|closed|answered)\b", re.IGNORECASE)


def _answer_sentence(question: str, replies: Sequence[str]) -> str:
    """The reply sentence that answers ``question``, or "" when none clearly does.

    Stricter than the test for listing a question as open: one sentence must carry at least
    half of the question's content words, because marking an issue resolved by mistake hides
    it, while listing an answered question only costs a line.
    """
    wanted = _stems(_ITEM_TAGS.sub("", question))
    if len(wanted) < 2:
        return ""  # too little to judge; leave the issue open
    needed = max(2, -(-len(wanted) // 2))
    best, best_overlap = "", 0
    for reply in replies:
        for sentence in sentences(reply):
            overlap = len(wanted & _stems(sentence))
            if overlap > best_overlap:
                best, best_overlap = sentence, overlap
    return _clip(best, 200) if best_overlap >= needed else ""


def _open_issues_op(
    old_body: str, new_items: list[str], messages: Sequence[Message]
) -> dict[str, Any]:
    """APPEND new issues; an UPDATE that marks answered questions "[resolved]" when there are some.

    Nothing is removed: a resolved question keeps its full text behind the marker (which is
    also what lets the Open Issues guard recognise it), followed by the answer that settled it.
    """
    replies = ["\n".join(_texts(m)) for m in messages if m.role == Role.ASSISTANT and _texts(m)]
    if not old_body.strip() or not replies:
        return _append(new_items)
    lines: list[str] = []
    resolved = 0
    for line in old_body.split("\n"):
        match = _ISSUE_BULLET.match(line)
        item = match.group(2).strip() if match else line.strip()
        answer = ""
        if item.endswith("?") and not _CLOSED.match(item):
            answer = _answer_sentence(item, replies)
        if answer:
            marker = match.group(1) if match else "-"
            lines.append(f"{marker} [resolved] {item} Answer: {answer}")
            resolved += 1
        else:
            lines.append(line)
    if not resolved:
        return _append(new_items)
    lines.extend(f"- {item}" for item in new_items)
    return {"op": "UPDATE", "content": "\n".join(lines)}


def _state(old: Mapping[str, str], found: Extraction) -> str:
    """The new Current State: the extracted one, or the earlier one followed by the open work
    when no assistant text was archived."""
    if found.state_from_assistant:
        return found.current_state
    earlier = " ".join(old.get(CURRENT_STATE, "").split())
    return _clip(f"{earlier} {found.current_state}".strip(), 1200)


def _bullets(items: Iterable[str]) -> str:
    return "\n".join(f"- {item}" for item in items)


def _join(old: str, new: str) -> str:
    return "\n".join(part for part in (old.strip(), new.strip()) if part)


def create_bodies(messages: Sequence[Message], context: str | None) -> dict[str, str]:
    """Section bodies of a new document, carrying forward an earlier one if given."""
    old: dict[str, str] = {}
    if context and is_working_memory(context):
        old = parse_document(context)
    elif context and context.strip():
        # A legacy summary has no sections; its lines are kept as facts rather than lost.
        legacy = [line for line in bullet_items(context) if line.strip()]
        old = {KEY_FACTS: _bullets(f"Earlier summary: {line}" for line in legacy)}
    found = extract(messages, _old_paths(old))
    known = _known(old)
    bodies = {
        SESSION_TITLE: old.get(SESSION_TITLE, "").strip() or found.title,
        CURRENT_STATE: _state(old, found) if found.current_state else old.get(CURRENT_STATE, ""),
        TASK_GOALS: _join(old.get(TASK_GOALS, ""), _bullets(_fresh(found.goals, known))),
        KEY_FACTS: _join(old.get(KEY_FACTS, ""), _bullets(_fresh(found.facts, known))),
        FILES_CONTEXT: _join(
            old.get(FILES_CONTEXT, ""),
            _bullets(_fresh_files(found.files, old.get(FILES_CONTEXT, ""), found.spellings)),
        ),
        ERRORS_CORRECTIONS: _join(
            old.get(ERRORS_CORRECTIONS, ""),
            _bullets(_fresh(found.errors, known)),
        ),
        OPEN_ISSUES: _join(old.get(OPEN_ISSUES, ""), _bullets(_fresh(found.open_issues, known))),
    }
    if not any(body.strip() for body in bodies.values()):
        # Nothing matched a rule (filler text, bare tool traffic): still say what was archived,
        # so a commit never fails for lack of structure in its messages.
        bodies[CURRENT_STATE] = _fallback_state(messages)
    return bodies


def _fallback_state(messages: Sequence[Message]) -> str:
    for message in reversed(messages):
        text = " ".join(message.text().split())
        if text:
            return _clip(f"Latest {message.role.value} message: {text}", 300)
    return f"{len(messages)} messages archived without text content."


def creation_arguments(bodies: Mapping[str, str]) -> dict[str, str]:
    """The creation tool's arguments for the given bodies (one string per section)."""
    return {key: bodies.get(key, "") for key in CREATE_TOOL["input_schema"]["properties"]}


class OfflineProvider:
    """The extractive summarizer behind the provider interface."""

    @property
    def name(self) -> str:
        return "offline"

    @property
    def model(self) -> str:
        return "extractive-v1"

    # Each answer below is worked out in a worker thread: for a large archive it is hundreds
    # of milliseconds of CPU, which on the event loop would stall every RPC of the server (a
    # Phase 1 on PostgreSQL waited 0.4 s behind another session's Phase 2).
    async def update(self, request: UpdateRequest) -> ModelReply:
        arguments = await asyncio.to_thread(update_ops, request.previous_document, request.messages)
        return ModelReply(arguments, "tool_use", Usage(llm_calls=1), model=self.model)

    async def repair(self, request: RepairRequest) -> ModelReply:
        # The extractor's output is always well-formed, so a repair is simply a fresh answer.
        return await self.update(request.update)

    async def create(self, request: CreateRequest) -> ModelReply:
        bodies = await asyncio.to_thread(create_bodies, request.messages, request.context_document)
        return ModelReply(
            creation_arguments(bodies), "tool_use", Usage(llm_calls=1), model=self.model
        )

    async def extract_memories(self, request: MemoryRequest) -> ModelReply:
        ops = await asyncio.to_thread(
            partial(extract_memories, message_dates=request.message_dates),
            request.messages,
            request.existing,
            request.pending,
        )
        return ModelReply(
            memory_tool_arguments(ops), "tool_use", Usage(llm_calls=1), model=self.model
        )

    async def aclose(self) -> None:
        return None
