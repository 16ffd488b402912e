"""Messages rendered as prompt text, in the reference's line format.

Each message becomes ``[<role>]: <body>``; its parts are joined by newlines. A tool call reads
``[tool:<name> (call)] <input>`` and its result ``[tool:<name> (<status>)] <output>`` where the
status is ``completed`` or ``error``, so the model sees which tool failed without matching ids
by hand. The tool name of a result is looked up from its call; a result whose call lies in an
older archive still shows its id. Blank parts are skipped and a message with nothing left is
left out entirely: an empty line tells the model nothing and costs tokens.

Very long tool outputs are shortened in the middle (head and tail kept, the cut announced):
the beginning says what ran and the end says how it ended, which is what a summary needs; the
full text stays in the archive.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from wm_core import Message, TextPart, ToolResultPart, ToolUsePart

# Characters of one tool input or output shown to the model before the middle is cut.
MAX_TOOL_CHARS = 6000


def shorten(text: str, limit: int = MAX_TOOL_CHARS) -> str:
    """``text`` with its middle replaced by a marker when it exceeds ``limit`` characters."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[… {omitted} characters omitted …]\n{text[-tail:]}"


def _compact_input(input_json: str) -> str:
    """The tool input as one line of JSON (it was stored pretty or compact, we don't care)."""
    try:
        value = json.loads(input_json) if input_json.strip() else {}
    except ValueError:
        return input_json.strip()
    if not value:
        return ""
    return json.dumps(value, ensure_ascii=False)


def tool_names(messages: Iterable[Message]) -> dict[str, str]:
    """Tool-call id → tool name, for every call in ``messages``."""
    names: dict[str, str] = {}
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolUsePart):
                names[part.id] = part.name
    return names


def render_part(
    part: TextPart | ToolUsePart | ToolResultPart, names: dict[str, str], limit: int
) -> str:
    """One part as prompt text, or "" when it carries nothing."""
    if isinstance(part, TextPart):
        return part.text.strip()
    if isinstance(part, ToolUsePart):
        name = part.name.strip() or "unnamed"
        arguments = shorten(_compact_input(part.input_json), limit)
        return f"[tool:{name} (call)] {arguments}".rstrip()
    name = names.get(part.tool_use_id) or f"id={part.tool_use_id}"
    status = "error" if part.is_error else "completed"
    output = shorten(part.content.strip(), limit)
    return f"[tool:{name} ({status})] {output}".rstrip()


def render_message(
    message: Message, names: dict[str, str], limit: int = MAX_TOOL_CHARS, *, with_id: bool = False
) -> str:
    """``[role]: body`` for one message (``[id] [role]: body`` ``with_id``, for a model that
    must cite its sources), or "" when no part has content."""
    rendered = [render_part(part, names, limit) for part in message.parts]
    body = "\n".join(chunk for chunk in rendered if chunk)
    if not body:
        return ""
    prefix = f"[{message.id}] " if with_id else ""
    return f"{prefix}[{message.role.value}]: {body}"


def render_messages(
    messages: Sequence[Message], limit: int = MAX_TOOL_CHARS, *, with_ids: bool = False
) -> str:
    """The whole conversation as prompt text, one message after the other."""
    names = tool_names(messages)
    lines = (render_message(message, names, limit, with_id=with_ids) for message in messages)
    return "\n".join(line for line in lines if line)
