"""The extraction benchmark's scorer applies its documented matching rule, and the second human
reader's memories of the sealed splits belong to those splits (figures are printed by the
bench, never asserted)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "bench") not in sys.path:
    sys.path.insert(0, str(ROOT / "bench"))

import memory_extraction_sets as sets  # noqa: E402

from wm_core import MemoryOp, MemoryOpKind, MemoryType  # noqa: E402


def _op(kind: MemoryType, text: str, when: str | None = None) -> MemoryOp:
    return MemoryOp(MemoryOpKind.CREATE, kind, text, event_time=when)


def test_a_memory_matches_by_type_prefixes_and_date_prefix() -> None:
    expected = sets.Expected("decision", ("replication", "postgres 16"))
    assert sets.matches(expected, _op(MemoryType.DECISION, "Chose Postgres 16: replicated logs"))
    assert not sets.matches(expected, _op(MemoryType.PROFILE, "Chose Postgres 16: replicated"))
    assert not sets.matches(expected, _op(MemoryType.DECISION, "Chose Postgres 15: replicated"))
    dated = sets.Expected("event", ("move", "2026-09"))
    assert sets.matches(dated, _op(MemoryType.EVENT, "The user will move.", "2026-09-01"))
    assert not sets.matches(dated, _op(MemoryType.EVENT, "The user will move.", "2026-10-01"))
    assert not sets.matches(dated, _op(MemoryType.EVENT, "The user will remove it.", "2026-09-01"))


def test_the_matching_is_one_to_one_and_maximum() -> None:
    conversation = sets.Conversation("c", "2026-01-01")
    conversation.expected += [
        sets.Expected("entity", ("ana",)),
        sets.Expected("entity", ("ana", "sister")),
    ]
    ops = [_op(MemoryType.ENTITY, "Ana is the user's sister."), _op(MemoryType.ENTITY, "Ana")]
    scores: dict[str, sets.Score] = {}
    missed, extra = sets.score(conversation, ops, scores)
    assert (missed, extra) == ([], [])  # the greedy pairing would have left one unmatched
    one = sets.score(conversation, ops[:1], {})
    assert len(one[0]) == 1 and one[1] == []
    assert scores["all"].precision == scores["all"].recall == 1.0


def test_the_second_reader_wrote_memories_of_the_sealed_conversations_only() -> None:
    for split in sets.SEALED:
        conversations = {c.id: c for c in sets.load(split)}
        made = sets.second_reader(split)
        assert made and set(made) <= set(conversations)
        for ops in made.values():
            for op in ops:
                assert isinstance(op.type, MemoryType) and op.text.strip()
                assert op.event_time is None or op.event_time[:4].isdigit()
        silent = [cid for cid, c in conversations.items() if not c.expected]
        assert not any(made.get(cid) for cid in silent)  # both readers saw no memory there
