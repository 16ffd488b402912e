"""wm_core.supersessions: which existing memories a plan's new facts supersede (a pass over a
guarded plan, whoever proposed it)."""

from __future__ import annotations

from wm_core import MemoryOp, MemoryOpKind, MemoryRecord, MemoryType, supersessions

PREF = MemoryRecord(
    "mem_1", MemoryType.PREFERENCE, "The user prefers tabs over spaces.",
    {"subject": "tabs over spaces"},
)  # fmt: skip
NAME = MemoryRecord(
    "mem_2", MemoryType.PROFILE, "The user's name is Dana Whitfield.", {"subject": "name"}
)
HOME = MemoryRecord("mem_3", MemoryType.PROFILE, "The user has a cat.", {"subject": "pets"})
DB = MemoryRecord(
    "mem_4", MemoryType.DECISION, "The team decided to use PostgreSQL for the ledger.",
    {"subject": "PostgreSQL for the ledger"},
)  # fmt: skip


def _create(kind: MemoryType, text: str, subject: str = "", *ids: str) -> MemoryOp:
    fields = {"subject": subject} if subject else {}
    return MemoryOp(MemoryOpKind.CREATE, kind, text, fields, source_message_ids=ids)


def test_an_update_restating_a_subject_is_a_new_fact_and_a_plain_update_a_correction() -> None:
    restated = MemoryOp(
        MemoryOpKind.UPDATE, MemoryType.PREFERENCE, "The user now prefers spaces over tabs.",
        {"subject": "spaces over tabs"}, target_ids=("mem_1",),
    )  # fmt: skip
    corrected = MemoryOp(
        MemoryOpKind.UPDATE, text="The user's name is Dana Whitfield-Brooks.",
        target_ids=("mem_2",),
    )  # fmt: skip
    found = supersessions([restated, corrected], [PREF, NAME])
    assert dict(found.replacing) == {0: ("mem_1",)}
    assert found.absorbed == frozenset()


def test_a_retire_followed_by_its_replacement_is_absorbed() -> None:
    retire = MemoryOp(
        MemoryOpKind.RETIRE, target_ids=("mem_2",), reason="renamed", source_message_ids=("m9",)
    )
    other = _create(MemoryType.PREFERENCE, "The user likes tea.", "tea", "m9")  # another type
    new = _create(MemoryType.PROFILE, "The user's name is Dana Brooks.", "", "m9")
    found = supersessions([retire, other, new], [NAME])
    assert dict(found.replacing) == {2: ("mem_2",)} and found.absorbed == frozenset({0})
    unrelated = _create(MemoryType.PROFILE, "The user's name is Dana Brooks.", "", "m1")
    alone = supersessions([retire, unrelated], [NAME])  # no shared message, no subject
    assert dict(alone.replacing) == {} and alone.absorbed == frozenset()


def test_a_create_about_a_single_valued_subject_supersedes_the_current_memory() -> None:
    ops = [
        _create(
            MemoryType.DECISION,
            "The team switched the ledger from PostgreSQL to CockroachDB.",
            "the ledger from PostgreSQL to CockroachDB",
        ),
        _create(MemoryType.PROFILE, "The user's name is Dana Brooks.", "name"),
        _create(MemoryType.PROFILE, "The user has a dog.", "pets"),  # many values: no
        _create(MemoryType.PREFERENCE, "The user prefers tabs over spaces.", "tabs over spaces"),
    ]
    found = supersessions(ops, [PREF, NAME, HOME, DB])
    assert dict(found.replacing) == {0: ("mem_4",), 1: ("mem_2",)}  # the equal one: a duplicate
