"""PostgreSQL shared by replicas: two engines (two pools, as two server processes would have)
on one database, racing on the operations that SQLite serializes by having one writer."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from collections.abc import AsyncIterator

import psycopg
import pytest
from storage_support import Services, build_services

from wm_core import CommitState, Message, Role, TextPart, message_tokens
from wm_server.phase2.state import Phase2Completion
from wm_server.phase2.store import LeaseLost
from wm_server.security.tenancy import set_tenant
from wm_server.services.commit_event_log import Phase2Started
from wm_server.storage.postgres import PostgresDatabase
from wm_server.storage.records import StoredEvent

pytestmark = pytest.mark.postgres

_ids = itertools.count()


def _text(tokens: int, mid: str) -> Message:
    parts = (TextPart("x" * (tokens * 4)),)
    return Message(mid, Role.USER, parts, message_tokens(parts))


@pytest.fixture
async def replicas(postgres_url: str) -> AsyncIterator[tuple[Services, Services]]:
    a, b = PostgresDatabase(postgres_url), PostgresDatabase(postgres_url)
    await asyncio.gather(a.open(), b.open())  # concurrent migrations must not collide
    set_tenant("t")
    yield build_services(a), build_services(b)
    await asyncio.gather(a.close(), b.close())


async def test_concurrent_ingest_and_commits_lose_nothing(
    replicas: tuple[Services, Services],
) -> None:
    a, b = replicas
    await a.sessions.create("s", "")
    await a.commits.phase1("s", 3, None)  # remember keep 3
    rng = random.Random(7)
    added: list[str] = []

    async def ingest(side: Services, name: str) -> None:
        for batch in range(15):
            ids = [f"{name}-{batch}-{i}" for i in range(rng.randint(1, 6))]
            messages = [_text(rng.randint(1, 40), mid) for mid in ids]
            result = await side.sessions.add_messages(
                "s", messages, create_if_missing=False, request_id=""
            )
            assert result.added_ids == tuple(ids)
            added.extend(ids)

    async def commits(side: Services) -> list[int]:
        seqs: list[int] = []
        for _ in range(6):
            await asyncio.sleep(rng.random() * 0.02)
            record, _ = await side.commits.phase1("s", rng.choice([0, 2, 3]), None)
            if record.state is not CommitState.SKIPPED:
                assert record.archive_seq is not None
                seqs.append(record.archive_seq)
        return seqs

    results = await asyncio.gather(ingest(a, "a"), ingest(b, "b"), commits(a), commits(b))
    seqs = sorted(results[2] + results[3])
    assert seqs == list(range(1, len(seqs) + 1))  # no duplicate, no gap
    archived: list[str] = []
    for seq in seqs:
        page = await a.archives.messages("s", f"archive_{seq:03d}", 0, "")
        archived.extend(m.message.id for m in page.messages)
    live = [m.message.id for m in await b.sessions.live_messages("s")]
    assert sorted(archived + live) == sorted(added)  # every message exactly once
    assert len(set(archived + live)) == len(added)
    session = await b.sessions.get("s")
    assert session.archive_count == len(seqs)
    assert session.total_message_count == len(added) and session.message_count == len(live)
    rebuilt = await a.sessions.rebuild_pending_tokens("s")
    assert (session.pending_tokens, session.live_tokens) == rebuilt


async def test_same_request_id_from_two_replicas_stores_once(
    replicas: tuple[Services, Services],
) -> None:
    a, b = replicas
    batch = [_text(5, "m1"), _text(5, "m2")]
    results = await asyncio.gather(
        *(
            side.sessions.add_messages(
                "new", batch, create_if_missing=True, request_id="r1", fingerprint="fp"
            )
            for side in (a, b, a, b)
        )
    )
    assert {r.added_ids for r in results} == {("m1", "m2")}
    assert {r.created for r in results} == {True}  # one outcome, answered to every retry
    commits = await asyncio.gather(
        *(side.commits.phase1("new", 0, "c", "fp") for side in (a, b, a, b))
    )
    assert len({record.commit_id for record, _ in commits}) == 1
    assert sorted(created for _, created in commits) == [False, False, False, True]
    session = await a.sessions.get("new")
    assert (session.total_message_count, session.archive_count) == (2, 1)
    deletes = await asyncio.gather(
        *(side.sessions.delete("new", "d", "fp") for side in (a, b, a, b)),
        return_exceptions=True,
    )
    assert deletes == [None] * 4  # every concurrent retry of the delete succeeds


async def test_claims_across_replicas_run_each_job_once_in_session_order(
    replicas: tuple[Services, Services],
) -> None:
    a, b = replicas
    sessions = [f"s{i}" for i in range(4)]
    for name in sessions:
        for n in range(3):
            await a.sessions.add_messages(
                name, [_text(3, f"{name}-{n}")], create_if_missing=True, request_id=""
            )
            await a.commits.phase1(name, 0, None)
    running: dict[str, str] = {}  # session → the commit of its job between claim and return
    finished: list[tuple[str, int]] = []

    async def worker(side: Services) -> None:
        idle = 0
        while idle < 20:
            job = await side.jobs.claim(30)
            claimed_at = time.time()
            if job is None:
                idle += 1
                await asyncio.sleep(0.01)
                continue
            idle = 0
            if job.session_id in running:
                # Its worker has not resumed since its completion committed (the claim that
                # followed took three round trips): the job must have been completed in the
                # store by the time this claim returned (its completion time is taken before
                # its COMMIT). Not before the claim began: a claim that starts, then waits for
                # the loop or a connection while the completion commits, rightly sees it done.
                earlier = await side.commits.get(job.session_id, running[job.session_id])
                assert earlier.state is CommitState.COMPLETED, "two jobs of one session at once"
                assert earlier.complete_time is not None
                assert earlier.complete_time <= claimed_at, "claimed before the last completed"
            running[job.session_id] = job.commit_id
            await asyncio.sleep(0.005)
            data = await side.jobs.read_input(job)
            assert job.previous_version == (data.previous.version if data.previous else 0)
            done = await side.jobs.complete(
                job,
                Phase2Completion(
                    f"doc {job.archive_seq}", 2, "abs", "[]", "{}", (job.archive_seq,)
                ),
            )
            assert done is not None
            if running.get(job.session_id) == job.commit_id:
                del running[job.session_id]
            finished.append((job.session_id, job.archive_seq))

    await asyncio.gather(*(worker(side) for side in (a, b, a, b, a, b)))
    assert sorted(finished) == sorted((s, n) for s in sessions for n in (1, 2, 3))
    for name in sessions:
        assert [n for s, n in finished if s == name] == [1, 2, 3]
        assert (await b.sessions.get(name)).wm_version == 3
    assert await a.jobs.open_count() == 0


async def test_a_lease_taken_by_another_replica_fences_the_first(
    replicas: tuple[Services, Services],
) -> None:
    a, b = replicas
    await a.sessions.add_messages("s", [_text(3, "m")], create_if_missing=True, request_id="")
    commit, _ = await a.commits.phase1("s", 0, None)
    held = await a.jobs.claim(0.2)
    assert held is not None
    assert await b.jobs.claim(30) is None  # the lease is alive
    await asyncio.sleep(0.3)
    taken = await b.jobs.claim(30)
    assert taken is not None and taken.attempts == 2
    with pytest.raises(LeaseLost):
        await a.jobs.record(held, Phase2Started(1, True, 0, (1,)))
    with pytest.raises(LeaseLost):
        await a.jobs.complete(held, Phase2Completion("doc", 1, "a", "[]", "{}", (1,)))
    assert not await a.jobs.renew(held, 30)
    await b.jobs.record(taken, Phase2Started(2, True, 0, (1,)))
    async with a.database.reader() as uow:  # Phase 1, each claim's start, b's record
        assert [e.sequence for e in await uow.events.after(commit.commit_id, 0)] == [1, 2, 3, 4]


async def test_stored_events_notify_every_replica(
    replicas: tuple[Services, Services],
) -> None:
    """Each transaction that stores events tells every other replica the commit."""
    a, b = replicas
    seen: asyncio.Queue[str] = asyncio.Queue()
    b.database.subscribe_events(seen.put_nowait)
    await a.sessions.add_messages("s", [_text(3, "m")], create_if_missing=True, request_id="")
    commit, _ = await a.commits.phase1("s", 0, None)
    assert await asyncio.wait_for(seen.get(), 10) == commit.commit_id
    job = await a.jobs.claim(30)
    assert job is not None
    await a.jobs.record(job, Phase2Started(1, True, 0, (1,)))
    assert [await asyncio.wait_for(seen.get(), 10) for _ in range(2)] == [commit.commit_id] * 2


async def test_a_stream_reads_the_events_another_replica_stored(
    replicas: tuple[Services, Services],
) -> None:
    """A stream on one replica is handed nothing of what another stores: woken by the
    notification, it reads them from the log."""
    a, b = replicas
    await a.sessions.add_messages("s", [_text(3, "m")], create_if_missing=True, request_id="")
    commit, _ = await a.commits.phase1("s", 0, None)
    read_from: list[int] = []
    read = b.commits._events_after

    async def counted(commit_id: str, after: int) -> list[StoredEvent]:
        read_from.append(after)
        return await read(commit_id, after)

    b.commits._events_after = counted  # type: ignore[method-assign]
    stream = b.commits.watch("s", commit.commit_id, 0)
    await asyncio.wait_for(anext(stream), 10)  # Phase 1's event, read as the stream starts
    job = await a.jobs.claim(30)
    assert job is not None
    await a.jobs.record(job, Phase2Started(1, True, 0, (1,)))
    for _ in range(2):  # the claim's Phase2Started and the record's
        await asyncio.wait_for(anext(stream), 10)
    assert read_from[0] == 0 and 1 in read_from[1:]
    await stream.aclose()


async def test_a_lost_listener_reconnects_and_notifications_come_again(
    replicas: tuple[Services, Services], postgres_url: str
) -> None:
    """After its LISTEN connection is lost, a replica hears other replicas' events again
    once it has reconnected (until then its streams read on their heartbeat)."""
    a, b = replicas
    heard: asyncio.Queue[str] = asyncio.Queue()
    a.database.subscribe_events(heard.put_nowait)
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
        cut = await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE query LIKE 'LISTEN%' AND datname = current_database()"
        )
        assert [ended for (ended,) in await cut.fetchall()] == [True, True]  # both replicas'
    for attempt in range(100):  # the listener retries after 0.5 s, then 1 s, ...
        session = f"s{attempt}"
        await b.sessions.add_messages(
            session, [_text(3, "m")], create_if_missing=True, request_id=""
        )
        commit, _ = await b.commits.phase1(session, 0, None)
        with contextlib.suppress(TimeoutError):
            while await asyncio.wait_for(heard.get(), 0.2) != commit.commit_id:
                pass
            return
    pytest.fail("the listener never came back")
