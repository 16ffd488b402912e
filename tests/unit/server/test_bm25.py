"""The in-process BM25 (wm_server.search.bm25): its scores are Okapi BM25 over the rows
searched, a segment built in pieces ranks as one built at once, and ties fall to the newest."""

from __future__ import annotations

import math
import random

import pytest

from wm_server.search import bm25
from wm_server.search.bm25 import BM25_B, BM25_K1, Row

_WORDS = [
    "ledger",
    "postgres",
    "deploy",
    "friday",
    "lunch",
    "notes",
    "archive",
    "cluster",
    "lag",
    "menu",
]


def _rows(count: int, seed: int, seqs: int = 3) -> list[Row]:
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        terms = [rng.choice(_WORDS) for _ in range(rng.randint(1, 8))]
        rows.append(Row(1 + i % seqs, i + 1, 100.0 + i, " ".join(terms), len(terms)))
    return rows


def _okapi(rows: list[Row], query: list[str], only: int | None) -> dict[int, float]:
    """{position: score} written out from the formula, over the rows searched only."""
    searched = [r for r in rows if only is None or r.seq == only]
    docs = {r.position: r.terms.split() for r in searched}
    average = sum(r.length for r in searched) / len(searched)
    out = {}
    for row in searched:
        score = 0.0
        for term in query:
            tf = docs[row.position].count(term)
            df = sum(1 for d in docs.values() if term in d)
            if tf:
                idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
                norm = BM25_K1 * (1 - BM25_B + BM25_B * row.length / average)
                score += idf * tf * (BM25_K1 + 1) / (tf + norm)
        if score:
            out[row.position] = score
    return out


@pytest.mark.parametrize("only", [None, 2])
def test_scores_are_okapi_bm25_over_the_rows_searched(only: int | None) -> None:
    rows = _rows(200, 1)
    query = ["ledger", "friday", "nowhere"]
    expected = _okapi(rows, query, only)
    hits, total = bm25.rank([("a", bm25.build(rows))], query, only, 500)
    assert total == len(expected)
    assert {h.position: h.score for h in hits} == pytest.approx(expected, abs=1e-9)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(h.key == "a" for h in hits)


def test_segments_in_pieces_rank_as_one() -> None:
    """Merged, split by session, or with an archive taken out and read again: the same
    hits, scores and count."""
    rows = _rows(300, 2, seqs=6)
    whole = bm25.rank([("s", bm25.build(rows))], ["deploy", "lag"], None, 40)
    pieces = [bm25.build(rows[i : i + 70]) for i in range(0, 300, 70)]
    merged = bm25.merge(pieces)
    assert bm25.rank([("s", merged)], ["deploy", "lag"], None, 40) == whole
    assert bm25.rank([("s", p) for p in pieces], ["deploy", "lag"], None, 40) == whole
    again = [
        bm25.without(merged, frozenset({2, 5})),
        bm25.build([r for r in rows if r.seq in (2, 5)]),
    ]
    assert bm25.rank([("s", p) for p in again], ["deploy", "lag"], None, 40) == whole
    assert bm25.without(merged, frozenset({2, 5})).size == sum(r.seq not in (2, 5) for r in rows)


def test_an_equal_score_falls_to_the_newest_row_across_segments() -> None:
    old = bm25.build([Row(1, 1, 10.0, "ledger notes", 2), Row(1, 2, 10.0, "ledger notes", 2)])
    new = bm25.build([Row(1, 1, 20.0, "ledger notes", 2), Row(2, 9, 20.0, "lunch", 1)])
    hits, total = bm25.rank([("old", old), ("new", new)], ["ledger"], None, 2)
    assert total == 3
    assert [(h.key, h.position) for h in hits] == [("new", 1), ("old", 2)]


def test_nothing_to_rank() -> None:
    empty = bm25.build([])
    assert bm25.rank([("e", empty)], ["ledger"], None, 5) == ([], 0)
    assert bm25.rank([("a", bm25.build(_rows(5, 3)))], [], None, 5) == ([], 0)
    assert bm25.rank([("a", bm25.build(_rows(5, 3)))], ["ledger"], 99, 5) == ([], 0)
