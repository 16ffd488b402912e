"""The public facade, the tool schemas, argument recovery, creation output and the helpers."""

from __future__ import annotations

import ast
import copy
import json
import pickle
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft7Validator, Draft202012Validator
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
    items,
    update,
    wm,
)

import wm_core
from wm_core import (
    CREATE_TOOL,
    SECTIONS,
    UPDATE_TOOL,
    CreationRejected,
    Guard,
    MergeResult,
    ParsedOps,
    ReadMethod,
    SectionOp,
    estimate_tokens,
    merge,
    normalize_creation,
    parse_document,
    parse_document_detailed,
    parse_tool_arguments,
    render_document,
    section_reminders,
    validate_create_arguments,
    validate_update_arguments,
)
from wm_core._guards.key_facts import ANCHOR_STOPWORDS, lexical_anchors
from wm_core._ops.section_ops import OpKind
from wm_core._tokens.estimate import exceeds_tokens


def pickle_round_trip(value: object) -> object:
    return pickle.loads(pickle.dumps(value))


FACADE = {
    "SECTIONS",
    "parse_document",
    "render_document",
    "merge",
    "parse_tool_arguments",
    "UPDATE_TOOL",
    "section_reminders",
    "estimate_tokens",
}


def _valid_arguments() -> dict[str, object]:
    return {
        "sections": {
            TITLE: {"op": "KEEP"},
            STATE: {"op": "UPDATE", "content": "Now writing tests."},
            GOALS: {"op": "KEEP"},
            FACTS: {"op": "APPEND", "items": ["Uses SQLite by default."]},
            FILES: {"op": "KEEP"},
            ERRORS: {"op": "KEEP"},
            ISSUES: {"op": "KEEP"},
        }
    }


class TestFacade:
    def test_the_design_names_are_exported(self) -> None:
        assert set(wm_core.__all__) >= FACADE
        for name in FACADE:
            assert getattr(wm_core, name) is not None

    def test_sections_are_the_seven_names_in_order(self) -> None:
        assert SECTIONS == (
            "Session Title",
            "Current State",
            "Task & Goals",
            "Key Facts & Decisions",
            "Files & Context",
            "Errors & Corrections",
            "Open Issues",
        )

    def test_merge_result_exposes_document_decisions_and_bodies(self) -> None:
        result = merge(wm(title="T"), {STATE: update("Busy")})
        assert isinstance(result, MergeResult)
        assert result.document.startswith("# Working Memory\n")
        assert result.decisions == ()
        assert result.sections[STATE] == "Busy"

    def test_parse_tool_arguments_returns_ops_and_problems(self) -> None:
        parsed = parse_tool_arguments(json.dumps(_valid_arguments()))
        assert isinstance(parsed, ParsedOps)
        assert parsed.problems == ()
        assert parsed.ops[STATE] == SectionOp.update("Now writing tests.")

    def test_estimate_tokens_uses_the_reference_weights(self) -> None:
        assert estimate_tokens("") == 0
        assert estimate_tokens("abcde") == 2  # 5 x 0.25, rounded up
        assert estimate_tokens("中文") == 3  # 2 x 1.5
        assert estimate_tokens("😀a") == 3  # 2.0 + 0.25, rounded up

    def test_render_is_the_reference_canonical_shape(self) -> None:
        text = render_document({TITLE: "T", ISSUES: "- x"})
        expected = (
            "# Working Memory\n\n## Session Title\nT\n\n"
            + "".join(f"## {name}\n\n" for name in SECTIONS[1:-1])
            + "## Open Issues\n- x\n"
        )
        assert text == expected

    def test_section_op_constructors_and_json_shape(self) -> None:
        assert SectionOp.keep().to_dict() == {"op": "KEEP"}
        assert SectionOp.update("x").to_dict() == {"op": "UPDATE", "content": "x"}
        assert SectionOp.append(["a", "b"]).to_dict() == {"op": "APPEND", "items": ["a", "b"]}

    def test_engine_imports_only_what_the_design_allows(self) -> None:
        allowed = {
            "__future__", "collections", "copy", "dataclasses", "enum", "functools", "json",
            "json_repair",
            "jsonschema", "math", "pydantic", "re", "reprlib", "types", "typing", "unicodedata",
            "wm_core",
        }  # fmt: skip
        root = Path(wm_core.__file__).parent
        imported: set[str] = set()
        for source in root.rglob("*.py"):
            for node in ast.walk(ast.parse(source.read_text())):
                if isinstance(node, ast.Import):
                    imported.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    imported.add(node.module.split(".")[0])
        assert imported <= allowed


class TestUpdateTool:
    def test_anthropic_shape(self) -> None:
        assert set(UPDATE_TOOL) == {"name", "description", "input_schema"}
        assert UPDATE_TOOL["name"] == "update_working_memory"

    @pytest.mark.parametrize("validator", [Draft202012Validator, Draft7Validator])
    def test_schema_is_valid_against_the_metaschema(self, validator: type) -> None:
        validator.check_schema(UPDATE_TOOL["input_schema"])  # type: ignore[attr-defined]

    def test_all_sections_required_and_nothing_else_allowed(self) -> None:
        schema = UPDATE_TOOL["input_schema"]
        assert schema["required"] == ["sections"]
        assert schema["additionalProperties"] is False
        sections = schema["properties"]["sections"]
        assert sections["required"] == list(SECTIONS)
        assert sections["additionalProperties"] is False
        for name in SECTIONS:
            shapes = sections["properties"][name]["oneOf"]
            assert [s["properties"]["op"]["enum"] for s in shapes] == [
                ["KEEP"],
                ["UPDATE"],
                ["APPEND"],
            ]
            assert [s["required"] for s in shapes] == [["op"], ["op", "content"], ["op", "items"]]
            assert all(s["additionalProperties"] is False for s in shapes)

    def test_valid_arguments_have_no_errors(self) -> None:
        assert validate_update_arguments(_valid_arguments()) == []

    def test_errors_name_what_is_wrong_for_a_repair_prompt(self) -> None:
        arguments = _valid_arguments()
        sections = arguments["sections"]
        assert isinstance(sections, dict)
        del sections[ISSUES]
        sections[STATE] = {"op": "UPDATE"}
        sections[TITLE] = {"op": "REPLACE", "content": "x"}
        sections[FACTS] = {"op": "APPEND", "items": ["ok", 3]}
        sections["Notes"] = {"op": "KEEP"}
        errors = validate_update_arguments(arguments)
        assert "sections/Current State: 'content' is a required property" in errors
        assert (
            "sections/Session Title: 'op' must be one of KEEP, UPDATE, APPEND (got 'REPLACE')"
            in errors
        )
        assert "sections/Key Facts & Decisions/items/1: 3 is not of type 'string'" in errors
        assert any("'Open Issues' is a required property" in e for e in errors)
        assert any("'Notes' was unexpected" in e for e in errors)

    def test_non_object_arguments_are_reported(self) -> None:
        assert validate_update_arguments("nope") == ["(arguments): 'nope' is not of type 'object'"]


class TestCreateTool:
    def test_one_required_string_per_section(self) -> None:
        schema = CREATE_TOOL["input_schema"]
        Draft202012Validator.check_schema(schema)
        assert CREATE_TOOL["name"] == "create_working_memory"
        assert schema["required"] == list(SECTIONS)
        assert schema["additionalProperties"] is False
        assert all(schema["properties"][name]["type"] == "string" for name in SECTIONS)

    def test_validation(self) -> None:
        complete = dict.fromkeys(SECTIONS, "")
        assert validate_create_arguments(complete) == []
        complete[TITLE] = 5  # type: ignore[assignment]
        assert validate_create_arguments(complete) == ["Session Title: 5 is not of type 'string'"]


class TestArgumentRecovery:
    def test_strict_json(self) -> None:
        parsed = parse_tool_arguments(json.dumps(_valid_arguments()))
        assert parsed.method is ReadMethod.JSON
        assert parsed.found == SECTIONS
        assert parsed.defaulted == ()

    def test_decoded_object(self) -> None:
        parsed = parse_tool_arguments(_valid_arguments())
        assert parsed.method is ReadMethod.OBJECT
        assert parsed.ops[FACTS].items == ("Uses SQLite by default.",)

    def test_raw_wrapper_with_unclosed_braces(self) -> None:
        raw = '{"sections": {"Session Title": {"op": "KEEP"}, "Current State": {"op": "UPDATE", "content": "x"}'
        parsed = parse_tool_arguments({"raw": raw})
        assert parsed.method is ReadMethod.REPAIRED
        assert parsed.ops[STATE] == SectionOp.update("x")
        assert any("raw" in problem for problem in parsed.problems)

    def test_missing_sections_wrapper(self) -> None:
        sections = _valid_arguments()["sections"]
        parsed = parse_tool_arguments(json.dumps(sections))
        assert parsed.found == SECTIONS
        assert any("wrapper" in problem for problem in parsed.problems)

    def test_trailing_comma_is_repaired(self) -> None:
        parsed = parse_tool_arguments(
            '{"sections": {"Task & Goals": {"op": "UPDATE", "content": "ship",},},}'
        )
        assert parsed.method is ReadMethod.REPAIRED
        assert parsed.ops[GOALS] == SectionOp.update("ship")

    def test_per_section_salvage(self) -> None:
        raw = 'oops {"Open Issues": {"op": "APPEND", "items": ["a"]}} then "Current State": {"op": "KEEP"}'
        parsed = parse_tool_arguments(raw)
        assert set(parsed.found) == {ISSUES, STATE}

    def test_missing_sections_default_to_keep_and_are_reported(self) -> None:
        parsed = parse_tool_arguments({"sections": {STATE: {"op": "UPDATE", "content": "x"}}})
        assert parsed.defaulted == tuple(name for name in SECTIONS if name != STATE)
        assert all(parsed.ops[name] == SectionOp.keep() for name in parsed.defaulted)
        assert any(problem.startswith("defaulted to KEEP") for problem in parsed.problems)

    def test_op_problems_are_reported(self) -> None:
        parsed = parse_tool_arguments(
            {"sections": {STATE: {"op": "DELETE"}, ISSUES: {"op": "APPEND", "items": ["ok", 1]}}}
        )
        assert parsed.ops[STATE] == SectionOp.keep()
        assert parsed.ops[ISSUES] == SectionOp.append(["ok"])
        assert any("unknown op 'DELETE'" in problem for problem in parsed.problems)
        assert any("non-string" in problem for problem in parsed.problems)

    def test_unknown_section_key_is_reported(self) -> None:
        parsed = parse_tool_arguments({"sections": {"Scratchpad": {"op": "KEEP"}}})
        assert any("Scratchpad" in problem for problem in parsed.problems)

    @pytest.mark.parametrize("raw", [42, [1, 2], None, "I cannot help with that.", b"\xff\xfe"])
    def test_unusable_input_keeps_everything(self, raw: object) -> None:
        parsed = parse_tool_arguments(raw)
        assert not parsed.usable
        assert all(op == SectionOp.keep() for op in parsed.ops.values())
        assert parsed.problems

    def test_bytes_are_decoded(self) -> None:
        parsed = parse_tool_arguments(json.dumps(_valid_arguments()).encode())
        assert parsed.found == SECTIONS

    def test_recovered_ops_merge(self) -> None:
        parsed = parse_tool_arguments('"Current State": {"op": "UPDATE", "content": "Recovered"}')
        assert body(merge(wm(state="old"), parsed.ops).document, STATE) == "Recovered"


class TestCreation:
    def test_tool_arguments_become_the_canonical_document(self) -> None:
        arguments = dict.fromkeys(SECTIONS, "")
        arguments[TITLE] = "Parser rewrite"
        arguments[FACTS] = "- Uses PEG\n## Sub topic\n- detail"
        result = normalize_creation(arguments)
        assert result.document == render_document(
            {TITLE: "Parser rewrite", FACTS: "- Uses PEG\n### Sub topic\n- detail"}
        )
        assert result.sections == (TITLE, FACTS)
        assert any("demoted" in problem for problem in result.problems)

    def test_free_markdown_with_preamble_fence_and_other_levels(self) -> None:
        output = (
            "Sure! Here is the working memory:\n```markdown\n# Working Memory\n"
            "### session title\nParser rewrite\n### Open Issues\n- flaky test\n"
            "## Misc\n- note\n```"
        )
        result = normalize_creation(output)
        assert parse_document(result.document) == {
            **dict.fromkeys(SECTIONS, ""),
            TITLE: "Parser rewrite",
            ISSUES: "- flaky test",
        }
        assert any("Misc" in problem for problem in result.problems)

    def test_reference_tool_shape_and_json_text(self) -> None:
        markdown = "## Session Title\nT\n## Current State\nS"
        assert body(normalize_creation({"working_memory": markdown}).document, STATE) == "S"
        assert body(normalize_creation(json.dumps({TITLE: "T"})).document, TITLE) == "T"
        fenced = "Here:\n```json\n" + json.dumps({"sections": {GOALS: "ship"}}) + "\n```"
        assert body(normalize_creation(fenced).document, GOALS) == "ship"

    def test_a_code_sample_inside_a_real_document_is_content(self) -> None:
        output = "## Session Title\nT\n## Key Facts & Decisions\n```\nx = 1\n```"
        result = normalize_creation(output)
        assert body(result.document, FACTS) == "```\nx = 1\n```"

    @pytest.mark.parametrize(
        "output",
        [
            "I'm sorry, I cannot summarise this conversation.",
            "# Session Summary\n\n**Overview**: 3 turns, 6 messages",
            dict.fromkeys(SECTIONS, ""),
            "## Session Title\n\n## Current State\n",
            {"notes": "something"},
            42,
        ],
    )
    def test_output_without_a_section_is_rejected(self, output: object) -> None:
        with pytest.raises(CreationRejected):
            normalize_creation(output)


class TestRemindersAndSizing:
    def test_any_oversized_section_except_errors_is_reminded(self) -> None:
        reminder = section_reminders(wm(issues=bullets("issue", 30), errors=bullets("error", 30)))
        assert '"Open Issues" has 30 bullets' in reminder
        assert "Errors" not in reminder

    def test_token_threshold_alone_triggers_a_reminder(self) -> None:
        long_fact = "- " + "word " * 400
        reminder = section_reminders(wm(facts="\n".join([long_fact] * 4)))
        assert '"Key Facts & Decisions" has 4 bullets' in reminder

    def test_key_facts_oversized_by_tokens_is_throttled(self) -> None:
        old = "\n".join(f"- fact {i} " + "detail " * 300 for i in range(3))
        result = apply(FACTS, old, append(*(f"new {i}" for i in range(7))))
        assert len(items(result.document, FACTS)) == 3 + 5

    @settings(max_examples=300, deadline=None)
    @given(
        st.text(alphabet=st.sampled_from(["a", " ", "é", "—", "中", "😀", "ｱ"]), max_size=80),
        st.integers(0, 60),
    )
    def test_threshold_checks_agree_with_the_estimate(self, text: str, limit: int) -> None:
        assert exceeds_tokens(text, limit) == (estimate_tokens(text) > limit)


_REF_MONTHS = (
    "January|February|March|April|May|June|July|August|September|October|November|December"
)
_REF_PATTERNS = (
    re.compile(rf"\b\d{{4}}-\d{{2}}-\d{{2}}\b|\b\d{{1,2}}\s+(?:{_REF_MONTHS})\s+\d{{4}}\b", re.I),
    re.compile(
        r"\b\d+\s+(?:years?|months?|weeks?|days?|kids?|children|hours?|miles?|times?|sessions?|"
        r"rounds?|visits?|dollars?|euros?|pounds?|bedrooms?|paintings?|people|persons?)\b"
        r"|\$\d[\d,]*|\b\d+\s+(?:AM|PM)\b",
        re.I,
    ),
    re.compile(r"\b(?:because|decided|chose|committed|agreed|resolved)\b", re.I),
)


def _reference_anchors(text: str) -> set[str]:
    """The anchor definition as the reference writes it: four independent regex scans."""
    anchors = {m.lower().strip() for pattern in _REF_PATTERNS for m in pattern.findall(text)}
    capitalized = {w.lower() for w in re.findall(r"\b[A-Z][a-zA-Z]{2,}\b", text)}
    return anchors | (capitalized - ANCHOR_STOPWORDS)


_ANCHOR_WORDS = [
    "2024-05-10", "12", "5", "2024", "June", "june", "May", "days", "Days", "AM", "pm", "$",
    "$1,500", "because", "Decided", "RESOLVED", "dEcided", "Caroline", "the", "The", "Key",
    "McCloud", "x2024", "10", "-", ",", "kids", "People", "_", "API", "ab", "$2024-01-05",
    "$1,", "12 june 2024", "2024 years", "-10 days", "$12", "2024-01", "05",
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(_ANCHOR_WORDS), st.sampled_from([" ", "", "\n", ", ", "-"])),
        max_size=14,
    ).map(lambda parts: "".join(word + sep for word, sep in parts))
)
def test_fast_anchor_scan_equals_the_reference_definition(text: str) -> None:
    assert lexical_anchors(text) == _reference_anchors(text)


def test_layer_one_threshold_is_strict_and_reported() -> None:
    # 4 of 30 bullets is 13 %, below 15 %: rejected, and the reason gives the figures.
    summaries = [f"Summary {i} covers release v{i}.{i}" for i in range(4)]
    result = apply(FACTS, bullets("Fact", 30), update("\n".join(f"- {s}" for s in summaries)))
    (decision,) = result.decisions
    assert decision.guard is Guard.KEY_FACTS
    assert "4 of 30 bullets (13%" in decision.reason
    assert items(result.document, FACTS)[30:] == summaries  # salvaged: each has a new version


def test_op_kinds_are_the_three_reference_ops() -> None:
    assert [kind.value for kind in OpKind] == ["KEEP", "UPDATE", "APPEND"]


class TestRecordsCopyAndPickle:
    """Results are plain values: copies and pickles of them are equal records of the same type."""

    @pytest.mark.parametrize("duplicate", [copy.copy, copy.deepcopy, pickle_round_trip])
    def test_facade_records_survive_copies(self, duplicate: Callable[[object], object]) -> None:
        result = merge(
            "## Session Title\nOld\n## Open Issues\n- Issue A",
            {"Session Title": SectionOp.update("New"), "Open Issues": SectionOp.update("")},
        )
        records: list[object] = [
            result,
            *result.decisions,
            SectionOp.append(["x"]),
            parse_document_detailed("# Notes\n## Session Title\nT\n## Extra\nx"),
            parse_tool_arguments('{"sections": {}}'),
        ]
        for record in records:
            copied = duplicate(record)
            assert copied == record
            assert type(copied) is type(record)
