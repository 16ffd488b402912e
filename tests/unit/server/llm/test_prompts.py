"""The prompts: package data in our words, covering the rules the guards rely on."""

from __future__ import annotations

from importlib import resources

from llm_samples import PREVIOUS_WM, short_messages

from wm_server.llm.port import (
    CreateRequest,
    ModelReply,
    Purpose,
    RepairRequest,
    UpdateRequest,
    Usage,
)
from wm_server.llm.prompts import (
    create_user_message,
    repair_user_message,
    system_prompt,
    update_user_message,
)


def test_prompt_files_ship_as_package_data():
    names = {p.name for p in resources.files("wm_server.llm.prompts").iterdir()}
    assert {"system.md", "update.md", "create.md", "repair.md"} <= names


def test_update_prompt_states_the_op_rules():
    text = system_prompt(Purpose.UPDATE)
    for section in (
        "Session Title",
        "Current State",
        "Task & Goals",
        "Key Facts & Decisions",
        "Files & Context",
        "Errors & Corrections",
        "Open Issues",
    ):
        assert section in text
    assert "prefer KEEP over APPEND and APPEND over UPDATE" in text
    assert 'An UPDATE is "previous + new"' in text
    assert "**Errors & Corrections**: APPEND only" in text
    assert "`[resolved]`" in text
    assert "you must consolidate it with an UPDATE" in text
    assert "[tool:<name> (error)]" in text  # how messages are shown


def test_create_and_repair_prompts():
    assert "create_working_memory" in system_prompt(Purpose.CREATE)
    assert system_prompt(Purpose.REPAIR) == system_prompt(Purpose.UPDATE)


def test_update_message_carries_document_reminders_and_messages():
    text = update_user_message(
        UpdateRequest(
            PREVIOUS_WM,
            short_messages(),
            reminders="<section_size_warnings>\nW\n</section_size_warnings>",
        )
    )
    assert text.index("<current_working_memory>") < text.index("<section_size_warnings>")
    assert text.index("<section_size_warnings>") < text.index("<new_messages>")
    assert "[tool:bash (error)] sqlite3.IntegrityError" in text
    no_reminders = update_user_message(UpdateRequest(PREVIOUS_WM, short_messages()))
    assert "section_size_warnings" not in no_reminders


def test_repair_message_lists_the_errors():
    reply = ModelReply(tool_input=None, stop_reason="end_turn", usage=Usage(), text="Just text.")
    text = repair_user_message(
        RepairRequest(UpdateRequest(PREVIOUS_WM, short_messages()), reply, ("err one", "err two"))
    )
    assert "<validation_errors>\n- err one\n- err two\n</validation_errors>" in text
    assert "(no tool call; the answer was text)\nJust text." in text
    assert "output limit" not in text
    truncated = ModelReply(tool_input={"sections": {}}, stop_reason="max_tokens", usage=Usage())
    text = repair_user_message(
        RepairRequest(UpdateRequest(PREVIOUS_WM, short_messages()), truncated, ("err",))
    )
    assert "cut off at the output limit" in text
    assert '<previous_arguments>\n{"sections": {}}\n</previous_arguments>' in text


def test_create_message_with_and_without_context():
    with_context = create_user_message(CreateRequest(short_messages(), context_document="old"))
    assert "<previous_working_memory>\nold\n</previous_working_memory>" in with_context
    without = create_user_message(CreateRequest(short_messages()))
    assert "previous_working_memory" not in without
    assert "<session_messages>\n[user]: Please import" in without
