"""What leaves the pending items at their token bound, and the memories it becomes (wm_core:
settle_pending, safekeeping_ops)."""

from __future__ import annotations

from wm_core import (
    KEPT_FROM_PENDING,
    KEY_FACTS,
    MemoryOp,
    MemoryOpKind,
    MemoryRecord,
    MemoryType,
    PendingItem,
    carry_pending,
    estimate_tokens,
    guard_memory_ops,
    safekeeping_ops,
    settle_pending,
)

ITEMS = [
    PendingItem(KEY_FACTS, f"Port {8400 + n} opened under OPS-{700 + n}", "key_facts", n + 1)
    for n in range(10)
]


def test_the_items_over_the_token_bound_leave_oldest_first_and_are_named() -> None:
    cost = estimate_tokens(ITEMS[0].text) + 1
    kept, dropped = settle_pending(ITEMS[:6], ITEMS[6:], "", 30, max_tokens=cost * 4)
    assert dropped == tuple(ITEMS[:6])
    assert kept == tuple(ITEMS[6:])
    assert carry_pending(ITEMS[:6], ITEMS[6:], "", 30, cost * 4) == (kept, 6)


def test_folded_items_leave_as_themselves_with_their_section() -> None:
    kept, dropped = settle_pending(ITEMS, [], "", 4, max_tokens=40)
    assert dropped and all(d.section == KEY_FACTS for d in dropped)
    assert [d.text for d in dropped] == [i.text for i in ITEMS[: len(dropped)]]
    shown = "\n".join(item.text for item in kept)
    assert all(item.text in shown or item in dropped for item in ITEMS)


def test_every_dropped_item_not_already_held_becomes_one_memory_with_its_origin() -> None:
    model = MemoryOp(MemoryOpKind.CREATE, MemoryType.EVENT, "Opened port 8401 (OPS-701).")
    existing = [MemoryRecord("m1", MemoryType.DECISION, "Port 8402 opened under OPS-702")]
    ops = safekeeping_ops([*ITEMS[:4], ITEMS[3]], [model], existing)
    assert [op.text for op in ops] == [ITEMS[0].text, ITEMS[3].text]
    assert all(op.kind is MemoryOpKind.CREATE and op.type is MemoryType.DECISION for op in ops)
    assert ops[0].fields == {
        "section": KEY_FACTS,
        "kept_from": KEPT_FROM_PENDING,
        "refused_in_archive": "1",
    }
    # The guards accept them: their text is the archive's pending item.
    plan = guard_memory_ops(ops, existing, "\n".join(i.text for i in ITEMS))
    assert len(plan.ops) == 2 and not plan.refused


def test_an_item_of_another_section_is_an_entity_and_a_retired_text_holds_nothing() -> None:
    item = PendingItem("Files & Context", "ledger/importer.py — the CSV reader", "bound", 0)
    retire = MemoryOp(MemoryOpKind.RETIRE, text=item.text, target_ids=("m1",), reason="gone")
    (op,) = safekeeping_ops([item], [retire], [])
    assert op.type is MemoryType.ENTITY and "refused_in_archive" not in op.fields
