"""Recall benchmark (issue 34, point 5): how often each search method finds a question's
evidence turns, per question kind and split, and how long a ranked query takes at scale.

Usage (from the repository root)::

    .venv/bin/python bench/recall_bench.py [--split dev|heldout|both] [--methods a,b]
        [--scale 5000,100000] [--queries 200] [--postgres | --database-url postgresql://...]
        [--no-write]

Recall: each split (``bench/recall/dataset.py``: ``dev`` to tune on, ``heldout`` never tuned
on) is ingested into a real server (in-process, loopback, a real SQLite file or the PostgreSQL
named) through the Python client, as ``bench/retrieval/harness.py`` does (AddMessages, Commit);
then every method of ``bench/recall/methods.METHODS`` answers every question over all sessions
of the question's user. R@k is the share of a question's evidence turns among the method's
first k distinct messages, averaged over questions.

Latency: one user's sessions filled with ``N`` archived messages through the same client,
then ranked SearchArchives over all of that user's sessions with natural questions (both
splits' question texts); p50/p95 of the round trip on loopback (gRPC included).
``--postgres`` gives each phase a fresh database of a private cluster; ``--database-url``
names one empty database, so run one phase with it (``--split dev --scale ""``). Figures are
printed and written to ``bench/recall-results.md`` (``recall-results-postgresql.md``), never
asserted; ``tests/bench/test_recall_bench.py`` checks the scoring on a tiny set.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.recall import dataset as splits  # noqa: E402
from bench.recall.methods import METHODS, Context, Method  # noqa: E402
from bench.recall.personal import KINDS  # noqa: E402
from bench.retrieval.generator import Dataset, Message, Session  # noqa: E402
from bench.retrieval.harness import ingest, rank_of, recall_at, settings  # noqa: E402
from wm_client import WmClient  # noqa: E402
from wm_server.app import start_application  # noqa: E402
from wm_server.telemetry.observability import configure_logging  # noqa: E402

KS = (5, 10, 25)


@dataclass(slots=True)
class Score:
    """One method over one split: R@k per question, and the question's kind."""

    method: str
    recalls: dict[int, list[float]] = field(default_factory=dict)
    by_kind: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    missed: int = 0

    def add(self, kind: str, ranked: Sequence[str], evidence: Sequence[str]) -> None:
        for k in KS:
            value = recall_at(ranked, evidence, k)
            self.recalls.setdefault(k, []).append(value)
            self.by_kind.setdefault(kind, {}).setdefault(k, []).append(value)
        self.missed += rank_of(ranked, evidence) is None

    def recall(self, k: int, kind: str | None = None) -> float:
        values = self.recalls.get(k, []) if kind is None else self.by_kind.get(kind, {}).get(k, [])
        return sum(values) / len(values) if values else 0.0


async def score(context: Context, methods: Sequence[Method]) -> list[Score]:
    scores = []
    for method in methods:
        result = Score(method.key)
        for question in context.dataset.questions:
            ranked = await method.search(context, question)
            result.add(question.kind, ranked, question.evidence)
        scores.append(result)
    return scores


async def recall(data: Dataset, methods: Sequence[Method], url: str | None) -> list[Score]:
    with tempfile.TemporaryDirectory(prefix="wm-recall-") as tmp:
        app = await start_application(settings(Path(tmp), url))
        try:
            async with WmClient(app.address) as client:
                await ingest(client, data)
                return await score(Context(client, data), methods)
        finally:
            await app.stop(grace=0.5)


def filler(count: int, seed: int, per_session: int = 2000, batch: int = 500) -> Dataset:
    """``count`` messages of one user: everyday and coding chat, with rarer words mixed in."""
    from bench.recall import personal

    rng = random.Random(seed)
    rare = ["".join(rng.choice("abcdefghijklmnoprstuvw") for _ in range(7)) for _ in range(5000)]
    sentences = [*personal._ASKS, *personal._ANSWERS]
    sessions = []
    for s in range(-(-count // per_session)):
        sid = f"scale-s{s}"
        n = min(per_session, count - s * per_session)
        messages = [
            Message(
                f"{sid}-m{i}",
                "user" if i % 2 == 0 else "assistant",
                rng.choice(sentences).format(food="rice", city="Porto", n=i % 50)
                + " "
                + " ".join(rng.choice(rare) for _ in range(rng.randint(1, 6))),
            )
            for i in range(n)
        ]
        session = Session(sid, "scale-user")
        session.batches = [messages[i : i + batch] for i in range(0, n, batch)]
        sessions.append(session)
    return Dataset(seed, sessions, [])


async def latency(
    counts: Sequence[int], queries: list[str], database: Callable[[], str | None]
) -> dict[int, list[float]]:
    """Ranked SearchArchives round trips (ms) with ``count`` archived messages of one user."""
    out: dict[int, list[float]] = {}
    for count in counts:
        with tempfile.TemporaryDirectory(prefix="wm-recall-scale-") as tmp:
            app = await start_application(settings(Path(tmp), database()))
            try:
                async with WmClient(app.address) as client:
                    started = time.perf_counter()
                    await ingest(client, filler(count, count))
                    print(f"  {count:,} rows ingested in {time.perf_counter() - started:.0f} s")
                    for query in queries[:5]:  # warm up
                        await client.search_archives(
                            query,
                            all_sessions=True,
                            user_id="scale-user",
                            page_size=25,
                            ranked=True,
                        )
                    samples = []
                    for query in queries:
                        t0 = time.perf_counter()
                        await client.search_archives(
                            query,
                            all_sessions=True,
                            user_id="scale-user",
                            page_size=25,
                            ranked=True,
                        )
                        samples.append((time.perf_counter() - t0) * 1000)
                    out[count] = samples
            finally:
                await app.stop(grace=0.5)
    return out


def pct(value: float) -> str:
    return f"{value * 100:.1f}"


def table(split: str, scores: list[Score], questions: int) -> list[str]:
    head = ["method", *(f"R@{k}" for k in KS), *(f"{kind} R@10" for kind in KINDS), "missed"]
    lines = [f"### {split} ({questions} questions)", "", "| " + " | ".join(head) + " |"]
    lines.append("|" + "---|" * len(head))
    for s in scores:
        cells = [s.method, *(pct(s.recall(k)) for k in KS)]
        cells += [pct(s.recall(10, kind)) for kind in KINDS]
        lines.append("| " + " | ".join([*cells, f"{s.missed}/{questions}"]) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=["dev", "heldout", "both"], default="both")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated keys")
    parser.add_argument("--scale", default="5000,100000", help="row counts; empty: skip")
    parser.add_argument("--queries", type=int, default=200)
    engine_group = parser.add_mutually_exclusive_group()
    engine_group.add_argument("--database-url", help="a PostgreSQL URL (default: SQLite)")
    engine_group.add_argument(
        "--postgres", action="store_true", help="start a private PostgreSQL cluster and use it"
    )
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    if args.postgres:
        sys.path.insert(0, str(ROOT / "tests"))
        from support.postgres import private_postgres_server

        with private_postgres_server() as cluster:
            args.database_url = "postgresql"  # each phase gets a fresh database of the cluster
            return run(args, argv, lambda: cluster.create_database("recall"))
    return run(args, argv, lambda: args.database_url)


def run(
    args: argparse.Namespace, argv: list[str] | None, database: Callable[[], str | None]
) -> int:
    """The phases, each on a database ``database()`` names (None: a SQLite file)."""
    configure_logging("error")
    methods = [METHODS[key] for key in args.methods.split(",") if key]
    engine = "postgresql" if args.database_url else "sqlite"
    lines = [
        f"# Recall benchmark ({engine})",
        "",
        f"Command: `{' '.join(['bench/recall_bench.py', *(argv or sys.argv[1:])])}`",
        "",
    ]
    texts: list[str] = []
    for split in ("dev", "heldout") if args.split == "both" else (args.split,):
        data = splits.split(split)
        texts += [q.text for q in data.questions]
        started = time.perf_counter()
        scores = asyncio.run(recall(data, methods, database()))
        lines += [*table(split, scores, len(data.questions)), ""]
        lines.append(
            f"({sum(len(s.messages) for s in data.sessions)} messages, {time.perf_counter() - started:.0f} s)"
        )
        lines.append("")
        print("\n".join(lines[-len(scores) - 7 :]), flush=True)
    counts = [int(c) for c in args.scale.split(",") if c]
    if counts:
        rng = random.Random(1)
        queries = [
            rng.choice(texts or [q.text for q in splits.split("dev").questions])
            for _ in range(args.queries)
        ]
        timings = asyncio.run(latency(counts, queries, database))
        lines += ["### Ranked SearchArchives latency (one user, all sessions, gRPC round trip)", ""]
        lines += ["| rows | p50 ms | p95 ms | queries |", "|---|---|---|---|"]
        for count, samples in timings.items():
            p50 = statistics.median(samples)
            p95 = statistics.quantiles(samples, n=20)[-1]
            lines.append(f"| {count:,} | {p50:.1f} | {p95:.1f} | {len(samples)} |")
        lines.append("")
        print("\n".join(lines[-len(timings) - 4 :]))
    if not args.no_write:
        name = "recall-results.md" if engine == "sqlite" else f"recall-results-{engine}.md"
        (ROOT / "bench" / name).write_text("\n".join(lines), encoding="utf-8")
        print(f"wrote bench/{name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
