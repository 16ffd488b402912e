"""The tool a model fills in to change an owner's long-term memories, and its reader.

One op shape for the four kinds, not a ``oneOf`` per kind: the strict (grammar-constrained)
dialects of both vendors take a flat object far more readily, and what differs between kinds
(how many target ids, whether a text or a reason is needed) is checked here, in words a repair
prompt can use. Structured fields are a list of ``{name, value}`` pairs rather than a free
object, because a strict schema cannot describe an object with arbitrary keys.

The reader recovers what it can, as the working-memory reader does (it shares its JSON
decoding chain, ``decode_arguments``): a broken op costs that op, never the whole answer. An
answer cut off at the output limit loses its unfinished last op, which could be a fragment
("Prefers" without what). Every repair and every dropped op is reported in ``problems``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from jsonschema import Draft202012Validator

from wm_core._memory.model import MEMORY_TYPES, MemoryOp, MemoryOpKind, MemoryType
from wm_core._ops.recovery import ReadMethod, cut_off, decode_arguments

MEMORY_TOOL_NAME: Final = "update_memories"
MAX_MEMORY_TEXT_CHARS: Final = 500  # a memory is one short statement
MAX_MEMORY_OPS: Final = 50  # per call; more than this is not extraction but a dump
MAX_MEMORY_FIELDS: Final = 12
MAX_FIELD_CHARS: Final = 200
MAX_REASON_CHARS: Final = 500
MAX_SOURCE_IDS: Final = 50

_KINDS: Final = tuple(kind.name for kind in MemoryOpKind)

_OP_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "op": {
            "type": "string",
            "enum": list(_KINDS),
            "description": (
                "CREATE a new memory; UPDATE one existing memory (its old text stays in "
                "history); MERGE two or more existing memories into one; RETIRE one that the "
                "conversation contradicts or that no longer holds."
            ),
        },
        "type": {
            "type": "string",
            "enum": list(MEMORY_TYPES),
            "description": (
                "profile (who the user is), preference (how they want things done), entity "
                "(a named project, service, repository or person), event (something that "
                "happened at a time), decision (a choice made, with its reason), procedure "
                "(how something is done). Required for CREATE; UPDATE and MERGE keep the target's "
                "type when it is left out."
            ),
        },
        "text": {
            "type": "string",
            "maxLength": MAX_MEMORY_TEXT_CHARS,
            "description": (
                "One self-contained statement, in the third person, that still makes sense "
                "outside this conversation. Keep every name, date and number of the texts it "
                "replaces. At most 500 characters. Required except for RETIRE."
            ),
        },
        "fields": {
            "type": "array",
            "maxItems": MAX_MEMORY_FIELDS,
            "description": "Structured details (e.g. name, project, date, reason).",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 64},
                    "value": {"type": "string", "maxLength": MAX_FIELD_CHARS},
                },
                "required": ["name", "value"],
                "additionalProperties": False,
            },
        },
        "event_time": {
            "type": "string",
            "description": (
                "When it happened or was decided, ISO 8601 (YYYY-MM-DD or a date-time); only "
                "when the conversation gives an absolute date, or a relative one next to a "
                "dated message. Empty otherwise."
            ),
        },
        "target_ids": {
            "type": "array",
            "maxItems": MAX_MEMORY_OPS,
            "items": {"type": "string"},
            "description": (
                "Ids of existing memories: none for CREATE, exactly one for UPDATE and RETIRE, "
                "two or more for MERGE."
            ),
        },
        "reason": {
            "type": "string",
            "maxLength": MAX_REASON_CHARS,
            "description": (
                "Why, in the conversation's words. Required for RETIRE: quote or paraphrase "
                "what in the conversation contradicts the memory."
            ),
        },
        "source_message_ids": {
            "type": "array",
            "maxItems": MAX_SOURCE_IDS,
            "items": {"type": "string"},
            "description": "Ids of the messages the op is based on (shown as [id] before each).",
        },
    },
    "required": ["op"],
    "additionalProperties": False,
}

MEMORY_TOOL: Final[dict[str, Any]] = {
    "name": MEMORY_TOOL_NAME,
    "description": (
        "Propose changes to the user's long-term memories after reading an archived part of "
        "a conversation: durable facts worth knowing in a later session (preferences, who "
        "the user is, decisions with their reasons, dated events, named projects and "
        "services). Send an empty list when nothing durable was said. Prefer UPDATE of a "
        "similar existing memory to a new CREATE; never RETIRE without a reason from the "
        "conversation."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "ops": {
                "type": "array",
                "maxItems": MAX_MEMORY_OPS,
                "items": _OP_SCHEMA,
                "description": "The changes, in the order they should be applied.",
            }
        },
        "required": ["ops"],
        "additionalProperties": False,
    },
}

_VALIDATOR: Final = Draft202012Validator(copy.deepcopy(MEMORY_TOOL["input_schema"]))


def _kind_problems(where: str, op: Mapping[str, Any]) -> list[str]:
    """What a schema-valid op still lacks for the kind it claims to be."""
    kind = op.get("op")
    targets = op.get("target_ids") or []
    text = op.get("text")
    has_text = isinstance(text, str) and bool(text.strip())
    problems: list[str] = []
    if kind == "CREATE":
        if targets:
            problems.append(f"{where}: CREATE takes no target_ids")
        if not op.get("type"):
            problems.append(f"{where}: CREATE needs a type")
    elif kind in ("UPDATE", "RETIRE") and len(targets) != 1:
        problems.append(f"{where}: {kind} needs exactly one target id (got {len(targets)})")
    elif kind == "MERGE" and len(targets) < 2:
        problems.append(f"{where}: MERGE needs two or more target ids (got {len(targets)})")
    if kind == "RETIRE":
        reason = op.get("reason")
        if not (isinstance(reason, str) and reason.strip()):
            problems.append(f"{where}: RETIRE needs a reason")
    elif kind in _KINDS and not has_text:
        problems.append(f"{where}: {kind} needs a non-empty text")
    return problems


def validate_memory_arguments(arguments: object) -> list[str]:
    """Why ``arguments`` do not match the memory tool (empty when they do): the schema's
    errors, then what an op lacks for its kind."""
    errors = sorted(_VALIDATOR.iter_errors(arguments), key=lambda e: [str(p) for p in e.path])
    messages = [
        f"{'/'.join(str(p) for p in e.absolute_path) or '(arguments)'}: {e.message}" for e in errors
    ]
    if isinstance(arguments, Mapping) and isinstance(arguments.get("ops"), list):
        for index, op in enumerate(arguments["ops"]):
            if isinstance(op, Mapping):
                messages.extend(_kind_problems(f"ops/{index}", op))
    return messages


@dataclass(frozen=True, slots=True)
class ParsedMemoryOps:
    """The ops that could be read, in order, and an account of every repair and drop."""

    ops: tuple[MemoryOp, ...]
    problems: tuple[str, ...] = ()
    method: ReadMethod = ReadMethod.NONE

    @property
    def usable(self) -> bool:
        """Whether the answer was read at all (an empty list of ops is a usable answer)."""
        return self.method is not ReadMethod.NONE


def _text(value: object, limit: int) -> tuple[str, bool]:
    """A string value stripped and cut to ``limit``; whether it had to be cut."""
    if value is None:
        return "", False
    text = value if isinstance(value, str) else str(value)
    text = " ".join(text.split())
    if len(text) <= limit:
        return text, False
    cut = text[:limit].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit]
    return cut.rstrip(), True


def _ids(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Sequence):
        return ()
    seen: dict[str, None] = {}
    for item in value:
        if isinstance(item, (str, int)) and str(item).strip():
            seen.setdefault(str(item).strip(), None)
    return tuple(seen)[:MAX_SOURCE_IDS]


def _fields(value: object, problems: list[str], where: str) -> dict[str, str]:
    pairs: list[tuple[object, object]] = []
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, Sequence) and not isinstance(value, str):
        for entry in value:
            if isinstance(entry, Mapping) and "name" in entry:
                pairs.append((entry.get("name"), entry.get("value")))
    elif value is not None:
        problems.append(f"{where}: fields are not a list of name/value pairs; ignored")
    fields: dict[str, str] = {}
    for name, raw in pairs:
        key, _ = _text(name, 64)
        text, _ = _text(raw, MAX_FIELD_CHARS)
        if key and text and len(fields) < MAX_MEMORY_FIELDS:
            fields.setdefault(key, text)
    return fields


def _op(raw: object, where: str, problems: list[str]) -> MemoryOp | None:
    """One op, or None (with the reason in ``problems``) when it cannot be read as one."""
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: not an object; dropped")
        return None
    name = raw.get("op", raw.get("kind"))
    kind = MemoryOpKind.__members__.get(str(name).strip().upper()) if name is not None else None
    if kind is None:
        problems.append(f"{where}: op {name!r} is not one of {', '.join(_KINDS)}; dropped")
        return None
    raw_type = raw.get("type")
    memory_type: MemoryType | None = None
    if raw_type not in (None, ""):
        memory_type = MemoryType._value2member_map_.get(str(raw_type).strip().lower())  # type: ignore[assignment]
        if memory_type is None:
            problems.append(f"{where}: type {raw_type!r} is not one of {', '.join(MEMORY_TYPES)}")
    text, cut = _text(raw.get("text"), MAX_MEMORY_TEXT_CHARS)
    if cut:
        problems.append(f"{where}: text longer than {MAX_MEMORY_TEXT_CHARS} characters; cut")
    reason, _ = _text(raw.get("reason"), MAX_REASON_CHARS)
    event_time, _ = _text(raw.get("event_time"), 40)
    op = MemoryOp(
        kind=kind,
        type=memory_type,
        text=text,
        fields=_fields(raw.get("fields"), problems, where),
        event_time=event_time or None,
        target_ids=_ids(raw.get("target_ids", raw.get("target_id"))),
        reason=reason,
        source_message_ids=_ids(raw.get("source_message_ids")),
    )
    lacking = _kind_problems(
        where,
        {
            "op": kind.name,
            "type": memory_type,
            "text": text,
            "target_ids": op.target_ids,
            "reason": reason,
        },
    )
    if lacking:
        problems.extend(f"{p}; dropped" for p in lacking)
        return None
    return op


def _op_list(value: object, problems: list[str]) -> list[object] | None:
    """Where the ops are: ``{"ops": [...]}``, a bare list, or one bare op."""
    if isinstance(value, Mapping):
        inner = value.get("ops")
        if isinstance(inner, str):
            decoded, _, _ = decode_arguments(inner)
            if isinstance(decoded, list):
                problems.append("'ops' was a JSON string; decoded")
                inner = decoded
        if isinstance(inner, list):
            return inner
        if inner is None and ("op" in value or "kind" in value):
            problems.append("a single op without the 'ops' list; read as one")
            return [value]
        problems.append("no 'ops' list in the arguments")
        return None
    if isinstance(value, list):
        problems.append("the 'ops' wrapper is missing; read the list")
        return value
    if value is not None:
        problems.append(f"arguments are a {type(value).__name__}, not an object")
    return None


def _read(raw: object) -> ParsedMemoryOps:
    problems: list[str] = []
    text: str | None = None
    if isinstance(raw, (bytes, bytearray)):
        raw = bytes(raw).decode("utf-8", "replace")
    value: object
    if isinstance(raw, str):
        text = raw
        value, method, repairs = decode_arguments(raw)
        problems.extend(repairs)
    elif raw is None:
        problems.append("no arguments")
        value, method = None, ReadMethod.NONE
    else:
        value, method = raw, ReadMethod.OBJECT
    if isinstance(value, Mapping) and len(value) == 1 and isinstance(value.get("raw"), str):
        problems.append("arguments came wrapped as {'raw': ...}")
        text = value["raw"]
        value, method, repairs = decode_arguments(text)
        problems.extend(repairs)
    entries = _op_list(value, problems)
    if entries is None:
        return ParsedMemoryOps((), tuple(problems), ReadMethod.NONE)
    if len(entries) > MAX_MEMORY_OPS:
        problems.append(f"{len(entries)} ops; only the first {MAX_MEMORY_OPS} are read")
        entries = entries[:MAX_MEMORY_OPS]
    if text is not None and method is ReadMethod.REPAIRED and entries and cut_off(text):
        problems.append(f"ops/{len(entries) - 1}: the output was cut off inside it; dropped")
        entries = entries[:-1]
    ops = [op for i, e in enumerate(entries) if (op := _op(e, f"ops/{i}", problems)) is not None]
    return ParsedMemoryOps(tuple(ops), tuple(problems), method)


def parse_memory_ops(raw: object) -> ParsedMemoryOps:
    """The memory ops of a ``update_memories`` call, whatever shape it arrived in. Never
    raises: an unreadable answer gives no ops and says why."""
    try:
        return _read(raw)
    except Exception as exc:  # the last line of defence: a bad answer must not fail a commit
        return ParsedMemoryOps((), (f"arguments could not be read ({type(exc).__name__})",))


def memory_op_arguments(op: MemoryOp) -> dict[str, Any]:
    """One op in the tool's shape (what a model would send for it), only what is set."""
    entry: dict[str, Any] = {"op": op.kind.name}
    if op.type is not None:
        entry["type"] = op.type.value
    if op.text:
        entry["text"] = op.text
    if op.fields:
        entry["fields"] = [{"name": k, "value": v} for k, v in op.fields.items()]
    if op.event_time:
        entry["event_time"] = op.event_time
    if op.target_ids:
        entry["target_ids"] = list(op.target_ids)
    if op.reason:
        entry["reason"] = op.reason
    if op.source_message_ids:
        entry["source_message_ids"] = list(op.source_message_ids)
    return entry


def memory_tool_arguments(ops: Sequence[MemoryOp]) -> dict[str, Any]:
    """``ops`` as the arguments of an ``update_memories`` call; ``parse_memory_ops`` reads
    them back to the same ops."""
    return {"ops": [memory_op_arguments(op) for op in ops]}
