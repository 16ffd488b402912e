"""A short indexed SQLite read on the event loop against the same read through a thread.

Usage: python bench/sqlite_read_hop.py [--reads N]

Why: GetSession's row read is one indexed lookup; ``storage/sqlite.py`` runs such reads inline
on the loop (on the writer's connection, between transactions) and keeps only long scans on
the reader connection's thread. This prints what each costs per read, in wall time and in CPU
of the loop's thread, on a table of 10,000 sessions in a WAL file set up like the server's.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

QUERY = "SELECT id, message_count, pending_tokens FROM sessions WHERE tenant = ? AND sid = ?"


def setup(path: Path) -> tuple[sqlite3.Connection, sqlite3.Connection]:
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("PRAGMA synchronous=NORMAL")
    writer.execute(
        "CREATE TABLE sessions (id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, sid TEXT NOT NULL,"
        " message_count INTEGER NOT NULL, pending_tokens INTEGER NOT NULL, UNIQUE (tenant, sid))"
    )
    writer.execute("BEGIN")
    writer.executemany(
        "INSERT INTO sessions (tenant, sid, message_count, pending_tokens) VALUES (?, ?, ?, ?)",
        (("default", f"s{i}", i, 40 * i) for i in range(10_000)),
    )
    writer.execute("COMMIT")
    reader = sqlite3.connect(
        f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
    )
    return writer, reader


async def measure(reads: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        writer, reader = setup(Path(tmp) / "hop.sqlite3")
        executor = ThreadPoolExecutor(max_workers=1)
        loop = asyncio.get_running_loop()
        params = ("default", "s5000")

        def read(conn: sqlite3.Connection) -> list[tuple[int, int, int]]:
            return conn.execute(QUERY, params).fetchall()

        async def inline() -> None:
            read(writer)

        async def hop() -> None:
            await loop.run_in_executor(executor, read, reader)

        print(f"SQLite indexed read, {reads:,} sequential reads (µs per read)")
        print(f"  {'path':<36}{'wall':>10}{'loop CPU':>12}")
        for label, call in (("inline on the loop", inline), ("through a thread", hop)) * 2:
            wall, cpu = time.perf_counter(), time.thread_time()
            for _ in range(reads):
                await call()
            wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
            print(f"  {label:<36}{wall / reads * 1e6:>10.1f}{cpu / reads * 1e6:>12.1f}")
        executor.shutdown()
        writer.close()
        reader.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=5000)
    asyncio.run(measure(parser.parse_args().reads))


if __name__ == "__main__":
    main()
