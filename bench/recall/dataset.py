"""The recall evaluation's two splits: ``dev`` (tune on it) and ``heldout`` (never tune on it).

A split is one ``Dataset`` of two parts, each its own users: personal chats
(``bench/recall/personal.py``: single fact, multi-hop, temporal, open; templates disjoint
between the splits) and coding-assistant sessions (``bench/retrieval/generator.py``, another
seed per split; its kinds map to ours: a dated event is ``temporal``, the rest ``single``).
The question kinds are ``personal.KINDS``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from bench.recall import personal
from bench.retrieval import generator
from bench.retrieval.generator import Dataset

SEEDS: Final = {"dev": 20261204, "heldout": 20261205}
_CODING_KIND: Final = {"event": "temporal"}


def split(name: str, *, users: int = 8, coding_users: int = 4) -> Dataset:
    """The split ``name`` (the same arguments, the same data)."""
    seed = SEEDS[name]
    chats = personal.generate(name, seed, users=users)
    coding = generator.generate(seed, users=coding_users, sessions_per_user=3, facts_per_session=6)
    for session in coding.sessions:
        session.id, session.user = f"c{name}-{session.id}", f"c{name}-{session.user}"
        session.batches = [
            [replace(m, id=f"c{name}-{m.id}") for m in batch] for batch in session.batches
        ]
    questions = [
        replace(
            q,
            id=f"c{name}-{q.id}",
            user=f"c{name}-{q.user}",
            kind=_CODING_KIND.get(q.kind, "single"),
            evidence=tuple(f"c{name}-{e}" for e in q.evidence),
        )
        for q in coding.questions
    ]
    return Dataset(seed, chats.sessions + coding.sessions, chats.questions + questions)
