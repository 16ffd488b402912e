"""The recovery chain with the Anthropic provider, the real SDK and a local Messages API.

Every case ends in a usable document or in a retryable failure, and the previous working memory
is never replaced by anything less: what it held is still in the result, or the chain failed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from llm_samples import PREVIOUS_WM, short_messages, valid_update_input

from support.fake_anthropic import FakeAnthropic, Reply, error, slow, text_only, tool_use
from wm_core import (
    KEEP,
    SECTIONS,
    Guard,
    SectionOp,
    is_working_memory,
    parse_document,
    summary_update_ops,
)
from wm_server.llm.anthropic_provider import AnthropicProvider
from wm_server.llm.chain import (
    ChainEvent,
    Generation,
    GenerationFailed,
    LlmCallFinished,
    LlmCallStarted,
    OpsParsed,
    backfill_sections,
    generate_working_memory,
)
from wm_server.llm.port import LlmError, Purpose, Usage

Factory = Callable[..., AnthropicProvider]

PREVIOUS_SECTIONS = parse_document(PREVIOUS_WM)


def creation_input(**overrides: str) -> dict[str, str]:
    bodies = {
        "Session Title": "Ledgerline CSV importer for German bank exports",
        "Current State": "Rewritten from scratch; the import works.",
        "Task & Goals": "- Import DKB statements",
        "Key Facts & Decisions": "- Occurrence counter in external ids",
        "Files & Context": "- ledgerline/db.py — schema",
        "Errors & Corrections": "- sqlite3.IntegrityError on external_id",
        "Open Issues": "- Categorize spending by payee?",
    }
    bodies.update(overrides)
    return bodies


async def run(
    provider: AnthropicProvider, previous: str | None = PREVIOUS_WM
) -> tuple[Generation, list[ChainEvent]]:
    events: list[ChainEvent] = []

    async def sink(event: ChainEvent) -> None:
        events.append(event)

    generation = await generate_working_memory(
        provider, previous_document=previous, messages=short_messages(), on_event=sink
    )
    return generation, events


def assert_previous_survives(document: str) -> None:
    """The protected content of the previous document is still there."""
    sections = parse_document(document)
    assert sections["Session Title"] == PREVIOUS_SECTIONS["Session Title"]
    for path in ("ledgerline/importers/csv_importer.py", "ledgerline/importers/dialects.py"):
        assert path in sections["Files & Context"]
    assert PREVIOUS_SECTIONS["Errors & Corrections"] in sections["Errors & Corrections"]
    assert "pending (Vorgemerkt) rows" in sections["Open Issues"]


async def test_valid_answer_is_merged(fake: FakeAnthropic, make_provider: Factory):
    fake.enqueue(tool_use(valid_update_input()))

    generation, events = await run(make_provider())

    assert generation.mode == "update"
    assert generation.calls == (Purpose.UPDATE,)
    sections = parse_document(generation.document)
    assert sections["Current State"].startswith("Duplicates are detected")
    assert "- ledgerline/db.py — schema, untouched" in sections["Files & Context"]
    assert "sqlite3.IntegrityError on external_id" in sections["Errors & Corrections"]
    assert "[resolved] Should pending (Vorgemerkt) rows be imported?" in sections["Open Issues"]
    assert_previous_survives(generation.document)
    assert generation.ops is not None and set(generation.ops) == set(SECTIONS)
    assert generation.usage == Usage(120, 80, 0, 0, llm_calls=1)
    assert generation.problems == []
    kinds = [type(e) for e in events]
    assert kinds == [LlmCallStarted, LlmCallFinished, OpsParsed]
    started, finished = events[0], events[1]
    assert isinstance(started, LlmCallStarted) and isinstance(finished, LlmCallFinished)
    assert (started.purpose, started.provider, started.model) == (
        Purpose.UPDATE,
        "anthropic",
        "claude-test-model",
    )
    assert finished.stop_reason == "tool_use" and finished.duration_ms >= 0


async def test_guards_apply_to_a_valid_answer(fake: FakeAnthropic, make_provider: Factory):
    answer = valid_update_input()
    # An UPDATE of the append-only section that rewrites history is demoted by the guard.
    answer["sections"]["Errors & Corrections"] = {"op": "UPDATE", "content": "- all fine now"}
    fake.enqueue(tool_use(answer))

    generation, _ = await run(make_provider())

    errors = parse_document(generation.document)["Errors & Corrections"]
    assert PREVIOUS_SECTIONS["Errors & Corrections"] in errors
    assert "all fine now" in errors
    assert any(d.guard == Guard.APPEND_ONLY for d in generation.decisions)


async def test_text_only_answer_goes_to_repair(fake: FakeAnthropic, make_provider: Factory):
    fake.enqueue(text_only("Here is my summary: all good."), tool_use(valid_update_input()))

    generation, events = await run(make_provider())

    assert generation.calls == (Purpose.UPDATE, Purpose.REPAIR)
    assert generation.mode == "update"
    repair_request = fake.requests[1]
    assert "no update_working_memory call" in repair_request.user_text
    assert "Here is my summary: all good." in repair_request.user_text
    assert parse_document(generation.document)["Current State"].startswith("Duplicates")
    assert generation.usage.llm_calls == 2
    assert generation.usage.input_tokens == 240
    purposes = [e.purpose for e in events if isinstance(e, LlmCallStarted)]
    assert purposes == [Purpose.UPDATE, Purpose.REPAIR]


CUT_OFF_ANSWER: dict[str, Any] = {
    "sections": {
        "Session Title": {"op": "KEEP"},
        "Current State": {"op": "UPDATE", "content": "Counter-based ids work."},
        "Key Facts & Decisions": {"op": "APPEND", "items": ["Counter ids are stable"]},
        "Files & Context": {"op": "APPEND", "items": ["ledgerline/cli.py — entry", "tests/te"]},
    }
}
CUT_OFF_MISSING = ["Task & Goals", "Files & Context", "Errors & Corrections", "Open Issues"]


def all_keep(ops: dict[str, Any] | None = None) -> dict[str, Any]:
    """A complete answer: KEEP everywhere except the given sections."""
    sections: dict[str, Any] = {name: {"op": "KEEP"} for name in SECTIONS}
    sections.update(ops or {})
    return {"sections": sections}


async def test_max_tokens_stop_salvages_and_distrusts_the_cut_section(
    fake: FakeAnthropic, make_provider: Factory
):
    # The repair has nothing to add: the salvaged part alone is merged.
    fake.enqueue(tool_use(CUT_OFF_ANSWER, stop_reason="max_tokens"), tool_use(all_keep()))

    generation, _ = await run(make_provider())

    assert generation.calls == (Purpose.UPDATE, Purpose.REPAIR)
    sections = parse_document(generation.document)
    assert sections["Current State"] == "Counter-based ids work."
    assert "Counter ids are stable" in sections["Key Facts & Decisions"]
    assert "ledgerline/cli.py — entry" in sections["Files & Context"]
    assert "tests/te" not in sections["Files & Context"]  # the item being written when cut
    assert sections["Open Issues"] == PREVIOUS_SECTIONS["Open Issues"]  # defaulted to KEEP
    assert any("max_tokens" in p for p in generation.problems)
    assert_previous_survives(generation.document)


async def test_max_tokens_stop_asks_the_repair_for_the_missing_and_cut_sections(
    fake: FakeAnthropic, make_provider: Factory
):
    # Before: the salvage was merged on its own, so the sections after the cut kept their old
    # text and the turn's new items for them were lost.
    repair = all_keep(
        {
            "Files & Context": {
                "op": "APPEND",
                "items": ["ledgerline/cli.py — entry", "tests/test_import.py — the import tests"],
            },
            "Errors & Corrections": {"op": "APPEND", "items": ["sqlite3.IntegrityError on rerun"]},
            "Open Issues": {"op": "APPEND", "items": ["Should --dry-run print a diff?"]},
        }
    )
    fake.enqueue(tool_use(CUT_OFF_ANSWER, stop_reason="max_tokens"), tool_use(repair))

    generation, events = await run(make_provider())

    assert generation.calls == (Purpose.UPDATE, Purpose.REPAIR)
    repair_text = fake.requests[1].user_text
    asked = repair_text.split("<sections_to_send>\n")[1].split("\n</sections_to_send>")[0]
    assert asked.splitlines() == [f"- {name}" for name in CUT_OFF_MISSING]
    assert "cut off at the output limit" in repair_text
    sections = parse_document(generation.document)
    # The salvaged part (the repair's KEEP does not undo it) ...
    assert sections["Current State"] == "Counter-based ids work."
    assert "Counter ids are stable" in sections["Key Facts & Decisions"]
    # ... and the repaired part: the cut APPEND is completed once, the missing sections filled.
    files = sections["Files & Context"]
    assert files.count("ledgerline/cli.py — entry") == 1
    assert "tests/test_import.py — the import tests" in files
    assert "sqlite3.IntegrityError on rerun" in sections["Errors & Corrections"]
    assert "Should --dry-run print a diff?" in sections["Open Issues"]
    assert_previous_survives(generation.document)
    assert not any(d.guard == Guard.DEDUP for d in generation.decisions)
    (parsed,) = [e for e in events if isinstance(e, OpsParsed)]
    assert parsed.ops["Open Issues"].items == ("Should --dry-run print a diff?",)
    assert not any("still missing" in p for p in generation.problems)


async def test_repair_cut_off_again_keeps_both_salvages_and_reports_the_rest(
    fake: FakeAnthropic, make_provider: Factory
):
    second = {
        "sections": {
            "Files & Context": {"op": "APPEND", "items": ["tests/test_import.py — tests"]},
            "Errors & Corrections": {"op": "APPEND", "items": ["sqlite3.Integri"]},
        }
    }
    fake.enqueue(
        tool_use(CUT_OFF_ANSWER, stop_reason="max_tokens"),
        tool_use(second, stop_reason="max_tokens"),
    )

    generation, _ = await run(make_provider())

    assert generation.calls == (Purpose.UPDATE, Purpose.REPAIR)  # one repair, never more
    sections = parse_document(generation.document)
    assert sections["Current State"] == "Counter-based ids work."
    assert "ledgerline/cli.py — entry" in sections["Files & Context"]
    assert "tests/test_import.py — tests" in sections["Files & Context"]
    assert "sqlite3.Integri" not in sections["Errors & Corrections"]
    assert_previous_survives(generation.document)
    assert (
        "still missing after the repair (kept): Task & Goals, Errors & Corrections, Open Issues"
        in generation.problems
    )


async def test_sections_left_unread_after_the_repair_are_backfilled_by_the_extractor(
    fake: FakeAnthropic, make_provider: Factory
):
    """A model that resends its cut answer to the repair: the extractor's ops for the unread
    sections go in as APPENDs through the guards, each with a decision saying so."""
    fake.enqueue(
        tool_use(CUT_OFF_ANSWER, stop_reason="max_tokens"),
        tool_use(CUT_OFF_ANSWER, stop_reason="max_tokens"),
    )
    generation = await generate_working_memory(
        make_provider(),
        previous_document=PREVIOUS_WM,
        messages=short_messages(),
        backfill=summary_update_ops,
    )
    sections = parse_document(generation.document)
    assert "sqlite3.IntegrityError: UNIQUE constraint failed" in sections["Errors & Corrections"]
    assert sections["Current State"] == "Counter-based ids work."  # never replaced
    backfilled = [d for d in generation.decisions if d.guard is Guard.BACKFILL]
    assert "Errors & Corrections" in {d.section for d in backfilled}
    assert all(d.applied == "APPEND" and "left unread" in d.reason for d in backfilled)
    assert_previous_survives(generation.document)


def test_backfill_only_appends_and_only_where_the_model_left_a_section_unread() -> None:
    extracted = {
        "sections": {
            "Current State": {"op": "UPDATE", "content": "extractor state"},
            "Open Issues": {"op": "UPDATE", "content": "- old issue\n- new question?"},
            "Files & Context": {"op": "APPEND", "items": ["`a.py`: read"]},
            "Key Facts & Decisions": {"op": "APPEND", "items": ["Port 8443"]},
        }
    }
    ops = {name: KEEP for name in SECTIONS}
    ops["Files & Context"] = SectionOp.append(("`b.py`: edited",))
    unread = ("Current State", "Open Issues", "Files & Context")
    filled, decisions = backfill_sections(ops, unread, extracted)
    assert filled["Current State"] == KEEP  # only what can be appended
    assert filled["Open Issues"].items == ("old issue", "new question?")
    assert filled["Files & Context"].items == ("`b.py`: edited", "`a.py`: read")
    assert filled["Key Facts & Decisions"] == KEEP  # read by the model: untouched
    assert [d.section for d in decisions] == ["Open Issues", "Files & Context"]


async def test_missing_sections_and_wrong_types_are_salvaged(
    fake: FakeAnthropic, make_provider: Factory
):
    broken: dict[str, Any] = {
        "sections": {
            "Current State": {"op": "UPDATE", "content": 42},
            "Key Facts & Decisions": {"op": "APPEND", "items": "Counter ids are stable"},
            "Open Issues": {"op": "APPEND", "items": ["Check the balance line"], "extra": 1},
        }
    }
    fake.enqueue(tool_use(broken))

    generation, events = await run(make_provider())

    assert generation.calls == (Purpose.UPDATE,)
    sections = parse_document(generation.document)
    assert sections["Current State"] == PREVIOUS_SECTIONS["Current State"]  # 42 is no content
    assert "- Counter ids are stable" in sections["Key Facts & Decisions"]
    assert "Check the balance line" in sections["Open Issues"]
    assert_previous_survives(generation.document)
    problems = "\n".join(generation.problems)
    assert "invalid answer" in problems and "defaulted to KEEP" in problems
    parsed = [e for e in events if isinstance(e, OpsParsed)]
    assert len(parsed) == 1 and parsed[0].problems


async def test_unsalvageable_answer_is_repaired(fake: FakeAnthropic, make_provider: Factory):
    fake.enqueue(
        tool_use({"summary": "I changed a few things"}),
        tool_use(valid_update_input()),
    )

    generation, _ = await run(make_provider())

    assert generation.calls == (Purpose.UPDATE, Purpose.REPAIR)
    assert generation.mode == "update"
    repair_text = fake.requests[1].user_text
    assert "<validation_errors>" in repair_text
    assert "'sections' is a required property" in repair_text
    assert "I changed a few things" in repair_text
    assert_previous_survives(generation.document)


async def test_failed_repair_falls_back_to_guarded_creation(
    fake: FakeAnthropic, make_provider: Factory
):
    fake.enqueue(
        text_only("Sorry."),
        tool_use({"sections": "not even close"}),
        tool_use(creation_input(), name="create_working_memory"),
    )

    generation, _ = await run(make_provider())

    assert generation.calls == (Purpose.UPDATE, Purpose.REPAIR, Purpose.CREATE)
    assert generation.mode == "create"
    create_request = fake.requests[2]
    assert create_request.tool_choice is not None
    assert create_request.tool_choice["name"] == "create_working_memory"
    assert "<previous_working_memory>" in create_request.user_text
    assert "## Open Issues" in create_request.user_text
    sections = parse_document(generation.document)
    assert sections["Current State"] == "Rewritten from scratch; the import works."
    assert "ledgerline/db.py" in sections["Files & Context"]
    # The rewrite dropped old paths, errors and issues; the guards put them back.
    assert_previous_survives(generation.document)
    assert {d.guard for d in generation.decisions} >= {Guard.FILES, Guard.OPEN_ISSUES}
    assert generation.usage.llm_calls == 3


async def test_everything_failing_raises_a_retryable_failure(
    fake: FakeAnthropic, make_provider: Factory
):
    fake.enqueue(
        text_only("No."),
        text_only("Still no."),
        text_only("I'd rather not write a memory today."),
    )
    previous = PREVIOUS_WM

    with pytest.raises(GenerationFailed) as caught:
        await run(make_provider(), previous)

    assert caught.value.retryable is True
    assert "creation output unusable" in caught.value.reason
    assert caught.value.usage.llm_calls == 3
    assert len(fake.requests) == 3
    assert previous == PREVIOUS_WM  # the caller still holds the untouched previous document


async def test_first_working_memory_is_created(fake: FakeAnthropic, make_provider: Factory):
    fake.enqueue(tool_use(creation_input(), name="create_working_memory"))

    generation, events = await run(make_provider(), previous=None)

    assert generation.mode == "create"
    assert generation.decisions == () and generation.ops is None
    assert generation.calls == (Purpose.CREATE,)
    assert is_working_memory(generation.document)
    assert parse_document(generation.document) == creation_input()
    assert "<previous_working_memory>" not in fake.requests[0].user_text
    assert [type(e) for e in events] == [LlmCallStarted, LlmCallFinished]


async def test_legacy_document_is_recreated_with_it_as_context(
    fake: FakeAnthropic, make_provider: Factory
):
    legacy = "# Session Summary\n\n**Overview**: 12 turns about the DKB importer"
    fake.enqueue(tool_use(creation_input(), name="create_working_memory"))

    generation, _ = await run(make_provider(), previous=legacy)

    assert generation.mode == "create"
    assert "**Overview**: 12 turns about the DKB importer" in fake.requests[0].user_text
    assert parse_document(generation.document)["Current State"].startswith("Rewritten")


async def test_creation_as_markdown_text_is_normalized(fake: FakeAnthropic, make_provider: Factory):
    text = (
        "Here is the memory.\n\n# Working Memory\n\n### Session Title\nImporter fixes\n\n"
        "### open issues\n- balance check\n"
    )
    fake.enqueue(text_only(text))

    generation, _ = await run(make_provider(), previous=None)

    sections = parse_document(generation.document)
    assert sections["Session Title"] == "Importer fixes"
    assert sections["Open Issues"] == "- balance check"
    assert generation.document.startswith("# Working Memory\n\n## Session Title\n")


async def test_unrecognizable_creation_fails_instead_of_storing_a_placeholder(
    fake: FakeAnthropic, make_provider: Factory
):
    fake.enqueue(tool_use({"summary": "12 turns"}, name="create_working_memory"))

    with pytest.raises(GenerationFailed) as caught:
        await run(make_provider(), previous=None)

    assert caught.value.retryable is True


@pytest.mark.parametrize(
    "failure",
    [
        error(429, retry_after=0.01),
        error(500, headers={"retry-after-ms": "5"}),
        error(529, headers={"retry-after-ms": "5"}),
        slow(tool_use(valid_update_input()), 3.0),
    ],
    ids=["429", "500", "529", "timeout"],
)
async def test_provider_errors_propagate_with_an_error_event(
    fake: FakeAnthropic, make_provider: Factory, failure: Reply
):
    fake.set_default(failure)
    events: list[ChainEvent] = []

    async def sink(event: ChainEvent) -> None:
        events.append(event)

    with pytest.raises(LlmError) as caught:
        await generate_working_memory(
            make_provider(max_retries=1, timeout=0.3),
            previous_document=PREVIOUS_WM,
            messages=short_messages(),
            on_event=sink,
        )

    assert caught.value.retryable is True
    assert len(fake.requests) == 2  # the SDK retried once before giving up
    finished = [e for e in events if isinstance(e, LlmCallFinished)]
    assert len(finished) == 1
    assert finished[0].stop_reason == "error" and finished[0].error == str(caught.value)
    assert not [e for e in events if isinstance(e, OpsParsed)]


async def test_rate_limit_during_repair_propagates(fake: FakeAnthropic, make_provider: Factory):
    fake.enqueue(text_only("no tool"), error(429, retry_after=0.01), error(429, retry_after=0.01))

    with pytest.raises(LlmError) as caught:
        await run(make_provider(max_retries=1))

    assert caught.value.retryable is True
    assert len(fake.requests) == 3


async def test_no_messages_keeps_the_document(fake: FakeAnthropic, make_provider: Factory):
    generation = await generate_working_memory(
        make_provider(), previous_document=PREVIOUS_WM, messages=[]
    )

    assert parse_document(generation.document) == PREVIOUS_SECTIONS
    assert generation.calls == ()
    assert fake.requests == []


async def test_no_messages_and_no_document_is_not_retryable(make_provider: Factory):
    with pytest.raises(GenerationFailed) as caught:
        await generate_working_memory(make_provider(), previous_document=None, messages=[])

    assert caught.value.retryable is False


async def test_raw_string_arguments_are_read(fake: FakeAnthropic, make_provider: Factory):
    # Some gateways hand back the arguments as a JSON string instead of an object.
    fake.enqueue(tool_use(json.dumps(valid_update_input())))

    generation, _ = await run(make_provider())

    assert generation.calls == (Purpose.UPDATE,)
    assert parse_document(generation.document)["Current State"].startswith("Duplicates")
