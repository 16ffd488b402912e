"""Reference behaviours we keep: one test per behaviour of reference-wm-v2.md section 10.

Each test name carries the behaviour's number in that list (``test_ref_NN_...``). Behaviours
we deliberately changed are tested in ``test_wmcore_differences.py`` instead; where we keep the
observable outcome but reach it differently, the test is here and the difference is there.

Not in this file because they are not the engine's: 49-54 and 66-68 (pending-token accounting
and session clamps, the server's session issue) and 74-81 (rendering archived messages into the
prompt, the LLM provider's issue).
"""

from __future__ import annotations

import pytest
from wmcore_helpers import (
    ERRORS,
    FACTS,
    FILES,
    GOALS,
    ISSUES,
    RICH_FACTS,
    STATE,
    TITLE,
    append,
    apply,
    body,
    bullets,
    decision_bullets,
    decisions_for,
    items,
    keep_all,
    update,
    wm,
)

from wm_core import (
    SECTIONS,
    Guard,
    SectionOp,
    is_working_memory,
    merge,
    parse_document,
    parse_tool_arguments,
    section_reminders,
)
from wm_core._document.items import bullet_items
from wm_core._document.paths import references
from wm_core._guards.key_facts import lexical_anchors
from wm_core._ops.section_ops import OpKind


class TestReferenceParsing:
    def test_ref_01_sections_map_to_their_bodies(self) -> None:
        parsed = parse_document(wm(title="My Session", state="Idle"))
        assert parsed[TITLE] == "My Session"
        assert parsed[STATE] == "Idle"
        assert parsed.get(GOALS, "") == ""

    @pytest.mark.parametrize("text", ["", None])
    def test_ref_02_empty_input_parses_to_nothing(self, text: str | None) -> None:
        assert parse_document(text) == {}

    def test_ref_03_key_facts_body_is_preserved(self) -> None:
        parsed = parse_document(wm(facts="- item 1\n- item 2\n- item 3"))
        assert "item 1" in parsed[FACTS]
        assert "item 3" in parsed[FACTS]


class TestReferenceBulletItems:
    def test_ref_04_dash_bullets(self) -> None:
        assert bullet_items("- foo\n- bar\n- baz") == ["foo", "bar", "baz"]

    def test_ref_05_numbered_items(self) -> None:
        assert bullet_items("1. first\n2. second\n3) third") == ["first", "second", "third"]

    def test_ref_06_plain_lines_are_items(self) -> None:
        assert bullet_items("plain line one\nplain line two") == [
            "plain line one",
            "plain line two",
        ]

    def test_ref_07_headings_and_blank_lines_are_skipped(self) -> None:
        assert bullet_items("# heading\n\n- real") == ["real"]

    @pytest.mark.parametrize("text", ["", None])
    def test_ref_08_empty_text_has_no_items(self, text: str | None) -> None:
        assert bullet_items(text) == []


class TestReferenceAppendOnlyGuard:
    def test_ref_09_keep_keeps(self) -> None:
        result = apply(ERRORS, "- old fact", SectionOp.keep())
        assert body(result.document, ERRORS) == "- old fact"
        assert result.decisions == ()

    def test_ref_10_append_passes_unchanged(self) -> None:
        result = apply(ERRORS, "- old fact", {"op": "APPEND", "items": ["new item"]})
        assert items(result.document, ERRORS) == ["old fact", "new item"]
        assert result.decisions == ()

    def test_ref_11_update_becomes_append_of_the_new_items(self) -> None:
        result = apply(ERRORS, "- existing fact", update("- existing fact\n- brand new fact"))
        assert items(result.document, ERRORS) == ["existing fact", "brand new fact"]
        (decision,) = decisions_for(result, ERRORS)
        assert (decision.requested, decision.applied) == ("UPDATE", "APPEND")

    def test_ref_12_update_with_nothing_new_is_keep(self) -> None:
        old = "- fact alpha\n- fact beta"
        result = apply(ERRORS, old, update("- fact alpha\n- fact beta"))
        assert body(result.document, ERRORS) == old
        (decision,) = decisions_for(result, ERRORS)
        assert decision.applied == "KEEP"

    def test_ref_13_missing_op_keeps(self) -> None:
        result = merge(wm(errors="old"), {ERRORS: None})
        assert body(result.document, ERRORS) == "old"

    def test_ref_14_unknown_op_keeps(self) -> None:
        result = apply(ERRORS, "- old", {"op": "DELETE"})
        assert body(result.document, ERRORS) == "- old"
        (decision,) = decisions_for(result, ERRORS)
        assert (decision.requested, decision.applied) == ("DELETE", "KEEP")


class TestReferenceFilesGuard:
    def test_ref_15_keep_keeps(self) -> None:
        result = apply(FILES, "- src/main.py", SectionOp.keep())
        assert body(result.document, FILES) == "- src/main.py"

    def test_ref_16_update_keeping_every_path_is_accepted(self) -> None:
        new = (
            "- src/main.py - entry point (refactored)\n- config.yaml - settings\n- new.ts - client"
        )
        result = apply(FILES, "- src/main.py\n- config.yaml", update(new))
        assert body(result.document, FILES) == new
        assert decisions_for(result, FILES) == []

    def test_ref_19_append_passes_unchanged(self) -> None:
        result = apply(FILES, "- src/main.py", append("new_dir/new_file.rs"))
        assert items(result.document, FILES) == ["src/main.py", "new_dir/new_file.rs"]

    def test_ref_20_missing_op_keeps(self) -> None:
        result = merge(wm(files="- src/main.py"), {FILES: None})
        assert body(result.document, FILES) == "- src/main.py"


class TestReferenceTitleGuard:
    def test_ref_21_keep_keeps(self) -> None:
        result = apply(TITLE, "old title", SectionOp.keep())
        assert body(result.document, TITLE) == "old title"

    def test_ref_22_shared_word_is_accepted(self) -> None:
        result = apply(TITLE, "Debug Session Setup", update("Debug Session Refinement"))
        assert body(result.document, TITLE) == "Debug Session Refinement"

    def test_ref_23_drift_is_rejected(self) -> None:
        result = apply(TITLE, "Database Migration Plan", update("Completely Different Topic"))
        assert body(result.document, TITLE) == "Database Migration Plan"
        (decision,) = decisions_for(result, TITLE)
        assert decision.guard is Guard.TITLE

    def test_ref_24_empty_old_title_accepts_anything(self) -> None:
        result = merge(wm(), {TITLE: update("Brand New Title")})
        assert body(result.document, TITLE) == "Brand New Title"

    def test_ref_25_title_without_meaningful_words_accepts_anything(self) -> None:
        result = apply(TITLE, "A Session Title", update("The Plan for Notes"))
        assert body(result.document, TITLE) == "The Plan for Notes"

    def test_ref_26_unrelated_title_is_rejected(self) -> None:
        result = apply(TITLE, "Python Migration Tools", update("React Components"))
        assert body(result.document, TITLE) == "Python Migration Tools"


class TestReferenceOpenIssuesGuard:
    OLD = "- bug in auth module\n- slow query on /api/users"

    def test_ref_27_update_keeping_every_item_is_accepted(self) -> None:
        new = "- bug in auth module (investigating)\n- slow query on /api/users\n- new: memory leak"
        result = apply(ISSUES, self.OLD, update(new))
        assert body(result.document, ISSUES) == new
        assert "silently dropped" not in result.document

    def test_ref_28_dropped_item_is_restored(self) -> None:
        result = apply(ISSUES, self.OLD, update("- slow query on /api/users"))
        content = body(result.document, ISSUES)
        assert "silently dropped, restored" in content
        assert "bug in auth" in content

    def test_ref_29_keep_keeps(self) -> None:
        result = apply(ISSUES, self.OLD, SectionOp.keep())
        assert body(result.document, ISSUES) == self.OLD

    def test_ref_32_never_restored_item_is_restored(self) -> None:
        result = apply(ISSUES, "- never-restored issue\n- kept issue", update("- kept issue"))
        content = body(result.document, ISSUES)
        assert "[silently dropped, restored] never-restored issue" in content


class TestReferenceMerge:
    def test_ref_33_keep_all_keeps_everything(self) -> None:
        document = merge(wm(title="Title", state="Working"), keep_all()).document
        assert "## Session Title" in document
        assert "Title" in document
        assert "Working" in document

    def test_ref_34_update_replaces_a_volatile_section(self) -> None:
        ops = keep_all(state={"op": "UPDATE", "content": "Active debugging"})
        document = merge(wm(state="Idle"), ops).document
        assert "Active debugging" in document
        assert "Idle" not in document

    def test_ref_35_append_adds_items(self) -> None:
        ops = keep_all(issues={"op": "APPEND", "items": ["new issue found"]})
        document = merge(wm(issues="- existing issue"), ops).document
        assert "existing issue" in document
        assert "new issue found" in document

    def test_ref_36_no_ops_keeps(self) -> None:
        assert "Original Title" in merge(wm(title="Original Title"), {}).document

    def test_ref_37_key_facts_update_without_anchors_is_accepted(self) -> None:
        ops = keep_all(facts={"op": "UPDATE", "content": "- fact A\n- fact C"})
        document = merge(wm(facts="- fact A\n- fact B"), ops).document
        assert "fact A" in document
        assert "fact C" in document
        assert "fact B" not in document

    def test_ref_38_title_drift_is_rejected_in_merge(self) -> None:
        ops = keep_all(title={"op": "UPDATE", "content": "Completely Unrelated Topic"})
        document = merge(wm(title="Database Migration Plan"), ops).document
        assert "Database Migration Plan" in document
        assert "Completely Unrelated Topic" not in document

    def test_ref_39_empty_document_gets_all_seven_headers(self) -> None:
        document = merge(wm(), keep_all()).document
        for name in SECTIONS:
            assert f"## {name}" in document

    def test_ref_40_ops_none_keeps_and_renders_all_headers(self) -> None:
        document = merge(wm(title="Keep Me"), None).document
        assert "Keep Me" in document
        for name in SECTIONS:
            assert f"## {name}" in document


class TestReferenceRecovery:
    def test_ref_41_keep_fragments_are_recovered(self) -> None:
        parsed = parse_tool_arguments(
            '"Session Title": {"op": "KEEP"}, "Current State": {"op": "KEEP"}'
        )
        assert set(parsed.found) == {TITLE, STATE}
        assert parsed.ops[TITLE].kind == OpKind.KEEP
        assert parsed.ops[STATE].kind == OpKind.KEEP

    def test_ref_42_update_fragment_is_recovered(self) -> None:
        parsed = parse_tool_arguments(
            '"Current State": {"op": "UPDATE", "content": "Now debugging auth"}'
        )
        assert parsed.ops[STATE].kind == OpKind.UPDATE
        assert "debugging auth" in parsed.ops[STATE].content

    def test_ref_43_append_fragment_is_recovered(self) -> None:
        parsed = parse_tool_arguments(
            '"Open Issues": {"op": "APPEND", "items": ["new bug", "another issue"]}'
        )
        assert parsed.ops[ISSUES].kind == OpKind.APPEND
        assert parsed.ops[ISSUES].items == ("new bug", "another issue")

    def test_ref_44_mixed_fragments_are_recovered(self) -> None:
        raw = (
            '"Session Title": {"op": "KEEP"}, '
            '"Current State": {"op": "UPDATE", "content": "Working on tests"}, '
            '"Open Issues": {"op": "APPEND", "items": ["flaky test"]}'
        )
        parsed = parse_tool_arguments(raw)
        assert set(parsed.found) == {TITLE, STATE, ISSUES}
        assert parsed.ops[TITLE].kind == OpKind.KEEP
        assert parsed.ops[STATE].kind == OpKind.UPDATE
        assert parsed.ops[ISSUES].kind == OpKind.APPEND

    @pytest.mark.parametrize("raw", ["", None])
    def test_ref_45_empty_input_recovers_nothing(self, raw: str | None) -> None:
        parsed = parse_tool_arguments(raw)
        assert parsed.found == ()
        assert not parsed.usable

    def test_ref_46_keep_followed_by_garbage(self) -> None:
        parsed = parse_tool_arguments('"Session Title": {"op": "KEEP"} and then %%% garbage ###')
        assert TITLE in parsed.found

    def test_ref_47_unclosed_update_does_not_block_other_sections(self) -> None:
        raw = '"Session Title": {"op": "KEEP"}, "Current State": {"op": "UPDATE", "content": "never clo'
        parsed = parse_tool_arguments(raw)
        assert TITLE in parsed.found
        assert parsed.ops[STATE].kind != OpKind.UPDATE

    def test_ref_48_escaped_content_is_decoded(self) -> None:
        raw = r'"Current State": {"op": "UPDATE", "content": "line1\nline2 with \"quotes\""}'
        parsed = parse_tool_arguments(raw)
        assert parsed.ops[STATE].kind == OpKind.UPDATE
        assert parsed.ops[STATE].content.startswith("line1\nline2")


class TestReferenceWorkingMemoryDetection:
    def test_ref_55_canonical_document_is_a_working_memory(self) -> None:
        assert is_working_memory(wm(title="A title"))

    def test_ref_56_legacy_summary_is_not(self) -> None:
        assert not is_working_memory("Session overview: this is a legacy format with no sections")

    @pytest.mark.parametrize("text", ["", None])
    def test_ref_57_empty_is_not(self, text: str | None) -> None:
        assert not is_working_memory(text)

    def test_ref_58_two_headers_are_enough(self) -> None:
        assert is_working_memory("## Session Title\nx\n## Current State\ny")

    def test_ref_59_level_three_heading_counts(self) -> None:
        assert is_working_memory("### Session Title\nSome title")

    def test_ref_60_plain_sentence_is_not(self) -> None:
        assert not is_working_memory("We talked about the weather and nothing else.")


class TestReferencePathDetection:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("src/main.py", "src/main.py"),  # 61
            ("components/App.tsx", "components/App.tsx"),  # 62
            ("openviking/session/session", "openviking/session/session"),  # 63
            ("config.yaml", "config.yaml"),  # 64
        ],
    )
    def test_ref_61_to_64_paths_are_found(self, text: str, expected: str) -> None:
        assert expected in references(f"see {text} for details")

    def test_ref_65_a_plain_word_is_not_a_path(self) -> None:
        assert references("hello") == set()


class TestReferenceNonStringItems:
    def test_ref_69_non_string_items_are_dropped(self) -> None:
        ops = keep_all(issues={"op": "APPEND", "items": ["valid item", 42, None, {"bad": True}]})
        document = merge(wm(issues="- Existing issue"), ops).document
        assert "valid item" in document
        assert "Existing issue" in document
        assert "42" not in document

    def test_ref_70_empty_items_keep(self) -> None:
        ops = keep_all(issues={"op": "APPEND", "items": []})
        document = merge(wm(issues="- Existing issue"), ops).document
        assert body(document, ISSUES) == "- Existing issue"


class TestReferenceMergeEdgeCases:
    def test_ref_71_empty_ops_preserve_everything(self) -> None:
        document = merge(wm(title="Original Title", state="Running"), {}).document
        assert "Original Title" in document
        assert "Running" in document

    def test_ref_72_unknown_op_preserves(self) -> None:
        ops = keep_all(state={"op": "UNKNOWN_OP"})
        assert "Running" in merge(wm(state="Running"), ops).document

    def test_ref_73_updates_into_empty_sections_skip_guards(self) -> None:
        ops = {
            TITLE: {"op": "UPDATE", "content": "Old Title (updated)"},
            STATE: {"op": "UPDATE", "content": "New State"},
            GOALS: {"op": "UPDATE", "content": "New Goals"},
            FACTS: {"op": "UPDATE", "content": "- New fact"},
            FILES: {"op": "UPDATE", "content": "- new/file.py"},
            ERRORS: {"op": "KEEP"},
            ISSUES: {"op": "UPDATE", "content": "- New issue"},
        }
        document = merge(wm(title="Old Title", state="Old State"), ops).document
        assert "New State" in document
        assert "New Goals" in document
        assert "- New fact" in document
        assert "- new/file.py" in document


def _rich_facts() -> str:
    assert len(RICH_FACTS) == 41
    return "\n".join(f"- {fact}" for fact in RICH_FACTS)


def _consolidate(facts: list[str], groups: int) -> str:
    """Merge facts into ``groups`` topic bullets, keeping every detail (names, dates, values)."""
    return "\n".join(
        "- " + "; ".join(fact.rstrip(".") for fact in facts[i::groups]) + "." for i in range(groups)
    )


class TestReferenceGrowth:
    def test_ref_82_key_facts_grow_one_fact_per_round(self) -> None:
        document = wm(facts="- Decision 0: keep the current WM shape.")
        for i in range(1, 51):
            fact = f"Decision {i}: keep module_{i}.py because contract {i} is stable."
            document = merge(document, keep_all(facts=append(fact))).document
        facts = items(document, FACTS)
        assert len(facts) == 51
        assert facts[0] == "Decision 0: keep the current WM shape."
        assert facts[-1] == "Decision 50: keep module_50.py because contract 50 is stable."

    def test_ref_83_errors_are_never_throttled(self) -> None:
        document = wm(errors="- Round 0: first mistake.")
        for i in range(1, 41):
            document = merge(document, keep_all(errors=append(f"Round {i}: mistake {i}."))).document
        errors = items(document, ERRORS)
        assert len(errors) == 41
        assert (errors[0], errors[-1]) == ("Round 0: first mistake.", "Round 40: mistake 40.")

    def test_ref_84_files_are_never_throttled(self) -> None:
        document = wm(files="- src/file_0.py - initial reference.")
        for i in range(1, 31):
            op = append(f"src/file_{i}.py - reference {i}.")
            document = merge(document, keep_all(files=op)).document
        files = items(document, FILES)
        assert len(files) == 31
        assert (files[0], files[-1]) == (
            "src/file_0.py - initial reference.",
            "src/file_30.py - reference 30.",
        )

    def test_ref_86_consolidation_keeping_most_anchors_is_accepted(self) -> None:
        consolidated = _consolidate(RICH_FACTS[:39], 11)
        result = merge(wm(facts=_rich_facts()), keep_all(facts=update(consolidated)))
        facts = items(result.document, FACTS)
        assert len(facts) <= 15
        content = body(result.document, FACTS)
        for name in (
            "Caroline",
            "Melanie",
            "Marcus",
            "Biscuit",
            "Yellowstone",
            "Sweden",
            "Portland",
        ):
            assert name in content
        assert decisions_for(result, FACTS) == []

    def test_ref_88_ten_bullet_consolidation_keeping_anchors_is_accepted(self) -> None:
        consolidated = _consolidate(RICH_FACTS, 10)
        document = merge(wm(facts=_rich_facts()), keep_all(facts=update(consolidated))).document
        assert len(items(document, FACTS)) == 10
        content = body(document, FACTS)
        for needle in ("Caroline", "Melanie", "Marcus", "Biscuit", "Jake"):
            assert needle in content
        for needle in ("15 March 2024", "2024-01-20", "December 2025"):
            assert needle in content

    def test_ref_89_anchors_include_mixed_case_names(self) -> None:
        anchors = lexical_anchors("OpenAI met McCloud on 2024-03-01 to discuss JavaScript.")
        assert {"openai", "mccloud", "javascript"} <= anchors

    def test_ref_90_anchors_include_people_and_places(self) -> None:
        anchors = lexical_anchors("Caroline traveled to Sweden and visited Portland.")
        assert {"caroline", "sweden", "portland"} <= anchors

    def test_ref_91_anchor_stopwords_are_excluded(self) -> None:
        anchors = lexical_anchors("The And Other Some These Those")
        assert not {"the", "other", "some"} & anchors


class TestReferenceReminders:
    def test_ref_93_oversized_key_facts_get_a_warning(self) -> None:
        facts = "\n".join(f"- Fact {i}: something important about item {i}." for i in range(34))
        reminder = section_reminders(wm(facts=facts))
        assert "<section_size_warnings>" in reminder
        assert "Key Facts" in reminder
        assert "34 bullets" in reminder
        assert "MUST be consolidated" in reminder

    def test_ref_94_errors_never_get_a_warning(self) -> None:
        errors = "\n".join(f"- Error {i}: something went wrong in step {i}." for i in range(39))
        reminder = section_reminders(wm(title="t", errors=errors))
        assert "Errors" not in reminder
        assert reminder == ""

    def test_ref_95_small_sections_get_no_warning(self) -> None:
        assert section_reminders(wm(facts=bullets("Fact", 9))) == ""

    def test_ref_96_warning_block_format(self) -> None:
        facts = "\n".join(
            f"- Caroline met Person{i} in Lisbon on 2024-02-{i % 28 + 1:02d}." for i in range(34)
        )
        reminder = section_reminders(wm(facts=facts))
        assert reminder.startswith("<section_size_warnings>")
        assert reminder.endswith("</section_size_warnings>")
        for needle in (
            "Key Facts & Decisions",
            "34 bullets",
            "MUST be consolidated",
            "<=25 bullets",
            "<=1500 tokens",
        ):
            assert needle in reminder


class TestReferenceAntiBloat:
    def test_ref_98_small_key_facts_accept_every_append(self) -> None:
        op = append("New fact A", "New fact B")
        document = merge(wm(facts=bullets("Fact", 10)), keep_all(facts=op)).document
        facts = items(document, FACTS)
        assert len(facts) == 12
        assert {"New fact A", "New fact B"} <= set(facts)

    def test_ref_99_oversized_key_facts_accept_at_most_five(self) -> None:
        op = append(*(f"New fact {i}" for i in range(10)))
        document = merge(wm(facts=bullets("Fact", 30)), keep_all(facts=op)).document
        assert len(items(document, FACTS)) == 35

    def test_ref_100_duplicates_are_not_appended_again(self) -> None:
        op = append("Fact 0", "Fact 1", "Brand new insight")
        document = merge(wm(facts=bullets("Fact", 30)), keep_all(facts=op)).document
        facts = items(document, FACTS)
        assert "Brand new insight" in facts
        assert facts.count("Fact 0") == 1

    def test_ref_101_emergency_appends_one_sentinel_then_nothing(self) -> None:
        document = wm(facts=bullets("Fact", 55))
        document = merge(document, keep_all(facts=append("Emergency fact A"))).document
        facts = items(document, FACTS)
        assert len(facts) == 56
        assert sum("CONSOLIDATION REQUIRED" in fact for fact in facts) == 1
        assert "Emergency fact A" not in document
        document = merge(document, keep_all(facts=append("Emergency fact B"))).document
        assert len(items(document, FACTS)) == 56
        assert "Emergency fact B" not in document

    def test_ref_102_emergency_rejected_update_salvages_nothing(self) -> None:
        facts = "\n".join(
            f"- Person_{i} decided thing_{i} on 2024-01-{i % 28 + 1:02d}." for i in range(55)
        )
        document = merge(wm(facts=facts), keep_all(facts=update("- Only one bullet."))).document
        assert len(items(document, FACTS)) == 55
        assert "Only one bullet" not in document

    def test_ref_103_non_string_items_in_throttled_append_do_not_crash(self) -> None:
        op = {"op": "APPEND", "items": [123, None, "Valid new fact", True]}
        document = merge(wm(facts=bullets("Fact", 30)), keep_all(facts=op)).document
        assert "Valid new fact" in items(document, FACTS)


class TestReferenceGuardrails:
    BASE_FILES = "- openviking/session/session.py - WM merge logic."

    def test_ref_104_reminder_for_key_facts_but_not_for_image_urls(self) -> None:
        files = "\n".join(
            f"- https://example.com/images/photo_{i}.png - image {i}" for i in range(22)
        )
        reminder = section_reminders(
            wm(title="Working Memory v2 Guardrails", facts=decision_bullets(41), files=files)
        )
        assert "<section_size_warnings>" in reminder
        assert '"Key Facts & Decisions" has 41 bullets' in reminder
        assert "consolidated via UPDATE" in reminder
        assert "Files & Context" not in reminder

    def test_ref_107_update_dropping_an_image_url_keeps_both_lines(self) -> None:
        url_line = "- https://example.com/images/unused.png - raw parser image URL."
        old = f"{self.BASE_FILES}\n{url_line}"
        document = merge(wm(files=old), keep_all(files=update(self.BASE_FILES))).document
        content = body(document, FILES)
        assert self.BASE_FILES in content
        assert url_line in content
