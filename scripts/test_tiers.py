"""Run make targets side by side (the test tiers), each one's output shown whole, and fail
when any of them fails.

Why not ``make -j``: its outputs interleave line by line (or, with ``--output-sync``, appear
only at the end with nothing in between), and nothing adds up what ran. Here each target runs
as ``make --no-print-directory TARGET`` in a process group of its own, writing to its own log
(``var/test-logs/TARGET.log``, kept for a look afterwards); a target's output is printed in one
block, framed by its name, as soon as it ends; a line every minute says what still runs; and
the run ends with a table of the targets (result, seconds) and one line adding up the tests
that pytest and node reported. Ctrl-C or SIGTERM stops every target, and prints what each had
written.

Usage: python scripts/test_tiers.py [-C DIR] TARGET [TARGET ...]   (DIR: the Makefile's folder)
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
HEARTBEAT_SECONDS = 60.0

# pytest's closing line ("== 3 failed, 1200 passed, 2 skipped in 61.2s ==") and node's test
# runner's counters ("# pass 70" in TAP, "ℹ pass 70" in the spec reporter).
_PYTEST_CLOSING = re.compile(r"^=+ (?P<counts>(?:\d+ \w+(?:, )?)+)(?: in [\d.]+s.*)? =+$")
_PYTEST_COUNT = re.compile(r"(\d+) (\w+)")
_NODE_COUNT = re.compile(r"^(?:# |\u2139 )(pass|fail|skipped|cancelled) (\d+)$")
_OUTCOMES = {
    "passed": "passed",
    "pass": "passed",
    "failed": "failed",
    "fail": "failed",
    "error": "failed",
    "errors": "failed",
    "cancelled": "failed",
    "xpassed": "failed",  # strict xfail is off: an unexpected pass still means a stale mark
    "skipped": "skipped",
    "xfailed": "skipped",
}


@dataclass
class Target:
    name: str
    root: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    returncode: int | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                ["make", "--no-print-directory", self.name],
                cwd=self.root,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stopped as a whole
            )
        self.started = time.monotonic()

    def poll(self) -> bool:
        """True once it has ended (and its result is recorded)."""
        assert self.process is not None
        if self.returncode is not None:
            return True
        # wait4, not Popen.poll: it also tells the CPU time the target and every process it
        # waited for used, which, added up over the targets, bounds the wall time from below.
        try:
            pid, status, usage = os.wait4(self.process.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere (Popen.wait in stop)
            pid, status, usage = self.process.pid, 0, None
            self.process.wait()
            self.returncode = self.process.returncode
        if pid == 0:
            return False
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(status)
            self.process.returncode = self.returncode
        self.seconds = time.monotonic() - self.started
        self.cpu_seconds = usage.ru_utime + usage.ru_stime if usage is not None else 0.0
        self.counts = count_tests(self.output())
        return True

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            # SIGINT first: pytest stops as on Ctrl-C and still prints its summary (which
            # tests failed so far); then SIGTERM, then SIGKILL for what is left.
            for sig, wait in ((signal.SIGINT, 20.0), (signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(self.process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.process.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self.poll()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    @property
    def result(self) -> str:
        if self.returncode is None:
            return "running"
        return "passed" if self.returncode == 0 else f"FAILED (exit {self.returncode})"


def count_tests(output: str) -> dict[str, int]:
    """Tests passed, failed and skipped, from pytest's closing lines and node's counters."""
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for line in output.splitlines():
        line = line.strip()
        closing = _PYTEST_CLOSING.match(line)
        if closing:
            for number, word in _PYTEST_COUNT.findall(closing.group("counts")):
                if word in _OUTCOMES:
                    counts[_OUTCOMES[word]] += int(number)
            continue
        node = _NODE_COUNT.match(line)
        if node:
            counts[_OUTCOMES[node.group(1)]] += int(node.group(2))
    return counts


def _frame(target: Target) -> None:
    rule = "=" * 30
    print(f"\n{rule} {target.name}: {target.result} in {target.seconds:.0f} s {rule}", flush=True)
    sys.stdout.write(target.output())
    print(f"{rule} end of {target.name} (log: {target.log}) {rule}", flush=True)


def run(root: Path, names: list[str]) -> int:
    logs = root / "var" / "test-logs"
    targets = [Target(name, root, logs / f"{name}.log") for name in names]
    began = time.monotonic()

    def interrupted(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    print(f"running side by side: {', '.join(names)} (logs in {logs}/)", flush=True)
    pending = list(targets)
    try:
        for target in targets:
            target.start()
        beat = time.monotonic()
        while pending:
            time.sleep(0.5)
            for target in [t for t in pending if t.poll()]:
                pending.remove(target)
                _frame(target)
            if pending and time.monotonic() - beat >= HEARTBEAT_SECONDS:
                beat = time.monotonic()
                still = ", ".join(f"{t.name} ({beat - t.started:.0f} s)" for t in pending)
                print(f"... still running: {still}", flush=True)
    except KeyboardInterrupt:
        for target in pending:
            target.stop()
            _frame(target)
        print("\ninterrupted: every target was stopped", flush=True)
        return 130

    print(f"\nside by side in {time.monotonic() - began:.0f} s:")
    width = max(len(t.name) for t in targets)
    for target in targets:
        tests = ", ".join(f"{n} {k}" for k, n in target.counts.items() if n) or "-"
        print(
            f"  {target.name:<{width}} {target.result:<20} {target.seconds:6.0f} s"
            f" {target.cpu_seconds:7.0f} CPU s   {tests}"
        )
    cpu = sum(t.cpu_seconds for t in targets)
    cores = os.cpu_count() or 1
    print(
        f"  CPU time {cpu:.0f} s over {cores} cores: no less than {cpu / cores:.0f} s of wall time"
    )
    failed = [t.name for t in targets if t.returncode != 0]
    if failed:
        print(f"failed targets: {', '.join(failed)}")
    # The closing line: every test of every target, added up.
    total = {k: sum(t.counts[k] for t in targets) for k in ("passed", "failed", "skipped")}
    print(f"total: {total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")
    return 1 if failed else 0


def main() -> int:
    args = sys.argv[1:]
    root = ROOT
    if args[:1] == ["-C"] and len(args) > 1:
        root, args = Path(args[1]).resolve(), args[2:]
    if not args or any(name.startswith("-") for name in args):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    return run(root, args)


if __name__ == "__main__":
    sys.exit(main())
