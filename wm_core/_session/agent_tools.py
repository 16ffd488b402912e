"""The tools a runtime registers with its model so that it can recall what the working
memory condensed, read a stored tool output whole, and keep or forget long-term memories.

GetToolDefinitions serves these definitions (Anthropic's shape, and OpenAI's through
:func:`openai_tool`), AssembleContext accepts only their names in ``registered_tools``, and
the system-prompt addition (``prompt.py``) names the same tools. The limits a schema states
are the ones the service enforces, written once here: the service's checks import them.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from wm_core._memory.model import MEMORY_TYPES
from wm_core._ops.schema import UPDATE_TOOL
from wm_core._session.commits import ARCHIVE_ID_PATTERN
from wm_core._session.prompt import (
    ARCHIVE_EXPAND,
    ARCHIVE_SEARCH,
    MEMORY_FORGET,
    MEMORY_SEARCH,
    MEMORY_STORE,
    TOOL_OUTPUT_READ,
)

# A memory's text, at most, however it is written (CreateMemory, UpdateMemory, memory_store);
# the extractor's own ops are held shorter (MAX_MEMORY_TEXT_CHARS).
MAX_STORED_MEMORY_CHARS: Final = 2000
# The memories one search returns, at most (SearchMemories' limit, memory_search's).
MAX_MEMORY_HITS: Final = 50
# What a memory id looks like (a regular expression, matched whole).
MEMORY_ID_PATTERN: Final = "mem_[0-9a-f]{20}"

_ARCHIVE_EXPAND: Final[dict[str, Any]] = {
    "name": ARCHIVE_EXPAND,
    "description": (
        "Fetch the original, verbatim messages of one archive of this session. Use it when the "
        "[Session History Summary] mentions something but lacks the exact detail you need "
        "(a command, a file path, a code snippet, a configuration value, an error message). "
        "Archive ids look like archive_001; archive_search results name them."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "archive_id": {
                "type": "string",
                "description": "The archive to expand, e.g. archive_002.",
                "pattern": f"^{ARCHIVE_ID_PATTERN}$",
            }
        },
        "required": ["archive_id"],
        "additionalProperties": False,
    },
}

_ARCHIVE_SEARCH: Final[dict[str, Any]] = {
    "name": ARCHIVE_SEARCH,
    "description": (
        "Search the archived original messages of this session, best match first: by the "
        "words of the query and by meaning, so a question in your own words finds a message "
        "that says it differently (a query of symbols only, like a bracket, is matched "
        "literally). Use it whenever the summary lacks a detail the user asks about, before "
        "saying something was never mentioned: ask with the concrete words of the question "
        "(names, paths, numbers, dates) and, if the first search misses, once more in other "
        "words; conclude the information is absent only after at least two variants."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "What you look for: key words, a short phrase or a question.",
            },
            "archive_id": {
                "type": "string",
                "description": "Optional: search only this archive, e.g. archive_003.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
}

_TOOL_OUTPUT_READ: Final[dict[str, Any]] = {
    "name": TOOL_OUTPUT_READ,
    "description": (
        "Read a tool output that was too large to show: the conversation has its synopsis, "
        "headed [Tool output ID stored in full ...]. Give that id and the lines you need "
        "(the synopsis numbers them, e.g. the error lines); without lines, the output is read "
        "from its first line, as much as fits in one page."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "output_id": {
                "type": "string",
                "description": "The id the synopsis names, e.g. out.m42.1.",
            },
            "start_line": {
                "type": "integer",
                "minimum": 1,
                "description": "Optional: the first line to read (from 1).",
            },
            "line_count": {
                "type": "integer",
                "minimum": 1,
                "description": "Optional: how many lines to read.",
            },
        },
        "required": ["output_id"],
        "additionalProperties": False,
    },
}

_MEMORY_SEARCH: Final[dict[str, Any]] = {
    "name": MEMORY_SEARCH,
    "description": (
        "Search the user's long-term memories: what earlier sessions learned about them, "
        "their preferences, the entities, events, decisions and procedures of their work. "
        "Ranked by the words of the query, best first; use it before asking the user for "
        "something they may have told you before."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Key words of what you look for."},
            "types": {
                "type": "array",
                "items": {"type": "string", "enum": list(MEMORY_TYPES)},
                "description": "Optional: only memories of these types.",
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_MEMORY_HITS},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
}

_MEMORY_STORE: Final[dict[str, Any]] = {
    "name": MEMORY_STORE,
    "description": (
        "Keep a lasting fact for later sessions: one short sentence the user stated or "
        "confirmed (a preference, who they are, a decision and its reason, a dated event, a "
        "procedure). Not for what matters only in this conversation."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": list(MEMORY_TYPES)},
            "text": {"type": "string", "maxLength": MAX_STORED_MEMORY_CHARS},
            "event_time": {
                "type": "string",
                "description": "Optional: when it happened, ISO 8601 (2026-03-01).",
            },
        },
        "required": ["type", "text"],
        "additionalProperties": False,
    },
}

_MEMORY_FORGET: Final[dict[str, Any]] = {
    "name": MEMORY_FORGET,
    "description": (
        "Forget a long-term memory for good, when the user asks you to or it is wrong: give "
        "its id (memory_search results and recalled memories name it, e.g. mem_0123...)."
    ),
    "input_schema": {
        "type": "object",
        "properties": {"memory_id": {"type": "string", "pattern": f"^{MEMORY_ID_PATTERN}$"}},
        "required": ["memory_id"],
        "additionalProperties": False,
    },
}

_TOOLS: Final = (_ARCHIVE_EXPAND, _ARCHIVE_SEARCH, _TOOL_OUTPUT_READ, UPDATE_TOOL)
_TOOLS_ALL: Final = (*_TOOLS, _MEMORY_SEARCH, _MEMORY_STORE, _MEMORY_FORGET)
# The names a runtime may register (AssembleContext's registered_tools).
AGENT_TOOL_NAMES: Final = frozenset(str(tool["name"]) for tool in _TOOLS_ALL)


def agent_tools() -> list[dict[str, Any]]:
    """Every tool's definition in Anthropic's shape (name, description, input_schema), in
    the order GetToolDefinitions serves them; a copy the caller may change."""
    return copy.deepcopy(list(_TOOLS_ALL))


def openai_responses_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A definition of :func:`agent_tools` in the OpenAI Responses API's function-tool shape
    (flat: name, description and parameters beside the type)."""
    return {
        "type": "function",
        "name": tool["name"],
        "description": tool["description"],
        "parameters": tool["input_schema"],
    }


def openai_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A definition of :func:`agent_tools` in OpenAI's function-calling shape."""
    return {
        "type": "function",
        "function": {
            "name": tool["name"],
            "description": tool["description"],
            "parameters": tool["input_schema"],
        },
    }
