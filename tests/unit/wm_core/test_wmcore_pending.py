"""Pending items: refused items kept until the working memory holds them (wm_core)."""

from __future__ import annotations

from wm_core import (
    KEY_FACTS,
    Decision,
    Guard,
    PendingItem,
    carry_pending,
    estimate_tokens,
    pending_reminder,
    refused_items,
    unfold_pending,
)
from wm_core import (
    PENDING_OVERFLOW as OVERFLOW,
)


def _refusing(*items: str) -> Decision:
    return Decision(
        KEY_FACTS, "APPEND", "APPEND", Guard.KEY_FACTS, "emergency", items_refused=items
    )


def test_refused_items_come_from_every_decision_without_the_sentinel() -> None:
    decisions = [
        _refusing("Port 8443 chosen on 2025-03-01", "⚠️ [CONSOLIDATION REQUIRED: rewrite]"),
        Decision(
            "Files & Context", "APPEND", "APPEND", Guard.BOUND, "cut", items_refused=("x" * 900,)
        ),
    ]
    decisions.append(
        Decision("Current State", "UPDATE", "UPDATE", Guard.BOUND, "cut", items_refused=("tail",))
    )
    found = refused_items(decisions, 7)  # a cut Current State is superseded, not owed
    assert [(i.section, i.source, i.archive_seq) for i in found] == [
        (KEY_FACTS, "key_facts", 7),
        ("Files & Context", "bound", 7),
    ]
    assert len(found[1].text) == 500


def test_an_item_leaves_once_the_document_holds_its_text_or_all_its_details() -> None:
    old = PendingItem(KEY_FACTS, "Port 8443 chosen on 2025-03-01", "key_facts", 1)
    other = PendingItem(KEY_FACTS, "Retries use Tenacity with 5 attempts", "key_facts", 1)
    kept, dropped = carry_pending([old, other], [], "- Retries use tenacity with 5 attempts", 30)
    assert kept == (old,) and dropped == 0
    consolidated = "- Decisions of 2025-03-01: port 8443 chosen for the API"
    assert carry_pending([old], [], consolidated, 30) == ((), 0)


def test_an_item_whose_names_are_in_the_document_but_not_its_ticket_or_value_stays() -> None:
    item = PendingItem(
        KEY_FACTS, "Aiko Sato set work_mem on payouts to 16 MB under HLM-4203", "bound", 3
    )
    document = "- Aiko Sato set lock_timeout on holds to 40 ms under HLM-4110"
    assert carry_pending([item], [], document, 30) == ((item,), 0)
    consolidated = "- **Tuning** (Aiko Sato): payouts work_mem 16 MB (HLM-4203)"
    assert carry_pending([item], [], consolidated, 30) == ((), 0)


def test_duplicates_are_kept_once_and_the_oldest_are_folded_into_one_item_over_the_limit() -> None:
    items = [
        PendingItem(KEY_FACTS, f"Fact {n} on 2025-01-{n + 1:02d}", "bound", n) for n in range(10)
    ]
    kept, dropped = carry_pending(items[:6], [*items[4:], items[0]], "", 5)
    assert dropped == 0 and len(kept) == 5
    overflow, *rest = kept
    assert [i.archive_seq for i in rest] == [6, 7, 8, 9]
    assert (overflow.section, overflow.source) == ("", OVERFLOW)
    assert overflow.text.split("\n") == [f"[{KEY_FACTS}] {items[n].text}" for n in range(6)]
    # Folded items stay in the prompt, one line each, and readers get them one by one.
    assert f"- [{KEY_FACTS}] Fact 0 on 2025-01-01" in pending_reminder(kept)
    assert [(i.section, i.text) for i in unfold_pending(kept)] == [
        (KEY_FACTS, item.text) for item in items
    ]


NAMES = ("Alice", "Bruno", "Chen", "Dana")


def test_a_folded_item_leaves_on_its_own_once_the_document_holds_it() -> None:
    items = [
        PendingItem(KEY_FACTS, f"{name} approved the rollback", "bound", n)
        for n, name in enumerate(NAMES)
    ]
    folded, _ = carry_pending(items, [], "", 2)
    assert len(folded) == 2 and folded[0].source == OVERFLOW
    kept, dropped = carry_pending(folded, [], "- Bruno approved the rollback", 2)
    assert dropped == 0
    assert kept[0].text.split("\n") == [
        f"[{KEY_FACTS}] Alice approved the rollback",
        f"[{KEY_FACTS}] Chen approved the rollback",
    ]
    assert kept[0].source == OVERFLOW and kept[1:] == (items[3],)
    # Nothing left beyond the limit: the remaining folded line comes back as an item.
    again, _ = carry_pending(kept, [], "- Chen approved the rollback", 2)
    assert [(i.text, i.source) for i in again] == [
        ("Alice approved the rollback", OVERFLOW),
        ("Dana approved the rollback", "bound"),
    ]


def test_only_past_the_token_budget_are_the_oldest_dropped_and_counted() -> None:
    items = [PendingItem(KEY_FACTS, f"Fact {n}: " + "x" * 200, "bound", n) for n in range(20)]
    kept, dropped = carry_pending(items, [], "", 5, max_tokens=600)
    lines = [line for i in kept for line in i.text.split("\n")]
    assert dropped > 0 and len(lines) == 20 - dropped
    assert lines[-1].startswith("Fact 19") and f"Fact {dropped}:" in lines[0]
    assert sum(estimate_tokens(line) + 1 for line in lines) <= 600
    assert carry_pending(items, [], "", 0) == ((), 20)


def test_the_reminder_lists_each_item_with_its_section() -> None:
    assert pending_reminder([]) == ""
    text = pending_reminder([PendingItem(KEY_FACTS, "Port 8443", "key_facts")])
    assert "<pending_items>" in text and f"- [{KEY_FACTS}] Port 8443" in text
    assert "Not yet in the working memory" in text
