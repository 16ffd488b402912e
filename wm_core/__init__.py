"""The working-memory engine: a pure library, no I/O, no clocks, no randomness.

This module is the engine's whole public surface (DESIGN.md, section 2); the server, the
clients and the benchmarks import from here only, and ``make test`` fails when code outside
the package reaches into a private module (``wm_core._*``). The implementation lives in
private subpackages grouped by concern:

- ``_document``: the seven sections, reading and writing the document, items and references;
- ``_ops``: section ops, the tool schemas, reading tool arguments and creation output;
- ``_guards``: the per-section guards;
- ``_merge``: applying ops to a document, recording every intervention;
- ``_tokens``: the token estimate, the thresholds and the size reminders;
- ``_messages``: the conversation as the domain sees it;
- ``_memory``: long-term memories, the ops that change them and their guards;
- ``_summary``: the offline summarizer (a working memory written by rules, no model).

What is here:

Documents
    :data:`SECTIONS` (the seven names, in order) and one constant per name;
    :func:`parse_document`, :func:`parse_document_detailed` (:class:`ParsedDocument`),
    :func:`render_document`, :func:`is_working_memory`, :func:`canonical_name`.
Items and references
    :func:`bullet_items` (the items of a body), :func:`item_key` (when two items are the same),
    :func:`references` (the file paths and URLs a text mentions).
Ops and merging
    :class:`SectionOp` (:class:`OpKind`; :data:`KEEP` is ``SectionOp.keep()``), :func:`merge`
    (:class:`MergeResult`, one :class:`Decision` per intervention, by :class:`Guard`; stored
    as a :class:`DecisionDict`), within :class:`WmLimits` (:data:`DEFAULT_LIMITS`: the hard
    size bound of the document);
    :func:`bound_document` applies that bound to a document made without a merge.
Pending items
    :class:`PendingItem` (what a guard refused, kept for the next update), :func:`refused_items`,
    :func:`carry_pending` and :func:`settle_pending` (the bound: the overflow item
    ``PENDING_OVERFLOW``, ``MAX_PENDING_TOKENS``; what leaves the list is written to long-term
    memory by :func:`safekeeping_ops`, marked :data:`KEPT_FROM_PENDING`), :func:`pending_reminder`.
Model output
    :data:`UPDATE_TOOL`, :data:`CREATE_TOOL`, :func:`validate_update_arguments`,
    :func:`validate_create_arguments`, :func:`parse_tool_arguments` (:class:`ParsedOps`,
    :class:`ReadMethod`), :func:`normalize_creation` (:class:`CreationResult`, or
    :class:`CreationRejected`).
Sizes
    :func:`estimate_tokens`, :func:`message_tokens`, :func:`section_reminders`.
Phase 2 input
    :func:`chunk_messages` (an archive in chunks within a token budget, at turn boundaries),
    :func:`cut_message` (one message's head and tail within a budget).
Conversation
    :class:`Message` of :data:`Part` (:class:`TextPart`, :class:`ToolUsePart`,
    :class:`ToolResultPart`) by :class:`Role`; :func:`is_request` (where a turn starts).
Session rules
    :func:`pending_delta` and :func:`rebuild_rule` (the window), :func:`split_boundary`
    (:class:`SplitRow`, :class:`NeedRows`; the commit split), :func:`turn_start` and
    :func:`turn_aligned` (a split that keeps whole turns), :func:`assemble`
    (:class:`AssembledContext`, :func:`plan_budget` → :class:`Budget`,
    :func:`trim_working_memory`, :func:`cut_text`, :func:`anthropic_json`,
    :func:`system_prompt_addition` naming only the registered :data:`RECALL_TOOLS`),
    :func:`abstract_of`.
Long-term memory
    :class:`MemoryRecord` (of a :class:`MemoryType`, :data:`MEMORY_TYPES`), :class:`MemoryOp`
    (:class:`MemoryOpKind`), :class:`MemoryPlan` (one :class:`MemoryDecision` per op, by
    :class:`MemoryVerdict`); :func:`fold_text` (the one case-insensitive comparison),
    :func:`memory_key` (when two memory texts are duplicates); :data:`MEMORY_TOOL` (:data:`MAX_MEMORY_OPS`,
    :data:`MAX_MEMORY_TEXT_CHARS`), :func:`validate_memory_arguments`,
    :func:`parse_memory_ops` (:class:`ParsedMemoryOps`) and back, :func:`memory_tool_arguments`
    (:func:`memory_op_arguments`); :func:`guard_memory_ops` (by
    :func:`memory_key`, :func:`retire_supported` and :func:`missing_anchors`, the
    engine's lexical anchors a rewrite lost); :func:`extract_memories` (the deterministic
    extractor, judged against :func:`archive_text`; sentences by :func:`sentences`, dated by :func:`stamp_date`;
    a clause no rule recognises read by a generated linear classifier whose training reads
    the sets through :func:`disclosure_units` and :func:`disclosure_features`, labels
    :data:`DISCLOSURE_NONE` or a memory type);
    :func:`supersessions` (:class:`Supersessions`): which existing memories a plan's new
    facts supersede, among those found by :func:`supersession_query`.
Offline summarizer
    :func:`summarize` (:class:`Summary`: the messages sorted into the sections, each item in
    one section; titles by :func:`summary_title`, paths spelled one way by
    :class:`PathSpellings`), :func:`summary_update_ops` (the update tool's arguments against
    an earlier document) and :func:`summary_bodies` (the bodies of a new document).
Agent tools
    :func:`agent_tools` (the recall and memory tools a runtime registers, GetToolDefinitions'
    definitions; :data:`AGENT_TOOL_NAMES`; :func:`openai_tool` in OpenAI's shape, :func:`openai_responses_tool` in its Responses API's), with the
    limits their schemas state and the service enforces: :data:`MAX_STORED_MEMORY_CHARS`,
    :data:`MAX_MEMORY_HITS`, :data:`MEMORY_ID_PATTERN`, :data:`ARCHIVE_ID_PATTERN` (an id of
    :func:`archive_name`; :func:`archive_number` reads one back).
Tool outputs
    :func:`externalize` (:class:`ExternalOutput`, :class:`OutputKind`) replaces outputs over
    a threshold by their :func:`synopsis` (by :func:`detect_format`, :class:`OutputFormat`;
    at most :data:`SYNOPSIS_MAX_CHARS`); :func:`output_ids` reads the ids back from a
    message; :func:`line_count` numbers lines as reads do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wm_core._decisions import Decision, DecisionDict, Guard
from wm_core._document.items import bullet_items, item_key
from wm_core._document.markdown import (
    ParsedDocument,
    is_working_memory,
    parse_document,
    parse_document_detailed,
    render_document,
)
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
    canonical_name,
)
from wm_core._document.sentences import sentences, stamp_date
from wm_core._guards.bound import DEFAULT_LIMITS, WmLimits
from wm_core._guards.key_facts import missing_anchors
from wm_core._guards.pending import (
    MAX_PENDING_TOKENS,
    PendingItem,
    carry_pending,
    pending_reminder,
    refused_items,
    settle_pending,
    unfold_pending,
)
from wm_core._guards.pending import OVERFLOW as PENDING_OVERFLOW
from wm_core._memory.guard import archive_text, guard_memory_ops, retire_supported
from wm_core._memory.model import (
    MEMORY_TYPES,
    MemoryDecision,
    MemoryOp,
    MemoryOpKind,
    MemoryPlan,
    MemoryRecord,
    MemoryType,
    MemoryVerdict,
    fold_text,
    memory_key,
)
from wm_core._memory.safekeeping import KEPT_FROM_PENDING, safekeeping_ops
from wm_core._memory.supersede import Supersessions, supersession_query, supersessions
from wm_core._memory.tool import (
    MAX_MEMORY_OPS,
    MAX_MEMORY_TEXT_CHARS,
    MEMORY_TOOL,
    ParsedMemoryOps,
    memory_op_arguments,
    memory_tool_arguments,
    parse_memory_ops,
    validate_memory_arguments,
)
from wm_core._merge import MergeResult, bound_document, merge
from wm_core._messages import (
    Message,
    Part,
    Role,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    message_tokens,
)
from wm_core._ops.creation import CreationRejected, CreationResult, normalize_creation
from wm_core._ops.recovery import ParsedOps, ReadMethod, parse_tool_arguments
from wm_core._ops.schema import (
    CREATE_TOOL,
    UPDATE_TOOL,
    validate_create_arguments,
    validate_update_arguments,
)
from wm_core._ops.section_ops import KEEP, OpKind, SectionOp
from wm_core._session import (
    AGENT_TOOL_NAMES,
    ARCHIVE_ID_PATTERN,
    CURRENT_TURN,
    DEFAULT_AUTO_KEEP,
    LIVE_MESSAGES,
    MAX_MEMORY_HITS,
    MAX_STORED_MEMORY_CHARS,
    MEMORY_ID_PATTERN,
    MEMORY_TOOLS,
    RECALL_TOOLS,
    RECALLED_MEMORIES,
    SYNOPSIS_MAX_CHARS,
    UNCOVERED_ARCHIVES,
    WORKING_MEMORY,
    AssembledContext,
    AutoCommitPolicy,
    Budget,
    CommitState,
    ExternalOutput,
    NeedRows,
    OutputFormat,
    OutputKind,
    PartUsage,
    SessionSettings,
    SkipReason,
    SplitRow,
    Trigger,
    abstract_of,
    agent_tools,
    anthropic_json,
    archive_name,
    archive_number,
    assemble,
    chunk_messages,
    cut_message,
    cut_text,
    detect_format,
    externalize,
    idle_due,
    is_request,
    line_count,
    openai_responses_tool,
    openai_tool,
    output_ids,
    pending_delta,
    plan_budget,
    rebuild_rule,
    split_boundary,
    synopsis,
    system_prompt_addition,
    threshold_trigger,
    trim_working_memory,
    turn_aligned,
    turn_start,
)
from wm_core._summary.extract import Summary, summarize
from wm_core._summary.ops import summary_bodies, summary_update_ops
from wm_core._summary.spellings import PathSpellings
from wm_core._summary.text import summary_title
from wm_core._tokens.estimate import estimate_tokens
from wm_core._tokens.reminders import section_reminders

# The deterministic extractor loads on first use: its rules compile about 250 regular
# expressions at import, 0.3 CPU s of every process that imports wm_core (a server's start
# was 1.8 CPU s), and a server whose provider is a model never runs it.
_DISCLOSURE = {"DISCLOSURE_NONE": "NONE", "disclosure_features": "features",
               "disclosure_units": "units"}  # fmt: skip
if TYPE_CHECKING:
    from wm_core._memory.disclosure import NONE as DISCLOSURE_NONE
    from wm_core._memory.disclosure import features as disclosure_features
    from wm_core._memory.disclosure import units as disclosure_units
    from wm_core._memory.extract import extract_memories


def __getattr__(name: str) -> object:
    """``extract_memories`` and the disclosure classifier's names, imported on first use and
    kept (PEP 562)."""
    value: object
    if name == "extract_memories":
        from wm_core._memory.extract import extract_memories as value
    elif name in _DISCLOSURE:
        from wm_core._memory import disclosure

        value = getattr(disclosure, _DISCLOSURE[name])
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = [
    "AGENT_TOOL_NAMES",
    "ARCHIVE_ID_PATTERN",
    "CREATE_TOOL",
    "CURRENT_STATE",
    "CURRENT_TURN",
    "DEFAULT_AUTO_KEEP",
    "DEFAULT_LIMITS",
    "DISCLOSURE_NONE",
    "ERRORS_CORRECTIONS",
    "FILES_CONTEXT",
    "KEEP",
    "KEPT_FROM_PENDING",
    "KEY_FACTS",
    "LIVE_MESSAGES",
    "MAX_MEMORY_HITS",
    "MAX_MEMORY_OPS",
    "MAX_MEMORY_TEXT_CHARS",
    "MAX_PENDING_TOKENS",
    "MAX_STORED_MEMORY_CHARS",
    "MEMORY_ID_PATTERN",
    "MEMORY_TOOL",
    "MEMORY_TOOLS",
    "MEMORY_TYPES",
    "OPEN_ISSUES",
    "PENDING_OVERFLOW",
    "RECALLED_MEMORIES",
    "RECALL_TOOLS",
    "SECTIONS",
    "SESSION_TITLE",
    "SYNOPSIS_MAX_CHARS",
    "TASK_GOALS",
    "UNCOVERED_ARCHIVES",
    "UPDATE_TOOL",
    "WORKING_MEMORY",
    "AssembledContext",
    "AutoCommitPolicy",
    "Budget",
    "CommitState",
    "CreationRejected",
    "CreationResult",
    "Decision",
    "DecisionDict",
    "ExternalOutput",
    "Guard",
    "MemoryDecision",
    "MemoryOp",
    "MemoryOpKind",
    "MemoryPlan",
    "MemoryRecord",
    "MemoryType",
    "MemoryVerdict",
    "MergeResult",
    "Message",
    "NeedRows",
    "OpKind",
    "OutputFormat",
    "OutputKind",
    "ParsedDocument",
    "ParsedMemoryOps",
    "ParsedOps",
    "Part",
    "PartUsage",
    "PathSpellings",
    "PendingItem",
    "ReadMethod",
    "Role",
    "SectionOp",
    "SessionSettings",
    "SkipReason",
    "SplitRow",
    "Summary",
    "Supersessions",
    "TextPart",
    "ToolResultPart",
    "ToolUsePart",
    "Trigger",
    "WmLimits",
    "abstract_of",
    "agent_tools",
    "anthropic_json",
    "archive_name",
    "archive_number",
    "archive_text",
    "assemble",
    "bound_document",
    "bullet_items",
    "canonical_name",
    "carry_pending",
    "chunk_messages",
    "cut_message",
    "cut_text",
    "detect_format",
    "disclosure_features",
    "disclosure_units",
    "estimate_tokens",
    "externalize",
    "extract_memories",
    "fold_text",
    "guard_memory_ops",
    "idle_due",
    "is_request",
    "is_working_memory",
    "item_key",
    "line_count",
    "memory_key",
    "memory_op_arguments",
    "memory_tool_arguments",
    "merge",
    "message_tokens",
    "missing_anchors",
    "normalize_creation",
    "openai_responses_tool",
    "openai_tool",
    "output_ids",
    "parse_document",
    "parse_document_detailed",
    "parse_memory_ops",
    "parse_tool_arguments",
    "pending_delta",
    "pending_reminder",
    "plan_budget",
    "rebuild_rule",
    "references",
    "refused_items",
    "render_document",
    "retire_supported",
    "safekeeping_ops",
    "section_reminders",
    "sentences",
    "settle_pending",
    "split_boundary",
    "stamp_date",
    "summarize",
    "summary_bodies",
    "summary_title",
    "summary_update_ops",
    "supersession_query",
    "supersessions",
    "synopsis",
    "system_prompt_addition",
    "threshold_trigger",
    "trim_working_memory",
    "turn_aligned",
    "turn_start",
    "unfold_pending",
    "validate_create_arguments",
    "validate_memory_arguments",
    "validate_update_arguments",
]
