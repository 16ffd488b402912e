"""How a session's token counters move: the keep window and what lies outside it.

``pending_tokens`` (the tokens a commit would archive) is kept current on every ingest so that
GetSession and the auto-commit check never scan the messages. Both engines apply the same
arithmetic, and a repair (``rebuild_rule``) must agree with what ingest accumulated, so the
two rules live side by side here, free of any storage.
"""

from __future__ import annotations

from collections.abc import Sequence

from wm_core._messages import Message


def rebuild_rule(tokens: Sequence[int], keep: int) -> tuple[int, int]:
    """(pending, live) from the live messages' token counts, in order.

    This is the reference's rebuild rule, the ground truth that the incremental counters of
    ``pending_delta`` must always equal: keep 0 means nothing is held back, so every live
    token is pending; otherwise the first (total − keep) messages are.
    """
    live = sum(tokens)
    keep = max(0, int(keep))
    if keep == 0:
        return live, live
    return sum(tokens[: max(0, len(tokens) - keep)]), live


def pending_delta(
    first_live: int, next_pos: int, keep: int, fresh: Sequence[tuple[int, Message]]
) -> tuple[int, tuple[int, int] | None]:
    """Tokens that cross out of the keep window because of this batch, in O(batch).

    Recomputing the rebuild rule on every ingest would read the whole live window. With keep
    k, the live messages outside the window are those at positions up to last - k. A batch
    moves ``last`` forward, so exactly the positions in (old_last - k, new_last - k] cross
    out: some of them are in the batch (returned as a sum), the rest are stored already
    (returned as the inclusive position range whose stored tokens the caller must add, or
    None). ``fresh`` holds the batch's (position, message) pairs in position order.
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
