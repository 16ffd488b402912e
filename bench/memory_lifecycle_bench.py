"""What a memory's lifecycle costs (issue 35 point 3) at 10,000 and 100,000 memories of one
owner: SearchMemories p50/p95 with and without per-type retention (every read then leaves
expired memories out), a supersession write (CreateMemory replacing an older memory), the
maintenance loop's expiry sweep (1,000 of the owner's memories past their expire_time), and
one consolidation round over the owner's newest 2,000 memories, by text and then by vectors.

Usage: python bench/memory_lifecycle_bench.py [--engine sqlite|postgresql|both]
       [--counts 10000,100000] [--queries 200]

Memories are generated as in memory_search_bench.py (one owner, Zipf-like words) but written
in bulk (one multi-row statement per 5,000, the index terms computed as the repository does),
so 100,000 rows take seconds, not minutes. A tenth of the newest 2,000 get a near-duplicate
(one word added), which the text measure merges; every one of the newest 2,000 gets a random
256-d vector, and 100 more pairs get a near-copy of one (text unrelated), which the vector
measure merges. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402
from memory_search_bench import bulk_fill, vocabulary, zipf_pick  # noqa: E402

from wm_core import MemoryType  # noqa: E402
from wm_server.security.tenancy import set_tenant  # noqa: E402
from wm_server.services.memories import MemoryService, OwnerSpec  # noqa: E402
from wm_server.services.memory_consolidation import VectorConsolidation  # noqa: E402
from wm_server.services.memory_content import MemoryContent  # noqa: E402
from wm_server.services.memory_lifecycle import MemoryUpkeep  # noqa: E402
from wm_server.services.paging import PageTokens  # noqa: E402
from wm_server.services.recall import HybridRecall  # noqa: E402
from wm_server.storage.database import Database  # noqa: E402
from wm_server.storage.memory_expiry import Retention, retention_of  # noqa: E402
from wm_server.storage.sqlite import SqliteDatabase  # noqa: E402

RETENTION = {t.value: 3650.0 for t in MemoryType}  # every type named: the costliest filter
TWINS = 200
VECTOR_TWINS = 100
EXPIRING = 1000
SUPERSESSIONS = 200
CHUNK = 5000
MODEL = "bench-random-256"


async def plant_vectors(database: Database, rng: np.random.Generator) -> None:
    """A random unit vector for each of the newest 2,000 memories; VECTOR_TWINS pairs of them
    (texts unrelated) get near-copies, which the vector measure merges."""
    async with database.unit_of_work() as uow:
        rows = await uow.memory_lifecycle.candidates("bench", "user:bench", time.time(), (), 2000)
        by_type: dict[str, list[int]] = {}
        for row in rows:
            by_type.setdefault(row.type, []).append(row.mid)
        matrix = rng.standard_normal((len(rows), 256)).astype(np.float32)
        at = {row.mid: n for n, row in enumerate(rows)}
        paired = 0
        for mids in by_type.values():
            for a, b in zip(mids[0::2], mids[1::2], strict=False):
                if paired == VECTOR_TWINS:
                    break
                matrix[at[b]] = matrix[at[a]] + 0.05 * rng.standard_normal(256).astype(np.float32)
                paired += 1
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        await uow.vectors.store_memories(
            [(row.mid, row.version, MODEL, 256, matrix[at[row.mid]].tobytes()) for row in rows]
        )
        await uow.commit()


async def plant_expiring(database: Database, count: int, rng: random.Random) -> None:
    """EXPIRING of the owner's memories (spread over all of them) expired an hour ago."""
    past = time.time() - 3600
    async with database.unit_of_work() as uow:
        for mid in rng.sample(range(1, count - 2000), EXPIRING):  # not the newest 2,000
            await uow.memory_lifecycle.set_expiry(mid, past)
        await uow.commit()


def _percentiles(timings: list[float]) -> str:
    timings.sort()
    p95 = timings[min(len(timings) - 1, int(len(timings) * 0.95))]
    return f"p50 {statistics.median(timings):6.2f} ms, p95 {p95:6.2f} ms"


def service(database: Database, retention: Retention = ()) -> MemoryService:
    """The memories of one process: its own page-token key, lexical recall (no embedder)."""
    return MemoryService(
        database, tokens=PageTokens.random(), recall=HybridRecall(None), retention=retention
    )


async def supersessions(service: MemoryService, count: int) -> str:
    """CreateMemory superseding an older memory, one after another (a unit of work each)."""
    owner = OwnerSpec(user_id="bench")
    timings = []
    for n in range(SUPERSESSIONS):
        older = f"mem_{(count // 2) + n:020x}"
        content = MemoryContent(MemoryType.DECISION, f"the ledger now runs on engine {n}")
        start = time.perf_counter()
        await service.create(owner, content, "", "", supersedes=[older])
        timings.append((time.perf_counter() - start) * 1000)
    return _percentiles(timings)


async def plant_twins(database: Database, count: int) -> None:
    """A near-duplicate (the text and one more word) of TWINS of the newest memories."""
    async with database.unit_of_work() as uow:
        rows = await uow.memory_lifecycle.candidates("bench", "user:bench", time.time(), (), 2000)
        for n, row in enumerate(rows[-TWINS:]):
            text = f"{row.text} again"
            await uow.memories.insert(
                memory_id=f"mem_{count + n:020x}", tenant="bench", owner="user:bench", sid=None,
                type=row.type, text=text, search_text=text, key=f"twin{n}", fields={},
                event_time=None, now=time.time(),
            )  # fmt: skip
        await uow.commit()


async def searches(service: MemoryService, words: list[str], queries: int, seed: int) -> str:
    rng = random.Random(seed)
    owner = OwnerSpec(user_id="bench")
    for _ in range(20):
        await service.search(owner, " ".join(rng.sample(words[:2000], 3)), [], None, None, 10)
    timings = []
    for _ in range(queries):
        query = " ".join(zipf_pick(words, rng) for _ in range(3))
        start = time.perf_counter()
        await service.search(owner, query, [], None, None, 10)
        timings.append((time.perf_counter() - start) * 1000)
    return _percentiles(timings)


async def measure(database: Database, count: int, queries: int) -> None:
    rng = random.Random(7)
    words = vocabulary(20_000, rng)
    await database.open()
    try:
        set_tenant("bench")
        seconds = await bulk_fill(database, count, words, rng)
        await plant_twins(database, count)
        await plant_vectors(database, np.random.default_rng(5))
        await plant_expiring(database, count, rng)
        name = database.dialect.name
        print(f"  {name:<10} {count:>7,} memories  generated in {seconds:.1f} s", flush=True)
        plain = await searches(service(database), words, queries, 11)
        kept = await searches(service(database, retention_of(RETENTION)), words, queries, 11)
        print(f"  {name:<10} {'':>7}           SearchMemories, no retention:    {plain}")
        print(f"  {name:<10} {'':>7}           SearchMemories, 6 types retained: {kept}")
        written = await supersessions(service(database), count)
        print(f"  {name:<10} {'':>7}           supersession write:              {written}")
        upkeep = MemoryUpkeep(
            database, retention_days=RETENTION, vectors=VectorConsolidation(MODEL, 0.9)
        )
        start = time.perf_counter()
        expired = await upkeep.expire()
        took = (time.perf_counter() - start) * 1000
        print(
            f"  {name:<10} {'':>7}           expiry sweep: {took:7.1f} ms"
            f" ({expired} of {count:,} expired, deleted)"
        )
        start = time.perf_counter()
        merges = await upkeep.consolidate()
        took = (time.perf_counter() - start) * 1000
        by_text = sum(len(m.absorbed) for m in merges if m.measure == "token-set")
        by_vector = sum(len(m.absorbed) for m in merges if m.measure != "token-set")
        print(
            f"  {name:<10} {'':>7}           consolidation round: {took:7.1f} ms"
            f" (2,000 newest compared; by text {by_text} of {TWINS} planted twins,"
            f" by vectors {by_vector} of {VECTOR_TWINS})",
            flush=True,
        )
    finally:
        await database.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description="memory lifecycle benchmark")
    parser.add_argument("--engine", choices=["sqlite", "postgresql", "both"], default="sqlite")
    parser.add_argument("--counts", default="10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    print("Memory lifecycle (service layer, one owner holding every memory)")
    if args.engine in ("sqlite", "both"):
        for count in counts:
            with tempfile.TemporaryDirectory() as folder:
                await measure(SqliteDatabase(Path(folder) / "bench.sqlite3"), count, args.queries)
    if args.engine in ("postgresql", "both"):
        from support.postgres import private_postgres_server
        from wm_server.storage.postgres import PostgresDatabase

        with private_postgres_server() as server:
            for count in counts:
                url = server.create_database("bench")
                await measure(PostgresDatabase(url), count, args.queries)
                server.drop_database(url)


if __name__ == "__main__":
    asyncio.run(main())
