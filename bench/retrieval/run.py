"""Run the retrieval evaluation: generate, ingest into a real server, measure recall@k.

Usage (from the repository root)::

    .venv/bin/python -m bench.retrieval.run [--seed N] [--users N] [--sessions N]
        [--facts N] [--postgres | --database-url postgresql://...] [--no-write]

Prints the table and writes ``bench/retrieval/results.md`` (or ``results-postgresql.md``
with ``--postgres``, which starts a cluster of its own, or ``--database-url``). Figures are counts of found evidence, not timings: they do not
depend on the machine. Nothing is asserted here; ``tests/bench/test_retrieval.py`` checks
that recall is computed right on a tiny set.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(ROOT))

from bench.retrieval import report  # noqa: E402
from bench.retrieval.generator import generate  # noqa: E402
from bench.retrieval.harness import run  # noqa: E402
from wm_server.telemetry.observability import configure_logging  # noqa: E402

HERE = Path(__file__).resolve().parent
COMMAND = ".venv/bin/python -m bench.retrieval.run"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--users", type=int, default=6)
    parser.add_argument("--sessions", type=int, default=4, help="sessions per user")
    parser.add_argument("--facts", type=int, default=8, help="planted facts per session")
    engine = parser.add_mutually_exclusive_group()
    engine.add_argument("--database-url", help="a PostgreSQL URL (default: a SQLite file)")
    engine.add_argument(
        "--postgres",
        action="store_true",
        help="start a private PostgreSQL cluster (tests/support/postgres.py) and use it",
    )
    parser.add_argument("--no-write", action="store_true", help="print only")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging("error")
    dataset = generate(
        args.seed, users=args.users, sessions_per_user=args.sessions, facts_per_session=args.facts
    )
    started = time.perf_counter()
    if args.postgres:
        sys.path.insert(0, str(ROOT / "tests"))
        from support.postgres import private_postgres_server

        with private_postgres_server() as cluster:
            url = cluster.create_database("retrieval")
            result = asyncio.run(run(dataset, database_url=url))
    else:
        result = asyncio.run(run(dataset, database_url=args.database_url))
    print(report.table(result))
    print(
        f"\n{len(dataset.questions)} questions, {result.commits} commits, "
        f"{time.perf_counter() - started:.1f} s"
    )
    if not args.no_write:
        name = "results.md" if result.engine == "sqlite" else f"results-{result.engine}.md"
        (HERE / name).write_text(report.markdown(dataset, result, COMMAND), encoding="utf-8")
        print(f"wrote {HERE / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
