"""The five-minute start, measured: a fresh clone of this checkout's HEAD in a temporary
folder, `make run` with no .venv, the seconds to the ready line (and to the end of the
install), and the size of the venv it made. The targets (issue 37): at most 60 s to the ready
line and 300 MB of venv on a fresh machine; a loaded machine shows more seconds, so the CPU
seconds of the install are printed too.

    .venv/bin/python bench/start_bench.py [--keep]

With ``--venv``, no clone and no install: the server of that venv (whatever code it runs:
PYTHONPATH may point elsewhere, to compare two revisions) is started ``--runs`` times, after
one start that compiles its modules, and the seconds to the ready line of each are printed.

    .venv/bin/python bench/start_bench.py --venv .venv [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
READY = "try `.venv/bin/wm demo`"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _size_mb(path: Path) -> float:
    total = sum(p.lstat().st_size for p in path.rglob("*") if not p.is_symlink() and p.is_file())
    return total / 1e6


def _environment(data: Path) -> dict[str, str]:
    """`make run`'s doors (gRPC, HTTP, inspector) on free ports, a fresh data folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WM_", "VIRTUAL_ENV"))}
    env.update(
        WM_ADDRESS=f"127.0.0.1:{_free_port()}",
        WM_HTTP_ADDRESS=f"127.0.0.1:{_free_port()}",
        WM_INSPECTOR_ADDRESS=f"127.0.0.1:{_free_port()}",
        WM_DATA_DIR=str(data),
        WM_LOG_FORMAT="console",
    )
    return env


def _cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a running process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _start_once(venv: Path, folder: Path) -> tuple[float, float]:
    """Seconds from launching the venv's wm-server to its ready line (a new data folder), and
    the CPU seconds it used by then (what a busy machine's other work does not inflate)."""
    data = Path(tempfile.mkdtemp(prefix="data-", dir=folder))
    log = data / "run.log"
    started = time.monotonic()
    with log.open("wb") as out:
        server = subprocess.Popen(
            [str(venv / "bin" / "wm-server")], env=_environment(data), stdout=out, stderr=out
        )
    try:
        while READY not in log.read_text(errors="replace"):
            if server.poll() is not None:
                raise RuntimeError(log.read_text()[-3000:])
            time.sleep(0.01)
        return time.monotonic() - started, _cpu_seconds(server.pid)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


def _starts(venv: Path, runs: int) -> int:
    folder = Path(tempfile.mkdtemp(prefix="wm-start-"))
    try:
        _start_once(venv, folder)  # compiles the modules the server imports
        timed = [_start_once(venv, folder) for _ in range(runs)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for label, values in (
        ("seconds", [w for w, _ in timed]),
        ("CPU seconds", [c for _, c in timed]),
    ):
        ordered = sorted(values)
        print(
            f"{label} to the ready line over {runs} starts: "
            + ", ".join(f"{v:.2f}" for v in ordered)
            + f" (median {ordered[len(ordered) // 2]:.2f})"
        )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary clone")
    parser.add_argument("--venv", type=Path, help="start this venv's server, no install")
    parser.add_argument("--runs", type=int, default=5, help="starts to time with --venv")
    args = parser.parse_args()
    if args.venv is not None:
        return _starts(args.venv.resolve(), args.runs)
    folder = Path(tempfile.mkdtemp(prefix="wm-start-"))
    clone = folder / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    env = _environment(folder / "data")
    log = folder / "run.log"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with log.open("wb") as out:
        make = subprocess.Popen(
            ["make", "run"], cwd=clone, env=env, stdout=out, stderr=out, start_new_session=True
        )
    installed = ready = None
    try:
        while ready is None:
            if make.poll() is not None:
                print(log.read_text()[-3000:], file=sys.stderr)
                return 1
            now = time.monotonic() - started
            if installed is None and (clone / ".venv" / ".runtime-stamp").exists():
                installed = now
            if READY in log.read_text(errors="replace"):
                ready = now
            time.sleep(0.1)
    finally:
        os.killpg(make.pid, signal.SIGTERM)
        make.wait(timeout=30)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    [line] = [x for x in log.read_text().splitlines() if READY in x]
    print(f"ready line: {line.strip()}")
    print(f"seconds to the end of the install: {installed or 0:.1f}")
    print(f"seconds to the ready line: {ready:.1f} (target 60)")
    print(f"CPU seconds of make run (install and start, children): {cpu:.1f}")
    print(f"venv: {_size_mb(clone / '.venv'):.0f} MB (target 300)")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
