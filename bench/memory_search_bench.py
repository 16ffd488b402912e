"""Long-term memory search benchmark: SearchMemories' use case at 10,000 and 100,000 memories
on SQLite and PostgreSQL, lexical only and hybrid (query embedding included), the size of the
full-text index, and a server's RSS with the default embedder loaded.

Usage: python bench/memory_search_bench.py [--engine sqlite|postgresql|both] [--quick]
       [--counts 10000,100000] [--queries 300] [--embedder wordllama|none] [--no-rss]

Rows are written in bulk (one multi-row statement per 5,000, the index terms computed as
the repository does; the engines' own index maintenance runs with them), all for one
owner: the worst case, since every memory of the owner is a candidate. Each query is three
words drawn from the generated vocabulary (Zipf-like, so common words match thousands of
memories) and runs through ``MemoryService.search`` (owner resolution, ranked query, sources,
snippets; no gRPC), first lexical only (no embedder), then hybrid: every memory has a stored
vector of the embedder's model (random unit vectors: their values do not change the cost) and
each query is embedded by the embedder (wordllama, the default) as part of its time. The first
query after the fill (the in-process indexes read once) is timed apart. RSS: on SQLite at the
largest count, a real ``python -m wm_server`` over the same file, after 50 SearchMemories
through gRPC. PostgreSQL runs on a throwaway cluster (tests/support/postgres.py) on the same
machine. Figures are printed, never asserted; the target is shown next to them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402

from wm_core import MemoryType  # noqa: E402
from wm_server.embedding.fusion import to_blob  # noqa: E402
from wm_server.embedding.port import Embedder  # noqa: E402
from wm_server.security.tenancy import set_tenant  # noqa: E402
from wm_server.services.memories import MemoryService, OwnerSpec  # noqa: E402
from wm_server.services.paging import PageTokens  # noqa: E402
from wm_server.services.recall import HybridRecall  # noqa: E402
from wm_server.storage.database import Database  # noqa: E402
from wm_server.storage.sqlite import SqliteDatabase  # noqa: E402

CHUNK = 5000
TENANT = "default"  # the server's own tenant, so the RSS server finds the memories
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


async def bulk_fill(
    database: Database, count: int, words: list[str], rng: random.Random, tenant: str = "bench"
) -> float:
    """``count`` active memories of owner user:bench, CHUNK rows per statement batch (the
    index terms computed as the repository does): 100,000 rows in seconds, not minutes."""
    started = time.perf_counter()
    index = database.dialect.text_index
    value = index.value("memories", ":search_again")  # positional: each name bound once
    column, expression = (f", {value[0]}", f", {value[1]}") if value else ("", "")
    sql = (
        "INSERT INTO memories (memory_id, tenant, owner, type, text, search_text, memory_key,"
        " fields_json, record_time, create_time, update_time, state, version"
        f"{column}) VALUES (:memory_id, :tenant, 'user:bench', :type, :text, :search_text,"
        f" :key, '{{}}', :now_a, :now_b, :now_c, 'active', 1{expression})"
    )
    made = 0
    while made < count:
        rows = []
        now = time.time()
        for n in range(made, min(count, made + CHUNK)):
            text = " ".join(zipf_pick(words, rng) for _ in range(rng.randint(8, 20)))
            indexed = index.indexed(text)
            row = (f"mem_{n:020x}", tenant, rng.choice(TYPES), text, indexed, f"k{n}", now,
                   now, now)  # fmt: skip
            rows.append((*row, indexed) if value else row)
        async with database.unit_of_work() as uow:
            await uow._conn.many(sql, rows)
            await uow.commit()
        made += len(rows)
    return time.perf_counter() - started


async def embed_all(database: Database, embedder: Embedder, rng: random.Random) -> None:
    """A random unit vector of the embedder's model for every memory (current version)."""
    model, dims = embedder.model_id, embedder.dimensions
    gen = np.random.default_rng(rng.randrange(1 << 30))
    async with database.reader() as uow:
        rows = await uow.memory_lifecycle.mids_of_owner(TENANT, "user:bench", 1 << 30)
    for start in range(0, len(rows), CHUNK):
        chunk = rows[start : start + CHUNK]
        matrix = gen.standard_normal((len(chunk), dims)).astype(np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        async with database.unit_of_work() as uow:
            await uow.vectors.store_memories(
                [(mid, 1, model, dims, to_blob(v)) for mid, v in zip(chunk, matrix, strict=True)]
            )
            await uow.commit()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed(
    service: MemoryService, words: list[str], queries: int, rng: random.Random
) -> tuple[float, list[float], int]:
    """(the first query's ms, the others' ms, hits)."""
    owner = OwnerSpec(user_id="bench")
    start = time.perf_counter()
    await service.search(owner, " ".join(rng.sample(words[:2000], 3)), [], None, None, 10)
    first = (time.perf_counter() - start) * 1000
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
    return first, timings, hits


def server_rss(folder: Path, queries: list[str]) -> tuple[float, float]:
    """(MB after start, MB after SearchMemories) of a real server over ``folder``'s file."""
    from wm_client import WmClient

    env = {**os.environ, "WM_DATA_DIR": str(folder), "WM_ADDRESS": "127.0.0.1:0",
           "WM_LLM_PROVIDER": "offline", "HF_HUB_OFFLINE": "1"}  # fmt: skip
    server = subprocess.Popen(
        [sys.executable, "-m", "wm_server"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        address = ""
        assert server.stdout is not None
        for line in server.stdout:
            found = re.search(r"address\W+(127\.0\.0\.1:\d+)", line)
            if "server_started" in line and found:
                address = found.group(1)
                break
        started = rss_mb(server.pid)

        async def ask() -> None:
            async with WmClient(address) as client:
                for query in queries:
                    await client.search_memories(query, owner=f"users/{'bench'}")

        asyncio.run(ask())
        return started, rss_mb(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


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


async def measure(
    database: Database, count: int, queries: int, seed: int, embedder: Embedder | None
) -> list[str]:
    """Print the figures; the words of the queries (for the RSS server)."""
    rng = random.Random(seed)
    words = vocabulary(20_000, rng)
    await database.open()
    name = database.dialect.name
    try:
        set_tenant(TENANT)
        seconds = await bulk_fill(database, count, words, rng, TENANT)
        size, what = await index_bytes(database)
        print(
            f"  {name:<10} {count:>8,} memories: index {size / 1e6:7.1f} MB ({what},"
            f" {size / count:.0f} B/memory); generated in {seconds:.1f} s",
            flush=True,
        )
        kinds: list[tuple[str, HybridRecall, str]] = [
            ("lexical", HybridRecall(None), "p50 <= 10 ms")
        ]
        if embedder is not None:
            await embed_all(database, embedder, rng)
            kinds.append(("hybrid", HybridRecall(embedder), "p95 <= 50 ms"))
        for kind, recall, target in kinds:
            service = MemoryService(database, tokens=PageTokens.random(), recall=recall)
            first, timings, hits = await timed(service, words, queries, random.Random(seed))
            print(
                f"  {name:<10} {count:>8,} memories: SearchMemories {kind:<8}"
                f" p50 {statistics.median(timings):7.2f} ms, p95 {percentile(timings, 0.95):7.2f}"
                f" ms (target {target}); first query {first:7.1f} ms,"
                f" {hits / queries:4.1f} hits/query",
                flush=True,
            )
    finally:
        await database.close()
    return [" ".join(zipf_pick(words, rng) for _ in range(3)) for _ in range(50)]


async def main() -> None:
    parser = argparse.ArgumentParser(description="SearchMemories benchmark")
    parser.add_argument("--engine", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--counts", default="10000,100000", help="memory counts, comma-separated")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--embedder", choices=["wordllama", "none"], default="wordllama")
    parser.add_argument("--no-rss", action="store_true", help="skip the server's RSS")
    parser.add_argument("--quick", action="store_true", help="10,000 memories, 100 queries")
    args = parser.parse_args()
    counts = [10_000] if args.quick else [int(c) for c in args.counts.split(",")]
    queries = 100 if args.quick else args.queries
    embedder: Embedder | None = None
    if args.embedder == "wordllama":
        from wm_server.embedding.embedded import WordLlamaEmbedder

        embedder = WordLlamaEmbedder()
    print("SearchMemories (service layer, one owner holding every memory)")
    if args.engine in ("sqlite", "both"):
        for count in counts:
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "wm.sqlite3"
                asked = await measure(SqliteDatabase(path), count, queries, 7, embedder)
                if embedder is not None and not args.no_rss and count == max(counts):
                    started, after = await asyncio.to_thread(server_rss, Path(folder), asked)
                    print(
                        f"  server RSS at {count:,} memories: {started:.0f} MB after start"
                        f" (embedder loaded), {after:.0f} MB after {len(asked)} SearchMemories"
                        " (target <= 500 MB)",
                        flush=True,
                    )
    if args.engine in ("postgresql", "both"):
        from support.postgres import private_postgres_server
        from wm_server.storage.postgres import PostgresDatabase

        with private_postgres_server() as server:
            for count in counts:
                url = server.create_database("bench")
                await measure(PostgresDatabase(url), count, queries, 7, embedder)
                server.drop_database(url)


if __name__ == "__main__":
    asyncio.run(main())
