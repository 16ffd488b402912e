"""A conversation written as "U: …" / "A: …" turns, through the offline extractor: the shape
the extraction rules' unit tests state their cases in."""

from __future__ import annotations

from wm_core import MemoryOp, Message, Role, TextPart, extract_memories


def said(date: str, *turns: str) -> list[MemoryOp]:
    """The ops of a conversation given as "U: …" / "A: …" turns, every message of ``date``."""
    messages = [
        Message(
            f"m{i}",
            Role.USER if turn.startswith("U:") else Role.ASSISTANT,
            (TextPart(turn[2:].strip()),),
        )
        for i, turn in enumerate(turns)
    ]
    return extract_memories(messages, [], message_dates={m.id: date for m in messages})
