"""Deliberate differences from the reference, one test each (DESIGN.md section 2, spec section 11).

Every test states what the reference does and asserts what we do instead.
"""

from __future__ import annotations

import json

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
    CreationRejected,
    Guard,
    SectionOp,
    is_working_memory,
    merge,
    normalize_creation,
    parse_document,
    parse_document_detailed,
    parse_tool_arguments,
    render_document,
    section_reminders,
)
from wm_core._document.items import fresh_items
from wm_core._document.paths import references
from wm_core._guards.key_facts import SENTINEL, new_details
from wm_core._guards.open_issues import RESTORE_MARKER
from wm_core._guards.title import title_tokens
from wm_core._ops.section_ops import OpKind


class TestDifferenceHeadings:
    def test_ours_any_heading_level_and_case_is_a_section(self) -> None:
        # Reference: only "## " lines open sections; "### Session Title" parses as nothing and a
        # KEEP-all merge of such a document is empty.
        legacy = "### session title\nMigration\n\n#### CURRENT STATE:\nRunning\n\n# 5. Files and Context\n- a.py"
        parsed = parse_document(legacy)
        assert parsed == {TITLE: "Migration", STATE: "Running", FILES: "- a.py"}
        document = merge(legacy, keep_all()).document
        assert body(document, TITLE) == "Migration"
        assert body(document, FILES) == "- a.py"

    def test_ours_update_with_a_section_heading_cannot_split_the_document(self) -> None:
        # Reference: "## Open Issues" inside Current State's content becomes a real section on
        # the next read and the tail of Current State is lost.
        content = "Debugging the parser.\n## Open Issues\n- hijacked item\n## Notes\nmore state"
        result = merge(wm(state="old", issues="- real issue"), keep_all(state=update(content)))
        parsed = parse_document_detailed(result.document)
        assert parsed.extras == ()
        assert parsed.bodies[ISSUES] == "- real issue"
        state = parsed.bodies[STATE]
        assert "hijacked item" in state
        assert "more state" in state
        assert "**Open Issues**" in state
        assert "### Notes" in state
        (decision,) = decisions_for(result, STATE)
        assert decision.guard is Guard.STRUCTURE

    def test_ours_topic_groups_inside_key_facts_stay_in_key_facts(self) -> None:
        content = "## Backend\n- uses Postgres\n## Frontend\n- uses React"
        result = merge(wm(), keep_all(facts=update(content)))
        facts = body(result.document, FACTS)
        assert facts == "### Backend\n- uses Postgres\n### Frontend\n- uses React"
        assert parse_document(result.document)[FACTS] == facts

    def test_ours_update_repeating_its_own_heading_loses_only_the_heading(self) -> None:
        result = merge(wm(state="old"), keep_all(state=update("## Current State\nNow testing")))
        assert body(result.document, STATE) == "Now testing"
        (decision,) = decisions_for(result, STATE)
        assert decision.items_dropped == ("## Current State",)

    def test_ours_duplicate_sections_are_joined_not_overwritten(self) -> None:
        # Reference: the later duplicate overwrites the earlier one.
        text = "## Open Issues\n- first\n## Current State\nx\n## Open Issues\n- second"
        assert parse_document(text)[ISSUES] == "- first\n- second"
        result = merge(text, keep_all())
        assert items(result.document, ISSUES) == ["first", "second"]
        assert any(d.guard is Guard.STRUCTURE and d.section == ISSUES for d in result.decisions)

    def test_ours_foreign_sections_and_preamble_are_reported_when_dropped(self) -> None:
        # Reference: dropped silently at merge.
        text = "Here is the memory:\n# Working Memory\n## Session Title\nT\n## Scratchpad\n- idea 1"
        result = merge(text, keep_all())
        dropped = {d.section: d.items_dropped for d in result.decisions}
        assert dropped["Scratchpad"] == ("- idea 1",)
        assert dropped["(preamble)"] == ("Here is the memory:",)
        assert body(result.document, TITLE) == "T"

    def test_ours_a_mere_mention_is_not_a_working_memory(self) -> None:
        # Reference: a substring test, so this counts as v2 and then parses as empty.
        assert not is_working_memory("We discussed the ## Session Title format yesterday.")


class TestDifferenceEmptyUpdate:
    @pytest.mark.parametrize("section", list(SECTIONS))
    @pytest.mark.parametrize(
        "op",
        [{"op": "UPDATE"}, {"op": "UPDATE", "content": ""}, {"op": "UPDATE", "content": "  \n "}],
    )
    def test_ours_empty_update_is_keep_in_every_section(self, section: str, op: object) -> None:
        # Reference: the section is emptied (Current State, Task & Goals, path-less Files).
        result = merge(render_document(dict.fromkeys(SECTIONS, "- keep me")), {section: op})
        assert body(result.document, section) == "- keep me"
        (decision,) = decisions_for(result, section)
        assert (decision.guard, decision.applied) == (Guard.EMPTY_UPDATE, "KEEP")

    def test_ours_non_string_content_is_keep(self) -> None:
        result = apply(GOALS, "Ship v1", {"op": "UPDATE", "content": ["a", "b"]})
        assert body(result.document, GOALS) == "Ship v1"
        (decision,) = decisions_for(result, GOALS)
        assert decision.items_dropped == ("['a', 'b']",)


class TestDifferenceWholeItemDeduplication:
    def test_ours_fact_1_is_not_a_duplicate_of_fact_10(self) -> None:
        # Reference: "fact 1" is a substring of "fact 10", so the new fact is dropped.
        old = bullets("Fact", 30, start=10)
        result = merge(wm(facts=old), keep_all(facts=append("Fact 1")))
        assert "Fact 1" in items(result.document, FACTS)

    def test_ours_errors_demotion_keeps_a_word_contained_in_an_old_item(self) -> None:
        # Reference: "Python" is a substring of "uses Python", so it is never appended.
        result = apply(ERRORS, "- tried uses Python 2", update("- tried uses Python 2\n- Python"))
        assert items(result.document, ERRORS) == ["tried uses Python 2", "Python"]

    def test_ours_formatting_variants_are_duplicates(self) -> None:
        # Reference: "**Fixed** `bug`" is not a substring of "fixed bug", so it is appended.
        fresh, duplicates = fresh_items(["**Fixed** `bug`.", "  fixed   BUG "], "- Fixed bug")
        assert fresh == []
        assert duplicates == ["**Fixed** `bug`.", "  fixed   BUG "]

    def test_ours_snake_case_underscores_are_kept_in_the_key(self) -> None:
        fresh, _ = fresh_items(["uses my_module"], "- uses mymodule")
        assert fresh == ["uses my_module"]

    def test_ours_plain_append_does_not_repeat_an_existing_item(self) -> None:
        # Reference: no de-duplication on a normal APPEND.
        result = apply(ISSUES, "- flaky test", append("Flaky test", "new issue"))
        assert items(result.document, ISSUES) == ["flaky test", "new issue"]
        (decision,) = decisions_for(result, ISSUES)
        assert (decision.guard, decision.items_dropped) == (Guard.DEDUP, ("Flaky test",))


class TestDifferencePaths:
    def test_ours_extension_has_a_word_boundary(self) -> None:
        # Reference: "App.tsx" also yields "App.ts" and "a.json" yields "a.js".
        assert references("App.tsx and a.json") == {"App.tsx", "a.json"}

    def test_ours_dropping_a_json_while_keeping_a_js_is_detected(self) -> None:
        result = apply(FILES, "- a.js - script\n- a.json - data", update("- a.js - script"))
        assert "- a.json - data" in body(result.document, FILES)

    def test_ours_broader_extension_list(self) -> None:
        # Reference: java, css, sql... only match when slash-separated.
        assert references("Main.java style.css schema.sql Makefile.mk") == {
            "Main.java",
            "style.css",
            "schema.sql",
            "Makefile.mk",
        }

    def test_ours_backup_file_is_not_the_original(self) -> None:
        assert references("a.py.bak") == {"a.py.bak"}  # a file of its own, never "a.py"

    def test_ours_dot_slash_prefix_is_the_same_file(self) -> None:
        # Reference: "./src/main.py" and "src/main.py" differ, so this UPDATE is rejected.
        result = apply(FILES, "- ./src/main.py", update("- src/main.py - entry point"))
        assert body(result.document, FILES) == "- src/main.py - entry point"
        assert decisions_for(result, FILES) == []

    def test_ours_urls_are_one_reference(self) -> None:
        # Reference: the URL yields "com/images/unused" and similar fragments.
        assert references("see https://example.com/images/unused.png, please") == {
            "https://example.com/images/unused.png"
        }


class TestDifferenceFilesUpdate:
    OLD = "src/main.py, src/utils.ts, config.yaml"

    def test_ours_17_update_dropping_a_path_keeps_new_text_and_reappends_the_line(self) -> None:
        # Reference behaviour 17: KEEP (the new text is lost).
        result = apply(FILES, self.OLD, update("src/main.py (entry), config.yaml (settings)"))
        assert body(result.document, FILES) == (
            "src/main.py (entry), config.yaml (settings)\n" + self.OLD
        )
        (decision,) = decisions_for(result, FILES)
        assert decision.items_restored == (self.OLD,)
        assert "src/utils.ts" in decision.reason

    def test_ours_18_new_paths_and_annotations_survive_with_the_old_line(self) -> None:
        # Reference behaviour 18: APPEND ["brand_new/file.go"]: the rest of the UPDATE is lost.
        result = apply(
            FILES, "src/main.py, src/utils.ts", update("src/main.py (done), brand_new/file.go")
        )
        content = body(result.document, FILES)
        assert content.startswith("src/main.py (done), brand_new/file.go")
        assert "src/utils.ts" in content

    def test_ours_annotations_of_existing_entries_survive(self) -> None:
        old = "- src/a.py - parser\n- src/b.py - lexer"
        result = apply(FILES, old, update("- src/a.py - parser (DONE)"))
        assert body(result.document, FILES) == "- src/a.py - parser (DONE)\n- src/b.py - lexer"

    def test_ours_107_a_dropped_url_is_restored_as_a_url(self) -> None:
        url_line = "- https://example.com/images/unused.png - raw parser image URL."
        result = apply(FILES, f"- a.py - logic\n{url_line}", update("- a.py - logic"))
        (decision,) = decisions_for(result, FILES)
        assert decision.items_restored == (url_line,)
        assert "https://example.com/images/unused.png" in decision.reason


class TestDifferenceTitleTokens:
    def test_ours_version_digits_are_not_shared_meaning(self) -> None:
        # Reference: "v2" contributes "2", so any title with a "2" passes.
        result = apply(TITLE, "Parser v2 Rewrite", update("Gardening Tips 2"))
        assert body(result.document, TITLE) == "Parser v2 Rewrite"

    def test_ours_punctuation_does_not_turn_a_stopword_into_a_word(self) -> None:
        # Reference: "Plan." is one token "plan.", not a stopword, so it can carry a drift.
        assert title_tokens("Migration Plan.") == {"migration"}

    def test_ours_two_letter_words_count(self) -> None:
        # Reference: "AI" (two letters) is ignored, so this rewrite would be rejected.
        result = apply(TITLE, "AI Tutor", update("AI Evaluation Harness"))
        assert body(result.document, TITLE) == "AI Evaluation Harness"

    def test_ours_numbers_alone_are_ignored(self) -> None:
        assert title_tokens("Release 2024 . 3.1") == {"release"}

    def test_ours_cjk_titles_are_compared_by_character_pairs(self) -> None:
        # Reference: no ASCII words, so any replacement is accepted.
        kept = apply(TITLE, "数据库迁移计划", update("数据库迁移测试"))
        assert body(kept.document, TITLE) == "数据库迁移测试"
        drift = apply(TITLE, "数据库迁移计划", update("园艺技巧分享"))
        assert body(drift.document, TITLE) == "数据库迁移计划"


class TestDifferenceDecisionRecords:
    def test_ours_title_rejection_is_recorded_with_the_refused_title(self) -> None:
        result = apply(TITLE, "Database Migration", update("Gardening"))
        (decision,) = result.decisions
        assert decision.items_dropped == ("Gardening",)

    def test_ours_layer_one_rejection_is_recorded(self) -> None:
        result = apply(FACTS, bullets("Fact", 30), update("- One summary, moved to Postgres 16"))
        (decision,) = result.decisions
        assert (decision.guard, decision.requested, decision.applied) == (
            Guard.KEY_FACTS,
            "UPDATE",
            "APPEND",
        )
        assert "bullets" in decision.reason

    def test_ours_throttle_records_the_refused_items(self) -> None:
        # Reference: facts beyond the cap of 5 vanish without a trace.
        new = [f"New fact {i}" for i in range(8)]
        result = apply(FACTS, bullets("Fact", 30), append(*new))
        (decision,) = result.decisions
        assert decision.items_refused == tuple(new[5:])
        assert items(result.document, FACTS)[-5:] == new[:5]

    def test_ours_emergency_records_every_refused_fact(self) -> None:
        # Reference: facts refused at the emergency level are lost for good.
        first = apply(FACTS, bullets("Fact", 55), append("Emergency fact A"))
        (decision,) = first.decisions
        assert decision.items_refused == ("Emergency fact A",)
        assert decision.applied == "APPEND"
        second = merge(first.document, {FACTS: append("Emergency fact B")})
        (decision,) = second.decisions
        assert (decision.applied, decision.items_refused) == ("KEEP", ("Emergency fact B",))

    def test_ours_emergency_update_rejection_records_the_salvage_it_refused(self) -> None:
        result = apply(FACTS, bullets("Fact", 55), update("- Only one bullet."))
        (decision,) = result.decisions
        assert decision.items_refused == ("Only one bullet.",)

    def test_ours_open_issues_restore_is_recorded(self) -> None:
        result = apply(ISSUES, "- a\n- b", update("- a"))
        (decision,) = result.decisions
        assert (decision.guard, decision.items_restored) == (Guard.OPEN_ISSUES, ("b",))

    def test_ours_errors_demotion_is_recorded(self) -> None:
        result = apply(ERRORS, "- e1", update("- e1\n- e2"))
        (decision,) = result.decisions
        assert (decision.guard, decision.applied) == (Guard.APPEND_ONLY, "APPEND")
        assert decision.items_dropped == ()  # a verbatim copy of the old body is not "dropped"
        rewritten = apply(ERRORS, "- e1", update("- e2\n- **E1**"))
        (decision,) = rewritten.decisions
        assert decision.items_dropped == ("**E1**",)
        assert items(rewritten.document, ERRORS) == ["e1", "e2"]

    def test_ours_unknown_section_key_is_reported(self) -> None:
        # Reference: ignored silently.
        result = merge(wm(), {"Scratchpad": {"op": "UPDATE", "content": "idea"}})
        (decision,) = result.decisions
        assert (decision.section, decision.guard, decision.items_dropped) == (
            "Scratchpad",
            Guard.OP_SHAPE,
            ("idea",),
        )

    def test_ours_non_string_items_are_reported(self) -> None:
        result = apply(ISSUES, "- x", {"op": "APPEND", "items": ["ok", 42, None]})
        (decision,) = result.decisions
        assert decision.guard is Guard.OP_SHAPE
        assert decision.items_dropped == ("42", "None")

    def test_ours_decisions_serialize_to_json(self) -> None:
        result = apply(FACTS, bullets("Fact", 55), append("x"))
        payload = json.dumps([d.to_dict() for d in result.decisions])
        assert json.loads(payload)[0]["guard"] == "key_facts"


class TestDifferenceOpShapes:
    def test_ours_103_non_string_items_are_not_stringified_when_throttled(self) -> None:
        # Reference behaviour 103: the throttled path stores "123" and "True".
        op = {"op": "APPEND", "items": [123, None, "Valid new fact", True]}
        facts = items(merge(wm(facts=bullets("Fact", 30)), keep_all(facts=op)).document, FACTS)
        assert facts[-1] == "Valid new fact"
        assert "123" not in facts
        assert "True" not in facts

    def test_ours_items_given_as_one_string_are_one_item(self) -> None:
        # Reference: a bare string is iterated character by character.
        result = apply(ISSUES, "- x", {"op": "APPEND", "items": "new issue"})
        assert items(result.document, ISSUES) == ["x", "new issue"]

    def test_ours_append_with_content_but_no_items_uses_the_content(self) -> None:
        # Reference: nothing is appended (except in the throttled Key Facts path).
        result = apply(ISSUES, "- x", {"op": "APPEND", "content": "- y\n- z"})
        assert items(result.document, ISSUES) == ["x", "y", "z"]

    def test_ours_bare_keep_string_is_accepted(self) -> None:
        result = apply(STATE, "Running", "KEEP")
        assert body(result.document, STATE) == "Running"
        assert result.decisions == ()


class TestDifferenceSentinel:
    def test_ours_sentinel_does_not_count_towards_the_anchors_to_keep(self) -> None:
        # Reference: the sentinel's capitalised words are anchors a consolidation must repeat.
        facts = "\n".join(f"- fact number {i} about the parser" for i in range(52))
        facts += f"\n- {SENTINEL}"
        consolidated = "\n".join(
            f"- facts {i * 6} to {i * 6 + 5} about the parser" for i in range(9)
        )
        result = apply(FACTS, facts, update(consolidated))
        assert body(result.document, FACTS) == consolidated
        assert result.decisions == ()


class TestDifferenceRecovery:
    def test_ours_keep_with_extra_keys_is_recognised(self) -> None:
        raw = '"Session Title": {"op": "KEEP", "reason": "unchanged"}, "Current State": {"op": "UPDATE", "content": "x"'
        parsed = parse_tool_arguments(raw)
        assert TITLE in parsed.found

    def test_ours_append_item_with_a_bracket_is_kept_whole(self) -> None:
        # Reference: the array is cut at the first "]" and the items are lost.
        raw = '{"sections": {"Open Issues": {"op": "APPEND", "items": ["[resolved] bug", "x"]},'
        parsed = parse_tool_arguments(raw)
        assert parsed.ops[ISSUES].items == ("[resolved] bug", "x")

    def test_ours_some_sections_at_top_level_are_enough(self) -> None:
        # Reference: the top level is read as ops only when all seven names are there.
        parsed = parse_tool_arguments({"Current State": {"op": "UPDATE", "content": "x"}})
        assert parsed.ops[STATE] == SectionOp.update("x")
        assert parsed.found == (STATE,)

    def test_ours_truncated_update_is_kept_not_half_applied(self) -> None:
        raw = '{"sections": {"Session Title": {"op": "KEEP"}, "Current State": {"op": "UPDATE", "content": "We are in the mid'
        parsed = parse_tool_arguments(raw)
        assert parsed.ops[STATE].kind == OpKind.KEEP
        assert any("cut" in problem for problem in parsed.problems)

    def test_ours_truncated_append_loses_only_its_unfinished_item(self) -> None:
        raw = '{"sections": {"Open Issues": {"op": "APPEND", "items": ["complete one", "half writ'
        parsed = parse_tool_arguments(raw)
        assert parsed.ops[ISSUES].items == ("complete one",)

    def test_ours_json_in_a_code_fence_is_read(self) -> None:
        raw = '```json\n{"sections": {"Current State": {"op": "UPDATE", "content": "fenced"}}}\n```'
        assert parse_tool_arguments(raw).ops[STATE].content == "fenced"

    def test_ours_typographic_quotes_as_json_quotes_keep_text_after_a_comma(self) -> None:
        # Before: json-repair read the curly-quoted strings but ended each at its first comma,
        # so "rollback, then" lost everything after "rollback".
        raw = (
            "{\u201csections\u201d: {\u201cCurrent State\u201d: {\u201cop\u201d: "
            "\u201cUPDATE\u201d, \u201ccontent\u201d: \u201cRollback tested, DNS next\u201d}, "
            "\u201cFiles & Context\u201d: {\u201cop\u201d: \u201cAPPEND\u201d, "
            "\u201citems\u201d: [\u201c`a.py` \u2014 parser, lexer\u201d]}}}"
        )
        parsed = parse_tool_arguments(raw)
        assert parsed.ops[STATE].content == "Rollback tested, DNS next"
        assert parsed.ops[FILES].items == ("`a.py` \u2014 parser, lexer",)
        assert any("typographic quotes" in problem for problem in parsed.problems)

    def test_ours_cut_off_section_is_reported_as_distrusted(self) -> None:
        raw = '{"sections": {"Session Title": {"op": "KEEP"}, "Open Issues": {"op": "APPEND", "items": ["a", "b'
        parsed = parse_tool_arguments(raw)
        assert parsed.distrusted == (ISSUES,)
        assert parsed.ops[ISSUES].items == ("a",)

    def test_ours_double_encoded_json_is_read(self) -> None:
        inner = json.dumps({"sections": {GOALS: {"op": "UPDATE", "content": "ship"}}})
        assert parse_tool_arguments(json.dumps(inner)).ops[GOALS].content == "ship"


class TestDifferenceCreation:
    def test_ours_creation_output_without_sections_is_rejected(self) -> None:
        # Reference: a creation answer is stored verbatim, so a refusal or a placeholder
        # replaces the working memory and everything in it is lost on the next commit.
        with pytest.raises(CreationRejected):
            normalize_creation("I'm sorry, I can't summarise this conversation.")

    def test_ours_creation_output_is_rewritten_canonically(self) -> None:
        # Reference: preambles, code fences and other heading levels are stored as they are.
        output = "Here you go:\n```\n### Session Title\nT\n### Open Issues\n- x\n```"
        assert normalize_creation(output).document == render_document({TITLE: "T", ISSUES: "- x"})


class TestDifferenceReminders:
    def test_ours_foreign_sections_get_no_reminder(self) -> None:
        # Reference: every parsed section, canonical or not, can get a warning.
        text = wm(title="t") + "## Scratchpad\n" + bullets("note", 40)
        assert section_reminders(text) == ""


class TestDifferenceOpenIssuesRestoreWhileUnresolved:
    """Reference: "restore-once". Ours: restore while unresolved (an unresolved issue never
    vanishes; each restoration is recorded; the marker is never stacked)."""

    def test_ours_30_a_restored_issue_dropped_again_is_restored_again(self) -> None:
        # Reference behaviour 30: the item already carries the marker, so it goes, unrecorded.
        old = "- [silently dropped, restored] stale follow-up issue\n- fresh unresolved bug"
        result = apply(ISSUES, old, update("- fresh unresolved bug"))
        assert items(result.document, ISSUES) == [
            "fresh unresolved bug",
            f"{RESTORE_MARKER} stale follow-up issue",
        ]
        (decision,) = decisions_for(result, ISSUES)
        assert (decision.guard, decision.applied) == (Guard.OPEN_ISSUES, "UPDATE")
        assert decision.items_restored == ("stale follow-up issue",)
        assert "again" in decision.reason

    def test_ours_31_stacked_markers_are_restored_with_one_marker(self) -> None:
        # Reference behaviour 31: an item marked twice is not restored at all.
        old = f"- {RESTORE_MARKER} {RESTORE_MARKER} old issue\n- active issue"
        result = apply(ISSUES, old, update("- active issue"))
        content = body(result.document, ISSUES)
        assert content == f"- active issue\n- {RESTORE_MARKER} old issue"

    def test_ours_a_lazy_model_never_loses_an_open_issue(self) -> None:
        # Each round the model rewrites Open Issues with only the issue of the round.
        document = wm(issues="- issue 0")
        for round_ in range(1, 6):
            result = merge(document, keep_all(issues=update(f"- issue {round_}")))
            (decision,) = decisions_for(result, ISSUES)
            assert len(decision.items_restored) == round_
            document = result.document
        kept = items(document, ISSUES)
        assert kept[0] == "issue 5"
        assert sorted(kept[1:]) == [f"{RESTORE_MARKER} issue {i}" for i in range(5)]
        assert all(item.count(RESTORE_MARKER) <= 1 for item in kept)

    @pytest.mark.parametrize(
        "resolved",
        [
            "[resolved] flaky auth test",
            "[RESOLVED] flaky auth test",
            "flaky auth test [done]",
            "Resolved: flaky auth test",
            "resolved - flaky auth test",
            "Done: flaky auth test",
            "~~flaky auth test~~",
            "\u2705 flaky auth test",
            "flaky auth test \u2014 resolved",
            "flaky auth test - Done.",
            "flaky auth test \u2705",
            f"{RESTORE_MARKER} [resolved] flaky auth test",
        ],
    )
    def test_ours_an_issue_marked_resolved_may_leave(self, resolved: str) -> None:
        result = apply(ISSUES, f"- {resolved}\n- open question", update("- open question"))
        assert body(result.document, ISSUES) == "- open question"
        assert result.decisions == ()

    def test_ours_marking_a_restored_issue_resolved_keeps_it_as_written(self) -> None:
        old = f"- {RESTORE_MARKER} stale follow-up issue\n- other"
        new = "- [resolved] stale follow-up issue: answered by Mei\n- other"
        result = apply(ISSUES, old, update(new))
        assert body(result.document, ISSUES) == new
        assert result.decisions == ()

    @pytest.mark.parametrize(
        "unresolved",
        ["unresolved: flaky auth", "flaky auth (not done)", "flaky auth - not resolved"],
    )
    def test_ours_words_like_resolved_inside_an_issue_do_not_resolve_it(
        self, unresolved: str
    ) -> None:
        result = apply(ISSUES, f"- {unresolved}\n- other", update("- other"))
        (decision,) = result.decisions
        assert decision.items_restored == (unresolved,)


class TestDifferenceTitleOverlap:
    """Reference: one shared word accepts a new title. Ours: half of the old title's
    meaningful words must stay, and every change or rejection is recorded."""

    OLD = "Harbor ledger migration from MySQL 5.7 to Postgres 16"

    def test_ours_one_shared_word_is_not_enough(self) -> None:
        # Reference: "postgres" is shared, so the sub-topic of one turn becomes the title.
        new = "Provisioning the RDS Postgres 16 instance"
        result = apply(TITLE, self.OLD, update(new))
        assert body(result.document, TITLE) == self.OLD
        (decision,) = result.decisions
        assert (decision.guard, decision.applied) == (Guard.TITLE, "KEEP")
        assert decision.items_dropped == (new,)
        assert "1 of the 5 meaningful words" in decision.reason
        assert "at least 3 needed" in decision.reason

    @pytest.mark.parametrize(
        ("old", "new"),
        [
            (OLD, "Harbor ledger migration: cutover rehearsal"),  # 3 of 5
            (OLD, "Harbor ledger migration from MySQL to Postgres 16 (cutover done)"),
            ("Debug Session Setup", "Debug Session Refinement"),  # reference 22: 1 of 2
            ("Old Title", "Old Title (updated)"),  # reference 73
            ("AI Tutor", "AI Evaluation Harness"),
        ],
    )
    def test_ours_refinements_keeping_half_the_words_are_accepted_and_recorded(
        self, old: str, new: str
    ) -> None:
        result = apply(TITLE, old, update(new))
        assert body(result.document, TITLE) == new
        (decision,) = result.decisions
        assert (decision.guard, decision.requested, decision.applied) == (
            Guard.TITLE,
            "UPDATE",
            "UPDATE",
        )
        assert decision.reason.startswith("title changed")

    def test_ours_a_change_of_a_title_without_meaningful_words_is_recorded(self) -> None:
        result = apply(TITLE, "A Session Title", update("The Plan for Notes"))  # reference 25
        assert body(result.document, TITLE) == "The Plan for Notes"
        (decision,) = result.decisions
        assert decision.applied == "UPDATE"
        assert "'A Session Title'" in decision.reason

    def test_ours_rewriting_the_same_title_is_no_change(self) -> None:
        assert apply(TITLE, self.OLD, update(f"  {self.OLD}\n")).decisions == ()

    def test_ours_a_drifting_model_never_moves_the_title(self) -> None:
        document = wm(title=self.OLD)
        for topic in ("Backfill script for ledger entries", "CI pipeline on Postgres 16"):
            result = merge(document, keep_all(title=update(topic)))
            assert body(result.document, TITLE) == self.OLD
            assert [d.guard for d in result.decisions] == [Guard.TITLE]
            document = result.document


_NATO_TEXT = (
    "Alfa Bravo Charlie Delta Echo Foxtrot Golf Hotel India Juliett Kilo Lima Mike November "
    "Oscar Papa Quebec Romeo Sierra Tango Uniform Victor Whiskey"
)
_NATO = _NATO_TEXT.split()


class TestDifferenceKeyFactsSalvage:
    """Reference: a rejected consolidation salvages every item not found in the old text.
    Ours: only items that bring a name, number, date, path or identifier the section lacks;
    the others are kept in the decision record (``items_refused``), not in the document."""

    def test_ours_vague_summary_lines_of_a_failed_consolidation_are_not_salvaged(self) -> None:
        old_facts = [
            "Mei Lin is the product owner and makes the go/no-go call",
            "PgBouncer runs in transaction mode with default_pool_size 40",
            "Backfill copies ledger_entries in chunks of 50000 rows",
            *(f"The {name} team reviews every migration" for name in _NATO),
        ]
        vague = [
            f"**Team**: {old_facts[0]} (and 3 related decisions)",
            f"**Connections**: {old_facts[1]} (and 4 related decisions)",
            f"**Backfill**: {old_facts[2]} (and 5 related decisions)",
        ]
        real = "Checksums are sha256 over sorted (entry_id, amount)"
        op = update("\n".join(f"- {item}" for item in [*vague, real]))
        result = apply(FACTS, "\n".join(f"- {fact}" for fact in old_facts), op)
        assert items(result.document, FACTS) == [*old_facts, real]
        (decision,) = result.decisions
        assert decision.applied == "APPEND"
        assert decision.items_refused == tuple(vague)
        assert "1 item(s) with new details salvaged" in decision.reason

    def test_ours_85_one_line_summary_without_new_details_is_not_salvaged(self) -> None:
        # Reference behaviour 85: the summary is appended as a 42nd fact.
        summary = "Consolidated summary: every module keeps its API contract."
        result = merge(wm(facts=decision_bullets(41)), keep_all(facts=update(f"- {summary}")))
        assert body(result.document, FACTS) == decision_bullets(41)
        (decision,) = decisions_for(result, FACTS)
        assert (decision.applied, decision.items_refused) == ("KEEP", (summary,))

    def test_ours_87_vague_consolidation_is_not_salvaged(self) -> None:
        # Reference behaviour 87: the 8 vague lines are appended (49 items).
        vague = [
            "lots of family time and some art.",
            "the family likes trips.",
            "there are pets at home.",
            "work keeps everyone busy.",
            "some health things happened.",
            "school and sports for the kid.",
            "money is being saved.",
            "relatives live abroad.",
        ]
        old = "\n".join(f"- {fact}" for fact in RICH_FACTS)
        result = merge(wm(facts=old), keep_all(facts=update("\n".join(f"- {v}" for v in vague))))
        assert items(result.document, FACTS) == RICH_FACTS
        (decision,) = decisions_for(result, FACTS)
        assert "anchors" in decision.reason
        assert decision.items_refused == tuple(vague)

    def test_ours_92_only_the_item_with_new_details_is_salvaged(self) -> None:
        # Reference behaviour 92: both items are appended (43 items).
        new_fact = "NEW: Caroline adopted a puppy named Max on 2024-06-15."
        op = update(f"- Summary: all modules stable.\n- {new_fact}")
        result = merge(wm(facts=decision_bullets(41)), keep_all(facts=op))
        facts = items(result.document, FACTS)
        assert len(facts) == 42
        assert facts[-1] == new_fact
        (decision,) = decisions_for(result, FACTS)
        assert decision.items_refused == ("Summary: all modules stable.",)

    def test_ours_105_a_consolidated_line_of_known_paths_is_not_appended(self) -> None:
        # Reference behaviour 105: the line listing module_1.py ... module_41.py is appended.
        line = "Consolidated: " + ", ".join(f"module_{i}.py" for i in range(1, 42)) + " stable."
        result = merge(wm(facts=decision_bullets(41)), keep_all(facts=update(f"- {line}")))
        assert body(result.document, FACTS) == decision_bullets(41)
        (decision,) = decisions_for(result, FACTS)
        assert decision.items_refused == (line,)

    def test_ours_106_a_rewrite_without_new_details_is_recorded_not_appended(self) -> None:
        # Reference behaviour 106: the line is appended. It names only a module the section
        # already holds, so it is kept in the decision record instead.
        line = "New decision: only module_1.py remains relevant."
        result = merge(wm(facts=decision_bullets(41)), keep_all(facts=update(f"- {line}")))
        assert body(result.document, FACTS) == decision_bullets(41)
        (decision,) = decisions_for(result, FACTS)
        assert decision.items_refused == (line,)

    @pytest.mark.parametrize(
        ("item", "details"),
        [
            ("Reconciliation tolerance agreed with Aisha: zero cents difference", ["zero cents"]),
            ("The replica router reads only while lag < 500 ms", ["500 ms"]),
            ("Caroline met Okafor in Lisbon", ["lisbon"]),
            ("Keys live at alias/harbor-ledger-pg", ["alias/harbor-ledger-pg"]),
            ("Summary: Backfill is fine (and 3 related decisions)", []),
        ],
    )
    def test_ours_new_details_are_names_numbers_dates_paths_identifiers(
        self, item: str, details: list[str]
    ) -> None:
        old = "- Aisha Okafor owns the close; Caroline too\n- batch 500, every 200 ms\n- Backfill"
        assert new_details(item, old) == details


class TestDifferenceKeyFactsEmergency:
    """Reference: at twice the size limits every new fact is refused until a consolidation
    passes, and the refused facts are lost. Ours: the APPEND that finds the section there
    lets in up to 5 facts with new details with the sentinel; after that every new fact is
    refused, recorded and kept as a pending item (issue 36: a model that never consolidates
    cannot make the section grow, and loses nothing)."""

    OLD = bullets("Fact", 55)

    def test_ours_97_the_section_stops_one_append_past_the_emergency_level(self) -> None:
        # Reference behaviour 97: Key Facts stops at 52 items (51 facts and the sentinel).
        document = wm(facts="- fact 0", files="- src/f0.py", errors="- error 0")
        refused: list[str] = []
        for i in range(1, 61):
            ops = keep_all(
                facts=append(f"fact {i}"),
                files=append(f"src/f{i}.py"),
                errors=append(f"error {i}"),
            )
            result = merge(document, ops)
            document = result.document
            refused.extend(item for d in result.decisions for item in d.items_refused)
        facts = items(document, FACTS)
        assert len(facts) == 53
        assert facts[51:53] == ["fact 51", SENTINEL]
        assert refused == [f"fact {i}" for i in range(52, 61)]  # recorded, none silently
        assert sum("CONSOLIDATION REQUIRED" in fact for fact in facts) == 1
        assert len(items(document, FILES)) == 61
        assert len(items(document, ERRORS)) == 61

    def test_ours_emergency_append_admits_new_details_once_then_nothing(self) -> None:
        detailed = [f"Replica {i} lags 250 ms at 2025-03-{i + 10}" for i in range(7)]
        plain = "Emergency fact A"
        result = apply(FACTS, self.OLD, append(plain, *detailed))
        (decision,) = result.decisions
        assert decision.applied == "APPEND"
        assert items(result.document, FACTS)[55:] == [*detailed[:5], SENTINEL]
        assert decision.items_refused == (plain, *detailed[5:])
        assert "1 with no new name" in decision.reason
        again = merge(result.document, {FACTS: append("Replica 9 moved to eu-west-1b")})
        assert again.document == result.document  # the sentinel stands: nothing more gets in
        (decision,) = again.decisions
        assert (decision.applied, decision.items_refused) == (
            "KEEP",
            ("Replica 9 moved to eu-west-1b",),
        )
        assert "kept as pending items" in decision.reason
        assert body(again.document, FACTS).count("CONSOLIDATION REQUIRED") == 1

    def test_ours_rejected_consolidation_at_emergency_still_salvages_new_facts(self) -> None:
        # Reference: "at emergency size nothing is salvaged": the turn's new facts are lost.
        facts = "\n".join(
            f"- Person_{i} decided thing_{i} on 2024-01-{i % 28 + 1:02d}." for i in range(55)
        )
        new_fact = "Grace Nakamura (QA) owns the test plan, due 2025-03-18"
        op = update(f"- Everyone decided things.\n- {new_fact}")
        result = merge(wm(facts=facts), keep_all(facts=op))
        got = items(result.document, FACTS)
        assert len(got) == 56
        assert got[-1] == new_fact
        (decision,) = decisions_for(result, FACTS)
        assert decision.items_refused == ("Everyone decided things.",)
        assert "at emergency size 1 item(s) with new details salvaged" in decision.reason


class TestDifferenceEmptyAppend:
    @pytest.mark.parametrize(
        "op",
        [
            {"op": "APPEND"},
            {"op": "APPEND", "items": []},
            {"op": "append", "items": None, "content": ""},
            {"op": "APPEND", "items": ["", "  "]},
            SectionOp.append([]),
        ],
    )
    def test_ours_append_without_items_is_recorded(self, op: object) -> None:
        # Reference: a KEEP with neither a decision nor a reported problem.
        result = apply(ISSUES, "- x", op)
        assert body(result.document, ISSUES) == "- x"
        (decision,) = result.decisions
        assert (decision.section, decision.requested, decision.applied, decision.guard) == (
            ISSUES,
            "APPEND",
            "KEEP",
            Guard.OP_SHAPE,
        )
        assert "APPEND" in decision.reason

    def test_ours_append_without_items_is_reported_when_reading_arguments(self) -> None:
        parsed = parse_tool_arguments({"sections": {ISSUES: {"op": "APPEND", "items": []}}})
        assert any(problem.startswith(f"{ISSUES}: APPEND") for problem in parsed.problems)


_WRAPPED = "# Working Memory\n\n## Session Title\nT\n\n## Key Facts & Decisions\n- a\n\n## Open Issues\n- last issue"
_WITH_SAMPLE = _WRAPPED.replace("- a", "- a\n```sql\nSELECT 1;\n```")


class TestDifferenceCreationFences:
    @pytest.mark.parametrize(
        "output",
        [
            "Sure!\n\n```markdown\n" + _WRAPPED + "\n```",
            ("Sure!\n\n```markdown\n" + _WRAPPED + "\n```").replace("\n", "\r\n"),
            "Sure!\n\n```markdown\n" + _WRAPPED + "\n```\n\nAnything else?",
            "Sure!\n\n~~~markdown\n" + _WRAPPED + "\n~~~",
            "Sure!\n\n````markdown\n" + _WRAPPED + "\n````",
            "Sure!\n\n  ```markdown\n" + _WRAPPED + "\n  ```",
            "Sure! ```markdown\n" + _WRAPPED + "\n```",
            "Sure!\n```markdown\n" + _WRAPPED + "```",
            "Sure!\n\n```markdown\n" + _WRAPPED,
        ],
        ids=[
            "preamble",
            "crlf",
            "trailer",
            "tildes",
            "four-backticks",
            "indented",
            "same-line",
            "glued-close",
            "unclosed",
        ],
    )
    def test_ours_no_fence_ends_up_in_the_last_section(self, output: str) -> None:
        # Reference: stored verbatim. Before: only a fence that was the whole output came off;
        # here the closing fence landed in Open Issues (or the document did not parse).
        result = normalize_creation(output)
        assert result.document == render_document(
            {TITLE: "T", FACTS: "- a", ISSUES: "- last issue"}
        )

    @pytest.mark.parametrize("preamble", ["", "Sure!\n\n"])
    def test_ours_a_code_sample_inside_a_fenced_document_stays(self, preamble: str) -> None:
        result = normalize_creation(preamble + "```markdown\n" + _WITH_SAMPLE + "\n```")
        bodies = parse_document(result.document)
        assert bodies[FACTS] == "- a\n```sql\nSELECT 1;\n```"
        assert bodies[ISSUES] == "- last issue"

    def test_ours_a_code_sample_in_an_unfenced_document_is_content(self) -> None:
        result = normalize_creation("Here it is:\n" + _WITH_SAMPLE)
        assert parse_document(result.document)[FACTS] == "- a\n```sql\nSELECT 1;\n```"


def test_ours_op_cut_before_its_items_is_distrusted() -> None:
    """Cut right after ``"op": "APPEND",``: the section is named as cut, so the caller asks for
    it again, instead of reading a harmless-looking KEEP."""
    from wm_core import parse_tool_arguments

    cut = (
        '{"sections": {"Session Title": {"op": "KEEP"}, "Key Facts & Decisions": {"op": "APPEND", '
    )
    parsed = parse_tool_arguments(cut)
    assert parsed.distrusted == ("Key Facts & Decisions",)
    assert parsed.ops["Key Facts & Decisions"].kind.value == "KEEP"
    complete_items = cut + '"items": ["a", "b"'
    assert parse_tool_arguments(complete_items).distrusted == ()
