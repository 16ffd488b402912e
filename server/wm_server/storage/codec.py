"""How messages and guard decisions are kept in a row: compact JSON, shared by both engines."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from wm_core import (
    Decision,
    DecisionDict,
    Message,
    Part,
    Role,
    TextPart,
    ToolResultPart,
    ToolUsePart,
)

_encode_string = json.JSONEncoder(ensure_ascii=False).encode


def parts_to_json(parts: tuple[Part, ...]) -> str:
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        # The common case, written directly: a third of the cost of the general encoder.
        return '[{"t":' + _encode_string(parts[0].text) + "}]"
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            out.append({"t": part.text})
        elif isinstance(part, ToolUsePart):
            out.append({"u": part.id, "n": part.name, "i": part.input_json})
        else:
            item: dict[str, Any] = {"r": part.tool_use_id, "c": part.content}
            if part.is_error:
                item["e"] = 1
            out.append(item)
    return json.dumps(out, ensure_ascii=False, separators=(",", ":"))


def parts_from_json(text: str) -> tuple[Part, ...]:
    parts: list[Part] = []
    for item in json.loads(text):
        if "t" in item:
            parts.append(TextPart(item["t"]))
        elif "u" in item:
            parts.append(ToolUsePart(item["u"], item["n"], item["i"]))
        else:
            parts.append(ToolResultPart(item["r"], item["c"], bool(item.get("e"))))
    return tuple(parts)


def message_from_row(message_id: str, role: str, parts_json: str, tokens: int) -> Message:
    return Message(message_id, Role(role), parts_from_json(parts_json), tokens)


def searchable_text(message: Message) -> list[str]:
    """The content a search looks at: text, tool names and inputs, tool outputs."""
    out: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            out.append(part.text)
        elif isinstance(part, ToolUsePart):
            out.append(f"{part.name} {part.input_json}")
        else:
            out.append(part.content)
    return out


def body_of(message: Message) -> str:
    """A message's searchable text in one string (what its index entry analyzes)."""
    return " ".join(searchable_text(message))


def message_body(message_id: str, role: str, parts_json: str) -> str:
    """A stored message's ``body_of``, from its row."""
    return body_of(message_from_row(message_id, role, parts_json, 0))


def decisions_json(decisions: Iterable[Decision]) -> str:
    """Guard decisions as a commit and a working-memory version keep them: a JSON list of
    ``wm_core.DecisionDict`` (``Decision.to_dict``); ``read_decisions`` reads it back."""
    return json.dumps([d.to_dict() for d in decisions], ensure_ascii=False)


def read_decisions(text: str) -> list[DecisionDict]:
    """The decisions ``decisions_json`` wrote (empty text: none)."""
    decisions: list[DecisionDict] = json.loads(text or "[]")
    return decisions
