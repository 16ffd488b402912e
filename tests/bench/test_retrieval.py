"""The retrieval evaluation computes recall right, through a real server, on a tiny set.

The benchmark's figures are printed, not asserted; this test keeps its arithmetic and its
plumbing honest: a question whose evidence contains the query literally is found at rank 1
by literal search, one that no message contains is missed, and the generator is deterministic.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.retrieval.generator import Question, generate  # noqa: E402
from bench.retrieval.harness import MODES, keywords, rank_of, recall_at, run  # noqa: E402


def test_recall_counts_evidence_among_the_first_k_distinct_hits() -> None:
    ranked = ["a", "b", "a", "c", "d", "e", "f"]
    assert recall_at(ranked, ["e"], 5) == 1.0  # "a" twice counts once
    assert recall_at(ranked, ["f"], 5) == 0.0
    assert recall_at(ranked, ["b", "z"], 10) == 0.5
    assert rank_of(ranked, ["c"]) == 3 and rank_of(ranked, ["z"]) is None
    assert keywords("When did we move the Job Queue to Postgres?") == [
        "move",
        "job",
        "queue",
        "postgres",
    ]


def test_the_generator_is_deterministic_and_plants_one_question_per_fact() -> None:
    one, two = generate(7, users=2, sessions_per_user=2), generate(7, users=2, sessions_per_user=2)
    assert [m for s in one.sessions for m in s.messages] == [
        m for s in two.sessions for m in s.messages
    ]
    assert one.questions == two.questions and len(one.questions) == 2 * 2 * 8
    said = {m.id: m.text for s in one.sessions for m in s.messages}
    for question in one.questions:
        (evidence,) = question.evidence
        assert said[evidence] and question.text.lower() not in said[evidence].lower()


async def test_literal_search_finds_a_verbatim_query_at_rank_one_and_misses_the_absent() -> None:
    dataset = generate(11, users=1, sessions_per_user=1, facts_per_session=3)
    planted = dataset.questions[0]
    said = {m.id: m.text for s in dataset.sessions for m in s.messages}[planted.evidence[0]]
    verbatim = replace(planted, id="verbatim", text=said.removeprefix("To summarize: ")[:40])
    absent = Question("absent", planted.user, planted.kind, "zebra quartz nebula", ("nowhere",))
    dataset.questions = [verbatim, absent, *dataset.questions]
    result = await run(dataset, modes=MODES[:1])
    assert result.commits == sum(len(s.batches) for s in dataset.sessions)
    literal = result.outcomes[0]  # then SearchMemories, when Phase 2 extracted memories
    assert literal.mode == MODES[0]
    assert literal.ranks["verbatim"] == 1 and literal.ranks["absent"] is None
    total = len(dataset.questions)
    found = sum(1 for rank in literal.ranks.values() if rank is not None and rank <= 5)
    assert literal.recall(5) == found / total
