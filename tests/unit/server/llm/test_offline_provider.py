"""The offline provider on the bundled coding session, through the chain and the guards."""

from __future__ import annotations

from llm_samples import PREVIOUS_WM

from support.conversation import load_raw
from support.wm_checks import duplicate_spellings, items_in_two_sections, listed_paths
from wm_core import (
    SECTIONS,
    Message,
    parse_document,
    validate_create_arguments,
    validate_update_arguments,
)
from wm_server.llm.chain import generate_working_memory
from wm_server.llm.offline import OfflineProvider
from wm_server.llm.port import CreateRequest, Purpose, UpdateRequest

# Written by hand from wm_client/data/coding_session.jsonl, not computed by the code under test.
PATHS = (
    "samples/dkb_2025-01.csv",
    "ledgerline/importers/csv_importer.py",
    "ledgerline/importers/dialects.py",
    "tests/test_csv_importer.py",
    "ledgerline/db.py",
    "ledgerline/cli.py",
    "tests/test_external_id.py",
    "~/.local/share/ledgerline/ledger.db",
    "README.md",
    "docs/importing.md",
    "samples/sparkasse_2025-01.csv",
    "ledgerline/__main__.py",  # only named absolutely, in a traceback
)
# The same files as a traceback names them: spelled relative to the project root instead.
ABSOLUTE_SPELLINGS = (
    "/home/dev/ledgerline/ledgerline/__main__.py",
    "/home/dev/ledgerline/ledgerline/cli.py",
    "/home/dev/ledgerline/ledgerline/importers/csv_importer.py",
    "/home/dev/ledgerline/ledgerline/db.py",
)
ERRORS = (
    "ValueError: time data '31.01.2025' does not match format '%Y-%m-%d'",
    "FileNotFoundError: [Errno 2] No such file or directory: 'ledgerline/importers/dialects.py'",
    "FAILED tests/test_csv_importer.py::test_amount_with_thousands_separator",
    "sqlite3.IntegrityError: UNIQUE constraint failed: transactions.external_id",
    "error: unrecognized arguments: --dry-run",
)
OPEN_QUESTIONS = (
    "Is there a way to categorize spending automatically by payee?",
    "Is the balance line even present in every DKB export?",
)
TODOS = (
    "update docs/importing.md once you confirm whether the Sparkasse export",
    "the importer should warn when the closing balance of a statement doesn't match",
)
ANSWERED_QUESTIONS = (
    "doesn't including the row position break re-imports?",
    "are they imported now?",
)


def test_expected_lists_cover_every_failure_in_the_data():
    """Each failed tool result of the conversation is represented in ERRORS (and only those)."""
    failed = [
        part["content"]
        for message in load_raw()
        for part in message["parts"]
        if part["type"] == "tool_result" and part.get("is_error")
    ]
    assert len(failed) == len(ERRORS)
    for content in failed:
        assert sum(error in content for error in ERRORS) == 1


async def test_every_path_error_and_open_question_reaches_the_working_memory(
    conversation: list[Message],
):
    generation = await generate_working_memory(
        OfflineProvider(), previous_document=None, messages=conversation
    )

    sections = parse_document(generation.document)
    assert set(sections) == set(SECTIONS)
    assert sorted(listed_paths(generation.document)) == sorted(PATHS)
    for spelling in ABSOLUTE_SPELLINGS:
        assert spelling not in generation.document, spelling
    for error in ERRORS:
        assert error in sections["Errors & Corrections"], error
    for question in (*OPEN_QUESTIONS, *TODOS):
        assert question in sections["Open Issues"], question
    for question in ANSWERED_QUESTIONS:
        assert question not in sections["Open Issues"], question
    assert sections["Session Title"] == "Fix the CSV importer in ledgerline"
    assert sections["Current State"].startswith("Done: `ledgerline import --dry-run` reports")
    assert sections["Current State"].endswith("All 15 tests pass.")  # three sentences, no more
    assert "--dry-run flag to the import command" in sections["Task & Goals"]
    assert "detect the layout from the header row" in sections["Key Facts & Decisions"]
    assert "don't touch the schema in ledgerline/db.py" in sections["Key Facts & Decisions"]


async def test_two_commits_keep_everything_through_the_guards(conversation: list[Message]):
    provider = OfflineProvider()
    split = next(i for i, m in enumerate(conversation) if m.id == "m029")  # after a text reply
    first = await generate_working_memory(
        provider, previous_document=None, messages=conversation[:split]
    )
    second = await generate_working_memory(
        provider, previous_document=first.document, messages=conversation[split:]
    )

    assert (first.mode, second.mode) == ("create", "update")
    assert second.calls == (Purpose.UPDATE,)
    sections = parse_document(second.document)
    assert sorted(listed_paths(second.document)) == sorted(PATHS)
    for error in ERRORS:
        assert error in sections["Errors & Corrections"], error
    for question in (*OPEN_QUESTIONS, *TODOS):
        assert question in sections["Open Issues"], question
    # The title was set by the first commit and is not proposed again.
    assert sections["Session Title"] == "Fix the CSV importer in ledgerline"
    assert second.ops is not None and second.ops["Session Title"].kind == "KEEP"
    # Nothing from the first commit's document was lost.
    first_sections = parse_document(first.document)
    for name in ("Task & Goals", "Key Facts & Decisions", "Errors & Corrections"):
        assert first_sections[name] in sections[name]


async def test_output_is_deterministic(conversation: list[Message]):
    provider = OfflineProvider()
    runs = [
        await generate_working_memory(
            provider, previous_document=PREVIOUS_WM, messages=conversation
        )
        for _ in range(2)
    ]
    assert runs[0].document == runs[1].document
    assert runs[0].ops == runs[1].ops
    fresh = await generate_working_memory(
        OfflineProvider(), previous_document=PREVIOUS_WM, messages=list(conversation)
    )
    assert fresh.document == runs[0].document


async def test_answers_match_the_tool_schemas(conversation: list[Message]):
    provider = OfflineProvider()
    update = await provider.update(UpdateRequest(PREVIOUS_WM, conversation))
    create = await provider.create(CreateRequest(conversation))

    assert validate_update_arguments(update.tool_input) == []
    assert validate_create_arguments(create.tool_input) == []
    assert update.stop_reason == create.stop_reason == "tool_use"
    assert update.usage.llm_calls == 1 and update.usage.input_tokens == 0


async def test_existing_title_is_kept_and_known_items_are_not_repeated(
    conversation: list[Message],
):
    provider = OfflineProvider()
    reply = await provider.update(UpdateRequest(PREVIOUS_WM, conversation))
    assert isinstance(reply.tool_input, dict)
    ops = reply.tool_input["sections"]

    assert ops["Session Title"] == {"op": "KEEP"}
    files = ops["Files & Context"]["items"]
    assert not any(item.startswith("ledgerline/importers/csv_importer.py ") for item in files)
    assert any(item.startswith("ledgerline/cli.py ") for item in files)


async def test_legacy_summary_is_carried_into_the_creation(conversation: list[Message]):
    legacy = "# Session Summary\n\n**Overview**: the user keeps a ledger in SQLite"

    generation = await generate_working_memory(
        OfflineProvider(), previous_document=legacy, messages=conversation[:4]
    )

    assert generation.mode == "create"
    facts = parse_document(generation.document)["Key Facts & Decisions"]
    assert "the user keeps a ledger in SQLite" in facts


async def test_fallback_creation_with_previous_document_keeps_it(conversation: list[Message]):
    provider = OfflineProvider()
    reply = await provider.create(CreateRequest(conversation[:6], context_document=PREVIOUS_WM))
    assert isinstance(reply.tool_input, dict)

    assert reply.tool_input["Session Title"] == "Ledgerline CSV importer for German bank exports"
    assert (
        "ledgerline/importers/dialects.py — new dialect module"
        in reply.tool_input["Files & Context"]
    )
    assert "Should pending (Vorgemerkt) rows be imported?" in reply.tool_input["Open Issues"]


async def test_answered_open_question_is_marked_resolved_not_deleted(
    conversation: list[Message],
):
    previous = PREVIOUS_WM.replace(
        "- Should pending (Vorgemerkt) rows be imported?",
        "- Should pending (Vorgemerkt) rows be imported?\n"
        "- Which currency should foreign card payments be booked in?",
    )

    generation = await generate_working_memory(
        OfflineProvider(), previous_document=previous, messages=conversation
    )

    issues = parse_document(generation.document)["Open Issues"].split("\n")
    assert issues[0].startswith(
        "- [resolved] Should pending (Vorgemerkt) rows be imported? Answer: Pending rows"
    )
    assert issues[1] == "- Which currency should foreign card payments be booked in?"
    assert generation.ops is not None and generation.ops["Open Issues"].kind == "UPDATE"
    assert not [d for d in generation.decisions if d.section == "Open Issues"]  # nothing restored


async def test_messages_without_structure_still_make_a_working_memory():
    from wm_core import Role, TextPart, ToolUsePart

    filler = [Message("f1", Role.USER, (TextPart("x" * 400),), 100)]
    generation = await generate_working_memory(
        OfflineProvider(), previous_document=None, messages=filler
    )
    assert "Latest user message: xxxx" in generation.document
    bare = [Message("t1", Role.ASSISTANT, (ToolUsePart("t", "noop", "{}"),), 3)]
    generation = await generate_working_memory(
        OfflineProvider(), previous_document=None, messages=bare
    )
    assert "1 messages archived without text content." in generation.document


# -- one spelling per path, one section per item, a current Current State -------------------------


def _commits(conversation: list[Message], size: int) -> list[list[Message]]:
    return [conversation[i : i + size] for i in range(0, len(conversation), size)]


async def _replay(conversation: list[Message], size: int) -> list[str]:
    """The documents after each commit of ``size`` messages, through the chain and guards."""
    documents: list[str] = []
    previous: str | None = None
    for chunk in _commits(conversation, size):
        generation = await generate_working_memory(
            OfflineProvider(), previous_document=previous, messages=chunk
        )
        previous = generation.document
        documents.append(previous)
    return documents


async def test_the_demo_lists_each_path_once_and_each_item_in_one_section(
    conversation: list[Message],
):
    for size in (len(conversation), 5, 8, 12, 20):
        for document in await _replay(conversation, size):
            assert duplicate_spellings(document) == [], (size, document)
            assert items_in_two_sections(document) == {}, (size, document)
        assert sorted(listed_paths(document)) == sorted(PATHS), size


async def test_absolute_and_bare_spellings_fold_into_the_relative_path(
    conversation: list[Message],
):
    documents = await _replay(conversation, 12)

    files = parse_document(documents[-1])["Files & Context"]
    # The traceback's absolute path, the read_file path and the assistant's "db.py": one line.
    [db] = [line for line in files.splitlines() if "db.py" in line]
    assert db.startswith("- ledgerline/db.py — ")
    assert "in bash error output" in db and "read" in db


async def test_paths_of_the_previous_document_keep_their_spelling(conversation: list[Message]):
    from wm_core import Role, TextPart, ToolResultPart, ToolUsePart

    later = [
        Message("x1", Role.ASSISTANT, (ToolUsePart("t9", "bash", '{"command": "pytest"}'),)),
        Message(
            "x2",
            Role.USER,
            (
                ToolResultPart(
                    "t9",
                    'File "/home/dev/ledgerline/ledgerline/importers/dialects.py", line 3\n'
                    "SyntaxError: invalid syntax",
                    is_error=True,
                ),
            ),
        ),
        Message("x3", Role.ASSISTANT, (TextPart("A typo in dialects.py; fixing it."),)),
    ]

    generation = await generate_working_memory(
        OfflineProvider(), previous_document=PREVIOUS_WM, messages=later
    )

    files = parse_document(generation.document)["Files & Context"]
    assert "/home/dev" not in files and "\n- dialects.py" not in files
    assert files.count("ledgerline/importers/dialects.py") == 1  # already listed: not again
    assert duplicate_spellings(generation.document) == []


async def test_an_item_known_in_one_section_is_not_added_to_another(conversation: list[Message]):
    previous = PREVIOUS_WM.replace(
        "- Make samples/dkb_2025-01.csv import cleanly",
        "- Make samples/dkb_2025-01.csv import cleanly\n"
        "- Existing ISO-format imports must keep working.",
    )

    generation = await generate_working_memory(
        OfflineProvider(), previous_document=previous, messages=conversation
    )

    sections = parse_document(generation.document)
    assert "Existing ISO-format imports must keep working." in sections["Task & Goals"]
    assert "ISO-format imports" not in sections["Key Facts & Decisions"]
    assert items_in_two_sections(generation.document) == {}


async def test_current_state_shows_the_open_work_after_the_latest_assistant_text(
    conversation: list[Message],
):
    end = next(i for i, m in enumerate(conversation) if m.id == "m043")  # the failed --dry-run
    generation = await generate_working_memory(
        OfflineProvider(), previous_document=None, messages=conversation[: end + 1]
    )

    state = parse_document(generation.document)["Current State"]
    assert state.startswith("Pending rows ('Vorgemerkt') were imported like booked ones")
    assert "Now the --dry-run flag." in state
    assert state.endswith("failed: ledgerline: error: unrecognized arguments: --dry-run")
    # The decision of the same reply is a Key Fact, not repeated in Current State.
    assert "I decided to skip them" not in state
    assert "I decided to skip them" in parse_document(generation.document)["Key Facts & Decisions"]


async def test_an_archive_without_assistant_text_adds_its_open_work_to_the_state(
    conversation: list[Message],
):
    end = next(i for i, m in enumerate(conversation) if m.id == "m039")
    stop = next(i for i, m in enumerate(conversation) if m.id == "m043")
    first = await generate_working_memory(
        OfflineProvider(), previous_document=None, messages=conversation[: end + 1]
    )
    tools_only = [m for m in conversation[end + 1 : stop + 1] if not m.text().strip()]
    assert tools_only, "the slice holds tool traffic only"

    second = await generate_working_memory(
        OfflineProvider(), previous_document=first.document, messages=tools_only
    )

    before = parse_document(first.document)["Current State"]
    after = parse_document(second.document)["Current State"]
    assert after.startswith(before)
    assert after.endswith("unrecognized arguments: --dry-run")
