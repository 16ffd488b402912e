"""Load the recorded conversation (shipped once, as wm_client's package data) as domain messages.

The files are JSON Lines, one message per line, in the shape agents send to the service::

    {"id": "m001", "role": "user", "parts": [{"type": "text", "text": "..."}]}

with part types ``text``, ``tool_use`` (``id``, ``name``, ``input`` object) and
``tool_result`` (``tool_use_id``, ``content``, ``is_error``). Token estimates are computed
with the engine's own rule, as the server would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wm_client.data import DEMO_CONVERSATION_FILE, packaged
from wm_core import (
    Message,
    Part,
    Role,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    message_tokens,
)

CODING_SESSION = Path(str(packaged(DEMO_CONVERSATION_FILE)))


def _part(raw: dict[str, Any]) -> Part:
    kind = raw["type"]
    if kind == "text":
        return TextPart(text=raw["text"])
    if kind == "tool_use":
        return ToolUsePart(
            id=raw["id"],
            name=raw["name"],
            input_json=json.dumps(raw.get("input", {}), ensure_ascii=False),
        )
    if kind == "tool_result":
        return ToolResultPart(
            tool_use_id=raw["tool_use_id"],
            content=raw.get("content", ""),
            is_error=bool(raw.get("is_error", False)),
        )
    raise ValueError(f"unknown part type {kind!r}")


def message_from_dict(raw: dict[str, Any]) -> Message:
    """One JSON message as a domain message, with its token estimate."""
    parts = tuple(_part(p) for p in raw["parts"])
    return Message(
        id=raw["id"], role=Role(raw["role"]), parts=parts, estimated_tokens=message_tokens(parts)
    )


def load_conversation(path: Path = CODING_SESSION) -> list[Message]:
    """Every message of a JSON Lines conversation file, in order."""
    messages: list[Message] = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                messages.append(message_from_dict(json.loads(line)))
    return messages


def load_raw(path: Path = CODING_SESSION) -> list[dict[str, Any]]:
    """The file's messages as plain dicts (for tests that want to inspect the source)."""
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
