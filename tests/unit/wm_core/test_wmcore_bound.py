"""The hard bound on the working memory (wm_core merge within WmLimits)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from wm_core import (
    CURRENT_STATE,
    ERRORS_CORRECTIONS,
    FILES_CONTEXT,
    KEY_FACTS,
    SECTIONS,
    Guard,
    SectionOp,
    WmLimits,
    bound_document,
    estimate_tokens,
    merge,
    parse_document,
    render_document,
)

LIMITS = WmLimits()


def _base() -> str:
    bodies = {name: "" for name in SECTIONS}
    bodies[SECTIONS[0]] = "CSV importer"
    bodies[CURRENT_STATE] = "Dates parse."
    bodies[KEY_FACTS] = "- Dates use DD.MM.YYYY"
    bodies[FILES_CONTEXT] = "- `src/importer.py`: the importer"
    bodies[ERRORS_CORRECTIONS] = "- ValueError on 31.01.2025: ISO only"
    return render_document(bodies)


def _bound_decisions(result: object) -> list[object]:
    return [d for d in result.decisions if d.guard is Guard.BOUND]  # type: ignore[attr-defined]


def test_a_2mb_update_is_cut_to_the_section_budget_keeping_its_start() -> None:
    huge = "\n".join(f"Step {n}: still working on the importer" for n in range(60_000))
    result = merge(_base(), {CURRENT_STATE: SectionOp.update(huge)})
    body = parse_document(result.document)[CURRENT_STATE]
    assert estimate_tokens(body) <= LIMITS.section_tokens
    assert body.startswith("Step 0:")
    assert estimate_tokens(result.document) <= LIMITS.total_tokens
    (cut,) = _bound_decisions(result)
    assert cut.section == CURRENT_STATE and cut.applied == "UPDATE"
    assert len(cut.items_refused) == LIMITS.record_items  # the record is bounded too
    assert "line(s) not stored" in cut.reason


def test_a_single_huge_line_keeps_its_head() -> None:
    result = merge(_base(), {CURRENT_STATE: SectionOp.update("x" * 2_000_000)})
    body = parse_document(result.document)[CURRENT_STATE]
    assert body.endswith("[…]") and estimate_tokens(body) <= LIMITS.section_tokens


def test_3000_appended_files_keep_every_old_line_and_stop_at_the_budget() -> None:
    items = tuple(f"`src/module_{n}.py`: module {n}" for n in range(3_000))
    result = merge(_base(), {FILES_CONTEXT: SectionOp.append(items)})
    body = parse_document(result.document)[FILES_CONTEXT]
    assert "src/importer.py" in body and "src/module_0.py" in body
    assert estimate_tokens(body) <= LIMITS.section_tokens
    (cut,) = _bound_decisions(result)
    assert cut.items_refused[0].startswith("- `src/module_")
    assert "src/module_2999.py" not in body


def test_every_section_at_once_stays_within_the_total() -> None:
    ops = {
        name: SectionOp.update("\n".join(f"- {name} item {n}" for n in range(3_000)))
        for name in SECTIONS
    }
    result = merge(_base(), ops)
    assert estimate_tokens(result.document) <= LIMITS.total_tokens
    for name, body in parse_document(result.document).items():
        assert estimate_tokens(body) <= LIMITS.for_section(name)
    # What the guards protect was kept before anything new.
    assert "ValueError on 31.01.2025" in result.document
    assert "src/importer.py" in result.document


def test_key_facts_has_a_ceiling_above_which_only_the_sentinel_is_added() -> None:
    document = _base()
    sizes = []
    for round_ in range(80):  # a model that never consolidates
        facts = tuple(
            f"Run {round_} fact {k}: port {8000 + round_ * 10 + k} on 2025-03-{k + 1:02d}"
            for k in range(6)
        )
        document = merge(document, {KEY_FACTS: SectionOp.append(facts)}).document
        sizes.append(estimate_tokens(parse_document(document)[KEY_FACTS]))
    body = parse_document(document)[KEY_FACTS]
    assert max(sizes) <= LIMITS.key_facts_tokens
    assert "CONSOLIDATION REQUIRED" in body
    before = document
    after = merge(before, {KEY_FACTS: SectionOp.append(("Brand new fact 99999 on 2026-01-01",))})
    assert after.document == before  # at the ceiling nothing gets in
    assert any(d.items_refused for d in after.decisions)


def test_within_the_bound_nothing_changes() -> None:
    result = merge(_base(), {CURRENT_STATE: SectionOp.update("Dates parse; next: duplicates.")})
    assert not _bound_decisions(result)


def test_a_created_document_is_bounded_too() -> None:
    bodies = {name: f"{name} text" for name in SECTIONS}
    bodies[CURRENT_STATE] = "y " * 1_000_000
    result = bound_document(render_document(bodies))
    assert estimate_tokens(result.document) <= LIMITS.total_tokens
    assert [d.section for d in result.decisions] == [CURRENT_STATE]
    small = render_document({name: "ok" for name in SECTIONS})
    assert bound_document(small).document == small


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(SECTIONS),
    st.lists(st.text(min_size=1, max_size=3_000), min_size=1, max_size=40),
    st.booleans(),
    st.integers(1_000, 12_000),
)
def test_any_answer_stays_within_any_limits(
    name: str, items: list[str], update: bool, total: int
) -> None:
    limits = WmLimits(total_tokens=total, section_tokens=400, key_facts_tokens=600)
    op = SectionOp.update("\n".join(items)) if update else SectionOp.append(tuple(items))
    result = merge(_base(), {name: op}, limits)
    for section, body in parse_document(result.document).items():
        assert estimate_tokens(body) <= max(
            limits.for_section(section), estimate_tokens(parse_document(_base())[section])
        )
