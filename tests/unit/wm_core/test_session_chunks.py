"""Phase 2 input in chunks within a token budget (wm_core.chunk_messages, cut_message)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from wm_core import (
    Message,
    Role,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    chunk_messages,
    cut_message,
    message_tokens,
)

OVERHEAD = 8  # per message, as chunks.py counts it


def _text(role: Role, body: str, n: int) -> Message:
    return Message(f"m{n}", role, (TextPart(body),))


def _size(chunk: tuple[Message, ...]) -> int:
    return sum(message_tokens(m.parts) + OVERHEAD for m in chunk)


def test_small_input_is_one_chunk_and_untouched() -> None:
    messages = [_text(Role.USER, "hi", 1), _text(Role.ASSISTANT, "hello", 2)]
    assert chunk_messages(messages, 1_000) == (tuple(messages),)
    assert chunk_messages([], 1_000) == ()


def test_chunks_end_at_turns_when_turns_fit() -> None:
    turn = [
        _text(Role.USER, "u" * 400, 1),
        Message("m2", Role.ASSISTANT, (ToolUsePart("t1", "read", '{"path": "a.py"}'),)),
        Message("m3", Role.TOOL, (ToolResultPart("t1", "x" * 400),)),
        _text(Role.ASSISTANT, "a" * 400, 4),
    ]
    second = [_text(Role.USER, "v" * 400, 5), _text(Role.ASSISTANT, "b" * 400, 6)]
    chunks = chunk_messages([*turn, *second], 400)
    assert chunks == (tuple(turn), tuple(second))


def test_an_oversized_message_keeps_its_head_and_tail() -> None:
    body = "HEAD " + "filler " * 20_000 + " TAIL"
    message = _text(Role.USER, body, 1)
    cut = cut_message(message, 1_000)
    text = cut.text()
    assert text.startswith("HEAD ") and text.endswith(" TAIL")
    assert "characters cut from the middle" in text
    assert message_tokens(cut.parts) <= 1_000
    assert cut_message(_text(Role.USER, "short", 2), 1_000) == _text(Role.USER, "short", 2)


def test_a_cut_tool_input_stays_a_json_object() -> None:
    part = ToolUsePart("t", "write", json.dumps({"content": "z" * 50_000}))
    cut = cut_message(Message("m", Role.ASSISTANT, (part,)), 500)
    (new,) = cut.parts
    assert isinstance(new, ToolUsePart) and isinstance(json.loads(new.input_json), dict)
    assert message_tokens(cut.parts) <= 500


_message = st.builds(
    lambda n, role, size: _text(role, "w" * size, n),
    st.integers(0, 10_000),
    st.sampled_from([Role.USER, Role.ASSISTANT, Role.TOOL]),
    st.integers(0, 30_000),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_message, max_size=40), st.integers(200, 5_000))
def test_every_chunk_fits_and_nothing_is_lost_or_reordered(
    messages: list[Message], budget: int
) -> None:
    chunks = chunk_messages(messages, budget)
    flat = [m for chunk in chunks for m in chunk]
    assert [m.id for m in flat] == [m.id for m in messages]
    assert all(chunk for chunk in chunks)
    for chunk in chunks:
        assert _size(chunk) <= budget or len(chunk) == 1
        if len(chunk) == 1:
            assert _size(chunk) <= budget + 64  # one cut message: its markers
    for original, kept in zip(messages, flat, strict=True):
        if _size((original,)) <= budget:
            assert kept == original
