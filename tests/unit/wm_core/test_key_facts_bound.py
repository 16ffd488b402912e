"""Key Facts stays bounded under a model that never consolidates, and loses nothing (issue 36).

200 commits of one APPENDed decision each, through the real merge and guards, with the
pending items carried from commit to commit as Phase 2 carries them: the section stops one
APPEND past its emergency size (50 bullets) and every decision the section refused is a
pending item, so it is shown to the model in the next update prompt and handed to the
long-term memory extraction.
"""

from __future__ import annotations

from wmcore_helpers import FACTS, append, items, update, wm

from wm_core import (
    Guard,
    PendingItem,
    carry_pending,
    estimate_tokens,
    merge,
    pending_reminder,
    refused_items,
    unfold_pending,
)
from wm_core._guards.key_facts import SENTINEL
from wm_core._tokens.limits import EMERGENCY_BULLETS, EMERGENCY_TOKENS, OVERSIZED_APPEND_CAP

ROUNDS = 200
PENDING_LIMIT = 30  # the server's default (max_pending_items)


def decision(i: int) -> str:
    return f"Decision {i}: keep module_{i}.py because contract {i} is stable."


def _replay(rounds: int) -> tuple[str, tuple[PendingItem, ...], list[int]]:
    document = wm(facts="- Decision 0: keep the current WM shape.")
    pending: tuple[PendingItem, ...] = ()
    sizes: list[int] = []
    for i in range(1, rounds + 1):
        result = merge(document, {FACTS: append(decision(i))})
        document = result.document
        pending, dropped = carry_pending(
            pending, refused_items(result.decisions, i), document, PENDING_LIMIT
        )
        assert dropped == 0
        sizes.append(len(items(document, FACTS)))
    return document, pending, sizes


def test_200_appends_leave_key_facts_within_its_emergency_bound() -> None:
    document, _, sizes = _replay(ROUNDS)
    facts = items(document, FACTS)
    bound = EMERGENCY_BULLETS + OVERSIZED_APPEND_CAP + 1  # one capped APPEND and the sentinel
    assert max(sizes) <= bound
    assert sizes[-1] == sizes[60]  # it stopped growing long before the 200th commit
    assert estimate_tokens("\n".join(facts)) <= EMERGENCY_TOKENS
    assert facts.count(SENTINEL) == 1


def test_every_refused_decision_stays_reachable_as_a_pending_item() -> None:
    document, pending, _ = _replay(ROUNDS)
    held = "\n".join(items(document, FACTS))
    waiting = [item.text for item in unfold_pending(pending)]
    reminder = pending_reminder(pending)
    for i in range(1, ROUNDS + 1):
        text = decision(i)
        assert text in held or text in waiting, i
        assert text in held or text in reminder, i  # and the model is shown it
    assert len(pending) <= PENDING_LIMIT


def test_each_refusal_is_a_decision() -> None:
    document, _, _ = _replay(55)
    result = merge(document, {FACTS: append(decision(999))})
    assert result.document == document
    (refusal,) = result.decisions
    assert (refusal.guard, refusal.applied, refusal.items_refused) == (
        Guard.KEY_FACTS,
        "KEEP",
        (decision(999),),
    )


def test_a_consolidation_still_opens_the_section_again() -> None:
    document, _, _ = _replay(80)
    topics = "\n".join(
        f"- Decisions {n}0-{n}9: keep module_{n}0.py to module_{n}9.py because their contracts "
        f"are stable (Decision {n}0 to Decision {n}9)"
        for n in range(0, 8)
    )
    consolidated = merge(document, {FACTS: update(topics)})
    assert SENTINEL not in consolidated.document
    after = merge(consolidated.document, {FACTS: append(decision(81))})
    assert decision(81) in items(after.document, FACTS)


def test_a_rejected_consolidation_under_the_sentinel_salvages_nothing() -> None:
    """A model that keeps sending failing rewrites cannot grow the section either."""
    document, _, _ = _replay(80)
    result = merge(document, {FACTS: update(f"- Everything is fine.\n- {decision(500)}")})
    assert result.document == document
    (rejection,) = result.decisions
    assert rejection.applied == "KEEP"
    assert decision(500) in rejection.items_refused
    assert "nothing is salvaged" in rejection.reason
