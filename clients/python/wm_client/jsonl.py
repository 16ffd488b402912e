"""Conversations as JSON Lines ↔ wm.v1 Message.

One message per line::

    {"id": "m001", "role": "user"|"assistant"|"system"|"tool",
     "parts": [{"type": "text", "text": "..."},
               {"type": "tool_use", "id": "toolu_01", "name": "bash", "input": {...}},
               {"type": "tool_result", "tool_use_id": "toolu_01", "content": "...",
                "is_error": true}]}

Why this shape: it is what agent runtimes log (Anthropic-style content blocks), so a recorded
session can be replayed into the service as it happened. The Anthropic Messages shape is read
as well: ``"content": "..."`` or ``"content": [{"type": "text", ...}, ...]`` instead of
``parts``, and a tool result's ``content`` may be a list of text blocks; everything is written
back in the canonical form. Errors name the line and the field.

A line without an ``id`` gets one made from its position among the messages and its content
(:func:`line_id`), so adding the same file twice stores nothing the second time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from wm_client import _rules
from wm_proto.v1 import resources_pb2 as pb

_ROLES = {
    "user": pb.ROLE_USER,
    "assistant": pb.ROLE_ASSISTANT,
    "system": pb.ROLE_SYSTEM,
    "tool": pb.ROLE_TOOL,
}
_ROLE_NAMES = {v: k for k, v in _ROLES.items()}


class JsonlError(ValueError):
    """A line of a conversation file is not a valid message (the text says which and why)."""


def role_name(role: int) -> str:
    """ "user", "assistant", "system", "tool" (or "unspecified")."""
    return _ROLE_NAMES.get(role, "unspecified")  # type: ignore[call-overload,no-any-return]


def message_from_dict(data: Mapping[str, Any]) -> pb.Message:
    """One JSONL record → a wm.v1 Message (raises JsonlError when malformed)."""
    if not isinstance(data, Mapping):
        raise JsonlError("a message must be a JSON object")
    role = _ROLES.get(str(data.get("role", "")).lower())
    if role is None:
        raise JsonlError(f"role must be one of {', '.join(_ROLES)}, got {data.get('role')!r}")
    message_id = data.get("id", "")
    if not isinstance(message_id, str):
        raise JsonlError("id must be a string")
    raw_parts = data.get("parts")
    if raw_parts is None and "content" in data:
        content = data["content"]
        if isinstance(content, str):
            raw_parts = [{"type": "text", "text": content}]
        elif isinstance(content, list):  # Anthropic Messages content blocks
            raw_parts = content
        else:
            raise JsonlError("content must be a string or a non-empty list of content blocks")
        if not raw_parts:
            raise JsonlError("content must be a string or a non-empty list of content blocks")
    if not isinstance(raw_parts, list) or not raw_parts:
        raise JsonlError("parts must be a non-empty list")
    parts = [_part_from_dict(raw, index) for index, raw in enumerate(raw_parts)]
    return pb.Message(id=message_id, role=role, parts=parts)


def _part_from_dict(raw: Any, index: int) -> pb.Part:
    where = f"parts[{index}]"
    if not isinstance(raw, Mapping):
        raise JsonlError(f"{where} must be an object")
    kind = raw.get("type")
    if kind == "text":
        text = raw.get("text")
        if not isinstance(text, str):
            raise JsonlError(f"{where}.text must be a string")
        return pb.Part(text=text)
    if kind == "tool_use":
        tool_input = raw.get("input", {})
        if isinstance(tool_input, str):  # already serialized
            input_json = tool_input
        elif isinstance(tool_input, Mapping):
            input_json = json.dumps(tool_input, ensure_ascii=False)
        else:
            raise JsonlError(f"{where}.input must be an object")
        return pb.Part(
            tool_use=pb.ToolUse(
                id=str(raw.get("id", "")), name=str(raw.get("name", "")), input_json=input_json
            )
        )
    if kind == "tool_result":
        return pb.Part(
            tool_result=pb.ToolResult(
                tool_use_id=str(raw.get("tool_use_id", "")),
                content=_result_text(raw.get("content", ""), where),
                is_error=bool(raw.get("is_error", False)),
            )
        )
    raise JsonlError(f"{where}.type must be text, tool_use or tool_result, got {kind!r}")


def _result_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # Anthropic-style list of blocks
        texts = [b.get("text", "") for b in content if isinstance(b, Mapping)]
        return "\n".join(t for t in texts if isinstance(t, str))
    raise JsonlError(f"{where}.content must be a string or a list of text blocks")


def message_to_dict(message: pb.Message) -> dict[str, Any]:
    """A wm.v1 Message → the JSONL record (tool input decoded back into an object)."""
    parts: list[dict[str, Any]] = []
    for part in message.parts:
        kind = part.WhichOneof("kind")
        if kind == "text":
            parts.append({"type": "text", "text": part.text})
        elif kind == "tool_use":
            try:
                tool_input: Any = json.loads(part.tool_use.input_json or "{}")
            except ValueError:
                tool_input = part.tool_use.input_json
            parts.append(
                {
                    "type": "tool_use",
                    "id": part.tool_use.id,
                    "name": part.tool_use.name,
                    "input": tool_input,
                }
            )
        elif kind == "tool_result":
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": part.tool_result.tool_use_id,
                "content": part.tool_result.content,
            }
            if part.tool_result.is_error:
                result["is_error"] = True
            parts.append(result)
    record: dict[str, Any] = {"role": role_name(message.role), "parts": parts}
    if message.id:
        record = {"id": message.id, **record}
    return record


def line_id(ordinal: int, message: pb.Message) -> str:
    """The id of a message given without one: its ordinal among the file's messages and a
    digest of its role and parts. The same file gives the same ids every time (a re-run is
    all duplicates), and two identical messages at different places stay two messages."""
    digest = hashlib.sha256(f"{ordinal}\n".encode() + message.SerializeToString(deterministic=True))
    return f"jl-{ordinal}-{digest.hexdigest()[:20]}"


def parse_lines(lines: Iterable[str]) -> Iterator[pb.Message]:
    """Messages of JSONL text lines; blank lines are skipped; errors name the line number;
    a message without an id gets :func:`line_id`."""
    ordinal = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise JsonlError(f"line {number}: not valid JSON ({exc})") from None
        try:
            message = message_from_dict(data)
        except JsonlError as exc:
            raise JsonlError(f"line {number}: {exc}") from None
        ordinal += 1
        if not message.id:
            message.id = line_id(ordinal, message)
        yield message


def read_jsonl(source: str | Path | IO[str]) -> list[pb.Message]:
    """Every message of a JSONL file (a path) or of an open text stream."""
    if isinstance(source, (str, Path)):
        with Path(source).open(encoding="utf-8") as handle:
            return list(parse_lines(handle))
    return list(parse_lines(source))


def write_jsonl(messages: Iterable[pb.Message], target: IO[str]) -> None:
    """Write messages as JSONL, one per line."""
    for message in messages:
        target.write(json.dumps(message_to_dict(message), ensure_ascii=False) + "\n")


def is_user_turn_start(message: pb.Message) -> bool:
    """A user message with non-blank text of its own (not only tool results) starts a new
    turn: the service's rule (``wm_core.is_request``), which the TypeScript client's
    ``isUserTurnStart`` follows too."""
    return message.role == pb.ROLE_USER and any(
        p.WhichOneof("kind") == "text" and p.text.strip(_rules.BLANK) for p in message.parts
    )


def split_turns(messages: Sequence[pb.Message]) -> list[list[pb.Message]]:
    """Group a conversation into turns: each starts at a user message that carries text, and
    holds the assistant's answers, tool calls and tool results that follow it."""
    turns: list[list[pb.Message]] = []
    for message in messages:
        if not turns or is_user_turn_start(message):
            turns.append([])
        turns[-1].append(message)
    return turns
