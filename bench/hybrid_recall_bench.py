"""Hybrid recall benchmark (issue 34): query latency at N stored rows of one owner with the
query embedding included, embed throughput, and the server's RSS with the embedder loaded.

Usage: python bench/hybrid_recall_bench.py [--rows 100000] [--queries 200] [--quick]

Rows are real-looking turns from bench/retrieval/generator.py (seed 777, filler and planted
facts; each copy numbered so no two rows are equal), stored through the services on SQLite:
AddMessages in batches of 500 and a Phase 1 commit after each (so everything is in the
full-text index), all in sessions of one user. Then the embedding loop (the same code as the
server's backfill) embeds every row, timed: turns/s including the database writes. Queries
are the generator's questions run through ``ArchiveSearchService.hybrid`` over all the owner's
sessions (and, for comparison, ``ranked``, lexical only), each timed end to end: query
embedding, lexical statement, vector read, cosine, fusion, snippets. RSS: a real
``python -m wm_server`` process on the same database, after its start (embedder loaded) and
after hybrid queries through gRPC. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bench.retrieval.generator import generate  # noqa: E402
from wm_core import Message, Role, TextPart, message_tokens  # noqa: E402
from wm_server.api.commit_event_encoder import encode_event  # noqa: E402
from wm_server.embedding.embedded import WordLlamaEmbedder  # noqa: E402
from wm_server.embedding.port import TextRole  # noqa: E402
from wm_server.security.tenancy import set_tenant  # noqa: E402
from wm_server.services.archive_search import ArchiveSearchService  # noqa: E402
from wm_server.services.commit_event_log import EventLog  # noqa: E402
from wm_server.services.commit_wakeups import EventBus  # noqa: E402
from wm_server.services.commits import CommitService  # noqa: E402
from wm_server.services.embedding_index import EmbeddingIndexer  # noqa: E402
from wm_server.services.paging import PageTokens  # noqa: E402
from wm_server.services.recall import HybridRecall  # noqa: E402
from wm_server.services.sessions import SessionService  # noqa: E402
from wm_server.storage.sqlite import SqliteDatabase  # noqa: E402

BATCH = 500
PER_SESSION = 5000
OWNER = "bench-user"


def texts(count: int) -> list[str]:
    data = generate(777, users=6, sessions_per_user=6)
    pool = [
        " ".join(x for x in (m.text, m.tool, m.tool_input, m.tool_output) if x)
        for s in data.sessions
        for m in s.messages
    ]
    return [f"{pool[i % len(pool)]} (#{i})" for i in range(count)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def fill(db: SqliteDatabase, rows: list[str]) -> float:
    log = EventLog(encode_event)
    tokens = PageTokens.random()  # one process: its own key
    sessions = SessionService(db, log=log, tokens=tokens)
    commits = CommitService(db, EventBus(), log, heartbeat_seconds=1.0, tokens=tokens)
    ids = itertools.count()
    started = time.perf_counter()
    for s in range(0, len(rows), PER_SESSION):
        name = f"s{s // PER_SESSION}"
        await sessions.create(name, "", user_id=OWNER)
        for b in range(s, min(s + PER_SESSION, len(rows)), BATCH):
            batch = []
            for text in rows[b : b + BATCH]:
                parts = (TextPart(text),)
                batch.append(Message(f"m{next(ids)}", Role.USER, parts, message_tokens(parts)))
            await sessions.add_messages(name, batch, create_if_missing=False, request_id="")
            await commits.phase1(name, 0, None)
    return time.perf_counter() - started


async def measure(args: argparse.Namespace, folder: Path) -> None:
    set_tenant("default")
    db = SqliteDatabase(folder / "wm.sqlite3")
    await db.open()
    rows = texts(args.rows)
    seconds = await fill(db, rows)
    print(f"stored {len(rows):,} rows in {seconds:.0f} s")

    embedder = WordLlamaEmbedder()
    sample = rows[:5000]
    started = time.perf_counter()
    for i in range(0, len(sample), 64):
        await embedder.embed(sample[i : i + 64], TextRole.PASSAGE)
    pure = len(sample) / (time.perf_counter() - started)
    indexer = EmbeddingIndexer(db, embedder)
    started = time.perf_counter()
    await indexer.round()
    stored = len(rows) / (time.perf_counter() - started)
    print(f"embed throughput: {pure:,.0f} turns/s (model only), {stored:,.0f} turns/s "
          "(backfill incl. reads and writes)")  # fmt: skip

    recall = HybridRecall(embedder)
    context = ArchiveSearchService(db, recall)
    questions = [q.text for q in generate(777, users=6, sessions_per_user=6).questions]
    async with db.reader() as uow:
        sids = [sid for sid, _ in await uow.sessions.keys("default", OWNER, None)]
        started = time.perf_counter()
        await recall.lexical.segments(uow, sids)
        print(f"lexical index read once: {(time.perf_counter() - started) * 1000:.0f} ms "
              f"for {len(rows):,} rows, {recall.lexical.weight / 1e6:.0f} MB")  # fmt: skip
        started = time.perf_counter()
        await recall.archives(uow, await recall.embed_query("warm"), sids, [], None, 10)
        print(f"vector matrices read once: {(time.perf_counter() - started) * 1000:.0f} ms "
              f"for {len(rows):,} rows")  # fmt: skip
        times = []
        for question in questions[: args.queries]:
            started = time.perf_counter()
            vector = await recall.embed_query(question)
            await recall.archives(uow, vector, sids, [], None, 10)  # no words: dense only
            times.append((time.perf_counter() - started) * 1000)
    print(f"{'dense part (embed+cosine)':22} at {len(rows):,} rows: p50 "
          f"{statistics.median(times):6.1f} ms, p95 {percentile(times, 0.95):6.1f} ms")  # fmt: skip
    questions = (questions * (args.queries // len(questions) + 1))[: args.queries]
    for name, call in (
        ()
        if args.dense_only
        else (
            ("lexical (ranked)", lambda q: context.ranked("", q, "", 10, True, OWNER)),
            ("hybrid", lambda q: context.hybrid("", q, "", 10, True, OWNER)),
            ("hybrid, one session", lambda q: context.hybrid("s0", q, "", 10, False)),
        )
    ):
        await call(questions[0])  # warm
        times = []
        for question in questions:
            started = time.perf_counter()
            await call(question)
            times.append((time.perf_counter() - started) * 1000)
        print(f"{name:22} at {len(rows):,} rows: p50 {statistics.median(times):6.1f} ms, "
              f"p95 {percentile(times, 0.95):6.1f} ms (target p95 <= 50 ms)")  # fmt: skip
    await db.close()

    env = {**os.environ, "WM_DATA_DIR": str(folder), "WM_ADDRESS": "127.0.0.1:0",
           "WM_LLM_PROVIDER": "offline", "HF_HUB_OFFLINE": "1"}  # fmt: skip
    server = subprocess.Popen(  # noqa: ASYNC220 - started once, read line by line
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
        print(f"server RSS after start (embedder loaded): {rss_mb(server.pid):.0f} MB")
        from wm_client import WmClient

        async with WmClient(address) as client:
            for question in questions[:50]:
                await client.search_archives(
                    question, all_sessions=True, user_id=OWNER, hybrid=True
                )
        print(f"server RSS after 50 hybrid queries over {len(rows):,} rows: "
              f"{rss_mb(server.pid):.0f} MB (target <= 500 MB)")  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=20)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dense-only", action="store_true", help="skip the full-query timings")
    parser.add_argument("--quick", action="store_true", help="5,000 rows, 50 queries")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.queries = 5000, 50
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(measure(args, Path(folder)))


if __name__ == "__main__":
    main()
