"""Consolidation by meaning (issue 35 point 3): near-duplicate memories of one owner found by
the embedder's vectors, for the paraphrases the token-set measure misses ("The user is
allergic to peanuts" / "The user has a peanut allergy": Jaccard 0.2, cosine 0.85).

Each round, after the text measure (``memory_lifecycle.near_duplicates``) has proposed its
merges, the owner's remaining candidates of each type are compared by the cosine of their
stored vectors (``memory_vectors``, the current version's, of the configured model; a memory
not embedded yet waits for a later round). A group at or above the threshold is merged into
its oldest memory, as the text measure merges, and the decision record names the measure
("embedding cosine", the model) and each score.

Vectors of a bag-of-words model rate "lives in Lisbon" and "lives in Porto" close: a pair
whose texts disagree on a name, date or number (``wm_core.missing_anchors`` either way: the
rule every rewrite of a memory obeys) is never merged, whatever its cosine.

The threshold is the model's: for wordllama (the default embedder), measured on pairs of our
own, paraphrases score 0.59-0.93 (two loose ones 0.39 and 0.47) and distinct facts of one type
at most 0.41; 0.55 merges the clear paraphrases and none of the distinct facts.
``WM_MEMORY_VECTOR_CONSOLIDATION_THRESHOLD`` sets another (another model's scale); 0 turns it
off.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from wm_core import missing_anchors
from wm_server.embedding.port import Vectors, normalized
from wm_server.services.memory_lifecycle import Merge
from wm_server.storage.memory_lifecycle import Candidate
from wm_server.storage.unit_of_work import UnitOfWork

VECTOR_THRESHOLD = 0.55  # wordllama's (see the module docstring)


@dataclass(frozen=True, slots=True)
class VectorConsolidation:
    """Which stored vectors to compare (``model``), and from which cosine two memories are one."""

    model: str
    threshold: float = VECTOR_THRESHOLD

    @property
    def measure(self) -> str:
        return f"embedding cosine ({self.model})"

    async def vectors(self, uow: UnitOfWork, candidates: Sequence[Candidate]) -> dict[int, bytes]:
        """The current vectors of the candidates that have one (mid → float32 bytes)."""
        return dict(await uow.vectors.memories([c.mid for c in candidates], self.model))

    def merges(
        self,
        candidates: Sequence[Candidate],
        vectors: Mapping[int, bytes],
        skip: frozenset[int] = frozenset(),
    ) -> list[Merge]:
        return vector_duplicates(
            candidates, vectors, threshold=self.threshold, measure=self.measure, skip=skip
        )


def same_facts(a: str, b: str) -> bool:
    """Whether merging ``b`` into ``a`` (or back) would lose no name, date or number."""
    return not missing_anchors(a, b) and not missing_anchors(b, a)


def vector_duplicates(
    candidates: Sequence[Candidate],
    vectors: Mapping[int, bytes],
    *,
    threshold: float,
    measure: str,
    skip: frozenset[int] = frozenset(),
) -> list[Merge]:
    """Groups of memories of one type whose vectors' cosine with the group's oldest memory is
    at or above ``threshold`` (and that keep every anchor), each a ``Merge`` into that oldest
    one; memories in ``skip`` (merged by another measure this round) and memories without a
    vector are left out. Pure: no I/O."""
    by_type: dict[str, list[Candidate]] = defaultdict(list)
    for candidate in candidates:
        if candidate.mid not in skip and candidate.mid in vectors:
            by_type[candidate.type].append(candidate)
    merges: list[Merge] = []
    for group in by_type.values():
        if len(group) < 2:
            continue
        group.sort(key=lambda c: (c.create_time, c.mid))
        matrix: Vectors = normalized(
            np.stack([np.frombuffer(vectors[c.mid], dtype="<f4") for c in group])
        )
        scores = matrix @ matrix.T
        taken: set[int] = set()
        for index, kept in enumerate(group):
            if index in taken:
                continue
            absorbed = []
            for other in np.flatnonzero(scores[index, index + 1 :] >= threshold) + index + 1:
                at = int(other)
                if at in taken or not same_facts(kept.text, group[at].text):
                    continue
                absorbed.append((group[at], float(scores[index, at])))
                taken.add(at)
            if absorbed:
                merges.append(Merge(kept, tuple(absorbed), measure, threshold))
    return merges
