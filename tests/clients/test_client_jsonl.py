"""JSONL conversations ↔ wm.v1 messages, and the conversation bundled for ``wm demo``."""

from __future__ import annotations

import io
import json

import pytest

from support.conversation import CODING_SESSION
from wm_client.demo import bundled_conversation
from wm_client.jsonl import (
    JsonlError,
    message_from_dict,
    message_to_dict,
    read_jsonl,
    split_turns,
    write_jsonl,
)
from wm_proto.v1 import resources_pb2 as pb

SOURCE = CODING_SESSION


def test_every_part_kind_is_read() -> None:
    message = message_from_dict(
        {
            "id": "m002",
            "role": "assistant",
            "parts": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_01", "name": "bash", "input": {"cmd": "ls"}},
            ],
        }
    )
    assert message.id == "m002" and message.role == pb.ROLE_ASSISTANT
    assert message.parts[0].text == "Let me look."
    assert message.parts[1].tool_use.name == "bash"
    assert json.loads(message.parts[1].tool_use.input_json) == {"cmd": "ls"}
    result = message_from_dict(
        {
            "role": "user",
            "parts": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                    "is_error": True,
                }
            ],
        }
    )
    assert result.parts[0].tool_result.content == "a\nb" and result.parts[0].tool_result.is_error
    shorthand = message_from_dict({"role": "system", "content": "be brief"})
    assert shorthand.role == pb.ROLE_SYSTEM and shorthand.parts[0].text == "be brief"


def test_round_trip_of_the_recorded_conversation() -> None:
    messages = read_jsonl(SOURCE)
    out = io.StringIO()
    write_jsonl(messages, out)
    original = [json.loads(line) for line in SOURCE.read_text().splitlines() if line.strip()]
    written = [json.loads(line) for line in out.getvalue().splitlines()]
    for before, after in zip(original, written, strict=True):
        for part in before["parts"]:
            if part.get("type") == "tool_result" and not part.get("is_error"):
                part.pop("is_error", None)
        assert after == before
    assert [message_to_dict(m) for m in read_jsonl(io.StringIO(out.getvalue()))] == written


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("not json", "line 2: not valid JSON"),
        ('{"role": "robot", "parts": [{"type": "text", "text": "x"}]}', "line 2: role must be"),
        ('{"role": "user", "parts": []}', "line 2: parts must be a non-empty list"),
        ('{"role": "user", "parts": [{"type": "image"}]}', "line 2: parts[0].type must be"),
        ('{"role": "user", "parts": [{"type": "text", "text": 3}]}', "parts[0].text must be"),
        (
            '{"role": "assistant", "parts": [{"type": "tool_use", "input": [1]}]}',
            "parts[0].input must be an object",
        ),
    ],
)
def test_a_bad_line_is_named(line: str, problem: str) -> None:
    good = '{"role": "user", "parts": [{"type": "text", "text": "ok"}]}'
    with pytest.raises(JsonlError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        read_jsonl(io.StringIO(f"{good}\n{line}\n"))


def test_turns_start_at_user_text_not_at_tool_results() -> None:
    question = message_from_dict({"role": "user", "content": "fix it"})
    call = message_from_dict(
        {"role": "assistant", "parts": [{"type": "tool_use", "id": "t1", "name": "ls"}]}
    )
    result = message_from_dict(
        {"role": "user", "parts": [{"type": "tool_result", "tool_use_id": "t1", "content": "a"}]}
    )
    answer = message_from_dict({"role": "assistant", "content": "fixed"})
    follow_up = message_from_dict({"role": "user", "content": "thanks"})
    turns = split_turns([question, call, result, answer, follow_up])
    assert turns == [[question, call, result, answer], [follow_up]]
    recorded = read_jsonl(SOURCE)
    assert sum(len(t) for t in split_turns(recorded)) == len(recorded)


def test_the_demo_ships_the_recorded_conversation() -> None:
    messages = bundled_conversation()
    assert len(messages) == len(read_jsonl(SOURCE))
    kinds = {p.WhichOneof("kind") for m in messages for p in m.parts}
    assert kinds == {"text", "tool_use", "tool_result"}
    assert any(p.tool_result.is_error for m in messages for p in m.parts)
