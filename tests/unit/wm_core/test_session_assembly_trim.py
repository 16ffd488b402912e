"""The working memory is trimmed once, to the room it is finally given, and a trimmed summary
leaves no room unused that a bullet could take (issue 36, defect 4): whenever bullets were
trimmed, at most 5 % of the usable tokens stay unused, short of the next bullet that would come
back being larger than that. Over random conversations, working memories and budgets
(hypothesis), and on the cases that used to leave more idle."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_session_assembly import conversations
from test_session_assembly_adaptive import working_memories

from wm_core import SECTIONS, estimate_tokens, render_document
from wm_core._messages import (
    Message,
    Role,
    TextPart,
    ToolResultPart,
    ToolUsePart,
    message_tokens,
)
from wm_core._session.assembly import SUMMARY_HEADER, AssembledContext, assemble
from wm_core._session.summary_trim import SummaryTrim, trim_working_memory


def _unused(result: AssembledContext) -> int:
    return result.usable_tokens - sum(m.estimated_tokens for m in result.messages)


def _next_bullet(result: AssembledContext) -> int:
    """Tokens the last trimmed bullet (the first to come back) would take: its line, and one
    token of rounding on each side."""
    _, _, item = result.trimmed_items[-1].partition(": ")
    return estimate_tokens(f"- {item}\n") + 2


def _assert_little_unused(result: AssembledContext) -> None:
    if not (result.trimmed_items and result.working_memory_included):
        return
    unused = _unused(result)
    allowed = max(result.usable_tokens // 20, _next_bullet(result))
    assert unused <= allowed, (unused, result.usable_tokens, result.parts)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    history=conversations(),
    wm=working_memories(),
    budget=st.integers(600, 20_000),
    live=st.integers(0, 30),
)
def test_a_trimmed_summary_leaves_at_most_5_percent_unused(
    history: list[Message], wm: str | None, budget: int, live: int
) -> None:
    result = assemble(budget, "You are helpful.", wm, history, live_from=min(live, len(history)))
    assert sum(m.estimated_tokens for m in result.messages) <= result.usable_tokens
    _assert_little_unused(result)


def _empty_user_messages(count: int) -> list[Message]:
    return [Message(f"m{i}", Role.USER, (TextPart(""),), 0) for i in range(count)]


def test_empty_messages_merged_into_the_summary_give_their_room_back() -> None:
    """Ten empty user messages cost a token each until they are merged into the summary: the
    room held for them (and for an omitted-note the context did not need) goes to it."""
    bodies = {name: "" for name in SECTIONS} | {
        "Session Title": "Fix the importer",
        "Current State": "Tests pass locally.",
    }
    for name, count in (
        ("Key Facts & Decisions", 8),
        ("Files & Context", 1),
        ("Errors & Corrections", 2),
        ("Open Issues", 1),
    ):
        bodies[name] = "\n".join(f"- item {i} of {name}: detail " for i in range(count))
    document = render_document(bodies)
    result = assemble(600, "You are helpful.", document, _empty_user_messages(10), live_from=0)
    assert result.working_memory_included and result.dropped_source_messages == 0
    assert _unused(result) <= result.usable_tokens // 20, (_unused(result), result.parts)


def test_the_trim_is_worked_out_once_and_agrees_with_trimming_afresh() -> None:
    """Asking a SummaryTrim for a smaller room, then a larger one, gives what trimming the
    document afresh at each room gives (the order of the questions does not matter)."""
    bodies = {name: "" for name in SECTIONS} | {
        "Session Title": "Ledger",
        "Current State": "Replaying ledger 4.",
    }
    for name in SECTIONS[2:]:
        bodies[name] = "\n".join(f"- {name} {i}: " + "why " * (i % 7 + 1) for i in range(30))
    document = render_document(bodies)
    trim = SummaryTrim(document)
    for room in (300, 2_000, 150, 900, 10_000, 40):
        dropped = trim.fit(room)
        text, trimmed = trim.render(dropped)
        assert (text, trimmed) == trim_working_memory(document, room)
        tokens = message_tokens((TextPart(f"{SUMMARY_HEADER}\n{text}"),))
        assert trim.summary_tokens(dropped) == tokens
        if trimmed and room >= trim.floor_tokens:
            assert estimate_tokens(text) + estimate_tokens(SUMMARY_HEADER + "\n") <= room


def _msg(mid: str, role: Role, *parts: TextPart | ToolUsePart | ToolResultPart) -> Message:
    return Message(mid, role, parts, message_tokens(parts))


def _answered_call(n: int, output: str = "") -> list[Message]:
    return [
        _msg(
            f"m{n}a", Role.ASSISTANT, TextPart("calling"), ToolUsePart(f"t{n}", "bash", '{"c": 1}')
        ),
        _msg(f"m{n}r", Role.USER, ToolResultPart(f"t{n}", output, False)),
    ]


def _dangling_call(n: int) -> Message:
    return _msg(f"m{n}d", Role.ASSISTANT, ToolUsePart(f"t{n}", "bash", "{}"))


def test_a_dropped_message_comes_back_when_the_room_held_for_notes_was_not_needed() -> None:
    """Without a summary, the older messages fill the room newest first; the room held for an
    omitted-note and for merging neighbours (a token a message) went unused while a 76-token
    message stayed out: 106 of 506 usable tokens idle. It comes back: everything fits."""
    sizes = (297, 1, 1, 65, 97, 153, 297, 349)
    history = [_msg(f"m{i}", Role.USER, TextPart("w" * size)) for i, size in enumerate(sizes)]
    history += _answered_call(8, "w" * 279)
    history += [_dangling_call(9), *_answered_call(10), *_answered_call(11), _dangling_call(12)]
    history += [*_answered_call(13), _msg("m14", Role.USER, TextPart(""))]
    history += [*_answered_call(15), _msg("m16", Role.USER, TextPart("w" * 217))]
    result = assemble(600, "You are helpful.", None, history, live_from=0)
    assert result.usable_tokens == 506
    assert sum(m.estimated_tokens for m in result.messages) <= result.usable_tokens
    assert result.dropped_source_messages == 0, (_unused(result), result.parts)  # all fit
