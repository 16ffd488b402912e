"""Pending items: refused items kept until the working memory holds them (wm_core)."""

from __future__ import annotations

from wm_core import (
    KEY_FACTS,
    Decision,
    Guard,
    PendingItem,
    carry_pending,
    pending_reminder,
    refused_items,
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


def test_duplicates_are_kept_once_and_the_oldest_go_first_over_the_limit() -> None:
    items = [
        PendingItem(KEY_FACTS, f"Fact {n} on 2025-01-{n + 1:02d}", "bound", n) for n in range(10)
    ]
    kept, dropped = carry_pending(items[:6], [*items[4:], items[0]], "", 5)
    assert dropped == 5 and [i.archive_seq for i in kept] == [5, 6, 7, 8, 9]


def test_the_reminder_lists_each_item_with_its_section() -> None:
    assert pending_reminder([]) == ""
    text = pending_reminder([PendingItem(KEY_FACTS, "Port 8443", "key_facts")])
    assert "<pending_items>" in text and f"- [{KEY_FACTS}] Port 8443" in text
    assert "Not yet in the working memory" in text
