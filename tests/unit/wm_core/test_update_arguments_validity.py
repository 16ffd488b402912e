"""The update tool's validation answers as the whole schema does (hypothesis).

``validate_update_arguments`` decides validity by plain checks made from the schema (each
op's own branch of the ``oneOf``) and runs the full validator only for the messages of an
invalid answer; these tests hold that shortcut to jsonschema's verdict on the exported
schema, in both directions, over valid and broken answers alike.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from wm_core import SECTIONS, UPDATE_TOOL, validate_update_arguments
from wm_core._ops.schema import _valid_update

WHOLE = Draft202012Validator(UPDATE_TOOL["input_schema"])


class _Text(str):
    """A ``str`` subclass: a string to jsonschema, as to the checks."""


_scalars = st.one_of(
    st.text(max_size=4), st.integers(), st.none(), st.booleans(), st.floats(allow_nan=False)
)
_valid_ops = st.one_of(
    st.just({"op": "KEEP"}),
    st.just({"op": _Text("KEEP")}),
    st.builds(lambda c: {"op": "UPDATE", "content": c}, st.text(max_size=8)),
    st.builds(lambda c: {"op": "UPDATE", "content": _Text(c)}, st.text(max_size=8)),
    st.builds(lambda i: {"op": "APPEND", "items": i}, st.lists(st.text(max_size=4), max_size=3)),
)
_broken_ops = st.one_of(
    _scalars,
    st.lists(_scalars, max_size=2),
    st.fixed_dictionaries(
        {},
        optional={
            "op": st.one_of(
                st.sampled_from(["KEEP", "UPDATE", "APPEND", "REPLACE", "keep"]), _scalars
            ),
            "content": _scalars,
            "items": st.one_of(st.lists(_scalars, max_size=3), _scalars),
            "extra": _scalars,
        },
    ),
)
# An op that names its kind right and gets one thing wrong: a field too many, of the wrong
# type, or missing.
_flawed_ops = st.one_of(
    st.builds(lambda op, v: {**op, "extra": v}, _valid_ops, _scalars),
    st.builds(lambda op, v: {**op, "content": v}, _valid_ops, _scalars),
    st.builds(lambda op, v: {**op, "items": v}, _valid_ops, _scalars),
    st.builds(lambda i: {"op": "APPEND", "items": tuple(i)}, st.lists(st.text(max_size=2))),
    st.builds(lambda i: {"op": "APPEND", "items": i}, st.lists(_scalars, min_size=1, max_size=3)),
    st.builds(lambda op: {**op, 1: "KEEP"}, _valid_ops),
    st.sampled_from([{"op": "UPDATE"}, {"op": "APPEND"}, {"op": b"KEEP"}]),
)
# Mostly valid ops, so that a good share of whole answers is valid, or wrong in one op only.
_ops = st.one_of(_valid_ops, _valid_ops, _valid_ops, _valid_ops, _flawed_ops, _broken_ops)
_all_sections = st.fixed_dictionaries({name: _ops for name in SECTIONS})
_some_sections = st.dictionaries(st.sampled_from([*SECTIONS, "Notes", "open issues"]), _ops)
_arguments = st.one_of(
    st.builds(lambda s: {"sections": s}, _all_sections),
    st.builds(lambda s: {"sections": s}, _all_sections),
    st.builds(lambda s: {"sections": s, "note": 1}, _all_sections),
    st.builds(lambda s: {"sections": s}, _some_sections),
    st.builds(lambda s: {"sections": s}, _scalars),
    _all_sections,  # the ops without the "sections" wrapper
    _scalars,
)


@settings(max_examples=600, deadline=None)
@given(_arguments)
def test_valid_exactly_when_the_whole_schema_says_so(arguments: Any) -> None:
    valid = WHOLE.is_valid(arguments)
    assert _valid_update(arguments) is valid  # the checks alone, either way
    errors = validate_update_arguments(arguments)
    assert (errors == []) is valid, errors


def test_each_broken_op_kind_is_refused_with_its_message() -> None:
    ops: dict[str, object] = {name: {"op": "KEEP"} for name in SECTIONS}
    for broken, message in (
        ({"op": "KEEP", "content": "x"}, "Additional properties are not allowed"),
        ({"op": "UPDATE", "content": 3}, "3 is not of type 'string'"),
        ({"op": "APPEND", "items": "x"}, "'x' is not of type 'array'"),
        ({"op": ["KEEP"]}, "'op' must be one of KEEP, UPDATE, APPEND"),
        ({"content": "x"}, "'op' must be one of KEEP, UPDATE, APPEND (got None)"),
        ("KEEP", "must be an object with an 'op' field"),
    ):
        errors = validate_update_arguments({"sections": {**ops, SECTIONS[3]: broken}})
        assert len(errors) == 1 and errors[0].startswith(f"sections/{SECTIONS[3]}"), errors
        assert message in errors[0], errors
