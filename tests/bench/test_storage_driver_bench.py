"""The driver bench behind storage's choice of raw drivers over SQLAlchemy still runs against
today's schema (it reflects the engine's own migrations and writes the AddMessages rows,
``requests`` included): a migration that renames a table it writes must fail here, not in a
benchmark run (it stopped at import, then at a table a migration had renamed, unnoticed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


BENCH = ROOT / "bench" / "storage_driver_bench.py"


def test_the_sqlite_variants_run_every_operation() -> None:
    command = [sys.executable, str(BENCH), "--rounds", "1", "--scale", "0.02"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    # The result rows: "a sqlite3 inline  AddMessages ×1  tx/s msg/s p50 p99 cpu" and
    # "a sqlite3 inline  GetSession  tx/s p50 p99 cpu".
    found: dict[str, set[str]] = {}
    for line in done.stdout.splitlines():
        words = line.split()
        if not words or words[0] not in ("a", "b", "c") or words[1] == "vs":
            continue  # not a result row (the "b vs a" rows are differences)
        if "AddMessages" in words:
            at = words.index("AddMessages")
            operation, rate = "AddMessages " + words[at + 1], words[at + 2]
        elif "GetSession" in words:
            at = words.index("GetSession")
            operation, rate = "GetSession", words[at + 1]
        else:
            continue
        assert float(rate.replace(",", "")) > 0, line  # it ran: a positive rate
        found.setdefault(words[0], set()).add(operation)
    every = {"AddMessages ×1", "AddMessages ×100", "GetSession"}
    assert found == {v: every for v in ("a", "b", "c")}, done.stdout
