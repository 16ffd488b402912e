"""The tool schemas an LLM fills in, in Anthropic's tool shape, and their validation.

The update schema is the reference's contract (KEEP / UPDATE{content} / APPEND{items}, every
section required, no extra properties); the enum-of-one form is used for op names because more
schema dialects accept it than ``const``. Validation messages are written for a repair prompt:
for a malformed op they describe what the op it claims to be is missing, rather than jsonschema's
generic "not valid under any of the given schemas".

jsonschema stays the statement and the judge of an invalid answer; a valid one (nearly every
answer) is recognised by plain checks read once from the schema, because jsonschema's walk of
the seven sections cost 0.25 ms of every Phase 2 (on the event loop) and the checks 0.003 ms.
The property test holds the checks to jsonschema's verdict in both directions, and the checks
refuse at import to be made from a schema shape they do not read.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
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


# The update schema read once into plain checks, for the verdict on a valid answer. The schema
# stays the one statement of the rule: these are made from it, and refuse at import to be made
# from a schema they would not read right. Each op branch requires exactly its listed
# properties (no extra ones), its "op" an enum of one name, so the branches exclude each
# other: an op is valid under the ``oneOf`` exactly when the branch its name picks accepts it.
_Check = Callable[[object], bool]


def _is_string(value: object) -> bool:
    return isinstance(value, str)


def _is_strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _field_check(spec: dict[str, Any]) -> _Check:
    """The check of a property schema: a string, or an array of strings (jsonschema's types:
    ``str`` and ``list`` exactly as its default type checker reads them)."""
    shape = {key: value for key, value in spec.items() if key != "description"}
    if shape == {"type": "string"}:
        return _is_string
    assert shape == {"type": "array", "items": {"type": "string"}}, spec
    return _is_strings


def _closed_keys(schema: dict[str, Any]) -> frozenset[str]:
    """The keys an object of ``schema`` has: every listed property, required, no other."""
    keys = frozenset(schema["properties"])
    assert schema["type"] == "object" and schema["additionalProperties"] is False, schema
    assert frozenset(schema["required"]) == keys, schema
    return keys


def _op_shapes() -> dict[str, tuple[frozenset[str], tuple[tuple[str, _Check], ...]]]:
    """Per op name: its keys and the check of each field but "op"."""
    shapes: dict[str, tuple[frozenset[str], tuple[tuple[str, _Check], ...]]] = {}
    for branch in SECTION_OP_SCHEMA["oneOf"]:
        keys = _closed_keys(branch)
        op = {k: v for k, v in branch["properties"]["op"].items() if k != "description"}
        (name,) = op["enum"]
        assert op == {"type": "string", "enum": [name]} and name not in shapes, branch
        fields = tuple(
            (key, _field_check(spec)) for key, spec in branch["properties"].items() if key != "op"
        )
        shapes[name] = (keys, fields)
    return shapes


def _update_keys() -> tuple[frozenset[str], frozenset[str]]:
    """The keys of the arguments and of their "sections" object (each section's op schema
    being SECTION_OP_SCHEMA's ``oneOf``)."""
    schema = UPDATE_TOOL["input_schema"]
    sections = schema["properties"]["sections"]
    assert all(op["oneOf"] == SECTION_OP_SCHEMA["oneOf"] for op in sections["properties"].values())
    return _closed_keys(schema), _closed_keys(sections)


_OP_SHAPES: Final = _op_shapes()
_ARGUMENT_KEYS, _SECTION_KEYS = _update_keys()


def _valid_update(arguments: object) -> bool:
    """Whether ``arguments`` match the update tool's schema: the answer of
    ``_UPDATE_VALIDATOR`` (held to it by a property test), from the checks made of the
    schema above, in a twentieth of its time (0.25 ms an answer on this machine, on every
    commit), which only an invalid answer then pays, for its messages."""
    if not isinstance(arguments, dict) or arguments.keys() != _ARGUMENT_KEYS:
        return False
    sections = arguments["sections"]
    if not isinstance(sections, dict) or sections.keys() != _SECTION_KEYS:
        return False
    for op in sections.values():
        if not isinstance(op, dict):
            return False
        name = op.get("op")
        shape = _OP_SHAPES.get(name) if isinstance(name, str) else None
        if shape is None or op.keys() != shape[0]:
            return False
        for key, check in shape[1]:
            if not check(op[key]):
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
