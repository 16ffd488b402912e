"""The working-memory engine: a pure library, no I/O, no clocks, no randomness.

The facade below is the stable surface the server and outside tests rely on (DESIGN.md,
section 2). Everything else in the package is an implementation detail, importable for tests.
"""

from __future__ import annotations

from wm_core._session import (
    AssembledContext,
    Budget,
    NeedRows,
    SplitRow,
    abstract_of,
    anthropic_json,
    assemble,
    pending_delta,
    plan_budget,
    rebuild_rule,
    split_boundary,
    trim_working_memory,
)
from wm_core.creation import CreationRejected, CreationResult, normalize_creation
from wm_core.decisions import Decision, Guard
from wm_core.document import (
    ParsedDocument,
    is_working_memory,
    parse_document,
    parse_document_detailed,
    render_document,
)
from wm_core.merging import MergeResult, merge
from wm_core.messages import (
    Message,
    Part,
    Role,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    message_tokens,
)
from wm_core.ops import OpKind, SectionOp
from wm_core.recovery import ParsedOps, ReadMethod, parse_tool_arguments
from wm_core.reminders import section_reminders
from wm_core.schema import (
    CREATE_TOOL,
    UPDATE_TOOL,
    validate_create_arguments,
    validate_update_arguments,
)
from wm_core.sections import SECTIONS
from wm_core.tokens import estimate_tokens

__all__ = [
    "CREATE_TOOL",
    "SECTIONS",
    "UPDATE_TOOL",
    "AssembledContext",
    "Budget",
    "CreationRejected",
    "CreationResult",
    "Decision",
    "Guard",
    "MergeResult",
    "Message",
    "NeedRows",
    "OpKind",
    "ParsedDocument",
    "ParsedOps",
    "Part",
    "ReadMethod",
    "Role",
    "SectionOp",
    "SplitRow",
    "TextPart",
    "ToolResultPart",
    "ToolUsePart",
    "abstract_of",
    "anthropic_json",
    "assemble",
    "estimate_tokens",
    "is_working_memory",
    "merge",
    "message_tokens",
    "normalize_creation",
    "parse_document",
    "parse_document_detailed",
    "parse_tool_arguments",
    "pending_delta",
    "plan_budget",
    "rebuild_rule",
    "render_document",
    "section_reminders",
    "split_boundary",
    "trim_working_memory",
    "validate_create_arguments",
    "validate_update_arguments",
]
