"""Window accounting: pure rules over token counts and positions (no I/O).

pending_tokens is kept in O(1) per message by ``pending_delta`` and re-derivable at any time by
``rebuild_rule``; the services fetch the rows, these functions decide.
"""

from __future__ import annotations

from wm_core import Message


def rebuild_rule(tokens: list[int], keep: int) -> tuple[int, int]:
    """The reference rebuild rule: (pending, live) of the live messages' token counts, in
    order; keep 0 → all of them are pending, else the first (total − keep)."""
    live = sum(tokens)
    keep = max(0, int(keep))
    if keep == 0:
        return live, live
    return sum(tokens[: max(0, len(tokens) - keep)]), live


def pending_delta(
    first_live: int, next_pos: int, keep: int, fresh: list[tuple[int, Message]]
) -> tuple[int, tuple[int, int] | None]:
    """Tokens that cross out of the keep window because of this batch: O(batch).

    With keep k, the live messages outside the window are those at positions up to
    last - k. The batch moves ``last`` forward, so exactly the positions in
    (old_last - k, new_last - k] cross out: some in the batch (returned as a sum), the rest
    stored already (returned as the position range whose tokens must be added).
    """
    if not fresh:
        return 0, None
    if keep <= 0:
        return sum(m.estimated_tokens for _, m in fresh), None
    old_last = next_pos - 1
    new_last = fresh[-1][0]
    lo = max(old_last - keep + 1, first_live)
    hi = new_last - keep
    if hi < lo:
        return 0, None
    in_batch = sum(m.estimated_tokens for pos, m in fresh if lo <= pos <= hi)
    return in_batch, ((lo, min(hi, old_last)) if lo <= old_last else None)
