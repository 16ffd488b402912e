"""Phase 2 input within a token budget: an archive split at turn boundaries into chunks.

A model refuses a prompt over its context window, and a refused prompt is refused again on
every retry, so an unbounded archive (or one with earlier failed archives folded in) would
stop the working memory from ever updating. Split into chunks that each fit, processed in
order (the WM after one chunk is the previous WM of the next), any archive goes through. A
chunk ends at a turn (a user's text message starts one) whenever the turn fits; a turn
larger than the budget is split between its messages, and a single message larger than the
budget keeps its head and tail (where the request and the outcome are) around a marker
saying how much was cut.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from wm_core._messages import (
    Message,
    Part,
    Role,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    message_tokens,
)

# Tokens a message costs in the prompt beyond its parts (role line, separators).
_MESSAGE_OVERHEAD = 8
# Smallest share of a part kept when a message is cut.
_MIN_KEEP_CHARS = 16


def _tokens(message: Message) -> int:
    return (message.estimated_tokens or message_tokens(message.parts)) + _MESSAGE_OVERHEAD


def _cut_text(text: str, keep_chars: int) -> str:
    if len(text) <= keep_chars:
        return text
    keep = max(keep_chars, _MIN_KEEP_CHARS)
    head = text[: keep * 2 // 3]
    tail = text[len(text) - keep // 3 :]
    dropped = len(text) - len(head) - len(tail)
    return f"{head}\n[… {dropped} characters cut from the middle …]\n{tail}"


def _cut_part(part: Part, ratio: float) -> Part:
    if isinstance(part, TextPart):
        return TextPart(_cut_text(part.text, int(len(part.text) * ratio)))
    if isinstance(part, ToolResultPart):
        return replace(part, content=_cut_text(part.content, int(len(part.content) * ratio)))
    if len(part.input_json) * ratio >= len(part.input_json):
        return part
    # A cut JSON object is no longer JSON: the input goes in as one cut string.
    cut = _cut_text(part.input_json, int(len(part.input_json) * ratio))
    return ToolUsePart(part.id, part.name, json.dumps({"input_cut": cut}, ensure_ascii=False))


def cut_message(message: Message, max_tokens: int) -> Message:
    """``message`` within about ``max_tokens``: every part keeps its head and its tail."""
    total = _tokens(message)
    if total <= max_tokens:
        return message
    ratio = max(max_tokens - _MESSAGE_OVERHEAD * 4, 1) / total
    parts = tuple(_cut_part(part, ratio) for part in message.parts)
    return replace(message, parts=parts, estimated_tokens=message_tokens(parts))


def _starts_turn(message: Message) -> bool:
    return message.role is Role.USER and any(isinstance(p, TextPart) for p in message.parts)


def _turns(messages: Sequence[Message]) -> list[list[Message]]:
    turns: list[list[Message]] = []
    for message in messages:
        if not turns or _starts_turn(message):
            turns.append([])
        turns[-1].append(message)
    return turns


def chunk_messages(messages: Sequence[Message], budget: int) -> tuple[tuple[Message, ...], ...]:
    """``messages`` in order, in chunks of at most ``budget`` estimated tokens each.

    Whole turns are packed together while they fit; a turn over the budget is split between
    its messages, and a message over the budget is cut (:func:`cut_message`). Never empty
    chunks; no message is dropped or reordered.
    """
    budget = max(budget, 1)
    chunks: list[tuple[Message, ...]] = []
    current: list[Message] = []
    size = 0

    def close() -> None:
        nonlocal current, size
        if current:
            chunks.append(tuple(current))
        current, size = [], 0

    for turn in _turns(messages):
        turn_size = sum(_tokens(m) for m in turn)
        if size + turn_size <= budget:
            current.extend(turn)
            size += turn_size
            continue
        close()
        if turn_size <= budget:
            current, size = list(turn), turn_size
            continue
        for message in turn:
            fitted = cut_message(message, budget)
            tokens = _tokens(fitted)
            if size + tokens > budget:
                close()
            current.append(fitted)
            size += tokens
    close()
    return tuple(chunks)
