"""A cut current turn leaves no more than 5 % of the usable tokens idle (issue 36, defect 4):
the cut is sized on estimates and on the room held for the omitted-note, which a small budget
feels (800 tokens: 34 of 356 usable tokens, 9.5 %, were left idle)."""

from __future__ import annotations

from wm_core import SECTIONS, render_document
from wm_core._messages import Message, Role, TextPart, ToolResultPart, ToolUsePart, message_tokens
from wm_core._session.assembly import assemble


def _msg(mid: str, role: Role, *parts: TextPart | ToolUsePart | ToolResultPart) -> Message:
    return Message(mid, role, parts, message_tokens(parts))


def _session(output_chars: int) -> list[Message]:
    """One request, two small tool calls and a large one whose output must be cut."""
    session = [_msg("u0", Role.USER, TextPart("request 0 word "))]
    for tid, size in (("t1", 10), ("t2", 10), ("t3", output_chars)):
        session.append(
            _msg(f"a{tid}", Role.ASSISTANT, TextPart("on it"), ToolUsePart(tid, "bash", "{}"))
        )
        session.append(_msg(f"r{tid}", Role.USER, ToolResultPart(tid, "x" * size, False)))
    return session


def test_a_cut_turn_takes_back_the_room_held_for_notes() -> None:
    summary = render_document({s: f"{s} text" for s in SECTIONS})
    for budget, output_chars in ((800, 1500), (1200, 4000), (3000, 20_000)):
        result = assemble(budget, "You are a coding agent.", summary, _session(output_chars))
        assert result.cut_parts and result.dropped_source_messages == 0
        used = sum(m.estimated_tokens for m in result.messages)
        assert used <= result.usable_tokens
        assert result.usable_tokens - used <= result.usable_tokens * 0.05, (budget, used)
