"""Properties of the engine over random documents and random (also malformed) ops."""

from __future__ import annotations

import copy
import json
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wmcore_helpers import ERRORS, FILES, ISSUES

from wm_core import (
    SECTIONS,
    CreationRejected,
    SectionOp,
    WmLimits,
    abstract_of,
    bound_document,
    is_working_memory,
    merge,
    normalize_creation,
    parse_document,
    parse_document_detailed,
    parse_tool_arguments,
    render_document,
    section_reminders,
)
from wm_core._document.items import bullet_items, count_items
from wm_core._document.paths import references
from wm_core._document.sections import canonical_name
from wm_core._guards.open_issues import RESTORE_MARKER, is_resolved, issue_snippet
from wm_core._ops.section_ops import OpKind

# Sized so the whole file runs in a few seconds of CPU; raise max_examples locally to dig deeper.
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_CHARS = [*"abcXYZ 0129-./_*`#[]():$,\t", "é", "中", "😀", "\r", "\u2028", "\x0c"]
_NAMES = [*SECTIONS, "Notes", "Working Memory", "Backend", "open issues", "KEY FACTS AND DECISIONS"]
_PATHS = [
    "src/a.py",
    "./src/a.py",
    "docs/guide.md",
    "App.tsx",
    "a.json",
    "lib/util/core",
    "https://example.com/img/x.png",
    "C:\\work\\x.py",
    "and/or",
]

fragments = st.text(alphabet=st.sampled_from(_CHARS), max_size=30)
headings = st.builds(
    lambda level, name, tail: "#" * level + " " + name + tail,
    st.integers(1, 7),
    st.sampled_from(_NAMES),
    st.sampled_from(["", ":", " ##", "  "]),
)
bullet_lines = st.builds(
    lambda marker, words: marker + words,
    st.sampled_from(["- ", "* ", "1. ", "  - ", "", "- [silently dropped, restored] "]),
    st.one_of(
        fragments,
        st.sampled_from(_PATHS),
        st.builds(" ".join, st.lists(st.sampled_from(_PATHS), max_size=3)),
    ),
)
lines = st.one_of(fragments, headings, bullet_lines)
texts = st.lists(lines, max_size=8).map("\n".join)
free_documents = st.lists(lines, max_size=25).map("\n".join)
canonical_documents = st.dictionaries(st.sampled_from(SECTIONS), texts).map(render_document)
documents = st.one_of(free_documents, canonical_documents)

junk = st.one_of(
    st.none(),
    st.integers(),
    st.booleans(),
    st.floats(allow_nan=True),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
op_names = st.one_of(
    st.sampled_from(["KEEP", "UPDATE", "APPEND", "update", " append ", "keep", "DELETE", ""]),
    junk,
)
dict_ops = st.fixed_dictionaries(
    {"op": op_names},
    optional={
        "content": st.one_of(texts, junk),
        "items": st.one_of(st.lists(st.one_of(lines, junk), max_size=6), fragments, junk),
    },
)
section_ops = st.one_of(
    st.just(SectionOp.keep()),
    st.builds(SectionOp.update, texts),
    st.builds(SectionOp.append, st.lists(lines, max_size=6)),
)
any_op = st.one_of(dict_ops, section_ops, junk, st.sampled_from(["KEEP", "UPDATE"]))
op_keys = st.one_of(
    st.sampled_from(SECTIONS),
    st.sampled_from(["session title", "Bogus", "Key Facts and Decisions"]),
    st.integers(),
)
op_maps = st.one_of(st.none(), st.dictionaries(op_keys, any_op, max_size=9))
well_keyed_ops = st.dictionaries(st.sampled_from(SECTIONS), any_op)

_HEADING_LINE = re.compile(r"[ \t]*(#{1,6})[ \t]+(\S.*)")


def _bodies(document: str) -> dict[str, str]:
    """Every section's body, "" for an absent one (absent and empty read the same)."""
    parsed = parse_document(document)
    return {name: parsed.get(name, "") for name in SECTIONS}


def _headings(document: str) -> list[tuple[int, str]]:
    found = []
    for line in document.split("\n"):
        match = _HEADING_LINE.match(line)
        if match:
            found.append((len(match.group(1)), match.group(2).strip()))
    return found


@SETTINGS
@given(documents, op_maps)
def test_merge_never_raises_and_renders_the_seven_sections_in_order(
    document: str, ops: object
) -> None:
    result = merge(document, ops)  # type: ignore[arg-type]
    headings = _headings(result.document)
    top_level = [(level, title) for level, title in headings if level <= 2]
    assert top_level == [(1, "Working Memory")] + [(2, name) for name in SECTIONS]
    deeper_canonical = [t for level, t in headings if level > 2 and canonical_name(t)]
    assert deeper_canonical == []
    assert result.document.endswith("\n") and not result.document.endswith("\n\n")
    parsed = parse_document_detailed(result.document)
    assert list(parsed.bodies) == list(SECTIONS)
    assert parsed.extras == ()
    assert parsed.duplicates == ()


@SETTINGS
@given(documents, st.sampled_from(["none", "empty", "dicts", "section_ops"]))
def test_keep_all_returns_the_previous_bodies_byte_for_byte(document: str, form: str) -> None:
    forms: dict[str, dict[str, object] | None] = {
        "none": None,
        "empty": {},
        "dicts": {name: {"op": "KEEP"} for name in SECTIONS},
        "section_ops": {name: SectionOp.keep() for name in SECTIONS},
    }
    ops = forms[form]
    result = merge(document, ops)
    assert _bodies(result.document) == _bodies(document)


@SETTINGS
@given(canonical_documents)
def test_keep_all_returns_a_canonical_document_unchanged(document: str) -> None:
    assert merge(document, {name: SectionOp.keep() for name in SECTIONS}).document == document


@SETTINGS
@given(documents)
def test_reading_is_stable_under_rendering(document: str) -> None:
    bodies = _bodies(document)
    assert _bodies(render_document(bodies)) == bodies


@SETTINGS
@given(documents, well_keyed_ops)
def test_no_previous_line_of_errors_and_corrections_is_lost(
    document: str, ops: dict[str, object]
) -> None:
    old = parse_document(document).get(ERRORS, "")
    new = parse_document(merge(document, ops).document).get(ERRORS, "")
    if old:
        assert new == old or new.startswith(old + "\n")


@SETTINGS
@given(documents, well_keyed_ops)
def test_no_previous_path_of_files_and_context_is_lost(
    document: str, ops: dict[str, object]
) -> None:
    old = parse_document(document).get(FILES, "")
    new = parse_document(merge(document, ops).document).get(FILES, "")
    assert references(old) <= references(new)


@SETTINGS
@given(documents, well_keyed_ops)
def test_open_issues_are_kept_or_restored_while_unresolved(
    document: str, ops: dict[str, object]
) -> None:
    # Reference: restore-once (an item that already carries the marker may vanish). Ours: no
    # previous Open Issues item disappears unless it was marked resolved; every other item is
    # kept or restored, a restored line carries the marker once, and each restoration is in
    # a decision record.
    old = parse_document(document).get(ISSUES, "")
    result = merge(document, ops)
    new = parse_document(result.document).get(ISSUES, "")
    lowered = new.lower()
    recorded = {
        item
        for decision in result.decisions
        if decision.section == ISSUES
        for item in decision.items_restored
    }
    for item in bullet_items(old):
        if is_resolved(item):
            continue  # marked resolved: it may go
        snippet = issue_snippet(item)
        assert not snippet or snippet in lowered
    lines = set(bullet_items(new))
    for restored in recorded:
        assert RESTORE_MARKER not in restored
        assert f"{RESTORE_MARKER} {restored}" in lines


@SETTINGS
@given(documents, op_maps)
def test_merge_is_deterministic_and_leaves_its_inputs_alone(document: str, ops: object) -> None:
    snapshot = copy.deepcopy(ops)
    first = merge(document, ops)  # type: ignore[arg-type]
    second = merge(document, ops)  # type: ignore[arg-type]
    assert first == second
    assert repr(ops) == repr(snapshot)


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=600))
def test_parse_tool_arguments_never_raises_on_text(raw: str) -> None:
    parsed = parse_tool_arguments(raw)
    assert set(parsed.ops) == set(SECTIONS)
    assert all(op.kind in OpKind for op in parsed.ops.values())
    assert set(parsed.found) | set(parsed.defaulted) == set(SECTIONS)


_json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)


@SETTINGS
@given(st.one_of(_json_values, st.dictionaries(st.sampled_from(SECTIONS), dict_ops)), st.data())
def test_parse_tool_arguments_never_raises_on_broken_json(
    value: object, data: st.DataObject
) -> None:
    text = json.dumps({"sections": value}) if data.draw(st.booleans()) else json.dumps(value)
    cut = data.draw(st.integers(0, len(text)))
    noise = data.draw(st.text(alphabet='{}[]",:\\ x', max_size=4))
    for raw in (value, text[:cut], text[:cut] + noise + text[cut:], {"raw": text[:cut]}):
        parsed = parse_tool_arguments(raw)
        assert set(parsed.ops) == set(SECTIONS)


@SETTINGS
@given(st.dictionaries(st.sampled_from(SECTIONS), section_ops))
def test_parse_tool_arguments_reads_back_valid_arguments(ops: dict[str, SectionOp]) -> None:
    payload = json.dumps({"sections": {name: op.to_dict() for name, op in ops.items()}})
    parsed = parse_tool_arguments(payload)
    for name, op in ops.items():
        expected = merge_view(op)
        assert merge_view(parsed.ops[name]) == expected


def merge_view(op: SectionOp) -> SectionOp:
    """What an op means once read: blank UPDATEs are KEEP, blank APPEND items are dropped."""
    if op.kind == OpKind.UPDATE and not op.content.strip():
        return SectionOp.keep()
    if op.kind == OpKind.APPEND:
        kept = [item.replace("\r\n", "\n").replace("\r", "\n").strip() for item in op.items]
        kept = [item for item in kept if item]
        return SectionOp.append(kept) if kept else SectionOp.keep()
    if op.kind == OpKind.UPDATE:
        return SectionOp.update(op.content.replace("\r\n", "\n").replace("\r", "\n").strip())
    return op


@SETTINGS
@given(
    st.one_of(
        free_documents,
        st.text(max_size=300),
        st.dictionaries(st.sampled_from([*SECTIONS, "x"]), st.one_of(texts, junk)),
    )
)
def test_creation_normalization_either_succeeds_canonically_or_rejects(output: object) -> None:
    try:
        result = normalize_creation(output)
    except CreationRejected:
        return
    assert merge(result.document, None).document == result.document
    assert result.sections


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        texts,
        free_documents,
        st.text(max_size=200),
        st.text(alphabet=" \t\r\x0b\x0c\x1c\x85\xa0\u2028\u3000#-*1.)a\n", max_size=80),
    )
)
def test_counting_items_agrees_with_reading_them(text: str) -> None:
    assert count_items(text) == len(bullet_items(text))


@SETTINGS
@given(st.one_of(documents, st.text(alphabet=st.sampled_from([*_CHARS, "\n", "#"]), max_size=200)))
def test_a_document_has_a_section_exactly_when_it_is_a_working_memory(document: str) -> None:
    """Phase 2 reads the previous document once and asks its sections instead of
    ``is_working_memory`` (llm/chain.py): the two must agree on every text."""
    assert bool(parse_document_detailed(document).bodies) is is_working_memory(document)


@SETTINGS
@given(documents, op_maps)
def test_a_document_read_by_the_caller_merges_and_reminds_alike(document: str, ops: object) -> None:
    parsed = parse_document_detailed(document)
    assert merge(document, ops, parsed=parsed) == merge(document, ops)  # type: ignore[arg-type]
    assert section_reminders(document, bodies=parsed.bodies) == section_reminders(document)


@SETTINGS
@given(documents, op_maps)
def test_a_merges_sections_give_its_documents_abstract(document: str, ops: object) -> None:
    """Phase 2's completion takes the abstract from the merge's sections, not from reading
    the merged document again: the same line either way (also after a bound's cut)."""
    merged = merge(document, ops, limits=WmLimits(total_tokens=400, section_tokens=120))  # type: ignore[arg-type]
    assert abstract_of(merged.document, bodies=merged.sections) == abstract_of(merged.document)
    bounded = bound_document(document, WmLimits(total_tokens=300, section_tokens=80))
    assert abstract_of(bounded.document, bodies=bounded.sections) == abstract_of(bounded.document)
