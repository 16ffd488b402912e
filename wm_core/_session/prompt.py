"""The system-prompt addition: how the model should read the summary and recall what it
condensed, naming only the recall and memory tools a runtime registered (GetToolDefinitions
serves them; an addition that names a tool the model cannot call invites a failed call)."""

from __future__ import annotations

from collections.abc import Collection

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
