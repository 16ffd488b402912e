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
    STATE,
    TITLE,
    append,
    apply,
    body,
    bullets,
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
from wm_core.guards.key_facts import SENTINEL
from wm_core.guards.title import title_tokens
from wm_core.items import fresh_items
from wm_core.ops import OpKind
from wm_core.paths import references


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
        assert references("a.py.bak") == set()

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
        result = apply(FACTS, bullets("Fact", 30), update("- One summary"))
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
