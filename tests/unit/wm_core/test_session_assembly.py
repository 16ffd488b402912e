"""Context assembly invariants, over random conversations (hypothesis)."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from wm_core import SECTIONS, anthropic_json, estimate_tokens, render_document
from wm_core._messages import Message, Role, TextPart, ToolResultPart, ToolUsePart, message_tokens
from wm_core._session.assembly import (
    CUT_INPUT_KEY,
    SUMMARY_HEADER,
    assemble,
    cut_text,
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
    # The working memory's bound is its own (WM_MAX_TOKENS), not a share: assembly splits
    # the usable budget by need (test_session_assembly_adaptive.py).
    assert plan_budget(20_000, 1000).working_memory == 8_000
    assert plan_budget(4_000, 1000).working_memory == 4_000 - 600 - 1000


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


# --- the current turn is never evicted (issue 18, point 3) ------------------------------------


def _agent_turn(output: str) -> list[Message]:
    """The issue's scenario: a question, a tool call, a huge tool result, the answer."""
    return [
        _msg("q", Role.USER, TextPart("Why does test_db fail? Read the CI log.")),
        _msg("c", Role.ASSISTANT, TextPart("Reading it."), ToolUsePart("t1", "read_log", "{}")),
        _msg("r", Role.USER, ToolResultPart("t1", output)),
        _msg("a", Role.ASSISTANT, TextPart("Here it is")),
    ]


def _texts(messages: list[Message]) -> str:
    return "\n".join(
        p.text if isinstance(p, TextPart) else p.content if isinstance(p, ToolResultPart) else ""
        for m in messages
        for p in m.parts
    )


def test_a_huge_tool_result_in_the_newest_turn_is_cut_not_the_question() -> None:
    log = "HEAD-OF-LOG\n" + "x" * 400_000 + "\nTAIL: 1 failed"  # ~100,000 tokens
    result = assemble(64_000, "", None, _agent_turn(log), {"r": 'tool_output_read("to_1")'})
    text = _texts(result.messages)
    assert "Why does test_db fail?" in text and "Here it is" in text
    uses = [p for m in result.messages for p in m.parts if isinstance(p, ToolUsePart)]
    assert [u.id for u in uses] == ["t1"]
    assert "HEAD-OF-LOG" in text and "TAIL: 1 failed" in text  # head and tail kept
    assert 'characters cut here to fit the context budget; full text: tool_output_read("to_1")' in (
        text
    )
    assert result.estimated_tokens + result.reply_reserve <= 64_000
    assert result.dropped_source_messages == 0
    (cut,) = result.cut_parts
    assert cut.startswith("message r part 0: 400,027 → ")
    assert result.estimated_tokens > 40_000  # cut only as far as needed: the room is used
    assert [m.role for m in result.messages] == [
        Role.USER,
        Role.ASSISTANT,
        Role.USER,
        Role.ASSISTANT,
    ]


def test_older_turns_go_before_the_current_one_is_cut() -> None:
    old = [
        _msg("o1", Role.USER, TextPart("old " * 3000)),
        _msg("o2", Role.ASSISTANT, TextPart("ok")),
    ]
    result = assemble(30_000, "", None, old + _agent_turn("y" * 120_000))
    text = _texts(result.messages)
    assert "old old" not in text and "Why does test_db fail?" in text and "Here it is" in text
    assert result.dropped_source_messages == 2 and len(result.cut_parts) == 1
    assert result.messages[0].parts == (TextPart("Why does test_db fail? Read the CI log."),)


def _long_turn(steps: int, output: int) -> list[Message]:
    turn = [_msg("q", Role.USER, TextPart("Fix the build"))]
    for n in range(steps):
        turn.append(_msg(f"c{n}", Role.ASSISTANT, ToolUsePart(f"t{n}", "bash", '{"cmd": "make"}')))
        turn.append(_msg(f"r{n}", Role.USER, ToolResultPart(f"t{n}", f"step {n} " + "z" * output)))
    turn.append(_msg("done", Role.ASSISTANT, TextPart("Fixed: the linker flag was missing.")))
    return turn


def test_the_steps_of_the_current_turn_are_cut_rather_than_evicted() -> None:
    result = assemble(12_000, "", None, _long_turn(10, 8000))
    text = _texts(result.messages)
    assert text.startswith("Fix the build") and text.endswith("Fixed: the linker flag was missing.")
    assert all(f"step {n} " in text for n in range(10))
    assert result.dropped_source_messages == 0 and result.cut_parts
    assert result.estimated_tokens + result.reply_reserve <= 12_000


def test_middle_steps_are_evicted_oldest_first_when_even_cut_they_do_not_fit() -> None:
    result = assemble(12_000, "", None, _long_turn(200, 4000))
    text = _texts(result.messages)
    assert text.startswith("Fix the build") and text.endswith("Fixed: the linker flag was missing.")
    assert "step 199 " in text and "step 0 " not in text  # newest steps kept, oldest evicted
    assert result.dropped_source_messages > 0
    assert result.estimated_tokens + result.reply_reserve <= 12_000


def test_a_cut_tool_input_stays_a_json_object() -> None:
    messages = [
        _msg("q", Role.USER, TextPart("Write the file")),
        _msg("c", Role.ASSISTANT, ToolUsePart("t1", "write", json.dumps({"body": "b" * 200_000}))),
        _msg("r", Role.USER, ToolResultPart("t1", "written")),
    ]
    result = assemble(40_000, "", None, messages)
    (use,) = [p for m in result.messages for p in m.parts if isinstance(p, ToolUsePart)]
    value = json.loads(use.input_json)
    assert list(value) == [CUT_INPUT_KEY] and "characters cut here" in value[CUT_INPUT_KEY]
    assert value[CUT_INPUT_KEY].startswith('{"body": "bbb')
    assert result.estimated_tokens + result.reply_reserve <= 40_000


def test_tool_results_come_first_in_a_merged_user_message() -> None:
    messages = [
        _msg("q", Role.USER, TextPart("List the files")),
        _msg("c", Role.ASSISTANT, ToolUsePart("t1", "ls", "{}")),
        _msg("u", Role.USER, TextPart("and be quick")),
        _msg("r", Role.USER, ToolResultPart("t1", "a.py")),
        _msg("s", Role.USER, TextPart("mixed"), ToolResultPart("t2", "orphan dropped")),
    ]
    result = assemble(100_000, "", None, messages)
    last = result.messages[-1]
    assert last.role is Role.USER
    assert last.parts == (ToolResultPart("t1", "a.py"), TextPart("and be quick"), TextPart("mixed"))
    blocks = json.loads(anthropic_json(result.messages))[-1]["content"]
    assert [b["type"] for b in blocks] == ["tool_result", "text", "text"]


def test_cut_text_keeps_head_and_tail_around_a_marker() -> None:
    text = "".join(str(i % 10) for i in range(10_000))
    cut = cut_text(text, 1000, "archive_002")
    head, rest = cut.split("\n[… ", 1)
    marker, tail = rest.split(" …]\n", 1)
    assert head == text[:500] and tail == text[-500:]
    assert marker == "9,000 characters cut here to fit the context budget; full text: archive_002"
    assert cut_text("short", 1000, "x") == "short"


@st.composite
def turns_with_big_parts(draw: st.DrawFn) -> list[Message]:
    history = draw(conversations())
    size = draw(st.integers(0, 300_000))
    kind = draw(st.sampled_from(["result", "text", "input", "answer"]))
    question = "NEWEST-QUESTION " + ("q" * size if kind == "text" else "")
    turn = [_msg("nq", Role.USER, TextPart(question))]
    if kind in ("result", "input"):
        payload = json.dumps({"data": "i" * size}) if kind == "input" else "{}"
        turn.append(_msg("nc", Role.ASSISTANT, ToolUsePart("tn", "run", payload)))
        turn.append(
            _msg("nr", Role.USER, ToolResultPart("tn", "r" * size if kind == "result" else "ok"))
        )
    turn.append(
        _msg(
            "na",
            Role.ASSISTANT,
            TextPart("LATEST-STEP " + ("a" * size if kind == "answer" else "")),
        )
    )
    return history + turn


@settings(max_examples=80, deadline=None)
@given(conversation=turns_with_big_parts(), budget=st.integers(12_000, 400_000))
def test_the_newest_request_and_latest_step_always_survive(
    conversation: list[Message], budget: int
) -> None:
    result = assemble(budget, "You are a coding agent.", None, conversation)
    text = _texts(result.messages)
    assert "NEWEST-QUESTION" in text and "LATEST-STEP" in text
    assert result.estimated_tokens + result.reply_reserve <= budget
    roles = [m.role for m in result.messages]
    assert roles[0] is Role.USER and all(a is not b for a, b in itertools.pairwise(roles))
    for message in result.messages:
        kinds = [isinstance(p, ToolResultPart) for p in message.parts]
        assert kinds == sorted(kinds, reverse=True)  # tool results first
        for part in message.parts:
            if isinstance(part, ToolUsePart):
                assert isinstance(json.loads(part.input_json), dict)
    uses = sorted(p.id for m in result.messages for p in m.parts if isinstance(p, ToolUsePart))
    answers = sorted(
        p.tool_use_id for m in result.messages for p in m.parts if isinstance(p, ToolResultPart)
    )
    assert uses == answers
