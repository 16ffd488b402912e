"""The pure rules of a memory's lifecycle: which memories are near-duplicates (token-set
similarity per type, merged into the oldest, a pluggable similarity), when one expires, and
the WM_MEMORY_RETENTION_DAYS setting."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from wm_server.config import Settings, retention_days
from wm_server.services.memory_lifecycle import near_duplicates, token_set_similarity
from wm_server.storage.memory_expiry import alive_mask, expires_at, retention_of
from wm_server.storage.memory_lifecycle import Candidate


def _memory(mid: int, text: str, kind: str = "preference") -> Candidate:
    return Candidate(mid, f"mem_{mid:020x}", kind, text, text, 1, float(mid))


def test_near_duplicates_of_one_type_merge_into_the_oldest() -> None:
    memories = [
        _memory(3, "The user prefers tabs over spaces in all Python code"),
        _memory(1, "The user prefers tabs over spaces in Python code"),
        _memory(2, "The user prefers dark mode"),
        _memory(4, "The user prefers tabs over spaces in Python code", kind="decision"),
    ]
    (merge,) = near_duplicates(memories)
    assert merge.kept.mid == 1
    assert [(c.mid, round(score, 2)) for c, score in merge.absorbed] == [(3, 0.9)]
    assert "mem_00000000000000000003 (0.90)" in merge.reason and ">= 0.80" in merge.reason


def test_the_threshold_and_the_similarity_are_the_callers() -> None:
    a, b = _memory(1, "alpha beta gamma delta"), _memory(2, "alpha beta gamma epsilon")
    assert token_set_similarity(a, b) == pytest.approx(3 / 5)
    assert near_duplicates([a, b]) == []
    assert len(near_duplicates([a, b], threshold=0.6)) == 1
    # the hook a vector similarity plugs into: any function of two candidates
    (merge,) = near_duplicates([a, b], similarity=lambda x, y: 0.95, measure="vector")
    assert "by vector similarity" in merge.reason


def test_expiry_is_the_memorys_own_else_its_types_retention() -> None:
    retention = retention_of({"event": 1.0, "preference": 0})
    assert retention == (("event", 86_400.0),)
    assert expires_at(None, 100.0, "event", retention) == 86_500.0
    assert expires_at(50.0, 100.0, "event", retention) == 50.0
    assert expires_at(None, 100.0, "decision", retention) is None


def test_the_retention_setting_is_checked() -> None:
    assert retention_days(" event=365, preference=0.5 ") == {"event": 365.0, "preference": 0.5}
    assert retention_days("") == {}
    for bad in ("event", "mood=3", "event=0", "event=x", "event=1,event=2", "event=40000"):
        with pytest.raises(ValueError):
            retention_days(bad)
        with pytest.raises(ValidationError):
            Settings(memory_retention_days=bad)


def test_the_array_form_of_expiry_agrees_with_the_one_for_a_memory_in_hand() -> None:
    names = ("active", "event", "profile", "decision")
    retention = retention_of({"event": 1.0, "decision": 30.0})
    rng = np.random.default_rng(3)
    count = 400
    kinds = rng.integers(1, len(names), count).astype(np.int32)
    created = rng.uniform(0, 40 * 86_400, count)
    expires = np.where(rng.random(count) < 0.3, rng.uniform(0, 40 * 86_400, count), np.nan)
    at = 20 * 86_400.0
    for rules in (retention, ()):
        mask = alive_mask(at, rules, expires, created, kinds, names)
        for n in range(count):
            expire = None if np.isnan(expires[n]) else float(expires[n])
            when = expires_at(expire, float(created[n]), names[kinds[n]], rules)
            assert bool(mask[n]) == (when is None or when > at)
