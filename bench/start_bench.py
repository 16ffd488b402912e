"""The five-minute start, measured: a fresh clone of this checkout's HEAD in a temporary
folder, `make run` with no .venv, the seconds to the ready line (and to the end of the
install), and the size of the venv it made. The targets (issue 37): at most 60 s to the ready
line and 300 MB of venv on a fresh machine; a loaded machine shows more seconds, so the CPU
seconds of the install are printed too.

    .venv/bin/python bench/start_bench.py [--keep]
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary clone")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="wm-start-"))
    clone = folder / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WM_", "VIRTUAL_ENV"))}
    env.update(
        WM_ADDRESS=f"127.0.0.1:{_free_port()}",
        WM_HTTP_ADDRESS=f"127.0.0.1:{_free_port()}",
        WM_INSPECTOR_ADDRESS=f"127.0.0.1:{_free_port()}",
        WM_DATA_DIR=str(folder / "data"),
        WM_LOG_FORMAT="console",
    )
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
