"""The commit split boundary (wm_core.split_boundary) against a brute-force definition.

The brute force states the rule over the whole session at once: start at the keep window,
and while a kept tool result answers a call (its latest stored call) before the boundary,
move the boundary back to that call, never below the first live position. The pure function
must give the same answer while reading only the rows it asks for, whether a store hands it
the calls with the rows or answers lookups from an index.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from wm_core import NeedRows, SplitRow, split_boundary

SETTINGS = settings(max_examples=400, deadline=None)


@dataclass
class Stored:
    """A session's stored messages (archived and live), reduced to their tool ids."""

    rows: list[SplitRow]
    first: int
    reads: list[tuple[int, int]] = field(default_factory=list)
    lookups: list[frozenset[str]] = field(default_factory=list)

    @property
    def next_pos(self) -> int:
        return len(self.rows)

    def latest_call(self, tool_id: str) -> int | None:
        calls = [r.position for r in self.rows if tool_id in r.tool_use_ids]
        return max(calls) if calls else None


def brute_force(stored: Stored, keep: int) -> int:
    boundary = max(stored.first, stored.next_pos - keep)
    while True:
        kept = stored.rows[boundary:] if boundary < stored.next_pos else []
        calls = [stored.latest_call(t) for r in kept for t in r.tool_result_ids]
        earliest = min([c for c in calls if c is not None], default=boundary)
        moved = max(stored.first, min(boundary, earliest))
        if moved == boundary:
            return boundary
        boundary = moved


def drive(stored: Stored, keep: int, with_calls: bool) -> int:
    """A store's loop: fetch what NeedRows asks for, call again."""
    rows: list[SplitRow] = []
    calls: dict[str, int | None] = {}
    since: int | None = None
    for _ in range(10_000):
        answer = split_boundary(stored.first, stored.next_pos, keep, rows, since, calls)
        if not isinstance(answer, NeedRows):
            return answer
        if answer.since < answer.until:
            stored.reads.append((answer.since, answer.until))
            for row in stored.rows[answer.since : answer.until]:
                uses = row.tool_use_ids if with_calls else ()
                if uses or row.tool_result_ids:
                    rows.append(SplitRow(row.position, uses, row.tool_result_ids))
            since = answer.since
        if answer.calls:
            stored.lookups.append(answer.calls)
            calls.update({t: stored.latest_call(t) for t in answer.calls})
        assert answer.since < answer.until or answer.calls, answer
    raise AssertionError("split_boundary never answered")


IDS = st.sampled_from(["a", "b", "c", "d", "e", "f"])


@st.composite
def sessions(draw: st.DrawFn) -> tuple[Stored, int]:
    count = draw(st.integers(0, 30))
    rows = [
        SplitRow(
            p,
            tuple(draw(st.lists(IDS, max_size=2))),
            tuple(draw(st.lists(IDS, max_size=2))),
        )
        for p in range(count)
    ]
    first = draw(st.integers(0, count))
    keep = draw(st.integers(0, count + 3))
    return Stored(rows, first), keep


@SETTINGS
@given(sessions(), st.booleans())
def test_same_boundary_as_the_brute_force(session: tuple[Stored, int], with_calls: bool) -> None:
    stored, keep = session
    assert drive(stored, keep, with_calls) == brute_force(stored, keep)


@SETTINGS
@given(sessions(), st.booleans())
def test_no_kept_result_lacks_its_live_call(session: tuple[Stored, int], with_calls: bool) -> None:
    stored, keep = session
    boundary = drive(stored, keep, with_calls)
    assert stored.first <= boundary <= max(stored.first, stored.next_pos)
    for row in stored.rows[boundary:]:
        for tool_id in row.tool_result_ids:
            call = stored.latest_call(tool_id)
            assert call is None or call >= boundary or boundary == stored.first


@SETTINGS
@given(sessions(), st.booleans())
def test_reads_only_rows_it_may_keep(session: tuple[Stored, int], with_calls: bool) -> None:
    stored, keep = session
    boundary = drive(stored, keep, with_calls)
    # Each range is read once, none below the boundary it settles on or below first.
    reads = sorted(stored.reads)
    assert all(lo >= max(stored.first, boundary) for lo, _ in reads)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(reads))


def _pairs(count: int) -> list[SplitRow]:
    """An agent loop: assistant calls tool i, the next message answers it."""
    rows = []
    for p in range(count):
        tid = f"t{p // 2}"
        rows.append(SplitRow(p, (tid,), ()) if p % 2 == 0 else SplitRow(p, (), (tid,)))
    return rows


def test_a_pair_across_the_window_moves_the_boundary_to_the_call() -> None:
    stored = Stored(_pairs(1000), first=0)
    assert drive(stored, keep=5, with_calls=False) == 994  # 995 answers the call at 994
    assert stored.reads == [(995, 1000), (994, 995)]


def test_usual_case_reads_the_keep_window_and_one_lookup() -> None:
    stored = Stored(_pairs(1000), first=0)
    assert drive(stored, keep=6, with_calls=False) == 994
    assert stored.reads == [(994, 1000)]
    assert stored.lookups == [frozenset({"t497", "t498", "t499"})]


def test_calls_in_the_rows_need_no_lookup() -> None:
    stored = Stored(_pairs(1000), first=0)
    assert drive(stored, keep=6, with_calls=True) == 994
    assert stored.lookups == []


def test_an_unmatched_result_does_not_move_the_boundary() -> None:
    rows = [SplitRow(p, (), ()) for p in range(10)]
    rows[8] = SplitRow(8, (), ("ghost",))
    assert drive(Stored(rows, first=2), keep=3, with_calls=False) == 7


def test_a_result_whose_call_is_archived_keeps_everything() -> None:
    rows = [SplitRow(p, (), ()) for p in range(10)]
    rows[1] = SplitRow(1, ("old",), ())
    rows[8] = SplitRow(8, (), ("old",))
    assert drive(Stored(rows, first=4), keep=3, with_calls=False) == 4


def test_a_reused_id_points_at_its_latest_call() -> None:
    rows = [SplitRow(p, (), ()) for p in range(10)]
    rows[2] = SplitRow(2, ("x",), ())
    rows[5] = SplitRow(5, ("x",), ())
    rows[8] = SplitRow(8, (), ("x",))
    for with_calls in (False, True):
        assert drive(Stored(rows, first=0), keep=3, with_calls=with_calls) == 5


def test_chains_move_the_boundary_step_by_step() -> None:
    # 9 answers 6, whose message also answers 3's call: both pairs stay whole.
    rows = [SplitRow(p, (), ()) for p in range(10)]
    rows[3] = SplitRow(3, ("a",), ())
    rows[6] = SplitRow(6, ("b",), ("a",))
    rows[9] = SplitRow(9, (), ("b",))
    assert drive(Stored(rows, first=1), keep=2, with_calls=False) == 3


def test_edges_need_no_rows() -> None:
    assert split_boundary(3, 10, 0) == 10  # keep 0: everything is archived
    assert split_boundary(3, 10, 7) == 3  # the window covers every live message
    assert split_boundary(3, 10, 50) == 3
    assert split_boundary(5, 5, 2) == 5  # no live messages
    assert split_boundary(3, 10, 4) == NeedRows(6, 10, frozenset())


# --- turns (issue 18, point 2) -----------------------------------------------------------------


def test_turn_start_is_the_nth_newest_request() -> None:
    from wm_core import turn_start

    assert turn_start([3, 9, 14], 1, 1) == 14
    assert turn_start([14, 3, 9], 2, 1) == 9  # any order
    assert turn_start([3, 9, 14], 3, 1) == 3
    assert turn_start([3, 9, 14], 4, 1) == 1  # fewer turns than asked: keep everything
    assert turn_start([3, 9, 14], 3, 5) == 5  # requests before the live window do not count


def test_turn_aligned_moves_back_to_the_start_of_the_turn() -> None:
    from wm_core import turn_aligned

    assert turn_aligned(12, [3, 9, 14], 1) == 9
    assert turn_aligned(9, [3, 9], 1) == 9
    assert turn_aligned(2, [3, 9], 1) == 1  # before the first request: nothing is archived
