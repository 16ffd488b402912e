"""What a memory's lifecycle costs (issue 35 point 3): SearchMemories with and without
per-type retention (every read then leaves expired memories out), the maintenance loop's
expiry pass, and one consolidation round over an owner's newest 2,000 memories.

Usage: python bench/memory_lifecycle_bench.py [--engine sqlite|postgresql|both]
       [--counts 10000] [--queries 200]

Memories are generated as in memory_search_bench.py (one owner, Zipf-like words), and a tenth
of the newest 2,000 get a near-duplicate (one word added), which consolidation finds and
merges. Figures are printed, never asserted.
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

from memory_search_bench import fill, vocabulary, zipf_pick  # noqa: E402

from wm_core import MemoryType  # noqa: E402
from wm_server.services.memories import MemoryService, OwnerSpec  # noqa: E402
from wm_server.services.memory_lifecycle import MemoryUpkeep  # noqa: E402
from wm_server.storage.database import Database  # noqa: E402
from wm_server.storage.memory_expiry import retention_of  # noqa: E402
from wm_server.storage.sqlite import SqliteDatabase  # noqa: E402
from wm_server.tenancy import set_tenant  # noqa: E402

RETENTION = {t.value: 3650.0 for t in MemoryType}  # every type named: the costliest filter
TWINS = 200


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
    timings.sort()
    p95 = timings[min(len(timings) - 1, int(len(timings) * 0.95))]
    return f"p50 {statistics.median(timings):6.2f} ms, p95 {p95:6.2f} ms"


async def measure(database: Database, count: int, queries: int) -> None:
    rng = random.Random(7)
    words = vocabulary(20_000, rng)
    await database.open()
    try:
        set_tenant("bench")
        await fill(database, count, words, rng)
        await plant_twins(database, count)
        name = database.dialect.name
        plain = await searches(MemoryService(database), words, queries, 11)
        kept = await searches(
            MemoryService(database, retention=retention_of(RETENTION)), words, queries, 11
        )
        print(f"  {name:<10} {count:>7,} memories  SearchMemories, no retention:    {plain}")
        print(f"  {name:<10} {'':>7}           SearchMemories, 6 types retained: {kept}")
        upkeep = MemoryUpkeep(database, retention_days=RETENTION)
        start = time.perf_counter()
        expired = await upkeep.expire()
        took = (time.perf_counter() - start) * 1000
        print(f"  {name:<10} {'':>7}           expiry pass: {took:7.1f} ms ({expired} expired)")
        start = time.perf_counter()
        merges = await upkeep.consolidate()
        took = (time.perf_counter() - start) * 1000
        merged = sum(len(m.absorbed) for m in merges)
        print(
            f"  {name:<10} {'':>7}           consolidation round: {took:7.1f} ms"
            f" (2,000 newest compared; {merged} of {TWINS} planted twins merged)",
            flush=True,
        )
    finally:
        await database.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description="memory lifecycle benchmark")
    parser.add_argument("--engine", choices=["sqlite", "postgresql", "both"], default="sqlite")
    parser.add_argument("--counts", default="10000")
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
