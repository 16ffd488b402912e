"""Phase 2 input budget and the cap on one commit's chunks (wm_server.phase2.chunked)."""

from __future__ import annotations

from wm_core import Message, Role, TextPart
from wm_server.phase2.chunked import (
    MIN_MESSAGE_TOKENS,
    PROMPT_OVERHEAD_TOKENS,
    InputBudget,
    capped,
    message_budget,
)


class _Provider:
    name = "fake"
    model = "fake"
    context_window = 100_000
    max_output_tokens = 10_000


def _message(n: int, tokens: int) -> Message:
    return Message(
        f"m{n}", Role.USER, (TextPart(f"head-{n} " + "w" * (tokens * 4) + f" tail-{n}"),)
    )


def test_the_budget_is_the_setting_else_the_context_window_less_the_answer() -> None:
    assert InputBudget(tokens=5_000).for_provider(_Provider()) == 5_000  # type: ignore[arg-type]
    assert InputBudget().for_provider(_Provider()) == int(90_000 * 0.9)  # type: ignore[arg-type]
    assert InputBudget(default_tokens=7_000).for_provider(object()) == 7_000  # type: ignore[arg-type]
    assert message_budget(50_000, "x" * 40_000) == 50_000 - 10_000 - PROMPT_OVERHEAD_TOKENS
    assert message_budget(1_000, "x" * 40_000) == MIN_MESSAGE_TOKENS


def test_input_over_the_chunk_cap_is_cut_in_proportion_keeping_every_message() -> None:
    messages = [_message(n, 1_000) for n in range(100)]
    plain, cut = capped(messages, 2_500, 200)
    assert not cut and len(plain) == 50
    chunks, cut = capped(messages, 2_500, 5)
    assert cut and len(chunks) <= 5
    kept = [m for chunk in chunks for m in chunk]
    assert [m.id for m in kept] == [m.id for m in messages]
    for n, message in enumerate(kept):
        text = message.text()
        assert text.startswith(f"head-{n} ") and text.endswith(f" tail-{n}")
