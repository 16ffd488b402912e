"""Context assembly invariants, over random conversations (hypothesis)."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from wm_core import SECTIONS, estimate_tokens, render_document
from wm_core._messages import Message, Role, TextPart, ToolResultPart, ToolUsePart, message_tokens
from wm_core._session.assembly import (
    SUMMARY_HEADER,
    assemble,
    plan_budget,
    trim_working_memory,
)


def _msg(mid: str, role: Role, *parts: object) -> Message:
    frozen = tuple(parts)
    return Message(mid, role, frozen, message_tokens(frozen))  # type: ignore[arg-type]


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    out: list[Message] = []
    steps = draw(st.integers(0, 30))
    call = 0
    for index in range(steps):
        kind = draw(st.sampled_from(["user", "assistant", "tool", "system", "dangling"]))
        size = draw(st.integers(0, 400))
        text = "w" * size
        if kind == "user":
            out.append(_msg(f"m{index}", Role.USER, TextPart(text)))
        elif kind == "assistant":
            out.append(_msg(f"m{index}", Role.ASSISTANT, TextPart(text)))
        elif kind == "system":
            out.append(_msg(f"m{index}", Role.SYSTEM, TextPart(text)))
        elif kind == "tool":
            call += 1
            tid = f"t{call}"
            out.append(
                _msg(
                    f"m{index}a",
                    Role.ASSISTANT,
                    TextPart("calling"),
                    ToolUsePart(tid, "bash", '{"c": 1}'),
                )
            )
            out.append(
                _msg(f"m{index}r", Role.USER, ToolResultPart(tid, text, draw(st.booleans())))
            )
        else:  # a call whose result has not arrived yet
            call += 1
            out.append(_msg(f"m{index}d", Role.ASSISTANT, ToolUsePart(f"t{call}", "bash", "{}")))
    return out


def _wm(bullets: int) -> str:
    return render_document(
        {
            name: "\n".join(f"- {name} item {i} with some words" for i in range(bullets))
            if name not in ("Session Title", "Current State")
            else f"{name} text"
            for name in SECTIONS
        }
    )


@settings(max_examples=150, deadline=None)
@given(
    conversation=conversations(),
    budget=st.integers(1, 60_000),
    wm_bullets=st.one_of(st.none(), st.integers(0, 80)),
)
def test_output_satisfies_every_invariant(
    conversation: list[Message], budget: int, wm_bullets: int | None
) -> None:
    wm = _wm(wm_bullets) if wm_bullets is not None else None
    result = assemble(budget, "You are a coding agent.", wm, conversation)
    plan = plan_budget(budget, 0)
    assert result.estimated_tokens + result.reply_reserve <= budget or not result.messages
    assert result.reply_reserve == plan.reply_reserve
    roles = [m.role for m in result.messages]
    if roles:
        assert roles[0] is Role.USER
    assert all(a is not b for a, b in itertools.pairwise(roles))
    assert set(roles) <= {Role.USER, Role.ASSISTANT}
    uses = [p.id for m in result.messages for p in m.parts if isinstance(p, ToolUsePart)]
    results = [
        p.tool_use_id for m in result.messages for p in m.parts if isinstance(p, ToolResultPart)
    ]
    assert sorted(uses) == sorted(results)
    # a result always comes after its call
    seen: set[str] = set()
    for message in result.messages:
        for part in message.parts:
            if isinstance(part, ToolUsePart):
                seen.add(part.id)
            if isinstance(part, ToolResultPart):
                assert part.tool_use_id in seen
    # newest kept, oldest dropped: the included source messages are a suffix
    assert result.included_source_messages + result.dropped_source_messages == len(conversation)


@settings(max_examples=60, deadline=None)
@given(conversation=conversations())
def test_everything_fits_in_a_large_budget(conversation: list[Message]) -> None:
    result = assemble(1_000_000, "", _wm(3), conversation)
    assert result.dropped_source_messages == 0
    text = json.dumps([[repr(p) for p in m.parts] for m in result.messages])
    for message in conversation:
        for part in message.parts:
            if isinstance(part, TextPart) and part.text:
                assert part.text in text
    assert result.messages[0].parts[0].text.startswith(SUMMARY_HEADER)  # type: ignore[union-attr]


def test_reply_reserve_follows_the_reference() -> None:
    assert plan_budget(128_000, 0).reply_reserve == 20_000
    assert plan_budget(200_000, 0).reply_reserve == 30_000
    assert plan_budget(30_000, 0).reply_reserve == 4_500
    assert plan_budget(128_000, 0).working_memory == 8_000
    assert plan_budget(20_000, 1000).working_memory == int((20_000 - 3_000 - 1000) * 0.15)


def test_wm_is_trimmed_oldest_low_priority_first_and_reported() -> None:
    document = _wm(40)
    trimmed, items = trim_working_memory(document, 1200)
    assert estimate_tokens(trimmed) + estimate_tokens(SUMMARY_HEADER + "\n") <= 1200
    assert items and items[0] == "Files & Context: Files & Context item 0 with some words"
    assert "Session Title text" in trimmed and "Current State text" in trimmed
    assert "Open Issues item 39" in trimmed  # the highest-priority section is trimmed last


def test_consecutive_same_role_messages_are_merged() -> None:
    convo = [
        _msg("a", Role.USER, TextPart("one")),
        _msg("b", Role.USER, TextPart("two")),
        _msg("c", Role.ASSISTANT, TextPart("three")),
        _msg("d", Role.ASSISTANT, TextPart("four")),
    ]
    result = assemble(100_000, "", None, convo)
    assert [m.role for m in result.messages] == [Role.USER, Role.ASSISTANT]
    assert [p.text for p in result.messages[1].parts] == ["three", "four"]  # type: ignore[union-attr]
