"""The memory tool's schema, its validation and the reader of broken model output (wm_core)."""

from __future__ import annotations

import json

from wm_core import (
    MAX_MEMORY_OPS,
    MAX_MEMORY_TEXT_CHARS,
    MEMORY_TOOL,
    MEMORY_TYPES,
    MemoryOpKind,
    MemoryType,
    ReadMethod,
    parse_memory_ops,
    validate_memory_arguments,
)

GOOD = {
    "ops": [
        {
            "op": "CREATE",
            "type": "preference",
            "text": "User prefers tabs over spaces.",
            "fields": [{"name": "subject", "value": "indentation"}],
            "source_message_ids": ["m3"],
        },
        {"op": "UPDATE", "target_ids": ["mem_1"], "text": "User is the CTO at Contoso."},
        {"op": "MERGE", "target_ids": ["a", "b"], "text": "Both.", "type": "entity"},
        {"op": "RETIRE", "target_ids": ["mem_2"], "reason": "the user moved to Contoso"},
    ]
}


def test_the_tool_names_every_kind_and_type_and_states_its_limits() -> None:
    assert MEMORY_TOOL["name"] == "update_memories"
    op = MEMORY_TOOL["input_schema"]["properties"]["ops"]["items"]
    assert op["properties"]["op"]["enum"] == ["CREATE", "UPDATE", "MERGE", "RETIRE"]
    assert op["properties"]["type"]["enum"] == list(MEMORY_TYPES)
    assert op["properties"]["text"]["maxLength"] == MAX_MEMORY_TEXT_CHARS
    assert MEMORY_TOOL["input_schema"]["properties"]["ops"]["maxItems"] == MAX_MEMORY_OPS
    assert op["additionalProperties"] is False


def test_valid_arguments_have_no_problems_and_read_as_they_are() -> None:
    assert validate_memory_arguments(GOOD) == []
    parsed = parse_memory_ops(json.dumps(GOOD))
    assert parsed.problems == ()
    assert parsed.method is ReadMethod.JSON
    assert [op.kind for op in parsed.ops] == list(MemoryOpKind)
    create = parsed.ops[0]
    assert create.type is MemoryType.PREFERENCE
    assert create.fields == {"subject": "indentation"}
    assert create.source_message_ids == ("m3",)
    assert parsed.ops[1].type is None  # UPDATE keeps the target's type (the guard fills it)


def test_validation_explains_what_each_kind_lacks() -> None:
    problems = validate_memory_arguments(
        {
            "ops": [
                {"op": "CREATE", "text": "x"},
                {"op": "UPDATE", "target_ids": [], "text": "y"},
                {"op": "MERGE", "target_ids": ["a"], "text": "z"},
                {"op": "RETIRE", "target_ids": ["a"]},
                {"op": "DELETE"},
            ]
        }
    )
    joined = "\n".join(problems)
    assert "ops/0: CREATE needs a type" in joined
    assert "ops/1: UPDATE needs exactly one target id (got 0)" in joined
    assert "ops/2: MERGE needs two or more target ids (got 1)" in joined
    assert "ops/3: RETIRE needs a reason" in joined
    assert "ops/4/op" in joined


def test_broken_json_is_repaired_and_a_cut_off_last_op_is_dropped() -> None:
    text = json.dumps(GOOD)[:-3]  # cut inside the last op's reason
    cut = text[: text.index('"reason"') + 20]
    parsed = parse_memory_ops(cut)
    assert parsed.method is ReadMethod.REPAIRED
    assert [op.kind for op in parsed.ops] == [
        MemoryOpKind.CREATE,
        MemoryOpKind.UPDATE,
        MemoryOpKind.MERGE,
    ]
    assert any("cut off" in p for p in parsed.problems)


def test_wrappers_fences_and_bare_lists_are_unwrapped() -> None:
    one = {"op": "CREATE", "type": "entity", "text": "ledgerd is the billing service."}
    for raw in (
        "```json\n" + json.dumps({"ops": [one]}) + "\n```",
        json.dumps([one]),
        json.dumps(one),
        {"raw": json.dumps({"ops": [one]})},
        {"ops": json.dumps([one])},
    ):
        parsed = parse_memory_ops(raw)
        assert [op.text for op in parsed.ops] == ["ledgerd is the billing service."], raw
        assert parsed.problems, raw  # every unwrapping is reported


def test_bad_ops_cost_only_themselves() -> None:
    parsed = parse_memory_ops(
        {
            "ops": [
                "not an op",
                {"op": "FORGET", "target_ids": ["a"]},
                {"op": "RETIRE", "target_ids": ["a"], "reason": "  "},
                {"op": "CREATE", "type": "mood", "text": "x"},
                {"op": "create", "type": "Decision", "text": "  Use   Postgres. "},
                {"op": "CREATE", "type": "event", "text": "word " * 200},
            ]
        }
    )
    assert [(op.kind, op.type, op.text[:12]) for op in parsed.ops] == [
        (MemoryOpKind.CREATE, MemoryType.DECISION, "Use Postgres"),
        (MemoryOpKind.CREATE, MemoryType.EVENT, "word word wo"),
    ]
    assert len(parsed.ops[1].text) <= MAX_MEMORY_TEXT_CHARS
    joined = "\n".join(parsed.problems)
    for expected in ("ops/0: not an object", "'FORGET'", "RETIRE needs a reason", "'mood'", "cut"):
        assert expected in joined


def test_nothing_readable_is_unusable_and_an_empty_list_is_a_usable_answer() -> None:
    for raw in (None, "", "I could not find anything", 42):
        parsed = parse_memory_ops(raw)
        assert parsed.ops == () and not parsed.usable and parsed.problems, raw
    empty = parse_memory_ops('{"ops": []}')
    assert empty.usable and empty.ops == () and empty.problems == ()


def test_too_many_ops_are_capped() -> None:
    many = {"ops": [{"op": "CREATE", "type": "event", "text": f"e{i}"} for i in range(80)]}
    parsed = parse_memory_ops(many)
    assert len(parsed.ops) == MAX_MEMORY_OPS
    assert any("only the first" in p for p in parsed.problems)
