"""Phase 2's CPU per commit, and where it goes: the real server, each job measured inside it.

Usage: python bench/phase2_profile.py [--postgres] [--rounds N] [--profile] [--top N]
       [--save FILE] [CHECKOUT]

A child process runs the service as ``wm-server`` does, with the settings of
``service_bench.overhead_env`` (the scripted model, its answer making the guards work), and
the parent runs ``service_bench.overhead_round`` ``--rounds`` times (one commit of 20
messages over a 12K-token working memory each). Inside the child, each job is measured from
the claim that leased it to the end of its run: the CPU time of the event loop's thread and of
the whole process (the embedder's threads too). CPU time, unlike the wall figure of
``phase2_ab.py``, hardly moves with the load of a shared machine; it includes whatever else
the loop did meanwhile (here: the watching client's event stream). With ``--profile`` each job
also runs under cProfile (loop thread only, CPU clock), and the summed profile's top functions
are printed (cProfile inflates Python code by its own per-call cost: read the functions
against each other). The first two rounds warm up and are dropped.

``CHECKOUT`` (default: this one) is the source tree whose server runs, as in ``phase2_ab.py``:
its ``.venv/bin/python``, or this interpreter with its ``server/`` first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

if TYPE_CHECKING:
    from support.server_process import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
if "--serve" not in sys.argv:  # the parent; the child imports the checkout's server only
    sys.path.insert(0, str(ROOT / "tests"))
    if str(ROOT) not in sys.path:  # run as a script: make ``bench`` importable
        sys.path.insert(0, str(ROOT))

WARM_UP = 2


# --- the child: the server, its jobs measured ----------------------------------------------
class _Delta:
    """A profiler entry's or sub-entry's growth over one job (the fields pstats reads)."""

    def __init__(self, after: Any, before: Any | None) -> None:
        self.code = after.code
        self.callcount = after.callcount - (before.callcount if before else 0)
        self.reccallcount = after.reccallcount - (before.reccallcount if before else 0)
        self.totaltime = after.totaltime - (before.totaltime if before else 0.0)
        self.inlinetime = after.inlinetime - (before.inlinetime if before else 0.0)
        self.calls: list[_Delta] | None = None
        if getattr(after, "calls", None) is not None:
            earlier = {c.code: c for c in (before.calls or ())} if before else {}
            self.calls = [_Delta(c, earlier.get(c.code)) for c in after.calls]


class _Window(cProfile.Profile):
    """The jobs' share of one profiler that runs from the start (enabled inside a coroutine,
    cProfile would not see the frames the event loop resumes): the sum of the growth of its
    entries over each job."""

    def __init__(self) -> None:
        super().__init__(time.thread_time)
        self.summed: dict[Any, _Delta] = {}

    def add(self, before: list[Any], after: list[Any]) -> None:
        earlier = {e.code: e for e in before}
        for entry in after:
            delta = _Delta(entry, earlier.get(entry.code))
            if delta.callcount == 0 and delta.totaltime == 0.0:
                continue
            held = self.summed.get(entry.code)
            if held is None:
                self.summed[entry.code] = delta
                continue
            for name in ("callcount", "reccallcount", "totaltime", "inlinetime"):
                setattr(held, name, getattr(held, name) + getattr(delta, name))
            if delta.calls:
                calls = {c.code: c for c in held.calls or ()}
                for sub in delta.calls:
                    if sub.code in calls:
                        for name in ("callcount", "reccallcount", "totaltime", "inlinetime"):
                            setattr(calls[sub.code], name, getattr(calls[sub.code], name)
                                    + getattr(sub, name))  # fmt: skip
                    else:
                        calls[sub.code] = sub
                held.calls = list(calls.values())

    def getstats(self) -> Any:  # what ``snapshot_stats`` reads: the sum, not the live entries
        return list(self.summed.values())

    def create_stats(self) -> None:
        # not ``disable()`` first: on Python 3.11 that switches off the live profiler too
        self.snapshot_stats()


def serve(out_dir: str, profile: bool) -> None:
    """``wm-server``'s main with ``JobStore.claim`` and ``Phase2Worker._run_with_lease``
    wrapped: a claim that leases a job starts its clocks (and its profile window), the end
    of its run stops them and appends a line to ``jobs.jsonl``."""
    from wm_server.__main__ import main
    from wm_server.phase2 import stages, worker
    from wm_server.phase2.store import JobStore
    from wm_server.phase2.worker import Phase2Worker
    from wm_server.services.commits import CommitService

    claim, run = JobStore.claim, Phase2Worker._run_with_lease
    started: dict[str, tuple[float, float, list[Any]]] = {}
    profiler = cProfile.Profile(time.thread_time) if profile else None
    window = _Window()
    jobs = Path(out_dir) / "jobs.jsonl"
    count = 0

    async def claimed(self: Any, lease_seconds: float) -> Any:
        before = profiler.getstats() if profiler else []
        clocks = time.thread_time(), time.process_time()
        job = await claim(self, lease_seconds)
        if job is not None:
            started[job.commit_id] = (*clocks, before)
        return job

    async def measured(self: Any, job: Any) -> None:
        nonlocal count
        thread, process, before = started.pop(job.commit_id)
        try:
            await run(self, job)
        finally:
            line = {
                "thread_ms": (time.thread_time() - thread) * 1e3,
                "process_ms": (time.process_time() - process) * 1e3,
                "steps": {name: list(v) for name, v in spent.items()},
            }
            spent.clear()
            with jobs.open("a") as out:
                out.write(json.dumps(line) + "\n")
            count += 1
            if profiler is not None and count > WARM_UP:
                window.add(before, profiler.getstats())
                window.dump_stats(os.path.join(out_dir, "jobs.prof"))

    spent: dict[str, list[float]] = {}  # a step's loop-thread CPU and wall (ms), summed

    def step(name: str, run: Any) -> Any:
        async def timed(*args: Any) -> Any:
            cpu, wall = time.thread_time(), time.perf_counter()
            found = None
            try:
                found = await run(*args)
                return found
            finally:
                key = f"{name} (none found)" if name == "claim" and found is None else name
                held = spent.setdefault(key, [0.0, 0.0, 0])
                held[0] += (time.thread_time() - cpu) * 1e3
                held[1] += (time.perf_counter() - wall) * 1e3
                held[2] += 1

        return timed

    worker.STAGES = tuple((name, step(name, run)) for name, run in worker.STAGES)
    stages.complete = step("complete", stages.complete)
    JobStore.record = step("record (progress events)", JobStore.record)  # type: ignore[method-assign]
    claim = step("claim", claim)
    CommitService._events_after = step("watch: events read", CommitService._events_after)  # type: ignore[method-assign]
    JobStore.claim = claimed  # type: ignore[method-assign]
    Phase2Worker._run_with_lease = measured  # type: ignore[method-assign]
    if profiler is not None:
        profiler.enable()
    sys.exit(main([]))


# --- the parent ---------------------------------------------------------------------------
def prepare(checkout: Path, database: str | None, profile: bool) -> tuple[Path, ServerProcess]:
    """A folder for the run and the server to start in it (not started yet): ``checkout``'s
    interpreter running this module's ``--serve``, the settings of ``overhead_env``."""
    from bench.phase2_ab import interpreter, measuring
    from bench.service_bench import overhead_env
    from support.server_process import ServerProcess

    folder = Path(tempfile.mkdtemp(prefix="p2prof-"))
    env = overhead_env(folder)
    if database:
        env["WM_DATABASE_URL"] = database
    python, env = interpreter(checkout, env)
    server = ServerProcess(
        folder / "data", python=str(measuring(python, folder, profile=profile)),
        WM_LOG_LEVEL="warning", WM_TENANT_MUTATION_BURST="1000000", **env,
    )  # fmt: skip
    return folder, server


async def drive(folder: Path, server: ServerProcess, rounds: int) -> list[float]:
    """``rounds`` overhead rounds after the warm-up: their Phase 2 walls (ms)."""
    from bench.service_bench import Stub, overhead_round

    walls: list[float] = []
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = Stub(channel)
            for r in range(rounds + WARM_UP):
                ms, _ = await overhead_round(stub, f"prof-{r}")
                walls.append(ms)
    finally:
        server.terminate()
    return walls[WARM_UP:]


def report(folder: Path, top: int, save: Path | None) -> None:
    lines = (folder / "jobs.jsonl").read_text().splitlines()[WARM_UP:]
    jobs = [json.loads(line) for line in lines]
    walls = json.loads((folder / "walls.json").read_text())
    n = len(jobs)

    def show(name: str, values: list[float]) -> None:
        ordered = sorted(values)
        print(
            f"  {name:<34} median {statistics.median(ordered):6.2f}"
            f"  p25 {ordered[len(ordered) // 4]:6.2f}  min {ordered[0]:6.2f}  n={len(ordered)}"
        )

    show("wall, Phase2Started→Completed", walls)
    show("loop thread CPU per job", [j["thread_ms"] for j in jobs])
    show("process CPU per job", [j["process_ms"] for j in jobs])
    print("  steps since the last job ended (loop-thread CPU, wall: median ms; calls: mean):")
    names = dict.fromkeys(name for j in jobs for name in j["steps"])
    for name in names:
        held = [j["steps"].get(name, [0.0, 0.0, 0]) for j in jobs]
        cpu = statistics.median(h[0] for h in held)
        wall = statistics.median(h[1] for h in held)
        calls = statistics.mean(h[2] for h in held)
        print(f"    {name:<34} {cpu:6.2f}  {wall:6.2f}  {calls:5.1f}")
    if (folder / "jobs.prof").exists():
        stats = pstats.Stats(str(folder / "jobs.prof"), stream=sys.stdout)
        if save is not None:
            stats.dump_stats(str(save))
        total = stats.total_tt / n  # type: ignore[attr-defined]
        print(f"\n--- profiled (cProfile on): {total * 1e3:.2f} ms per job; top {top}, summed ---")
        stats.sort_stats("tottime").print_stats(top)
        stats.sort_stats("cumulative").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", nargs="?", type=Path, default=ROOT, help="source tree")
    parser.add_argument("--rounds", type=int, default=20, help="measured rounds")
    parser.add_argument("--postgres", action="store_true", help="a private PostgreSQL cluster")
    parser.add_argument("--profile", action="store_true", help="cProfile each job")
    parser.add_argument("--top", type=int, default=40, help="functions printed")
    parser.add_argument("--save", type=Path, help="write the summed profile here")
    parser.add_argument("--serve", metavar="OUT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.profile)
        return
    print(f"load average before: {os.getloadavg()}")
    with contextlib.ExitStack() as stack:
        database = None
        if args.postgres:
            from support.postgres import private_postgres_server

            database = stack.enter_context(private_postgres_server()).create_database()
        folder, server = prepare(args.checkout.resolve(), database, args.profile)
        server.start()
        walls = asyncio.run(drive(folder, server, args.rounds))
        (folder / "walls.json").write_text(json.dumps(walls))
    engine = "PostgreSQL" if args.postgres else "SQLite"
    print(f"Phase 2 per commit ({engine}, ms), server of {args.checkout.resolve()}")
    report(folder, args.top, args.save)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
