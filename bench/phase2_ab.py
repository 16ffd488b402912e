"""A/B of the Phase 2 overhead between two checkouts: the figure to trust on a busy machine.

Usage: python bench/phase2_ab.py [--postgres] [--rounds N] CHECKOUT_A CHECKOUT_B

``service_bench.py --only phase2`` measures one server after another, so a change in the
machine's load between the runs (other jobs on 2 shared cores) moves its median by more
than a change of the code does (10-20 ms runs of one commit were seen). Here both servers
run side by side, one per checkout, each on its own SQLite folder (or its own database of
one private PostgreSQL cluster), and the rounds alternate between them (A B, B A, A B, …),
so whatever the machine does falls on both alike. ``--cpu`` also prints each side's CPU
time of the event loop's thread per job, measured inside the server (``phase2_profile.py``). Each round is
``service_bench.overhead_round``: one commit of 20 messages over a 12K-token working memory,
Phase2Started to Completed less the model calls. The first two rounds of each warm up and
are dropped; the script prints each side's median, quartiles and minimum, and the load
average before and after.

A checkout is a source tree: its ``.venv/bin/python`` runs its server when it has one;
otherwise this interpreter does, with the checkout's ``server/`` and root (``wm_core``)
first on ``PYTHONPATH`` (so ``git worktree add /tmp/base main`` with no venv of its own is
enough). ``PYTHONSAFEPATH`` keeps the working folder off the server's path: run from a
checkout, ``python -m`` would otherwise import that checkout's ``wm_core`` for both sides.
The client, the workload and the PostgreSQL cluster are this checkout's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
if str(ROOT) not in sys.path:  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(ROOT))

from bench.service_bench import Stub, overhead_env, overhead_round  # noqa: E402
from support.server_process import ServerProcess  # noqa: E402

WARM_UP = 2


def interpreter(checkout: Path, env: dict[str, str]) -> tuple[Path, dict[str, str]]:
    """The interpreter that runs ``checkout``'s server, and ``env`` with what it needs (see
    the module docstring)."""
    python = checkout / ".venv" / "bin" / "python"
    env = {**env, "PYTHONSAFEPATH": "1"}
    if not python.exists():
        python = Path(sys.executable)
        paths = [str(checkout / "server"), str(checkout), os.environ.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return python, env


def measuring(python: Path, folder: Path, *, profile: bool = False) -> Path:
    """A stand-in for ``python`` that runs the server under ``phase2_profile.py --serve``:
    each job's CPU time goes to ``folder/jobs.jsonl`` (and with ``profile``, its cProfile to
    ``folder/jobs.prof``)."""
    folder.mkdir(parents=True, exist_ok=True)
    wrapper = folder / "python"
    script = Path(__file__).resolve().parent / "phase2_profile.py"
    flag = " --profile" if profile else ""
    wrapper.write_text(f"#!/bin/sh\nexec {python} {script} --serve {folder}{flag}\n")
    wrapper.chmod(0o755)
    return wrapper


def server(checkout: Path, folder: Path, env: dict[str, str], cpu: bool = False) -> ServerProcess:
    """A server of ``checkout``; with ``cpu``, its jobs' CPU time measured (``measuring``)."""
    python, env = interpreter(checkout, env)
    if cpu:
        python = measuring(python, folder)
    return ServerProcess(
        folder, python=str(python), WM_LOG_LEVEL="warning",
        WM_TENANT_MUTATION_BURST="1000000", **env,
    ).start()  # fmt: skip


def job_cpu(folder: Path) -> list[float]:
    """The loop-thread CPU (ms) of each job a measured server ran, warm-up dropped."""
    lines = (folder / "jobs.jsonl").read_text().splitlines()
    return [float(json.loads(line)["thread_ms"]) for line in lines][WARM_UP:]


async def alternate(
    checkouts: list[Path], rounds: int, databases: list[str] | None, cpu: bool = False
) -> tuple[list[list[float]], list[list[float]]]:
    """Each checkout's overhead samples (ms), rounds alternated, warm-up dropped; with
    ``cpu``, also each one's loop-thread CPU per job (ms)."""
    samples: list[list[float]] = [[], []]
    used: list[list[float]] = [[], []]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        env = overhead_env(folder)
        servers: list[ServerProcess] = []
        try:
            for i, checkout in enumerate(checkouts):
                extra = {"WM_DATABASE_URL": databases[i]} if databases else {}
                servers.append(server(checkout, folder / f"s{i}", {**env, **extra}, cpu))
            async with contextlib.AsyncExitStack() as stack:
                stubs = []
                for s in servers:
                    channel = await stack.enter_async_context(grpc.aio.insecure_channel(s.address))
                    stubs.append(Stub(channel))
                for r in range(rounds):
                    for i in (0, 1) if r % 2 == 0 else (1, 0):
                        ms, _ = await overhead_round(stubs[i], f"ab-{r}")
                        samples[i].append(ms)
        finally:
            for s in servers:
                s.terminate()
        if cpu:
            used = [job_cpu(folder / f"s{i}") for i in (0, 1)]
    return [s[WARM_UP:] for s in samples], used


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    n = len(ordered)
    return (
        f"median {statistics.median(ordered):6.2f}  p25 {ordered[n // 4]:6.2f}"
        f"  p75 {ordered[3 * n // 4]:6.2f}  min {ordered[0]:6.2f}  n={n}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Phase 2 overhead, two checkouts alternated")
    parser.add_argument("checkouts", nargs=2, type=Path, help="source trees A and B")
    parser.add_argument("--rounds", type=int, default=24, help="rounds per checkout")
    parser.add_argument(
        "--postgres", action="store_true", help="a private PostgreSQL cluster, one database each"
    )
    parser.add_argument(
        "--cpu", action="store_true", help="also each job's loop-thread CPU time, in the server"
    )
    args = parser.parse_args()
    checkouts = [p.resolve() for p in args.checkouts]
    print(f"load average before: {os.getloadavg()}")
    with contextlib.ExitStack() as stack:
        databases = None
        if args.postgres:
            from support.postgres import private_postgres_server

            cluster = stack.enter_context(private_postgres_server())
            databases = [cluster.create_database(), cluster.create_database()]
        found, used = asyncio.run(alternate(checkouts, args.rounds + WARM_UP, databases, args.cpu))
    engine = "PostgreSQL" if args.postgres else "SQLite"
    print(f"Phase 2 overhead outside the model call ({engine}, ms, rounds alternated)")
    for name, checkout, values in zip("AB", checkouts, found, strict=True):
        print(f"  {name} {summary(values)}  {checkout}")
    a, b = (statistics.median(v) for v in found)
    print(f"  B - A: {b - a:+.2f} ms ({(b - a) / a:+.0%})")
    if args.cpu:
        print("Loop-thread CPU per job, in the server (claim to end of run, ms)")
        for name, checkout, values in zip("AB", checkouts, used, strict=True):
            print(f"  {name} {summary(values)}  {checkout}")
        a, b = (statistics.median(v) for v in used)
        print(f"  B - A: {b - a:+.2f} ms ({(b - a) / a:+.0%})")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
