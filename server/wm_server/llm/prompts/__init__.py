"""The prompt texts (package data, our own words) and the code that fills them in.

The static part of every request, the system prompt, depends only on the purpose of the call,
so a provider can mark it for prompt caching; everything that changes from one commit to the
next (the current document, the reminders, the messages) goes into the user turn.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from wm_core import MemoryRecord
from wm_server.llm.formatting import render_messages, shorten
from wm_server.llm.port import (
    CreateRequest,
    MemoryRequest,
    ModelReply,
    Purpose,
    RepairRequest,
    UpdateRequest,
)

# How much of a rejected answer is shown back to the model in a repair request.
MAX_PREVIOUS_ARGUMENT_CHARS = 4000


@cache
def load(name: str) -> str:
    """One prompt file of this package, without trailing whitespace."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8").rstrip()


def system_prompt(purpose: Purpose) -> str:
    """The static instructions for a call; repair shares the update text (and its cache).
    Memory extraction is a task of its own, with its own instructions."""
    if purpose == Purpose.MEMORY:
        return load("memory.md")
    task = "create.md" if purpose == Purpose.CREATE else "update.md"
    return load("system.md") + "\n\n" + load(task)


def update_user_message(request: UpdateRequest) -> str:
    """The current document, the size warnings if any, and the new messages."""
    parts = [
        "<current_working_memory>\n"
        + request.previous_document.strip()
        + "\n</current_working_memory>"
    ]
    if request.reminders.strip():
        parts.append(request.reminders.strip())
    parts.append("<new_messages>\n" + render_messages(request.messages) + "\n</new_messages>")
    parts.append(
        "Decide one operation for each of the seven sections and call `update_working_memory`."
    )
    return "\n\n".join(parts)


def _previous_arguments(reply: ModelReply) -> str:
    if reply.tool_input is None:
        text = reply.text.strip() or "(empty answer)"
        return "(no tool call; the answer was text)\n" + shorten(text, MAX_PREVIOUS_ARGUMENT_CHARS)
    if isinstance(reply.tool_input, str):
        return shorten(reply.tool_input, MAX_PREVIOUS_ARGUMENT_CHARS)
    return shorten(json.dumps(reply.tool_input, ensure_ascii=False), MAX_PREVIOUS_ARGUMENT_CHARS)


def repair_user_message(request: RepairRequest) -> str:
    """The update request again, followed by what was wrong with the first answer."""
    errors = "\n".join(f"- {error}" for error in request.errors) or "- (no details)"
    parts = [
        update_user_message(request.update),
        load("repair.md"),
        "<validation_errors>\n" + errors + "\n</validation_errors>",
        "<previous_arguments>\n"
        + _previous_arguments(request.previous_reply)
        + "\n</previous_arguments>",
    ]
    if request.previous_reply.stop_reason == "max_tokens":
        parts.append(load("repair_truncated.md"))
    if request.sections:
        parts.append(load("repair_sections.md"))
        parts.append(
            "<sections_to_send>\n"
            + "\n".join(f"- {name}" for name in request.sections)
            + "\n</sections_to_send>"
        )
    return "\n\n".join(parts)


def create_user_message(request: CreateRequest) -> str:
    """The messages, preceded by the earlier summary to carry forward, if there is one."""
    parts: list[str] = []
    if request.context_document and request.context_document.strip():
        parts.append(
            "<previous_working_memory>\n"
            + request.context_document.strip()
            + "\n</previous_working_memory>"
        )
    parts.append(
        "<session_messages>\n" + render_messages(request.messages) + "\n</session_messages>"
    )
    parts.append("Write the complete working memory and call `create_working_memory`.")
    return "\n\n".join(parts)


def _memory_line(memory: MemoryRecord) -> str:
    when = f" (event time {memory.event_time})" if memory.event_time else ""
    return f"- [{memory.id}] ({memory.type.value}) {memory.text}{when}"


def memory_user_message(request: MemoryRequest) -> str:
    """The owner's similar memories (the only ids an op may name), the items the working
    memory could not hold, and the archived messages with their ids."""
    existing = "\n".join(_memory_line(m) for m in request.existing) or "(none yet)"
    parts = ["<existing_memories>\n" + existing + "\n</existing_memories>"]
    if request.pending:
        items = "\n".join(f"- [{item.section}] {item.text}" for item in request.pending)
        parts.append("<not_in_working_memory>\n" + items + "\n</not_in_working_memory>")
    name = f' id="{request.archive_id}"' if request.archive_id else ""
    parts.append(
        f"<archive{name}>\n" + render_messages(request.messages, with_ids=True) + "\n</archive>"
    )
    parts.append("Propose the memory changes this archive calls for and call `update_memories`.")
    return "\n\n".join(parts)
