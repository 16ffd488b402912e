"""Window accounting: ingest's O(batch) pending_delta always agrees with the rebuild rule."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from wm_core import Message, Role, TextPart, pending_delta, rebuild_rule

SETTINGS = settings(max_examples=300, deadline=None)


def _message(tokens: int) -> Message:
    return Message(f"m{tokens}", Role.USER, (TextPart("x"),), tokens)


def test_rebuild_rule_keeps_the_last_messages_out_of_pending() -> None:
    assert rebuild_rule([1, 2, 3, 4], 0) == (10, 10)
    assert rebuild_rule([1, 2, 3, 4], 1) == (6, 10)
    assert rebuild_rule([1, 2, 3, 4], 3) == (1, 10)
    assert rebuild_rule([1, 2, 3, 4], 9) == (0, 10)
    assert rebuild_rule([], 2) == (0, 0)
    assert rebuild_rule([5, 5], -3) == (10, 10)  # a negative keep holds nothing back


def test_pending_delta_splits_batch_and_stored_parts() -> None:
    # Stored positions 0..4, keep 3: positions 0 and 1 are pending. A batch of 3 (5..7)
    # pushes 2, 3, 4 out of the window: all three are stored already.
    fresh = [(5, _message(10)), (6, _message(20)), (7, _message(30))]
    assert pending_delta(0, 5, 3, fresh) == (0, (2, 4))
    # A batch of 5 (5..9) pushes out 2..6: 2..4 stored, 5 and 6 in the batch.
    fresh = [(p, _message(p)) for p in range(5, 10)]
    assert pending_delta(0, 5, 3, fresh) == (11, (2, 4))
    assert pending_delta(0, 5, 0, fresh) == (35, None)  # keep 0: the whole batch is pending
    assert pending_delta(0, 5, 3, []) == (0, None)
    assert pending_delta(0, 0, 8, fresh[:2]) == (0, None)  # still inside the window


@SETTINGS
@given(
    st.lists(st.lists(st.integers(0, 50), max_size=6), max_size=8),
    st.integers(0, 12),
    st.integers(0, 5),
)
def test_accumulated_deltas_equal_the_rebuild_rule(
    batches: list[list[int]], keep: int, archived: int
) -> None:
    """Ingesting batch after batch keeps pending equal to a rebuild over the live messages."""
    stored: list[int] = [1] * archived  # archived messages before the first live position
    first_live = archived
    pending = 0
    for batch in batches:
        next_pos = len(stored)
        fresh = [(next_pos + i, _message(t)) for i, t in enumerate(batch)]
        in_batch, stored_range = pending_delta(first_live, next_pos, keep, fresh)
        if stored_range is not None:
            lo, hi = stored_range
            assert first_live <= lo <= hi < next_pos
            in_batch += sum(stored[lo : hi + 1])
        pending += in_batch
        stored.extend(batch)
        assert (pending, sum(stored[first_live:])) == rebuild_rule(stored[first_live:], keep)
