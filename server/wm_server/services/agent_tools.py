"""The tools a runtime registers with its model (GetToolDefinitions serves them)."""

from __future__ import annotations

import json
from typing import Any

from wm_core import MEMORY_TYPES, UPDATE_TOOL

ARCHIVE_EXPAND: dict[str, Any] = {
    "name": "archive_expand",
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
                "pattern": "^archive_[0-9]{3,}$",
            }
        },
        "required": ["archive_id"],
        "additionalProperties": False,
    },
}

ARCHIVE_SEARCH: dict[str, Any] = {
    "name": "archive_search",
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


TOOL_OUTPUT_READ: dict[str, Any] = {
    "name": "tool_output_read",
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


MEMORY_SEARCH: dict[str, Any] = {
    "name": "memory_search",
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
            "limit": {"type": "integer", "minimum": 1, "maximum": 50},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
}

MEMORY_STORE: dict[str, Any] = {
    "name": "memory_store",
    "description": (
        "Keep a lasting fact for later sessions: one short sentence the user stated or "
        "confirmed (a preference, who they are, a decision and its reason, a dated event, a "
        "procedure). Not for what matters only in this conversation."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": list(MEMORY_TYPES)},
            "text": {"type": "string", "maxLength": 2000},
            "event_time": {
                "type": "string",
                "description": "Optional: when it happened, ISO 8601 (2026-03-01).",
            },
        },
        "required": ["type", "text"],
        "additionalProperties": False,
    },
}

MEMORY_FORGET: dict[str, Any] = {
    "name": "memory_forget",
    "description": (
        "Forget a long-term memory for good, when the user asks you to or it is wrong: give "
        "its id (memory_search results and recalled memories name it, e.g. mem_0123...)."
    ),
    "input_schema": {
        "type": "object",
        "properties": {"memory_id": {"type": "string", "pattern": "^mem_[0-9a-f]{20}$"}},
        "required": ["memory_id"],
        "additionalProperties": False,
    },
}


def tool_definitions() -> list[dict[str, Any]]:
    return [
        ARCHIVE_EXPAND, ARCHIVE_SEARCH, TOOL_OUTPUT_READ, dict(UPDATE_TOOL), MEMORY_SEARCH,
        MEMORY_STORE, MEMORY_FORGET,
    ]  # fmt: skip


def openai_shape(tool: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool["name"],
            "description": tool["description"],
            "parameters": tool["input_schema"],
        },
    }


def as_json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


TOOL_NAMES = frozenset(t["name"] for t in tool_definitions())
