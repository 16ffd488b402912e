"""The offline summarizer's answers: the update tool's per-section ops against an earlier
document, and the section bodies of a new document (carrying an earlier one forward).

Only what no section of the earlier document holds yet is added (items compared as the engine
compares them, tags ignored; paths in any spelling); answered questions of Open Issues are
marked "[resolved]" with the answer, never removed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from wm_core._document.items import bullet_items, item_key
from wm_core._document.markdown import is_working_memory, parse_document
from wm_core._document.paths import references
from wm_core._document.sections import (
    CURRENT_STATE,
    ERRORS_CORRECTIONS,
    FILES_CONTEXT,
    KEY_FACTS,
    OPEN_ISSUES,
    SECTIONS,
    SESSION_TITLE,
    TASK_GOALS,
)
from wm_core._document.sentences import sentences
from wm_core._messages import Message, Role
from wm_core._summary.extract import Summary, summarize
from wm_core._summary.spellings import PathSpellings
from wm_core._summary.text import ITEM_TAGS, clip, core_text, stems, text_parts
from wm_core._summary.traces import find_paths


def _known(old: Mapping[str, str]) -> set[str]:
    """The comparison keys of every item an earlier document holds, in any section."""
    return {
        item_key(core_text(item))
        for name in SECTIONS
        if name not in (SESSION_TITLE, CURRENT_STATE)
        for item in bullet_items(old.get(name, ""))
    }


def _fresh(items: Iterable[str], known: set[str]) -> list[str]:
    """Items no section of the earlier document holds yet (whole-item comparison, tags
    ignored, as the engine compares items)."""
    return [item for item in items if item_key(core_text(item)) not in known]


def _fresh_files(items: Iterable[str], old_body: str, spellings: PathSpellings) -> list[str]:
    """File items whose path the section does not list yet, in any spelling."""
    known = {spellings.canonical(path) for path in references(old_body) | set(find_paths(old_body))}
    return [item for item in items if item.split(" — ", 1)[0] not in known]


def _old_paths(old: Mapping[str, str]) -> list[str]:
    body = old.get(FILES_CONTEXT, "")
    return sorted(references(body) | set(find_paths(body)))


def _append(items: Sequence[str]) -> dict[str, Any]:
    return {"op": "APPEND", "items": list(items)} if items else {"op": "KEEP"}


def summary_update_ops(previous_document: str, messages: Sequence[Message]) -> dict[str, Any]:
    """The ``update_working_memory`` arguments for these messages."""
    old = parse_document(previous_document)
    found = summarize(messages, _old_paths(old))
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
    wanted = stems(ITEM_TAGS.sub("", question))
    if len(wanted) < 2:
        return ""  # too little to judge; leave the issue open
    needed = max(2, -(-len(wanted) // 2))
    best, best_overlap = "", 0
    for reply in replies:
        for sentence in sentences(reply):
            overlap = len(wanted & stems(sentence))
            if overlap > best_overlap:
                best, best_overlap = sentence, overlap
    return clip(best, 200) if best_overlap >= needed else ""


def _open_issues_op(
    old_body: str, new_items: list[str], messages: Sequence[Message]
) -> dict[str, Any]:
    """APPEND new issues; an UPDATE that marks answered questions "[resolved]" when there are some.

    Nothing is removed: a resolved question keeps its full text behind the marker (which is
    also what lets the Open Issues guard recognise it), followed by the answer that settled it.
    """
    replies = [
        "\n".join(text_parts(m)) for m in messages if m.role == Role.ASSISTANT and text_parts(m)
    ]
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


def _state(old: Mapping[str, str], found: Summary) -> str:
    """The new Current State: the extracted one, or the earlier one followed by the open work
    when no assistant text was archived."""
    if found.state_from_assistant:
        return found.current_state
    earlier = " ".join(old.get(CURRENT_STATE, "").split())
    return clip(f"{earlier} {found.current_state}".strip(), 1200)


def _bullets(items: Iterable[str]) -> str:
    return "\n".join(f"- {item}" for item in items)


def _join(old: str, new: str) -> str:
    return "\n".join(part for part in (old.strip(), new.strip()) if part)


def summary_bodies(messages: Sequence[Message], context: str | None) -> dict[str, str]:
    """Section bodies of a new document, carrying forward an earlier one if given."""
    old: dict[str, str] = {}
    if context and is_working_memory(context):
        old = parse_document(context)
    elif context and context.strip():
        # A legacy summary has no sections; its lines are kept as facts rather than lost.
        legacy = [line for line in bullet_items(context) if line.strip()]
        old = {KEY_FACTS: _bullets(f"Earlier summary: {line}" for line in legacy)}
    found = summarize(messages, _old_paths(old))
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
            return clip(f"Latest {message.role.value} message: {text}", 300)
    return f"{len(messages)} messages archived without text content."
