"""An assembled context as the Messages API's messages array (wm_core.anthropic_json)."""

from __future__ import annotations

import json

from wm_core import Message, Role, TextPart, ToolResultPart, ToolUsePart, anthropic_json


def test_every_part_kind_maps_to_its_api_block() -> None:
    messages = [
        Message("1", Role.USER, (TextPart("héllo"),)),
        Message(
            "2",
            Role.ASSISTANT,
            (ToolUsePart("t1", "grep", '{"q": "x"}'), ToolUsePart("t2", "ls", "")),
        ),
        Message("3", Role.USER, (ToolResultPart("t1", "found", is_error=True),)),
    ]
    text = anthropic_json(messages)
    assert "héllo" in text  # not \u-escaped: the text goes out as it came in
    assert json.loads(text) == [
        {"role": "user", "content": [{"type": "text", "text": "héllo"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "grep", "input": {"q": "x"}},
                {"type": "tool_use", "id": "t2", "name": "ls", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "found", "is_error": True}
            ],
        },
    ]
