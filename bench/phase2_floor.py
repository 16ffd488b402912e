"""What one Phase 2 of ``service_bench.overhead_round`` cannot do without, timed bare: the floor
under the service's Phase 2 overhead on SQLite.

Usage: python bench/phase2_floor.py [--rounds N]

The overhead round (one commit of 20 messages over a 12K-token working memory, the scripted
model's answer making the guards work) is measured by ``phase2_ab.py`` / ``phase2_profile.py``
through the real server. Here the same work runs in this process with nothing around it: no
gRPC, no worker, lease, events, retries or unit of work, each piece called directly:

- the prompt's size reminders for the previous document (``section_reminders``);
- the model's answer read (``parse_tool_arguments``) and merged through every guard
  (``merge``), with the new document's token estimate and abstract;
- the 20 messages embedded (wordllama, as the server's embedded embedder runs it) and their
  full-text terms analyzed (``search.analyzer``);
- the SQL: in the service's own SQLite schema (a file made by ``SqliteDatabase.open``, WAL,
  foreign keys off so that no parent rows are needed), one read of the archive's 20 messages
  and of the working memory, and one ``BEGIN IMMEDIATE`` … ``COMMIT`` that writes the new
  working memory, the 20 full-text rows (FTS5 indexes them by trigger), the 20 vectors and 6
  event rows.

The memory extraction of the round is a model call (the scripted model's): like the model's
update, it is outside the overhead and outside this floor. Each piece's CPU time (this thread)
is printed as a median over ``--rounds``, after warm-up rounds, and their sum: the least a
Phase 2 of the round costs on this machine whatever the service around it does. The
difference from ``phase2_profile.py``'s loop CPU per job is what the service adds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import structlog

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(ROOT))

from bench.service_bench import _bullets, message_text, overhead_update  # noqa: E402
from wm_core import (  # noqa: E402
    DEFAULT_LIMITS,
    SECTIONS,
    abstract_of,
    estimate_tokens,
    merge,
    parse_tool_arguments,
    render_document,
    section_reminders,
)
from wm_server.embedding.embedded import WordLlamaEmbedder  # noqa: E402
from wm_server.search.analyzer import index_text  # noqa: E402
from wm_server.storage.sqlite import SqliteDatabase  # noqa: E402

WARM_UP = 5
MESSAGES = 20
EVENTS = 6  # started, model request and answer, two guard decisions, completed


def _document() -> str:
    bodies = {name: _bullets(name, 48) for name in SECTIONS[1:]}
    bodies[SECTIONS[0]] = "Overhead benchmark session"
    return render_document(bodies)


def _database(folder: Path, texts: list[str]) -> sqlite3.Connection:
    path = folder / "floor.sqlite3"

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

    async def schema() -> None:
        database = SqliteDatabase(path)
        await database.open()
        await database.close()

    asyncio.run(schema())
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=OFF")
    conn.executemany(
        "INSERT INTO messages (sid, position, message_id, role, parts_json, tokens, create_time)"
        " VALUES (1, ?, ?, 'user', ?, 50, 0)",
        [(i, f"m{i}", json.dumps([{"text": t}])) for i, t in enumerate(texts)],
    )
    return conn


class Floor:
    def __init__(self, folder: Path) -> None:
        self.document = _document()
        self.answer = json.dumps(overhead_update())
        self.texts = [message_text(i) for i in range(MESSAGES)]
        self.embedder = WordLlamaEmbedder()
        self.conn = _database(folder, self.texts)
        self.version = 1
        self.merged = self.document
        self.terms: list[str] = []
        self.vectors: list[bytes] = []
        self.conn.execute(
            "INSERT INTO working_memories (sid, version, document, covered_seq, estimated_tokens,"
            " create_time) VALUES (1, 1, ?, 0, 0, 0)",
            (self.document,),
        )

    def prompt(self) -> None:
        section_reminders(self.document)

    def merge(self) -> None:
        merged = merge(self.document, parse_tool_arguments(self.answer).ops, DEFAULT_LIMITS)
        estimate_tokens(merged.document)
        abstract_of(merged.document)
        self.merged = merged.document

    def embed(self) -> None:
        vectors = self.embedder._run(self.texts)
        self.vectors = [v.tobytes() for v in vectors]

    def analyze(self) -> None:
        self.terms = [index_text(t) for t in self.texts]

    def read(self) -> None:
        conn = self.conn
        conn.execute("BEGIN")
        conn.execute(
            "SELECT position, message_id, role, parts_json, tokens FROM messages"
            " WHERE sid = 1 AND position BETWEEN 0 AND ? ORDER BY position",
            (MESSAGES - 1,),
        ).fetchall()
        conn.execute(
            "SELECT document FROM working_memories WHERE sid = 1 ORDER BY version DESC LIMIT 1"
        ).fetchall()
        conn.execute("COMMIT")

    def write(self) -> None:
        conn, self.version = self.conn, self.version + 1
        seq = self.version
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO working_memories (sid, version, document, archive_seq, covered_seq,"
            " commit_id, estimated_tokens, create_time) VALUES (1, ?, ?, ?, ?, ?, 12000, 0)",
            (seq, self.merged, seq, seq, f"c{seq}"),
        )
        conn.executemany(
            "INSERT INTO archived_texts (sid, seq, position, archive_time, terms, body)"
            " VALUES (1, ?, ?, 0, ?, ?)",
            [(seq, seq * 100 + i, 30, t) for i, t in enumerate(self.texts)],
        )
        conn.executemany(
            "INSERT INTO message_vectors (sid, position, seq, model, dims, vector)"
            " VALUES (1, ?, ?, 'wordllama', 256, ?)",
            [(seq * 100 + i, seq, v) for i, v in enumerate(self.vectors)],
        )
        conn.executemany(
            "INSERT INTO commit_events (commit_id, sequence, terminal, payload) VALUES (?, ?, ?, ?)",
            [(f"c{seq}", n, int(n == EVENTS - 1), b"x" * 120) for n in range(EVENTS)],
        )
        conn.execute("COMMIT")


def _cpu_ms(fn: Callable[[], None]) -> float:
    start = time.thread_time()
    fn()
    return (time.thread_time() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="p2floor-") as folder:
        floor = Floor(Path(folder))
        steps: list[tuple[str, Callable[[], None]]] = [
            ("read the archive and the working memory", floor.read),
            ("size reminders for the prompt", floor.prompt),
            ("answer read, merged through the guards", floor.merge),
            ("20 messages embedded (wordllama)", floor.embed),
            ("20 messages' full-text terms", floor.analyze),
            ("one transaction: WM, texts, vectors, events", floor.write),
        ]
        times: dict[str, list[float]] = {name: [] for name, _ in steps}
        totals: list[float] = []
        for round_ in range(WARM_UP + args.rounds):
            spent = [(name, _cpu_ms(fn)) for name, fn in steps]  # in order: one Phase 2
            if round_ >= WARM_UP:
                for name, ms in spent:
                    times[name].append(ms)
                totals.append(sum(ms for _, ms in spent))
        print(f"Phase 2 floor of the overhead round (SQLite, CPU ms, n={args.rounds})")
        print(f"  working memory: {estimate_tokens(floor.document)} tokens, {MESSAGES} messages")
        for name, values in times.items():
            print(f"  {name:<46} median {statistics.median(values):6.2f}  min {min(values):6.2f}")
        print(f"  {'one Phase 2, all of it':<46} median {statistics.median(totals):6.2f}"
              f"  min {min(totals):6.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
