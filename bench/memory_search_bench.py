"""Long-term memory search benchmark: SearchMemories' use case at 10,000 and 100,000 memories
on SQLite and PostgreSQL, and the size of the full-text index.

Usage: python bench/memory_search_bench.py [--engine sqlite|postgresql|both] [--quick]
       [--counts 10000,100000] [--queries 300]

Rows are generated through the storage layer (the repository's own insert, whose index
maintenance runs in the same transaction), in chunks of one transaction each, all for one
owner: the worst case, since every memory of the owner is a candidate. Each query is three
words drawn from the generated vocabulary (Zipf-like, so common words match thousands of
memories) and runs through ``MemoryService.search`` (owner resolution, ranked query, sources,
snippets; no gRPC). PostgreSQL runs on a throwaway cluster (tests/support/postgres.py) on the
same machine. Figures are printed, never asserted; the target is shown next to them.
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

from wm_core import MemoryType  # noqa: E402
from wm_server.services.memories import MemoryService, OwnerSpec  # noqa: E402
from wm_server.storage.database import Database  # noqa: E402
from wm_server.storage.sqlite import SqliteDatabase  # noqa: E402
from wm_server.tenancy import set_tenant  # noqa: E402

CHUNK = 5000
TYPES = [t.value for t in MemoryType]


def vocabulary(size: int, rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 9))))
    return sorted(words)


def zipf_pick(words: list[str], rng: random.Random) -> str:
    # Rank r has weight 1/r: a few words are everywhere, most are rare.
    return words[min(int(len(words) ** rng.random()) - 1, len(words) - 1)]


async def fill(database: Database, count: int, words: list[str], rng: random.Random) -> float:
    started = time.perf_counter()
    made = 0
    while made < count:
        async with database.unit_of_work() as uow:
            for _ in range(min(CHUNK, count - made)):
                text = " ".join(zipf_pick(words, rng) for _ in range(rng.randint(8, 20)))
                await uow.memories.insert(
                    memory_id=f"mem_{made:020x}", tenant="bench", owner="user:bench", sid=None,
                    type=rng.choice(TYPES), text=text, search_text=text, key=f"k{made}",
                    fields={}, event_time=None, now=time.time(),
                )  # fmt: skip
                made += 1
            await uow.commit()
    return time.perf_counter() - started


async def index_bytes(database: Database) -> tuple[int, str]:
    async with database.reader() as uow:
        conn = uow._conn
        if database.dialect.name == "sqlite":
            row = await conn.one("SELECT SUM(length(block)) FROM memories_fts_data", {})
            return int(row[0] if row else 0), "FTS5 index blocks"
        row = await conn.one(
            "SELECT pg_relation_size('memories_search'),"
            " (SELECT SUM(pg_column_size(search)) FROM memories)",
            {},
        )
        assert row is not None
        return int(row[0]) + int(row[1]), "GIN index + tsvector column"


async def measure(database: Database, count: int, queries: int, seed: int) -> None:
    rng = random.Random(seed)
    words = vocabulary(20_000, rng)
    await database.open()
    try:
        set_tenant("bench")
        seconds = await fill(database, count, words, rng)
        size, what = await index_bytes(database)
        service = MemoryService(database)
        owner = OwnerSpec(user_id="bench")
        for _ in range(20):  # warm caches
            await service.search(owner, " ".join(rng.sample(words[:2000], 3)), [], None, None, 10)
        timings: list[float] = []
        hits = 0
        for _ in range(queries):
            query = " ".join(zipf_pick(words, rng) for _ in range(3))
            start = time.perf_counter()
            found = await service.search(owner, query, [], None, None, 10)
            timings.append((time.perf_counter() - start) * 1000)
            hits += len(found)
        timings.sort()
        p50 = statistics.median(timings)
        p99 = timings[min(len(timings) - 1, int(len(timings) * 0.99))]
        name = database.dialect.name
        target = "   (target p50 <= 10 ms)" if name == "sqlite" and count >= 100_000 else ""
        print(
            f"  {name:<10} {count:>8,} memories: SearchMemories p50 {p50:6.2f} ms,"
            f" p99 {p99:6.2f} ms, {hits / queries:4.1f} hits/query{target}",
            flush=True,
        )
        print(
            f"  {'':<10} {'':>8}           index {size / 1e6:7.1f} MB ({what},"
            f" {size / count:.0f} B/memory); generated in {seconds:.1f} s",
            flush=True,
        )
    finally:
        await database.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description="SearchMemories benchmark")
    parser.add_argument("--engine", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--counts", default="10000,100000", help="memory counts, comma-separated")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="10,000 memories, 100 queries")
    args = parser.parse_args()
    counts = [10_000] if args.quick else [int(c) for c in args.counts.split(",")]
    queries = 100 if args.quick else args.queries
    print("SearchMemories (service layer, one owner holding every memory)")
    if args.engine in ("sqlite", "both"):
        for count in counts:
            with tempfile.TemporaryDirectory() as folder:
                await measure(SqliteDatabase(Path(folder) / "bench.sqlite3"), count, queries, 7)
    if args.engine in ("postgresql", "both"):
        from support.postgres import private_postgres_server
        from wm_server.storage.postgres import PostgresDatabase

        with private_postgres_server() as server:
            for count in counts:
                url = server.create_database("bench")
                await measure(PostgresDatabase(url), count, queries, 7)
                server.drop_database(url)


if __name__ == "__main__":
    asyncio.run(main())
