"""The recall benchmark scores right, its splits are what they claim, and its methods run
against a real server on a tiny set (figures are printed by the bench, never asserted)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.recall import dataset, personal  # noqa: E402
from bench.recall.methods import METHODS  # noqa: E402
from bench.recall_bench import Score, recall  # noqa: E402
from bench.retrieval.generator import Dataset, Question  # noqa: E402


def test_a_score_is_the_share_of_evidence_in_the_first_k_per_kind() -> None:
    score = Score("m")
    score.add("single", ["a", "b", "c"], ["c"])
    score.add("multi_hop", ["x", "a", "y"], ["y", "z"])
    score.add("open", [], ["q"])
    assert score.recall(5) == (1.0 + 0.5 + 0.0) / 3
    assert score.recall(10, "multi_hop") == 0.5 and score.recall(25, "single") == 1.0
    assert score.missed == 1


def test_the_splits_are_deterministic_disjoint_and_annotated() -> None:
    dev, held = dataset.split("dev", users=2, coding_users=1), dataset.split("heldout", users=2)
    assert dev.questions == dataset.split("dev", users=2, coding_users=1).questions
    personal_texts = {
        split: {q.text for q in data.questions if q.id.startswith("p")}
        for split, data in (("dev", dev), ("heldout", held))
    }
    assert not personal_texts["dev"] & personal_texts["heldout"]  # no wording in both
    for data in (dev, held):
        assert {q.kind for q in data.questions} == set(personal.KINDS)
        said = {m.id: (s.id, m.text) for s in data.sessions for m in s.messages}
        for question in data.questions:
            assert all(e in said for e in question.evidence)
            if question.kind == "multi_hop":  # its halves are in different sessions
                assert len({said[e][0] for e in question.evidence}) == 2
            for e in question.evidence:
                assert question.text.lower() not in said[e][1].lower()


async def test_the_methods_run_against_a_real_server_and_a_verbatim_query_ranks_first() -> None:
    data = personal.generate("dev", 3, users=1, sessions_per_user=2)
    said = {m.id: m.text for s in data.sessions for m in s.messages}
    planted = data.questions[0]
    verbatim = replace(planted, id="verbatim", text=said[planted.evidence[0]])
    absent = Question("absent", planted.user, "single", "zebra quartz nebula", ("nowhere",))
    tiny = Dataset(data.seed, data.sessions, [verbatim, absent])
    scores = {s.method: s for s in await recall(tiny, list(METHODS.values()), None)}
    assert set(scores) == {"literal", "lexical", "bm25", "dense", "hybrid", "memories"}
    # memories find what extraction kept, which a verbatim sentence need not be; the absent
    # question they miss like every method
    memories = scores.pop("memories")
    assert len(memories.recalls[25]) == 2 and memories.recalls[25][1] == 0.0
    for score in scores.values():
        assert score.recalls[5][0] == 1.0 / len(verbatim.evidence), score.method
        assert score.recalls[25][1] == 0.0 and score.missed == 1, score.method
