"""The session rules: window accounting, the commit split, when a session commits itself,
context assembly, the abstract, the synopsis of an externalized tool output.

They decide what a session's counters say, what a commit archives and what the model sees
next, so the server's stores and services must all apply them the same way; written here,
pure, they are tested without a database. Import them from the ``wm_core`` facade.
"""

from __future__ import annotations

from wm_core._session.abstract import abstract_of
from wm_core._session.agent_tools import (
    AGENT_TOOL_NAMES,
    MAX_MEMORY_HITS,
    MAX_STORED_MEMORY_CHARS,
    MEMORY_ID_PATTERN,
    agent_tools,
    openai_responses_tool,
    openai_tool,
)
from wm_core._session.assembly import (
    CURRENT_TURN,
    LIVE_MESSAGES,
    MEMORY_TOOLS,
    RECALL_TOOLS,
    RECALLED_MEMORIES,
    UNCOVERED_ARCHIVES,
    WORKING_MEMORY,
    AssembledContext,
    Budget,
    PartUsage,
    anthropic_json,
    assemble,
    cut_text,
    plan_budget,
    system_prompt_addition,
    trim_working_memory,
)
from wm_core._session.chunks import chunk_messages, cut_message
from wm_core._session.commits import (
    ARCHIVE_ID_PATTERN,
    CommitState,
    SkipReason,
    archive_name,
    archive_number,
)
from wm_core._session.config import (
    DEFAULT_AUTO_KEEP,
    AutoCommitPolicy,
    SessionSettings,
    Trigger,
    idle_due,
    threshold_trigger,
)
from wm_core._session.split import NeedRows, SplitRow, split_boundary, turn_aligned, turn_start
from wm_core._session.synopsis import (
    SYNOPSIS_MAX_CHARS,
    ExternalOutput,
    OutputFormat,
    OutputKind,
    detect_format,
    externalize,
    line_count,
    output_ids,
    synopsis,
)
from wm_core._session.turns import is_request
from wm_core._session.window import pending_delta, rebuild_rule

__all__ = [
    "AGENT_TOOL_NAMES",
    "ARCHIVE_ID_PATTERN",
    "CURRENT_TURN",
    "DEFAULT_AUTO_KEEP",
    "LIVE_MESSAGES",
    "MAX_MEMORY_HITS",
    "MAX_STORED_MEMORY_CHARS",
    "MEMORY_ID_PATTERN",
    "MEMORY_TOOLS",
    "RECALLED_MEMORIES",
    "RECALL_TOOLS",
    "SYNOPSIS_MAX_CHARS",
    "UNCOVERED_ARCHIVES",
    "WORKING_MEMORY",
    "AssembledContext",
    "AutoCommitPolicy",
    "Budget",
    "CommitState",
    "ExternalOutput",
    "NeedRows",
    "OutputFormat",
    "OutputKind",
    "PartUsage",
    "SessionSettings",
    "SkipReason",
    "SplitRow",
    "Trigger",
    "abstract_of",
    "agent_tools",
    "anthropic_json",
    "archive_name",
    "archive_number",
    "assemble",
    "chunk_messages",
    "cut_message",
    "cut_text",
    "detect_format",
    "externalize",
    "idle_due",
    "is_request",
    "line_count",
    "openai_responses_tool",
    "openai_tool",
    "output_ids",
    "pending_delta",
    "plan_budget",
    "rebuild_rule",
    "split_boundary",
    "synopsis",
    "system_prompt_addition",
    "threshold_trigger",
    "trim_working_memory",
    "turn_aligned",
    "turn_start",
]
