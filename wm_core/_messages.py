"""The conversation as the domain sees it: messages made of text, tool calls and tool results.

These are plain immutable values, independent of protobuf and of any storage, so that the
engine, the window accounting and the context assembler can be tested without a server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum

from wm_core._tokens.estimate import estimate_tokens


class Role(StrEnum):
    """Who produced a message."""

    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


@dataclass(frozen=True, slots=True)
class TextPart:
    """Plain text."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolUsePart:
    """A tool call made by the assistant; ``input_json`` is a JSON object, kept as text."""

    id: str
    name: str
    input_json: str = "{}"


@dataclass(frozen=True, slots=True)
class ToolResultPart:
    """The outcome of the tool call whose id is ``tool_use_id``."""

    tool_use_id: str
    content: str = ""
    is_error: bool = False


Part = TextPart | ToolUsePart | ToolResultPart


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a session. ``id`` is unique within the session."""

    id: str
    role: Role
    parts: tuple[Part, ...]
    estimated_tokens: int = field(default=0)

    def tool_use_ids(self) -> list[str]:
        return [p.id for p in self.parts if isinstance(p, ToolUsePart)]

    def tool_result_ids(self) -> list[str]:
        return [p.tool_use_id for p in self.parts if isinstance(p, ToolResultPart)]

    def text(self) -> str:
        """The message's text parts, joined by newlines."""
        return "\n".join(p.text for p in self.parts if isinstance(p, TextPart))


def _input_text(input_json: str) -> str:
    """The tool input as the token rule counts it: compact JSON, non-ASCII kept, empty if {}."""
    try:
        value = json.loads(input_json) if input_json else {}
    except ValueError:
        return input_json
    if not value:
        return ""
    return json.dumps(value, ensure_ascii=False)


def message_tokens(parts: tuple[Part, ...] | list[Part]) -> int:
    """Estimated tokens of a message (reference rule).

    Text, tool id, tool name, the JSON input and the tool output are concatenated without a
    separator and estimated together, as the reference does, so the figures agree with it.
    """
    chunks: list[str] = []
    for part in parts:
        if isinstance(part, TextPart):
            chunks.append(part.text)
        elif isinstance(part, ToolUsePart):
            chunks.append(part.id)
            chunks.append(part.name)
            chunks.append(_input_text(part.input_json))
        else:
            chunks.append(part.tool_use_id)
            chunks.append(part.content)
    return estimate_tokens("".join(chunks))
