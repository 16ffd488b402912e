"""Guards on proposed memory ops: no silent loss, every intervention recorded (wm_core)."""

from __future__ import annotations

from wm_core import (
    MemoryOp,
    MemoryOpKind,
    MemoryRecord,
    MemoryType,
    MemoryVerdict,
    guard_memory_ops,
    memory_key,
    missing_anchors,
)

EXISTING = (
    MemoryRecord("m1", MemoryType.PROFILE, "User is the platform lead at Northwind Traders."),
    MemoryRecord("m2", MemoryType.PREFERENCE, "User prefers tabs over spaces."),
    MemoryRecord(
        "m3", MemoryType.EVENT, "The ledger moved to Postgres on 2026-03-05 (3 days late)."
    ),
    MemoryRecord("m4", MemoryType.ENTITY, "ledgerd is the billing service, port 8443."),
)


def _verdicts(plan_decisions: object) -> list[tuple[int, MemoryVerdict]]:
    return [(d.op_index, d.verdict) for d in plan_decisions]  # type: ignore[attr-defined]


def test_duplicates_are_judged_by_the_one_memory_key() -> None:
    assert memory_key("  Uses  ＳＴＲＡＳＳＥ\tand ﬁle ") == "uses strasse and file"
    assert memory_key("Straße.") == memory_key("STRASSE")


def test_missing_anchors_are_the_names_dates_and_numbers_a_rewrite_lost() -> None:
    old = "The ledger moved to Postgres on 2026-03-05 (3 days late), owner Dana Whitfield."
    assert missing_anchors(old, old) == ()
    lost = missing_anchors(old, "The ledger moved to a new database, owner Dana.")
    assert {"postgres", "2026-03-05", "whitfield"} <= set(lost)


def test_a_retire_needs_a_reason_and_a_contradiction_in_the_archive() -> None:
    archive = "[u] I no longer prefer tabs; we switched the whole repo to spaces last week."
    ops = [
        MemoryOp(MemoryOpKind.RETIRE, target_ids=("m2",), reason=""),
        MemoryOp(MemoryOpKind.RETIRE, target_ids=("m1",), reason="the user changed jobs"),
        MemoryOp(MemoryOpKind.RETIRE, target_ids=("m2",), reason="the user is a vim fan"),
        MemoryOp(MemoryOpKind.RETIRE, target_ids=("m2",), reason="switched the repo to spaces"),
    ]
    plan = guard_memory_ops(ops, EXISTING, archive)
    assert _verdicts(plan.decisions) == [
        (0, MemoryVerdict.REFUSED),
        (1, MemoryVerdict.REFUSED),
        (2, MemoryVerdict.REFUSED),
        (3, MemoryVerdict.ACCEPTED),
    ]
    reasons = [d.reason for d in plan.decisions]
    assert "needs a reason" in reasons[0]
    assert "does not mention" in reasons[1]  # nothing about Northwind in the archive
    assert "not supported" in reasons[2]
    assert plan.ops == (ops[3],)
    assert len(plan.refused) == 3


def test_an_update_that_drops_a_name_date_or_number_is_refused() -> None:
    ops = [
        MemoryOp(MemoryOpKind.UPDATE, text="The ledger moved to Postgres.", target_ids=("m3",)),
        MemoryOp(MemoryOpKind.UPDATE, text="ledgerd is the billing service.", target_ids=("m4",)),
        MemoryOp(MemoryOpKind.UPDATE, text="User prefers spaces over tabs.", target_ids=("m2",)),
    ]
    plan = guard_memory_ops(ops, EXISTING, "")
    assert _verdicts(plan.decisions) == [
        (0, MemoryVerdict.REFUSED),
        (1, MemoryVerdict.REFUSED),
        (2, MemoryVerdict.ACCEPTED),
    ]
    assert "2026-03-05" in plan.decisions[0].reason and "3 days" in plan.decisions[0].reason
    assert "8443" in plan.decisions[1].reason
    assert plan.ops[0].type is MemoryType.PREFERENCE  # the target's type, when none was given


def test_merge_keeps_every_anchor_and_needs_known_distinct_ids() -> None:
    good = MemoryOp(
        MemoryOpKind.MERGE,
        text="ledgerd (port 8443) took over the ledger, moved to Postgres on 2026-03-05, "
        "3 days late.",
        target_ids=("m3", "m4"),
    )
    lossy = MemoryOp(MemoryOpKind.MERGE, text="ledgerd runs the ledger.", target_ids=("m3", "m4"))
    single = MemoryOp(MemoryOpKind.MERGE, text="x", target_ids=("m3", "m3"))
    unknown = MemoryOp(MemoryOpKind.MERGE, text="x", target_ids=("m3", "nope"))
    plan = guard_memory_ops([lossy, single, unknown, good], EXISTING, "")
    assert _verdicts(plan.decisions) == [
        (0, MemoryVerdict.REFUSED),
        (1, MemoryVerdict.REFUSED),
        (2, MemoryVerdict.REFUSED),
        (3, MemoryVerdict.ACCEPTED),
    ]
    assert "unknown memory id" in plan.decisions[2].reason
    assert plan.ops[0].type is MemoryType.EVENT


def test_unknown_ids_and_a_second_change_of_one_memory_are_refused() -> None:
    ops = [
        MemoryOp(MemoryOpKind.UPDATE, text="x", target_ids=("m9",)),
        MemoryOp(MemoryOpKind.UPDATE, text="User prefers spaces.", target_ids=("m2",)),
        MemoryOp(MemoryOpKind.UPDATE, text="User prefers tabs again.", target_ids=("m2",)),
    ]
    plan = guard_memory_ops(ops, EXISTING, "")
    assert _verdicts(plan.decisions) == [
        (0, MemoryVerdict.REFUSED),
        (1, MemoryVerdict.ACCEPTED),
        (2, MemoryVerdict.REFUSED),
    ]
    assert "already changed by op 1" in plan.decisions[2].reason


def test_duplicates_by_normalized_text_are_deduplicated() -> None:
    ops = [
        MemoryOp(MemoryOpKind.CREATE, MemoryType.PREFERENCE, "user PREFERS tabs  over spaces."),
        MemoryOp(MemoryOpKind.CREATE, MemoryType.DECISION, "Use Redis.", source_message_ids=("a",)),
        MemoryOp(MemoryOpKind.CREATE, MemoryType.DECISION, "use redis.", source_message_ids=("b",)),
        MemoryOp(MemoryOpKind.UPDATE, text="User prefers tabs over spaces.", target_ids=("m2",)),
        MemoryOp(MemoryOpKind.CREATE, None, "no type"),
    ]
    plan = guard_memory_ops(ops, EXISTING, "")
    assert _verdicts(plan.decisions) == [
        (0, MemoryVerdict.DEDUPLICATED),
        (1, MemoryVerdict.ACCEPTED),
        (2, MemoryVerdict.DEDUPLICATED),
        (3, MemoryVerdict.DEDUPLICATED),
        (4, MemoryVerdict.REFUSED),
    ]
    assert "m2" in plan.decisions[0].reason
    assert len(plan.ops) == 1
    assert plan.ops[0].source_message_ids == ("a", "b")  # collapsed into the first
