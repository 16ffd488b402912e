"""vector_duplicates, the pure part of consolidation by meaning: groups by cosine per type,
merged into the oldest; never across a changed name, date or number; skips what another
measure merged and what has no vector."""

from __future__ import annotations

import numpy as np

from wm_server.services.memory_consolidation import vector_duplicates
from wm_server.storage.memory_lifecycle import Candidate


def _candidate(mid: int, text: str, kind: str = "profile") -> Candidate:
    return Candidate(mid, f"mem_{mid:020x}", kind, text, text, 1, float(mid))


def _vector(*values: float) -> bytes:
    return np.asarray(values, dtype="<f4").tobytes()


def test_groups_by_cosine_per_type_into_the_oldest_and_keeps_anchors() -> None:
    same = _vector(1.0, 0.0, 0.0)
    candidates = [
        _candidate(1, "The user is allergic to peanuts."),
        _candidate(2, "The user has a peanut allergy."),
        _candidate(3, "The user lives in Lisbon."),
        _candidate(4, "The user lives in Porto."),  # same vector, another name: kept apart
        _candidate(5, "The user has a peanut allergy!", "entity"),  # another type
        _candidate(6, "The user avoids peanuts."),  # no vector yet
        _candidate(7, "The user cannot eat peanuts."),  # merged by another measure
        _candidate(8, "The user likes jazz."),
    ]
    vectors = {1: same, 2: _vector(0.9, 0.1, 0.0), 3: same, 4: same, 5: same, 7: same}
    vectors[8] = _vector(0.0, 1.0, 0.0)
    merges = vector_duplicates(
        candidates, vectors, threshold=0.55, measure="embedding cosine (m)", skip=frozenset({7})
    )
    assert [(m.kept.mid, [(c.mid, round(s, 3)) for c, s in m.absorbed]) for m in merges] == [
        (1, [(2, 0.994)])  # Lisbon joins neither the peanuts (a name more) nor Porto
    ]
    assert "by embedding cosine (m) similarity >= 0.55" in merges[0].reason
