"""PostgreSQL shared by replicas: two engines (two pools, as two server processes would have)
on one database, racing on the operations that SQLite serializes by having one writer."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import AsyncIterator

import pytest

from wm_core import Message, Role, TextPart, message_tokens
from wm_server.storage.port import LeaseLost
from wm_server.storage.postgres import PostgresStore
from wm_server.storage.records import ClaimedJob, CommitState, Phase2Completion

pytestmark = pytest.mark.postgres

_ids = itertools.count()


def _text(tokens: int, mid: str) -> Message:
    parts = (TextPart("x" * (tokens * 4)),)
    return Message(mid, Role.USER, parts, message_tokens(parts))


def _make_id() -> str:
    return f"gen-{next(_ids)}"


def _first(_: object) -> bytes:
    return b"first"


@pytest.fixture
async def replicas(postgres_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    a, b = PostgresStore(postgres_url), PostgresStore(postgres_url)
    await asyncio.gather(a.open(), b.open())  # concurrent migrations must not collide
    yield a, b
    await asyncio.gather(a.close(), b.close())


async def test_concurrent_ingest_and_commits_lose_nothing(
    replicas: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = replicas
    await a.create_session("t", "s", None)
    await a.commit_phase1("t", "s", 3, None, "keep3", _first)  # remember keep 3
    rng = random.Random(7)
    added: list[str] = []

    async def ingest(store: PostgresStore, name: str) -> None:
        for batch in range(15):
            ids = [f"{name}-{batch}-{i}" for i in range(rng.randint(1, 6))]
            messages = [_text(rng.randint(1, 40), mid) for mid in ids]
            result = await store.add_messages(
                "t", "s", messages, create_if_missing=False, request_id=None, make_id=_make_id
            )
            assert result.added_ids == tuple(ids)
            added.extend(ids)

    async def commits(store: PostgresStore, name: str) -> list[int]:
        seqs: list[int] = []
        for n in range(6):
            await asyncio.sleep(rng.random() * 0.02)
            result = await store.commit_phase1(
                "t", "s", rng.choice([0, 2, 3]), None, f"{name}-c{n}", _first
            )
            if result.commit.state is not CommitState.SKIPPED:
                assert result.commit.archive_seq is not None
                seqs.append(result.commit.archive_seq)
        return seqs

    results = await asyncio.gather(ingest(a, "a"), ingest(b, "b"), commits(a, "a"), commits(b, "b"))
    seqs = sorted(results[2] + results[3])
    assert seqs == list(range(1, len(seqs) + 1))  # no duplicate, no gap
    archived: list[str] = []
    for seq in seqs:
        archived.extend(m.id for m in await a.archive_messages("t", "s", seq))
    live = [m.message.id for m in await b.live_messages("t", "s")]
    assert sorted(archived + live) == sorted(added)  # every message exactly once
    assert len(set(archived + live)) == len(added)
    session = await b.get_session("t", "s")
    assert session.archive_count == len(seqs)
    assert session.total_message_count == len(added) and session.message_count == len(live)
    assert (session.pending_tokens, session.live_tokens) == await a.rebuild_pending_tokens("t", "s")


async def test_same_request_id_from_two_replicas_stores_once(
    replicas: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = replicas
    batch = [_text(5, "m1"), _text(5, "m2")]
    first, second = await asyncio.gather(
        *(
            store.add_messages(
                "t", "new", batch, create_if_missing=True, request_id="r1", make_id=_make_id
            )
            for store in (a, b)
        )
    )
    assert first.added_ids == second.added_ids == ("m1", "m2")
    assert [first.created, second.created].count(True) == 1  # one of them created the session
    commits = await asyncio.gather(
        a.commit_phase1("t", "new", 0, "c", "ca", _first),
        b.commit_phase1("t", "new", 0, "c", "cb", _first),
    )
    assert commits[0].commit.commit_id == commits[1].commit.commit_id
    assert sorted([commits[0].created, commits[1].created]) == [False, True]
    session = await a.get_session("t", "new")
    assert (session.total_message_count, session.archive_count) == (2, 1)


async def test_claims_across_replicas_run_each_job_once_in_session_order(
    replicas: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = replicas
    sessions = [f"s{i}" for i in range(4)]
    for name in sessions:
        for n in range(3):
            await a.add_messages(
                "t", name, [_text(3, f"{name}-{n}")],
                create_if_missing=True, request_id=None, make_id=_make_id,
            )  # fmt: skip
            await a.commit_phase1("t", name, 0, None, f"{name}-c{n}", _first)
    running: dict[str, int] = {}
    finished: list[tuple[str, int]] = []

    async def worker(store: PostgresStore) -> None:
        idle = 0
        while idle < 20:
            job = await store.claim_job(30)
            if job is None:
                idle += 1
                await asyncio.sleep(0.01)
                continue
            idle = 0
            assert job.session_id not in running, "two jobs of one session at once"
            running[job.session_id] = job.archive_seq
            await asyncio.sleep(0.005)
            data = await store.phase2_input(job)
            done = await store.complete_phase2(
                job,
                data.previous.version if data.previous else 0,
                Phase2Completion(
                    f"doc {job.archive_seq}", 2, "abs", "[]", "{}", (job.archive_seq,)
                ),
                lambda record, wm: [(record.last_sequence + 1, b"done", True)],
            )
            assert done is not None
            del running[job.session_id]
            finished.append((job.session_id, job.archive_seq))

    await asyncio.gather(*(worker(store) for store in (a, b, a, b, a, b)))
    assert sorted(finished) == sorted((s, n) for s in sessions for n in (1, 2, 3))
    for name in sessions:
        assert [n for s, n in finished if s == name] == [1, 2, 3]
        assert (await b.get_session("t", name)).wm_version == 3
    assert await a.open_job_count() == 0


async def test_a_lease_taken_by_another_replica_fences_the_first(
    replicas: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = replicas
    await a.add_messages(
        "t", "s", [_text(3, "m")], create_if_missing=True, request_id=None, make_id=_make_id
    )
    await a.commit_phase1("t", "s", 0, None, "c1", _first)
    held = await a.claim_job(0.2)
    assert held is not None
    assert await b.claim_job(30) is None  # the lease is alive
    await asyncio.sleep(0.3)
    taken = await b.claim_job(30)
    assert isinstance(taken, ClaimedJob) and taken.attempts == 2
    with pytest.raises(LeaseLost):
        await a.append_events(held, [(2, b"stale", False)], True)
    with pytest.raises(LeaseLost):
        await a.complete_phase2(
            held, 0, Phase2Completion("doc", 1, "a", "[]", "{}", (1,)), lambda r, w: []
        )
    assert not await a.renew_lease(held, 30)
    await b.append_events(taken, [(2, b"fresh", False)], True)
    assert [e.payload for e in await a.events_after("c1", 0)] == [b"first", b"fresh"]


async def test_stored_events_notify_every_replica(
    replicas: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = replicas
    seen: asyncio.Queue[str] = asyncio.Queue()
    b.subscribe_events(seen.put_nowait)
    await a.add_messages(
        "t", "s", [_text(3, "m")], create_if_missing=True, request_id=None, make_id=_make_id
    )
    await a.commit_phase1("t", "s", 0, None, "c1", _first)
    assert await asyncio.wait_for(seen.get(), 10) == "c1"
    job = await a.claim_job(30)
    assert job is not None
    await a.append_events(job, [(2, b"progress", False)], True)
    assert await asyncio.wait_for(seen.get(), 10) == "c1"
