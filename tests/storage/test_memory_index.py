"""Memories ranked by BM25 per owner (issue 34), on every engine: the statistics are the
owner's memories' only, so another owner's or tenant's memories never change a ranking; the
owner's in-process index follows every write (create, update, retire, delete, supersede,
expiry, purge) at the next search, its held vectors too, scoring as the stored float32 ones;
a writer's rows that roll back are never kept; and the
warm-up after a start reads the owners written and the sessions archived last."""

from __future__ import annotations

import time

import numpy as np
import pytest
from storage_support import Services

from wm_core import MemoryType, Message, Role, TextPart
from wm_server.embedding.fusion import to_blob
from wm_server.security.tenancy import set_tenant
from wm_server.services.memories import OwnerSpec
from wm_server.services.memory_content import MemoryContent
from wm_server.services.memory_index import MemoryIndex
from wm_server.services.recall import HybridRecall, no_vector
from wm_server.services.recall_warmup import RecallWarmup
from wm_server.services.user_data import UserDataService

USER = OwnerSpec(user_id="u1")


async def _create(
    services: Services,
    text: str,
    owner: OwnerSpec = USER,
    kind: MemoryType = MemoryType.ENTITY,
    supersedes: tuple[str, ...] = (),
) -> str:
    view, _ = await services.memories.create(
        owner, MemoryContent(kind, text), "", "", supersedes=supersedes
    )
    return view.row.memory_id


async def _found(services: Services, query: str, *, superseded: bool = False) -> list[str]:
    hits = await services.memories.search(USER, query, [], None, None, 10, superseded)
    return [h.view.row.memory_id for h in hits]


async def test_other_owners_and_tenants_never_change_an_owners_ranking(
    services: Services,
) -> None:
    # Among u1's memories "kiwi" is the rarer word (1 of 3 against 2 of 3), so the kiwi
    # memory ranks first though it is the oldest (equal scores would put the newest first).
    kiwi = await _create(services, "kiwi orchard notes")
    zebra = await _create(services, "zebra orchard notes")
    stripes = await _create(services, "zebra stripes notes")
    before = await _found(services, "kiwi zebra")
    assert before == [kiwi, stripes, zebra]
    # Across every owner "kiwi" becomes the common word: statistics over all the rows (the
    # engines' full-text ranking) put both zebra memories first.
    for n in range(20):
        await _create(services, f"kiwi pie recipe {n}", OwnerSpec(user_id="u2"))
    set_tenant("other")
    for n in range(20):
        await _create(services, f"kiwi jam recipe {n}")
    set_tenant("t")
    assert await _found(services, "kiwi zebra") == before


async def test_the_index_follows_every_write(services: Services) -> None:
    pottery = await _create(services, "Started a pottery class on Tuesdays")
    assert await _found(services, "pottery") == [pottery]  # the owner's index is held now

    await services.memories.update(pottery, {"text": "Started a ceramics class"}, "", "", "")
    assert await _found(services, "pottery") == []
    assert await _found(services, "ceramics") == [pottery]

    await services.memories.retire(pottery, "she stopped going", "", "")
    assert await _found(services, "ceramics") == []

    lessons = await _create(services, "Violin lessons on Mondays")
    repairs = await _create(services, "Violin repairs at the shop downtown")
    assert set(await _found(services, "violin")) == {lessons, repairs}
    await services.memories.delete(lessons, "", "")
    assert await _found(services, "violin") == [repairs]

    teacher = await _create(
        services, "Violin repairs now at the shop uptown", supersedes=(repairs,)
    )
    assert await _found(services, "violin") == [teacher]
    assert await _found(services, "violin", superseded=True) == [teacher, repairs]

    hose = await _create(services, "The garden hose is in the shed")
    assert await _found(services, "garden") == [hose]
    async with services.database.unit_of_work() as uow:
        row = await uow.memories.get("t", hose)
        assert row is not None
        await uow.memory_lifecycle.set_expiry(row.mid, time.time() - 1)
        await uow.commit()
    assert await _found(services, "garden") == []

    other = await _create(services, "Violin concert on Friday", OwnerSpec(user_id="u2"))
    await UserDataService(services.database).purge("u1", "", "")
    assert await _found(services, "violin") == []
    async with services.database.reader() as uow:
        assert await uow.memory_rows.state("t", "user:u1") is None  # no user key left
        assert await uow.memory_rows.mids("t", "user:u2") != []
    hits = await services.memories.search(OwnerSpec(user_id="u2"), "violin", [], None, None, 5)
    assert [h.view.row.memory_id for h in hits] == [other]


async def test_filters_choose_the_memories_searched(services: Services) -> None:
    event = await _create(services, "Moved the ledger to Postgres", kind=MemoryType.EVENT)
    decision = await _create(services, "Keep the ledger on Postgres", kind=MemoryType.DECISION)
    hits = await services.memories.search(USER, "ledger", ["event"], None, None, 10)
    assert [h.view.row.memory_id for h in hits] == [event]
    hits = await services.memories.search(USER, "ledger", ["decision"], None, None, 10)
    assert [h.view.row.memory_id for h in hits] == [decision]
    later = time.time() + 3600
    assert await services.memories.search(USER, "ledger", [], later, None, 10) == []
    hits = await services.memories.search(USER, "ledger", [], None, later, 10)
    assert {h.view.row.memory_id for h in hits} == {event, decision}


async def test_a_writers_rows_that_roll_back_are_never_kept(services: Services) -> None:
    await _create(services, "Bought a red bicycle")
    recall = services.memories.hybrid
    where = services.memories._filter("user:u1")
    async with services.database.unit_of_work() as uow:
        await uow.memories.insert(
            memory_id="mem_rolled_back", tenant="t", owner="user:u1", sid=None,
            type="entity", text="Bought a blue kayak", search_text="Bought a blue kayak",
            key="kayak", fields={}, event_time=None, now=time.time(),
        )  # fmt: skip
        found, _, _ = await recall.memories(uow, no_vector(), where, ["kayak"], 5)
        assert [f.row.memory_id for f in found] == ["mem_rolled_back"]  # its own write
        # never committed: rolled back
    # A committed write now takes the version the rolled-back one had drawn (SQLite's clock
    # rolled back with it): an index that kept the writer's read would now look current.
    kept = await _create(services, "Bought a green tent")
    assert await _found(services, "kayak") == []
    assert await _found(services, "tent") == [kept]


async def test_the_warm_up_reads_the_owners_written_and_sessions_archived_last(
    services: Services,
) -> None:
    for user in ("u1", "u2", "u3"):
        await _create(services, f"A fact of {user}", OwnerSpec(user_id=user))
    await _create(services, "Another fact of u1")  # u1 written last now
    for session in ("s1", "s2", "s3"):
        messages = [Message(f"{session}-m", Role.USER, (TextPart("hello"),), 1)]
        await services.sessions.add_messages(
            session, messages, create_if_missing=True, request_id="", fingerprint=""
        )
        await services.commits.phase1(session, 0, None)
    async with services.database.reader() as uow:
        assert await uow.memory_rows.recent_owners(2) == [("t", "user:u1"), ("t", "user:u3")]
        sids = await uow.lexical.recent(3)
        rows = [await uow.sessions.by_sid(sid) for sid in sids]
    names = [r.record.session_id for r in rows if r is not None]
    assert names == ["s3", "s2", "s1"]
    recall = HybridRecall(None)
    warmup = RecallWarmup(services.database, recall, owners=2, sessions=2)
    assert await warmup.run() == (2, 2)
    assert recall.memory_index.holds("t", "user:u1") and recall.memory_index.holds("t", "user:u3")
    assert not recall.memory_index.holds("t", "user:u2")
    assert [recall.lexical.holds(sid) for sid in sids] == [True, True, False]


async def test_an_owner_read_in_pages_ranks_as_when_read_at_once(services: Services) -> None:
    for n in range(7):
        await _create(services, f"Note {n} about the {'kiwi' if n % 3 else 'zebra'} orchard")
    where = services.memories._filter("user:u1")
    paged = HybridRecall(None, memory_index=MemoryIndex(page=2))
    whole = HybridRecall(None)
    async with services.database.reader() as uow:
        terms = uow.memories.terms("zebra orchard")
        a, _, _ = await paged.memories(uow, no_vector(), where, terms, 10)
        b, _, _ = await whole.memories(uow, no_vector(), where, terms, 10)
        held = await paged.memory_index.owner(uow, "t", "user:u1")
    assert held is not None and held.size == 7 and len(held.parts) == 1  # pages merged
    assert [(f.row.mid, f.fused.score) for f in a] == [(f.row.mid, f.fused.score) for f in b]
    assert len(a) == 7


MODEL = "test/four"


async def _store_vector(services: Services, memory_id: str, vector: list[float]) -> int:
    async with services.database.unit_of_work() as uow:
        row = await uow.memories.get("t", memory_id)
        assert row is not None
        blob = to_blob(np.array(vector, dtype=np.float32))
        await uow.vectors.store_memories([(row.mid, row.version, MODEL, 4, blob)])
        await uow.commit()
    return row.mid


async def _nearest(
    services: Services, index: MemoryIndex, vector: list[float]
) -> tuple[list[int], list[float], int]:
    async with services.database.reader() as uow:
        held = await index.owner(uow, "t", "user:u1")
    assert held is not None
    where = services.memories._filter("user:u1")
    found, unembedded = held.nearest(np.array(vector, dtype=np.float32), held.admitted(where), 10)
    return [m for m, _ in found], [c for _, c in found], unembedded


async def test_the_vectors_held_follow_every_write_and_score_as_stored(
    services: Services,
) -> None:
    index = MemoryIndex(MODEL, 4, page=2)  # three memories: two pages, merged
    east_id = await _create(services, "Facing east")
    north_id = await _create(services, "Facing north")
    between_id = await _create(services, "Facing north-east")
    east = await _store_vector(services, east_id, [1, 0, 0, 0])
    north = await _store_vector(services, north_id, [0, 1, 0, 0])
    between = await _store_vector(services, between_id, [0.6, 0.8, 0, 0])
    mids, scores, unembedded = await _nearest(services, index, [1, 0, 0, 0])
    assert mids == [east, between, north] and unembedded == 0
    assert scores == pytest.approx([1.0, 0.6, 0.0], abs=1e-4)

    # A rewrite: the old version's vector no longer counts, until the new one is stored.
    await services.memories.update(north_id, {"text": "Facing east-north-east"}, "", "", "")
    mids, _, unembedded = await _nearest(services, index, [1, 0, 0, 0])
    assert mids == [east, between] and unembedded == 1
    await _store_vector(services, north_id, [0.8, 0.6, 0, 0])
    mids, scores, unembedded = await _nearest(services, index, [1, 0, 0, 0])
    assert mids == [east, north, between] and unembedded == 0
    assert scores == pytest.approx([1.0, 0.8, 0.6], abs=1e-4)

    await services.memories.delete(east_id, "", "")
    fresh_id = await _create(services, "Facing south")  # a part of its own, no vector yet
    mids, scores, unembedded = await _nearest(services, index, [0, 1, 0, 0])
    assert mids == [between, north] and unembedded == 1
    assert scores == pytest.approx([0.8, 0.6], abs=1e-4)
    fresh = await _store_vector(services, fresh_id, [0, -1, 0, 0])
    mids, scores, _ = await _nearest(services, index, [0, 1, 0, 0])
    assert mids == [between, north, fresh] and scores[-1] == pytest.approx(-1.0, abs=1e-4)
