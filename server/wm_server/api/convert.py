"""Requests in: wm.v1 messages and ops turned into domain values, validated on the way.

Incoming messages are checked field by field; every problem becomes a BadRequest field
violation with its path (``messages[3].parts[0].tool_use.input_json``), so a client sees all
that is wrong with a batch at once, and nothing is stored.
"""

from __future__ import annotations

import hashlib
import json
import math

from google.protobuf.message import Message as ProtoMessage

from wm_core import (
    SECTIONS,
    Message,
    Part,
    Role,
    SectionOp,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    message_tokens,
)
from wm_proto.v1 import resources_pb2 as pb
from wm_server.errors import FieldViolation, InvalidArgument

# Tool inputs are decoded again later (token estimates, prompts, assembly) deeper in the
# stack; nesting far below Python's recursion limit keeps every one of those decodes safe.
MAX_JSON_DEPTH = 100

_ROLE_IN = {
    pb.ROLE_USER: Role.USER,
    pb.ROLE_ASSISTANT: Role.ASSISTANT,
    pb.ROLE_SYSTEM: Role.SYSTEM,
    pb.ROLE_TOOL: Role.TOOL,
}


def messages_in(messages: list[pb.Message], max_bytes: int) -> list[Message]:
    """Convert a batch the edge has checked against the contract's rules (count, ids, roles,
    parts: ``api.request_rules``), checking what the proto cannot state: tool inputs are JSON
    objects of bounded depth, and each message fits ``max_bytes`` (WM_MAX_MESSAGE_BYTES).
    Raise InvalidArgument listing every violation."""
    violations: list[FieldViolation] = []
    out: list[Message] = []
    for index, message in enumerate(messages):
        converted = _message_in(message, f"messages[{index}]", max_bytes, violations)
        if converted is not None:
            out.append(converted)
    if violations:
        raise InvalidArgument(violations[:100])
    return out


def _message_in(
    message: pb.Message, path: str, max_bytes: int, violations: list[FieldViolation]
) -> Message | None:
    before = len(violations)
    mid, given = message.id, message.parts  # each protobuf field read once
    role = _ROLE_IN[message.role]  # the edge refused any other value
    parts: list[Part] = []
    size = len(mid)
    for index, part in enumerate(given):
        kind = part.WhichOneof("kind")
        if kind == "text":
            text = part.text
            parts.append(TextPart(text))
            size += len(text) if text.isascii() else len(text.encode())  # isascii: O(1)
            continue
        part_path = f"{path}.parts[{index}]"  # only for a violation: the text path skips it
        if kind == "tool_use":
            use = part.tool_use
            input_json = use.input_json or "{}"
            problem = ""
            try:
                decoded = json.loads(input_json, parse_constant=_no_constant)
            except _NonStandardJson as exc:
                decoded, problem = None, str(exc)
            except (ValueError, RecursionError):  # RecursionError: nested past the stack
                decoded = None
            if problem:
                violations.append(
                    FieldViolation(f"{part_path}.tool_use.input_json", problem, "INVALID_JSON")
                )
            elif not isinstance(decoded, dict):
                violations.append(
                    FieldViolation(
                        f"{part_path}.tool_use.input_json", "must be a JSON object", "INVALID_JSON"
                    )
                )
            elif problem := _non_standard(decoded):
                violations.append(
                    FieldViolation(f"{part_path}.tool_use.input_json", problem, "INVALID_JSON")
                )
            elif _json_depth(decoded) > MAX_JSON_DEPTH:
                violations.append(
                    FieldViolation(
                        f"{part_path}.tool_use.input_json",
                        f"nested deeper than {MAX_JSON_DEPTH} levels",
                        "TOO_DEEP",
                    )
                )
            parts.append(ToolUsePart(use.id, use.name, input_json))
            size += len(use.id) + len(use.name.encode()) + len(input_json.encode())
        else:  # tool_result: the edge refused a part with no kind
            result = part.tool_result
            parts.append(ToolResultPart(result.tool_use_id, result.content, result.is_error))
            size += len(result.tool_use_id) + len(result.content.encode())
    if size > max_bytes:
        violations.append(
            FieldViolation(path, f"message is {size} bytes; the limit is {max_bytes}", "TOO_LARGE")
        )
    if len(violations) > before:
        return None
    frozen = tuple(parts)
    return Message(mid, role, frozen, message_tokens(frozen))


class _NonStandardJson(ValueError):
    """JSON that Python reads but standard JSON (and the Messages API) does not."""


def _no_constant(name: str) -> object:
    raise _NonStandardJson(f"{name} is not a JSON number (RFC 8259 has no NaN or Infinity)")


def _non_standard(value: object) -> str:
    """Why decoded JSON could not be written back as standard JSON, or "": a number too large
    for a double (1e999 reads as infinity) or a lone surrogate escape (\\ud800 is no
    character, so it cannot be encoded as UTF-8). Walked without recursion."""
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
            stack.extend(item.keys())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, float) and not math.isfinite(item):
            return "a number is too large for a 64-bit float"
        elif isinstance(item, str) and not _encodes(item):
            return "a string holds a lone surrogate escape (not a Unicode character)"
    return ""


def _encodes(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_depth(value: object) -> int:
    """How many objects and arrays of decoded JSON nest, counted without recursion."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def ops_in(ops: list[pb.SectionOp]) -> dict[str, SectionOp]:
    """Client ops by section; unknown or repeated sections are field violations."""
    violations: list[FieldViolation] = []
    out: dict[str, SectionOp] = {}
    for index, op in enumerate(ops):
        path = f"ops[{index}]"
        if op.section not in SECTIONS:
            violations.append(
                FieldViolation(
                    f"{path}.section", f"must be one of {', '.join(SECTIONS)}", "UNKNOWN_SECTION"
                )
            )
            continue
        if op.section in out:
            violations.append(FieldViolation(f"{path}.section", "section given twice", "DUPLICATE"))
            continue
        if op.kind == pb.SECTION_OP_KIND_UPDATE:
            out[op.section] = SectionOp.update(op.content)
        elif op.kind == pb.SECTION_OP_KIND_APPEND:
            if not op.items:
                violations.append(FieldViolation(f"{path}.items", "APPEND needs items", "REQUIRED"))
                continue
            out[op.section] = SectionOp.append(op.items)
        elif op.kind in (pb.SECTION_OP_KIND_KEEP, pb.SECTION_OP_KIND_UNSPECIFIED):
            out[op.section] = SectionOp.keep()
        else:
            violations.append(
                FieldViolation(f"{path}.kind", f"unknown kind {op.kind}", "INVALID_ENUM")
            )
    if violations:
        raise InvalidArgument(violations)
    for section in SECTIONS:
        out.setdefault(section, SectionOp.keep())
    return out


def fingerprint(request: ProtoMessage) -> str:
    """What identifies a request for idempotency: sha256 of the request without its
    request_id, deterministically serialized ("" when it carries no request_id)."""
    if not getattr(request, "request_id", ""):
        return ""
    copy = type(request)()
    copy.CopyFrom(request)
    copy.ClearField("request_id")
    return hashlib.sha256(copy.SerializeToString(deterministic=True)).hexdigest()
