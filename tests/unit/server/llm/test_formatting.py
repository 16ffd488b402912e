"""Messages as prompt text (reference format: roles, tool parts with name and status)."""

from __future__ import annotations

from wm_core import Message, Role, TextPart, ToolResultPart, ToolUsePart
from wm_server.llm.formatting import render_messages, shorten


def test_roles_tools_and_statuses():
    messages = [
        Message("1", Role.USER, (TextPart("Run the tests please."),)),
        Message(
            "2",
            Role.ASSISTANT,
            (
                TextPart("Running them."),
                ToolUsePart("t1", "bash", '{\n  "command": "pytest -q"\n}'),
                ToolUsePart("t2", "read_file", '{"path": "a.py"}'),
            ),
        ),
        Message(
            "3",
            Role.USER,
            (
                ToolResultPart("t1", "1 failed", is_error=True),
                ToolResultPart("t2", "print('hi')"),
            ),
        ),
        Message("4", Role.SYSTEM, (TextPart("Be brief."),)),
    ]

    assert render_messages(messages) == (
        "[user]: Run the tests please.\n"
        "[assistant]: Running them.\n"
        '[tool:bash (call)] {"command": "pytest -q"}\n'
        '[tool:read_file (call)] {"path": "a.py"}\n'
        "[user]: [tool:bash (error)] 1 failed\n"
        "[tool:read_file (completed)] print('hi')\n"
        "[system]: Be brief."
    )


def test_empty_parts_and_messages_are_left_out():
    messages = [
        Message("1", Role.USER, (TextPart("   "),)),
        Message("2", Role.ASSISTANT, (TextPart(""), TextPart("Done."))),
        Message("3", Role.USER, ()),
    ]

    assert render_messages(messages) == "[assistant]: Done."


def test_result_of_an_older_call_shows_its_id():
    messages = [Message("1", Role.TOOL, (ToolResultPart("toolu_9", "ok"),))]

    assert render_messages(messages) == "[tool]: [tool:id=toolu_9 (completed)] ok"


def test_long_outputs_keep_head_and_tail():
    output = "HEAD" + "x" * 20_000 + "TAIL"
    messages = [
        Message("1", Role.ASSISTANT, (ToolUsePart("t", "bash", '{"command": "cat big.log"}'),)),
        Message("2", Role.USER, (ToolResultPart("t", output),)),
    ]

    rendered = render_messages(messages, limit=1000)

    assert "HEAD" in rendered and "TAIL" in rendered
    assert "characters omitted" in rendered
    assert len(rendered) < 1300
    assert shorten("short", 1000) == "short"
