"""The tool schemas an LLM fills in, in Anthropic's tool shape, and their validation.

The update schema is the reference's contract (KEEP / UPDATE{content} / APPEND{items}, every
section required, no extra properties); the enum-of-one form is used for op names because more
schema dialects accept it than ``const``. Validation messages are written for a repair prompt:
for a malformed op they describe what the op it claims to be is missing, rather than jsonschema's
generic "not valid under any of the given schemas".
"""

from __future__ import annotations

import copy
from typing import Any, Final

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from wm_core._document.sections import (
    CURRENT_STATE,
    ERRORS_CORRECTIONS,
    FILES_CONTEXT,
    KEY_FACTS,
    OPEN_ISSUES,
    SECTION_PURPOSES,
    SECTIONS,
    SESSION_TITLE,
    TASK_GOALS,
)

UPDATE_TOOL_NAME: Final = "update_working_memory"
CREATE_TOOL_NAME: Final = "create_working_memory"

_OP_NAMES: Final = ("KEEP", "UPDATE", "APPEND")

SECTION_OP_SCHEMA: Final[dict[str, Any]] = {
    "oneOf": [
        {
            "type": "object",
            "description": "Leave the section exactly as it is.",
            "properties": {"op": {"type": "string", "enum": ["KEEP"]}},
            "required": ["op"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "description": "Replace the whole section body.",
            "properties": {
                "op": {"type": "string", "enum": ["UPDATE"]},
                "content": {
                    "type": "string",
                    "description": (
                        "The complete new body of the section in Markdown, without the section "
                        "heading. It must still contain every earlier fact that remains valid."
                    ),
                },
            },
            "required": ["op", "content"],
            "additionalProperties": False,
        },
        {
            "type": "object",
            "description": "Add bullet items at the end of the section.",
            "properties": {
                "op": {"type": "string", "enum": ["APPEND"]},
                "items": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "New items, one per entry, without bullet markers.",
                },
            },
            "required": ["op", "items"],
            "additionalProperties": False,
        },
    ]
}

# Short per-section guidance shown next to each op; it states what the guards enforce.
_OP_GUIDANCE: Final = {
    SESSION_TITLE: "Usually KEEP; UPDATE only when the topic changed completely.",
    CURRENT_STATE: "Usually UPDATE; keep mentioning pending items that are still unresolved.",
    TASK_GOALS: "Usually KEEP; an UPDATE must still include every earlier goal.",
    KEY_FACTS: (
        "APPEND new durable facts. UPDATE only to consolidate (keep names, dates and exact "
        "values) or to correct a fact the conversation contradicted."
    ),
    FILES_CONTEXT: "Usually APPEND. An UPDATE may annotate entries but must keep every path.",
    ERRORS_CORRECTIONS: "Append-only: APPEND new items, or KEEP.",
    OPEN_ISSUES: "Usually UPDATE; mark resolved issues (e.g. '[resolved]') instead of deleting.",
}


def _section_op_schema(name: str) -> dict[str, Any]:
    schema = copy.deepcopy(SECTION_OP_SCHEMA)
    schema["description"] = f"{SECTION_PURPOSES[name]} {_OP_GUIDANCE[name]}"
    return schema


UPDATE_TOOL: Final[dict[str, Any]] = {
    "name": UPDATE_TOOL_NAME,
    "description": (
        "Record one decision for each of the seven sections of the session's working memory: "
        "KEEP it unchanged, UPDATE it with a complete new body, or APPEND new bullet items. "
        "Prefer KEEP over APPEND over UPDATE when unsure; information left out of an UPDATE "
        "is lost."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "sections": {
                "type": "object",
                "description": "One op per section, keyed by the exact section name.",
                "properties": {name: _section_op_schema(name) for name in SECTIONS},
                "required": list(SECTIONS),
                "additionalProperties": False,
            }
        },
        "required": ["sections"],
        "additionalProperties": False,
    },
}

CREATE_TOOL: Final[dict[str, Any]] = {
    "name": CREATE_TOOL_NAME,
    "description": (
        "Write the session's working memory from scratch: the Markdown body of each of the "
        "seven sections, without section headings. Use an empty string for a section with "
        "nothing to say."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            name: {"type": "string", "description": SECTION_PURPOSES[name]} for name in SECTIONS
        },
        "required": list(SECTIONS),
        "additionalProperties": False,
    },
}

# Validators work on private copies: a caller mutating the exported dicts cannot change them.
_UPDATE_VALIDATOR: Final = Draft202012Validator(copy.deepcopy(UPDATE_TOOL["input_schema"]))
_CREATE_VALIDATOR: Final = Draft202012Validator(copy.deepcopy(CREATE_TOOL["input_schema"]))


def _op_branches() -> dict[str, Draft202012Validator]:
    """A validator per branch of the section op's ``oneOf``, by the op name it requires.

    Each branch requires "op" to be its own name, so the branches exclude each other: an op
    is valid under the ``oneOf`` exactly when the branch its name picks accepts it."""
    branches: dict[str, Draft202012Validator] = {}
    for branch in SECTION_OP_SCHEMA["oneOf"]:
        (name,) = branch["properties"]["op"]["enum"]
        assert "op" in branch["required"] and name not in branches
        branches[name] = Draft202012Validator(copy.deepcopy(branch))
    return branches


def _update_shell() -> Draft202012Validator:
    """The update schema with every section's op schema left to ``_OP_BRANCHES`` (``True``):
    the shape around the ops (the "sections" object, its seven keys and nothing else)."""
    shell = copy.deepcopy(UPDATE_TOOL["input_schema"])
    sections = shell["properties"]["sections"]["properties"]
    for name, schema in sections.items():
        assert schema["oneOf"] == SECTION_OP_SCHEMA["oneOf"], name
        sections[name] = True
    return Draft202012Validator(shell)


_OP_BRANCHES: Final = _op_branches()
_UPDATE_SHELL: Final = _update_shell()


def _valid_update(arguments: object) -> bool:
    """Whether ``arguments`` match the update tool's schema, the ``oneOf`` of each op read as
    the one branch its name picks: the same answer as ``_UPDATE_VALIDATOR`` at a quarter of
    its cost (it tries all three branches of seven ops, 1.3 ms per answer), which only an
    invalid answer then pays, for its messages."""
    if not _UPDATE_SHELL.is_valid(arguments):
        return False
    assert isinstance(arguments, dict)
    for op in arguments["sections"].values():
        name = op.get("op") if isinstance(op, dict) else None
        branch = _OP_BRANCHES.get(name) if isinstance(name, str) else None
        if branch is None or not branch.is_valid(op):
            return False
    return True


def _where(error: ValidationError) -> str:
    path = "/".join(str(part) for part in error.absolute_path)
    return path or "(arguments)"


def _describe_op_error(error: ValidationError) -> list[str]:
    instance = error.instance
    where = _where(error)
    if not isinstance(instance, dict):
        return [f"{where}: must be an object with an 'op' field"]
    op = instance.get("op")
    if not isinstance(op, str) or op not in _OP_NAMES:
        return [f"{where}: 'op' must be one of {', '.join(_OP_NAMES)} (got {op!r})"]
    branch = _OP_NAMES.index(op)
    details = [
        f"{_where(sub)}: {sub.message}"
        for sub in error.context or ()
        if sub.relative_schema_path and sub.relative_schema_path[0] == branch
    ]
    return details or [f"{where}: {error.message}"]


def _messages(validator: Draft202012Validator, arguments: object) -> list[str]:
    messages: list[str] = []
    errors = sorted(validator.iter_errors(arguments), key=lambda e: [str(p) for p in e.path])
    for error in errors:
        if error.validator == "oneOf":
            messages.extend(_describe_op_error(error))
        else:
            messages.append(f"{_where(error)}: {error.message}")
    return messages


def validate_update_arguments(arguments: object) -> list[str]:
    """Why ``arguments`` do not match the update tool's schema (empty when they do)."""
    if _valid_update(arguments):
        return []
    return _messages(_UPDATE_VALIDATOR, arguments)


def validate_create_arguments(arguments: object) -> list[str]:
    """Why ``arguments`` do not match the creation tool's schema (empty when they do)."""
    return _messages(_CREATE_VALIDATOR, arguments)
