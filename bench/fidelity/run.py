"""Run the memory-fidelity benchmark: every behavior under every strategy, then the report.

Usage (from the repository root)::

    .venv/bin/python -m bench.fidelity.run [--commits N] [--behaviors a,b] [--no-write]

Prints the results table and writes ``results.md``, ``retention.png`` and ``wm_tokens.png``
to ``bench/fidelity/results/``; ``--traces FILE`` also dumps every working memory of every
commit as JSON, for digging into a result. Figures are printed, never asserted: the targets
are listed next to them in ``results.md``.
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

from bench.fidelity import report  # noqa: E402
from bench.fidelity.behaviors import BEHAVIORS, behavior_named  # noqa: E402
from bench.fidelity.scenario import SCENARIO  # noqa: E402
from bench.fidelity.strategies import dump, run_all  # noqa: E402
from wm_server.telemetry.observability import configure_logging  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
COMMAND = ".venv/bin/python -m bench.fidelity.run"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=len(SCENARIO.turns), help="turns to play")
    parser.add_argument(
        "--behaviors",
        default=",".join(cls.key for cls in BEHAVIORS),
        help="comma-separated behavior keys (default: all)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--traces", type=Path, help="also write the raw traces (JSON) here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging("error")  # the server's JSON logs would drown the table
    scenario = SCENARIO.upto(args.commits)
    behaviors = [behavior_named(key.strip()) for key in args.behaviors.split(",") if key.strip()]
    started = time.perf_counter()
    traces = asyncio.run(run_all(behaviors, scenario))
    elapsed = time.perf_counter() - started
    print(report.console_summary(traces))
    print(f"\n{len(traces)} runs in {elapsed:.1f} s")
    if not args.no_write:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.md").write_text(
            report.markdown(traces, scenario, COMMAND), encoding="utf-8"
        )
        report.plot(traces, args.out)
        print(f"wrote {args.out}/results.md, retention.png, wm_tokens.png")
    if args.traces:
        dump(traces, args.traces)
        print(f"wrote {args.traces}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
